// The dense MLP's activation (--swiglu, --squared-relu, --quick-geglu, else GeLU); a GLU kind reads
// its input as [gate | linear] halves.
#pragma once

namespace hytra {

enum class Activation { SwiGLU, GeLU, SquaredReLU, QuickGeGLU };
inline bool is_glu(Activation a) { return a == Activation::SwiGLU || a == Activation::QuickGeGLU; }

}  // namespace hytra
