// The pattern language against the vectors of docs/spec/pattern.md §7, Megatron's messages and check order,
// docs/spec/README.md decision 1 (duplicate kinds in a group), numbering, pipeline stages and the ratios.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "cli/inspect_pattern.h"
#include "model/pattern.h"
#include "cli/plan_json.h"
#include "common/error_of.h"

namespace hytra {
namespace {

using test::error_of;

#define EXPECT_ERROR_HAS(expr, needle)                                  \
  do {                                                                  \
    std::string msg_ = error_of([&] { (void)(expr); });                 \
    EXPECT_NE(msg_.find(needle), std::string::npos) << "got: '" << msg_ << "'"; \
  } while (0)

LayerPlan plan_of(const std::string& p) {
  PlanOptions o;
  o.pattern = p;
  return build_layer_plan(o);
}

std::vector<std::string> symbols_of(const std::vector<LayerItem>& items) {
  std::vector<std::string> out;
  for (const auto& i : items) out.push_back(i.symbols);
  return out;
}

TEST(Pattern, ParseVectors) {
  auto p = parse_hybrid_pattern(std::string("M*M*"));  // 1
  EXPECT_EQ(p.main, "M*M*");
  EXPECT_FALSE(p.mtp);
  EXPECT_EQ(p.mtp_depths, 0);
  p = parse_hybrid_pattern(std::string("M*M*/MM/MM"));  // 2
  EXPECT_EQ(p.main, "M*M*");
  EXPECT_EQ(p.mtp, "MM");
  EXPECT_EQ(p.mtp_depths, 2);
  p = parse_hybrid_pattern(std::string("M-M-|M-M*-/MM/MM"));  // 4
  EXPECT_EQ(p.main, "M-M-|M-M*-");
  EXPECT_EQ(p.mtp_depths, 2);
  p = parse_hybrid_pattern(std::string("/MM/MM"));  // 6
  EXPECT_FALSE(p.main);
  EXPECT_EQ(p.mtp, "MM");
  p = parse_hybrid_pattern(std::string("M*M*/"));  // 7
  EXPECT_EQ(p.main, "M*M*");
  EXPECT_FALSE(p.mtp);
  EXPECT_EQ(p.mtp_depths, 0);
  p = parse_hybrid_pattern(std::string(""));  // no '/': main is "" (not None)
  EXPECT_EQ(p.main, "");
  EXPECT_FALSE(parse_hybrid_pattern(std::nullopt).main);
  p = parse_hybrid_pattern(std::string("[*-]"));  // 16 (PR grammar)
  EXPECT_EQ(p.main, "[*-]");
  p = parse_hybrid_pattern(std::string("MDMD/*M"));  // the mix rule is per pattern
  EXPECT_EQ(p.mtp, "*M");
}

TEST(Pattern, ErrorsAndCheckOrder) {
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("M*M*/MM/M*")),  // 9
                   "All MTP patterns must be identical. Pattern 1 is 'MM', but pattern 2 is 'M*'. Full pattern: "
                   "'M*M*/MM/M*'");
  // Identity is checked before symbols (docs/spec/gotchas.md §1 item 2), and a trailing '/' after an MTP part is an error.
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("M*M*/MM/Ma")), "must be identical");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("M*M*/MM/")), "must be identical");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("M*M*/M|M/M|M")),  // 12
                   "In MTP pattern, '|' is not a valid layer symbol");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("MDM*-")), "Not supported to have both Attention and MLA/DSA");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("M+M*-")), "Not supported to have both Attention and MLA/DSA");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("M[M*")), "'[' starts a layer group without a matching ']'");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("M[EM]")), "MoE layer 'E' must be the last symbol");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("[E-]")), "MoE layer 'E' must be the last symbol");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("[*-]/[*-]")),
                   "In MTP pattern, layer groups '[...]' are not supported");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("M[]")), "layer groups cannot be empty");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("[M[*]]")), "nested layer groups are not supported");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("M]")), "']' closes a layer group that was not opened");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("M*x")), "In main pattern, 'x' is not a valid layer symbol");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("M* ")), "' ' is not a valid layer symbol");
  EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string("m*")), "'m' is not a valid layer symbol");  // case-sensitive
  // Accepted groups.
  EXPECT_NO_THROW(parse_hybrid_pattern(std::string("[-E]")));
  EXPECT_NO_THROW(parse_hybrid_pattern(std::string("[*-E]")));
}

