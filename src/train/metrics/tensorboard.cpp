#include "train/metrics/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace hytra {
namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) != 0 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protocol-buffer wire format (proto3): a tag byte is field << 3 | wire type (0 varint, 1 fixed64, 2 length-delimited,
// 5 fixed32).
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(uint8_t(v)));
}

template <class T>
void fixed(std::string& out, T v) {  // little-endian, as the hosts hytra runs on
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void bytes_field(std::string& out, uint8_t tag, const std::string& payload) {
  out.push_back(char(tag));
  varint(out, payload.size());
  out += payload;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const unsigned char* data, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = crc_table()[(c ^ data[i]) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const unsigned char* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string event_file_version(double wall_time) {
  std::string e;
  e.push_back(0x09);  // Event.wall_time (1, fixed64)
  fixed(e, wall_time);
  bytes_field(e, 0x1A, "brain.Event:2");  // Event.file_version (3)
  return e;
}

std::string event_scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    bytes_field(v, 0x0A, tag);  // Value.tag (1)
    v.push_back(0x15);          // Value.simple_value (2, fixed32)
    fixed(v, float(value));
    bytes_field(summary, 0x0A, v);  // Summary.value (1, repeated)
  }
  std::string e;
  e.push_back(0x09);  // Event.wall_time
  fixed(e, wall_time);
  e.push_back(0x10);  // Event.step (2, varint; two's complement for negatives, as proto3's int64)
  varint(e, uint64_t(step));
  bytes_field(e, 0x2A, summary);  // Event.summary (5)
  return e;
}

std::string tf_record(const std::string& payload) {
  std::string r;
  const uint64_t n = payload.size();
  fixed(r, n);
  fixed(r, masked_crc32c(reinterpret_cast<const unsigned char*>(r.data()), 8));
  r += payload;
  fixed(r, masked_crc32c(reinterpret_cast<const unsigned char*>(payload.data()), payload.size()));
  return r;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  HYTRA_CHECK(!ec && std::filesystem::is_directory(dir), "--tensorboard-dir ", dir,
              ": cannot create the directory (", ec ? ec.message() : "not a directory", ")");
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const double t = now_seconds();
  char name[512];
  std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%d.0", static_cast<long long>(t), host,
                int(getpid()));
  path_ = (std::filesystem::path(dir) / name).string();
  file_ = std::fopen(path_.c_str(), "wb");
  HYTRA_CHECK(file_ != nullptr, "--tensorboard-dir ", dir, ": cannot create ", path_, " (", std::strerror(errno), ")");
  write(event_file_version(t));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  if (!values.empty()) write(event_scalars(now_seconds(), step, values));
}

void TensorBoardWriter::write(const std::string& payload) {
  const std::string r = tf_record(payload);
  HYTRA_CHECK(std::fwrite(r.data(), 1, r.size(), file_) == r.size() && std::fflush(file_) == 0, "--tensorboard-dir: ",
              "cannot write ", path_, " (", std::strerror(errno), ")");
}

}  // namespace hytra
