// build_gpt_splits' --data-path parsing: weights that cannot be normalised are named errors before
// any file is opened (they used to reach the blend as NaN sample counts).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "data/gpt_data.h"

namespace hytra {
namespace {

std::string data_path_error(const std::vector<std::string>& data_path) {
  try {
    build_gpt_splits(data_path, "969, 30, 1", 16, 1234, {}, testing::TempDir());
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(GptData, WeightsMustHaveAPositiveFiniteSum) {
  const std::string a = testing::TempDir() + "hytra_no_such_dataset_a", b = testing::TempDir() + "hytra_no_such_b";
  EXPECT_NE(data_path_error({"0", a, "0", b}).find("--data-path: the blend weights are all zero"),
            std::string::npos);
  EXPECT_NE(data_path_error({"1e308", a, "1e308", b}).find("positive finite sum, got inf"), std::string::npos);
  for (const char* w : {"inf", "nan", "-1", "x"})
    EXPECT_NE(data_path_error({w, a, "1", b}).find(str("expected a finite non-negative weight before '", a, "', got '", w)),
              std::string::npos)
        << w;
  // Valid weights get as far as opening the files.
  EXPECT_NE(data_path_error({"0", a, "1", b}).find(a + ".idx: cannot open"), std::string::npos);
}

}  // namespace
}  // namespace hytra
