#include "nn/hyper_connection.h"

#include <cmath>

#include "core/error.h"
#include "nn/recompute.h"

namespace hytra {

HyperConnection::HyperConnection(const HyperConnectionOptions& o, const std::string& prefix,
                                 std::unique_ptr<Module> layer, ParamStore& store)
    : opt_(o), layer_(std::move(layer)) {
  const int64_t n = o.streams, C = o.hidden, P = n * n + 2 * n;
  HYTRA_ASSERT(n >= 1 && C >= 1, prefix);  // a validated configuration's (ModelConfig::validate)
  w_ = &store.create(prefix + "mapping_proj.weight", {P, n * C}, InitKind::Uniform, 0.0, false);
  w_->master_in_forward = true;
  const double bound = std::sqrt(6.0 / double(P + n * C));  // xavier-uniform
  w_->init_lo = -bound;
  w_->init_hi = bound;
  const char* names[3] = {"alpha_pre", "alpha_post", "alpha_res"};
  for (int i = 0; i < 3; ++i) {
    alpha_[i] = &store.create(prefix + names[i], {1}, InitKind::Uniform, 0.0, true);
    alpha_[i]->master_in_forward = true;
    alpha_[i]->init_lo = alpha_[i]->init_hi = o.init_gating;  // the constant factor
  }
  bias_ = &store.create(prefix + "bias", {P}, InitKind::Zeros, 0.0, true);
  bias_->master_in_forward = true;
  for (Param* p : {w_, alpha_[0], alpha_[1], alpha_[2], bias_}) sequence_parallel_grad(*p, o.tp);
}

Tensor HyperConnection::forward(StepContext& ctx, const Tensor& X4) {
  Exec& ex = ctx.ex();
  const int64_t n = opt_.streams, C = opt_.hidden, P = n * n + 2 * n;
  HYTRA_CHECK(X4.dim() == 4 && X4.size(2) == n && X4.size(3) == C, "hyper_connection: streams must be (B,T,", n, ",", C,
              "), got ", X4.desc());
  const int64_t B = X4.size(0), T = X4.size(1), N = B * T;
  const DType sd = stat_dtype(X4.dtype());
  const Device dev = X4.device();
  Saved& s = ctx.saved<Saved>(this);
  s.shape = X4.shape();
  s.X = X4.view({N, n, C});
  const Tensor x = s.X.view({N, n * C});
  s.proj = Tensor::empty({N, P}, sd, dev);
  s.rms = Tensor::empty({N}, sd, dev);
  ops::mhc_proj_fwd(ex, s.proj, s.rms, x, w_->master);
  s.h_pre = Tensor::empty({N, n}, sd, dev);
  s.h_post = Tensor::empty({N, n}, sd, dev);
  s.h_res = Tensor::empty({N, n, n}, sd, dev);
  s.r = Tensor::empty({N}, sd, dev);
  ops::mhc_coeffs_fwd(ex, s.h_pre, s.h_post, s.h_res, s.r, s.rms, s.proj, alpha_[0]->master, alpha_[1]->master,
                      alpha_[2]->master, bias_->master, opt_.sinkhorn_iterations, opt_.variant);
  Tensor u = Tensor::empty({N, C}, X4.dtype(), dev);
  ops::mhc_aggregate_fwd(ex, u, s.X, s.h_pre);
  const bool drop = opt_.recompute_layer && !ctx.recomputing;  // keep the sub-layer's input only
  if (drop) s.u = u.view({B, T, C});
  {
    DropScope keep(ctx, drop);
    s.F = layer_->forward(ctx, u.view({B, T, C})).view({N, C});
  }
  Tensor Y = Tensor::empty({N, n, C}, X4.dtype(), dev);
  ops::mhc_combine_fwd(ex, Y, s.X, s.F, s.h_res, s.h_post);
  return Y.view(s.shape);
}

void HyperConnection::drop_streams(StepContext& ctx) {
  Saved& s = ctx.saved<Saved>(this);
  s.X = Tensor();
}

Tensor HyperConnection::rebuild_streams(StepContext& ctx, const Tensor& X4) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  const int64_t n = opt_.streams, C = opt_.hidden, N = s.F.size(0);
  s.X = X4.view({N, n, C});
  Tensor Y = Tensor::empty({N, n, C}, X4.dtype(), X4.device());
  ops::mhc_combine_fwd(ex, Y, s.X, s.F, s.h_res, s.h_post);
  return Y.view(s.shape);
}

Tensor HyperConnection::backward(StepContext& ctx, const Tensor& dY4) {
  Exec& ex = ctx.ex();
  Saved& s = ctx.saved<Saved>(this);
  const int64_t n = opt_.streams, C = opt_.hidden, N = s.X.size(0), P = n * n + 2 * n;
  const DType dt = s.X.dtype(), sd = stat_dtype(dt);
  const Device dev = s.X.device();
  Tensor dX = Tensor::empty({N, n, C}, dt, dev), dF = Tensor::empty({N, C}, dt, dev);
  Tensor dh_res = Tensor::empty({N, n, n}, sd, dev), dh_post = Tensor::empty({N, n}, sd, dev);
  ops::mhc_combine_bwd(ex, dX, dF, dh_res, dh_post, dY4.view({N, n, C}), s.X, s.F, s.h_res, s.h_post);
  if (s.u.defined()) {  // selective recompute: the sub-layer's forward again
    RerunScope rerun(ctx);
    layer_->forward(ctx, s.u);
  }
  const Tensor du = layer_->backward(ctx, dF.view({s.shape[0], s.shape[1], C})).view({N, C});
  // The mapping's gradients first (dh_pre alone: the aggregation's dX term waits for the one pass below), then every
  // term of dX before the sub-layer (aggregation, projection, r path) added in one pass over the streams.
  Tensor dh_pre = Tensor::empty({N, n}, sd, dev);
  Tensor no_dX;
  ops::mhc_aggregate_bwd(ex, no_dX, dh_pre, du, s.X, s.h_pre);
  Tensor dproj = Tensor::empty({N, P}, sd, dev), dr = Tensor::empty({N}, sd, dev);
  ops::mhc_coeffs_bwd(ex, dproj, dr, alpha_[0]->grad, alpha_[1]->grad, alpha_[2]->grad, bias_->grad, dh_pre, dh_post,
                      dh_res, s.proj, alpha_[0]->master, alpha_[1]->master, alpha_[2]->master, bias_->master, s.r,
                      opt_.sinkhorn_iterations, opt_.variant);
  ops::mhc_streams_bwd(ex, dX, w_->grad, dproj, dr, s.r, s.rms, du, s.h_pre, s.X, w_->master);
  s = Saved{};
  return dX.view(dY4.shape());
}

}  // namespace hytra
