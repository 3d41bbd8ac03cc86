#include "checkpoint/key_map.h"

#include <cstring>
#include <iterator>

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

// decoder.layers.<i>.<part>.<rest> -> (i, part, rest); part is "self_attention" or "mlp".
bool split_layer_key(const std::string& key, int64_t& layer, std::string& part, std::string& rest) {
  static const std::string kPrefix = "decoder.layers.";
  if (key.rfind(kPrefix, 0) != 0) return false;
  const size_t dot = key.find('.', kPrefix.size());
  if (dot == std::string::npos) return false;
  try {
    layer = std::stoll(key.substr(kPrefix.size(), dot - kPrefix.size()));
  } catch (const std::exception&) {
    return false;
  }
  for (const char* p : {"self_attention.", "mlp."}) {
    if (key.compare(dot + 1, std::strlen(p), p) == 0) {
      part = std::string(p, std::strlen(p) - 1);
      rest = key.substr(dot + 1 + std::strlen(p));
      return true;
    }
  }
  return false;
}

// Layer indices per part, and whether some layer holds both parts (GPT / grouped layout).
struct LayerParts {
  std::map<std::string, std::set<int64_t>> layers;
  bool shared = false;
};

LayerParts layer_parts(const std::vector<std::string>& keys) {
  LayerParts lp;
  std::map<int64_t, std::set<std::string>> by_layer;
  for (const auto& k : keys) {
    int64_t i;
    std::string part, rest;
    if (split_layer_key(k, i, part, rest)) {
      lp.layers[part].insert(i);
      by_layer[i].insert(part);
    }
  }
  for (const auto& [i, parts] : by_layer) lp.shared |= parts.size() > 1;
  return lp;
}

}  // namespace

std::vector<std::string> gpt_keys_as_hybrid(const std::vector<std::string>& file_keys,
                                            const std::set<std::string>& expected) {
  LayerParts file = layer_parts(file_keys);
  LayerParts model = layer_parts(std::vector<std::string>(expected.begin(), expected.end()));
  if (!file.shared || model.shared) return file_keys;
  for (const char* part : {"self_attention", "mlp"})
    HYTRA_CHECK(file.layers[part].size() == model.layers[part].size(), "checkpoint: a GPT checkpoint with ",
                file.layers[part].size(), " ", part, " layers cannot fill a hybrid model with ", model.layers[part].size());
  std::vector<std::string> out;
  for (const auto& k : file_keys) {
    int64_t i;
    std::string part, rest;
    if (!split_layer_key(k, i, part, rest)) {
      out.push_back(k);
      continue;
    }
    // GPT layer i's part goes to the model's layer holding the same-ranked part.
    const auto& fl = file.layers[part];
    const auto& ml = model.layers[part];
    const int64_t rank = std::distance(fl.begin(), fl.find(i));
    out.push_back("decoder.layers." + std::to_string(*std::next(ml.begin(), rank)) + "." + part + "." + rest);
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
