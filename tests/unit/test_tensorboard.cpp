// TensorBoard event files (train/metrics/tensorboard.h, docs/spec/tensorboard.md): CRC32C's check value, the record
// of the spec's worked example byte for byte, and a file written by the writer read back (checksums verified).
#include <gtest/gtest.h>

#include <filesystem>

#include "common/tensorboard_reader.h"
#include "core/error.h"
#include "train/metrics/tensorboard.h"

namespace hytra {
namespace {

std::string hex(const std::string& bytes) {
  std::string out;
  char b[4];
  for (unsigned char c : bytes) {
    std::snprintf(b, sizeof b, "%02X ", c);
    out += b;
  }
  if (!out.empty()) out.pop_back();
  return out;
}

TEST(TensorBoard, Crc32cCheckValue) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c(reinterpret_cast<const unsigned char*>(s.data()), s.size()), 0xE3069283u);
}

TEST(TensorBoard, TheSpecsWorkedExample) {
  // wall time 1.7e9, step 100, `lm loss` 2.5 (docs/spec/tensorboard.md §3)
  const std::string record = tf_record(event_scalars(1.7e9, 100, {{"lm loss", 2.5}}));
  EXPECT_EQ(hex(record),
            "1D 00 00 00 00 00 00 00 60 2F DF 23 09 00 00 00 40 FC 54 D9 41 10 64 2A 10 0A 0E 0A 07 6C 6D 20 6C 6F 73 73 "
            "15 00 00 20 40 D2 4E DC 24");
}

TEST(TensorBoard, AWrittenFileReadsBack) {
  const std::string dir = testing::TempDir() + "hytra_tb_unit";
  std::filesystem::remove_all(dir);
  std::string path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
    w.scalars(1, {{"lm loss", 10.5}, {"grad-norm", 0.25}});
    w.scalars(16, {{"lm loss vs samples", 10.5}});
    w.scalars(2, {});  // nothing
  }
  EXPECT_NE(std::filesystem::path(path).filename().string().find("events.out.tfevents."), std::string::npos);
  const std::vector<test::TbEvent> events = test::read_tensorboard(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.7e9);
  EXPECT_EQ(events[1].step, 1);
  ASSERT_EQ(events[1].values.size(), 2u);
  EXPECT_EQ(events[1].values[1].first, "grad-norm");
  EXPECT_EQ(events[1].values[1].second, 0.25f);
  EXPECT_EQ(events[2].step, 16);
  EXPECT_EQ(events[2].values[0].first, "lm loss vs samples");
  // A file that is not a directory in the way is a named error.
  EXPECT_THROW(TensorBoardWriter{path + "/sub"}, Error);
}

}  // namespace
}  // namespace hytra
