// Parity cases for the SSD chunk scan, forward and backward: fp32 (elementwise) and bf16 (relative
// norm), the CUDA chunk lengths 64, 128 and 256 (the CPU runs chunk_size, CUDA rounds it down to one
// of those, at least 64), T a multiple of the chunk and not, a chunk longer than T, one group and
// several (H/G heads each), P 64 and 128, N 64, 128 and 256, and odd or small P and N (tiles padded
// with zeros). Inputs in Mamba's ranges: dt_raw in [-4, 0], dt_bias in [-1, 0.5], A_log = ln U(1, 16),
// D near 1. Every output is compared; the parameter gradients start from random values (`+=`). With
// dt_pad > 0, dt_raw and ddt_raw are row-pitched: columns [dt_pad, dt_pad + H) of a (B,T,H+dt_pad) tensor
// (as the Mamba layer passes its in_proj output; ddt_raw's other columns must come back untouched).
#include <cmath>
#include <vector>

#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

struct SsdShape {
  int64_t B, T, H, G, P, N, chunk, dt_pad = 0;
};

std::string text(const SsdShape& s) {
  return "B=" + dims({s.B}) + " T=" + dims({s.T}) + " H=" + dims({s.H}) + " G=" + dims({s.G}) + " P=" + dims({s.P}) +
         " N=" + dims({s.N}) + " chunk=" + dims({s.chunk}) +
         (s.dt_pad > 0 ? " dt-pitch=" + dims({s.H + s.dt_pad}) : "");
}

// The (B,T,H) dt view of a (B,T,H+dt_pad) tensor.
Tensor dt_cols(const SsdShape& s, const Tensor& wide) { return wide.narrow(2, s.dt_pad, s.H); }

struct Inputs {
  Tensor x, dt_raw, Bm, Cm;  // (B,T,H,P), (B,T,H+dt_pad), (B,T,G,N) x2; in the case's dtype
  Tensor dt_bias, A_log, D;  // (H) fp32
};

Inputs make_inputs(const SsdShape& s, DType dt, uint64_t seed) {
  Tensor a = rand({s.H}, DType::F32, seed + 5, 1.0, 16.0);
  std::vector<double> v = a.to_f64_vector();
  for (double& e : v) e = std::log(e);
  a.copy_from_f64(v);
  return Inputs{rand({s.B, s.T, s.H, s.P}, dt, seed),         rand({s.B, s.T, s.H + s.dt_pad}, dt, seed + 1, -4.0, 0.0),
                rand({s.B, s.T, s.G, s.N}, dt, seed + 2),     rand({s.B, s.T, s.G, s.N}, dt, seed + 3),
                rand({s.H}, DType::F32, seed + 4, -1.0, 0.5), a,
                rand({s.H}, DType::F32, seed + 6, 0.5, 1.5)};
}

void add_fwd(const SsdShape& s, DType dt) {
  register_case(make_case("ssd_chunk_scan_fwd", text(s), dt, [=](uint64_t seed) {
    const Inputs in = make_inputs(s, dt, seed);
    Tensor yg = dev_empty(in.x.shape(), dt), yc = cpu_empty(in.x.shape());
    ops::ssd_chunk_scan_fwd(gpu(), yg, dev(in.x), dt_cols(s, dev(in.dt_raw)), dev(in.Bm), dev(in.Cm), dev(in.dt_bias),
                            dev(in.A_log), dev(in.D), s.chunk, nullptr);
    ops::ssd_chunk_scan_fwd(cpu(), yc, ref(in.x), dt_cols(s, ref(in.dt_raw)), ref(in.Bm), ref(in.Cm), in.dt_bias,
                            in.A_log, in.D, s.chunk, nullptr);
    return std::vector<Output>{{"y", yg, yc}};
  }));
}

