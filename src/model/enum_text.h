// The text of the configuration's enum-valued settings (Megatron's flag values), both ways: the flag
// rows parse with enum_of, help, messages and the checkpoint record print name_of. One table each.
#pragma once
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "nn/activation.h"
#include "nn/norm.h"
#include "ops/op_types.h"

namespace hytra {

enum class PositionEmbedding { LearnedAbsolute, Rope, None };  // --position-embedding-type

template <class E>
struct EnumText;  // static constexpr std::array<std::pair<E, const char*>, N> names
template <>
struct EnumText<NormKind> {
  static constexpr std::array<std::pair<NormKind, const char*>, 2> names = {
      {{NormKind::LayerNorm, "LayerNorm"}, {NormKind::RMSNorm, "RMSNorm"}}};
};
template <>
struct EnumText<PositionEmbedding> {
  static constexpr std::array<std::pair<PositionEmbedding, const char*>, 3> names = {
      {{PositionEmbedding::LearnedAbsolute, "learned_absolute"}, {PositionEmbedding::Rope, "rope"},
       {PositionEmbedding::None, "none"}}};
};
template <>
struct EnumText<RouterScore> {
  static constexpr std::array<std::pair<RouterScore, const char*>, 2> names = {
      {{RouterScore::Softmax, "softmax"}, {RouterScore::Sigmoid, "sigmoid"}}};
};
template <>
struct EnumText<MhcVariant> {
  static constexpr std::array<std::pair<MhcVariant, const char*>, 2> names = {
      {{MhcVariant::Main, "main"}, {MhcVariant::Dev, "dev"}}};
};

template <>
struct EnumText<Activation> {  // set by --swiglu / --squared-relu / --quick-geglu
  static constexpr std::array<std::pair<Activation, const char*>, 4> names = {
      {{Activation::GeLU, "gelu"}, {Activation::SwiGLU, "swiglu"}, {Activation::SquaredReLU, "squared_relu"},
       {Activation::QuickGeGLU, "quick_geglu"}}};
};

template <class E>
const char* name_of(E value) {
  for (const auto& [v, name] : EnumText<E>::names)
    if (v == value) return name;
  HYTRA_ASSERT(false, "an enum value without a name");
}

template <class E>
std::vector<std::string> names_of() {
  std::vector<std::string> out;
  for (const auto& [v, name] : EnumText<E>::names) out.push_back(name);
  return out;
}

// The value named `text`; an error naming `flag` and the choices otherwise.
template <class E>
E enum_of(const std::string& text, const std::string& flag) {
  std::string choices;
  for (const auto& [v, name] : EnumText<E>::names) {
    if (text == name) return v;
    choices += (choices.empty() ? "" : ", ") + std::string(name);
  }
  fail(str(flag, ": expected one of ", choices, ", got '", text, "'"));
}

}  // namespace hytra
