#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "core/atomic_file.h"
#include "core/error.h"

namespace hytra {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr size_t kHeader = 34;  // magic 9 + version 8 + dtype 1 + sequence count 8 + document count 8

bool valid_dtype(uint8_t code) { return code >= 1 && code <= 8; }

// The whole file, read (the .idx is small next to the .bin).
std::vector<unsigned char> read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  HYTRA_CHECK(f != nullptr, path, ": cannot open (", std::strerror(errno), ")");
  std::vector<unsigned char> data;
  unsigned char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) data.insert(data.end(), buf, buf + n);
  std::fclose(f);
  return data;
}

template <class T>
T read_le(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // little-endian hosts only (x86-64, arm64)
  return v;
}

template <class T>
void append_le(std::vector<unsigned char>& out, T v) {
  unsigned char b[sizeof v];
  std::memcpy(b, &v, sizeof v);
  out.insert(out.end(), b, b + sizeof v);
}

int32_t saturate(int64_t v) { return int32_t(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX)); }

int32_t saturate(double v) {
  if (!(v >= double(INT32_MIN))) return INT32_MIN;  // also NaN
  return v > double(INT32_MAX) ? INT32_MAX : int32_t(v);
}

int32_t token_at(const unsigned char* p, TokenDtype t) {
  switch (t) {
    case TokenDtype::U8: return *p;
    case TokenDtype::I8: return int8_t(*p);
    case TokenDtype::I16: return read_le<int16_t>(p);
    case TokenDtype::I32: return read_le<int32_t>(p);
    case TokenDtype::I64: return saturate(read_le<int64_t>(p));
    case TokenDtype::F64: return saturate(read_le<double>(p));
    case TokenDtype::F32: return saturate(double(read_le<float>(p)));
    case TokenDtype::U16: return read_le<uint16_t>(p);
  }
  return 0;
}

}  // namespace

size_t token_dtype_size(TokenDtype t) {
  switch (t) {
    case TokenDtype::U8:
    case TokenDtype::I8: return 1;
    case TokenDtype::I16:
    case TokenDtype::U16: return 2;
    case TokenDtype::I32:
    case TokenDtype::F32: return 4;
    case TokenDtype::I64:
    case TokenDtype::F64: return 8;
  }
  return 0;
}

