#include "train/checkpointing.h"

#include <cctype>
#include <map>
#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/float_decode.h"
#include "checkpoint/key_map.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "ops/exec.h"

namespace hytra {
namespace {

SafetensorsTensor to_file(const std::string& name, const Tensor& t) {
  HYTRA_CHECK(t.dtype() == DType::F32, "checkpoint: tensor ", name, " is ", dtype_name(t.dtype()), ", expected fp32");
  SafetensorsTensor out{name, "F32", t.shape(), std::vector<unsigned char>(t.nbytes())};
  memcpy_any(out.bytes.data(), Device::CPU, t.raw(), t.device(), t.nbytes());
  return out;
}

// A checkpoint file's tensors under the names they take in the model (checkpoint/key_map.h): canonical, then in the
// model's layer layout (`expected`: the model's keys).
class FileTensors {
 public:
  FileTensors(const SafetensorsFile& f, const std::string& path, const std::set<std::string>& expected) : f_(f) {
    std::vector<std::string> canonical;
    for (const auto& e : f.entries()) canonical.push_back(canonical_file_key(e.name));
    names_ = keys_in_model_layout(canonical, expected);
    for (size_t i = 0; i < names_.size(); ++i) {
      const std::string& file_name = f.entries()[i].name;
      const auto [it, fresh] = actual_.emplace(names_[i], file_name);
      HYTRA_CHECK(fresh, path, ": tensors '", it->second, "' and '", file_name, "' both stand for '", names_[i], "'");
    }
  }
  const std::vector<std::string>& names() const { return names_; }
  const SafetensorsEntry* find(const std::string& name) const {
    const auto it = actual_.find(name);
    return it == actual_.end() ? nullptr : f_.find(it->second);
  }
  const unsigned char* data(const SafetensorsEntry& e) const { return f_.data(e); }

