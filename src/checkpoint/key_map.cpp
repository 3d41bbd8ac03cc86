#include "checkpoint/key_map.h"

#include <cstring>
#include <iterator>
#include <regex>

#include "core/error.h"
#include "core/tensor.h"

namespace hytra {
namespace {

// Pairs of interchangeable key fragments (either direction).
const std::vector<std::pair<std::string, std::string>>& fragment_aliases() {
  static const std::vector<std::pair<std::string, std::string>> a = {
      {"decoder.final_norm.", "decoder.final_layernorm."},
      {".input_layernorm.weight", ".self_attention.linear_qkv.layer_norm_weight"},
      {".input_layernorm.bias", ".self_attention.linear_qkv.layer_norm_bias"},
      {".pre_mlp_layernorm.weight", ".mlp.linear_fc1.layer_norm_weight"},
      {".pre_mlp_layernorm.bias", ".mlp.linear_fc1.layer_norm_bias"},
      {".self_attention.q_layernorm.weight", ".self_attention.linear_q_up_proj.layer_norm_weight"},  // MLA, local spec
      {".self_attention.kv_layernorm.weight", ".self_attention.linear_kv_up_proj.layer_norm_weight"},
      {".mixer.conv1d_weight", ".mixer.conv1d.weight"},
      {".mixer.conv1d_bias", ".mixer.conv1d.bias"},
  };
  return a;
}

std::string replace_once(const std::string& s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  if (at == std::string::npos) return "";
  return s.substr(0, at) + to + s.substr(at + from.size());
}

std::string list(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += "\n  " + k;
  return out;
}

}  // namespace

std::string alias_target(const std::string& key, const std::set<std::string>& expected) {
  if (expected.count(key)) return key;
  for (const auto& [a, b] : fragment_aliases()) {
    for (const auto& [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
      const std::string k = replace_once(key, from, to);
      if (!k.empty() && expected.count(k)) return k;
    }
  }
  return "";
}

namespace {

// A layer key: "<stack>layers.<i>.<rest>" with stack "decoder." or "mtp.layers.<d>.mtp_model_layer.".
struct LayerKey {
  std::string stack, rest;
  int64_t layer = 0;
};

// Longer names are no layer keys (and std::regex recurses once a character: a corrupt file's huge name would
// overflow the stack).
constexpr size_t kMaxKeyLength = 1024;

bool split_layer_key(const std::string& key, LayerKey& out) {
  if (key.size() > kMaxKeyLength) return false;
  static const std::regex re(R"(^(decoder\.|mtp\.layers\.[0-9]+\.mtp_model_layer\.)layers\.([0-9]{1,9})\.(.+)$)");
  std::smatch m;
  if (!std::regex_match(key, m, re)) return false;
  out = {m[1].str(), m[3].str(), std::stoll(m[2].str())};
  return true;
}

// Which sub-layer of a layer a key's rest belongs to: "attn" (attention or gated delta net, with the input norm),
// "mlp" (MLP or MoE, with the pre-MLP norm), "mixer" (Mamba), or "" for a rest that names none of them.
// `hyper_connection.` (Mamba's and the gated delta net's mHC key) goes with the layer's mixer if it has one, else with
// its attention.
std::string part_of(const std::string& rest, bool layer_has_mixer) {
  auto starts = [&](const char* p) { return rest.rfind(p, 0) == 0; };
  if (starts("self_attention.") || starts("input_layernorm.") || starts("self_attention_hyper_connection."))
    return "attn";
  if (starts("mlp.") || starts("pre_mlp_layernorm.") || starts("mlp_hyper_connection.")) return "mlp";
  if (starts("mixer.")) return "mixer";
  if (starts("hyper_connection.")) return layer_has_mixer ? "mixer" : "attn";
  return "";
}

// Per stack: which layer indices hold each part, whether some layer holds two parts (a GPT or grouped layout), and
// each key's part.
struct StackLayout {
  std::map<std::string, std::set<int64_t>> layers;
  bool shared = false;
};

// The (stack, layer) pairs holding a Mamba mixer.
std::set<std::pair<std::string, int64_t>> mixer_layers(const std::vector<std::string>& keys) {
  std::set<std::pair<std::string, int64_t>> out;
  for (const auto& k : keys) {
    LayerKey lk;
    if (split_layer_key(k, lk) && lk.rest.rfind("mixer.", 0) == 0) out.insert({lk.stack, lk.layer});
  }
  return out;
}

std::map<std::string, StackLayout> layouts(const std::vector<std::string>& keys) {
  const auto has_mixer = mixer_layers(keys);
  std::map<std::string, StackLayout> out;
  std::map<std::pair<std::string, int64_t>, std::set<std::string>> parts_of_layer;
  for (const auto& k : keys) {
    LayerKey lk;
    if (!split_layer_key(k, lk)) continue;
    const std::string part = part_of(lk.rest, has_mixer.count({lk.stack, lk.layer}) > 0);
    if (part.empty()) continue;
    out[lk.stack].layers[part].insert(lk.layer);
    parts_of_layer[{lk.stack, lk.layer}].insert(part);
  }
  for (const auto& [where, parts] : parts_of_layer) out[where.first].shared |= parts.size() > 1;
  return out;
}

}  // namespace

std::string canonical_file_key(const std::string& key) {
  if (key.size() > kMaxKeyLength) return key;
  std::string k = key;
  // The MTP inner layer's sharded name.
  static const std::regex mtp(R"(^(mtp\.layers\.[0-9]+\.)transformer_layer\.)");
  k = std::regex_replace(k, mtp, "$1mtp_model_layer.", std::regex_constants::format_first_only);
  // A GPT MTP depth's inner TransformerLayer (no layer index): layer 0 of the depth's stack.
  static const std::regex mtp_gpt(R"(^(mtp\.layers\.[0-9]+\.mtp_model_layer\.)(?!layers\.[0-9]))");
  k = std::regex_replace(k, mtp_gpt, "$1layers.0.", std::regex_constants::format_first_only);
  // A group's local keys: member m of logical layer j.
  static const std::regex nested(
      R"(^((decoder\.|mtp\.layers\.[0-9]+\.mtp_model_layer\.)layers\.[0-9]+\.)layers\.[0-9]+\.)");
  k = std::regex_replace(k, nested, "$1", std::regex_constants::format_first_only);
  // Sequential experts: local expert j's linear_fcN.<weight|bias> is the indexed <weight|bias><j>.
  static const std::regex sequential(R"(\.mlp\.experts\.local_experts\.([0-9]+)\.(linear_fc[12])\.(weight|bias))");
  k = std::regex_replace(k, sequential, ".mlp.experts.$2.$3$1", std::regex_constants::format_first_only);
  return k;
}

std::vector<std::string> keys_in_model_layout(const std::vector<std::string>& file_keys,
                                              const std::set<std::string>& expected) {
  std::map<std::string, StackLayout> file = layouts(file_keys);
  std::map<std::string, StackLayout> model = layouts(std::vector<std::string>(expected.begin(), expected.end()));
  const auto has_mixer = mixer_layers(file_keys);
  std::vector<std::string> out;
  for (const auto& k : file_keys) {
    LayerKey lk;
    if (!split_layer_key(k, lk) || !model.count(lk.stack) || file[lk.stack].shared == model[lk.stack].shared) {
      out.push_back(k);
      continue;
    }
    StackLayout& f = file[lk.stack];
    StackLayout& m = model[lk.stack];
    const std::string part = part_of(lk.rest, has_mixer.count({lk.stack, lk.layer}) > 0);
    HYTRA_CHECK(!part.empty(), "checkpoint: key '", k, "' belongs to no attention, MLP or Mamba part of its layer, so ",
                "it cannot be placed in this model's ", m.shared ? "grouped" : "ungrouped", " layers");
    const std::set<int64_t>& fl = f.layers[part];
    const std::set<int64_t>& ml = m.layers[part];
    HYTRA_CHECK(fl.size() == ml.size(), "checkpoint: its ", lk.stack, "layers hold ", fl.size(), " ", part,
                " parts in ", f.shared ? "grouped (GPT)" : "ungrouped", " layers, this model ", ml.size());
    // The file's i-th layer with this part is the model's i-th.
    const int64_t rank = std::distance(fl.begin(), fl.find(lk.layer));
    out.push_back(lk.stack + "layers." + std::to_string(*std::next(ml.begin(), rank)) + "." + lk.rest);
  }
  return out;
}

std::map<std::string, std::string> match_keys(const std::vector<std::string>& file_keys,
                                              const std::set<std::string>& expected, Strictness s,
                                              const std::string& file, std::vector<std::string>& warnings) {
  std::map<std::string, std::string> fill;  // expected key -> file key
  std::vector<std::string> unexpected, missing;
  for (const auto& k : file_keys) {
    const std::string target = alias_target(k, expected);
    if (target.empty() || fill.count(target))
      unexpected.push_back(k);
    else
      fill[target] = k;
  }
  for (const auto& k : expected)
    if (!fill.count(k)) missing.push_back(k);
  const bool raise_missing = s == Strictness::AssumeOkUnexpected || s == Strictness::RaiseAll;
  const bool raise_unexpected = s == Strictness::RaiseUnexpected || s == Strictness::RaiseAll;
  std::string err;
  if (raise_missing && !missing.empty()) err += str("\nmissing keys (the model has them, the file does not):", list(missing));
  if (raise_unexpected && !unexpected.empty())
    err += str("\nunexpected keys (the file has them, the model does not):", list(unexpected));
  HYTRA_CHECK(err.empty(), file, ": keys do not match the model (--ckpt-strictness ",
              s == Strictness::AssumeOkUnexpected ? "assume_ok_unexpected" : s == Strictness::RaiseAll ? "raise_all" : "raise_unexpected",
              "):", err);
  if (!raise_missing)
    for (const auto& k : missing) warnings.push_back(str(file, ": missing key ", k, " (keeps its initial value)"));
  if (s == Strictness::LogAll)
    for (const auto& k : unexpected) warnings.push_back(str(file, ": unexpected key ", k, " (ignored)"));
  return fill;
}

}  // namespace hytra
