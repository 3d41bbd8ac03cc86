// The tokenizer interface `hytra preprocess`, `inspect-data` and training use (docs/spec/tokenizers.md): Megatron's
// --tokenizer-type picks the implementation (data/preprocess.h: load_tokenizer).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"

namespace hytra {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The ids of `utf8` as Megatron's tokenize() gives them; bad text is a hytra::Error naming where.
  virtual std::vector<int32_t> encode(std::string_view utf8) const = 0;
  // encode() of each document (in parallel over `pool`); when documents are bad, the error is the first one's.
  virtual std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& docs,
                                                         ThreadPool& pool = ThreadPool::global()) const;
  // Text of the ids, for people reading data (inspect-data).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int32_t eod() const = 0;  // the end-of-document id (-1: none)
  // The vocabulary size Megatron reports before padding (the model's --vocab-size).
  virtual int64_t vocab_size() const = 0;
};

}  // namespace hytra
