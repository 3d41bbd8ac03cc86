// Durable, atomic file writes. AtomicFile writes to PATH.tmp-<pid>, and commit() flushes, fsyncs,
// closes (checked), renames onto PATH and fsyncs the directory, in that order; every step's failure
// throws hytra::Error naming the file and the OS error (e.g. "No space left on device"). An
// AtomicFile destroyed without commit() removes its temporary file, so a failed write leaves PATH
// exactly as it was: the rule every file a save, a preprocess run or a cache writes follows.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hytra {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);  // buffered (1 MiB); errors surface here or in commit()
  void write(std::string_view text) { write(text.data(), text.size()); }
  const std::string& path() const { return path_; }
  void commit();

 private:
  void flush();                                 // the buffer to the file
  void write_all(const char* p, size_t bytes);  // one write(2) loop; throws naming the OS error

  std::string path_, tmp_;
  std::string buffer_;
  int fd_ = -1;
  int64_t written_ = 0;
};

// The whole file in one AtomicFile.
void write_file_atomic(const std::string& path, std::string_view bytes);

// fsync of a directory (after a rename into it, so the new entry survives a crash); throws on error.
void fsync_directory(const std::string& dir);

}  // namespace hytra
