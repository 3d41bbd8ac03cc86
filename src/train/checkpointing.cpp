#include "train/checkpointing.h"

#include <cctype>
#include <map>
#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/key_map.h"
#include "core/log.h"
#include "core/error.h"

namespace hytra {
namespace {

SafetensorsTensor to_file(const std::string& name, const Tensor& t) {
  HYTRA_CHECK(t.dtype() == DType::F32, "checkpoint: tensor ", name, " is ", dtype_name(t.dtype()), ", expected fp32");
  SafetensorsTensor out{name, "F32", t.shape(), std::vector<unsigned char>(t.nbytes())};
  memcpy_any(out.bytes.data(), Device::CPU, t.raw(), t.device(), t.nbytes());
  return out;
}

void from_file(const SafetensorsFile& f, const std::string& name, const Tensor& dst, const std::string& file) {
  const SafetensorsEntry* e = f.find(name);
  HYTRA_ASSERT(e != nullptr, file, ": missing tensor '", name, "'");
  HYTRA_CHECK(e->dtype == "F32" && e->shape == dst.shape(), file, ": tensor '", name, "' is ", e->dtype,
              shape_str(e->shape), ", the model expects F32", shape_str(dst.shape()));
  memcpy_any(dst.raw(), dst.device(), f.data(*e), Device::CPU, dst.nbytes());
}

}  // namespace

void save_training_state(const TrainConfig& tc, ParamStore& params, const AdamW& opt, const ResumePoint& at,
                         const std::string& config_text) {
  CheckpointContents c;
  c.manifest.iteration = at.iteration;
  c.manifest.consumed_samples = at.consumed_samples;
  c.manifest.consumed_valid_samples = at.consumed_valid_samples;
  c.manifest.optimizer_step = opt.steps_taken();
  c.manifest.config = config_text;
  size_t i = 0;
  for (Param* p : params.all()) {
    c.model.push_back(to_file(p->name, p->master));
    c.optimizer.push_back(to_file(p->name + ".exp_avg", opt.exp_avg()[i]));
    c.optimizer.push_back(to_file(p->name + ".exp_avg_sq", opt.exp_avg_sq()[i]));
    ++i;
  }
  save_checkpoint(tc.save, std::move(c), tc.ckpt_keep);
}

namespace {

// Fills each (expected key -> tensor) from the file, through the aliases and the strictness rules.
void load_expert_layouts(const SafetensorsFile& f, std::vector<std::pair<std::string, Tensor>>& targets,
                         std::vector<std::string>& file_keys, const std::string& path);

void load_tensors(const std::string& path, std::vector<std::pair<std::string, Tensor>> targets,
                  Strictness strictness) {
  SafetensorsFile f(path);
  std::vector<std::string> file_keys;
  for (const auto& e : f.entries()) file_keys.push_back(e.name);
  load_expert_layouts(f, targets, file_keys, path);
  std::set<std::string> expected;
  for (const auto& [k, t] : targets) expected.insert(k);
  // Names the file keys take in this model's layout (GPT layers into an ungrouped hybrid model).
  const std::vector<std::string> renamed = gpt_keys_as_hybrid(file_keys, expected);
  std::map<std::string, std::string> original;
  for (size_t i = 0; i < renamed.size(); ++i) original[renamed[i]] = file_keys[i];
  std::vector<std::string> warnings;
  const auto fill = match_keys(renamed, expected, strictness, path, warnings);
  for (const auto& w : warnings) log_warn(w);
  for (const auto& [k, t] : targets) {
    auto it = fill.find(k);
    if (it != fill.end()) from_file(f, original.at(it->second), t, path);
  }
}

// Grouped expert tensors load into per-expert parameters and back (SPEC.md A2.6, hytra decision 2):
// a model key "<p>experts.linear_fcX.<kind><e><suffix>" absent from the file takes slice e of the
// file's "<p>experts.linear_fcX.<kind><suffix>" ([E, ...] unbound on dim 0, or the packed [E*out, ...]
// form in E equal chunks), and a grouped model key absent from the file stacks the file's complete
// per-expert set. kind is "weight" or "bias"; suffix "" or an optimizer moment (".exp_avg", ...).
// Handled targets are removed from `targets` and the file keys they used from `file_keys`.
void load_expert_layouts(const SafetensorsFile& f, std::vector<std::pair<std::string, Tensor>>& targets,
                         std::vector<std::string>& file_keys, const std::string& path) {
  std::set<std::string> in_file(file_keys.begin(), file_keys.end()), used;
  // Per-expert counts of the model: how many indexed targets share one grouped name.
  std::map<std::string, int64_t> experts_of;
  struct Parts {
    std::string grouped;  // "<p>linear_fcX.<kind><suffix>"
    int64_t index = -1;   // e, or -1 for a grouped key
  };
  auto parse = [](const std::string& key, Parts& out) {
    const size_t at = key.find("mlp.experts.linear_fc");
    if (at == std::string::npos) return false;
    for (const char* kind : {".weight", ".bias"}) {
      const size_t k = key.find(kind, at);
      if (k == std::string::npos) continue;
      const size_t digits = k + std::string(kind).size();
      size_t end = digits;
      while (end < key.size() && std::isdigit(static_cast<unsigned char>(key[end]))) ++end;
      const std::string suffix = key.substr(end);
      if (!suffix.empty() && suffix[0] != '.') return false;
      out.grouped = key.substr(0, digits) + suffix;
      out.index = end > digits ? std::stoll(key.substr(digits, end - digits)) : -1;
      return true;
    }
    return false;
  };
  auto indexed_key = [](const std::string& grouped, int64_t e) {  // insert e before the suffix
    for (const char* kind : {".weight", ".bias"}) {
      const size_t k = grouped.rfind(kind);
      if (k != std::string::npos) {
        const size_t cut = k + std::string(kind).size();
        return grouped.substr(0, cut) + std::to_string(e) + grouped.substr(cut);
      }
    }
    return grouped;
  };
  for (const auto& [k, t] : targets) {
    Parts q;
    if (parse(k, q) && q.index >= 0) ++experts_of[q.grouped];
  }
  std::vector<std::pair<std::string, Tensor>> rest;
  for (const auto& [k, t] : targets) {
    Parts q;
    if (in_file.count(k) || !parse(k, q)) {
      rest.emplace_back(k, t);
      continue;
    }
    const int64_t E = q.index >= 0 ? experts_of[q.grouped] : 0;
    bool any_indexed = false;  // TEGroupedLinear leaves a file with any per-expert key as it is
    for (int64_t i = 0; i < E; ++i) any_indexed = any_indexed || in_file.count(indexed_key(q.grouped, i)) > 0;
    if (q.index >= 0 && in_file.count(q.grouped) && !any_indexed) {  // expert e's slice of a grouped tensor
      const SafetensorsEntry* e = f.find(q.grouped);
      const Shape& g = e->shape;
      const Shape tail(g.empty() ? g.begin() : g.begin() + 1, g.end());
      Shape t_tail = t.shape();
      if (!t_tail.empty()) t_tail.erase(t_tail.begin());
      const bool unbind = !g.empty() && g[0] == E && tail == t.shape();  // [E, out, in]: wins (A2.6)
      const bool packed = !g.empty() && t.dim() >= 1 && g[0] == E * t.size(0) && tail == t_tail;  // [E*out, in]
      HYTRA_CHECK(e->dtype == "F32" && (unbind || packed), path, ": cannot split checkpoint tensor '", q.grouped,
                  "' ", e->dtype, shape_str(g), " into ", E, " experts of F32", shape_str(t.shape()));
      memcpy_any(t.raw(), t.device(), f.data(*e) + size_t(q.index) * t.nbytes(), Device::CPU, t.nbytes());
      used.insert(q.grouped);
      continue;
    }
    if (q.index < 0 && t.dim() >= 2) {  // a grouped model tensor from the file's per-expert set
      const int64_t E = t.size(0);
      bool complete = true;
      for (int64_t i = 0; i < E; ++i) complete = complete && in_file.count(indexed_key(k, i)) > 0;
      if (complete) {
        Shape one = t.shape();
        one.erase(one.begin());
        for (int64_t i = 0; i < E; ++i) {
          from_file(f, indexed_key(k, i), t.narrow(0, i, 1).view(one), path);
          used.insert(indexed_key(k, i));
        }
        continue;
      }
    }
    rest.emplace_back(k, t);
  }
  targets = std::move(rest);
  std::vector<std::string> left;
  for (const std::string& k : file_keys)
    if (!used.count(k)) left.push_back(k);
  file_keys = std::move(left);
}

}  // namespace

ResumePoint load_training_state(const TrainConfig& tc, ParamStore& params, AdamW& opt) {
  const std::string dir = resolve_checkpoint_dir(tc.load);
  const CheckpointManifest m = read_manifest(dir);
  const Strictness strictness = parse_strictness(tc.ckpt_strictness);
  std::vector<std::pair<std::string, Tensor>> weights;
  for (Param* p : params.all()) weights.emplace_back(p->name, p->master);
  load_tensors(dir + "/model.safetensors", weights, strictness);
  params.sync_values_from_master();
  ResumePoint at;
  if (tc.finetune) return at;
  at = {m.iteration, m.consumed_samples, m.consumed_valid_samples};
  if (tc.no_load_optim) return at;
  std::vector<std::pair<std::string, Tensor>> moments;
  size_t i = 0;
  for (Param* p : params.all()) {
    moments.emplace_back(p->name + ".exp_avg", opt.exp_avg()[i]);
    moments.emplace_back(p->name + ".exp_avg_sq", opt.exp_avg_sq()[i]);
    ++i;
  }
  load_tensors(dir + "/optimizer.safetensors", moments, strictness);
  opt.set_steps_taken(m.optimizer_step);
  return at;
}

}  // namespace hytra
