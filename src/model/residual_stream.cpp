#include "model/residual_stream.h"

#include "nn/hyper_connection.h"
#include "nn/pre_norm.h"
#include "nn/recompute.h"
#include "ops/ops.h"

namespace hytra {

ResidualStream::ResidualStream(const ModelConfig& cfg, std::vector<std::unique_ptr<Module>>& sublayers,
                               Norm* final_norm, std::vector<bool> selective_body, std::vector<bool> mhc_block_start)
    : cfg_(cfg),
      sublayers_(sublayers),
      final_norm_(final_norm),
      selective_body_(std::move(selective_body)),
      mhc_block_start_(std::move(mhc_block_start)) {}

ResidualStream::State ResidualStream::enter(StepContext& ctx, const Tensor& h) {
  State st = resume(ctx, h);
  if (!cfg_.enable_mhc) return st;
  Saved& s = *st.saved;
  const int64_t n = cfg_.mhc_num_residual_streams, C = cfg_.hidden_size, B = h.size(0), T = h.size(1);
  Tensor X = Tensor::empty({B, T, n, C}, h.dtype(), h.device());
  Tensor X3 = X.view({B * T, n, C});
  for (int64_t i = 0; i < n; ++i) ops::slice_scatter(ctx.ex(), X3, h.view({B * T, 1, C}), 1, i);
  return {X, Tensor(), &s};
}

void ResidualStream::step(StepContext& ctx, size_t i, State& st) {
  Module* layer = sublayers_[i].get();
  if (cfg_.enable_mhc) {  // the wrapper mixes the streams; selective "mhc" keeps only a block's input
    const Tensor X_in = st.h;
    st.h = layer->forward(ctx, st.h);
    if (!mhc_block_start_.empty() && !ctx.recomputing) {
      if (mhc_block_start_[i])
        st.saved->mhc_block_in[i] = X_in;
      else
        static_cast<HyperConnection*>(layer)->drop_streams(ctx);
    }
    return;
  }
  auto* pre = dynamic_cast<PreNormModule*>(layer);
  auto body = [&](const Tensor& y) {  // selective recompute keeps only the body's input
    const bool drop = selective_body_[i] && !ctx.recomputing;
    if (drop) st.saved->body_in[i] = y;
    DropScope keep(ctx, drop);
    return pre->forward_body(ctx, y);
  };
  if (!st.f.defined()) {
    st.f = pre ? body(pre->input_norm().forward(ctx, st.h)) : layer->forward(ctx, st.h);
  } else if (pre) {
    Tensor sum;
    Tensor y = pre->input_norm().forward_add(ctx, st.h, st.f, sum);
    st.h = sum;
    st.f = body(y);
  } else {
    Tensor next = Tensor::empty(st.h.shape(), st.h.dtype(), st.h.device());
    ops::add(ctx.ex(), next, st.h, st.f);
    st.h = next;
    st.f = layer->forward(ctx, st.h);
  }
}

Tensor ResidualStream::leave(StepContext& ctx, State& st) {
  if (!cfg_.enable_mhc) {
    Tensor sum;
    return final_norm_->forward_add(ctx, st.h, st.f, sum);
  }
  const int64_t B = st.h.size(0), T = st.h.size(1), n = st.h.size(2), C = st.h.size(3), N = B * T;
  Saved& s = *st.saved;
  s.mhc_X = st.h.view({N, n, C});
  s.mhc_mean = Tensor::empty({N, n}, stat_dtype(st.h.dtype()), st.h.device());
  ops::fill(ctx.ex(), s.mhc_mean, 1.0 / double(n));
  Tensor out = Tensor::empty({N, C}, st.h.dtype(), st.h.device());
  ops::mhc_aggregate_fwd(ctx.ex(), out, s.mhc_X, s.mhc_mean);
  return final_norm_->forward(ctx, out.view({B, T, C}));
}

ResidualStream::State ResidualStream::resume(StepContext& ctx, const Tensor& x) {
  Saved& s = ctx.saved<Saved>(this);
  s.body_in.assign(sublayers_.size(), Tensor());
  s.mhc_block_in.assign(sublayers_.size(), Tensor());
  return {x, Tensor(), &s};
}

Tensor ResidualStream::exit(StepContext& ctx, State& st) {
  if (!st.f.defined()) return st.h;  // mHC: the streams (the wrappers add their outputs themselves)
  Tensor out = Tensor::empty(st.h.shape(), st.h.dtype(), st.h.device());
  ops::add(ctx.ex(), out, st.h, st.f);
  return out;
}

Tensor ResidualStream::enter_backward(StepContext& ctx, const Tensor& dy) {
  const Tensor dout = final_norm_->backward(ctx, dy);  // plain: d(the last sum)
  if (!cfg_.enable_mhc) return dout;
  Saved& s = ctx.saved<Saved>(this);
  const Tensor X = s.mhc_X, mean = s.mhc_mean;
  s.mhc_X = s.mhc_mean = Tensor();
  const int64_t N = X.size(0), n = X.size(1), C = X.size(2);
  Tensor dX = Tensor::empty(X.shape(), X.dtype(), X.device());
  ops::fill(ctx.ex(), dX, 0.0);  // zeroed on the stream (a CUDA graph captures it)
  Tensor unused = Tensor::empty({N, n}, mean.dtype(), X.device());
  ops::mhc_aggregate_bwd(ctx.ex(), dX, unused, dout.view({N, C}), X, mean);
  return dX.view({dout.size(0), dout.size(1), n, C});
}

Tensor ResidualStream::step_backward(StepContext& ctx, size_t i, const Tensor& d) {
  Saved& s = ctx.saved<Saved>(this);
  Module* layer = sublayers_[i].get();
  if (cfg_.enable_mhc) {
    if (!mhc_block_start_.empty() && (i + 1 == sublayers_.size() || mhc_block_start_[i + 1])) {
      // The block's last layer: rebuild every dropped input stream of the block, in forward order.
      size_t first = i;
      while (!mhc_block_start_[first]) --first;
      Tensor Xr = s.mhc_block_in[first];
      for (size_t j = first; j < i; ++j)
        Xr = static_cast<HyperConnection*>(sublayers_[j].get())->rebuild_streams(ctx, Xr);
      if (i != first) static_cast<HyperConnection*>(layer)->rebuild_streams(ctx, Xr);
    }
    return layer->backward(ctx, d);
  }
  // h_next = h + f(h): dh = dh_next + df/dh, the add fused into the input norm's backward.
  if (auto* pre = dynamic_cast<PreNormModule*>(layer)) {
    if (s.body_in[i].defined()) {  // selective recompute: the body's forward again
      RerunScope rerun(ctx);
      pre->forward_body(ctx, s.body_in[i]);
    }
    return pre->input_norm().backward_add(ctx, pre->backward_body(ctx, d), d);
  }
  Tensor dh = d;
  ops::axpy(ctx.ex(), dh, layer->backward(ctx, d), 1.0);
  return dh;
}

Tensor ResidualStream::leave_backward(StepContext& ctx, const Tensor& d) {
  if (!cfg_.enable_mhc) return d;
  // The replication's backward: the sum over streams.
  const int64_t B = d.size(0), T = d.size(1), n = d.size(2), C = d.size(3), N = B * T;
  Tensor ones = Tensor::empty({N, n}, stat_dtype(d.dtype()), d.device());
  ops::fill(ctx.ex(), ones, 1.0);
  Tensor dh = Tensor::empty({B, T, C}, d.dtype(), d.device());
  Tensor dh2 = dh.view({N, C});
  ops::mhc_aggregate_fwd(ctx.ex(), dh2, d.view({N, n, C}), ones);
  return dh;
}

}  // namespace hytra
