// `hytra preprocess`: Megatron's tools/preprocess_data.py flags -> PREFIX_{key}_document.bin/.idx.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "data/preprocess.h"
#include "train/flag_table.h"
#include "train/metrics/progress.h"

namespace hytra {

int cmd_preprocess(int argc, char** argv) {
  PreprocessOptions opt;
  TokenizerConfig tc;
  int64_t workers = 0, log_interval = 1000;
  FlagTable t;
  auto row = [&](const char* name, FlagSpec::Kind kind, const char* def, const char* help, auto set) {
    FlagSpec s;
    s.name = name;
    s.kind = kind;
    s.default_text = def;
    s.help = help;
    s.set = set;
    t.add(s);
  };
  using K = FlagSpec::Kind;
  row("--input", K::String, "None", "JSON Lines (.jsonl) or text (one document per line)", store(opt.input));
  row("--json-keys", K::StringList, "text", "keys of each JSON object to turn into datasets", store(opt.json_keys));
  row("--output-prefix", K::String, "None", "writes PREFIX_{key}_document.bin/.idx", store(opt.output_prefix));
  row("--append-eod", K::Bool, "false", "append the end-of-document token to every non-empty document",
      store(opt.append_eod));
  row("--workers", K::Int, "all cores", "tokenizer threads", store(workers));
  row("--log-interval", K::Int, "1000", "accepted for compatibility (progress is a bar)", store(log_interval));
  row("--tokenizer-type", K::String, "None", "GPT2BPETokenizer or HuggingFaceTokenizer", store(tc.type));
  row("--vocab-file", K::String, "None", "GPT-2 encoder.json", store(tc.vocab_file));
  row("--merge-file", K::String, "None", "GPT-2 vocab.bpe", store(tc.merge_file));
  row("--tokenizer-model", K::String, "None", "Hugging Face tokenizer.json (or its directory)", store(tc.model));
  if (t.parse(std::vector<std::string>(argv + 1, argv + argc)).help) {
    std::cout << t.help_text("hytra preprocess --input FILE --output-prefix P --tokenizer-type T ...");
    return 0;
  }
  if (workers > 0) setenv("HYTRA_NUM_THREADS", std::to_string(workers).c_str(), 1);  // before the pool starts
  const Gpt2Bpe tok = load_tokenizer(tc);
  ProgressBar bar("preprocess", 100);
  PreprocessStats s = preprocess(opt, tok, [&](int64_t done, int64_t total) {
    bar.update(total > 0 ? done * 100 / total : 100);
  });
  bar.finish();
  for (const auto& p : s.outputs) std::cout << "wrote " << p << ".bin/.idx\n";
  std::cout << s.documents << " documents, " << s.tokens << " tokens\n";
  return 0;
}

}  // namespace hytra
