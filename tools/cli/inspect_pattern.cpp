#include "cli/inspect_pattern.h"

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/pattern.h"
#include "cli/plan_json.h"

namespace hytra {
namespace {

constexpr const char* kUsage =
    "usage: hytra inspect-pattern [PATTERN] [--num-layers N] [--mtp-num-layers D]\n"
    "         [--pipeline-model-parallel-size P --pipeline-rank R [--virtual-stage V]\n"
    "          [--decoder-first-pipeline-num-layers N] [--decoder-last-pipeline-num-layers N]]\n"
    "         [--hybrid-attention-ratio X] [--hybrid-mlp-ratio Y]\n"
    "         [--num-micro-batches M (with the pipeline flags: the rank's 1F1B schedule of a step)]\n";

int64_t to_int(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  HYTRA_CHECK(!v.empty() && *end == '\0' && errno != ERANGE, flag, ": expected an integer, got '", v, "'");
  return x;
}

double to_double(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  HYTRA_CHECK(!v.empty() && *end == '\0', flag, ": expected a number, got '", v, "'");
  return x;
}

PlanOptions parse_args(const std::vector<std::string>& args, std::optional<int64_t>& micro_batches) {
  PlanOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      HYTRA_CHECK(!o.pattern, "unexpected second PATTERN '", a, "' (quote the pattern: it may hold '|' and '*')");
      o.pattern = a;
      continue;
    }
    HYTRA_CHECK(i + 1 < args.size(), a, ": expected a value");
    const std::string& v = args[++i];
    if (a == "--num-layers") o.num_layers = to_int(a, v);
    else if (a == "--mtp-num-layers") o.mtp_num_layers = to_int(a, v);
    else if (a == "--pipeline-model-parallel-size") o.pipeline_size = to_int(a, v);
    else if (a == "--pipeline-rank") o.pipeline_rank = to_int(a, v);
    else if (a == "--virtual-stage") o.virtual_stage = to_int(a, v);
    else if (a == "--decoder-first-pipeline-num-layers") o.first_stage_layers = to_int(a, v);
    else if (a == "--decoder-last-pipeline-num-layers") o.last_stage_layers = to_int(a, v);
    else if (a == "--hybrid-attention-ratio")
      o.hybrid_attention_ratio = to_double(a, v), o.ratios_given = true;
    else if (a == "--hybrid-mlp-ratio")
      o.hybrid_mlp_ratio = to_double(a, v), o.ratios_given = true;
    else if (a == "--num-micro-batches") micro_batches = to_int(a, v);
    else fail(str(a, ": unknown flag"));
  }
  const bool stage_flags = o.pipeline_rank || o.virtual_stage || o.first_stage_layers || o.last_stage_layers;
  HYTRA_CHECK(o.pipeline_size || !stage_flags,
              "--pipeline-rank/--virtual-stage/--decoder-*-pipeline-num-layers: need --pipeline-model-parallel-size");
  HYTRA_CHECK(!o.pipeline_size || o.pipeline_rank, "--pipeline-rank: required with --pipeline-model-parallel-size");
  HYTRA_CHECK(!micro_batches || o.pipeline_size, "--num-micro-batches: needs --pipeline-model-parallel-size");
  return o;
}

}  // namespace

int inspect_pattern_main(int argc, char** argv, std::ostream& out, std::ostream& err) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      out << kUsage;
      return 0;
    }
  }
  try {
    std::vector<std::string> warnings;
    std::optional<int64_t> micro_batches;
    const PlanOptions opt = parse_args(args, micro_batches);
    LayerPlan plan = build_layer_plan(opt, &warnings);
    for (const auto& w : warnings) err << "hytra inspect-pattern: warning: " << w << "\n";
    std::optional<ScheduleRequest> schedule;
    if (micro_batches) {  // the pattern's pipes give each rank segments / P model chunks
      const int64_t P = *opt.pipeline_size;
      schedule = ScheduleRequest{P, *opt.pipeline_rank, *micro_batches,
                                 plan.num_segments > 1 ? plan.num_segments / P : 1};
    }
    out << plan_to_json(plan, schedule);
    return 0;
  } catch (const Error& e) {
    err << "hytra inspect-pattern: error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace hytra
