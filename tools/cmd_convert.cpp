// `hytra convert --to-hf OUT [--hf-family F] [--hf-dtype bf16|fp32] [--hf-max-shard-size BYTES] [model flags]
// --load CKPT`, `hytra convert --from-hf HF_DIR --save CKPT` and `hytra convert --from-megatron FILE.safetensors
// [model flags] --save CKPT` (cli/hf_convert.h).
#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/flag_table.h"
#include "cli/flags.h"
#include "cli/hf_convert.h"
#include "commands.h"
#include "core/error.h"

namespace hytra {

namespace {
const char* kUsage =
    "usage: hytra convert --to-hf OUT_DIR [--hf-family llama|qwen3_moe|nemotron_h|deepseek_v3] [--hf-dtype bf16|fp32]\n"
    "                     [--hf-max-shard-size BYTES] [model flags as for train] --load CKPT\n"
    "       hytra convert --from-hf HF_DIR --save CKPT_DIR\n"
    "       hytra convert --from-megatron FILE.safetensors [model flags as for train] --save CKPT_DIR\n"
    "         (FILE from tools/megatron_checkpoint.py, which reads Megatron's torch_dist and torch checkpoints)\n";
}  // namespace

int cmd_convert(int argc, char** argv) {
  std::vector<std::string> args;
  std::string to, from, from_megatron, save;
  std::optional<HfFamily> family;
  HfExportOptions opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] {
      HYTRA_CHECK(i + 1 < argc, a, ": expected a value");
      return std::string(argv[++i]);
    };
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "--to-hf") {
      to = value();
    } else if (a == "--from-hf") {
      from = value();
    } else if (a == "--from-megatron") {
      from_megatron = value();
    } else if (a == "--hf-family") {
      family = hf_family_of(value());
    } else if (a == "--hf-dtype") {
      const std::string d = value();
      HYTRA_CHECK(d == "bf16" || d == "fp32", "--hf-dtype: expected bf16 or fp32, got '", d, "'");
      opt.bf16 = d == "bf16";
    } else if (a == "--hf-max-shard-size") {
      opt.max_shard_bytes = parse_int_value(a, value());
    } else {
      args.push_back(a);
    }
  }
  HYTRA_CHECK(int(!to.empty()) + int(!from.empty()) + int(!from_megatron.empty()) == 1,
              "hytra convert: give one of --to-hf OUT_DIR, --from-hf HF_DIR and --from-megatron FILE\n", kUsage);
  if (!from.empty()) {
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--save" && i + 1 < args.size())
        save = args[++i];
      else
        throw Error(str("hytra convert --from-hf: unexpected argument '", args[i], "' (give --save CKPT_DIR)"));
    }
    HYTRA_CHECK(!save.empty(), "--save: required (where the hytra checkpoint goes)");
    const HfImport r = convert_from_hf(from, save);
    std::cout << "hytra: wrote " << r.checkpoint << " from the " << hf_family_name(r.family) << " folder " << from
              << "\nhytra: train on it with --load " << save << " --finetune and the model flags:";
    for (const std::string& f : r.model_flags)
      std::cout << " " << (f.find_first_of(" []*") == std::string::npos ? f : "'" + f + "'");
    std::cout << "\n";
    return 0;
  }
  // The model flags are `hytra train`'s; no data is read.
  bool has_data = false;
  for (const auto& a : args) has_data |= a == "--mock-data" || a == "--data-path";
  if (!has_data) args.push_back("--mock-data");
  for (const char* f : {"--micro-batch-size", "--train-iters", "--lr"})
    if (std::find(args.begin(), args.end(), f) == args.end()) args.insert(args.end(), {f, "1"});
  ModelConfig m;
  TrainConfig t;
  std::string help;
  if (!parse_train_args(args, m, t, &help)) {
    std::cout << kUsage << help;
    return 0;
  }
  if (!from_megatron.empty()) {
    HYTRA_CHECK(!t.save.empty(), "--save: required (where the hytra checkpoint goes)");
    HYTRA_CHECK(t.load.empty(), "hytra convert --from-megatron: --load is not read (the input is ", from_megatron, ")");
    const std::string written = convert_from_megatron(m, t, from_megatron, t.save);
    std::cout << "hytra: wrote " << written << " from the Megatron parameters in " << from_megatron
              << "\nhytra: train on it with the same model flags and --load " << t.save
              << " --no-load-optim (or --finetune)\n";
    return 0;
  }
  const HfFamily f = convert_to_hf(m, t, to, family, opt);
  std::cout << "hytra: wrote the " << hf_family_name(f) << " folder " << to << " (" << (opt.bf16 ? "bf16" : "fp32")
            << ")\n";
  return 0;
}

}  // namespace hytra
