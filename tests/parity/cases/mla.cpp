// Parity cases for mla_qkv_fwd / mla_qkv_bwd: DeepSeek-V3's head dims (dn 128, dr 64, dv 128) with YaRN and
// interleaved pairs, the value padded to the query-key head dim, plain RoPE with rotate-half pairs, fp32, widths
// off the 16-byte vector path, and one decoding step at a later position.
#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

struct MlaSpec {
  int64_t B, T, H, dn, dr, dv, Dv;
  bool yarn, interleaved;
  int64_t first;
  DType dt;
};

Rotary rotary_of(const MlaSpec& s) {
  Rotary r;
  r.base = 10000.0;
  r.interleaved = s.interleaved;
  r.first_position = s.first;
  if (s.yarn) r.factor = 40.0, r.low = 10.0, r.high = 23.0, r.scale = 1.2;  // DeepSeek-V3's ramp over 32 pairs
  return r;
}

std::string shape_of(const MlaSpec& s) {
  return dims({s.B, s.T, s.H}) + " dn=" + dims({s.dn}) + " dr=" + dims({s.dr}) + " dv=" + dims({s.dv}) +
         " Dv=" + dims({s.Dv}) + (s.yarn ? " yarn" : "") + (s.interleaved ? " il" : "") +
         (s.first > 0 ? " from " + std::to_string(s.first) : "");
}

void add(const MlaSpec& s) {
  const int64_t D = s.dn + s.dr;
  const Shape heads{s.B, s.T, s.H, D}, values{s.B, s.T, s.H, s.Dv}, q_shape{s.B, s.T, s.H * D},
      kv_shape{s.B, s.T, s.H * (s.dn + s.dv)}, pe_shape{s.B, s.T, s.dr};
  register_case(make_case("mla_qkv_fwd", shape_of(s), s.dt, [=](uint64_t seed) {
    const Rotary rot = rotary_of(s);
    Tensor q = rand(q_shape, s.dt, seed), kv = rand(kv_shape, s.dt, seed + 1), pe = rand(pe_shape, s.dt, seed + 2);
    Tensor Qg = dev_empty(heads, s.dt), Kg = dev_empty(heads, s.dt), Vg = dev_empty(values, s.dt);
    Tensor Qc = cpu_empty(heads), Kc = cpu_empty(heads), Vc = cpu_empty(values);
    ops::mla_qkv_fwd(gpu(), Qg, Kg, Vg, dev(q), dev(kv), dev(pe), rot);
    ops::mla_qkv_fwd(cpu(), Qc, Kc, Vc, ref(q), ref(kv), ref(pe), rot);
    return std::vector<Output>{{"Q", Qg, Qc}, {"K", Kg, Kc}, {"V", Vg, Vc}};
  }));
  if (s.first > 0) return;  // the backward starts at position 0
  register_case(make_case("mla_qkv_bwd", shape_of(s), s.dt, [=](uint64_t seed) {
    const Rotary rot = rotary_of(s);
    Tensor dQ = rand(heads, s.dt, seed), dK = rand(heads, s.dt, seed + 1), dV = rand(values, s.dt, seed + 2);
    Tensor dqg = dev_empty(q_shape, s.dt), dkvg = dev_empty(kv_shape, s.dt), dpeg = dev_empty(pe_shape, s.dt);
    Tensor dqc = cpu_empty(q_shape), dkvc = cpu_empty(kv_shape), dpec = cpu_empty(pe_shape);
    ops::mla_qkv_bwd(gpu(), dqg, dkvg, dpeg, dev(dQ), dev(dK), dev(dV), rot);
    ops::mla_qkv_bwd(cpu(), dqc, dkvc, dpec, ref(dQ), ref(dK), ref(dV), rot);
    return std::vector<Output>{{"dq", dqg, dqc}, {"dkv", dkvg, dkvc}, {"dk_pe", dpeg, dpec}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(mla) {
  const MlaSpec specs[] = {
      {2, 130, 16, 128, 64, 128, 128, true, true, 0, DType::BF16},   // DeepSeek-V3's dims, vector path
      {1, 77, 4, 128, 64, 128, 192, true, true, 0, DType::BF16},     // V zero padded to dn + dr
      {2, 33, 3, 32, 16, 24, 24, false, false, 0, DType::BF16},      // plain RoPE, rotate-half, vector path
      {1, 45, 5, 16, 8, 8, 16, true, false, 0, DType::F32},          // fp32 vector path, rotate-half
      {1, 30, 2, 32, 64, 16, 16, true, false, 0, DType::F32},        // YaRN's ramp (pairs 10..23) on rotate-half
      {1, 25, 3, 16, 8, 8, 8, true, true, 0, DType::F32},            // fp32 vector path, interleaved
      {1, 20, 2, 12, 6, 10, 14, false, true, 0, DType::BF16},        // off the vector path, interleaved
      {2, 19, 3, 10, 6, 6, 6, true, false, 0, DType::F32},           // off the vector path, rotate-half
      {2, 1, 16, 128, 64, 128, 192, true, true, 4000, DType::BF16},  // one decoding step at position 4000
      {1, 1, 2, 16, 8, 8, 24, false, true, 37, DType::F32},          // plain RoPE from a later position
  };
  for (const MlaSpec& s : specs) add(s);
}

}  // namespace hytra::parity
