#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/json.h"

namespace hytra {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLatest = "latest_checkpointed_iteration.txt";
constexpr const char* kVersion = "0.1.0";

uint64_t fnv1a(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  HYTRA_CHECK(f.good(), path, ": cannot open");
  uint64_t h = 1469598103934665603ull;
  char buf[1 << 16];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    for (std::streamsize i = 0; i < f.gcount(); ++i) {
      h ^= uint8_t(buf[i]);
      h *= 1099511628211ull;
    }
  }
  return h;
}

void fsync_path(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    HYTRA_CHECK(f.good(), tmp, ": write failed");
  }
  fsync_path(tmp);
  fs::rename(tmp, path);
}


}  // namespace

std::string iteration_dir_name(int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

void save_checkpoint(const std::string& save_dir, CheckpointContents c, int64_t keep) {
  fs::create_directories(save_dir);
  const std::string name = iteration_dir_name(c.manifest.iteration);
  const fs::path final_dir = fs::path(save_dir) / name;
  const fs::path tmp_dir = fs::path(save_dir) / (name + ".tmp-" + std::to_string(getpid()));
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir);
  std::vector<std::string> files = {"model.safetensors"};
  write_safetensors((tmp_dir / files[0]).string(), std::move(c.model), {{"format", "pt"}});
  if (!c.optimizer.empty()) {
    files.push_back("optimizer.safetensors");
    write_safetensors((tmp_dir / files[1]).string(), std::move(c.optimizer), {{"format", "pt"}});
  }
  std::string m = "{\n";
  m += "  \"hytra_version\": " + json_quote(kVersion) + ",\n";
  m += "  \"iteration\": " + std::to_string(c.manifest.iteration) + ",\n";
  m += "  \"consumed_samples\": " + std::to_string(c.manifest.consumed_samples) + ",\n";
  m += "  \"consumed_valid_samples\": " + std::to_string(c.manifest.consumed_valid_samples) + ",\n";
  m += "  \"optimizer_step\": " + std::to_string(c.manifest.optimizer_step) + ",\n";
  m += "  \"config\": " + json_quote(c.manifest.config) + ",\n";
  m += "  \"files\": {";
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string p = (tmp_dir / files[i]).string();
    char sum[17];
    std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(fnv1a(p)));
    m += (i ? ", " : "") + json_quote(files[i]) + ": {\"bytes\": " + std::to_string(fs::file_size(p)) +
         ", \"fnv1a64\": " + json_quote(sum) + "}";
  }
  m += "}\n}\n";
  write_text_atomic((tmp_dir / "manifest.json").string(), m);
  fsync_path(tmp_dir.string());
  if (fs::exists(final_dir)) {
    // Re-saving an iteration (the one "latest" may name): swap the two directories atomically,
    // so a crash never leaves "latest" pointing at a missing directory, then drop the old one.
    HYTRA_CHECK(renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0,
                final_dir.string(), ": cannot replace (", std::strerror(errno), ")");
    fs::remove_all(tmp_dir);
  } else {
    fs::rename(tmp_dir, final_dir);
  }
  fsync_path(save_dir);
  write_text_atomic((fs::path(save_dir) / kLatest).string(), std::to_string(c.manifest.iteration) + "\n");
  if (keep > 0) {
    std::vector<std::string> iters;
    for (const auto& e : fs::directory_iterator(save_dir)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && n.size() == 12 && n.rfind("iter_", 0) == 0) iters.push_back(n);
    }
    std::sort(iters.begin(), iters.end());
    for (size_t i = 0; i + size_t(keep) < iters.size(); ++i) fs::remove_all(fs::path(save_dir) / iters[i]);
  }
}

std::string resolve_checkpoint_dir(const std::string& load) {
  if (fs::exists(fs::path(load) / "manifest.json")) return load;
  const fs::path latest = fs::path(load) / kLatest;
  std::ifstream f(latest);
  HYTRA_CHECK(f.good(), load, ": not a checkpoint: ", latest.string(),
              " not found (expected a --save directory or an iter_* directory)");
  int64_t it = -1;
  f >> it;
  HYTRA_CHECK(it >= 0, latest.string(), ": expected an iteration number");
  const fs::path dir = fs::path(load) / iteration_dir_name(it);
  HYTRA_CHECK(fs::exists(dir / "manifest.json"), dir.string(), ": checkpoint named by ", latest.string(),
              " is missing or incomplete");
  return dir.string();
}

CheckpointManifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "manifest.json").string();
  const Json j = Json::parse_file(path);
  CheckpointManifest m;
  m.iteration = j.at("iteration").as_int("iteration");
  m.consumed_samples = j.at("consumed_samples").as_int("consumed_samples");
  m.consumed_valid_samples = j.at("consumed_valid_samples").as_int("consumed_valid_samples");
  m.optimizer_step = j.at("optimizer_step").as_int("optimizer_step");
  m.config = j.at("config").as_string("config");
  for (const auto& [file, info] : j.at("files").as_object("files")) {
    const std::string p = (fs::path(dir) / file).string();
    HYTRA_CHECK(fs::exists(p), path, ": lists ", file, ", which is missing");
    HYTRA_CHECK(int64_t(fs::file_size(p)) == info.at("bytes").as_int("bytes"), p, ": size differs from the manifest");
    char sum[17];
    std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(fnv1a(p)));
    HYTRA_CHECK(info.at("fnv1a64").as_string("fnv1a64") == sum, p, ": checksum differs from the manifest (corrupt file)");
  }
  return m;
}

}  // namespace hytra
