// A reader of the protocol-buffers wire format (enough for SentencePiece's .model files, docs/spec/tokenizers.md
// §10): fields as (number, wire type) with varint, fixed 32/64-bit and length-delimited payloads; unknown fields are
// skipped by their wire type. Every read is bounds-checked; errors name `where` and the byte offset.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace hytra {

class ProtoReader {
 public:
  enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

  // `base` is the offset of `data` in the whole file (for the messages).
  ProtoReader(std::string_view data, std::string where, size_t base = 0)
      : data_(data), where_(std::move(where)), base_(base) {}

  // The next field's number and wire type; false at the end of the message.
  bool next(uint32_t& field, WireType& type);
  uint64_t varint();
  bool boolean() { return varint() != 0; }
  float fixed32_float();
  std::string_view bytes();
  ProtoReader message();  // a length-delimited embedded message
  void skip(WireType type);
  size_t offset() const { return base_ + at_; }  // of the next byte in the whole file

 private:
  [[noreturn]] void fail_at(size_t at, const std::string& what) const;
  std::string_view data_;
  std::string where_;
  size_t base_ = 0, at_ = 0;
};

}  // namespace hytra
