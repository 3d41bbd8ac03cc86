#include "data/tokenizer/sentencepiece.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"

namespace hytra {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path, Flavor flavor)
    : encoder_(read_sentencepiece_model(model_path), model_path), flavor_(flavor) {
  eod_ = encoder_.eos_id();
  if (flavor_ == Flavor::LegacyLlama2)
    HYTRA_CHECK(encoder_.bos_id() >= 0, model_path,
                ": Llama2Tokenizer puts the bos piece before each text, but the model's bos piece is no control piece");
  if (flavor_ != Flavor::LegacySentencePiece) return;
  // Megatron's _SentencePieceTokenizer: a special token that is a piece keeps the piece's id; any other takes the next
  // id after the pieces. pad / bos / eos are the model's control pieces, or <PAD> / <BOS> / <EOS>.
  std::unordered_map<std::string, int32_t> id_of;  // Megatron's vocab: piece text -> id (a repeated text: the last)
  for (int64_t i = 0; i < encoder_.vocab().size(); ++i) id_of[encoder_.vocab().text(int32_t(i))] = int32_t(i);
  auto add = [&](const std::string& text) {
    auto it = id_of.find(text);
    if (it == id_of.end()) {
      it = id_of.emplace(text, int32_t(encoder_.vocab().size() + appended_++)).first;
    }
    specials_.emplace_back(text, it->second);
    return it->second;
  };
  auto model_piece_or = [&](int32_t id, const char* fallback) {
    return id >= 0 ? encoder_.vocab().text(id) : std::string(fallback);
  };
  add("<CLS>");
  add("<SEP>");
  eod_ = add("<EOD>");
  add("<MASK>");
  add(model_piece_or(encoder_.pad_id(), "<PAD>"));
  add(model_piece_or(encoder_.bos_id(), "<BOS>"));
  add(model_piece_or(encoder_.eos_id(), "<EOS>"));
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view utf8) const {
  if (flavor_ == Flavor::LegacyLlama2) {
    std::vector<int32_t> ids = {encoder_.bos_id()};
    const std::vector<int32_t> body = encoder_.encode(utf8);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }
  if (flavor_ == Flavor::Plain) return encoder_.encode(utf8);
  // Legacy SentencePieceTokenizer: the text before the earliest special token (the first registered on a tie) is
  // encoded on its own, then the token's id, and on after it.
  std::vector<int32_t> ids;
  size_t at = 0;
  while (true) {
    size_t best = std::string_view::npos;
    const std::pair<std::string, int32_t>* which = nullptr;
    for (const auto& s : specials_) {
      const size_t p = utf8.find(s.first, at);
      if (p < best) {
        best = p;
        which = &s;
      }
    }
    if (which == nullptr) break;
    const std::vector<int32_t> before = encoder_.encode(utf8.substr(at, best - at));
    ids.insert(ids.end(), before.begin(), before.end());
    ids.push_back(which->second);
    at = best + which->first.size();
  }
  const std::vector<int32_t> rest = encoder_.encode(utf8.substr(at));
  ids.insert(ids.end(), rest.begin(), rest.end());
  return ids;
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  // As Megatron's legacy detokenize: the text between special tokens decoded, each special as " TEXT ".
  std::string out;
  std::vector<int32_t> run;
  for (int32_t id : ids) {
    auto it = std::find_if(specials_.begin(), specials_.end(), [&](const auto& s) { return s.second == id; });
    if (it == specials_.end()) {
      run.push_back(id);
      continue;
    }
    out += encoder_.decode(run) + " " + it->first + " ";
    run.clear();
  }
  return out + encoder_.decode(run);
}

}  // namespace hytra
