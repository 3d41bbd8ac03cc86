// Loading Gpt2Bpe from GPT-2's encoder.json + vocab.bpe (docs/spec/tokenizers.md §1) or an HF tokenizer.json with a
// BPE model and ByteLevel pre-tokenizer (docs/spec/tokenizers.md §6).
#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "data/tokenizer/byte_alphabet.h"
#include "data/tokenizer/gpt2_bpe.h"

namespace hytra {
namespace {

std::vector<std::pair<std::string, int64_t>> vocab_entries(const Json& obj, const std::string& where) {
  std::vector<std::pair<std::string, int64_t>> v;
  HYTRA_CHECK(obj.is_object(), where, ": vocab must be a JSON object token -> id, got ", json_type_name(obj.type()));
  for (const auto& [tok, id] : obj.as_object()) {
    HYTRA_CHECK(id.is_number(), where, ": vocab entry '", tok, "' must map to an integer id");
    v.emplace_back(tok, id.as_int("vocab id"));
  }
  return v;
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  HYTRA_CHECK(f.good(), "cannot open tokenizer file '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Checks an optional tokenizer.json component: absent/null, or an object whose "type" is `type`.
const Json* component(const Json& root, const char* key, const std::string& path) {
  const Json* c = root.find(key);
  if (c == nullptr || c->is_null()) return nullptr;
  HYTRA_CHECK(c->is_object(), path, ": '", key, "' must be an object or null");
  return c;
}

}  // namespace

void Gpt2Bpe::set_vocab(const std::vector<std::pair<std::string, int64_t>>& vocab, const std::string& where) {
  HYTRA_CHECK(!vocab.empty(), where, ": empty vocabulary");
  int64_t max_id = -1;
  for (const auto& [tok, id] : vocab) {
    HYTRA_CHECK(id >= 0 && id < (int64_t(1) << 31), where, ": token '", tok, "' has invalid id ", id);
    max_id = std::max(max_id, id);
  }
  // Ids index a table: a vocabulary's ids are dense (0 .. n-1, added tokens just above), so one far beyond the
  // token count is refused before the table is sized by it (a fuzzed 2E9 once asked for 64 GB).
  const int64_t limit = 2 * int64_t(vocab.size()) + 65536;
  HYTRA_CHECK(max_id < limit, where, ": token id ", max_id, " for ", vocab.size(), " tokens: expected ids below ",
              limit, " (a dense vocabulary)");
  id_to_bytes_.assign(size_t(max_id + 1), std::string());
  std::vector<bool> seen(size_t(max_id + 1), false);
  token_to_id_.reserve(vocab.size() * 2);
  for (const auto& [tok, id] : vocab) {
    HYTRA_CHECK(!seen[size_t(id)], where, ": id ", id, " is used by more than one token (again by '", tok, "')");
    seen[size_t(id)] = true;
    HYTRA_CHECK(token_to_id_.emplace(tok, int32_t(id)).second, where, ": duplicate token '", tok, "'");
    id_to_bytes_[size_t(id)] = alphabet_to_bytes(tok);
  }
}

void Gpt2Bpe::add_merge(const std::string& a, const std::string& b, const std::string& where) {
  auto ia = token_to_id_.find(a), ib = token_to_id_.find(b), im = token_to_id_.find(a + b);
  HYTRA_CHECK(ia != token_to_id_.end(), where, ": merge symbol '", a, "' is not in the vocabulary");
  HYTRA_CHECK(ib != token_to_id_.end(), where, ": merge symbol '", b, "' is not in the vocabulary");
  HYTRA_CHECK(im != token_to_id_.end(), where, ": merged token '", a + b, "' is not in the vocabulary");
  // A repeated pair takes its later rank, as the reference's dict(zip(merges, range(n))).
  merges_[(uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second)] = Merge{int32_t(next_rank_++), im->second};
}

void Gpt2Bpe::add_special(const std::string& content, int64_t id, const std::string& where) {
  HYTRA_CHECK(!content.empty(), where, ": empty added token");
  HYTRA_CHECK(id >= 0 && id < (int64_t(1) << 31), where, ": added token '", content, "' has invalid id ", id);
  if (size_t(id) >= id_to_bytes_.size()) id_to_bytes_.resize(size_t(id) + 1);
  id_to_bytes_[size_t(id)] = content;
  specials_.emplace_back(content, int32_t(id));
}

void Gpt2Bpe::finish(const std::string& where) {
  for (int b = 0; b < 256; ++b) {
    auto it = token_to_id_.find(bytes_to_alphabet(std::string(1, char(b))));
    HYTRA_CHECK(it != token_to_id_.end(), where, ": vocabulary has no token for byte 0x", std::hex, b,
                " (not a byte-level BPE vocabulary)");
    byte_id_[size_t(b)] = it->second;
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
  for (const auto& [content, id] : specials_) {
    if (content == "<|endoftext|>") eod_ = id;
  }
  if (eod_ < 0) eod_ = token_id("<|endoftext|>");
}

Gpt2Bpe Gpt2Bpe::from_files(const std::string& encoder_json, const std::string& vocab_bpe) {
  Gpt2Bpe t;
  t.set_vocab(vocab_entries(Json::parse_file(encoder_json), encoder_json), encoder_json);
  const std::string text = read_text_file(vocab_bpe);
  // Lines: "#version: ..." then "A B" per merge; the text after the last '\n' is ignored (as the
  // reference's split("\n")[1:-1]).
  size_t pos = 0;
  int64_t line_no = 0;
  while (true) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1) {
      HYTRA_CHECK(line.rfind("#version", 0) == 0, vocab_bpe, ": line 1 must be the '#version: ...' header, got '",
                  line, "'");
      continue;
    }
    size_t sp = line.find(' ');
    HYTRA_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == std::string::npos,
                vocab_bpe, ": bad merge on line ", line_no, ": expected two symbols separated by one space, got '",
                line, "'");
    t.add_merge(line.substr(0, sp), line.substr(sp + 1), str(vocab_bpe, " line ", line_no));
  }
  HYTRA_CHECK(line_no >= 1, vocab_bpe, ": empty merges file (expected a '#version' header line)");
  auto eot = t.token_to_id_.find("<|endoftext|>");
  if (eot != t.token_to_id_.end()) t.specials_.emplace_back(eot->first, eot->second);
  t.finish(vocab_bpe);
  return t;
}

Gpt2Bpe Gpt2Bpe::from_hf_tokenizer_json(const std::string& path) {
  const Json root = Json::parse_file(path);
  HYTRA_CHECK(root.is_object(), path, ": top level must be a JSON object");
  const Json* model = root.find("model");
  HYTRA_CHECK(model != nullptr && model->is_object(), path, ": missing key 'model'");
  const Json* type = model->find("type");
  HYTRA_CHECK(type != nullptr && type->is_string() && type->as_string() == "BPE", path,
              ": model.type must be \"BPE\"");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* v = model->find(key);
    HYTRA_CHECK(v == nullptr || v->is_null() || (v->is_string() && v->as_string().empty()), path, ": model.", key,
                " is not supported by the byte-level BPE");
  }
  const Json* fallback = model->find("byte_fallback");
  HYTRA_CHECK(fallback == nullptr || fallback->is_null() || !fallback->as_bool("model.byte_fallback"), path,
              ": model.byte_fallback is not supported");
  HYTRA_CHECK(component(root, "normalizer", path) == nullptr, path,
              ": a normalizer is not supported (only GPT-2 style files with \"normalizer\": null)");
  const Json* pre = component(root, "pre_tokenizer", path);
  auto type_of = [](const Json* c) {
    return c != nullptr && c->is_object() && c->find("type") != nullptr && c->at("type").is_string()
               ? c->at("type").as_string()
               : std::string();
  };
  // Either a ByteLevel pre-tokenizer with GPT-2's regex, or (Llama-3, Qwen style) a Sequence of a Split by a regex
  // (behavior Isolated) and a ByteLevel without its regex.
  Gpt2Bpe t;
  if (type_of(pre) == "Sequence") {
    const Json* list = pre->find("pretokenizers");
    HYTRA_CHECK(list != nullptr && list->is_array() && list->as_array().size() == 2 &&
                    type_of(&list->as_array()[0]) == "Split" && type_of(&list->as_array()[1]) == "ByteLevel",
                path, ": a Sequence pre_tokenizer must be [Split, ByteLevel]");
    const Json& split = list->as_array()[0];
    const Json* pattern = split.find("pattern");
    HYTRA_CHECK(pattern != nullptr && pattern->is_object() && pattern->find("Regex") != nullptr, path,
                ": the Split pre_tokenizer needs {\"pattern\": {\"Regex\": ...}}");
    const Json* behavior = split.find("behavior");
    HYTRA_CHECK(behavior != nullptr && behavior->is_string() && behavior->as_string() == "Isolated", path,
                ": only the Split behavior \"Isolated\" is supported");
    const Json* invert = split.find("invert");
    HYTRA_CHECK(invert == nullptr || !invert->as_bool("invert"), path, ": a Split with invert=true is not supported");
    t.split_ = std::make_shared<const UnicodeRegex>(pattern->at("Regex").as_string("Regex"),
                                                    path + " pre_tokenizer Split pattern");
    pre = &list->as_array()[1];
    const Json* use_regex = pre->find("use_regex");
    HYTRA_CHECK(use_regex != nullptr && !use_regex->as_bool("use_regex"), path,
                ": the ByteLevel after a Split must have use_regex=false");
  } else {
    HYTRA_CHECK(type_of(pre) == "ByteLevel", path,
                ": pre_tokenizer must be {\"type\": \"ByteLevel\", ...} (GPT-2 regex) or a Sequence of a Split and a "
                "ByteLevel");
    const Json* use_regex = pre->find("use_regex");
    HYTRA_CHECK(use_regex == nullptr || use_regex->as_bool("pre_tokenizer.use_regex"), path,
                ": ByteLevel pre_tokenizer with use_regex=false needs a Split before it");
  }