TokenDtype optimal_token_dtype(int64_t vocab_size) { return vocab_size < 65500 ? TokenDtype::U16 : TokenDtype::I32; }

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  const std::vector<unsigned char> idx = read_file(idx_path);
  HYTRA_CHECK(idx.size() >= kHeader, idx_path, ": truncated: ", idx.size(), " bytes, the header alone is ", kHeader);
  HYTRA_CHECK(std::memcmp(idx.data(), kMagic, 9) == 0, idx_path,
              ": not a Megatron indexed dataset (expected the magic \"MMIDIDX\\0\\0\")");
  const uint64_t version = read_le<uint64_t>(idx.data() + 9);
  HYTRA_CHECK(version == 1, idx_path, ": unsupported version ", version, " (expected 1)");
  const uint8_t code = idx[17];
  HYTRA_CHECK(valid_dtype(code), idx_path, ": unknown token dtype code ", int(code), " (expected 1..8)");
  dtype_ = TokenDtype(code);
  const uint64_t S = read_le<uint64_t>(idx.data() + 18), D = read_le<uint64_t>(idx.data() + 26);
  HYTRA_CHECK(S < (uint64_t(1) << 40) && D >= 1 && D < (uint64_t(1) << 40), idx_path, ": implausible counts: ", S,
              " sequences, ", D, " document indices");
  const uint64_t want = kHeader + 12 * S + 8 * D;
  HYTRA_CHECK(idx.size() == want, idx_path, ": ", idx.size() < want ? "truncated" : "trailing bytes", ": expected ",
              want, " bytes for ", S, " sequences and ", D, " document indices, got ", idx.size());
  num_sequences_ = int64_t(S);
  lengths_.resize(S);
  pointers_.resize(S);
  document_indices_.resize(D);

  // The .bin's size first: every sequence must lie inside it, so no .idx value can lead a read astray.
  const int fd = open(bin_path.c_str(), O_RDONLY);
  HYTRA_CHECK(fd >= 0, bin_path, ": cannot open (", std::strerror(errno), ")");
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    fail(str(bin_path, ": cannot stat (", std::strerror(errno), ")"));
  }
  bin_size_ = size_t(st.st_size);
  const int64_t bin_size = int64_t(st.st_size);
  auto check = [&](bool ok, const auto&... msg) {
    if (!ok) {
      close(fd);
      fail(str(msg...));
    }
  };
  const unsigned char* p = idx.data() + kHeader;
  const int64_t item = int64_t(token_dtype_size(dtype_));
  int64_t expected_pointer = 0;  // <= bin_size throughout, so nothing below overflows
  for (uint64_t i = 0; i < S; ++i) {
    lengths_[i] = read_le<int32_t>(p + 4 * i);
    pointers_[i] = read_le<int64_t>(p + 4 * S + 8 * i);
    check(lengths_[i] >= 0, idx_path, ": sequence ", i, " has negative length ", lengths_[i]);
    check(pointers_[i] == expected_pointer, idx_path, ": sequence ", i, " starts at byte ", pointers_[i],
          " of the .bin, expected ", expected_pointer, " (the sum of the previous lengths)");
    check(lengths_[i] <= (bin_size - expected_pointer) / item, bin_path, ": truncated: sequence ", i, " of ",
          idx_path, " (", lengths_[i], " tokens of ", item, " bytes from byte ", expected_pointer,
          ") runs past its end (", bin_size, " bytes)");
    expected_pointer += lengths_[i] * item;
  }
  num_tokens_ = expected_pointer / item;
  for (uint64_t d = 0; d < D; ++d) {
    document_indices_[d] = read_le<int64_t>(p + 12 * S + 8 * d);
    check(d == 0 ? document_indices_[d] == 0 : document_indices_[d] >= document_indices_[d - 1], idx_path,
          ": document index ", d, " (", document_indices_[d], ") must start at 0 and never decrease");
  }
  check(document_indices_.back() == int64_t(S), idx_path, ": the last document index is ", document_indices_.back(),
        ", expected the sequence count ", S);
  check(bin_size == expected_pointer, bin_path, ": trailing bytes: expected ", expected_pointer, " bytes (",
        num_tokens_, " tokens of ", item, " bytes), got ", bin_size);
  if (bin_size_ > 0) {
    void* m = mmap(nullptr, bin_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    check(m != MAP_FAILED, bin_path, ": mmap failed (", std::strerror(errno), ")");
    bin_ = static_cast<const unsigned char*>(m);
  }
  close(fd);
}

IndexedDataset::~IndexedDataset() {
  if (bin_) munmap(const_cast<unsigned char*>(bin_), bin_size_);
}

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const {
  HYTRA_CHECK(seq >= 0 && seq < num_sequences_ && offset >= 0 && count >= 0 &&
                  offset <= lengths_[size_t(seq)] - count,
              prefix_, ".bin: cannot read tokens [", offset, ", ", offset + count, ") of sequence ", seq, ": it has ",
              seq >= 0 && seq < num_sequences_ ? lengths_[size_t(seq)] : 0, " tokens (", num_sequences_,
              " sequences)");
  const size_t item = token_dtype_size(dtype_);
  const unsigned char* p = bin_ + size_t(pointers_[size_t(seq)]) + size_t(offset) * item;
  for (int64_t k = 0; k < count; ++k) out[k] = int32_t(token_at(p + size_t(k) * item, dtype_));
}

