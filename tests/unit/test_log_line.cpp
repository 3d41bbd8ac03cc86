// Megatron log line, validation block, JSONL records and the progress text, against strings written
// by hand from the format table of docs/spec/megatron_cli.md §1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "core/progress.h"
#include "train/metrics/jsonl.h"
#include "train/metrics/log_line.h"

namespace hytra {
namespace {

IterationLog spec_example() {
  IterationLog g;
  g.time = {2026, 8, 22, 10, 0, 0, 123456};
  g.iteration = 100;
  g.train_iters = 1000;
  g.consumed_samples = 25600;
  g.ms_per_iter = 812.34;
  g.tflops_per_gpu = 402.08;
  g.lr = 1.5e-4;
  g.global_batch_size = 256;
  g.losses = {{"lm loss", 4.1234564}};
  g.grad_norm = 0.8124;
  return g;
}

TEST(LogLine, SpecExample) {
  EXPECT_EQ(format_iteration_line(spec_example()),
            " [2026-08-22 10:00:00.123456] iteration      100/    1000 | consumed samples:        25600 |"
            " elapsed time per iteration (ms): 812.3 | throughput per GPU (TFLOP/s/GPU): 402.1 |"
            " learning rate: 1.500000E-04 | global batch size:   256 | lm loss: 4.123456E+00 |"
            " loss scale: 1.0 | grad norm: 0.812 | number of skipped iterations:   0 |"
            " number of nan iterations:   0 |");
}

TEST(LogLine, EveryOptionalField) {
  IterationLog g = spec_example();
  g.time = {2025, 1, 2, 3, 4, 5, 6};
  g.iteration = 123456789;  // wider than the field: no truncation
  g.train_iters = 5;
  g.consumed_samples = 1234567890123;
  g.skipped_samples = 7;
  g.ms_per_iter = 0.05;  // stored as 0.05000000000000000277, so it rounds up to 0.1
  g.tokens_per_s = 123456.75;
  g.lr = 0.0;
  g.global_batch_size = 123456;
  g.losses = {{"lm loss", 2.0}, {"load_balancing_loss", 1.0000005e-3}, {"mtp_1 loss", -1.0}, {"z_loss", 0.0}};
  g.grad_norm = 12.3456;
  g.num_zeros = 42;
  g.params_norm = 250.0005;
  g.skipped_iterations = 2;
  g.nan_iterations = 1234;
  EXPECT_EQ(
      format_iteration_line(g),
      " [2025-01-02 03:04:05.000006] iteration 123456789/       5 | consumed samples: 1234567890123 |"
      " skipped samples:            7 | elapsed time per iteration (ms): 0.1 |"
      " throughput per GPU (TFLOP/s/GPU): 402.1 | tokens per second: 123456.8 |"
      " learning rate: 0.000000E+00 | global batch size: 123456 | lm loss: 2.000000E+00 |"
      " load_balancing_loss: 1.000000E-03 | z_loss: 0.000000E+00 | loss scale: 1.0 | grad norm: 12.346 |"
      " num zeros: 42 | params norm: 250.000 | number of skipped iterations:   2 |"
      " number of nan iterations: 1234 |");
}

TEST(LogLine, MinimalFieldsAndTokensWithoutThroughput) {
  IterationLog g;
  g.time = {2026, 12, 31, 23, 59, 59, 999999};
  g.iteration = 1;
  g.train_iters = 10;
  g.consumed_samples = 8;
  g.ms_per_iter = 1500.25;  // exactly representable: half-to-even gives 1500.2
  g.tokens_per_s = 0.04;
  g.global_batch_size = 8;
  g.loss_scale = 1.0;
  g.grad_norm = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(format_iteration_line(g),
            " [2026-12-31 23:59:59.999999] iteration        1/      10 | consumed samples:            8 |"
            " elapsed time per iteration (ms): 1500.2 | tokens per second: 0.0 | global batch size:     8 |"
            " loss scale: 1.0 | grad norm: nan | number of skipped iterations:   0 |"
            " number of nan iterations:   0 |");
  g.grad_norm = -std::numeric_limits<double>::quiet_NaN();  // Python shows no sign on NaN
  EXPECT_NE(format_iteration_line(g).find(" grad norm: nan |"), std::string::npos);
}

TEST(LogLine, ValidationBlock) {
  const std::string text =
      " validation loss at iteration 100 | lm loss value: 2.500000E+00 |"
      " lm loss PPL: 1.218249E+01 | ";
  const std::string rule(text.size() + 1, '-');
  EXPECT_EQ(rule.size(), 95u);
  EXPECT_EQ(format_validation_block(100, {{"lm loss", 2.5}}), rule + "\n" + text + "\n" + rule + "\n");
  // PPL is capped at exp(20) = 485165195.40979...
  const std::string capped =
      " validation loss at iteration 7 | lm loss value: 2.500000E+01 |"
      " lm loss PPL: 4.851652E+08 | mtp_1 loss value: 0.000000E+00 |"
      " mtp_1 loss PPL: 1.000000E+00 | ";
  EXPECT_EQ(format_validation_block(7, {{"lm loss", 25.0}, {"mtp_1 loss", 0.0}}),
            std::string(capped.size() + 1, '-') + "\n" + capped + "\n" + std::string(capped.size() + 1, '-') +
                "\n");
}

TEST(LogLine, TimestampIsPlausible) {
  const LogTimestamp t = log_timestamp_now();
  EXPECT_GE(t.year, 2024);
  EXPECT_TRUE(t.month >= 1 && t.month <= 12 && t.day >= 1 && t.day <= 31);
  EXPECT_TRUE(t.microsecond >= 0 && t.microsecond < 1000000);
  EXPECT_EQ(format_timestamp({2026, 3, 4, 5, 6, 7, 89}), "2026-03-04 05:06:07.000089");
}

TEST(MetricsJsonl, RecordsRoundTripDigits) {
  IterationLog g = spec_example();
  g.tflops_per_gpu.reset();
  g.tokens_per_s = 0.1;
  g.losses = {{"lm loss", 4.0}, {"mtp_1 \"q\" loss", std::numeric_limits<double>::infinity()}};
  g.grad_norm = std::numeric_limits<double>::quiet_NaN();
  g.num_zeros = 3;
  EXPECT_EQ(
      iteration_json(g),
      "{\"time\": \"2026-08-22 10:00:00.123456\", \"iteration\": 100, \"train_iters\": 1000,"
      " \"consumed_samples\": 25600, \"skipped_samples\": 0, \"ms_per_iter\": 812.34000000000003,"
      " \"tokens_per_s\": 0.10000000000000001, \"lr\": 0.00014999999999999999, \"global_batch_size\": 256,"
      " \"lm loss\": 4, \"mtp_1 \\\"q\\\" loss\": null, \"loss_scale\": 1, \"grad_norm\": null,"
      " \"num_zeros\": 3, \"skipped_iterations\": 0, \"nan_iterations\": 0}");
  EXPECT_EQ(validation_json(5, {{"lm loss", 25.0}}),
            "{\"validation_iteration\": 5, \"lm loss\": 25, \"lm loss ppl\": 485165195.40979028}");
}

TEST(MetricsJsonl, AppendsOneFlushedLinePerRecord) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("hytra_metrics_" + std::to_string(::getpid()) + ".jsonl"))
          .string();
  std::filesystem::remove(path);
  {
    JsonlWriter w(path);
    w.write(spec_example());
    std::ifstream in(path);  // readable before the writer closes: flushed per line
    std::string first;
    ASSERT_TRUE(std::getline(in, first));
    EXPECT_EQ(first, iteration_json(spec_example()));
  }
  {
    JsonlWriter w(path);  // appends, never truncates
    w.write_validation(100, {{"lm loss", 2.5}});
  }
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::filesystem::remove(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], iteration_json(spec_example()));
  EXPECT_EQ(lines[1], validation_json(100, {{"lm loss", 2.5}}));
  EXPECT_THROW(JsonlWriter("/nonexistent-dir/m.jsonl"), Error);
}

