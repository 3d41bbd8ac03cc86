// The text of the configuration's enum-valued settings (Megatron's flag values), both ways: the flag
// rows parse with enum_of, help, messages and the checkpoint record print name_of. One table each.
#pragma once
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "nn/activation.h"
#include "nn/moe/router.h"
#include "nn/norm.h"
#include "ops/op_types.h"

namespace hytra {

enum class PositionEmbedding { LearnedAbsolute, Rope, None };  // --position-embedding-type
enum class RecomputeGranularity { None, Full, Selective };     // --recompute-granularity (None: off)
enum class RecomputeMethod { None, Uniform, Block };           // --recompute-method (full recompute)
enum class DropPolicy { Probs, Position };                     // --moe-token-drop-policy
enum class RouterDtype { Default, Fp32, Fp64 };                // --moe-router-dtype (Default: None)
// --recompute-modules (selective recompute, docs/spec/recompute.md §3).
enum class RecomputeModule { CoreAttn, LayerNorm, Mlp, MoeAct, Moe, SharedExperts, Mhc, Mamba, MlaUpProj };

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
      {{PositionEmbedding::LearnedAbsolute, "learned_absolute"},
       {PositionEmbedding::Rope, "rope"},
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
      {{Activation::GeLU, "gelu"},
       {Activation::SwiGLU, "swiglu"},
       {Activation::SquaredReLU, "squared_relu"},
       {Activation::QuickGeGLU, "quick_geglu"}}};
};

template <>
struct EnumText<RecomputeGranularity> {
  static constexpr std::array<std::pair<RecomputeGranularity, const char*>, 3> names = {
      {{RecomputeGranularity::None, "None"},
       {RecomputeGranularity::Full, "full"},
       {RecomputeGranularity::Selective, "selective"}}};
};
template <>
struct EnumText<RecomputeMethod> {
  static constexpr std::array<std::pair<RecomputeMethod, const char*>, 3> names = {
      {{RecomputeMethod::None, "None"}, {RecomputeMethod::Uniform, "uniform"}, {RecomputeMethod::Block, "block"}}};
};
template <>
struct EnumText<DropPolicy> {
  static constexpr std::array<std::pair<DropPolicy, const char*>, 2> names = {
      {{DropPolicy::Probs, "probs"}, {DropPolicy::Position, "position"}}};
};
template <>
struct EnumText<RouterDtype> {
  static constexpr std::array<std::pair<RouterDtype, const char*>, 3> names = {
      {{RouterDtype::Default, "None"}, {RouterDtype::Fp32, "fp32"}, {RouterDtype::Fp64, "fp64"}}};
};
template <>
struct EnumText<RecomputeModule> {
  static constexpr std::array<std::pair<RecomputeModule, const char*>, 9> names = {
      {{RecomputeModule::CoreAttn, "core_attn"},
       {RecomputeModule::LayerNorm, "layernorm"},
       {RecomputeModule::Mlp, "mlp"},
       {RecomputeModule::MoeAct, "moe_act"},
       {RecomputeModule::Moe, "moe"},
       {RecomputeModule::SharedExperts, "shared_experts"},
       {RecomputeModule::Mhc, "mhc"},
       {RecomputeModule::Mamba, "mamba"},
       {RecomputeModule::MlaUpProj, "mla_up_proj"}}};
};
template <>
struct EnumText<LoadBalancing> {
  static constexpr std::array<std::pair<LoadBalancing, const char*>, 4> names = {
      {{LoadBalancing::AuxLoss, "aux_loss"},
       {LoadBalancing::SeqAuxLoss, "seq_aux_loss"},
       {LoadBalancing::GlobalAuxLoss, "global_aux_loss"},
       {LoadBalancing::None, "none"}}};
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
