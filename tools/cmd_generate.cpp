// `hytra generate [model flags] --load CKPT (--prompt TEXT | --prompt-file F | --prompt-ids "1 2 3") [sampling flags]`
// (cli/generate.h). The model and tokenizer flags are `hytra train`'s; the checkpoint's own run_config.yaml supplies
// them (--use-checkpoint-args is implied) where the command line leaves them out.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "cli/generate.h"
#include "commands.h"
#include "core/error.h"

namespace hytra {
namespace {

const char* kUsage =
    "usage: hytra generate [model flags as for train] --load CKPT (--prompt TEXT | --prompt-file FILE | --prompt-ids "
    "IDS)\n"
    "         [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--ignore-eod]\n"
    "  --prompt TEXT         the text to continue (encoded by the tokenizer flags or the checkpoint's)\n"
    "  --prompt-file FILE    the same, read from a file\n"
    "  --prompt-ids IDS      token ids, separated by spaces or commas (no tokenizer needed; ids are printed)\n"
    "  --max-new-tokens N    the most tokens to add (default 64)\n"
    "  --temperature T       logits / T before sampling; 0 = greedy (default 1.0)\n"
    "  --top-k K             sample among the K most likely tokens (default 0: all; 1 = greedy)\n"
    "  --top-p P             sample among the fewest most likely tokens holding probability P (default 1.0)\n"
    "  --ignore-eod          do not stop at the tokenizer's end-of-document token\n"
    "  --seed S              the sampler's seed (default 1234)\n";

double number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  HYTRA_CHECK(!v.empty() && end == v.c_str() + v.size(), flag, ": expected a number, got '", v, "'");
  return x;
}

int64_t integer(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  HYTRA_CHECK(!v.empty() && end == v.c_str() + v.size() && errno == 0, flag, ": expected an integer, got '", v, "'");
  return x;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::string s = text;
  std::replace(s.begin(), s.end(), ',', ' ');
  std::istringstream in(s);
  std::vector<int32_t> ids;
  for (std::string w; in >> w;) {
    const int64_t id = integer("--prompt-ids", w);
    HYTRA_CHECK(id >= 0 && id <= INT32_MAX, "--prompt-ids: token id ", w, " is negative or too large");
    ids.push_back(int32_t(id));
  }
  HYTRA_CHECK(!ids.empty(), "--prompt-ids: expected at least one token id, got '", text, "'");
  return ids;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  HYTRA_CHECK(f.good(), "--prompt-file: cannot open ", path);
  std::ostringstream s;
  s << f.rdbuf();
  HYTRA_CHECK(!f.bad(), "--prompt-file: cannot read ", path);
  return s.str();
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  std::vector<std::string> args;
  PromptInput prompt;
  GenerateOptions opt;
  int prompts = 0;
  bool ignore_eod = false, help = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      HYTRA_CHECK(i + 1 < argc, a, ": expected a value");
      return argv[++i];
    };
    if (a == "--prompt") {
      prompt.text = value();
      HYTRA_CHECK(!prompt.text.empty(), "--prompt: expected text, got an empty string");
      ++prompts;
    } else if (a == "--prompt-file") {
      const std::string path = value();
      prompt.text = read_file(path);
      HYTRA_CHECK(!prompt.text.empty(), "--prompt-file: ", path, " is empty");
      ++prompts;
    } else if (a == "--prompt-ids") {
      prompt.ids = parse_ids(value());
      ++prompts;
    } else if (a == "--max-new-tokens") {
      opt.max_new_tokens = integer(a, value());
    } else if (a == "--temperature") {
      opt.sampling.temperature = number(a, value());
    } else if (a == "--top-k") {
      opt.sampling.top_k = integer(a, value());
    } else if (a == "--top-p") {
      opt.sampling.top_p = number(a, value());
    } else if (a == "--ignore-eod") {
      ignore_eod = true;
    } else {
      help |= a == "--help" || a == "-h";
      args.push_back(a);
    }
  }
  // The run needs no data: synthetic data and one-step training flags stand in for what train requires.
  bool has_data = false;
  for (const auto& a : args) has_data |= a == "--mock-data" || a == "--data-path";
  if (!has_data) args.push_back("--mock-data");
  for (const char* f : {"--micro-batch-size", "--train-iters", "--lr"})
    if (std::find(args.begin(), args.end(), f) == args.end()) args.insert(args.end(), {f, "1"});
  if (std::find(args.begin(), args.end(), "--load") != args.end() &&
      std::find(args.begin(), args.end(), "--use-checkpoint-args") == args.end())
    args.push_back("--use-checkpoint-args");
  ModelConfig m;
  TrainConfig t;
  std::string flag_help;
  if (!parse_train_args(args, m, t, &flag_help) || help) {
    std::cout << kUsage << "\nmodel and tokenizer flags (as for train):\n" << flag_help;
    return 0;
  }
  HYTRA_CHECK(prompts == 1, "give exactly one of --prompt, --prompt-file and --prompt-ids (got ", prompts, ")");
  HYTRA_CHECK(opt.max_new_tokens >= 1, "--max-new-tokens: expected at least 1, got ", opt.max_new_tokens);
  opt.seed = t.seed;
  opt.stop_at_eod = !ignore_eod;
  run_generate(m, t, prompt, opt);
  return 0;
}

}  // namespace hytra
