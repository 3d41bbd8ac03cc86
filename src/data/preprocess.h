// `hytra preprocess`, the library side (Megatron's tools/preprocess_data.py, docs/spec/indexed_dataset.md §6):
// JSON Lines (a string, or a list of sentence strings, under each --json-keys key) or plain text
// (one document per line) -> PREFIX_{key}_document.bin/.idx. Empty sentences are dropped; with
// --append-eod a document that produced a token gets the end-of-document id appended to its last
// sentence; a document without tokens still adds a (repeated) document boundary.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <memory>

#include "data/tokenizer/tokenizer.h"

namespace hytra {

struct PreprocessOptions {
  std::string input;                            // --input: .jsonl (JSON Lines) or any other file as text lines
  std::vector<std::string> json_keys{"text"};   // --json-keys
  std::string output_prefix;                    // --output-prefix
  bool append_eod = false;                      // --append-eod
  int64_t batch_documents = 1024;               // documents tokenized together (threads share a batch)
  int workers = 0;                              // --workers: tokenizer threads (0: the process-wide pool)
};

struct PreprocessStats {
  int64_t documents = 0, tokens = 0;
  std::vector<std::string> outputs;  // the dataset prefixes written
};

// progress(bytes of input consumed, total bytes) is called after each batch. Errors (a missing
// input, a directory, invalid UTF-8 or JSON on a line: "FILE:LINE: ...") leave no output files.
PreprocessStats preprocess(const PreprocessOptions& opt, const Tokenizer& tokenizer,
                           const std::function<void(int64_t, int64_t)>& progress = {});

struct TokenizerConfig {
  std::string type;        // --tokenizer-type: GPT2BPETokenizer | HuggingFaceTokenizer | TikTokenizer | NullTokenizer |
                           // GPTSentencePieceTokenizer | SentencePieceTokenizer | Llama2Tokenizer
  std::string vocab_file;  // --vocab-file (GPT2BPETokenizer): encoder.json
  std::string merge_file;  // --merge-file (GPT2BPETokenizer): vocab.bpe
  std::string model;       // --tokenizer-model: tokenizer.json or its directory (HuggingFaceTokenizer), the JSON
                           // vocabulary (TikTokenizer), the .model file (SentencePiece types)
  int64_t vocab_size = 0;  // --vocab-size (NullTokenizer: ids 0..N-1, N the end of document; TikTokenizer: the total)
  std::string tiktoken_pattern{};                      // --tiktoken-pattern (TikTokenizer): v1 | v2
  int64_t tiktoken_num_special_tokens = 1000;          // --tiktoken-num-special-tokens
  std::vector<std::string> tiktoken_special_tokens{};  // --tiktoken-special-tokens
  bool legacy = false;  // --legacy-tokenizer: Megatron's legacy SentencePieceTokenizer / Llama2Tokenizer classes
};
// Loads the tokenizer the flags describe; errors name the missing or bad flag.
std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerConfig& cfg);

}  // namespace hytra