std::vector<int32_t> IndexedDataset::sequence(int64_t i) const {
  std::vector<int32_t> out(size_t(sequence_length(i)));
  read(i, 0, int64_t(out.size()), out.data());
  return out;
}

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, TokenDtype dtype)
    : prefix_(std::move(prefix)), dtype_(dtype), bin_(std::make_unique<AtomicFile>(prefix_ + ".bin")) {}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;

void IndexedDatasetWriter::write_tokens(const int32_t* tokens, int64_t n) {
  std::vector<unsigned char> buf;
  buf.reserve(size_t(n) * token_dtype_size(dtype_));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = tokens[i];
    switch (dtype_) {
      case TokenDtype::U8: buf.push_back(uint8_t(t)); break;
      case TokenDtype::I8: buf.push_back(uint8_t(int8_t(t))); break;
      case TokenDtype::I16: append_le(buf, int16_t(t)); break;
      case TokenDtype::I32: append_le(buf, int32_t(t)); break;
      case TokenDtype::I64: append_le(buf, int64_t(t)); break;
      case TokenDtype::F64: append_le(buf, double(t)); break;
      case TokenDtype::F32: append_le(buf, float(t)); break;
      case TokenDtype::U16: append_le(buf, uint16_t(t)); break;
    }
  }
  bin_->write(buf.data(), buf.size());
}

void IndexedDatasetWriter::add_document(const std::vector<int32_t>& tokens, const std::vector<int64_t>& sentence_lengths) {
  HYTRA_ASSERT(!done_, "add_document after finalize");
  write_tokens(tokens.data(), int64_t(tokens.size()));
  if (sentence_lengths.empty()) {
    if (!tokens.empty()) lengths_.push_back(int32_t(tokens.size()));
  } else {
    int64_t total = 0;
    for (int64_t n : sentence_lengths) {
      lengths_.push_back(int32_t(n));
      total += n;
    }
    HYTRA_ASSERT(total == int64_t(tokens.size()), "sentence lengths sum to ", total, ", tokens ", tokens.size());
  }
  document_indices_.push_back(int64_t(lengths_.size()));
}

void IndexedDatasetWriter::add_index(const IndexedDataset& other) {
  HYTRA_CHECK(other.dtype() == dtype_, other.prefix(), ".idx: token dtype code ", int(other.dtype()),
              " differs from the dataset being written (", int(dtype_), ")");
  const int64_t base = int64_t(lengths_.size());
  for (int64_t s = 0; s < other.num_sequences(); ++s) {
    const std::vector<int32_t> t = other.sequence(s);
    write_tokens(t.data(), int64_t(t.size()));
    lengths_.push_back(int32_t(t.size()));
  }
  for (size_t d = 1; d < other.document_indices().size(); ++d) document_indices_.push_back(base + other.document_indices()[d]);
}

void IndexedDatasetWriter::finalize() {
  HYTRA_ASSERT(!done_, "finalize twice");
  std::vector<unsigned char> idx(kMagic, kMagic + 9);
  append_le<uint64_t>(idx, 1);
  idx.push_back(uint8_t(dtype_));
  append_le<uint64_t>(idx, lengths_.size());
  append_le<uint64_t>(idx, document_indices_.size());
  for (int32_t n : lengths_) append_le<int32_t>(idx, n);
  int64_t pointer = 0;
  for (int32_t n : lengths_) {
    append_le<int64_t>(idx, pointer);
    pointer += int64_t(n) * int64_t(token_dtype_size(dtype_));
  }
  for (int64_t d : document_indices_) append_le<int64_t>(idx, d);
  // The .bin first: a reader validates an .idx against its .bin, so a crash between the two renames
  // leaves an old .idx that no longer matches the new .bin, a named error, never a wrong read.
  bin_->commit();
  write_file_atomic(prefix_ + ".idx", std::string_view(reinterpret_cast<const char*>(idx.data()), idx.size()));
  done_ = true;
}

}  // namespace hytra
