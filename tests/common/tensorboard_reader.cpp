#include "common/tensorboard_reader.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "train/metrics/tensorboard.h"

namespace hytra::test {
namespace {

struct Cursor {
  const unsigned char* p;
  const unsigned char* end;
  void need(size_t n) const {
    if (size_t(end - p) < n) throw std::runtime_error("tensorboard: truncated field");
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const unsigned char b = *p++;
      v |= uint64_t(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    throw std::runtime_error("tensorboard: varint too long");
  }
  template <class T>
  T fixed() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  Cursor sub() {
    const uint64_t n = varint();
    need(n);
    Cursor c{p, p + n};
    p += n;
    return c;
  }
  bool done() const { return p == end; }
};

}  // namespace

std::vector<TbEvent> read_tensorboard(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("tensorboard: cannot open " + path);
  const std::string bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  std::vector<TbEvent> out;
  for (size_t at = 0; at < bytes.size();) {
    if (bytes.size() - at < 12) throw std::runtime_error("tensorboard: truncated record header");
    uint64_t n;
    uint32_t length_crc, data_crc;
    std::memcpy(&n, data + at, 8);
    std::memcpy(&length_crc, data + at + 8, 4);
    if (length_crc != masked_crc32c(data + at, 8)) throw std::runtime_error("tensorboard: bad length checksum");
    if (bytes.size() - at - 12 < n + 4) throw std::runtime_error("tensorboard: truncated record");
    const unsigned char* payload = data + at + 12;
    std::memcpy(&data_crc, payload + n, 4);
    if (data_crc != masked_crc32c(payload, n)) throw std::runtime_error("tensorboard: bad payload checksum");
    at += 12 + n + 4;
    TbEvent e;
    Cursor c{payload, payload + n};
    while (!c.done()) {
      const uint64_t tag = c.varint();
      if (tag == 0x09) {
        e.wall_time = c.fixed<double>();
      } else if (tag == 0x10) {
        e.step = int64_t(c.varint());
      } else if (tag == 0x1A) {
        Cursor s = c.sub();
        e.file_version.assign(reinterpret_cast<const char*>(s.p), size_t(s.end - s.p));
      } else if (tag == 0x2A) {
        Cursor summary = c.sub();
        while (!summary.done()) {
          if (summary.varint() != 0x0A) throw std::runtime_error("tensorboard: unexpected Summary field");
          Cursor v = summary.sub();
          std::pair<std::string, float> value;
          while (!v.done()) {
            const uint64_t vt = v.varint();
            if (vt == 0x0A) {
              Cursor s = v.sub();
              value.first.assign(reinterpret_cast<const char*>(s.p), size_t(s.end - s.p));
            } else if (vt == 0x15) {
              value.second = v.fixed<float>();
            } else {
              throw std::runtime_error("tensorboard: unexpected Value field");
            }
          }
          e.values.push_back(value);
        }
      } else {
        throw std::runtime_error("tensorboard: unexpected Event field " + std::to_string(tag));
      }
    }
    out.push_back(e);
  }
  return out;
}

std::map<std::string, std::map<int64_t, float>> tensorboard_scalars(const std::vector<TbEvent>& events) {
  std::map<std::string, std::map<int64_t, float>> out;
  for (const TbEvent& e : events)
    for (const auto& [tag, v] : e.values) out[tag][e.step] = v;
  return out;
}

}  // namespace hytra::test
