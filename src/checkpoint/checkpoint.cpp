#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <regex>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json.h"
#include "core/log.h"
#include "core/progress.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace hytra {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLatest = "latest_checkpointed_iteration.txt";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kRunConfigFile = "run_config.yaml";
constexpr const char* kVersion = "0.1.0";

// A file's checksum: XXH3-64 (hex), or FNV-1a 64 for checkpoints written before hytra switched (read only).
std::string file_checksum(const std::string& path, bool fnv) {
  std::ifstream f(path, std::ios::binary);
  HYTRA_CHECK(f.good(), path, ": cannot open");
  std::vector<char> buf(size_t(1) << 22);
  uint64_t fnv_hash = 1469598103934665603ull;
  const std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> owner(XXH3_createState(), XXH3_freeState);
  XXH3_state_t* state = owner.get();
  HYTRA_CHECK(state != nullptr && XXH3_64bits_reset(state) == XXH_OK, "XXH3: cannot allocate its state");
  while (f.read(buf.data(), std::streamsize(buf.size())) || f.gcount() > 0) {
    const size_t n = size_t(f.gcount());
    if (fnv) {
      for (size_t i = 0; i < n; ++i) fnv_hash = (fnv_hash ^ uint8_t(buf[i])) * 1099511628211ull;
    } else {
      XXH3_64bits_update(state, buf.data(), n);
    }
  }
  const uint64_t h = fnv ? fnv_hash : XXH3_64bits_digest(state);
  char sum[17];
  std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(h));
  return sum;
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  HYTRA_CHECK(std::rename(from.c_str(), to.c_str()) == 0, to.string(), ": cannot rename ", from.string(),
              " into place (", std::strerror(errno), ")");
}

std::string manifest_text(const CheckpointManifest& m, const fs::path& dir, const std::vector<std::string>& files) {
  std::string t = "{\n";
  t += "  \"hytra_version\": " + json_quote(kVersion) + ",\n";
  t += "  \"iteration\": " + std::to_string(m.iteration) + ",\n";
  t += "  \"consumed_samples\": " + std::to_string(m.consumed_samples) + ",\n";
  t += "  \"consumed_valid_samples\": " + std::to_string(m.consumed_valid_samples) + ",\n";
  t += "  \"optimizer_step\": " + std::to_string(m.optimizer_step) + ",\n";
  t += "  \"config\": " + json_quote(m.config) + ",\n";
  t += "  \"model\": {";
  for (size_t i = 0; i < m.model.size(); ++i)
    t += std::string(i ? ",\n    " : "\n    ") + json_quote(m.model[i].first) + ": " + json_quote(m.model[i].second);
  t += m.model.empty() ? "},\n" : "\n  },\n";
  t += "  \"files\": {";
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string p = (dir / files[i]).string();
    t += (i ? ", " : "") + json_quote(files[i]) + ": {\"bytes\": " + std::to_string(fs::file_size(p)) +
         ", \"xxh3_64\": " + json_quote(file_checksum(p, false)) + "}";
  }
  t += "}\n}\n";
  return t;
}

// "iter_0000100" -> 100; -1 for other names.
int64_t iteration_of_dir_name(const std::string& name) {
  static const std::regex re("iter_([0-9]{7,18})");
  std::smatch m;
  return std::regex_match(name, m, re) ? std::stoll(m[1].str()) : -1;
}

bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

std::string iteration_dir_name(int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

bool all_finite_f32(const unsigned char* bytes, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    float v;
    std::memcpy(&v, bytes + 4 * i, 4);
    if (!std::isfinite(v)) return false;
  }
  return true;
}

std::string first_non_finite(const std::vector<SafetensorsTensor>& tensors) {
  for (const auto& t : tensors)
    if (t.dtype == "F32" && !all_finite_f32(t.bytes.data(), int64_t(t.bytes.size() / 4))) return t.name;
  return "";
}

