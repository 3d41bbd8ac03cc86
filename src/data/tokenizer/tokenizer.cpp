#include "data/tokenizer/tokenizer.h"

namespace hytra {

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string>& docs,
                                                          ThreadPool& pool) const {
  std::vector<std::vector<int32_t>> out(docs.size());
  // (the pool rethrows the lowest-numbered chunk's error: with chunks of one document, the first bad document's)
  pool.parallel_for(int64_t(docs.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t d = begin; d < end; ++d) out[size_t(d)] = encode(docs[size_t(d)]);
  });
  return out;
}

}  // namespace hytra
