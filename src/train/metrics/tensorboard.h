// TensorBoard event files (--tensorboard-dir; docs/spec/tensorboard.md): TFRecord-framed Event protobufs, encoded by
// hand (the few fields scalars need), each record's length and payload guarded by masked CRC32C. One Event per call
// of scalars(), flushed at once, so a crash leaves only whole records.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace hytra {

// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) and TFRecord's mask of it.
uint32_t crc32c(const unsigned char* data, size_t n);
uint32_t masked_crc32c(const unsigned char* data, size_t n);

// An Event protobuf: {wall_time, file_version} (the first record of a file) or {wall_time, step, summary of simple
// scalar values}.
std::string event_file_version(double wall_time);
std::string event_scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values);
// A TFRecord: length, masked CRC of the length, payload, masked CRC of the payload.
std::string tf_record(const std::string& payload);

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and a new events.out.tfevents.<seconds>.<host>.<pid>.0 file in it (errors name
  // --tensorboard-dir).
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event at `step` holding every (tag, value); nothing for an empty list.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& payload);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace hytra
