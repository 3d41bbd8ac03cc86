// `hytra preprocess`: Megatron's tools/preprocess_data.py flags -> PREFIX_{key}_document.bin/.idx.
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "cli/flag_table.h"
#include "cli/flags.h"
#include "commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "data/preprocess.h"

namespace hytra {
namespace {
constexpr int64_t kMaxWorkers = 4096;
}  // namespace

int cmd_preprocess(int argc, char** argv) {
  PreprocessOptions opt;
  TokenizerConfig tc;
  int64_t workers = 0, log_interval = 1000;
  FlagTable t;
  using K = FlagSpec::Kind;
  t.add("--input", K::String, "None", "JSON Lines (.jsonl) or text (one document per line)", store(opt.input));
  t.add("--json-keys", K::StringList, "text", "keys of each JSON object to turn into datasets", store(opt.json_keys));
  t.add("--output-prefix", K::String, "None", "writes PREFIX_{key}_document.bin/.idx", store(opt.output_prefix));
  t.add("--append-eod", K::Bool, "false", "append the end-of-document token to every non-empty document",
      store(opt.append_eod));
  t.add("--workers", K::Int, "all cores", "tokenizer threads", store(workers));
  t.add("--log-interval", K::Int, "1000", "accepted for compatibility (progress is a bar)", store(log_interval));
  add_tokenizer_flags(t, tc);
  t.add("--vocab-size", K::Int, "None", "NullTokenizer: ids below it (itself the end of document); TikTokenizer: all",
        store(tc.vocab_size));
  if (t.parse(std::vector<std::string>(argv + 1, argv + argc)).help) {
    std::cout << t.help_text("hytra preprocess --input FILE --output-prefix P --tokenizer-type T ...");
    return 0;
  }
  // Each worker is a thread started up front: a mistyped count must not start a hundred thousand.
  HYTRA_CHECK(workers >= 0 && workers <= kMaxWorkers, "--workers: expected 0 (all cores) to ", kMaxWorkers, ", got ",
              workers);
  const std::set<std::string> keys(opt.json_keys.begin(), opt.json_keys.end());
  HYTRA_CHECK(keys.size() == opt.json_keys.size(), "--json-keys: a key is given twice (each key writes its own "
              "PREFIX_{key}_document files)");
  opt.workers = int(workers);
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(tc);
  ProgressBar bar("preprocess", 100);
  PreprocessStats s =
      preprocess(opt, *tok, [&](int64_t done, int64_t total) { bar.update(total > 0 ? done * 100 / total : 100); });
  bar.finish();
  for (const auto& p : s.outputs) std::cout << "wrote " << p << ".bin/.idx\n";
  std::cout << s.documents << " documents, " << s.tokens << " tokens\n";
  return 0;
}

}  // namespace hytra
