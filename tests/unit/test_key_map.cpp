// Cross-layout loading: the name aliases and --ckpt-strictness (the expert layouts of docs/spec/names.md
// §6 are exercised through the loader in tests/e2e/test_checkpoint.cpp).
#include <gtest/gtest.h>

#include <cstring>

#include "checkpoint/key_map.h"
#include "core/error.h"

namespace hytra {
namespace {

TEST(KeyMap, AliasesAndStrictness) {
  const std::set<std::string> expected = {"decoder.final_layernorm.weight",
                                          "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight",
                                          "decoder.layers.1.mlp.linear_fc1.layer_norm_weight"};
  EXPECT_EQ(alias_target("decoder.final_norm.weight", expected), "decoder.final_layernorm.weight");
  EXPECT_EQ(alias_target("decoder.layers.0.input_layernorm.weight", expected),
            "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight");
  EXPECT_EQ(alias_target("decoder.layers.1.pre_mlp_layernorm.weight", expected),
            "decoder.layers.1.mlp.linear_fc1.layer_norm_weight");
  EXPECT_EQ(alias_target("decoder.layers.2.input_layernorm.weight", expected), "");
  EXPECT_EQ(alias_target("decoder.final_layernorm.weight.exp_avg", {"decoder.final_norm.weight.exp_avg"}),
            "decoder.final_norm.weight.exp_avg");

  std::vector<std::string> warnings;
  const std::vector<std::string> file = {"decoder.final_norm.weight", "decoder.layers.0.input_layernorm.weight",
                                         "extra.weight"};
  // Default: unexpected keys are fine, a missing key is an error listing it.
  try {
    match_keys(file, expected, Strictness::AssumeOkUnexpected, "f", warnings);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decoder.layers.1.mlp.linear_fc1.layer_norm_weight"), std::string::npos);
    EXPECT_EQ(std::string(e.what()).find("extra.weight"), std::string::npos);
  }
  auto fill = match_keys(file, expected, Strictness::LogAll, "f", warnings);
  EXPECT_EQ(fill.at("decoder.final_layernorm.weight"), "decoder.final_norm.weight");
  EXPECT_EQ(warnings.size(), 2u);  // one missing, one unexpected
  EXPECT_THROW(match_keys(file, expected, Strictness::RaiseUnexpected, "f", warnings), Error);
  EXPECT_THROW(match_keys(file, expected, Strictness::RaiseAll, "f", warnings), Error);
}

}  // namespace
}  // namespace hytra