TEST(Pattern, DuplicateKindsInAGroupAreRejected) {
  for (const char* p : {"[--]", "[**]", "M[MM]", "[*-*]"})
    EXPECT_ERROR_HAS(parse_hybrid_pattern(std::string(p)), "holds two");
  EXPECT_NO_THROW(parse_hybrid_pattern(std::string("[M*-]")));
}

TEST(Pattern, NumberingAndCounts) {
  LayerPlan p = plan_of("M[M*]-");  // 17
  EXPECT_EQ(symbols_of(p.items), (std::vector<std::string>{"M", "M*", "-"}));
  EXPECT_EQ(p.items[0].physical, (std::vector<int64_t>{1}));
  EXPECT_EQ(p.items[1].physical, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(p.items[2].physical, (std::vector<int64_t>{4}));
  EXPECT_EQ(p.items[2].logical, 2);
  EXPECT_EQ(p.num_layers, 4);
  EXPECT_EQ(p.num_logical_layers, 3);
  // Total layer counts (27).
  EXPECT_EQ(plan_of("M-M-|M-M*-").num_layers, 9);
  EXPECT_EQ(plan_of("M-M-|M-M*-|M-M-|M-M*-").num_layers, 18);
  EXPECT_EQ(plan_of("||M").num_layers, 1);
  EXPECT_EQ(plan_of("||M").num_segments, 3);
  for (const char* empty : {"", "|", "||", "/", "|/", "//"})  // no layer to build: a named error
    EXPECT_ERROR_HAS(plan_of(empty), "has no layers");
  // Counts over all seven symbols, name-sorted; MTP counted once per depth.
  LayerPlan c = plan_of("M-M-|M-M*-/MM/MM");
  std::vector<std::pair<char, int64_t>> want = {{'*', 1}, {'D', 0}, {'G', 0}, {'M', 8}, {'+', 0}, {'-', 4}, {'E', 0}};
  EXPECT_EQ(c.layer_counts, want);
  EXPECT_EQ(c.items.back().segment, 1);
  EXPECT_EQ(symbols_of(c.mtp_items), (std::vector<std::string>{"M", "M"}));
}

PlanOptions pipeline(const std::string& pattern, int64_t pp, int64_t rank) {
  PlanOptions o;
  o.pattern = pattern;
  o.pipeline_size = pp;
  o.pipeline_rank = rank;
  return o;
}

TEST(Pattern, PipelineSegmentsWithLogicalOffsets) {
  PlanOptions o = pipeline("[*-][*-]|[*E][*E]", 1, 0);  // 36: vp stage 1
  o.virtual_stage = 1;
  LayerPlan p = build_layer_plan(o);
  EXPECT_EQ(symbols_of(p.stage->items), (std::vector<std::string>{"*E", "*E"}));
  EXPECT_EQ(p.stage->physical_offset, 4);
  EXPECT_EQ(p.stage->logical_offset, 2);
  EXPECT_EQ(p.stage->items[0].physical, (std::vector<int64_t>{5, 6}));
  // Pipes with pp 2: rank 1 takes segment 1.
  p = build_layer_plan(pipeline("M-M-|M-M*-", 2, 1));
  EXPECT_EQ(p.stage->physical_offset, 4);
  EXPECT_EQ(p.stage->items.size(), 5u);
  // Empty segments are legal.
  p = build_layer_plan(pipeline("|MM", 2, 0));
  EXPECT_TRUE(p.stage->items.empty());
  EXPECT_ERROR_HAS(build_layer_plan(pipeline("M|M|M", 2, 0)),
                   "The number of pipe-delimited segments (3) in hybrid_layer_pattern must be evenly divisible by "
                   "pipeline_model_parallel_size (2).");
  o = pipeline("M|M", 2, 1);
  o.virtual_stage = 1;
  EXPECT_ERROR_HAS(build_layer_plan(o), "Pipeline segment index 3 (pp_rank=1, vp_stage=1) is out of range for 2");
  o = pipeline("M|M", 2, 0);
  o.first_stage_layers = 1;
  EXPECT_ERROR_HAS(build_layer_plan(o), "Cannot specify num_layers_in_first_pipeline_stage");
  EXPECT_ERROR_HAS(build_layer_plan(pipeline("M|M", 2, 2)), "--pipeline-rank: expected 0..1, got 2");
}

TEST(Pattern, AutoSplitWithoutPipes) {
  LayerPlan p0 = build_layer_plan(pipeline("M*M-", 2, 0));  // 40
  LayerPlan p1 = build_layer_plan(pipeline("M*M-", 2, 1));
  EXPECT_EQ(symbols_of(p0.stage->items), (std::vector<std::string>{"M", "*"}));
  EXPECT_EQ(p0.stage->physical_offset, 0);
  EXPECT_EQ(symbols_of(p1.stage->items), (std::vector<std::string>{"M", "-"}));
  EXPECT_EQ(p1.stage->physical_offset, 2);
  EXPECT_EQ(p1.stage->logical_offset, 2);
  EXPECT_ERROR_HAS(build_layer_plan(pipeline("M*M", 2, 0)), "Number of layers (3) must be evenly divisible");
  PlanOptions v = pipeline("M*M-", 2, 0);
  v.virtual_stage = 0;
  EXPECT_ERROR_HAS(build_layer_plan(v), "Virtual pipeline parallelism (vp_stage != None) is not supported");
  // First/last stage counts: 10 layers, first 1, last 3, 2 middle stages of 3.
  PlanOptions f = pipeline("MMMMMMMMM*", 4, 2);
  f.first_stage_layers = 1;
  f.last_stage_layers = 3;
  LayerPlan pf = build_layer_plan(f);
  EXPECT_EQ(pf.stage->physical_offset, 4);  // 1 (first) + 3 (middle rank 0)
  EXPECT_EQ(pf.stage->items.size(), 3u);
  f.pipeline_rank = 3;
  EXPECT_EQ(build_layer_plan(f).stage->physical_offset, 7);
  f.last_stage_layers = 2;  // middle = 7, not divisible by 2
  EXPECT_ERROR_HAS(build_layer_plan(f), "Middle layers (7) must be evenly divisible by middle pipeline stages (2).");
  // Counts outside 1..layers, or leaving layers no stage takes, name their flag (they used to give
  // empty stages and offsets past the pattern).
  for (int64_t bad : {int64_t(0), int64_t(-1), int64_t(11), INT64_MAX}) {
    PlanOptions b = pipeline("MMMMMMMMM*", 2, 0);
    b.first_stage_layers = bad;
    EXPECT_ERROR_HAS(build_layer_plan(b), "--decoder-first-pipeline-num-layers: expected 1..10");
    b.first_stage_layers.reset();
    b.last_stage_layers = bad;
    EXPECT_ERROR_HAS(build_layer_plan(b), "--decoder-last-pipeline-num-layers: expected 1..10");
  }
  PlanOptions two = pipeline("MMMMMMMMM*", 2, 1);
  two.first_stage_layers = 6;
  two.last_stage_layers = 6;  // 12 of 10 layers
  EXPECT_ERROR_HAS(build_layer_plan(two), "leave -2 of the pattern's 10");
  two.last_stage_layers = 3;  // no middle stage takes the 1 left
  EXPECT_ERROR_HAS(build_layer_plan(two), "leave 1 of the pattern's 10 for 0 other stages");
  // A slice boundary inside a group.
  EXPECT_ERROR_HAS(build_layer_plan(pipeline("M[*-]M", 2, 0)),
                   "Pipeline splitting would split a bracketed hybrid layer group");
}

TEST(Pattern, FromRatiosRoundsHalfToEven) {
  // L=10, ra=0.25: round(2.5) = 2 attention; 8 Mamba in 3 sections of 8/3; x starts at 8/3 and
  // drops by 1 per Mamba layer, an attention layer lands where x < 0.5 (i = 3 and 6).
  EXPECT_EQ(pattern_from_ratios(10, 0.25, 0.0), "MMM*MM*MMM");
  // L=4, ra=0.5: 2 attention, 2 Mamba, sections 2/3: x=.667 M(-.333) * (.333) * (1.0) M.
  EXPECT_EQ(pattern_from_ratios(4, 0.5, 0.0), "M**M");
  // L=8, ra=0.25 -> 2 attention (sections 2.0): MM*MM*MM; rm=0.25 -> 2 MLP over 4 remaining
  // Mamba (r = 2): x=2 M(1) M(0) -> '-' (2) M(1) M(0) -> '-' ... on the Mamba slots.
  EXPECT_EQ(pattern_from_ratios(8, 0.25, 0.25), "MM*-M*M-");
  LayerPlan p = [] {
    PlanOptions o;
    o.num_layers = 10;
    o.hybrid_attention_ratio = 0.25;
    return build_layer_plan(o);
  }();
  EXPECT_EQ(p.main, "MMM*MM*MMM");
  PlanOptions both;
  both.pattern = "M*";
  both.hybrid_attention_ratio = 0.5;
  EXPECT_ERROR_HAS(build_layer_plan(both), "cannot be combined with --hybrid-layer-pattern");
  PlanOptions none;
  none.hybrid_mlp_ratio = 0.5;
  EXPECT_ERROR_HAS(build_layer_plan(none), "--num-layers: required");
  // Negative and NaN ratios are range errors, not "no pattern given"; a huge --num-layers is refused
  // before a pattern string of that length is built.
  for (double bad : {-0.5, std::nan("")}) {
    PlanOptions r;
    r.num_layers = 4;
    r.hybrid_attention_ratio = bad;
    EXPECT_ERROR_HAS(build_layer_plan(r), "--hybrid-attention-ratio: expected a value in [0, 1]");
  }
  EXPECT_ERROR_HAS(pattern_from_ratios(INT64_MAX, 0.5, 0.0), "--num-layers: required (1..65536)");
  // Both ratios given as 0 with --num-layers: Megatron's allocator makes every layer Mamba; with a pattern, zero
  // ratios ask for nothing.
  PlanOptions zero;
  zero.num_layers = 4;
  zero.ratios_given = true;
  EXPECT_EQ(build_layer_plan(zero).main, "MMMM");
  zero.pattern = "M*";
  EXPECT_EQ(build_layer_plan(zero).main, "M*");
}

TEST(Pattern, NumLayersAndMtpFlagsYieldToThePatternWithAWarning) {
  PlanOptions o;
  o.pattern = "M*M*/MM";
  o.num_layers = 6;
  o.mtp_num_layers = 3;
  std::vector<std::string> warnings;
  LayerPlan p = build_layer_plan(o, &warnings);
  EXPECT_EQ(p.num_layers, 4);
  EXPECT_EQ(p.mtp_depths, 1);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("--num-layers (6)"), std::string::npos);
  EXPECT_NE(warnings[1].find("--mtp-num-layers (3)"), std::string::npos);
}

