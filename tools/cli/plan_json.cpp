#include "cli/plan_json.h"

#include <sstream>

#include "core/json.h"
#include "train/pipeline_schedule.h"

namespace hytra {
namespace {

std::string opt_string(const std::optional<std::string>& s) { return s ? json_quote(*s) : "null"; }

void write_items(std::ostringstream& os, const std::vector<LayerItem>& items, const std::string& indent) {
  os << "[";
  for (size_t i = 0; i < items.size(); ++i) {
    const LayerItem& it = items[i];
    os << (i ? "," : "") << "\n" << indent << "  {\"symbols\": " << json_quote(it.symbols) << ", \"physical\": [";
    for (size_t j = 0; j < it.physical.size(); ++j) os << (j ? ", " : "") << it.physical[j];
    os << "], \"logical\": " << it.logical << ", \"segment\": " << it.segment << "}";
  }
  os << (items.empty() ? "]" : "\n" + indent + "]");
}

}  // namespace

std::string plan_to_json(const LayerPlan& p, const std::optional<ScheduleRequest>& schedule) {
  std::ostringstream os;
  os << "{\n";
  os << "  \"main\": " << opt_string(p.main) << ",\n";
  os << "  \"mtp\": " << opt_string(p.mtp) << ",\n";
  os << "  \"mtp_depths\": " << p.mtp_depths << ",\n";
  os << "  \"num_layers\": " << p.num_layers << ",\n";
  os << "  \"num_logical_layers\": " << p.num_logical_layers << ",\n";
  os << "  \"num_segments\": " << p.num_segments << ",\n";
  os << "  \"layer_counts\": {";
  for (size_t i = 0; i < p.layer_counts.size(); ++i)
    os << (i ? ", " : "") << json_quote(std::string(1, p.layer_counts[i].first)) << ": " << p.layer_counts[i].second;
  os << "},\n";
  os << "  \"layers\": ";
  write_items(os, p.items, "  ");
  if (p.stage) {
    os << ",\n  \"stage\": {\n    \"layers\": ";
    write_items(os, p.stage->items, "    ");
    os << ",\n    \"physical_offset\": " << p.stage->physical_offset << ",\n    \"logical_offset\": "
       << p.stage->logical_offset << "\n  }";
  }
  if (schedule) {
    const ScheduleRequest& q = *schedule;
    std::string order;
    for (const PipelineAction& a : pipeline_schedule(q.stages, q.rank, q.micro_batches, q.chunks))
      order += (order.empty() ? "" : " ") + a.text(q.chunks > 1);
    os << ",\n  \"schedule\": {\"micro_batches\": " << q.micro_batches << ", \"chunks\": " << q.chunks
       << ", \"order\": " << json_quote(order)
       << ", \"bubble_fraction\": " << pipeline_bubble_fraction(q.stages, q.micro_batches, q.chunks) << "}";
  }
  os << "\n}\n";
  return os.str();
}

}  // namespace hytra
