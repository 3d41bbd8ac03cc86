// Cross-layout loading: TEGroupedLinear's key normalisation against the test vectors of docs/spec/names.md §6,
// the name aliases, and --ckpt-strictness.
#include <gtest/gtest.h>

#include <cstring>

#include "checkpoint/key_map.h"
#include "core/error.h"

namespace hytra {
namespace {

// An F32 tensor holding `values`.
SafetensorsTensor f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  SafetensorsTensor t{name, "F32", std::move(shape), std::vector<unsigned char>(values.size() * 4)};
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

std::vector<float> values_of(const SafetensorsTensor& t) {
  std::vector<float> v(t.bytes.size() / 4);
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

std::vector<std::string> keys(const StateDict& sd) {
  std::vector<std::string> k;
  for (const auto& [name, t] : sd) k.push_back(name);
  return k;
}

const std::string P = "m.";

TEST(KeyMap, GroupedExpertVectorsFromTheSpec) {
  StateDict sd;  // N=3, grouped, no bias: weight0..2 each [2] -> weight [3,2]
  for (int i = 0; i < 3; ++i) sd[P + "weight" + std::to_string(i)] = f32(P + "weight" + std::to_string(i), {2}, {float(i), float(i) + 0.5f});
  normalize_grouped_keys(sd, P, "weight", 3, true);
  EXPECT_EQ(keys(sd), (std::vector<std::string>{"m.weight"}));
  EXPECT_EQ(sd["m.weight"].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(values_of(sd["m.weight"]), (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f}));

  StateDict a;  // N=3, indexed: weight = arange(9).view(3,3) -> weight0..2 = rows
  a["m.weight"] = f32("m.weight", {3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8});
  normalize_grouped_keys(a, P, "weight", 3, false);
  EXPECT_EQ(keys(a), (std::vector<std::string>{"m.weight0", "m.weight1", "m.weight2"}));
  EXPECT_EQ(values_of(a["m.weight1"]), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(a["m.weight1"].shape, (std::vector<int64_t>{3}));

  StateDict b;  // N=2, indexed, bias [[10,20],[30,40]] -> bias0 = [10,20], bias1 = [30,40]
  b["m.bias"] = f32("m.bias", {2, 2}, {10, 20, 30, 40});
  normalize_grouped_keys(b, P, "bias", 2, false);
  EXPECT_EQ(values_of(b["m.bias0"]), (std::vector<float>{10, 20}));
  EXPECT_EQ(values_of(b["m.bias1"]), (std::vector<float>{30, 40}));

  StateDict c;  // N=2, grouped, weight + stray weight0: unchanged (target already present)
  c["m.weight"] = f32("m.weight", {2, 2}, {1, 2, 3, 4});
  c["m.weight0"] = f32("m.weight0", {2}, {9, 9});
  StateDict c0 = c;
  normalize_grouped_keys(c, P, "weight", 2, true);
  EXPECT_EQ(keys(c), keys(c0));
  normalize_grouped_keys(c, P, "weight", 2, false);  // indexed target: an indexed key exists -> unchanged
  EXPECT_EQ(keys(c), keys(c0));

  StateDict d;  // N=3, grouped, weight0 and weight2 only: unchanged (incomplete set)
  d["m.weight0"] = f32("m.weight0", {1}, {1});
  d["m.weight2"] = f32("m.weight2", {1}, {3});
  normalize_grouped_keys(d, P, "weight", 3, true);
  EXPECT_EQ(keys(d), (std::vector<std::string>{"m.weight0", "m.weight2"}));

  StateDict e;  // split N=3: [6,3] -> 3 chunks of [2,3]; [4,2] -> error; 0-d -> error
  std::vector<float> v(18);
  for (int i = 0; i < 18; ++i) v[size_t(i)] = float(i);
  e["m.weight"] = f32("m.weight", {6, 3}, v);
  normalize_grouped_keys(e, P, "weight", 3, false);
  EXPECT_EQ(e["m.weight2"].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values_of(e["m.weight2"]), (std::vector<float>{12, 13, 14, 15, 16, 17}));
  StateDict bad;
  bad["m.weight"] = f32("m.weight", {4, 2}, std::vector<float>(8));
  EXPECT_THROW(normalize_grouped_keys(bad, P, "weight", 3, false), Error);
  StateDict scalar;
  scalar["m.weight"] = f32("m.weight", {}, {1});
  EXPECT_THROW(normalize_grouped_keys(scalar, P, "weight", 3, false), Error);
  // out == 1: dim0 == N wins over chunking ([2,1] with N=2 -> two [1] tensors).
  StateDict one;
  one["m.weight"] = f32("m.weight", {2, 1}, {5, 6});
  normalize_grouped_keys(one, P, "weight", 2, false);
  EXPECT_EQ(one["m.weight0"].shape, (std::vector<int64_t>{1}));
}

TEST(KeyMap, LayoutRoundTripsReproduceEveryTensor) {
  StateDict indexed;  // 4 experts, fc1 [2F=6, C=2] each, plus biases and an unrelated key
  for (int i = 0; i < 4; ++i) {
    std::vector<float> w(12), b(6);
    for (int k = 0; k < 12; ++k) w[size_t(k)] = float(100 * i + k);
    for (int k = 0; k < 6; ++k) b[size_t(k)] = float(-100 * i - k);
    indexed["m.weight" + std::to_string(i)] = f32("m.weight" + std::to_string(i), {6, 2}, w);
    indexed["m.bias" + std::to_string(i)] = f32("m.bias" + std::to_string(i), {6}, b);
  }
  indexed["other.weight"] = f32("other.weight", {1}, {42});
  auto equal = [](const StateDict& a, const StateDict& b) {
    if (keys(a) != keys(b)) return false;
    for (const auto& [k, t] : a)
      if (t.shape != b.at(k).shape || t.bytes != b.at(k).bytes || t.dtype != b.at(k).dtype) return false;
    return true;
  };
  StateDict x = indexed;
  for (const char* kind : {"weight", "bias"}) normalize_grouped_keys(x, P, kind, 4, true);
  EXPECT_EQ(x.at("m.weight").shape, (std::vector<int64_t>{4, 6, 2}));
  StateDict grouped = x;
  for (const char* kind : {"weight", "bias"}) normalize_grouped_keys(x, P, kind, 4, false);
  EXPECT_TRUE(equal(x, indexed));  // indexed -> grouped -> indexed
  for (const char* kind : {"weight", "bias"}) normalize_grouped_keys(x, P, kind, 4, true);
  EXPECT_TRUE(equal(x, grouped));  // grouped -> indexed -> grouped
}

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
  EXPECT_THROW(parse_strictness("strict"), Error);
}

}  // namespace
}  // namespace hytra
