// NullTokenizer (docs/spec/tokenizers.md §8): ids as Python's int() reads each piece of text.split(" "), the
// end-of-document id N, vocabulary N + 1; in preprocess and in a training run's vocabulary.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/flags.h"
#include "common/error_of.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/tokenizer/null_tokenizer.h"

namespace hytra {
namespace {
using test::error_of;

TEST(NullTokenizer, ReadsIdsLikePythonInt) {
  const NullTokenizer t(1000);
  EXPECT_EQ(t.encode("17 4 203"), (std::vector<int32_t>{17, 4, 203}));
  EXPECT_EQ(t.encode("+5 -0 1_000 \t9\n"), (std::vector<int32_t>{5, 0, 1000, 9}));  // int("1_000") == 1000
  EXPECT_EQ(t.encode("1000"), (std::vector<int32_t>{1000}));                        // N itself: the end of document
  EXPECT_EQ(t.eod(), 1000);
  EXPECT_EQ(t.vocab_size(), 1001);
  EXPECT_EQ(t.decode({3, 0, 1000}), "3 0 1000");
  for (const auto& [text, piece] :
       std::vector<std::pair<std::string, std::string>>{{"1  2", "'' at byte 2"},
                                                        {" 1", "'' at byte 0"},
                                                        {"1 ", "'' at byte 2"},
                                                        {"", "'' at byte 0"},
                                                        {"1001", "'1001' at byte 0"},
                                                        {"-1", "'-1' at byte 0"},
                                                        {"1__0", "'1__0'"},
                                                        {"_1", "'_1'"},
                                                        {"1_", "'1_'"},
                                                        {"0x10", "'0x10'"},
                                                        {"3.0", "'3.0'"},
                                                        {"99999999999999999999", "'99999999999999999999'"}}) {
    const std::string e = error_of([&] { t.encode(text); });
    EXPECT_NE(e.find("NullTokenizer: " + piece), std::string::npos) << "'" << text << "': " << e;
    EXPECT_NE(e.find("in [0, 1000]"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([] { NullTokenizer(0); }).find("--vocab-size: NullTokenizer needs"), std::string::npos);
}

TEST(NullTokenizer, PreprocessesAndSetsTheTrainingVocabulary) {
  const std::string dir = testing::TempDir() + "hytra_null_tok/";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "in.jsonl") << "{\"text\": \"5 6 7\"}\n{\"text\": [\"1\", \"2 3\"]}\n";
  PreprocessOptions opt;
  opt.input = dir + "in.jsonl";
  opt.output_prefix = dir + "out";
  opt.append_eod = true;
  const auto tok = load_tokenizer({"NullTokenizer", "", "", "", 96});
  preprocess(opt, *tok);
  const IndexedDataset d(dir + "out_text_document");
  ASSERT_EQ(d.num_documents(), 2);
  EXPECT_EQ(d.sequence(0), (std::vector<int32_t>{5, 6, 7, 96}));
  EXPECT_EQ(d.sequence(2), (std::vector<int32_t>{2, 3, 96}));  // the second document's sentences: {1}, {2 3 eod}
  ModelConfig m;
  TrainConfig t;
  ASSERT_TRUE(parse_train_args({"--hybrid-layer-pattern", "*-", "--hidden-size", "32", "--num-attention-heads", "4",
                                "--seq-length", "8", "--micro-batch-size", "1", "--train-iters", "1", "--lr", "1e-3",
                                "--tokenizer-type", "NullTokenizer", "--vocab-size", "96", "--mock-data"},
                               m, t, nullptr));
  EXPECT_EQ(m.vocab_size, 97);  // the ids and the end of document, padded later like any vocabulary
  const std::string e = error_of([] { load_tokenizer({"NullTokenizer", "", "", "", 0}); });
  EXPECT_NE(e.find("--vocab-size"), std::string::npos) << e;
}

}  // namespace
}  // namespace hytra
