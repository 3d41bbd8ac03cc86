#include "data/tokenizer/protobuf_wire.h"

#include <cstring>

#include "core/error.h"

namespace hytra {

void ProtoReader::fail_at(size_t at, const std::string& what) const {
  fail(str(where_, ": ", what, " at byte offset ", base_ + at, " (not a valid protobuf message)"));
}

bool ProtoReader::next(uint32_t& field, WireType& type) {
  if (at_ == data_.size()) return false;
  const size_t start = at_;
  const uint64_t key = varint();
  const uint32_t wire = uint32_t(key & 7);
  if (wire != kVarint && wire != kFixed64 && wire != kBytes && wire != kFixed32)
    fail_at(start, str("unsupported wire type ", wire));
  if ((key >> 3) == 0 || (key >> 3) > 0x1FFFFFFF) fail_at(start, str("field number ", key >> 3));
  field = uint32_t(key >> 3);
  type = WireType(wire);
  return true;
}

uint64_t ProtoReader::varint() {
  const size_t start = at_;
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at_ == data_.size()) fail_at(start, "a varint runs past the end");
    const uint8_t b = uint8_t(data_[at_++]);
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
  fail_at(start, "a varint longer than 10 bytes");
}

float ProtoReader::fixed32_float() {
  if (data_.size() - at_ < 4) fail_at(at_, "a 32-bit value runs past the end");
  uint32_t u = 0;
  for (int i = 3; i >= 0; --i) u = u << 8 | uint8_t(data_[at_ + size_t(i)]);  // little-endian
  at_ += 4;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::string_view ProtoReader::bytes() {
  const size_t start = at_;
  const uint64_t n = varint();
  if (n > data_.size() - at_) fail_at(start, str("a length of ", n, " bytes runs past the end"));
  std::string_view out = data_.substr(at_, size_t(n));
  at_ += size_t(n);
  return out;
}

ProtoReader ProtoReader::message() {
  std::string_view body = bytes();
  return ProtoReader(body, where_, base_ + size_t(body.data() - data_.data()));
}

void ProtoReader::skip(WireType type) {
  switch (type) {
    case kVarint: (void)varint(); return;
    case kFixed64:
      if (data_.size() - at_ < 8) fail_at(at_, "a 64-bit value runs past the end");
      at_ += 8;
      return;
    case kFixed32:
      if (data_.size() - at_ < 4) fail_at(at_, "a 32-bit value runs past the end");
      at_ += 4;
      return;
    case kBytes: (void)bytes(); return;
  }
}

}  // namespace hytra
