#include "data/tokenizer/sentencepiece_model.h"

#include <fstream>
#include <iterator>

#include "core/error.h"
#include "data/tokenizer/protobuf_wire.h"

namespace hytra {
namespace {

// Field numbers of sentencepiece_model.proto.
enum : uint32_t { kPieces = 1, kTrainerSpec = 2, kNormalizerSpec = 3 };
enum : uint32_t { kPieceText = 1, kPieceScore = 2, kPieceType = 3 };
enum : uint32_t {
  kModelType = 3,
  kTreatWhitespaceAsSuffix = 24,
  kByteFallback = 35,
  kBosPiece = 46,
  kEosPiece = 47,
  kPadPiece = 48
};
enum : uint32_t { kCharsmap = 2, kAddDummyPrefix = 3, kRemoveExtraWhitespaces = 4, kEscapeWhitespaces = 5 };

void expect_type(const ProtoReader& r, ProtoReader::WireType got, ProtoReader::WireType want, const char* name,
                 const std::string& where) {
  HYTRA_CHECK(got == want, where, ": field ", name, " has wire type ", uint32_t(got), ", expected ", uint32_t(want),
              " (before byte offset ", r.offset(), ")");
}

// The byte of a BYTE piece's text "<0xHH>" (uppercase hex), or -1.
int byte_piece_value(const std::string& text) {
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return -1;
  const int hi = hex(text[3]), lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

SpPiece parse_piece(ProtoReader r, const std::string& where) {
  SpPiece p;
  uint32_t f;
  ProtoReader::WireType t;
  while (r.next(f, t)) {
    if (f == kPieceText) {
      expect_type(r, t, ProtoReader::kBytes, "piece", where);
      p.text = std::string(r.bytes());
    } else if (f == kPieceScore) {
      expect_type(r, t, ProtoReader::kFixed32, "score", where);
      p.score = r.fixed32_float();
    } else if (f == kPieceType) {
      expect_type(r, t, ProtoReader::kVarint, "type", where);
      const uint64_t v = r.varint();
      // A value the enum does not declare reads as the default, as protobuf's proto2 runtime does.
      p.type = v >= 1 && v <= 6 ? SpPieceType(v) : SpPieceType::Normal;
    } else {
      r.skip(t);
    }
  }
  return p;
}

void parse_trainer(ProtoReader r, SpModelProto& m, const std::string& where) {
  uint32_t f;
  ProtoReader::WireType t;
  auto string_field = [&](std::string& out, const char* name) {
    expect_type(r, t, ProtoReader::kBytes, name, where);
    out = std::string(r.bytes());
  };
  while (r.next(f, t)) {
    if (f == kModelType) {
      expect_type(r, t, ProtoReader::kVarint, "trainer_spec.model_type", where);
      const uint64_t v = r.varint();
      m.model_type = v >= 1 && v <= 4 ? SpModelType(v) : SpModelType::Unigram;
    } else if (f == kTreatWhitespaceAsSuffix) {
      expect_type(r, t, ProtoReader::kVarint, "trainer_spec.treat_whitespace_as_suffix", where);
      m.treat_whitespace_as_suffix = r.boolean();
    } else if (f == kByteFallback) {
      expect_type(r, t, ProtoReader::kVarint, "trainer_spec.byte_fallback", where);
      m.byte_fallback = r.boolean();
    } else if (f == kBosPiece) {
      string_field(m.bos_piece, "trainer_spec.bos_piece");
    } else if (f == kEosPiece) {
      string_field(m.eos_piece, "trainer_spec.eos_piece");
    } else if (f == kPadPiece) {
      string_field(m.pad_piece, "trainer_spec.pad_piece");
    } else {
      r.skip(t);
    }
  }
}

void parse_normalizer(ProtoReader r, SpModelProto& m, const std::string& where) {
  uint32_t f;
  ProtoReader::WireType t;
  while (r.next(f, t)) {
    if (f == kCharsmap) {
      expect_type(r, t, ProtoReader::kBytes, "normalizer_spec.precompiled_charsmap", where);
      m.precompiled_charsmap = std::string(r.bytes());
    } else if (f == kAddDummyPrefix || f == kRemoveExtraWhitespaces || f == kEscapeWhitespaces) {
      expect_type(r, t, ProtoReader::kVarint, "normalizer_spec flag", where);
      const bool v = r.boolean();
      (f == kAddDummyPrefix           ? m.add_dummy_prefix
       : f == kRemoveExtraWhitespaces ? m.remove_extra_whitespaces
                                      : m.escape_whitespaces) = v;
    } else {
      r.skip(t);
    }
  }
}

}  // namespace

SpModelProto parse_sentencepiece_model(std::string_view bytes, const std::string& where) {
  SpModelProto m;
  ProtoReader r(bytes, where);
  uint32_t f;
  ProtoReader::WireType t;
  // A message field given twice is merged, as protobuf does: later scalar values win.
  while (r.next(f, t)) {
    if (f == kPieces) {
      expect_type(r, t, ProtoReader::kBytes, "pieces", where);
      m.pieces.push_back(parse_piece(r.message(), where));
    } else if (f == kTrainerSpec) {
      expect_type(r, t, ProtoReader::kBytes, "trainer_spec", where);
      parse_trainer(r.message(), m, where);
    } else if (f == kNormalizerSpec) {
      expect_type(r, t, ProtoReader::kBytes, "normalizer_spec", where);
      parse_normalizer(r.message(), m, where);
    } else {
      r.skip(t);
    }
  }
  HYTRA_CHECK(!m.pieces.empty(), where, ": no pieces (not a SentencePiece model)");
  return m;
}

SpModelProto read_sentencepiece_model(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  HYTRA_CHECK(f.good(), "--tokenizer-model '", path, "': cannot open");
  const std::string bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  return parse_sentencepiece_model(bytes, path);
}

SpVocabulary::SpVocabulary(const SpModelProto& m, const std::string& where) {
  for (int b = 0; b < 256; ++b) byte_ids_[b] = -1;
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const SpPiece& p = m.pieces[i];
    const int32_t id = int32_t(i);
    HYTRA_CHECK(!p.text.empty(), where, ": piece ", id, " is empty");
    texts_.push_back(p.text);
    scores_.push_back(p.score);
    types_.push_back(p.type);
    byte_values_.push_back(0);
    const bool reserved =
        p.type == SpPieceType::Unknown || p.type == SpPieceType::Control || p.type == SpPieceType::Byte;
    auto& map = reserved ? reserved_ : normal_;
    HYTRA_CHECK(map.emplace(p.text, id).second, where, ": piece ", id, " '", p.text, "' is already piece ",
                map.at(p.text));
    if (p.type == SpPieceType::UserDefined) user_defined_.push_back(p.text);
    if (p.type == SpPieceType::Unknown) {
      HYTRA_CHECK(unk_id_ < 0, where, ": pieces ", unk_id_, " and ", id, " are both UNKNOWN; expected one");
      unk_id_ = id;
    }
    if (p.type == SpPieceType::Byte) {
      HYTRA_CHECK(m.byte_fallback, where, ": piece ", id, " '", p.text, "' is a BYTE piece but byte_fallback is off");
      const int v = byte_piece_value(p.text);
      HYTRA_CHECK(v >= 0, where, ": BYTE piece ", id, " is '", p.text, "'; expected <0xHH> (two uppercase hex digits)");
      byte_ids_[v] = id;
      byte_values_.back() = uint8_t(v);
    }
  }
  HYTRA_CHECK(unk_id_ >= 0, where, ": no UNKNOWN piece; expected one");
  if (m.byte_fallback)
    for (int b = 0; b < 256; ++b)
      HYTRA_CHECK(byte_ids_[b] >= 0, where, ": byte_fallback is on but there is no BYTE piece for byte ", b);
}

int32_t SpVocabulary::piece_to_id(std::string_view text) const {
  const std::string key(text);
  if (auto it = reserved_.find(key); it != reserved_.end()) return it->second;
  if (auto it = normal_.find(key); it != normal_.end()) return it->second;
  return unk_id_;
}

int32_t SpVocabulary::normal_id(std::string_view text) const {
  auto it = normal_.find(std::string(text));
  return it == normal_.end() ? -1 : it->second;
}

int32_t SpVocabulary::control_id(const std::string& text) const {
  const int32_t id = piece_to_id(text);
  return types_[size_t(id)] == SpPieceType::Control ? id : -1;
}

}  // namespace hytra
