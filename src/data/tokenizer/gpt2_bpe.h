// Byte-level BPE tokenizer with GPT-2 semantics (docs/spec/tokenizers.md): the GPT-2 regex pre-tokenizer, the
// byte-to-unicode alphabet, merges applied by rank (all occurrences of the best pair per step) and
// a per-word cache. Loads GPT-2's encoder.json + vocab.bpe, or an HF tokenizer.json whose model is
// BPE with a ByteLevel (use_regex) pre-tokenizer. encode() does not parse special tokens (as
// Megatron's GPT2BPETokenizer, docs/spec/gotchas.md §2 item 8); encode_with_special() does.
#pragma once
#include <array>
#include <memory>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer/unicode_regex.h"

namespace hytra {

class Gpt2Bpe final : public Tokenizer {
 public:
  static Gpt2Bpe from_files(const std::string& encoder_json, const std::string& vocab_bpe);
  static Gpt2Bpe from_hf_tokenizer_json(const std::string& path);

  // Text must be valid UTF-8 (else hytra::Error naming the byte offset).
  std::vector<int32_t> encode(std::string_view utf8) const override;
  // Like encode, but added/special tokens (longest match) are emitted as their ids.
  std::vector<int32_t> encode_with_special(std::string_view utf8) const;
  // Encodes each document (in parallel over `pool`); identical to encode() per doc.
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& docs,
                                                 ThreadPool& pool = ThreadPool::global()) const override;

  // The raw bytes of the tokens, concatenated.
  std::string decode_bytes(const std::vector<int32_t>& ids) const;
  // decode_bytes with invalid UTF-8 replaced by U+FFFD (as the reference's TextDecoder).
  std::string decode(const std::vector<int32_t>& ids) const override;

  int32_t eod() const override { return eod_; }  // id of "<|endoftext|>", or -1 when the vocab has none
  int64_t vocab_size() const override { return int64_t(id_to_bytes_.size()); }
  int32_t token_id(std::string_view token) const;  // vocab lookup by token string, -1 if absent

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  using WordCache = std::unordered_map<std::string, std::vector<int32_t>>;

  void set_vocab(const std::vector<std::pair<std::string, int64_t>>& vocab, const std::string& where);
  void add_merge(const std::string& a, const std::string& b, const std::string& where);
  void add_special(const std::string& content, int64_t id, const std::string& where);
  void finish(const std::string& where);

  void encode_into(std::string_view text, size_t base_offset, WordCache& cache, std::vector<int32_t>& out) const;
  void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
  // Merge loops over byte symbols (gpt2_bpe.cpp): same result, the queue is O(n log n).
  void merge_by_rescan(std::vector<int32_t>& sym) const;
  void merge_by_queue(std::vector<int32_t>& sym) const;

  std::unordered_map<std::string, int32_t> token_to_id_;  // token strings in the byte alphabet
  std::vector<std::string> id_to_bytes_;                  // raw bytes of each id
  std::unordered_map<uint64_t, Merge> merges_;            // (left id << 32 | right id) -> merge
  std::array<int32_t, 256> byte_id_{};                    // id of each single-byte symbol
  std::vector<std::pair<std::string, int32_t>> specials_;  // added tokens, longest first
  int32_t eod_ = -1;
  bool add_prefix_space_ = false;
  // A tokenizer.json Split pre-tokenizer (behavior Isolated) before a ByteLevel without regex (Llama-3 style);
  // null: GPT-2's pre-tokenizer.
  std::shared_ptr<const UnicodeRegex> split_;
  bool ignore_merges_ = false;
  int64_t next_rank_ = 0;
};

}  // namespace hytra
