// bench_ops: one record per op and shape (docs/ARCHITECTURE.md style rule 12): op, shape, dtype, median ms,
// TFLOP/s (compute-bound ops) or GB/s (memory-bound ops: bytes read + written once), device.
//   bench_ops [-o <op>] [--repeats <n>]
// With a GPU (CUDA build) the CUDA backend runs at training sizes, timed with CUDA events on the
// executor's stream after warm-up; otherwise the CPU backend runs at small sizes, timed with
// std::chrono around Exec::synchronize. Inputs are uniform random (never zero); the memory-bound
// shapes are larger than the H100's 50 MB L2.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ops/ops.h"
#if defined(HYTRA_HAVE_CUDA)
#include "ops/cuda/timer.h"
#endif

namespace hytra {
namespace {

struct Entry {
  std::string op, shape;
  DType dtype;
  double flops;  // per call; 0 for memory-bound ops
  double bytes;  // per call, for GB/s when flops == 0
  // Allocates the inputs and returns the call to time.
  std::function<std::function<void()>()> setup;
};

struct Env {
  Exec* ex;
  Device dev;
  bool big;  // GPU sizes
};

// SplitMix64 of (seed, i): cheap enough for the 8192^2 operands.
uint64_t mix(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Tensor uniform(const Shape& shape, DType dtype, Device dev, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor h = Tensor::empty(shape, dtype);
  std::vector<float> v(size_t(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = lo + (hi - lo) * float(mix(seed, i) >> 40) * (1.0f / 16777216.0f);
  h.copy_from(v);
  return dev == Device::CPU ? h : h.to(dev);
}

Tensor ids(int64_t n, int64_t vocab, Device dev, uint64_t seed) {
  Tensor h = Tensor::empty({n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) h.data<int32_t>()[i] = int32_t(mix(seed, uint64_t(i)) % uint64_t(vocab));
  return dev == Device::CPU ? h : h.to(dev);
}

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t x : d) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

// nemotron-h-1b's Mamba-2 mixer (examples/nemotron-h-1b): B 2, T 4096, in_proj output (B,T,2 Di + 2GN + H)
// = 10304 columns with d_inner Di 4096, G*N 1024, H 64. As the mixer calls them: the conv runs once per channel
// range x, B, C (nn/channel_conv.cpp), reading its columns of the in_proj output in place (and, backward,
// writing its columns of the in_proj gradient); the gated norm reads z = columns [0, Di) in place, 8 groups
// of 512, w (Di).
void nemotron_mixer_entries(std::vector<Entry>& out, const Env& e) {
  Exec* ex = e.ex;
  const Device dev = e.dev;
  const DType bf = DType::BF16, f32 = DType::F32;
  const int64_t B = 2, T = 4096, Di = 4096, GN = 1024, W = 2 * Di + 2 * GN + 64, Cc = Di + 2 * GN, K = 4, gs = 512;
  const int64_t widths[] = {Di, GN, GN};
  const std::string conv = "nemotron-h-1b x,B,C B=2 T=4096";
  const double act = double(B * T * Cc) * 2;  // bytes of the conv's channels, bf16
  out.push_back({"conv1d_fwd", conv, bf, 0, 2 * act, [=] {
                   Tensor zx = uniform({B, T, W}, bf, dev, 1), w = uniform({Cc, K}, bf, dev, 2);
                   Tensor b = uniform({Cc}, bf, dev, 3);
                   std::vector<Tensor> ys;  // x, B, C: a tensor each
                   for (int64_t width : widths) ys.push_back(uniform({B, T, width}, bf, dev, 4));
                   return std::function<void()>([=]() mutable {
                     int64_t c0 = 0;
                     for (Tensor& y : ys) {
                       const int64_t width = y.size(2);
                       ops::conv1d_fwd(*ex, y, zx.narrow(2, Di + c0, width), w.narrow(0, c0, width),
                                       b.narrow(0, c0, width), true);
                       c0 += width;
                     }
                   });
                 }});
  out.push_back({"conv1d_bwd", conv, bf, 0, 3 * act, [=] {
                   Tensor zx = uniform({B, T, W}, bf, dev, 1), w = uniform({Cc, K}, bf, dev, 2);
                   Tensor b = uniform({Cc}, bf, dev, 3), dzx = uniform({B, T, W}, bf, dev, 5);
                   Tensor dw = uniform({Cc, K}, f32, dev, 6), db = uniform({Cc}, f32, dev, 7);
                   std::vector<Tensor> dys;  // d(x, B, C): a tensor each
                   for (int64_t width : widths) dys.push_back(uniform({B, T, width}, bf, dev, 4));
                   return std::function<void()>([=]() mutable {
                     int64_t c0 = 0;
                     for (const Tensor& dy : dys) {
                       const int64_t width = dy.size(2);
                       Tensor dx = dzx.narrow(2, Di + c0, width), dwp = dw.narrow(0, c0, width);
                       Tensor dbp = db.narrow(0, c0, width);
                       ops::conv1d_bwd(*ex, dx, dwp, dbp, dy, zx.narrow(2, Di + c0, width), w.narrow(0, c0, width),
                                       b.narrow(0, c0, width), true);
                       c0 += width;
                     }
                   });
                 }});
  const int64_t N = B * T;
  const std::string norm = "nemotron-h-1b N=8192 C=4096 gs=512 z-pitch=10304";
  const double nc = double(N * Di) * 2;  // bytes of one (N, Di) bf16 tensor
  out.push_back({"gated_rmsnorm_fwd", norm, bf, 0, 3 * nc, [=] {
                   Tensor x = uniform({N, Di}, bf, dev, 1), zx = uniform({N, W}, bf, dev, 2);
                   Tensor w = uniform({Di}, bf, dev, 3), y = uniform({N, Di}, bf, dev, 4);
                   Tensor r = uniform({N, Di / gs}, f32, dev, 5);
                   return std::function<void()>([=]() mutable {
                     ops::gated_rmsnorm_fwd(*ex, y, r, x, zx.narrow(1, 0, Di), w, gs, 1e-5, false);
                   });
                 }});
  out.push_back({"gated_rmsnorm_bwd", norm, bf, 0, 5 * nc, [=] {
                   Tensor x = uniform({N, Di}, bf, dev, 1), zx = uniform({N, W}, bf, dev, 2);
                   Tensor w = uniform({Di}, bf, dev, 3), dy = uniform({N, Di}, bf, dev, 4);
                   Tensor dx = uniform({N, Di}, bf, dev, 5), dzx = uniform({N, W}, bf, dev, 6);
                   Tensor dw = uniform({Di}, f32, dev, 7), r = uniform({N, Di / gs}, f32, dev, 8, 0.5f, 1.5f);
                   return std::function<void()>([=]() mutable {
                     Tensor dz = dzx.narrow(1, 0, Di);
                     ops::gated_rmsnorm_bwd(*ex, dx, dz, dw, dy, x, zx.narrow(1, 0, Di), w, r, gs, false);
                   });
                 }});
}

// The moe-2b layer (bench/configs/moe-2b.yaml): 8192 tokens routed top-6 over 32 experts (R = 49152 rows),
// C 2048, expert FFN F 1024 with SwiGLU (fc1 2048 -> 2 x 1024, fc2 1024 -> 2048), bf16, the experts' weights
// one (E, out, in) tensor and fp32 weight gradients. Routing: each token's 6 experts drawn uniformly (about
// 1536 rows an expert); "skewed", half the tokens' first choice on expert 0 (about 4900 rows on it); or
// "crowded", every token on experts 0-5 (8192 rows each, the other 26 empty, as a router may start). The
// dense GEMM of fc1's FLOPs is the ceiling a grouped GEMM is measured against; bench/peer/grouped_mm_peer.py
// times torch._grouped_mm on the same entries.
enum class Routing { Uniform, Skewed, Crowded };

Tensor moe_offsets(int64_t N, int64_t K, int64_t E, Routing routing, Device dev) {
  std::vector<int64_t> count(size_t(E), 0);
  std::vector<int64_t> pool(static_cast<size_t>(E));
  const bool skew = routing == Routing::Skewed;
  for (int64_t t = 0; t < N && routing != Routing::Crowded; ++t) {
    for (int64_t x = 0; x < E; ++x) pool[size_t(x)] = x;
    for (int64_t j = 0; j < K; ++j) {
      std::swap(pool[size_t(j)], pool[size_t(j + int64_t(mix(7, uint64_t(t * K + j)) % uint64_t(E - j)))]);
      if (j == 0 && skew && t % 2 == 0) std::swap(pool[0], *std::find(pool.begin(), pool.end(), 0));
      ++count[size_t(pool[size_t(j)])];
    }
  }
  if (routing == Routing::Crowded)
    for (int64_t x = 0; x < K; ++x) count[size_t(x)] = N;
  Tensor o = Tensor::empty({E + 1}, DType::I32);
  o.data<int32_t>()[0] = 0;
  for (int64_t x = 0; x < E; ++x) o.data<int32_t>()[x + 1] = o.data<int32_t>()[x] + int32_t(count[size_t(x)]);
  return o.to(dev);
}

void moe2b_expert_entries(std::vector<Entry>& out, const Env& e) {
  Exec* ex = e.ex;
  const Device dev = e.dev;
  const DType bf = DType::BF16, f32 = DType::F32;
  const int64_t N = 8192, K = 6, E = 32, R = N * K, C = 2048, F = 1024;
  const double fc1 = 2.0 * R * C * 2 * F;
  for (Routing routing : {Routing::Uniform, Routing::Skewed, Routing::Crowded}) {
    const std::string tag = std::string("moe-2b R=49152 E=32") + (routing == Routing::Skewed    ? " skewed"
                                                                  : routing == Routing::Crowded ? " crowded"
                                                                                                : "");
    out.push_back({"grouped_gemm_glu", tag + " fc1+swiglu", bf, fc1, 0, [=] {
                     Tensor a = uniform({R, C}, bf, dev, 1), w = uniform({E, 2 * F, C}, bf, dev, 2, -0.05f, 0.05f);
                     Tensor p = uniform({R}, f32, dev, 3, 0.0f, 1.0f), h = uniform({R, 2 * F}, bf, dev, 4);
                     Tensor y = uniform({R, F}, bf, dev, 5), o = moe_offsets(N, K, E, routing, dev);
                     return std::function<void()>([=]() mutable {
                       ops::grouped_gemm_glu(*ex, h, y, a, w, o, p, ops::ExpertActivation::SwiGLU, 0, 0.0, 0.0);
                     });
                   }});
    // (name, out N, contraction K, trans_w): fc1 and fc2 forward, fc2 and fc1 data gradients.
    const struct {
      const char* what;
      int64_t n, k;
      bool trans;
    } gemms[] = {{" fc1 fwd", 2 * F, C, true},
                 {" fc2 fwd", C, F, true},
                 {" fc2 dgrad", F, C, false},
                 {" fc1 dgrad", C, 2 * F, false}};
    for (const auto& g : gemms) {
      const int64_t n = g.n, k = g.k;
      const bool trans = g.trans;
      out.push_back({"grouped_gemm", tag + g.what, bf, 2.0 * R * n * k, 0, [=] {
                       Tensor a = uniform({R, k}, bf, dev, 1), y = uniform({R, n}, bf, dev, 2);
                       Tensor w = uniform(trans ? Shape{E, n, k} : Shape{E, k, n}, bf, dev, 3, -0.05f, 0.05f);
                       Tensor o = moe_offsets(N, K, E, routing, dev);
                       return std::function<void()>([=]() mutable { ops::grouped_gemm(*ex, y, a, w, o, trans); });
                     }});
    }
    // Weight gradients: fc1 dW (E, 2F, C) = dh^T x, fc2 dW (E, C, F) = dy^T a, written (beta 0: a step's first
    // micro-batch) or accumulated (beta 1).
    const struct {
      const char* what;
      int64_t n, k;
    } wgrads[] = {{" fc1 wgrad", 2 * F, C}, {" fc2 wgrad", C, F}};
    for (const auto& g : wgrads)
      for (float beta : {0.0f, 1.0f}) {
        const int64_t n = g.n, k = g.k;
        out.push_back(
            {"grouped_gemm_wgrad", tag + g.what + (beta == 0.0f ? " beta=0" : " beta=1"), bf, 2.0 * R * n * k, 0, [=] {
               Tensor dy = uniform({R, n}, bf, dev, 1), x = uniform({R, k}, bf, dev, 2);
               Tensor dw = uniform({E, n, k}, f32, dev, 3), o = moe_offsets(N, K, E, routing, dev);
               return std::function<void()>([=]() mutable { ops::grouped_gemm_wgrad(*ex, dw, dy, x, o, beta); });
             }});
      }
    if (routing != Routing::Uniform) continue;
    out.push_back({"gemm", "dense R=49152 N=2048 K=2048 (fc1's FLOPs)", bf, fc1, 0, [=] {
                     Tensor a = uniform({R, C}, bf, dev, 1), w = uniform({2 * F, C}, bf, dev, 2, -0.05f, 0.05f);
                     Tensor y = uniform({R, 2 * F}, bf, dev, 3);
                     return std::function<void()>([=]() mutable { ops::gemm(*ex, y, a, w, false, true, 1.0f, 0.0f); });
                   }});
  }
  // Routing and dispatch of the same layer: the router's top-6 over 32 fp32 logits, the device plan, the
  // permutation of the tokens (R rows of C) and the un-permutation.
  const std::string rt = "moe-2b N=8192 E=32 k=6";
  out.push_back({"moe_router_fwd", rt + " sigmoid+bias", f32, 0, double(N * E * 4 + N * K * 8), [=] {
                   Tensor l = uniform({N, E}, f32, dev, 1), b = uniform({E}, f32, dev, 2, -0.1f, 0.1f);
                   Tensor p = uniform({N, K}, f32, dev, 3), top = Tensor::empty({N, K}, DType::I32, dev);
                   return std::function<void()>([=]() mutable {
                     ops::moe_router_fwd(*ex, p, top, l, b, K, ops::RouterScore::Sigmoid, false, 0, 0, 1.0);
                   });
                 }});
  // The permutation's indices from the dropless plan of a routing (each token's row read 6 times).
  auto plan = [=](Tensor& rows, Tensor& t_off, Tensor& t_rows) {
    Tensor l = uniform({N, E}, f32, dev, 1), p = uniform({N, K}, f32, dev, 3), none;
    Tensor top = Tensor::empty({N, K}, DType::I32, dev), counts = Tensor::zeros({E}, DType::I32, dev);
    Tensor offsets = Tensor::empty({E + 1}, DType::I32, dev), slot = Tensor::empty({R}, DType::I32, dev);
    Tensor slot_row = Tensor::empty({R}, DType::I32, dev);
    rows = Tensor::empty({R}, DType::I32, dev);
    t_rows = Tensor::empty({R}, DType::I32, dev);
    ops::moe_router_fwd(*ex, p, top, l, none, K, ops::RouterScore::Sigmoid, false, 0, 0, 1.0);
    ops::moe_plan_dropless(*ex, counts, offsets, rows, slot, slot_row, t_rows, top, E);
    Tensor off = Tensor::empty({N + 1}, DType::I32);
    for (int64_t t = 0; t <= N; ++t) off.data<int32_t>()[t] = int32_t(t * K);
    t_off = off.to(dev);
  };
  out.push_back({"gather_rows", "moe-2b permute R=49152 C=2048", DType::BF16, 0, 2.0 * R * 2048 * 2, [=] {
                   Tensor rows, t_off, t_rows;
                   plan(rows, t_off, t_rows);
                   Tensor x = uniform({N, 2048}, DType::BF16, dev, 4), y = uniform({R, 2048}, DType::BF16, dev, 5);
                   return std::function<void()>([=]() mutable { ops::gather_rows(*ex, y, x, rows); });
                 }});
  out.push_back({"scatter_add_rows", "moe-2b unpermute R=49152 C=2048", DType::BF16, 0, double(R + N) * 2048 * 2, [=] {
                   Tensor rows, t_off, t_rows;
                   plan(rows, t_off, t_rows);
                   Tensor x = uniform({R, 2048}, DType::BF16, dev, 4), y = uniform({N, 2048}, DType::BF16, dev, 5);
                   return std::function<void()>([=]() mutable { ops::scatter_add_rows(*ex, y, x, t_off, t_rows); });
                 }});
  out.push_back({"moe_plan_dropless", rt, DType::I32, 0, double(N * K * 4 * 5), [=] {
                   Tensor l = uniform({N, E}, f32, dev, 1), p = uniform({N, K}, f32, dev, 3);
                   Tensor top = Tensor::empty({N, K}, DType::I32, dev), none;
                   ops::moe_router_fwd(*ex, p, top, l, none, K, ops::RouterScore::Sigmoid, false, 0, 0, 1.0);
                   Tensor counts = Tensor::empty({E}, DType::I32, dev),
                          offsets = Tensor::empty({E + 1}, DType::I32, dev);
                   Tensor rt2 = Tensor::empty({R}, DType::I32, dev), rs = Tensor::empty({R}, DType::I32, dev);
                   Tensor sr = Tensor::empty({R}, DType::I32, dev), tr = Tensor::empty({R}, DType::I32, dev);
                   return std::function<void()>(
                       [=]() mutable { ops::moe_plan_dropless(*ex, counts, offsets, rt2, rs, sr, tr, top, E); });
                 }});
}

// The dense target model: N = 8192 tokens (B 4 x T 2048), C 2048, F 8192, H 32, Hkv 8, D 64,
// V 50304; bf16 activations, fp32 norm weights and gradients.
// The mHC sub-layer ops at llama3.2-1b's shape with n = 4 streams (bench/configs/llama3.2-1b.yaml with
// --enable-hyper-connections --num-residual-streams 4): 8192 tokens, C 2048, bf16 streams, 20 Sinkhorn
// iterations. Bytes count each tensor read or written once (the floors of bench/NOTES.md's mHC entry).
void mhc_entries(std::vector<Entry>& out, const Env& e) {
  Exec* ex = e.ex;
  const Device dev = e.dev;
  const DType bf = DType::BF16, f32 = DType::F32;
  const int64_t N = 8192, n = 4, C = 2048, D = n * C, P = n * n + 2 * n, T = 20;
  const double b = 2.0, xs = double(N) * D * b;  // the streams' bytes
  const std::string shape = "llama3.2-1b mHC n=4 N=8192 C=2048";
  const double cs = double(N) * C * b;  // one stream's (or the sub-layer's) bytes
  out.push_back({"mhc_proj_fwd", shape, bf, 0, xs + 4.0 * P * D + 4.0 * N * P + 4.0 * N, [=] {
                   Tensor x = uniform({N, D}, bf, dev, 1), w = uniform({P, D}, f32, dev, 2, -0.01f, 0.01f);
                   Tensor proj = uniform({N, P}, f32, dev, 3), rms = uniform({N}, f32, dev, 4);
                   return std::function<void()>([=]() mutable { ops::mhc_proj_fwd(*ex, proj, rms, x, w); });
                 }});
  out.push_back({"mhc_streams_bwd", shape, bf, 0, 3.0 * xs + cs + 8.0 * P * D + 4.0 * N * P, [=] {
                   Tensor X = uniform({N, n, C}, bf, dev, 1), w = uniform({P, D}, f32, dev, 2, -0.01f, 0.01f);
                   Tensor dproj = uniform({N, P}, f32, dev, 3), dX = uniform({N, n, C}, bf, dev, 4);
                   Tensor dw = uniform({P, D}, f32, dev, 5), du = uniform({N, C}, bf, dev, 6);
                   Tensor h = uniform({N, n}, f32, dev, 7), dr = uniform({N}, f32, dev, 8);
                   Tensor r = uniform({N}, f32, dev, 9, 0.5f, 1.0f), rms = uniform({N}, f32, dev, 10, 0.5f, 1.0f);
                   return std::function<void()>(
                       [=]() mutable { ops::mhc_streams_bwd(*ex, dX, dw, dproj, dr, r, rms, du, h, X, w); });
                 }});
  auto coeff_inputs = [=](Tensor& rms, Tensor& proj, Tensor& alpha, Tensor& bias) {
    rms = uniform({N}, f32, dev, 1, 0.5f, 1.0f);
    proj = uniform({N, P}, f32, dev, 2, -2.0f, 2.0f);
    alpha = uniform({3}, f32, dev, 3, 0.01f, 0.02f);
    bias = uniform({P}, f32, dev, 4);
  };
  const double pb = 4.0 * N * P;  // one (N, P) fp32 tensor's bytes
  out.push_back({"mhc_coeffs_fwd", shape + " T=20", f32, 0, 2.0 * pb + 8.0 * N, [=] {
                   Tensor rms, proj, alpha, bias;
                   coeff_inputs(rms, proj, alpha, bias);
                   Tensor hp = uniform({N, n}, f32, dev, 5), hq = uniform({N, n}, f32, dev, 6);
                   Tensor hr = uniform({N, n, n}, f32, dev, 7), r = uniform({N}, f32, dev, 8);
                   return std::function<void()>([=]() mutable {
                     ops::mhc_coeffs_fwd(*ex, hp, hq, hr, r, rms, proj, alpha.narrow(0, 0, 1), alpha.narrow(0, 1, 1),
                                         alpha.narrow(0, 2, 1), bias, T, ops::MhcVariant::Main);
                   });
                 }});
  out.push_back({"mhc_coeffs_bwd", shape + " T=20", f32, 0, 3.0 * pb + 8.0 * N, [=] {
                   Tensor rms, proj, alpha, bias;
                   coeff_inputs(rms, proj, alpha, bias);
                   Tensor dp = uniform({N, n}, f32, dev, 5), dq = uniform({N, n}, f32, dev, 6);
                   Tensor dres = uniform({N, n, n}, f32, dev, 7), r = uniform({N}, f32, dev, 8, 0.5f, 1.0f);
                   Tensor dr = uniform({N}, f32, dev, 9), dproj = uniform({N, P}, f32, dev, 10);
                   Tensor da = uniform({3}, f32, dev, 11), db = uniform({P}, f32, dev, 12);
                   return std::function<void()>([=]() mutable {
                     Tensor da_pre = da.narrow(0, 0, 1), da_post = da.narrow(0, 1, 1), da_res = da.narrow(0, 2, 1);
                     ops::mhc_coeffs_bwd(*ex, dproj, dr, da_pre, da_post, da_res, db, dp, dq, dres, proj,
                                         alpha.narrow(0, 0, 1), alpha.narrow(0, 1, 1), alpha.narrow(0, 2, 1), bias, r,
                                         T, ops::MhcVariant::Main);
                   });
                 }});
  out.push_back({"mhc_aggregate_fwd", shape, bf, 0, (n + 1) * cs, [=] {
                   Tensor X = uniform({N, n, C}, bf, dev, 1), h = uniform({N, n}, f32, dev, 2);
                   Tensor u = uniform({N, C}, bf, dev, 3);
                   return std::function<void()>([=]() mutable { ops::mhc_aggregate_fwd(*ex, u, X, h); });
                 }});
  out.push_back({"mhc_aggregate_bwd", shape, bf, 0, (3 * n + 1) * cs, [=] {
                   Tensor X = uniform({N, n, C}, bf, dev, 1), h = uniform({N, n}, f32, dev, 2);
                   Tensor du = uniform({N, C}, bf, dev, 3), dX = uniform({N, n, C}, bf, dev, 4);
                   Tensor dh = uniform({N, n}, f32, dev, 5);
                   return std::function<void()>([=]() mutable { ops::mhc_aggregate_bwd(*ex, dX, dh, du, X, h); });
                 }});
  out.push_back({"mhc_aggregate_bwd", shape + " dh_pre only", bf, 0, (n + 1) * cs, [=] {
                   Tensor X = uniform({N, n, C}, bf, dev, 1), h = uniform({N, n}, f32, dev, 2);
                   Tensor du = uniform({N, C}, bf, dev, 3), dh = uniform({N, n}, f32, dev, 5), none;
                   return std::function<void()>([=]() mutable { ops::mhc_aggregate_bwd(*ex, none, dh, du, X, h); });
                 }});
  out.push_back({"mhc_combine_fwd", shape, bf, 0, (2 * n + 1) * cs, [=] {
                   Tensor X = uniform({N, n, C}, bf, dev, 1), F = uniform({N, C}, bf, dev, 2);
                   Tensor hr = uniform({N, n, n}, f32, dev, 3, 0.0f, 0.5f), hp = uniform({N, n}, f32, dev, 4);
                   Tensor Y = uniform({N, n, C}, bf, dev, 5);
                   return std::function<void()>([=]() mutable { ops::mhc_combine_fwd(*ex, Y, X, F, hr, hp); });
                 }});
  out.push_back({"mhc_combine_bwd", shape, bf, 0, (3 * n + 2) * cs, [=] {
                   Tensor X = uniform({N, n, C}, bf, dev, 1), F = uniform({N, C}, bf, dev, 2);
                   Tensor hr = uniform({N, n, n}, f32, dev, 3, 0.0f, 0.5f), hp = uniform({N, n}, f32, dev, 4);
                   Tensor dY = uniform({N, n, C}, bf, dev, 5), dX = uniform({N, n, C}, bf, dev, 6);
                   Tensor dF = uniform({N, C}, bf, dev, 7), dhr = uniform({N, n, n}, f32, dev, 8);
                   Tensor dhp = uniform({N, n}, f32, dev, 9);
                   return std::function<void()>(
                       [=]() mutable { ops::mhc_combine_bwd(*ex, dX, dF, dhr, dhp, dY, X, F, hr, hp); });
                 }});
}

void target_model_entries(std::vector<Entry>& out, const Env& e) {
  Exec* ex = e.ex;
  const Device dev = e.dev;
  const DType bf = DType::BF16, f32 = DType::F32;
  const int64_t N = 8192, C = 2048, F = 8192, B = 4, T = 2048, H = 32, Hkv = 8, D = 64, V = 50304;
  const std::string nc = "N=" + dims({N}) + " C=" + dims({C}) + " w=fp32";
  const double act = double(N * C) * 2;  // bytes of one (N,C) bf16 tensor
  out.push_back(
      {"rmsnorm_fwd", nc, bf, 0, 2 * act, [=] {
         Tensor x = uniform({N, C}, bf, dev, 1), w = uniform({C}, f32, dev, 2), y = uniform({N, C}, bf, dev, 3);
         Tensor r = uniform({N}, f32, dev, 4);
         return std::function<void()>([=]() mutable { ops::rmsnorm_fwd(*ex, y, r, x, w, 1e-5); });
       }});
  out.push_back(
      {"add_rmsnorm_fwd", nc, bf, 0, 4 * act, [=] {
         Tensor a = uniform({N, C}, bf, dev, 1), b = uniform({N, C}, bf, dev, 2), w = uniform({C}, f32, dev, 3);
         Tensor y = uniform({N, C}, bf, dev, 4), r = uniform({N}, f32, dev, 5);
         return std::function<void()>([=]() mutable { ops::add_rmsnorm_fwd(*ex, a, y, r, a, b, w, 1e-5); });
       }});
  out.push_back(
      {"rmsnorm_bwd", nc, bf, 0, 3 * act, [=] {
         Tensor x = uniform({N, C}, bf, dev, 1), w = uniform({C}, f32, dev, 2), dy = uniform({N, C}, bf, dev, 3);
         Tensor dx = uniform({N, C}, bf, dev, 4), dw = uniform({C}, f32, dev, 5);
         Tensor r = uniform({N}, f32, dev, 6, 0.5f, 1.5f);
         return std::function<void()>([=]() mutable { ops::rmsnorm_bwd(*ex, dx, dw, dy, x, w, r); });
       }});
  out.push_back(
      {"rmsnorm_bwd_add", nc, bf, 0, 4 * act, [=] {
         Tensor x = uniform({N, C}, bf, dev, 1), w = uniform({C}, f32, dev, 2), dy = uniform({N, C}, bf, dev, 3);
         Tensor dres = uniform({N, C}, bf, dev, 4), dw = uniform({C}, f32, dev, 5);
         Tensor r = uniform({N}, f32, dev, 6, 0.5f, 1.5f);
         return std::function<void()>([=]() mutable { ops::rmsnorm_bwd_add(*ex, dres, dw, dy, x, w, r, dres); });
       }});
  const std::string nf = "N=" + dims({N}) + " F=" + dims({F});
  out.push_back({"swiglu_fwd", nf, bf, 0, 3.0 * N * F * 2, [=] {
                   Tensor x = uniform({N, 2 * F}, bf, dev, 1), y = uniform({N, F}, bf, dev, 2);
                   return std::function<void()>([=]() mutable { ops::swiglu_fwd(*ex, y, x); });
                 }});
  out.push_back({"swiglu_bwd", nf, bf, 0, 5.0 * N * F * 2, [=] {
                   Tensor x = uniform({N, 2 * F}, bf, dev, 1), dy = uniform({N, F}, bf, dev, 2);
                   Tensor dx = uniform({N, 2 * F}, bf, dev, 3);
                   return std::function<void()>([=]() mutable { ops::swiglu_bwd(*ex, dx, dy, x); });
                 }});
  for (int64_t h : {H, Hkv}) {
    for (bool fwd : {true, false}) {
      out.push_back({fwd ? "rope_fwd" : "rope_bwd", dims({B, T, h, D}), bf, 0, 2.0 * B * T * h * D * 2, [=] {
                       Tensor x = uniform({B, T, h, D}, bf, dev, 1), y = uniform({B, T, h, D}, bf, dev, 2);
                       return std::function<void()>([=]() mutable {
                         if (fwd)
                           ops::rope_fwd(*ex, y, x, D, 10000.0, false);
                         else
                           ops::rope_bwd(*ex, y, x, D, 10000.0, false);
                       });
                     }});
    }
  }
  const std::string ncv = "N=" + dims({N}) + " C=" + dims({C}) + " V=" + dims({V});
  out.push_back({"embedding_fwd", ncv, bf, 0, 2 * act, [=] {
                   Tensor t = uniform({V, C}, bf, dev, 1), y = uniform({N, C}, bf, dev, 2);
                   Tensor i = ids(N, V, dev, 3);
                   return std::function<void()>([=]() mutable { ops::embedding_fwd(*ex, y, i, t); });
                 }});
  // bytes: dy once, and each touched dtable row read and written (at most N rows).
  out.push_back({"embedding_bwd", ncv + " dy=bf16", f32, 0, act + 2.0 * N * C * 4, [=] {
                   Tensor dt = uniform({V, C}, f32, dev, 1), dy = uniform({N, C}, bf, dev, 2);
                   Tensor i = ids(N, V, dev, 3);
                   return std::function<void()>([=]() mutable { ops::embedding_bwd(*ex, dt, dy, i); });
                 }});
  // LM head: the logits GEMM alone (whole vocabulary, fp32 out) is the floor of the fused forward.
  out.push_back(
      {"gemm", dims({N, V, C}) + " nt C=fp32 (lm head)", bf, 2.0 * N * V * C, 0, [=] {
         Tensor A = uniform({N, C}, bf, dev, 1), Bm = uniform({V, C}, bf, dev, 2), Cm = uniform({N, V}, f32, dev, 3);
         return std::function<void()>([=]() mutable { ops::gemm(*ex, Cm, A, Bm, false, true, 1.0f, 0.0f); });
       }});
  for (int64_t chunk : {int64_t(4096), int64_t(8192), int64_t(16384)}) {
    const std::string cs = ncv + " chunk=" + dims({chunk});
    out.push_back({"lm_head_ce_fwd", cs, bf, 2.0 * N * C * V, 0, [=] {
                     Tensor x = uniform({N, C}, bf, dev, 1), w = uniform({V, C}, bf, dev, 2);
                     Tensor lab = ids(N, V, dev, 3), loss = uniform({N}, f32, dev, 4), lse = uniform({N}, f32, dev, 5);
                     return std::function<void()>(
                         [=]() mutable { ops::lm_head_ce_fwd(*ex, loss, lse, x, w, lab, chunk); });
                   }});
    out.push_back({"lm_head_ce_bwd", cs + " dw=fp32", bf, 6.0 * N * C * V, 0, [=] {
                     Tensor x = uniform({N, C}, bf, dev, 1), w = uniform({V, C}, bf, dev, 2);
                     Tensor lab = ids(N, V, dev, 3), loss = uniform({N}, f32, dev, 4), lse = uniform({N}, f32, dev, 5);
                     ops::lm_head_ce_fwd(*ex, loss, lse, x, w, lab, chunk);
                     Tensor dloss = uniform({N}, f32, dev, 6), dx = uniform({N, C}, bf, dev, 7);
                     Tensor dw = uniform({V, C}, f32, dev, 8);
                     return std::function<void()>(
                         [=]() mutable { ops::lm_head_ce_bwd(*ex, dx, dw, dloss, x, w, lab, lse, chunk); });
                   }});
  }
  const int64_t n = int64_t(1) << 26;
  out.push_back({"add", dims({n}) + " bf16+bf16", bf, 0, 3.0 * n * 2, [=] {
                   Tensor a = uniform({n}, bf, dev, 1), b = uniform({n}, bf, dev, 2), y = uniform({n}, bf, dev, 3);
                   return std::function<void()>([=]() mutable { ops::add(*ex, y, a, b); });
                 }});
  out.push_back({"add", dims({n}) + " fp32", f32, 0, 3.0 * n * 4, [=] {
                   Tensor a = uniform({n}, f32, dev, 1), b = uniform({n}, f32, dev, 2), y = uniform({n}, f32, dev, 3);
                   return std::function<void()>([=]() mutable { ops::add(*ex, y, a, b); });
                 }});
  out.push_back({"copy", dims({n}) + " fp32->fp32", f32, 0, 2.0 * n * 4, [=] {
                   Tensor x = uniform({n}, f32, dev, 1), y = uniform({n}, f32, dev, 2);
                   return std::function<void()>([=]() mutable { ops::copy(*ex, y, x); });
                 }});
  // Attention's q heads out of a grouped QKV projection (nemotron-h-1b: B*T 8192, 8 groups of 2 q + k + v).
  const int64_t rows = 8192 * 8;
  out.push_back({"slice_copy", dims({rows, 4, 128}) + " dim1 [0+2]", bf, 0, 2.0 * rows * 2 * 128 * 2, [=] {
                   Tensor x = uniform({rows, 4, 128}, bf, dev, 1), y = uniform({rows, 2, 128}, bf, dev, 2);
                   return std::function<void()>([=]() mutable { ops::slice_copy(*ex, y, x, 1, 0); });
                 }});
  out.push_back({"axpy", dims({n}) + " fp32 += bf16", f32, 0, n * (2.0 * 4 + 2), [=] {
                   Tensor x = uniform({n}, bf, dev, 1), y = uniform({n}, f32, dev, 2);
                   return std::function<void()>([=]() mutable { ops::axpy(*ex, y, x, 1e-3); });
                 }});
}

std::vector<Entry> entries(const Env& e) {
  std::vector<Entry> out;
  Exec* ex = e.ex;
  const Device dev = e.dev;
  const DType act = e.big ? DType::BF16 : DType::F32;  // the CPU backend runs fp32
  const double act_b = double(dtype_size(act));

  auto gemm = [&](int64_t M, int64_t N, int64_t K, bool ta, bool tb, DType ab, DType c) {
    std::string shape = dims({M, N, K}) + (ta ? " t" : " n") + (tb ? "t" : "n") + (c != ab ? " C=fp32" : "");
    out.push_back({"gemm", shape, ab, 2.0 * M * N * K, 0, [=] {
                     Tensor A = uniform(ta ? Shape{K, M} : Shape{M, K}, ab, dev, 1);
                     Tensor B = uniform(tb ? Shape{N, K} : Shape{K, N}, ab, dev, 2);
                     Tensor C = uniform({M, N}, c, dev, 3);
                     return std::function<void()>([=]() mutable { ops::gemm(*ex, C, A, B, ta, tb, 1.0f, 0.0f); });
                   }});
  };
  if (e.big) {
    gemm(8192, 8192, 8192, false, true, DType::BF16, DType::BF16);
    gemm(8192, 8192, 8192, false, false, DType::BF16, DType::BF16);
    gemm(8192, 8192, 8192, true, false, DType::BF16, DType::F32);
    gemm(16384, 4096, 4096, false, true, DType::BF16, DType::BF16);
    gemm(4096, 4096, 4096, false, true, DType::F32, DType::F32);
    // The Llama-3.2-1B bench layer's GEMMs (8192 tokens; qkv, proj, fc1, fc2): forward x W^T,
    // dgrad dy W, wgrad dy^T x into fp32 gradients.
    for (auto [out, in] : {std::pair<int64_t, int64_t>{3072, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192}}) {
      gemm(8192, out, in, false, true, DType::BF16, DType::BF16);
      gemm(8192, in, out, false, false, DType::BF16, DType::BF16);
      gemm(out, in, 8192, true, false, DType::BF16, DType::F32);
    }
  } else {
    gemm(256, 256, 256, false, true, DType::F32, DType::F32);
    gemm(256, 256, 256, false, false, DType::F32, DType::F32);
  }

  const int64_t n = e.big ? (int64_t(1) << 26) : (int64_t(1) << 20);
  out.push_back({"copy", dims({n}) + " fp32->" + dtype_name(act), act, 0, n * (4 + act_b), [=] {
                   Tensor x = uniform({n}, DType::F32, dev, 1), y = uniform({n}, act, dev, 2);
                   return std::function<void()>([=]() mutable { ops::copy(*ex, y, x); });
                 }});
  out.push_back({"add", dims({n}), act, 0, 3 * n * act_b, [=] {
                   Tensor a = uniform({n}, act, dev, 1), b = uniform({n}, act, dev, 2), y = uniform({n}, act, dev, 3);
                   return std::function<void()>([=]() mutable { ops::add(*ex, y, a, b); });
                 }});
  out.push_back({"axpy", dims({n}) + " fp32", DType::F32, 0, 3 * n * 4.0, [=] {
                   Tensor x = uniform({n}, DType::F32, dev, 1), y = uniform({n}, DType::F32, dev, 2);
                   return std::function<void()>([=]() mutable { ops::axpy(*ex, y, x, 1e-3); });
                 }});
  out.push_back({"sum_squares", dims({n}) + " fp32", DType::F32, 0, n * 4.0, [=] {
                   Tensor x = uniform({n}, DType::F32, dev, 1), o = uniform({1}, DType::F32, dev, 2);
                   return std::function<void()>([=]() mutable { ops::sum_squares(*ex, o, x); });
                 }});

  const int64_t N = e.big ? 16384 : 512, C = e.big ? 4096 : 256, V = e.big ? 50304 : 2048;
  out.push_back(
      {"embedding_fwd", "N=" + dims({N}) + " C=" + dims({C}) + " V=" + dims({V}), act, 0, 2 * N * C * act_b, [=] {
         Tensor t = uniform({V, C}, act, dev, 1), y = uniform({N, C}, act, dev, 2);
         Tensor i = ids(N, V, dev, 3);
         return std::function<void()>([=]() mutable { ops::embedding_fwd(*ex, y, i, t); });
       }});
  out.push_back({"embedding_bwd", "N=" + dims({N}) + " C=" + dims({C}) + " V=" + dims({V}), DType::F32, 0,
                 N * C * act_b + 2.0 * V * C * 4, [=] {
                   Tensor dt = uniform({V, C}, DType::F32, dev, 1), dy = uniform({N, C}, act, dev, 2);
                   Tensor i = ids(N, V, dev, 3);
                   return std::function<void()>([=]() mutable { ops::embedding_bwd(*ex, dt, dy, i); });
                 }});
  const std::string nc = "N=" + dims({N}) + " C=" + dims({C});
  out.push_back(
      {"rmsnorm_fwd", nc, act, 0, 2 * N * C * act_b, [=] {
         Tensor x = uniform({N, C}, act, dev, 1), w = uniform({C}, act, dev, 2), y = uniform({N, C}, act, dev, 3);
         Tensor r = uniform({N}, DType::F32, dev, 4);
         return std::function<void()>([=]() mutable { ops::rmsnorm_fwd(*ex, y, r, x, w, 1e-5); });
       }});
  out.push_back(
      {"rmsnorm_bwd", nc, act, 0, 3 * N * C * act_b, [=] {
         Tensor x = uniform({N, C}, act, dev, 1), w = uniform({C}, act, dev, 2), dy = uniform({N, C}, act, dev, 3);
         Tensor dx = uniform({N, C}, act, dev, 4), dw = uniform({C}, DType::F32, dev, 5);
         Tensor r = uniform({N}, DType::F32, dev, 6, 0.5f, 1.5f);
         return std::function<void()>([=]() mutable { ops::rmsnorm_bwd(*ex, dx, dw, dy, x, w, r); });
       }});
  out.push_back(
      {"add_rmsnorm_fwd", nc, act, 0, 4 * N * C * act_b, [=] {
         Tensor a = uniform({N, C}, act, dev, 1), b = uniform({N, C}, act, dev, 2), w = uniform({C}, act, dev, 3);
         Tensor y = uniform({N, C}, act, dev, 4), r = uniform({N}, DType::F32, dev, 5);
         return std::function<void()>([=]() mutable { ops::add_rmsnorm_fwd(*ex, a, y, r, a, b, w, 1e-5); });
       }});
  out.push_back(
      {"rmsnorm_bwd_add", nc, act, 0, 4 * N * C * act_b, [=] {
         Tensor x = uniform({N, C}, act, dev, 1), w = uniform({C}, act, dev, 2), dy = uniform({N, C}, act, dev, 3);
         Tensor dres = uniform({N, C}, act, dev, 4), dw = uniform({C}, DType::F32, dev, 5);
         Tensor r = uniform({N}, DType::F32, dev, 6, 0.5f, 1.5f);
         return std::function<void()>([=]() mutable { ops::rmsnorm_bwd_add(*ex, dres, dw, dy, x, w, r, dres); });
       }});
  out.push_back(
      {"layernorm_fwd", nc, act, 0, 2 * N * C * act_b, [=] {
         Tensor x = uniform({N, C}, act, dev, 1), w = uniform({C}, act, dev, 2), b = uniform({C}, act, dev, 3);
         Tensor y = uniform({N, C}, act, dev, 4), m = uniform({N}, DType::F32, dev, 5);
         Tensor r = uniform({N}, DType::F32, dev, 6);
         return std::function<void()>([=]() mutable { ops::layernorm_fwd(*ex, y, m, r, x, w, b, 1e-5); });
       }});

  const int64_t F = e.big ? 14336 : 512;
  out.push_back({"swiglu_fwd", "N=" + dims({N}) + " F=" + dims({F}), act, 0, 3 * N * F * act_b, [=] {
                   Tensor x = uniform({N, 2 * F}, act, dev, 1), y = uniform({N, F}, act, dev, 2);
                   return std::function<void()>([=]() mutable { ops::swiglu_fwd(*ex, y, x); });
                 }});
  out.push_back({"swiglu_bwd", "N=" + dims({N}) + " F=" + dims({F}), act, 0, 5 * N * F * act_b, [=] {
                   Tensor x = uniform({N, 2 * F}, act, dev, 1), dy = uniform({N, F}, act, dev, 2);
                   Tensor dx = uniform({N, 2 * F}, act, dev, 3);
                   return std::function<void()>([=]() mutable { ops::swiglu_bwd(*ex, dx, dy, x); });
                 }});
  out.push_back({"gelu_fwd", "N=" + dims({N}) + " F=" + dims({F}), act, 0, 2 * N * F * act_b, [=] {
                   Tensor x = uniform({N, F}, act, dev, 1), y = uniform({N, F}, act, dev, 2);
                   return std::function<void()>([=]() mutable { ops::gelu_fwd(*ex, y, x); });
                 }});
  out.push_back({"sqrelu_fwd", "N=" + dims({N}) + " F=" + dims({F}), act, 0, 2 * N * F * act_b, [=] {
                   Tensor x = uniform({N, F}, act, dev, 1), y = uniform({N, F}, act, dev, 2);
                   return std::function<void()>([=]() mutable { ops::sqrelu_fwd(*ex, y, x); });
                 }});
  out.push_back({"sqrelu_bwd", "N=" + dims({N}) + " F=" + dims({F}), act, 0, 3 * N * F * act_b, [=] {
                   Tensor x = uniform({N, F}, act, dev, 1), dy = uniform({N, F}, act, dev, 2);
                   Tensor dx = uniform({N, F}, act, dev, 3);
                   return std::function<void()>([=]() mutable { ops::sqrelu_bwd(*ex, dx, dy, x); });
                 }});

  const int64_t B = e.big ? 4 : 1, T = e.big ? 4096 : 64, H = e.big ? 32 : 4, D = 128;
  out.push_back({"rope_fwd", dims({B, T, H, D}), act, 0, 2.0 * B * T * H * D * act_b, [=] {
                   Tensor x = uniform({B, T, H, D}, act, dev, 1), y = uniform({B, T, H, D}, act, dev, 2);
                   return std::function<void()>([=]() mutable { ops::rope_fwd(*ex, y, x, D, 10000.0, false); });
                 }});
  out.push_back({"rope_bwd", dims({B, T, H, D}), act, 0, 2.0 * B * T * H * D * act_b, [=] {
                   Tensor x = uniform({B, T, H, D}, act, dev, 1), y = uniform({B, T, H, D}, act, dev, 2);
                   return std::function<void()>([=]() mutable { ops::rope_bwd(*ex, y, x, D, 10000.0, false); });
                 }});

  // Causal attention: FLOPs actually done, two matmuls over the lower triangle (fwd 4*B*H*T*T*D/2,
  // bwd 2.5x fwd). bf16 with D 64/128 runs cuDNN's fused flash attention where the build has cuDNN.
  auto attention = [&](int64_t aB, int64_t aT, int64_t aH, int64_t aHkv, int64_t aD) {
    const double attn_flops = 4.0 * aB * aH * aT * aT * aD / 2;
    const std::string ashape =
        "B=" + dims({aB}) + " T=" + dims({aT}) + " H=" + dims({aH}) + "/" + dims({aHkv}) + " D=" + dims({aD});
    const Shape qs{aB, aT, aH, aD}, ks{aB, aT, aHkv, aD}, ls{aB, aH, aT};
    const double sc = 1.0 / std::sqrt(double(aD));
    out.push_back({"attention_fwd", ashape, act, attn_flops, 0, [=] {
                     Tensor q = uniform(qs, act, dev, 1), k = uniform(ks, act, dev, 2);
                     Tensor v = uniform(ks, act, dev, 3), o = uniform(qs, act, dev, 4);
                     Tensor l = uniform(ls, DType::F32, dev, 5);
                     return std::function<void()>([=]() mutable { ops::attention_fwd(*ex, o, l, q, k, v, sc); });
                   }});
    out.push_back({"attention_bwd", ashape, act, 2.5 * attn_flops, 0, [=] {
                     Tensor q = uniform(qs, act, dev, 1), k = uniform(ks, act, dev, 2);
                     Tensor v = uniform(ks, act, dev, 3), o = uniform(qs, act, dev, 4);
                     Tensor l = uniform(ls, DType::F32, dev, 5);
                     ops::attention_fwd(*ex, o, l, q, k, v, sc);
                     Tensor dout = uniform(qs, act, dev, 6), dq = uniform(qs, act, dev, 7);
                     Tensor dk = uniform(ks, act, dev, 8), dv = uniform(ks, act, dev, 9);
                     return std::function<void()>(
                         [=]() mutable { ops::attention_bwd(*ex, dq, dk, dv, dout, q, k, v, o, l, sc); });
                   }});
  };
  if (e.big) {
    attention(1, 2048, 16, 4, 128);
    attention(2, 4096, 32, 8, 64);
    attention(2, 4096, 16, 8, 128);
  } else {
    attention(1, 64, 2, 1, D);
  }

  // Gated delta rule at the docs/spec/mamba_gdn.md §2 head layout (Hv 32, Hk 16, dk = dv = 128), one
  // micro-batch of bench/configs/qwen3-next-1b.yaml (B 2, T 4096). FLOPs are the sequential recurrence's,
  // per state element and step: 6 forward (S k, S q, update), 16 backward (recompute not counted),
  // whatever the kernels do (the chunked form does more, on tensor cores), so rates compare across versions.
  const int64_t gB = e.big ? 2 : 4, gT = e.big ? 4096 : 128, gHv = e.big ? 32 : 4, gHk = gHv / 2;
  const int64_t gd = e.big ? 128 : 64;
  const std::string gshape =
      "B=" + dims({gB}) + " T=" + dims({gT}) + " H=" + dims({gHv}) + "/" + dims({gHk}) + " d=" + dims({gd});
  const double gdn_elems = double(gB * gT * gHv) * double(gd * gd);
  const Shape gqs{gB, gT, gHk, gd}, gvs{gB, gT, gHv, gd}, ggs{gB, gT, gHv};
  out.push_back({"gated_delta_rule_fwd", gshape, act, 6 * gdn_elems, 0, [=] {
                   Tensor q = uniform(gqs, act, dev, 1), k = uniform(gqs, act, dev, 2), v = uniform(gvs, act, dev, 3);
                   Tensor al = uniform(ggs, act, dev, 4), br = uniform(ggs, act, dev, 5), o = uniform(gvs, act, dev, 6);
                   Tensor A = uniform({gHv}, DType::F32, dev, 7, 0.0f, 2.7f), dtb = uniform({gHv}, DType::F32, dev, 8);
                   return std::function<void()>(
                       [=]() mutable { ops::gated_delta_rule_fwd(*ex, o, q, k, v, al, br, A, dtb, 64); });
                 }});
  out.push_back({"gated_delta_rule_bwd", gshape, act, 16 * gdn_elems, 0, [=] {
                   Tensor q = uniform(gqs, act, dev, 1), k = uniform(gqs, act, dev, 2), v = uniform(gvs, act, dev, 3);
                   Tensor al = uniform(ggs, act, dev, 4), br = uniform(ggs, act, dev, 5), d = uniform(gvs, act, dev, 6);
                   Tensor A = uniform({gHv}, DType::F32, dev, 7, 0.0f, 2.7f), dtb = uniform({gHv}, DType::F32, dev, 8);
                   Tensor dq = uniform(gqs, act, dev, 9), dk = uniform(gqs, act, dev, 10),
                          dv = uniform(gvs, act, dev, 11);
                   Tensor da = uniform(ggs, act, dev, 12), db = uniform(ggs, act, dev, 13);
                   Tensor dA = uniform({gHv}, DType::F32, dev, 14), ddt = uniform({gHv}, DType::F32, dev, 15);
                   return std::function<void()>([=]() mutable {
                     ops::gated_delta_rule_bwd(*ex, dq, dk, dv, da, db, dA, ddt, d, q, k, v, al, br, A, dtb, 64);
                   });
                 }});

  // Mamba-2 SSD scan at nemotron-h-1b's mixer (B 2, T 4096, H 64, P 64, N 128, G 8, chunk 128), in the
  // record of bench/peer/ssd_peer.py (mamba_ssm's Triton scan): model FLOPs, Megatron's 7 d_inner N per
  // token forward and twice that backward (the kernels' own products: about 0.75x and 2.75x of that).
  const int64_t sB = 2, sT = e.big ? 4096 : 256, sH = e.big ? 64 : 8, sP = 64, sN = e.big ? 128 : 64;
  const int64_t sG = e.big ? 8 : 2, sQ = e.big ? 128 : 64;
  const std::string sshape = "B=" + dims({sB}) + " T=" + dims({sT}) + " H=" + dims({sH}) + " P=" + dims({sP}) +
                             " G=" + dims({sG}) + " N=" + dims({sN}) + " chunk=" + dims({sQ});
  const double s_fwd = 7.0 * double(sB * sT) * double(sH * sP) * double(sN);
  const Shape sxs{sB, sT, sH, sP}, sbs{sB, sT, sG, sN}, sds{sB, sT, sH};
  auto ssd_inputs = [=] {
    return std::vector<Tensor>{uniform(sxs, act, dev, 1),
                               uniform(sds, act, dev, 2, -4.0f, 0.0f),
                               uniform(sbs, act, dev, 3),
                               uniform(sbs, act, dev, 4),
                               uniform({sH}, DType::F32, dev, 5, -1.0f, 0.5f),
                               uniform({sH}, DType::F32, dev, 6, 0.0f, 2.7f),
                               uniform({sH}, DType::F32, dev, 7, 0.5f, 1.5f)};  // x, dt_raw, Bm, Cm, dt_bias, A_log, D
  };
  out.push_back({"ssd_chunk_scan_fwd", sshape, act, s_fwd, 0, [=] {
                   std::vector<Tensor> in = ssd_inputs();
                   Tensor y = uniform(sxs, act, dev, 8);
                   return std::function<void()>([=]() mutable {
                     ops::ssd_chunk_scan_fwd(*ex, y, in[0], in[1], in[2], in[3], in[4], in[5], in[6], sQ, nullptr);
                   });
                 }});
  out.push_back({"ssd_chunk_scan_bwd", sshape, act, 2 * s_fwd, 0, [=] {
                   std::vector<Tensor> in = ssd_inputs();
                   Tensor dy = uniform(sxs, act, dev, 8), dx = uniform(sxs, act, dev, 9);
                   Tensor ddt = uniform(sds, act, dev, 10), dB = uniform(sbs, act, dev, 11),
                          dC = uniform(sbs, act, dev, 12);
                   Tensor g0 = uniform({sH}, DType::F32, dev, 13), g1 = uniform({sH}, DType::F32, dev, 14);
                   Tensor g2 = uniform({sH}, DType::F32, dev, 15);
                   return std::function<void()>([=]() mutable {
                     ops::ssd_chunk_scan_bwd(*ex, dx, ddt, dB, dC, g0, g1, g2, dy, in[0], in[1], in[2], in[3], in[4],
                                             in[5], in[6], sQ, nullptr);
                   });
                 }});
  // As training runs it: the forward keeps its dt, decay sums and chunk states for the backward.
  out.push_back({"ssd_chunk_scan_bwd", sshape + " kept", act, 2 * s_fwd, 0, [=] {
                   std::vector<Tensor> in = ssd_inputs();
                   Tensor y = uniform(sxs, act, dev, 8), dy = uniform(sxs, act, dev, 8), dx = uniform(sxs, act, dev, 9);
                   Tensor ddt = uniform(sds, act, dev, 10), dB = uniform(sbs, act, dev, 11),
                          dC = uniform(sbs, act, dev, 12);
                   Tensor g0 = uniform({sH}, DType::F32, dev, 13), g1 = uniform({sH}, DType::F32, dev, 14);
                   Tensor g2 = uniform({sH}, DType::F32, dev, 15);
                   std::vector<Tensor> kept;
                   ops::ssd_chunk_scan_fwd(*ex, y, in[0], in[1], in[2], in[3], in[4], in[5], in[6], sQ, &kept);
                   return std::function<void()>([=]() mutable {
                     ops::ssd_chunk_scan_bwd(*ex, dx, ddt, dB, dC, g0, g1, g2, dy, in[0], in[1], in[2], in[3], in[4],
                                             in[5], in[6], sQ, &kept);
                   });
                 }});

  const int64_t cN = e.big ? 8192 : 256, cC = e.big ? 4096 : 128, cV = e.big ? 50304 : 2048;
  const std::string cshape = "N=" + dims({cN}) + " C=" + dims({cC}) + " V=" + dims({cV});
  out.push_back({"lm_head_ce_fwd", cshape, act, 2.0 * cN * cC * cV, 0, [=] {
                   Tensor x = uniform({cN, cC}, act, dev, 1), w = uniform({cV, cC}, act, dev, 2);
                   Tensor lab = ids(cN, cV, dev, 3), loss = uniform({cN}, DType::F32, dev, 4);
                   Tensor lse = uniform({cN}, DType::F32, dev, 5);
                   return std::function<void()>(
                       [=]() mutable { ops::lm_head_ce_fwd(*ex, loss, lse, x, w, lab, 4096); });
                 }});
  out.push_back({"lm_head_ce_bwd", cshape, act, 6.0 * cN * cC * cV, 0, [=] {
                   Tensor x = uniform({cN, cC}, act, dev, 1), w = uniform({cV, cC}, act, dev, 2);
                   Tensor lab = ids(cN, cV, dev, 3), loss = uniform({cN}, DType::F32, dev, 4);
                   Tensor lse = uniform({cN}, DType::F32, dev, 5);
                   ops::lm_head_ce_fwd(*ex, loss, lse, x, w, lab, 4096);
                   Tensor dloss = uniform({cN}, DType::F32, dev, 6), dx = uniform({cN, cC}, act, dev, 7);
                   Tensor dw = uniform({cV, cC}, DType::F32, dev, 8);
                   return std::function<void()>(
                       [=]() mutable { ops::lm_head_ce_bwd(*ex, dx, dw, dloss, x, w, lab, lse, 4096); });
                 }});

  // MoE token movement and expert activation: mN tokens routed to top-4 experts (mR = 4 mN rows).
  const int64_t mN = e.big ? 8192 : 256, mR = 4 * mN, mC = e.big ? 4096 : 256, mF = e.big ? 2048 : 256;
  const std::string mrc = "R=" + dims({mR}) + " C=" + dims({mC});
  out.push_back({"gather_rows", mrc + " N=" + dims({mN}), act, 0, 2.0 * mR * mC * act_b, [=] {
                   Tensor x = uniform({mN, mC}, act, dev, 1), y = uniform({mR, mC}, act, dev, 2);
                   Tensor i = ids(mR, mN, dev, 3);
                   return std::function<void()>([=]() mutable { ops::gather_rows(*ex, y, x, i); });
                 }});
  out.push_back({"scatter_add_rows", mrc + " N=" + dims({mN}), act, 0, (mR + mN) * mC * act_b, [=] {
                   Tensor x = uniform({mR, mC}, act, dev, 1), y = uniform({mN, mC}, act, dev, 2);
                   Tensor off = Tensor::empty({mN + 1}, DType::I32), rows = Tensor::empty({mR}, DType::I32);
                   for (int64_t t = 0; t <= mN; ++t) off.data<int32_t>()[t] = int32_t(4 * t);
                   for (int64_t j = 0; j < mR; ++j) rows.data<int32_t>()[j] = int32_t(j * 7919 % mR);  // a permutation
                   Tensor o = off.to(dev), r = rows.to(dev);
                   return std::function<void()>([=]() mutable { ops::scatter_add_rows(*ex, y, x, o, r); });
                 }});
  for (bool fwd : {true, false})
    for (int64_t I : {int64_t(0), int64_t(2)}) {
      // SwiGLU plain without clamp; QuickGeGLU interleaved with the GPT-OSS offset 1 and clamp 7.
      const ops::ExpertActivation k = I == 0 ? ops::ExpertActivation::SwiGLU : ops::ExpertActivation::QuickGeGLU;
      const double offset = I == 0 ? 0.0 : 1.0, clamp = I == 0 ? 0.0 : 7.0;
      const std::string shape = "R=" + dims({mR}) + " F=" + dims({mF}) + (I == 0 ? " swiglu" : " qgeglu I=2 L=7");
      out.push_back({fwd ? "moe_act_fwd" : "moe_act_bwd", shape, act, 0, (fwd ? 3.0 : 5.0) * mR * mF * act_b, [=] {
                       Tensor h = uniform({mR, 2 * mF}, act, dev, 1), p = uniform({mR}, DType::F32, dev, 2, 0.0f, 1.0f);
                       Tensor y = uniform({mR, mF}, act, dev, 3), dh = uniform({mR, 2 * mF}, act, dev, 4);
                       Tensor dp = uniform({mR}, DType::F32, dev, 5);
                       return std::function<void()>([=]() mutable {
                         if (fwd)
                           ops::moe_act_fwd(*ex, y, h, p, k, I, offset, clamp);
                         else
                           ops::moe_act_bwd(*ex, dh, dp, y, h, p, k, I, offset, clamp);
                       });
                     }});
    }

  out.push_back({"adamw", dims({n}) + " copy=" + dtype_name(act), DType::F32, 0, n * (7 * 4.0 + act_b), [=] {
                   Tensor p = uniform({n}, DType::F32, dev, 1), m = uniform({n}, DType::F32, dev, 2);
                   Tensor v = uniform({n}, DType::F32, dev, 3, 0.0f, 1.0f), g = uniform({n}, DType::F32, dev, 4);
                   Tensor pc = uniform({n}, act, dev, 5);
                   return std::function<void()>(
                       [=]() mutable { ops::adamw(*ex, p, m, v, g, pc, 1e-4, 0.9, 0.95, 1e-8, 0.1, 1.0, 10); });
                 }});
  // Mamba-2 mixer shapes (docs/spec/mamba_gdn.md §1): conv over the 2*d_inner + 2*G*N = 10240 xBC channels of
  // d_model 4096; the gated norm over d_inner 8192 in G = 8 groups.
  const int64_t Bc = 2, Tc = e.big ? 4096 : 256, Cc = e.big ? 10240 : 256, Kc = 4;
  const std::string btc = "B=" + dims({Bc}) + " T=" + dims({Tc}) + " C=" + dims({Cc}) + " K=4 silu";
  out.push_back({"conv1d_fwd", btc, act, 0, 2.0 * Bc * Tc * Cc * act_b, [=] {
                   Tensor x = uniform({Bc, Tc, Cc}, act, dev, 1), w = uniform({Cc, Kc}, act, dev, 2);
                   Tensor b = uniform({Cc}, act, dev, 3), y = uniform({Bc, Tc, Cc}, act, dev, 4);
                   return std::function<void()>([=]() mutable { ops::conv1d_fwd(*ex, y, x, w, b, true); });
                 }});
  out.push_back({"conv1d_bwd", btc, act, 0, 3.0 * Bc * Tc * Cc * act_b, [=] {
                   Tensor x = uniform({Bc, Tc, Cc}, act, dev, 1), w = uniform({Cc, Kc}, act, dev, 2);
                   Tensor b = uniform({Cc}, act, dev, 3), dy = uniform({Bc, Tc, Cc}, act, dev, 4);
                   Tensor dx = uniform({Bc, Tc, Cc}, act, dev, 5), dw = uniform({Cc, Kc}, DType::F32, dev, 6);
                   Tensor db = uniform({Cc}, DType::F32, dev, 7);
                   return std::function<void()>([=]() mutable { ops::conv1d_bwd(*ex, dx, dw, db, dy, x, w, b, true); });
                 }});
  const int64_t Ng = e.big ? 8192 : 512, Cg = e.big ? 8192 : 256, gs = Cg / 8;
  const std::string ncg = "N=" + dims({Ng}) + " C=" + dims({Cg}) + " gs=" + dims({gs});
  out.push_back({"gated_rmsnorm_fwd", ncg, act, 0, 3.0 * Ng * Cg * act_b, [=] {
                   Tensor x = uniform({Ng, Cg}, act, dev, 1), z = uniform({Ng, Cg}, act, dev, 2);
                   Tensor w = uniform({Cg}, act, dev, 3), y = uniform({Ng, Cg}, act, dev, 4);
                   Tensor r = uniform({Ng, Cg / gs}, DType::F32, dev, 5);
                   return std::function<void()>(
                       [=]() mutable { ops::gated_rmsnorm_fwd(*ex, y, r, x, z, w, gs, 1e-5, false); });
                 }});
  out.push_back({"gated_rmsnorm_bwd", ncg, act, 0, 5.0 * Ng * Cg * act_b, [=] {
                   Tensor x = uniform({Ng, Cg}, act, dev, 1), z = uniform({Ng, Cg}, act, dev, 2);
                   Tensor w = uniform({Cg}, act, dev, 3), dy = uniform({Ng, Cg}, act, dev, 4);
                   Tensor dx = uniform({Ng, Cg}, act, dev, 5), dz = uniform({Ng, Cg}, act, dev, 6);
                   Tensor dw = uniform({Cg}, DType::F32, dev, 7);
                   Tensor r = uniform({Ng, Cg / gs}, DType::F32, dev, 8, 0.5f, 1.5f);
                   return std::function<void()>(
                       [=]() mutable { ops::gated_rmsnorm_bwd(*ex, dx, dz, dw, dy, x, z, w, r, gs, false); });
                 }});
  if (e.big) {
    moe2b_expert_entries(out, e);
    nemotron_mixer_entries(out, e);
    target_model_entries(out, e);
    mhc_entries(out, e);
  }
  return out;
}

// Median milliseconds of `repeats` calls after `warmup` calls.
double median_ms(const Env& e, const std::function<void()>& call, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) call();
  e.ex->synchronize();
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
#if defined(HYTRA_HAVE_CUDA)
    if (e.dev == Device::CUDA) {
      cuda::EventTimer timer(e.ex->stream());
      timer.start();
      call();
      ms.push_back(timer.stop_ms());
      continue;
    }
#endif
    auto t0 = std::chrono::steady_clock::now();
    call();
    e.ex->synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace
}  // namespace hytra

int main(int argc, char** argv) {
  using namespace hytra;
  std::string only;
  int repeats = 10;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [-o <op>] [--repeats <n>]\n", argv[0]);
      return 2;
    }
  }
  const bool gpu = cuda_available();
  Env env{gpu ? &Exec::cuda() : &Exec::cpu(), gpu ? Device::CUDA : Device::CPU, gpu};
  std::string device = "cpu";
#if defined(HYTRA_HAVE_CUDA)
  if (gpu) device = cuda::device_name();
#endif
  std::printf("%-15s %-32s %-5s %10s %14s  %s\n", "op", "shape", "dtype", "ms", "rate", "device");
  int failed = 0, matched = 0;
  for (const Entry& en : entries(env)) {
    if (!only.empty() && en.op != only) continue;
    ++matched;
    try {
      std::function<void()> call = en.setup();
      const double ms = median_ms(env, call, 2, repeats);
      char rate[64];
      const double flops_per_s = en.flops / (ms * 1e-3);
      if (en.flops > 0 && flops_per_s >= 1e12)
        std::snprintf(rate, sizeof(rate), "%.1f TFLOP/s", flops_per_s / 1e12);
      else if (en.flops > 0)
        std::snprintf(rate, sizeof(rate), "%.2f GFLOP/s", flops_per_s / 1e9);
      else
        std::snprintf(rate, sizeof(rate), "%.1f GB/s", en.bytes / (ms * 1e-3) / 1e9);
      std::printf("%-15s %-32s %-5s %10.4f %14s  %s\n", en.op.c_str(), en.shape.c_str(), dtype_name(en.dtype), ms, rate,
                  device.c_str());
    } catch (const std::exception& ex) {
      ++failed;
      std::printf("%-15s %-32s %-5s error: %s\n", en.op.c_str(), en.shape.c_str(), dtype_name(en.dtype), ex.what());
    }
    std::fflush(stdout);
  }
  if (matched == 0) {
    std::fprintf(stderr, "bench_ops: no benchmark for op '%s'\n", only.c_str());
    return 2;
  }
  return failed == 0 ? 0 : 1;
}