  const Json* prefix = pre->find("add_prefix_space");
  t.add_prefix_space_ = prefix != nullptr && prefix->as_bool("pre_tokenizer.add_prefix_space");
  const Json* ignore = model->find("ignore_merges");
  t.ignore_merges_ = ignore != nullptr && !ignore->is_null() && ignore->as_bool("model.ignore_merges");
  const Json* vocab = model->find("vocab");
  HYTRA_CHECK(vocab != nullptr, path, ": missing key 'model.vocab'");
  t.set_vocab(vocab_entries(*vocab, path + " model.vocab"), path + " model.vocab");
  const Json* merges = model->find("merges");
  HYTRA_CHECK(merges != nullptr && merges->is_array(), path, ": missing key 'model.merges' (an array)");
  int64_t k = 0;
  for (const Json& m : merges->as_array()) {
    const std::string where = str(path, " model.merges[", k++, "]");
    if (m.is_string()) {
      const std::string& s = m.as_string();
      size_t sp = s.find(' ');
      HYTRA_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos,
                  where, ": expected \"A B\" (two symbols separated by one space), got '", s, "'");
      t.add_merge(s.substr(0, sp), s.substr(sp + 1), where);
    } else {
      HYTRA_CHECK(m.is_array() && m.as_array().size() == 2 && m.as_array()[0].is_string() && m.as_array()[1].is_string(),
                  where, ": expected a string \"A B\" or a pair [\"A\", \"B\"]");
      t.add_merge(m.as_array()[0].as_string(), m.as_array()[1].as_string(), where);
    }
  }
  if (const Json* added = root.find("added_tokens"); added != nullptr && !added->is_null()) {
    int64_t i = 0;
    for (const Json& a : added->as_array("added_tokens")) {
      const std::string where = str(path, " added_tokens[", i++, "]");
      HYTRA_CHECK(a.is_object() && a.find("id") != nullptr && a.find("content") != nullptr, where,
                  ": expected an object with 'id' and 'content'");
      t.add_special(a.at("content").as_string("content"), a.at("id").as_int("id"), where);
    }
  }
  t.finish(path);
  return t;
}

}  // namespace hytra
