// Linear: y = x W^T (+ b) over the last dim; W (out, in), b (out). Key `<prefix>weight` / `<prefix>bias`.
// backward: dx = dy W (=); dW += dy^T x and db += column sums of dy, at once or, under
// ctx.delay_wgrad, as a queued task (same GEMMs, same order: bitwise-identical gradients).
// Tensor parallelism (nn/tensor_parallel.h), `in` and `out` being this rank's sizes:
//   Column: W holds this rank's output rows (of each part of the output, e.g. a GLU's two halves) and b its
//           entries; the input is whole, so dx is summed over the ranks.
//   Row:    W holds this rank's input columns; y = the sum over the ranks of x W^T, then + b (b whole).
// Under sequence parallelism a column-parallel projection gathers its input's sequence first (backward: dx
// reduce-scattered), and a row-parallel one reduce-scatters its sums (backward: dy gathered first), both on
// (B, T, features) activations.
#pragma once
#include <string>
#include <vector>

#include "nn/module.h"
#include "nn/param.h"
#include "nn/tensor_parallel.h"

namespace hytra {

struct LinearSplit {
  enum Kind { None, Column, Row } kind = None;
  TensorParallel tp;
  std::vector<int64_t> parts;  // Column: the output's parts (local sizes; empty: one part)
};

class Linear : public Module {
 public:
  Linear(const std::string& prefix, int64_t in, int64_t out, bool bias, double init_std, ParamStore& store,
         const LinearSplit& split = {});

  Tensor forward(StepContext& ctx, const Tensor& x) override;    // x (..., in) -> (..., out)
  Tensor backward(StepContext& ctx, const Tensor& dy) override;  // dy (..., out) -> dx (..., in)
  void backward_dw(StepContext& ctx) override { ctx.run_wgrad(this); }

  Param& weight() { return *w_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  struct Saved {
    Tensor x;  // (N, in); sequence parallelism, column-parallel: (B, T / tp, in), this rank's tokens
  };
  int64_t in_, out_;
  LinearSplit split_;
  Param* w_;
  Param* b_ = nullptr;
};

// A (n, 1) tensor of ones in dtype t on `device`, used to add and reduce biases by GEMM.
Tensor ones_column(Exec& ex, int64_t n, DType t, Device device);
// A zeroed tensor, zeroed on ex's stream (safe inside a CUDA graph capture, unlike Tensor::zeros).
Tensor zeros_on(Exec& ex, const Shape& shape, DType t, Device device);

}  // namespace hytra
