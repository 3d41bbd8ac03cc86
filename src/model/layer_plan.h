// TEMP (lead, uncommitted): stand-in until the pattern branch lands.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>
namespace hytra {
struct LayerItem {
  std::string symbols;
  std::vector<int64_t> physical;
  int64_t logical = 0;
  int64_t segment = 0;
};
struct PipelineStage { std::vector<LayerItem> items; int64_t physical_offset = 0; int64_t logical_offset = 0; };
struct LayerPlan {
  std::optional<std::string> main, mtp;
  int64_t mtp_depths = 0;
  int64_t num_layers = 0;
  int64_t num_logical_layers = 0;
  int64_t num_segments = 0;
  std::vector<std::pair<char, int64_t>> layer_counts;
  std::vector<LayerItem> items;
  std::vector<LayerItem> mtp_items;
  std::optional<PipelineStage> stage;
};
}