void add_bwd(const SsdShape& s, DType dt) {
  register_case(make_case("ssd_chunk_scan_bwd", text(s), dt, [=](uint64_t seed) {
    const Inputs in = make_inputs(s, dt, seed);
    const Tensor dy = rand(in.x.shape(), dt, seed + 7);
    const Tensor g0 = rand({s.H}, DType::F32, seed + 8), a0 = rand({s.H}, DType::F32, seed + 9);
    const Tensor d0 = rand({s.H}, DType::F32, seed + 10);
    const Tensor ddt0 = rand(in.dt_raw.shape(), dt, seed + 11);
    Tensor dxg = dev_empty(in.x.shape(), dt), dtg = dev(ddt0), dtg_c = dt_cols(s, dtg);
    Tensor dBg = dev_empty(in.Bm.shape(), dt), dCg = dev_empty(in.Cm.shape(), dt);
    Tensor dbg = dev(g0), dag = dev(a0), ddg = dev(d0);
    Tensor dxc = cpu_empty(in.x.shape()), dtc = ref(ddt0), dtc_c = dt_cols(s, dtc);
    Tensor dBc = cpu_empty(in.Bm.shape()), dCc = cpu_empty(in.Cm.shape());
    Tensor dbc = g0.clone(), dac = a0.clone(), ddc = d0.clone();
    // The GPU backward reads what its forward kept, as training runs it (CudaSsd checks that this is
    // bitwise the backward that recomputes it).
    std::vector<Tensor> kept;
    Tensor yg = dev_empty(in.x.shape(), dt);
    const Tensor xg = dev(in.x), dt_rawg = dt_cols(s, dev(in.dt_raw)), Bg = dev(in.Bm), Cg = dev(in.Cm);
    const Tensor biasg = dev(in.dt_bias), alogg = dev(in.A_log), Dg = dev(in.D);
    ops::ssd_chunk_scan_fwd(gpu(), yg, xg, dt_rawg, Bg, Cg, biasg, alogg, Dg, s.chunk, &kept);
    ops::ssd_chunk_scan_bwd(gpu(), dxg, dtg_c, dBg, dCg, dbg, dag, ddg, dev(dy), xg, dt_rawg, Bg, Cg, biasg, alogg, Dg,
                            s.chunk, &kept);
    ops::ssd_chunk_scan_bwd(cpu(), dxc, dtc_c, dBc, dCc, dbc, dac, ddc, ref(dy), ref(in.x), dt_cols(s, ref(in.dt_raw)),
                            ref(in.Bm), ref(in.Cm), in.dt_bias, in.A_log, in.D, s.chunk, nullptr);
    // ddt_bias and dA_log sum B*T terms that mostly cancel (sum |dt da| / |sum dt da| was 7 to 37 on
    // these inputs), so bf16 operands' rounding (about 1e-3 per term) reaches them amplified: 2e-2.
    const double sums_tol = dt == DType::BF16 ? 2e-2 : 0.0;
    return std::vector<Output>{{"dx", dxg, dxc},
                               {"ddt_raw", dtg, dtc},
                               {"dB", dBg, dBc},
                               {"dC", dCg, dCc},
                               {"ddt_bias", dbg, dbc, sums_tol},
                               {"dA_log", dag, dac, sums_tol},
                               {"dD", ddg, ddc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(ssd) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  const SsdShape shapes[] = {
      {2, 100, 4, 2, 16, 32, 32},        // T not a multiple of the chunk, 2 heads per group
      {1, 64, 3, 1, 64, 128, 16},        // one group, T a multiple of the chunk
      {2, 50, 2, 2, 5, 7, 128},          // chunk longer than T, odd P and N, one head per group
      {1, 41, 2, 1, 128, 200, 8},        // P 128, N 200 (a partly filled 64-column tile)
      {1, 1000, 2, 1, 32, 64, 128},      // long sequence, 8 chunks
      {2, 200, 4, 2, 64, 64, 64},        // chunk 64, last chunk of 8 steps
      {1, 300, 4, 1, 64, 128, 128},      // chunk 128, last chunk of 44 steps
      {1, 600, 4, 2, 128, 256, 256},     // chunk 256, last chunk of 88 steps, P 128, N 256
      {2, 512, 8, 2, 64, 128, 128},      // 4 heads per group, whole chunks
      {2, 300, 8, 2, 64, 128, 128, 37},  // dt_raw / ddt_raw row-pitched (read from a wider tensor in place)
  };
  for (const SsdShape& s : shapes) {
    add_fwd(s, f32);
    add_bwd(s, f32);
  }
  for (int i : {0, 3, 5, 6, 7, 8, 9}) {
    add_fwd(shapes[i], bf16);
    add_bwd(shapes[i], bf16);
  }
}

}  // namespace hytra::parity
