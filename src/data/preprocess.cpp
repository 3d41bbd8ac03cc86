#include "data/preprocess.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>

#include "core/error.h"
#include "core/json.h"
#include "core/thread_pool.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer/gpt2_bpe.h"
#include "data/tokenizer/null_tokenizer.h"
#include "data/tokenizer/pretokenize.h"
#include "data/tokenizer/sentencepiece.h"
#include "data/tokenizer/tiktoken.h"

namespace hytra {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// One document's sentences under `key` of a JSON line (a string, or a list of strings).
std::vector<std::string> sentences_of(const Json& doc, const std::string& key, const std::string& where) {
  const Json* v = doc.find(key);
  HYTRA_CHECK(v != nullptr, where, ": no key '", key, "' (--json-keys)");
  if (v->is_string()) return {v->as_string()};
  std::vector<std::string> out;
  for (const Json& s : v->as_array((where + ": '" + key + "'").c_str())) out.push_back(s.as_string(where.c_str()));
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerConfig& cfg) {
  if (cfg.type == "GPT2BPETokenizer") {
    HYTRA_CHECK(!cfg.vocab_file.empty() && !cfg.merge_file.empty(),
                "--tokenizer-type GPT2BPETokenizer: needs --vocab-file (encoder.json) and --merge-file (vocab.bpe)");
    return std::make_unique<Gpt2Bpe>(Gpt2Bpe::from_files(cfg.vocab_file, cfg.merge_file));
  }
  if (cfg.type == "HuggingFaceTokenizer") {
    HYTRA_CHECK(!cfg.model.empty(), "--tokenizer-type HuggingFaceTokenizer: needs --tokenizer-model (tokenizer.json)");
    struct stat st;
    const bool is_dir = stat(cfg.model.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    return std::make_unique<Gpt2Bpe>(
        Gpt2Bpe::from_hf_tokenizer_json(is_dir ? cfg.model + "/tokenizer.json" : cfg.model));
  }
  if (cfg.type == "NullTokenizer") return std::make_unique<NullTokenizer>(cfg.vocab_size);
  if (cfg.type == "TikTokenizer")
    return std::make_unique<TikTokenizer>(TikTokenConfig{cfg.model, cfg.tiktoken_pattern, cfg.vocab_size,
                                                         cfg.tiktoken_num_special_tokens, cfg.tiktoken_special_tokens});
  if (cfg.type == "GPTSentencePieceTokenizer" || cfg.type == "SentencePieceTokenizer" ||
      cfg.type == "Llama2Tokenizer") {
    HYTRA_CHECK(!cfg.model.empty(), "--tokenizer-type ", cfg.type,
                ": needs --tokenizer-model (a SentencePiece .model)");
    using F = SentencePieceTokenizer::Flavor;
    const F flavor = !cfg.legacy || cfg.type == "GPTSentencePieceTokenizer" ? F::Plain
                     : cfg.type == "SentencePieceTokenizer"                 ? F::LegacySentencePiece
                                                                            : F::LegacyLlama2;
    return std::make_unique<SentencePieceTokenizer>(cfg.model, flavor);
  }
  fail(
      str("--tokenizer-type: expected GPT2BPETokenizer, HuggingFaceTokenizer, TikTokenizer, NullTokenizer, "
          "GPTSentencePieceTokenizer, SentencePieceTokenizer or Llama2Tokenizer, got '",
          cfg.type, "'"));
}

PreprocessStats preprocess(const PreprocessOptions& opt, const Tokenizer& tok,
                           const std::function<void(int64_t, int64_t)>& progress) {
  HYTRA_CHECK(!opt.output_prefix.empty(), "--output-prefix: required");
  HYTRA_CHECK(!opt.json_keys.empty(), "--json-keys: expected at least one key");
  HYTRA_CHECK(!opt.input.empty(), "--input: required");
  struct stat st;
  HYTRA_CHECK(stat(opt.input.c_str(), &st) == 0, "--input '", opt.input, "': ", std::strerror(errno));
  // As Megatron's preprocess_data.py, which opens --input as one file.
  HYTRA_CHECK(!S_ISDIR(st.st_mode), "--input '", opt.input,
              "' is a directory; expected a file (JSON Lines, or text with one document per line)");
  std::ifstream in(opt.input, std::ios::binary);
  HYTRA_CHECK(in.good(), "--input '", opt.input, "': cannot open (", std::strerror(errno), ")");
  in.seekg(0, std::ios::end);
  const int64_t total_bytes = int64_t(in.tellg());
  in.seekg(0);
  const bool jsonl = ends_with(opt.input, ".jsonl") || ends_with(opt.input, ".json");
  const std::vector<std::string> keys = jsonl ? opt.json_keys : std::vector<std::string>{"text"};
  const TokenDtype dtype = optimal_token_dtype(tok.vocab_size());
  const int32_t eod = tok.eod();
  HYTRA_CHECK(!opt.append_eod || eod >= 0, "--append-eod: the tokenizer has no end-of-document token (<|endoftext|>)");

  std::optional<ThreadPool> own_pool;
  if (opt.workers > 0) own_pool.emplace(opt.workers);
  ThreadPool& pool = own_pool ? *own_pool : ThreadPool::global();

  PreprocessStats stats;
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const auto& k : keys) {
    stats.outputs.push_back(opt.output_prefix + "_" + k + "_document");
    writers.push_back(std::make_unique<IndexedDatasetWriter>(stats.outputs.back(), dtype));
  }
  int64_t line_no = 0, next_line_offset = 0;  // next_line_offset: in bytes, in the file
  for (bool more = true; more;) {
    // A batch of documents: per key, the sentences of each document, flattened for the tokenizer.
    std::vector<std::vector<std::string>> batch(keys.size());
    std::vector<std::vector<size_t>> sentence_counts(keys.size());
    std::string line;
    int64_t docs = 0;
    while (docs < opt.batch_documents && (more = bool(std::getline(in, line)))) {
      ++line_no;
      const int64_t line_offset = next_line_offset;
      next_line_offset += int64_t(line.size()) + 1;
      const std::string where = str(opt.input, ":", line_no);
      // Checked here, in line order, so the error names the line whatever the worker count (the
      // tokenizer would only know the offset in a decoded string).
      if (const size_t bad = utf8_invalid_offset(line); bad != std::string::npos) {
        fail(str(where, ": invalid UTF-8 at byte offset ", bad, " of the line (", line_offset + int64_t(bad),
                 " in the file): byte 0x", std::hex, int(static_cast<unsigned char>(line[bad]))));
      }
      if (jsonl && line.find_first_not_of(" \t\r") == std::string::npos) continue;
      Json doc;
      if (jsonl) {
        try {
          doc = Json::parse(line);
        } catch (const Error& e) {
          fail(str(where, ": ", e.what()));
        }
      }
      for (size_t k = 0; k < keys.size(); ++k) {
        std::vector<std::string> s = jsonl ? sentences_of(doc, keys[k], where) : std::vector<std::string>{line};
        sentence_counts[k].push_back(s.size());
        for (auto& x : s) batch[k].push_back(std::move(x));
      }
      ++docs;
    }
    for (size_t k = 0; k < keys.size(); ++k) {
      const std::vector<std::vector<int32_t>> ids = tok.encode_batch(batch[k], pool);
      size_t next = 0;
      for (size_t count : sentence_counts[k]) {
        std::vector<int32_t> tokens;
        std::vector<int64_t> lengths;
        for (size_t s = 0; s < count; ++s, ++next) {
          if (ids[next].empty()) continue;  // empty sentences are dropped
          tokens.insert(tokens.end(), ids[next].begin(), ids[next].end());
          lengths.push_back(int64_t(ids[next].size()));
        }
        if (opt.append_eod && !tokens.empty()) {
          tokens.push_back(eod);
          lengths.back() += 1;
        }
        writers[k]->add_document(tokens, lengths);
        stats.tokens += int64_t(tokens.size());
      }
    }
    stats.documents += docs;
    HYTRA_CHECK(!in.bad(), "--input '", opt.input, "': read error after line ", line_no);
    if (progress) progress(more ? int64_t(in.tellg()) : total_bytes, total_bytes);
  }
  for (auto& w : writers) w->finalize();
  return stats;
}

}  // namespace hytra