TEST(Progress, TextAndTtyOnly) {
  EXPECT_EQ(format_progress("tokenize", 50, 200, 10.0, 10),
            "tokenize [##........] 50/200   25.0%  5.0/s  ETA 00:00:30");
  EXPECT_EQ(format_progress("index", 3, 4, 0.0, 4), "index [###.] 3/4   75.0%  0.0/s  ETA --:--:--");
  EXPECT_EQ(format_progress("big", 1, 7201, 1.0, 2), "big [..] 1/7201    0.0%  1.0/s  ETA 02:00:00");
  EXPECT_EQ(format_progress("done", 9, 9, 3.0, 3), "done [###] 9/9  100.0%  3.0/s  ETA 00:00:00");
  EXPECT_EQ(format_progress("docs", 5, 0, 2.0), "docs 5  2.5/s");
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar("x", 10, f, 0.0);
    EXPECT_FALSE(bar.enabled());
    bar.advance(5);
    bar.update(10);
  }
  EXPECT_EQ(std::ftell(f), 0L);  // not a terminal: nothing written
  std::fclose(f);
}

// Off a terminal with a plain-line interval: a line per interval, and one at the end when any was written; a wait
// shorter than the interval writes nothing.
TEST(Progress, PlainLinesForLongWaitsOffATerminal) {
  auto lines_of = [](double interval, int updates) {
    std::FILE* f = std::tmpfile();
    {
      ProgressBar bar("save", updates, f, 0.0, interval);
      for (int i = 1; i <= updates; ++i) bar.update(i);
    }
    std::rewind(f);
    std::vector<std::string> lines;
    char buf[256];
    while (std::fgets(buf, sizeof buf, f)) lines.emplace_back(buf);
    std::fclose(f);
    return lines;
  };
  const std::vector<std::string> every = lines_of(1e-9, 3);
  ASSERT_EQ(every.size(), 4u);  // three updates and the end
  EXPECT_EQ(every[0].rfind("hytra: save [", 0), 0u) << every[0];
  EXPECT_NE(every[3].find(" 3/3  100.0%"), std::string::npos) << every[3];
  EXPECT_TRUE(lines_of(1e9, 3).empty());
  EXPECT_TRUE(lines_of(0, 3).empty());
}

}  // namespace
}  // namespace hytra