TEST(Pattern, JsonOfASmallPlan) {
  PlanOptions o = pipeline("[*-]|M", 2, 1);
  const std::string want =
      "{\n"
      "  \"main\": \"[*-]|M\",\n"
      "  \"mtp\": null,\n"
      "  \"mtp_depths\": 0,\n"
      "  \"num_layers\": 3,\n"
      "  \"num_logical_layers\": 2,\n"
      "  \"num_segments\": 2,\n"
      "  \"layer_counts\": {\"*\": 1, \"D\": 0, \"G\": 0, \"M\": 1, \"+\": 0, \"-\": 1, \"E\": 0},\n"
      "  \"layers\": [\n"
      "    {\"symbols\": \"*-\", \"physical\": [1, 2], \"logical\": 0, \"segment\": 0},\n"
      "    {\"symbols\": \"M\", \"physical\": [3], \"logical\": 1, \"segment\": 1}\n"
      "  ],\n"
      "  \"stage\": {\n"
      "    \"layers\": [\n"
      "      {\"symbols\": \"M\", \"physical\": [3], \"logical\": 1, \"segment\": 1}\n"
      "    ],\n"
      "    \"physical_offset\": 2,\n"
      "    \"logical_offset\": 1\n"
      "  }\n"
      "}\n";
  EXPECT_EQ(plan_to_json(build_layer_plan(o)), want);
}

