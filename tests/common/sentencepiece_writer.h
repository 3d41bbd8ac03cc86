// Hand-made SentencePiece .model files for tests (tests/unit/test_sentencepiece.cpp, the fuzz seeds): a protobuf
// writer of ModelProto with an identity normalizer or a given precompiled charsmap.
#pragma once
#include <string>
#include <vector>

namespace hytra::test {

struct Piece {
  std::string text;
  float score;
  int type;  // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
};

// A precompiled charsmap of two rules, built by hand in darts-clone's layout: "A" -> "a" and "AB" -> "" (a deletion).
std::string two_rule_charsmap();

// model_type 1 unigram, 2 BPE; the normalizer: `charsmap` (empty: identity) with the given flags.
std::string model_bytes(const std::vector<Piece>& pieces, int model_type, bool byte_fallback = false,
                        bool remove_extra_whitespaces = true, const std::string& charsmap = "");

}  // namespace hytra::test