std::vector<std::string> leftover_save_temporaries(const std::string& save_dir) {
  static const std::regex re("(iter_[0-9]+|latest_checkpointed_iteration\\.txt)\\.tmp(-[0-9]+)?");
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(save_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (std::regex_match(n, re)) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void save_checkpoint(const std::string& save_dir, CheckpointContents c, int64_t keep, bool allow_non_finite) {
  const std::string name = iteration_dir_name(c.manifest.iteration);
  if (!allow_non_finite) {
    for (const auto* part : {&c.model, &c.optimizer}) {
      const std::string bad = first_non_finite(*part);
      HYTRA_CHECK(bad.empty(), "--save: iteration ", c.manifest.iteration, ": tensor '", bad,
                  "' holds NaN or Inf values; refusing to save a non-finite checkpoint into ", save_dir,
                  " (the run has diverged: try a lower --lr; --ckpt-allow-non-finite saves it anyway)");
    }
  }
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  HYTRA_CHECK(!ec && fs::is_directory(save_dir), "--save: cannot create directory ", save_dir, " (", ec.message(), ")");
  for (const std::string& left : leftover_save_temporaries(save_dir)) fs::remove_all(left, ec);
  const fs::path final_dir = fs::path(save_dir) / name;
  const fs::path tmp_dir = fs::path(save_dir) / (name + ".tmp-" + std::to_string(getpid()));
  // Progress: the weights written, the optimizer state, the manifest's checksums.
  ProgressBar bar("save " + final_dir.string(), 3, info_file(), 0.1, kPlainProgressSeconds);
  try {
    HYTRA_CHECK(fs::create_directory(tmp_dir, ec) && !ec, tmp_dir.string(), ": cannot create (", ec.message(), ")");
    std::vector<std::string> files = {kModelFile};
    write_safetensors((tmp_dir / files[0]).string(), std::move(c.model), {{"format", "pt"}});
    bar.update(1);
    if (!c.optimizer.empty()) {
      files.push_back("optimizer.safetensors");
      write_safetensors((tmp_dir / files[1]).string(), std::move(c.optimizer), {{"format", "pt"}});
    }
    if (!c.run_config.empty()) {
      files.push_back(kRunConfigFile);
      write_file_atomic((tmp_dir / kRunConfigFile).string(), c.run_config);
    }
    bar.update(2);
    write_file_atomic((tmp_dir / "manifest.json").string(), manifest_text(c.manifest, tmp_dir, files));
    bar.update(3);
    fsync_directory(tmp_dir.string());
    if (fs::exists(final_dir)) {
      // Re-saving an iteration (the one "latest" may name): swap the two directories atomically,
      // so a crash never leaves "latest" pointing at a missing directory, then drop the old one.
      HYTRA_CHECK(renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0,
                  final_dir.string(), ": cannot replace (", std::strerror(errno), ")");
    } else {
      rename_or_fail(tmp_dir, final_dir);
    }
    fsync_directory(save_dir);
  } catch (...) {
    fs::remove_all(tmp_dir, ec);
    throw;
  }
  fs::remove_all(tmp_dir, ec);  // the previous copy of a re-saved iteration
  write_file_atomic((fs::path(save_dir) / kLatest).string(), std::to_string(c.manifest.iteration) + "\n");
  if (keep > 0) {
    std::vector<std::string> iters;
    for (const auto& e : fs::directory_iterator(save_dir)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && iteration_of_dir_name(n) >= 0) iters.push_back(n);
    }
    std::sort(iters.begin(), iters.end());
    for (size_t i = 0; i + size_t(keep) < iters.size(); ++i) fs::remove_all(fs::path(save_dir) / iters[i]);
  }
}

bool holds_no_checkpoint(const std::string& load) {
  std::error_code ec;
  if (!fs::exists(load, ec)) return true;
  if (!fs::is_directory(load, ec)) return false;
  if (fs::exists(fs::path(load) / "manifest.json") || fs::exists(fs::path(load) / kLatest)) return false;
  for (const auto& e : fs::directory_iterator(load))
    if (iteration_of_dir_name(e.path().filename().string()) >= 0) return false;
  return true;
}

std::string resolve_checkpoint_dir(const std::string& load) {
  if (fs::exists(fs::path(load) / "manifest.json")) return load;
  const fs::path latest = fs::path(load) / kLatest;
  std::ifstream f(latest, std::ios::binary);
  HYTRA_CHECK(f.good(), load, ": not a checkpoint: ", latest.string(),
              " not found (expected a --save directory or an iter_* directory)");
  HYTRA_CHECK(fs::is_regular_file(latest), latest.string(), ": not a regular file (expected an iteration number)");
  const std::string text{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  static const std::regex number("\\s*([0-9]{1,18})\\s*");
  std::smatch m;
  HYTRA_CHECK(std::regex_match(text, m, number), latest.string(), ": expected an iteration number, got '",
              text.substr(0, 40), "'");
  const fs::path dir = fs::path(load) / iteration_dir_name(std::stoll(m[1].str()));
  HYTRA_CHECK(fs::is_directory(dir), dir.string(), ": iteration ", m[1].str(), " named by ", latest.string(),
              " does not exist (deleted or never finished saving)");
  HYTRA_CHECK(fs::exists(dir / "manifest.json"), dir.string(), ": iteration ", m[1].str(), " named by ",
              latest.string(), " has no manifest.json (a half-written or foreign checkpoint directory)");
  return dir.string();
}

namespace {

// A listed file's size and checksum against its manifest entry `info` (manifest `path`).
void verify_listed_file(const std::string& p, const Json& info, const std::string& path) {
  HYTRA_CHECK(fs::is_regular_file(p), p, ": listed in ", path, " but not a regular file");
  HYTRA_CHECK(int64_t(fs::file_size(p)) == info.at("bytes").as_int("bytes"), p, ": size differs from the manifest");
  const bool fnv = info.find("xxh3_64") == nullptr;  // an older checkpoint's FNV-1a checksum
  const char* kind = fnv ? "fnv1a64" : "xxh3_64";
  HYTRA_CHECK(info.at(kind).as_string(kind) == file_checksum(p, fnv), p,
              ": checksum differs from the manifest (corrupt file)");
}

CheckpointManifest parse_manifest(const std::string& dir, const std::string& path) {
  HYTRA_CHECK(fs::is_regular_file(path), path, ": not a regular file (expected the checkpoint's JSON manifest)");
  const Json j = Json::parse_file(path);
  HYTRA_CHECK(j.is_object(), path, ": expected a JSON object");
  CheckpointManifest m;
  m.iteration = j.at("iteration").as_int("iteration");
  m.consumed_samples = j.at("consumed_samples").as_int("consumed_samples");
  m.consumed_valid_samples = j.at("consumed_valid_samples").as_int("consumed_valid_samples");
  m.optimizer_step = j.at("optimizer_step").as_int("optimizer_step");
  m.config = j.at("config").as_string("config");
  HYTRA_CHECK(m.iteration >= 0 && m.consumed_valid_samples >= 0, path,
              ": iteration and consumed samples must be non-negative");
  // Every iteration consumes at least one sample and at most a global batch (< 2^31), and takes at
  // most one optimizer step.
  HYTRA_CHECK(m.consumed_samples >= m.iteration, path, ": iteration ", m.iteration, " with only ",
              m.consumed_samples, " consumed samples is inconsistent (corrupt manifest)");
  HYTRA_CHECK(m.consumed_samples / INT32_MAX <= m.iteration, path, ": iteration ", m.iteration, " with ",
              m.consumed_samples, " consumed samples is inconsistent (corrupt manifest)");
  HYTRA_CHECK(m.optimizer_step >= 0 && m.optimizer_step <= m.iteration, path, ": optimizer step ", m.optimizer_step,
              " is outside [0, iteration ", m.iteration, "] (corrupt manifest)");
  fs::path normal = fs::path(dir).lexically_normal();
  if (normal.filename().empty()) normal = normal.parent_path();  // "ck/iter_0000002/"
  const std::string dir_name = normal.filename().string();
  const int64_t dir_iteration = iteration_of_dir_name(dir_name);
  HYTRA_CHECK(dir_iteration < 0 || dir_iteration == m.iteration, path, ": iteration ", m.iteration,
              " differs from its directory's name ", dir_name);
  if (const Json* model = j.find("model")) {
    for (const auto& [k, v] : model->as_object("model")) m.model.emplace_back(k, v.as_string("model entry"));
    m.has_model_record = true;
  }
  std::set<std::string> listed;
  for (const auto& [file, info] : j.at("files").as_object("files")) {
    HYTRA_CHECK(plain_file_name(file), path, ": lists '", file,
                "': a checkpoint's files must be plain names inside its directory");
    listed.insert(file);
    const std::string p = (fs::path(dir) / file).string();
    if (!fs::exists(p)) {
      m.missing.push_back(file);
      continue;
    }
    verify_listed_file(p, info, path);
    m.files.push_back(file);
  }
  HYTRA_CHECK(listed.count(kModelFile), path, ": 'files' does not list ", kModelFile,
              " (a manifest must list every tensor file with its size and checksum)");
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (e.path().extension() == ".safetensors" && !listed.count(n)) m.unlisted.push_back(n);
  }
  std::sort(m.unlisted.begin(), m.unlisted.end());
  return m;
}

}  // namespace

CheckpointManifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "manifest.json").string();
  try {
    return parse_manifest(dir, path);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find(dir) != std::string::npos) throw;
    fail(str(path, ": ", what));  // a missing key or a wrong type: the JSON accessors do not name the file
  }
}

