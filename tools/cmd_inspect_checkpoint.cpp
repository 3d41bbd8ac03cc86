// `hytra inspect-checkpoint PATH`: the manifest (when PATH is a checkpoint directory or a --save
// directory) and every tensor of its safetensors files (or of one .safetensors file): name, dtype,
// shape and an XXH3-64 checksum of its bytes; run_config.yaml is named, not printed.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "commands.h"
#include "core/error.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace hytra {
namespace {

void list_tensors(const std::string& path) {
  SafetensorsFile f(path);
  std::cout << path << ": " << f.entries().size() << " tensors\n";
  for (const auto& [k, v] : f.metadata()) std::cout << "  metadata " << k << " = " << v << "\n";
  for (const auto& e : f.entries()) {
    const uint64_t h = XXH3_64bits(f.data(e), size_t(e.end - e.begin));
    std::string shape = "[";
    for (size_t i = 0; i < e.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(e.shape[i]);
    char sum[17];
    std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(h));
    std::cout << "  " << e.name << "  " << e.dtype << shape << "]  xxh3_64=" << sum << "\n";
  }
}

}  // namespace

int cmd_inspect_checkpoint(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::cout << "usage: hytra inspect-checkpoint PATH   (a --save directory, an iter_* directory or a .safetensors file)\n";
    return argc == 2 ? 0 : 2;
  }
  const std::string path = argv[1];
  if (std::filesystem::is_regular_file(path)) {
    list_tensors(path);
    return 0;
  }
  for (const std::string& left : leftover_save_temporaries(path))
    std::cout << "leftover of a failed or killed save (removed by the next save): " << left << "\n";
  const std::string dir = resolve_checkpoint_dir(path);
  const CheckpointManifest m = read_manifest(dir);  // also verifies sizes and checksums
  std::cout << dir << "\n  iteration " << m.iteration << "\n  consumed samples " << m.consumed_samples
            << "\n  consumed validation samples " << m.consumed_valid_samples << "\n  optimizer step "
            << m.optimizer_step << "\n  " << m.files.size()
            << " listed files present and verified against the manifest\n";
  for (const std::string& file : m.missing) std::cout << "  MISSING: " << file << " is listed but absent\n";
  for (const std::string& file : m.unlisted)
    std::cout << "  UNLISTED: " << file << " is not in the manifest (unverified; a load never reads it)\n";
  if (!m.has_model_record) std::cout << "  model configuration: not recorded (an older hytra checkpoint)\n";
  for (const auto& [name, value] : m.model) std::cout << "  model " << name << " = " << value << "\n";
  for (const std::string& file : m.files) {
    if (file == "run_config.yaml")
      std::cout << dir << "/" << file << ": the run's resolved flags (hytra train --config reads it)\n";
    else
      list_tensors(dir + "/" + file);
  }
  return 0;
}

}  // namespace hytra
