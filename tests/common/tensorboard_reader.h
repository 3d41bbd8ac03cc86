// A reader of TensorBoard event files for the tests (the parts train/metrics/tensorboard.h writes): every record's
// two checksums verified, each Event's wall time, step, file_version and simple scalar values decoded.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hytra::test {

struct TbEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

// The events of a file; a broken record or field is a test failure (an exception naming what).
std::vector<TbEvent> read_tensorboard(const std::string& path);
// tag -> (step -> value) over every event of the file.
std::map<std::string, std::map<int64_t, float>> tensorboard_scalars(const std::vector<TbEvent>& events);

}  // namespace hytra::test
