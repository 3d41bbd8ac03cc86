#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace hytra {
namespace {

std::string os_error() { return std::strerror(errno); }

std::string parent_dir(const std::string& path) {
  const std::string p = std::filesystem::path(path).parent_path().string();
  return p.empty() ? "." : p;
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp-" + std::to_string(getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  HYTRA_CHECK(fd_ >= 0, path_, ": cannot create ", tmp_, " (", os_error(), ")");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  HYTRA_ASSERT(fd_ >= 0, path_, " written after commit");
  constexpr size_t kBuffer = size_t(1) << 20;
  if (buffer_.size() + bytes > kBuffer) flush();
  if (bytes > kBuffer)
    write_all(static_cast<const char*>(data), bytes);
  else
    buffer_.append(static_cast<const char*>(data), bytes);
}

void AtomicFile::flush() {
  write_all(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFile::write_all(const char* p, size_t bytes) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    HYTRA_CHECK(n > 0, path_, ": write failed after ", written_, " bytes (", n < 0 ? os_error() : "no progress", ")");
    p += n;
    bytes -= size_t(n);
    written_ += n;
  }
}

void AtomicFile::commit() {
  HYTRA_ASSERT(fd_ >= 0, path_, " committed twice");
  flush();
  HYTRA_CHECK(::fsync(fd_) == 0, path_, ": fsync failed (", os_error(), ")");
  const int fd = fd_;
  fd_ = -1;
  HYTRA_CHECK(::close(fd) == 0, path_, ": close failed (", os_error(), ")");
  HYTRA_CHECK(std::rename(tmp_.c_str(), path_.c_str()) == 0, path_, ": rename from ", tmp_, " failed (", os_error(),
              ")");
  tmp_.clear();
  fsync_directory(parent_dir(path_));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HYTRA_CHECK(fd >= 0, dir, ": cannot open directory to fsync (", os_error(), ")");
  const bool ok = ::fsync(fd) == 0;
  const std::string err = ok ? "" : os_error();
  ::close(fd);
  HYTRA_CHECK(ok, dir, ": fsync of the directory failed (", err, ")");
}

}  // namespace hytra
