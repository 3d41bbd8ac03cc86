// NumPy .npy files, format version 1.0 (the index caches Megatron writes): magic "\x93NUMPY", bytes
// 1 0, a little-endian u16 header length, then an ASCII dict {'descr': '<i4', 'fortran_order': False,
// 'shape': (3, 2), } padded with spaces and a final newline to a multiple of 64 bytes, then the data.
// Integer arrays of 1 or 2 dimensions, C order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hytra {

struct NpyArray {
  std::string descr;           // '<i4', '<i8', '<u4'
  std::vector<int64_t> shape;  // 1 or 2 dims
  std::vector<int64_t> values;
};

// Writes atomically (temporary file, fsync, rename).
void write_npy(const std::string& path, const NpyArray& a);
// Throws hytra::Error naming the file when it is not such an array.
NpyArray read_npy(const std::string& path);

}  // namespace hytra