 private:
  const SafetensorsFile& f_;
  std::map<std::string, std::string> actual_;  // canonical name -> the file's
  std::vector<std::string> names_;             // in the file's order
};

// `count` fp32 values into dst (fp32, any device) from `count` elements of a floating file tensor from `first` on.
void decode_into(const FileTensors& f, const SafetensorsEntry& e, int64_t first, const Tensor& dst) {
  const int64_t count = dst.numel();
  const unsigned char* src = f.data(e) + first * float_bytes(e.dtype);
  if (e.dtype == "F32") {
    memcpy_any(dst.raw(), dst.device(), src, Device::CPU, dst.nbytes());
    return;
  }
  std::vector<float> host(static_cast<size_t>(count));
  decode_f32(e.dtype, src, count, host.data());
  memcpy_any(dst.raw(), dst.device(), host.data(), Device::CPU, dst.nbytes());
}

void from_file(const FileTensors& f, const std::string& name, const Tensor& dst, const std::string& file) {
  const SafetensorsEntry* e = f.find(name);
  HYTRA_ASSERT(e != nullptr, file, ": missing tensor '", name, "'");
  HYTRA_CHECK(decodable_float(e->dtype) && e->shape == dst.shape(), file, ": tensor '", name, "' is ", e->dtype,
              shape_str(e->shape), ", the model expects F32, BF16 or F16", shape_str(dst.shape()));
  decode_into(f, *e, 0, dst);
}

}  // namespace

std::vector<ParamState> param_states(ParamStore& params, const OptimizerState& opt) {
  std::vector<ParamState> out;
  size_t i = 0;
  for (Param* p : params.all()) {
    out.push_back({p->name, p->master, opt.exp_avg[i], opt.exp_avg_sq[i]});
    ++i;
  }
  return out;
}

void save_training_state(const TrainConfig& tc, const std::vector<ParamState>& params, int64_t optimizer_step,
                         const ResumePoint& at, const std::string& config_text,
                         const std::vector<ArchitectureEntry>& arch) {
  CheckpointContents c;
  c.manifest.iteration = at.iteration;
  c.manifest.consumed_samples = at.consumed_samples;
  c.manifest.consumed_valid_samples = at.consumed_valid_samples;
  c.manifest.optimizer_step = optimizer_step;
  c.manifest.config = config_text;
  for (const ArchitectureEntry& e : arch) c.manifest.model.emplace_back(e.name, e.value);
  c.run_config = tc.run_config;
  for (const ParamState& p : params) {
    c.model.push_back(to_file(p.name, p.value));
    c.optimizer.push_back(to_file(p.name + ".exp_avg", p.exp_avg));
    c.optimizer.push_back(to_file(p.name + ".exp_avg_sq", p.exp_avg_sq));
  }
  save_checkpoint(tc.save, std::move(c), tc.ckpt_keep, tc.ckpt_allow_non_finite);
}

namespace {

// Fills each (expected key -> tensor) from the file, through the aliases and the strictness rules.
void load_expert_layouts(const FileTensors& f, std::vector<std::pair<std::string, Tensor>>& targets,
                         std::vector<std::string>& file_keys, const std::string& path);

void load_tensors(const std::string& path, std::vector<std::pair<std::string, Tensor>> targets, Strictness strictness,
                  bool allow_non_finite, const std::set<std::string>& elsewhere) {
  std::set<std::string> expected;
  for (const auto& [k, t] : targets) expected.insert(k);
  SafetensorsFile file(path);
  // The layer layout is the whole model's (other pipeline stages' names included).
  std::set<std::string> whole = expected;
  whole.insert(elsewhere.begin(), elsewhere.end());
  const FileTensors f(file, path, whole);
  std::map<std::string, int64_t> narrow;  // tensors stored in bf16 / f16, by dtype
  for (const auto& e : file.entries()) {
    if (!decodable_float(e.dtype)) continue;  // (named where a parameter would read it)
    if (e.dtype != "F32") ++narrow[e.dtype];
    HYTRA_CHECK(allow_non_finite || all_finite(e.dtype, f.data(e), (e.end - e.begin) / float_bytes(e.dtype)), path,
                ": tensor '", e.name,
                "' holds NaN or Inf values; refusing to load a non-finite checkpoint "
                "(--ckpt-allow-non-finite loads it anyway)");
  }
  for (const auto& [dtype, n] : narrow)
    log_info(str("hytra: ", path, ": ", n, " tensors stored as ", dtype, " load as fp32 (the master weights' dtype)"));
  std::vector<std::string> file_keys = f.names();
  load_expert_layouts(f, targets, file_keys, path);
  expected.clear();
  for (const auto& [k, t] : targets) expected.insert(k);
  // Another pipeline stage's tensors are neither loaded here nor unexpected.
  std::erase_if(file_keys, [&](const std::string& k) { return elsewhere.count(k) > 0 && expected.count(k) == 0; });
  std::vector<std::string> warnings;
  const auto fill = match_keys(file_keys, expected, strictness, path, warnings);
  for (const auto& w : warnings) log_warn(w);
  for (const auto& [k, t] : targets) {
    auto it = fill.find(k);
    if (it != fill.end()) from_file(f, it->second, t, path);
  }
}

// Grouped expert tensors load into per-expert parameters and back (docs/spec/names.md §6, docs/spec/README.md decision
// 2): a model key "<p>experts.linear_fcX.<kind><e><suffix>" absent from the file takes slice e of the file's
// "<p>experts.linear_fcX.<kind><suffix>" ([E, ...] unbound on dim 0, or the packed [E*out, ...] form in E equal
// chunks), and a grouped model key absent from the file stacks the file's complete per-expert set. kind is "weight" or
// "bias"; suffix "" or an optimizer moment (".exp_avg", ...). Handled targets are removed from `targets` and the file
// keys they used from `file_keys`.
void load_expert_layouts(const FileTensors& f, std::vector<std::pair<std::string, Tensor>>& targets,
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
      const bool unbind = !g.empty() && g[0] == E && tail == t.shape();  // [E, out, in]: wins (docs/spec/names.md §6)
      const bool packed = !g.empty() && t.dim() >= 1 && g[0] == E * t.size(0) && tail == t_tail;  // [E*out, in]
      HYTRA_CHECK(decodable_float(e->dtype) && (unbind || packed), path, ": cannot split checkpoint tensor '",
                  q.grouped, "' ", e->dtype, shape_str(g), " into ", E, " experts of", shape_str(t.shape()));
      decode_into(f, *e, q.index * t.numel(), t);
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

// "--num-attention-heads" for "num_attention_heads"; entries without a flag of their own say what they are.
std::string flag_of(const std::string& name) {
  static const std::map<std::string, std::string> described = {
      {"layer_sequence", "the layer pattern (--hybrid-layer-pattern / --num-layers, MTP parts included)"},
      {"activation", "the activation (--swiglu / --squared-relu / --quick-geglu; else gelu)"},
      {"padded_vocab_size", "the padded vocabulary (--vocab-size rounded up to --make-vocab-size-divisible-by)"},
      {"add_bias_linear", "linear biases (--disable-bias-linear)"}};
  if (auto it = described.find(name); it != described.end()) return it->second;
  std::string f = "--" + name;
  for (char& ch : f)
    if (ch == '_') ch = '-';
  return f;
}

void check_architecture(const CheckpointManifest& m, const std::vector<ArchitectureEntry>& arch, Strictness strictness,
                        bool finetune, const std::string& dir) {
  if (!m.has_model_record) {
    log_warn(str(dir,
                 ": the manifest records no model configuration (an older hytra checkpoint); its "
                 "architecture cannot be compared with this run's"));
    return;
  }
  std::map<std::string, std::string> saved(m.model.begin(), m.model.end()), run;
  for (const ArchitectureEntry& e : arch) run[e.name] = e.value;
  std::set<std::string> names;
  for (const auto& [k, v] : saved) names.insert(k);
  for (const auto& [k, v] : run) names.insert(k);
  std::string weights, rest;
  for (const std::string& k : names) {
    const auto a = saved.find(k), b = run.find(k);
    const std::string was = a == saved.end() ? "(not recorded)" : a->second;
    const std::string now = b == run.end() ? "(not used)" : b->second;
    if (was == now) continue;
    const std::string line = str("\n  ", flag_of(k), ": checkpoint ", was, ", this run ", now);
    (architecture_defines_weights(k) ? weights : rest) += line;
  }
  HYTRA_CHECK(weights.empty(), "--load ", dir,
              ": the checkpoint's model differs from this run's in what its "
              "weights mean:",
              weights, rest, "\nRun with the checkpoint's values (its manifest.json lists them).");
  if (rest.empty() || finetune) return;
  const std::string msg = str("--load ", dir, ": the checkpoint was trained with other settings:", rest);
  HYTRA_CHECK(strictness != Strictness::RaiseAll && strictness != Strictness::RaiseUnexpected, msg,
              "\n(--ckpt-strictness ", strictness == Strictness::RaiseAll ? "raise_all" : "raise_unexpected",
              " makes this an error; --finetune ignores training settings)");
  log_warn(msg);
}

}  // namespace

ResumePoint load_training_state(const TrainConfig& tc, ParamStore& params, OptimizerState& opt,
                                const std::vector<ArchitectureEntry>& arch, const std::set<std::string>& elsewhere) {
  const std::string dir = resolve_checkpoint_dir(tc.load);
  const CheckpointManifest m = read_manifest(dir);
  const Strictness strictness = tc.ckpt_strictness;
  const bool reads_optimizer = !tc.finetune && !tc.no_load_optim;
  std::set<std::string> reads = {"model.safetensors"};
  if (reads_optimizer) reads.insert("optimizer.safetensors");
  // Progress: verifying the files, the weights, the optimizer state.
  ProgressBar bar("load " + dir, reads_optimizer ? 3 : 2, info_file(), 0.1, kPlainProgressSeconds);
  std::vector<std::string> warnings;
  check_manifest_files(m, dir, reads, strictness, warnings);
  bar.update(1);
  for (const auto& w : warnings) log_warn(w);
  check_architecture(m, arch, strictness, tc.finetune, dir);
  // A tensor-parallel shard reads the whole tensor, then takes its slices (train/tensor_parallel_state.h).
  std::vector<std::pair<const Param*, Tensor*>> shards;  // (parameter, its tensor to fill) for each whole tensor read
  std::vector<Tensor> wholes;
  auto target = [&](const Param* p, Tensor& t) {
    if (!p->shard.split()) return t;
    wholes.push_back(Tensor::empty(p->full_shape(), t.dtype(), t.device()));
    place_shard(Exec::for_device(t.device()), wholes.back(), t, p->shard);  // kept where the file has no tensor
    shards.emplace_back(p, &t);
    return wholes.back();
  };
  auto take_shards = [&] {
    for (size_t i = 0; i < shards.size(); ++i)
      copy_shard(Exec::for_device(shards[i].second->device()), *shards[i].second, wholes[i], shards[i].first->shard);
    shards.clear();
    wholes.clear();
  };
  std::vector<std::pair<std::string, Tensor>> weights;
  for (Param* p : params.all()) weights.emplace_back(p->name, target(p, p->master));
  load_tensors(dir + "/model.safetensors", weights, strictness, tc.ckpt_allow_non_finite, elsewhere);
  take_shards();
  params.sync_values_from_master();
  bar.update(2);
  ResumePoint at;
  if (tc.finetune) return at;
  at = {m.iteration, m.consumed_samples, m.consumed_valid_samples};
  if (tc.no_load_optim) return at;
  std::set<std::string> moments_elsewhere;
  for (const std::string& k : elsewhere) moments_elsewhere.insert({k + ".exp_avg", k + ".exp_avg_sq"});
  std::vector<std::pair<std::string, Tensor>> moments;
  size_t i = 0;
  for (Param* p : params.all()) {
    moments.emplace_back(p->name + ".exp_avg", target(p, opt.exp_avg[i]));
    moments.emplace_back(p->name + ".exp_avg_sq", target(p, opt.exp_avg_sq[i]));
    ++i;
  }
  load_tensors(dir + "/optimizer.safetensors", moments, strictness, tc.ckpt_allow_non_finite, moments_elsewhere);
  take_shards();
  bar.update(3);
  opt.step = m.optimizer_step;
  at.optimizer_loaded = true;
  return at;
}

void load_weights_file(const std::string& path, ParamStore& params, Strictness strictness) {
  std::vector<std::pair<std::string, Tensor>> weights;
  for (Param* p : params.all()) {
    HYTRA_CHECK(!p->shard.split(), "load_weights_file: '", p->name, "' is a tensor-parallel shard (one process only)");
    weights.emplace_back(p->name, p->master);
  }
  load_tensors(path, weights, strictness, /*allow_non_finite=*/false, {});
  params.sync_values_from_master();
}

}  // namespace hytra
