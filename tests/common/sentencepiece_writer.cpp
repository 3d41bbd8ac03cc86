#include "common/sentencepiece_writer.h"

#include <cstdint>
#include <cstring>

namespace hytra::test {

namespace {

// A protobuf writer.
struct Proto {
  std::string bytes;
  void varint(uint64_t v) {
    do {
      bytes += char((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
      v >>= 7;
    } while (v);
  }
  void key(uint32_t field, uint32_t wire) { varint(uint64_t(field) << 3 | wire); }
  void field_varint(uint32_t field, uint64_t v) {
    key(field, 0);
    varint(v);
  }
  void field_bytes(uint32_t field, const std::string& b) {
    key(field, 2);
    varint(b.size());
    bytes += b;
  }
  void field_float(uint32_t field, float f) {
    key(field, 5);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int i = 0; i < 4; ++i) bytes += char(u >> (8 * i) & 0xFF);
  }
};

}  // namespace

// Units: the root's offset 0x100 leads byte 0x41 to unit 0x141 (label 0x41, a leaf, offset 0x41 -> its value at
// unit 0x100: pool offset 0, "a"); from there byte 0x42 leads to unit 0x100 ^ 0x42 = 0x142 (label 0x42, a leaf,
// offset 0x40 -> value at unit 0x102: pool offset 2, the empty string).
std::string two_rule_charsmap() {
  std::vector<uint32_t> units(0x200, 0);
  units[0] = 0x100u << 10;
  units[0x141] = (0x41u << 10) | 0x100u | 0x41u;
  units[0x100] = 0x80000000u | 0u;
  units[0x142] = (0x40u << 10) | 0x100u | 0x42u;
  units[0x102] = 0x80000000u | 2u;
  std::string blob;
  const uint32_t bytes = uint32_t(units.size() * 4);
  for (int i = 0; i < 4; ++i) blob += char(bytes >> (8 * i) & 0xFF);
  for (uint32_t u : units)
    for (int i = 0; i < 4; ++i) blob += char(u >> (8 * i) & 0xFF);
  return blob + std::string("a\0\0", 3);
}

std::string model_bytes(const std::vector<Piece>& pieces, int model_type, bool byte_fallback,
                        bool remove_extra_whitespaces, const std::string& charsmap) {
  Proto m;
  for (const Piece& p : pieces) {
    Proto q;
    q.field_bytes(1, p.text);
    q.field_float(2, p.score);
    if (p.type != 1) q.field_varint(3, uint64_t(p.type));
    m.field_bytes(1, q.bytes);
  }
  Proto trainer;
  trainer.field_varint(3, uint64_t(model_type));
  if (byte_fallback) trainer.field_varint(35, 1);
  trainer.field_varint(43, uint64_t(int64_t(-1)));  // pad_id -1: a 10-byte varint
  m.field_bytes(2, trainer.bytes);
  Proto norm;
  norm.field_bytes(1, charsmap.empty() ? "identity" : "hand_made");
  if (!charsmap.empty()) norm.field_bytes(2, charsmap);
  norm.field_varint(3, 1);
  norm.field_varint(4, remove_extra_whitespaces ? 1 : 0);
  m.field_bytes(3, norm.bytes);
  return m.bytes;
}

}  // namespace hytra::test
