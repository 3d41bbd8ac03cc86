// Named tolerances, one place (docs/ARCHITECTURE.md style rule 10). A comparison passes when every element has
// |got - want| <= atol + rtol * |want|, and nothing is NaN/Inf.
#pragma once
#include "core/dtype.h"

namespace hytra::test {

struct Tolerance {
  double rtol;
  double atol;
};

// Same algorithm, different summation order (CPU threads, GPU fp32 accumulation).
inline Tolerance tol_for(DType t) {
  switch (t) {
    case DType::F64: return {1e-10, 1e-12};
    case DType::F32: return {1e-4, 1e-5};
    case DType::BF16: return {2e-2, 2e-2};
    default: return {0, 0};
  }
}

// Finite-difference gradient checks (fp64, central differences): relative error threshold.
inline constexpr double kGradcheckRelTol = 1e-6;

}  // namespace hytra::test
