// A SentencePiece .model file (docs/spec/tokenizers.md §10): the ModelProto's pieces and the trainer and normalizer
// settings that encoding reads, with protobuf's proto2 defaults for absent fields; and the vocabulary maps the
// encoders look pieces up in.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hytra {

enum class SpPieceType : uint8_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };
enum class SpModelType : uint8_t { Unigram = 1, Bpe = 2, Word = 3, Char = 4 };

struct SpPiece {
  std::string text;
  float score = 0;
  SpPieceType type = SpPieceType::Normal;
};

struct SpModelProto {
  std::vector<SpPiece> pieces;  // id = index
  // TrainerSpec
  SpModelType model_type = SpModelType::Unigram;
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  std::string bos_piece = "<s>", eos_piece = "</s>", pad_piece = "<pad>";
  // NormalizerSpec
  std::string precompiled_charsmap;  // empty: identity
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};

// Parses a .model file; errors name the file, the byte offset and what is wrong.
SpModelProto read_sentencepiece_model(const std::string& path);
SpModelProto parse_sentencepiece_model(std::string_view bytes, const std::string& where);

// The pieces as SentencePiece's encoders look them up: NORMAL, USER_DEFINED and UNUSED pieces by text (`normal`),
// UNKNOWN, CONTROL and BYTE pieces apart (`reserved`), never matched from text. Load errors (no or two UNKNOWN
// pieces, an empty or repeated piece, BYTE pieces without byte_fallback or not all 256 with it) name `where`.
class SpVocabulary {
 public:
  SpVocabulary(const SpModelProto& m, const std::string& where);
  // The id of a piece text: a reserved piece first, then a normal one, else the UNKNOWN piece's id.
  int32_t piece_to_id(std::string_view text) const;
  int32_t normal_id(std::string_view text) const;  // -1 when not a NORMAL / USER_DEFINED / UNUSED piece
  // The id of the CONTROL piece with this text, else -1 (SentencePiece's bos_id() / eos_id() / pad_id()).
  int32_t control_id(const std::string& text) const;
  int32_t unk_id() const { return unk_id_; }
  int32_t byte_id(uint8_t b) const { return byte_ids_[b]; }  // byte_fallback models
  uint8_t byte_of(int32_t id) const { return byte_values_[size_t(id)]; }  // a BYTE piece's byte
  SpPieceType type(int32_t id) const { return types_[size_t(id)]; }
  float score(int32_t id) const { return scores_[size_t(id)]; }
  const std::string& text(int32_t id) const { return texts_[size_t(id)]; }
  int64_t size() const { return int64_t(texts_.size()); }
  const std::vector<std::string>& user_defined() const { return user_defined_; }

 private:
  std::unordered_map<std::string, int32_t> normal_, reserved_;
  std::vector<std::string> texts_;
  std::vector<float> scores_;
  std::vector<SpPieceType> types_;
  std::vector<uint8_t> byte_values_;  // per piece: its byte (BYTE pieces)
  std::vector<std::string> user_defined_;
  int32_t unk_id_ = -1;
  int32_t byte_ids_[256] = {};
};

}  // namespace hytra
