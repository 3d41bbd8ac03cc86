// safetensors files (docs/spec/safetensors.md): u64 little-endian header length N, an N-byte JSON header
// ({"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets": [begin, end]}}), then the
// data buffer. The reader memory-maps the file and validates every header field (dtype, shape vs
// byte size, offsets tiling the buffer without gaps or overlap, no trailing bytes, duplicate names);
// the writer follows the reference library's conventions (tensors ordered by dtype alignment
// descending, then name; compact JSON with __metadata__ first; header padded with spaces to a
// multiple of 8) so files are byte-identical, and publishes them atomically.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hytra {

// dtype strings of the format and their sizes in bits.
int safetensors_dtype_bits(const std::string& dtype);  // 0 for an unknown string

struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // "BF16", "F32", ...
  std::vector<int64_t> shape;  // [] = scalar
  int64_t begin = 0, end = 0;  // byte offsets in the data buffer
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws hytra::Error naming the file and field
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // in offset order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsEntry* find(const std::string& name) const;
  // The tensor's bytes (pointer into the mapping; may be unaligned: copy before casting).
  const unsigned char* data(const SafetensorsEntry& e) const { return data_ + e.begin; }

 private:
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
  const unsigned char* map_ = nullptr;
  size_t size_ = 0;
  const unsigned char* data_ = nullptr;
};

struct SafetensorsTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // row-major, little endian
};

// Writes `tensors` (and metadata, e.g. {"format": "pt"}) to `path` via a temporary file + rename.
void write_safetensors(const std::string& path, std::vector<SafetensorsTensor> tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace hytra