int run_cli(std::vector<std::string> args, std::string& out, std::string& err) {
  args.insert(args.begin(), "inspect-pattern");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream o, e;
  int rc = inspect_pattern_main(int(argv.size()), argv.data(), o, e);
  out = o.str();
  err = e.str();
  return rc;
}

TEST(Pattern, InspectPatternCli) {
  std::string out, err;
  EXPECT_EQ(run_cli({"M*M*/MM/MM"}, out, err), 0);
  EXPECT_NE(out.find("\"mtp_depths\": 2"), std::string::npos);
  EXPECT_EQ(out.find("\"stage\""), std::string::npos);
  EXPECT_EQ(run_cli({"--num-layers", "10", "--hybrid-attention-ratio", "0.25"}, out, err), 0);
  EXPECT_NE(out.find("\"main\": \"MMM*MM*MMM\""), std::string::npos);
  EXPECT_EQ(run_cli({"M*", "--pipeline-model-parallel-size", "2", "--pipeline-rank", "1"}, out, err), 0);
  EXPECT_NE(out.find("\"physical_offset\": 1"), std::string::npos);
  EXPECT_EQ(run_cli({"M*M*/MM/Ma"}, out, err), 1);
  EXPECT_TRUE(out.empty());
  EXPECT_NE(err.find("hytra inspect-pattern: error: All MTP patterns must be identical"), std::string::npos);
  EXPECT_EQ(run_cli({"M*", "--pipline-rank", "1"}, out, err), 1);
  EXPECT_NE(err.find("--pipline-rank: unknown flag"), std::string::npos);
  EXPECT_EQ(run_cli({"M*", "--num-layers", "two"}, out, err), 1);
  EXPECT_NE(err.find("--num-layers: expected an integer, got 'two'"), std::string::npos);
  EXPECT_EQ(run_cli({"M*", "--num-layers", "99999999999999999999"}, out, err), 1);  // was clamped to INT64_MAX
  EXPECT_NE(err.find("--num-layers: expected an integer, got '99999999999999999999'"), std::string::npos);
  EXPECT_EQ(run_cli({"M*", "--pipeline-rank", "0"}, out, err), 1);
  EXPECT_NE(err.find("need --pipeline-model-parallel-size"), std::string::npos);
}

