// SentencePiece .model files (docs/spec/tokenizers.md §10): the protobuf reader's defaults and named errors; hand-
// worked segmentations (BPE's leftmost merge on equal scores, Unigram's longest last piece on equal totals, its float
// sums); and exactness against SentencePiece itself (Debian's spm_train / spm_encode 0.1, which scripts/setup.sh
// installs; Unigram near-ties aside, see expect_like_spm): models it
// trains on the Brown corpus (BPE and Unigram, nmt_nfkc and identity normalizers, byte fallback, user-defined
// symbols, no whitespace removal) and models this test writes by hand (UNUSED pieces, ties, control and user-defined
// pieces, scores that only double precision tells apart), on a torture text and Brown documents, id for id.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "common/sentencepiece_writer.h"
#include "core/json.h"
#include "data/tokenizer/sentencepiece.h"
#include "data/tokenizer/sentencepiece_model.h"

namespace hytra {
namespace {
using test::error_of;
using test::model_bytes;
using test::Piece;
using test::two_rule_charsmap;
namespace fs = std::filesystem;

const std::string kBrown = std::string(HYTRA_SOURCE_DIR) + "/data/brown/brown.jsonl";
const std::string kU = "\xE2\x96\x81";  // the escaped space "▁"

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("hytra_sp_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

void write_file(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

std::string run(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  ::pclose(f);
  return out;
}

bool have_spm() {
  return std::system("command -v spm_encode >/dev/null 2>&1 && command -v spm_train >/dev/null 2>&1") == 0;
}

// The torture lines: whitespace runs, NFKC-changed characters, combining marks, CJK, emoji, controls, U+2581, U+FFFD,
// malformed UTF-8, digits, piece texts of control and byte pieces.
std::vector<std::string> torture_lines() {
  return {"Hello world! It's, isn't, we're.",
          "   leading and   repeated   spaces   ",
          "tab\there\tand\x0b"
          "vertical\x0c"
          "feed",
          "Ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ １２３ ½ ﬁ ﬂ ㍻ ℃ Ⅻ",
          "e\xCC\x81 vs \xC3\xA9, n\xCC\x83, A\xCC\x8A, \xEF\xBD\x9E tilde",
          "中文字符和日本語のテキスト、한국어 텍스트。",
          "emoji: \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xE2\x9D\xA4\xEF\xB8\x8F and ZWJ "
          "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
          "controls: a\x01"
          "b\x02"
          "c\x7F"
          "d \xC2\x85 e \xC2\xA0 f \xE2\x80\x8B g \xEF\xBB\xBF h",
          kU + "already" + kU + "escaped" + kU + " and \xEF\xBF\xBD replacement",
          "malformed: \xFF\xFE \xC3 x \xE2\x82 y \xF0\x9F z \xED\xA0\x80 \xC0\xAF end",
          "numbers 3.14159 1,000,000 2026-11-27 0x1F 1e-9",
          "<s> </s> <unk> <pad> <0x41> <CLS> <EOD> literal specials",
          "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa bbbbbbbbbbbbbb",
          "Mixed CASE and Apostrophes: DON'T, O'Neil, rock'n'roll",
          "\xE2\x80\x9Cquotes\xE2\x80\x9D \xE2\x80\x94 dashes \xE2\x80\x93 and \xE2\x80\xA6",
          " ",
          "x"};
}

std::vector<std::string> brown_lines(size_t n) {
  std::vector<std::string> out;
  std::ifstream f(kBrown);
  std::string line;
  while (out.size() < n && std::getline(f, line)) {
    const std::string text = Json::parse(line).at("text").as_string();
    std::istringstream in(text);
    std::string l;
    while (out.size() < n && std::getline(in, l))
      if (!l.empty()) out.push_back(l);
  }
  return out;
}

// spm_encode's ids of each line (one line in, one line out).
std::vector<std::vector<int32_t>> spm_ids(const fs::path& model, const fs::path& dir,
                                          const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  write_file(dir / "input.txt", text);
  std::istringstream out(run("spm_encode --model=" + model.string() + " --output_format=id < " +
                             (dir / "input.txt").string() + " 2>/dev/null"));
  std::vector<std::vector<int32_t>> ids;
  std::string line;
  while (std::getline(out, line)) {
    std::istringstream in(line);
    std::vector<int32_t> v;
    int32_t id;
    while (in >> id) v.push_back(id);
    ids.push_back(v);
  }
  return ids;
}

// The total score of a Unigram segmentation, in double; nullopt when it holds an unknown or byte piece.
std::optional<double> unigram_total(const SpVocabulary& v, const std::vector<int32_t>& ids) {
  double total = 0;
  for (int32_t id : ids) {
    if (v.type(id) == SpPieceType::Unknown || v.type(id) == SpPieceType::Byte) return std::nullopt;
    total += v.type(id) == SpPieceType::UserDefined ? -0.1 : double(v.score(id));
  }
  return total;
}

// hytra's ids of each line against spm_encode's. The local spm_encode is SentencePiece 0.1 (Debian's), which sums
// Unigram scores in double where 0.2 (hytra's reference, tests/interop/tokenizer_exactness.py) sums them in float:
// for Unigram models a line may differ where the two segmentations' totals are equal to float rounding (a near-tie
// that the precision decides), and nowhere else.
void expect_like_spm(const fs::path& model, const fs::path& dir, const std::vector<std::string>& lines) {
  const SentencePieceTokenizer tok(model.string(), SentencePieceTokenizer::Flavor::Plain);
  const SpVocabulary& vocab = tok.encoder().vocab();
  const bool unigram = read_sentencepiece_model(model.string()).model_type == SpModelType::Unigram;
  const auto want = spm_ids(model, dir, lines);
  ASSERT_EQ(want.size(), lines.size()) << model;
  int bad = 0, near_ties = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(lines[i]);
    if (got == want[i]) continue;
    const auto a = unigram_total(vocab, got), b = unigram_total(vocab, want[i]);
    if (unigram && a && b && std::fabs(*a - *b) <= 4 * std::fabs(*b) * FLT_EPSILON) {
      ++near_ties;
      continue;
    }
    if (++bad <= 3)
      ADD_FAILURE() << model.filename() << " line " << i << " '" << lines[i].substr(0, 60) << "': " << got.size()
                    << " ids, spm_encode " << want[i].size();
  }
  EXPECT_EQ(bad, 0) << model.filename() << ": " << bad << " of " << lines.size() << " lines differ";
  EXPECT_LE(near_ties, int(lines.size() / 100) + 2) << model.filename() << ": too many near-ties";
}

#define REQUIRE_SPM() \
  if (!have_spm()) GTEST_SKIP() << "spm_train / spm_encode not installed (scripts/setup.sh installs sentencepiece)"

TEST(SentencePiece, ReadsFieldsAndProto2Defaults) {
  const SpModelProto m = parse_sentencepiece_model(
      model_bytes({{"<unk>", 0, 2}, {"<s>", 0, 3}, {"a", -1.5f, 1}}, 2, false, false), "m.model");
  ASSERT_EQ(m.pieces.size(), 3u);
  EXPECT_EQ(m.pieces[2].text, "a");
  EXPECT_EQ(m.pieces[2].score, -1.5f);
  EXPECT_EQ(m.pieces[1].type, SpPieceType::Control);
  EXPECT_EQ(m.model_type, SpModelType::Bpe);
  EXPECT_FALSE(m.remove_extra_whitespaces);
  EXPECT_TRUE(m.escape_whitespaces);  // absent: the default
  EXPECT_TRUE(m.precompiled_charsmap.empty());
  EXPECT_EQ(m.eos_piece, "</s>");
}

TEST(SentencePiece, BadFilesAreNamedErrors) {
  const std::string good = model_bytes({{"<unk>", 0, 2}, {"a", -1, 1}}, 2);
  std::string e = error_of([&] { parse_sentencepiece_model(good.substr(0, good.size() - 3), "cut.model"); });
  EXPECT_NE(e.find("cut.model"), std::string::npos) << e;
  EXPECT_NE(e.find("byte offset"), std::string::npos) << e;
  e = error_of([&] { SpEncoder(parse_sentencepiece_model(model_bytes({{"a", -1, 1}}, 2), "x"), "nounk.model"); });
  EXPECT_NE(e.find("no UNKNOWN piece"), std::string::npos) << e;
  e = error_of([&] {
    SpEncoder(parse_sentencepiece_model(model_bytes({{"<unk>", 0, 2}, {"<0x41>", 0, 6}}, 2), "x"), "byte.model");
  });
  EXPECT_NE(e.find("byte_fallback is off"), std::string::npos) << e;
  e = error_of([&] {
    SpEncoder(parse_sentencepiece_model(model_bytes({{"<unk>", 0, 2}, {"a", 0, 1}, {"a", 0, 5}}, 2), "x"), "dup.model");
  });
  EXPECT_NE(e.find("is already piece 1"), std::string::npos) << e;
  e = error_of([&] { SpEncoder(parse_sentencepiece_model(model_bytes({{"<unk>", 0, 2}}, 3), "x"), "word.model"); });
  EXPECT_NE(e.find("WORD"), std::string::npos) << e;
  e = error_of([] { SentencePieceTokenizer("/nonexistent.model", SentencePieceTokenizer::Flavor::Plain); });
  EXPECT_NE(e.find("/nonexistent.model"), std::string::npos) << e;
}

std::vector<std::string> texts_of(const SpEncoder& enc, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(enc.vocab().text(id));
  return out;
}

// Worked by hand from the rules: BPE merges the leftmost pair when scores tie ("▁a" before "aa" in "▁aaa");
// Unigram keeps the earlier start (the longer last piece) on equal totals.
TEST(SentencePiece, HandWorkedTieBreaks) {
  const SpEncoder bpe(
      parse_sentencepiece_model(
          model_bytes({{"<unk>", 0, 2}, {kU, -3, 1}, {"a", -3, 1}, {"aa", -1, 1}, {kU + "a", -1, 1}}, 2), "bpe"),
      "bpe");
  EXPECT_EQ(texts_of(bpe, bpe.encode("aaa")), (std::vector<std::string>{kU + "a", "aa"}));
  const SpEncoder uni(
      parse_sentencepiece_model(
          model_bytes({{"<unk>", 0, 2}, {kU, -1, 1}, {"a", -1, 1}, {"b", -1, 1}, {kU + "a", -2, 1}, {kU + "ab", -3, 1}},
                      1),
          "uni"),
      "uni");
  // "▁ab": ▁ab (-3) ties ▁a + b (-3) and ▁ + a + b (-3): the earliest start wins.
  EXPECT_EQ(texts_of(uni, uni.encode("ab")), (std::vector<std::string>{kU + "ab"}));
  // SentencePiece 0.2 sums in float: ▁a + bc (-1 - 2e-9) and ▁ab + c (-1 + 1e-9) both round to -1, and the
  // earlier start stays (0.1's double sums chose ▁ab + c).
  const SpEncoder quirk(parse_sentencepiece_model(model_bytes({{"<unk>", 0, 2},
                                                               {kU + "a", -1, 1},
                                                               {"bc", -2e-9f, 1},
                                                               {kU + "ab", -1, 1},
                                                               {"c", 1e-9f, 1},
                                                               {"a", -3, 1},
                                                               {"b", -3, 1},
                                                               {kU, -2, 1}},
                                                              1),
                                                  "quirk"),
                        "quirk");
  EXPECT_EQ(texts_of(quirk, quirk.encode("abc")), (std::vector<std::string>{kU + "a", "bc"}));
  // An unknown character (one UNKNOWN id for a run), an empty text, spaces only.
  EXPECT_EQ(uni.encode("zz"), (std::vector<int32_t>{1, 0}));
  EXPECT_TRUE(uni.encode("").empty());
  EXPECT_TRUE(uni.encode("   ").empty());
}

TEST(SentencePiece, MatchesSpmEncodeOnTrainedModels) {
  REQUIRE_SPM();
  if (!fs::exists(kBrown)) GTEST_SKIP() << "the Brown corpus is not in data/brown (run scripts/setup.sh)";
  const fs::path dir = temp_dir("trained");
  std::string corpus;
  for (const auto& l : brown_lines(4000)) corpus += l + "\n";
  write_file(dir / "corpus.txt", corpus);
  std::vector<std::string> lines = torture_lines();
  for (const auto& l : brown_lines(600)) lines.push_back(l);
  struct Variant {
    std::string name, flags;
  };
  const std::vector<Variant> variants = {
      {"bpe", "--model_type=bpe"},
      {"bpe_bytes", "--model_type=bpe --byte_fallback=true --split_digits=true"},
      {"unigram", "--model_type=unigram"},
      {"unigram_bytes_user", "--model_type=unigram --byte_fallback=true '--user_defined_symbols=<CLS>,foo'"},
      {"bpe_identity_keep_spaces",
       "--model_type=bpe --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=false"},
      {"unigram_suffix", "--model_type=unigram --treat_whitespace_as_suffix=true --normalization_rule_name=nfkc_cf"},
  };
  for (const Variant& v : variants) {
    const fs::path prefix = dir / v.name;
    run("spm_train --input=" + (dir / "corpus.txt").string() + " --model_prefix=" + prefix.string() +
        " --vocab_size=800 --character_coverage=0.9995 --num_threads=1 --minloglevel=2 " + v.flags +
        " > /dev/null 2>&1");
    ASSERT_TRUE(fs::exists(prefix.string() + ".model")) << "spm_train did not write " << v.name;
    expect_like_spm(prefix.string() + ".model", dir, lines);
  }
  fs::remove_all(dir);
}

TEST(SentencePiece, MatchesSpmEncodeOnHandMadeModels) {
  REQUIRE_SPM();
  const fs::path dir = temp_dir("handmade");
  std::vector<std::string> lines = {"abcabc",    "aaa",    "ab abc", "abc",      "ba cab",
                                    "<s>ab</s>", "xyz ab", " a  b ", "abab ccc", "\xC3\xA9t\xC3\xA9",
                                    "q"};
  // BPE with UNUSED pieces (split back into the pieces they were made of), equal scores, a user-defined and a control
  // piece.
  const std::vector<Piece> bpe = {
      {"<unk>", 0, 2}, {"<s>", 0, 3},      {"</s>", 0, 3},      {"xy", 0, 4},  {"ab", -2, 1},      {kU, -1, 1},
      {"a", -1, 1},    {"b", -1, 1},       {"c", -1, 1},        {"aa", -2, 1}, {kU + "a", -2, 1},  {"bc", -2, 1},
      {"abc", -3, 5},  {kU + "ab", -4, 5}, {kU + "abc", -5, 1}, {"ca", -2, 1}, {"\xC3\xA9", -1, 1}};
  write_file(dir / "bpe.model", model_bytes(bpe, 2));
  expect_like_spm(dir / "bpe.model", dir, lines);
  std::vector<Piece> bytes = bpe;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    bytes.push_back({name, 0, 6});
  }
  write_file(dir / "bpe_bytes.model", model_bytes(bytes, 2, true, false));
  expect_like_spm(dir / "bpe_bytes.model", dir, lines);
  // Unigram: scores that tie in float (0.1's double sums decide them: a near-tie here), a user-defined piece, an
  // UNUSED piece.
  const std::vector<Piece> uni = {{"<unk>", 0, 2},   {"<s>", 0, 3},      {"</s>", 0, 3},    {kU + "a", -1, 1},
                                  {"bc", -2e-9f, 1}, {kU + "ab", -1, 1}, {"c", 1e-9f, 1},   {"a", -3, 1},
                                  {"b", -3, 1},      {kU, -2, 1},        {"cab", -0.5f, 4}, {"ab", -1, 5},
                                  {"x", -4, 1},      {"y", -4, 1}};
  write_file(dir / "uni.model", model_bytes(uni, 1));
  expect_like_spm(dir / "uni.model", dir, lines);
  // The hand-built charsmap: "A" becomes "a", "AB" is deleted (longest match first).
  write_file(dir / "charsmap.model", model_bytes(bpe, 2, false, true, two_rule_charsmap()));
  const SpEncoder enc(read_sentencepiece_model((dir / "charsmap.model").string()), "charsmap.model");
  EXPECT_EQ(enc.encode("A"), enc.encode("a"));
  EXPECT_EQ(enc.encode("ABAc"), enc.encode("ac"));
  expect_like_spm(dir / "charsmap.model", dir, {"A", "ABAc", "BAAB", "xAy ABA", "AAAA B"});
  fs::remove_all(dir);
}

// Megatron's wrappers: the legacy SentencePieceTokenizer appends its special tokens and cuts the text at them;
// Llama2Tokenizer (legacy) puts the bos id first; the end of document is <EOD> or the eos piece.
TEST(SentencePiece, MegatronFlavors) {
  const fs::path dir = temp_dir("flavors");
  write_file(dir / "m.model", model_bytes({{"<unk>", 0, 2},
                                           {"<s>", 0, 3},
                                           {"</s>", 0, 3},
                                           {kU, -1, 1},
                                           {"a", -1, 1},
                                           {"b", -1, 1},
                                           {kU + "a", -0.5f, 1}},
                                          2));
  const std::string m = (dir / "m.model").string();
  using F = SentencePieceTokenizer::Flavor;
  const SentencePieceTokenizer plain(m, F::Plain), legacy(m, F::LegacySentencePiece), llama(m, F::LegacyLlama2);
  EXPECT_EQ(plain.vocab_size(), 7);
  EXPECT_EQ(plain.eod(), 2);
  for (int32_t id : plain.encode("a<EOD>b")) EXPECT_LT(id, 7) << "plain: <EOD> is text";
  // <CLS> 7, <SEP> 8, <EOD> 9, <MASK> 10, <PAD> 11 (the model has no pad piece), bos 1, eos 2.
  EXPECT_EQ(legacy.vocab_size(), 12);
  EXPECT_EQ(legacy.eod(), 9);
  std::vector<int32_t> want = plain.encode("a");
  want.push_back(9);
  for (int32_t id : plain.encode("b")) want.push_back(id);
  want.push_back(1);
  EXPECT_EQ(legacy.encode("a<EOD>b<s>"), want);
  EXPECT_EQ(legacy.decode({9}), " <EOD> ");
  EXPECT_EQ(legacy.decode(legacy.encode("a<EOD>b<s>")), "a <EOD> b <s> ");
  std::vector<int32_t> with_bos = {1};
  for (int32_t id : plain.encode("ab")) with_bos.push_back(id);
  EXPECT_EQ(llama.encode("ab"), with_bos);
  EXPECT_EQ(llama.eod(), 2);
  EXPECT_EQ(plain.decode(plain.encode(" ab  a")), "ab a");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hytra