std::string checkpoint_run_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "manifest.json").string();
  try {
    HYTRA_CHECK(fs::is_regular_file(path), path, ": not a regular file (expected the checkpoint's JSON manifest)");
    const Json j = Json::parse_file(path);
    HYTRA_CHECK(j.is_object(), path, ": expected a JSON object");
    const Json* info = j.at("files").find(kRunConfigFile);
    if (info == nullptr) return "";
    const std::string p = (fs::path(dir) / kRunConfigFile).string();
    HYTRA_CHECK(fs::exists(p), p, ": listed in ", path, " but missing");
    verify_listed_file(p, *info, path);
    return p;
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find(dir) != std::string::npos) throw;
    fail(str(path, ": ", what));
  }
}

void check_manifest_files(const CheckpointManifest& m, const std::string& dir, const std::set<std::string>& reads,
                          Strictness strictness, std::vector<std::string>& warnings) {
  const std::string manifest = (fs::path(dir) / "manifest.json").string();
  for (const std::string& f : m.missing) {
    const std::string msg = str(dir, ": ", f, " is listed in the manifest but missing");
    HYTRA_CHECK(!reads.count(f), msg, " (this load reads it)");
    HYTRA_CHECK(strictness != Strictness::RaiseAll, msg, " (--ckpt-strictness raise_all)");
    warnings.push_back(msg);
  }
  for (const std::string& f : m.unlisted) {
    const std::string msg = str(dir, "/", f, ": not listed in ", manifest);
    HYTRA_CHECK(!reads.count(f), msg, "; refusing to read an unverified tensor file");
    HYTRA_CHECK(strictness != Strictness::RaiseAll && strictness != Strictness::RaiseUnexpected, msg,
                " (--ckpt-strictness ", strictness == Strictness::RaiseAll ? "raise_all" : "raise_unexpected",
                " refuses extra files)");
    warnings.push_back(msg + "; ignored, not read");
  }
  for (const std::string& f : reads)
    HYTRA_CHECK(std::find(m.files.begin(), m.files.end(), f) != m.files.end(), manifest, " does not list ", f,
                ", which this load reads",
                f == "optimizer.safetensors"
                    ? " (a checkpoint without optimizer state: --no-load-optim or --finetune loads its weights)"
                    : "");
}

}  // namespace hytra
