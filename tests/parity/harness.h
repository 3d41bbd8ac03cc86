// The parity harness: each case runs one op on CUDA and on the CPU reference with the same fresh
// random inputs and names the outputs to compare. Cases register themselves from
// tests/parity/cases/<family>.cpp (one file per op family), so adding a file adds its cases.
// Inputs are drawn on the host in the case's dtype; the CPU reference runs on fp32 copies of
// exactly those values, the CUDA op on device copies.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/exec.h"

namespace hytra::parity {

// One compared output: got (the CUDA result) against want (the CPU reference). tol, when positive,
// replaces the case's tolerance for this output (an ill-conditioned sum, named at the case).
struct Output {
  std::string name;
  Tensor got;
  Tensor want;
  double tol = 0;
};

// How a case is judged. Elementwise: |got - want| <= rtol * |want| + atol, atol = rtol/10 of the
// reference's RMS (fp32 cases). Norm: ||got - want|| / ||want|| <= tol (bf16 cases). Exact: equal.
enum class Criterion { Elementwise, Norm, Exact };

struct Case {
  std::string op;     // an entry of HYTRA_OP_LIST
  std::string shape;  // for the report, e.g. "N=64 C=96"
  DType dtype;        // the case's data type
  Criterion criterion;
  double tol;  // rtol (Elementwise) or relative norm error (Norm); unused for Exact
  std::function<std::vector<Output>(uint64_t seed)> run;
};

// Default criterion for a dtype: fp32 elementwise rtol 1e-3; bf16 relative norm error 5e-3.
Case make_case(std::string op, std::string shape, DType dtype, std::function<std::vector<Output>(uint64_t seed)> run);

void register_case(Case c);
const std::vector<Case>& all_cases();

// Registers the cases of one family at static-initialisation time:
//   HYTRA_PARITY_CASES(norm) { register_case(...); }
#define HYTRA_PARITY_CASES(family)                   \
  static void parity_cases_##family();               \
  static const int parity_registered_##family = [] { \
    parity_cases_##family();                         \
    return 0;                                        \
  }();                                               \
  static void parity_cases_##family()

// Executors.
Exec& gpu();
Exec& cpu();

// Host tensor in `dtype`, uniform in [lo, hi).
Tensor rand(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0);
// Host tensor in `dtype` holding integers uniform in [lo, hi] (exactly representable).
Tensor rand_ints(const Shape& shape, DType dtype, uint64_t seed, int lo, int hi);
// Host int32 ids in [0, n).
Tensor rand_ids(const Shape& shape, int64_t n, uint64_t seed);

// Device copy (same dtype).
Tensor dev(const Tensor& host);
// Host fp32 copy of a floating tensor (ints are copied unchanged): the CPU reference's input.
Tensor ref(const Tensor& t);
// Host copy converted to `dtype` (rounding like the device would store it).
Tensor as_dtype(const Tensor& t, DType dtype);
// Uninitialised outputs.
Tensor dev_empty(const Shape& shape, DType dtype);
Tensor cpu_empty(const Shape& shape);  // fp32

// "64x96" style shape text.
std::string dims(std::initializer_list<int64_t> d);

}  // namespace hytra::parity
