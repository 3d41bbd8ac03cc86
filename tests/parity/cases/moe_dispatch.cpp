// Parity cases for the MoE dispatch ops: gather_rows (repeated and skipped indices, every copy word
// size), scatter_add_rows (empty segments, several rows per segment, padding rows past the last
// segment, odd C), and moe_act_fwd/bwd for every activation kind, plain and interleaved GLU layouts
// (I = 1, 2, 3, 16), with and without clamping (L = 0.5 clamps many of h in [-3,3]) and linear
// offset 0 and 1, on the 16-byte vector path (F % 8 == 0) and the scalar one, fp32 and bf16.
// gather and scatter compare exactly (the same fp32 additions in the same order, rounded once).
#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>

#include "ops/ops.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

using Kind = ops::ExpertActivation;

Case exact(Case c) {
  c.criterion = Criterion::Exact;
  return c;
}

// The reference rounded to the case's dtype, as the device stores it.
Tensor stored(const Tensor& want, DType dt) { return dt == DType::F32 ? want : as_dtype(want, dt); }

Tensor ints(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::I32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

void add_gather(int64_t N, int64_t R, int64_t C, DType dt) {
  register_case(
      exact(make_case("gather_rows", "N=" + dims({N}) + " R=" + dims({R}) + " C=" + dims({C}), dt, [=](uint64_t seed) {
        // Quadratic residues: repeated indices, and rows never picked.
        std::vector<int32_t> idx(static_cast<size_t>(R));  // (R)
        for (int64_t r = 0; r < R; ++r) idx[size_t(r)] = int32_t((r * r + 3 + int64_t(seed % 5)) % N);
        Tensor x = rand({N, C}, dt, seed), id = ints(idx);
        Tensor yg = dev_empty({R, C}, dt), yc = cpu_empty({R, C});
        ops::gather_rows(gpu(), yg, dev(x), dev(id));
        ops::gather_rows(cpu(), yc, ref(x), id);
        return std::vector<Output>{{"y", yg, yc}};
      })));
}

// N segments of 0..3 rows each (about a quarter empty), pad extra rows of x after the last one,
// rows a random permutation of [0, R).
void add_scatter(int64_t N, int64_t C, int64_t pad, DType dt) {
  std::string shape = "N=" + dims({N}) + " C=" + dims({C}) + " pad=" + dims({pad});
  register_case(exact(make_case("scatter_add_rows", shape, dt, [=](uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::vector<int32_t> off(static_cast<size_t>(N) + 1, 0);
    for (int64_t n = 0; n < N; ++n) off[size_t(n) + 1] = off[size_t(n)] + int32_t(gen() % 4);
    const int64_t R = off.back() + pad;
    std::vector<int32_t> rows(static_cast<size_t>(R));
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), gen);
    Tensor x = rand({R, C}, dt, seed + 1), o = ints(off), rw = ints(rows);
    Tensor yg = dev_empty({N, C}, dt), yc = cpu_empty({N, C});
    ops::scatter_add_rows(gpu(), yg, dev(x), dev(o), dev(rw));
    ops::scatter_add_rows(cpu(), yc, ref(x), o, rw);
    return std::vector<Output>{{"y", yg, stored(yc, dt)}};
  })));
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::SwiGLU: return "swiglu";
    case Kind::QuickGeGLU: return "qgeglu";
    case Kind::GeLU: return "gelu";
    case Kind::SquaredReLU: return "sqrelu";
  }
  return "?";
}

bool is_glu(Kind k) { return k == Kind::SwiGLU || k == Kind::QuickGeGLU; }

void add_act(bool fwd, Kind k, int64_t R, int64_t F, int64_t I, double clamp, double offset, DType dt) {
  std::ostringstream shape;
  shape << kind_name(k) << " R=" << R << " F=" << F;
  if (is_glu(k)) shape << " I=" << I << " L=" << clamp << " off=" << offset;
  const int64_t Wh = is_glu(k) ? 2 * F : F;
  register_case(make_case(fwd ? "moe_act_fwd" : "moe_act_bwd", shape.str(), dt, [=](uint64_t seed) {
    Tensor h = rand({R, Wh}, dt, seed, -3.0, 3.0), p = rand({R}, DType::F32, seed + 1, 0.0, 1.0);
    if (fwd) {
      Tensor yg = dev_empty({R, F}, dt), yc = cpu_empty({R, F});
      ops::moe_act_fwd(gpu(), yg, dev(h), dev(p), k, I, offset, clamp);
      ops::moe_act_fwd(cpu(), yc, ref(h), ref(p), k, I, offset, clamp);
      return std::vector<Output>{{"y", yg, yc}};
    }
    Tensor dy = rand({R, F}, dt, seed + 2);
    Tensor dhg = dev_empty({R, Wh}, dt), dhc = cpu_empty({R, Wh});
    Tensor dpg = dev_empty({R}, DType::F32), dpc = cpu_empty({R});
    ops::moe_act_bwd(gpu(), dhg, dpg, dev(dy), dev(h), dev(p), k, I, offset, clamp);
    ops::moe_act_bwd(cpu(), dhc, dpc, ref(dy), ref(h), ref(p), k, I, offset, clamp);
    return std::vector<Output>{{"dh", dhg, dhc}, {"dprobs", dpg, dpc}};
  }));
}

}  // namespace

HYTRA_PARITY_CASES(moe_dispatch) {
  add_gather(37, 64, 96, DType::F32);    // 16-byte words
  add_gather(37, 64, 7, DType::F32);     // 4-byte words
  add_gather(50, 80, 300, DType::BF16);  // 8-byte words
  add_gather(29, 45, 33, DType::BF16);   // 2-byte words

  add_scatter(64, 96, 0, DType::F32);     // vector path
  add_scatter(50, 33, 5, DType::F32);     // odd C, padding rows
  add_scatter(40, 1024, 3, DType::BF16);  // vector path, several column tiles
  add_scatter(31, 77, 0, DType::BF16);    // odd C

  const double clamp_offset[4][2] = {{0.0, 0.0}, {0.0, 1.0}, {0.5, 0.0}, {0.5, 1.0}};
  for (bool fwd : {true, false}) {
    for (Kind k : {Kind::SwiGLU, Kind::QuickGeGLU}) {
      for (DType dt : {DType::F32, DType::BF16})
        for (int64_t I : {0, 1, 2, 16})  // F % 8 == 0: the vector path (wide for 0 and 16, narrow for 1, 2)
          for (const auto& co : clamp_offset) add_act(fwd, k, 37, 96, I, co[0], co[1], dt);
      for (int64_t I : {0, 1, 2, 3})  // F % 8 != 0: the scalar path
        for (const auto& co : clamp_offset) add_act(fwd, k, 19, 36, I, co[0], co[1], DType::F32);
      add_act(fwd, k, 19, 36, 2, 0.5, 1.0, DType::BF16);
      add_act(fwd, k, 257, 2048, 0, 0.5, 1.0, DType::BF16);  // several warps per row in the backward
      add_act(fwd, k, 257, 2048, 16, 0.0, 0.0, DType::BF16);
    }
    for (Kind k : {Kind::GeLU, Kind::SquaredReLU})
      for (DType dt : {DType::F32, DType::BF16}) {
        add_act(fwd, k, 37, 96, 0, 0.0, 0.0, dt);
        add_act(fwd, k, 19, 37, 0, 0.0, 0.0, dt);
        add_act(fwd, k, 257, 2048, 0, 0.0, 0.0, dt);
      }
  }
}

}  // namespace hytra::parity
