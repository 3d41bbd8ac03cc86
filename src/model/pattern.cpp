#include "model/pattern.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "model/layer_kinds.h"

namespace hytra {
namespace {

// Layer symbols in Megatron's "name-sorted" order (ATTENTION, DS_ATTENTION, GDN, MAMBA, MLA, MLP, MOE):
// the order of model/layer_kinds.cpp's rows.
std::string layer_symbols() {
  std::string s;
  for (const LayerKind& k : layer_kinds()) s += k.symbol;
  return s;
}

bool is_layer_symbol(char c) { return layer_symbols().find(c) != std::string::npos; }

std::string valid_symbols_text(bool allow_pipe) {
  std::string s = "{";
  for (char c : layer_symbols()) s += str("'", c, "', ");
  s += "'[', ']'";
  if (allow_pipe) s += ", '|'";
  return s + "}";
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts(1);
  for (char c : s) {
    if (c == sep)
      parts.emplace_back();
    else
      parts.back() += c;
  }
  return parts;
}

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// Attention cannot be mixed with MLA/DSA in one pattern (docs/spec/pattern.md §3).
void check_attention_mix(const std::string& flat) {
  HYTRA_CHECK(!(has(flat, '*') && (has(flat, 'D') || has(flat, '+'))),
              "Not supported to have both Attention and MLA/DSA in one model");
}

std::string join(const std::vector<std::string>& items) {
  std::string flat;
  for (const auto& i : items) flat += i;
  return flat;
}

// _validate_pattern: pipes (when disallowed), every segment, then the attention mix rule.
void validate_pattern(const std::string& pattern, const std::string& name, bool allow_pipe) {
  HYTRA_CHECK(allow_pipe || !has(pattern, '|'), "In ", name, " pattern, '|' is not a valid layer symbol. ",
              "Valid symbols are: ", valid_symbols_text(false));
  std::string flat;
  for (const auto& seg : split(pattern, '|')) flat += join(parse_segment(seg, name));
  check_attention_mix(flat);
}

// Python's round(): ties to even (2.5 -> 2).
int64_t round_half_even(double x) { return int64_t(std::nearbyint(x)); }

// Items covering physical layers [offset, offset + count); a group cut by either end is an error.
std::vector<LayerItem> slice_physical(const std::vector<LayerItem>& items, int64_t offset, int64_t count) {
  std::vector<LayerItem> out;
  int64_t cursor = 0;
  const int64_t end = offset + count;
  for (const auto& item : items) {
    const int64_t item_end = cursor + int64_t(item.symbols.size());
    if (item_end > offset && cursor < end) {
      HYTRA_CHECK(cursor >= offset && item_end <= end,
                  "Pipeline splitting would split a bracketed hybrid layer group. Add pipe ('|') separators "
                  "around bracketed groups to define valid boundaries.");
      out.push_back(item);
    }
    cursor = item_end;
  }
  return out;
}

PipelineStage select_stage(const LayerPlan& plan, const PlanOptions& opt) {
  const int64_t pp = *opt.pipeline_size, segments = plan.num_segments;
  const int64_t rank = opt.pipeline_rank.value_or(0);
  HYTRA_CHECK(pp >= 1, "--pipeline-model-parallel-size: expected a positive integer, got ", pp);
  HYTRA_CHECK(rank >= 0 && rank < pp, "--pipeline-rank: expected 0..", pp - 1, ", got ", rank);
  HYTRA_CHECK(!opt.virtual_stage || *opt.virtual_stage >= 0, "--virtual-stage: expected >= 0, got ",
              *opt.virtual_stage);
  const bool first_or_last = opt.first_stage_layers.has_value() || opt.last_stage_layers.has_value();
  HYTRA_CHECK(!(segments > 1 && first_or_last),
              "Cannot specify num_layers_in_first_pipeline_stage or num_layers_in_last_pipeline_stage when "
              "hybrid_layer_pattern contains pipe ('|') separators. The pipeline layout is already explicitly "
              "defined by the pipe separators.");
  PipelineStage st;
  if (segments == 1 && pp > 1) {  // deprecated auto split of a pipe-less pattern
    HYTRA_CHECK(!opt.virtual_stage,
                "Virtual pipeline parallelism (vp_stage != None) is not supported when hybrid_layer_pattern has "
                "no pipe ('|') separators. Add '|' separators to define explicit pipeline/virtual-pipeline stage "
                "boundaries.");
    const int64_t n = plan.num_layers;
    int64_t offset = 0, count = 0;
    if (first_or_last) {
      const int64_t first = opt.first_stage_layers.value_or(0), last = opt.last_stage_layers.value_or(0);
      HYTRA_CHECK(!opt.first_stage_layers || (first >= 1 && first <= n),
                  "--decoder-first-pipeline-num-layers: expected 1..", n, " (the pattern's layers), got ", first);
      HYTRA_CHECK(!opt.last_stage_layers || (last >= 1 && last <= n),
                  "--decoder-last-pipeline-num-layers: expected 1..", n, " (the pattern's layers), got ", last);
      const int64_t middle_layers = n - first - last;
      const int64_t middle_stages =
          pp - int64_t(opt.first_stage_layers.has_value()) - int64_t(opt.last_stage_layers.has_value());
      HYTRA_CHECK(middle_layers >= 0 && (middle_stages > 0 || middle_layers == 0),
                  "--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers: ", first, " + ", last,
                  " layers leave ", middle_layers, " of the pattern's ", n, " for ", middle_stages, " other stages");
      int64_t per_middle = 0;
      if (middle_stages > 0) {
        HYTRA_CHECK(middle_layers % middle_stages == 0, "Middle layers (", middle_layers,
                    ") must be evenly divisible by middle pipeline stages (", middle_stages, ").");
        per_middle = middle_layers / middle_stages;
      }
      if (opt.first_stage_layers && rank == 0) {
        count = first;
      } else if (opt.last_stage_layers && rank == pp - 1) {
        offset = n - last;
        count = last;
      } else {
        const int64_t middle_rank = opt.first_stage_layers ? rank - 1 : rank;
        offset = middle_rank * per_middle + first;
        count = per_middle;
      }
    } else {
      HYTRA_CHECK(n % pp == 0, "Number of layers (", n, ") must be evenly divisible by pipeline-model-parallel-size (",
                  pp, ") when no pipe separators are specified in the pattern.");
      offset = rank * (n / pp);
      count = n / pp;
    }
    st.items = slice_physical(plan.items, offset, count);
    st.physical_offset = offset;
    st.first = rank == 0;
    st.last = rank == pp - 1;
    // Logical offset: the items before the slice (checking that its start does not cut a group).
    slice_physical(plan.items, 0, offset);
    for (const auto& item : plan.items)
      if (item.physical.back() <= offset) st.logical_offset++;
    return st;
  }
  HYTRA_CHECK(segments == 1 || segments % pp == 0, "The number of pipe-delimited segments (", segments,
              ") in hybrid_layer_pattern must be evenly divisible by pipeline_model_parallel_size (", pp, ").");
  const int64_t vp = opt.virtual_stage.value_or(0);
  const int64_t index = vp * pp + rank;
  HYTRA_CHECK(index < segments, "Pipeline segment index ", index, " (pp_rank=", rank, ", vp_stage=", vp,
              ") is out of range for ", segments, " segments. The pattern does not define enough pipe-delimited ",
              "segments for the current PP/VPP configuration.");
  st.first = index == 0;
  st.last = index == segments - 1;
  for (const auto& item : plan.items) {
    if (item.segment < index) {
      st.physical_offset += int64_t(item.symbols.size());
      st.logical_offset++;
    } else if (item.segment == index) {
      st.items.push_back(item);
    }
  }
  return st;
}

void warn(std::vector<std::string>* warnings, const std::string& msg) {
  if (warnings)
    warnings->push_back(msg);
  else
    log_warn(msg);
}

}  // namespace

std::vector<std::string> parse_segment(const std::string& segment, const std::string& name) {
  std::vector<std::string> items;
  for (size_t i = 0; i < segment.size(); ++i) {
    const char c = segment[i];
    if (c == '[') {
      const size_t end = segment.find(']', i + 1);
      HYTRA_CHECK(end != std::string::npos, "In ", name, " pattern, '[' starts a layer group without a matching ']'.");
      const std::string group = segment.substr(i + 1, end - i - 1);
      HYTRA_CHECK(!group.empty(), "In ", name, " pattern, layer groups cannot be empty.");
      HYTRA_CHECK(!has(group, '['), "In ", name, " pattern, nested layer groups are not supported.");
      for (char g : group)
        HYTRA_CHECK(is_layer_symbol(g), "In ", name, " pattern, '", g, "' is not a valid layer symbol. ",
                    "Valid symbols are: ", valid_symbols_text(name == "main"));
      HYTRA_CHECK(!has(group.substr(0, group.size() - 1), 'E'), "In ", name,
                  " pattern, MoE layer 'E' must be the last symbol inside a layer group.");
      // docs/spec/README.md decision 1: two sub-layers of one kind in a group would share checkpoint keys.
      for (size_t a = 0; a < group.size(); ++a)
        HYTRA_CHECK(group.find(group[a], a + 1) == std::string::npos, "In ", name, " pattern, layer group '[", group,
                    "]' holds two '", group[a],
                    "' sub-layers; hytra rejects this because both would be saved under "
                    "one logical layer's keys (decoder.layers.<i>.*) and collide.");
      items.push_back(group);
      i = end;
      continue;
    }
    HYTRA_CHECK(c != ']', "In ", name, " pattern, ']' closes a layer group that was not opened.");
    HYTRA_CHECK(is_layer_symbol(c), "In ", name, " pattern, '", c, "' is not a valid layer symbol. ",
                "Valid symbols are: ", valid_symbols_text(name == "main"));
    items.emplace_back(1, c);
  }
  check_attention_mix(join(items));
  return items;
}

ParsedPattern parse_hybrid_pattern(const std::optional<std::string>& pattern) {
  ParsedPattern r;
  if (!pattern) return r;
  const std::vector<std::string> parts = split(*pattern, '/');
  if (parts.size() == 1) {
    validate_pattern(parts[0], "main", true);
    r.main = parts[0];
    return r;
  }
  if (!parts[0].empty()) {
    validate_pattern(parts[0], "main", true);
    r.main = parts[0];
  }
  bool all_empty = true;
  for (size_t i = 1; i < parts.size(); ++i) all_empty &= parts[i].empty();
  if (all_empty) return r;
  const std::string& mtp = parts[1];
  for (size_t i = 2; i < parts.size(); ++i)
    HYTRA_CHECK(parts[i] == mtp, "All MTP patterns must be identical. Pattern 1 is '", mtp, "', but pattern ", i,
                " is '", parts[i], "'. Full pattern: '", *pattern, "'");
  validate_pattern(mtp, "MTP", false);
  HYTRA_CHECK(!has(mtp, '[') && !has(mtp, ']'),
              "In MTP pattern, layer groups '[...]' are not supported because each MTP depth is already a fused "
              "unit. Got MTP pattern: '",
              mtp, "'.");
  r.mtp = mtp;
  r.mtp_depths = int64_t(parts.size()) - 1;
  return r;
}

std::string pattern_from_ratios(int64_t num_layers, double attention_ratio, double mlp_ratio) {
  HYTRA_CHECK(num_layers > 0 && num_layers <= kMaxLayers, "--num-layers: required (1..", kMaxLayers,
              ") with --hybrid-attention-ratio/--hybrid-mlp-ratio, got ", num_layers);
  HYTRA_CHECK(attention_ratio >= 0 && attention_ratio <= 1,
              "--hybrid-attention-ratio: expected a value in [0, 1], got ", attention_ratio);
  HYTRA_CHECK(mlp_ratio >= 0 && mlp_ratio <= 1, "--hybrid-mlp-ratio: expected a value in [0, 1], got ", mlp_ratio);
  HYTRA_CHECK(attention_ratio + mlp_ratio <= 1.0, "--hybrid-attention-ratio + --hybrid-mlp-ratio: expected <= 1, got ",
              attention_ratio + mlp_ratio);
  std::string layers(size_t(num_layers), 'M');
  // Attention layers evenly spaced, starting and ending with Mamba.
  const int64_t attention = round_half_even(double(num_layers) * attention_ratio);
  int64_t mamba = num_layers - attention;
  const double section = double(mamba) / double(attention + 1);
  double x = section;
  for (auto& c : layers) {
    if (x < 0.5) {
      c = '*';
      x += section;
    } else {
      x -= 1;
    }
  }
  // MLP layers spread over the remaining Mamba slots.
  const int64_t mlp = round_half_even(double(num_layers) * mlp_ratio);
  if (mlp > 0) {
    mamba -= mlp;
    const double ratio = double(mamba) / double(mlp);
    x = ratio;
    for (auto& c : layers) {
      if (c != 'M') continue;
      if (x < 0.5) {
        c = '-';
        x += ratio;
      } else {
        x -= 1;
      }
    }
  }
  return layers;
}

LayerPlan build_layer_plan(const PlanOptions& opt, std::vector<std::string>* warnings) {
  std::optional<std::string> pattern = opt.pattern;
  // Any non-zero ratio (NaN and negatives too) asks for generation, which checks their range; so do ratios given as 0
  // without a pattern (Megatron's allocator: every layer Mamba).
  const bool nonzero = opt.hybrid_attention_ratio != 0 || opt.hybrid_mlp_ratio != 0;
  const bool ratios = nonzero || (opt.ratios_given && !pattern);
  if (ratios) {
    HYTRA_CHECK(!pattern,
                "--hybrid-attention-ratio / --hybrid-mlp-ratio: cannot be combined with "
                "--hybrid-layer-pattern (the ratios are deprecated: give the pattern alone)");
    pattern = pattern_from_ratios(opt.num_layers.value_or(0), opt.hybrid_attention_ratio, opt.hybrid_mlp_ratio);
  }
  HYTRA_CHECK(pattern.has_value(),
              "--hybrid-layer-pattern: required (or --hybrid-attention-ratio/--hybrid-mlp-ratio with --num-layers)");
  const ParsedPattern parsed = parse_hybrid_pattern(pattern);

  LayerPlan plan;
  plan.main = parsed.main;
  plan.mtp = parsed.mtp;
  plan.mtp_depths = parsed.mtp_depths;
  const std::vector<std::string> segments = split(parsed.main.value_or(""), '|');
  plan.num_segments = int64_t(segments.size());
  int64_t physical = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    for (const std::string& symbols : parse_segment(segments[s], "main")) {
      LayerItem item;
      item.symbols = symbols;
      for (size_t j = 0; j < symbols.size(); ++j) item.physical.push_back(++physical);
      item.logical = int64_t(plan.items.size());
      item.segment = int64_t(s);
      plan.items.push_back(item);
    }
  }
  plan.num_layers = physical;
  plan.num_logical_layers = int64_t(plan.items.size());
  HYTRA_CHECK(physical > 0, "--hybrid-layer-pattern: the main pattern '", pattern.value_or(""),
              "' has no layers (only '|' or '/' marks): expected at least one of M * - E G");
  if (parsed.mtp) {
    int64_t n = 0;
    for (const std::string& symbols : parse_segment(*parsed.mtp, "MTP")) {
      LayerItem item;
      item.symbols = symbols;
      item.physical.push_back(++n);
      item.logical = n - 1;
      plan.mtp_items.push_back(item);
    }
  }
  for (char c : layer_symbols()) {
    int64_t count = 0;
    for (const auto& item : plan.items) count += int64_t(std::count(item.symbols.begin(), item.symbols.end(), c));
    for (const auto& item : plan.mtp_items) count += plan.mtp_depths * (item.symbols[0] == c);
    plan.layer_counts.emplace_back(c, count);
  }
  if (!ratios && opt.num_layers && *opt.num_layers != plan.num_layers)
    warn(warnings, str("--num-layers (", *opt.num_layers, ") differs from the ", plan.num_layers,
                       " layers of --hybrid-layer-pattern; using the pattern's"));
  if (opt.mtp_num_layers && *opt.mtp_num_layers != plan.mtp_depths)
    warn(warnings, str("--mtp-num-layers (", *opt.mtp_num_layers, ") differs from the ", plan.mtp_depths,
                       " MTP parts of --hybrid-layer-pattern; using the pattern's"));
  if (opt.pipeline_size) plan.stage = select_stage(plan, opt);
  return plan;
}

}  // namespace hytra