// --num-micro-batches: the rank's schedule of a step, interleaved when the pipes give each rank several chunks.
TEST(Pattern, InspectPatternSchedule) {
  std::string out, err;
  ASSERT_EQ(run_cli({"M*|M*|M-|M-", "--pipeline-model-parallel-size", "2", "--pipeline-rank", "1",
                     "--num-micro-batches", "2"},
                    out, err),
            0)
      << err;
  EXPECT_NE(out.find("\"schedule\": {\"micro_batches\": 2, \"chunks\": 2, "
                     "\"order\": \"F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0\", \"bubble_fraction\": 0.2}"),
            std::string::npos)
      << out;
  ASSERT_EQ(run_cli({"M*M*", "--pipeline-model-parallel-size", "2", "--pipeline-rank", "0", "--num-micro-batches",
                     "3"},
                    out, err),
            0)
      << err;
  EXPECT_NE(out.find("\"order\": \"F0 F1 B0 F2 B1 B2\", \"bubble_fraction\": 0.25}"), std::string::npos) << out;
  EXPECT_EQ(run_cli({"M*M*", "--num-micro-batches", "3"}, out, err), 1);
  EXPECT_NE(err.find("--num-micro-batches: needs --pipeline-model-parallel-size"), std::string::npos);
}

}  // namespace
}  // namespace hytra
