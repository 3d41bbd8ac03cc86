#include "nn/channel_conv.h"

#include "core/error.h"
#include "ops/ops.h"

namespace hytra {

void channel_conv_fwd(Exec& ex, const std::vector<Tensor*>& parts, const Tensor& in, const Tensor& w,
                      const Tensor& bias) {
  const int64_t B = in.size(0), T = in.size(1);
  HYTRA_ASSERT(B * T > 0, "channel_conv_fwd of an empty batch");
  int64_t c0 = 0;
  for (Tensor* part : parts) {
    const int64_t width = part->numel() / (B * T);
    Tensor out = part->view({B, T, width});
    ops::conv1d_fwd(ex, out, in.narrow(2, c0, width), w.narrow(0, c0, width), bias.narrow(0, c0, width), true);
    c0 += width;
  }
  HYTRA_ASSERT(c0 == in.size(2), "channel_conv_fwd: the parts cover ", c0, " of ", in.size(2), " channels");
}

void channel_conv_bwd(Exec& ex, const Tensor& din, Tensor& dw, Tensor& dbias, const std::vector<const Tensor*>& dparts,
                      const Tensor& in, const Tensor& w, const Tensor& bias) {
  const int64_t B = in.size(0), T = in.size(1);
  HYTRA_ASSERT(B * T > 0, "channel_conv_bwd of an empty batch");
  int64_t c0 = 0;
  for (const Tensor* part : dparts) {
    const int64_t width = part->numel() / (B * T);
    Tensor dx = din.narrow(2, c0, width), dw_part = dw.narrow(0, c0, width), db_part = dbias.narrow(0, c0, width);
    ops::conv1d_bwd(ex, dx, dw_part, db_part, part->view({B, T, width}), in.narrow(2, c0, width),
                    w.narrow(0, c0, width), bias.narrow(0, c0, width), true);
    c0 += width;
  }
  HYTRA_ASSERT(c0 == in.size(2), "channel_conv_bwd: the parts cover ", c0, " of ", in.size(2), " channels");
}

void channel_conv_step(Exec& ex, const std::vector<Tensor*>& parts, Tensor& state, const Tensor& in, int64_t start,
                       const Tensor& w, const Tensor& bias) {
  const int64_t B = in.size(0), C = w.size(0);
  HYTRA_ASSERT(in.dim() == 3 && in.size(1) == 1, "channel_conv_step takes one token per sequence, got ", in.desc());
  Tensor x = Tensor::empty({B, 1, C}, in.dtype(), in.device());
  ops::slice_copy(ex, x, in, 2, start);
  Tensor y = Tensor::empty({B, C}, in.dtype(), in.device());
  ops::conv1d_step(ex, y, state, x.view({B, C}), w, bias, true);
  int64_t c0 = 0;
  for (Tensor* part : parts) {
    Tensor out = part->view({B, part->numel() / B});
    ops::slice_copy(ex, out, y, 1, c0);
    c0 += out.size(1);
  }
  HYTRA_ASSERT(c0 == C, "channel_conv_step: the parts cover ", c0, " of ", C, " channels");
}

}  // namespace hytra
