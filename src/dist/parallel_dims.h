// The parallel layout: how the world's ranks split into tensor (tp), context (cp), expert (ep), data (dp)
// and pipeline (pp) groups, numbered as Megatron-Core's parallel_state numbers them (docs/parallelism.md).
// Ranks are laid out in the order tp-cp-ep-dp-pp, tp varying fastest. Two layouts share the world: the
// dense one (tp, cp, dp, pp; ep = 1) for everything outside the experts, and the expert one (expert tp,
// ep, expert dp, pp; cp = 1) for the routed experts. Computed once from the sizes; no communication.
#pragma once
#include <string>
#include <vector>

namespace hytra::dist {

struct ParallelSizes {
  int tp = 1, pp = 1, cp = 1, ep = 1;
  int etp = 0;  // expert tensor parallel size; 0: the same as tp (Megatron's default)
};

// One layout over named dimensions in rank order (fastest first).
class RankLayout {
 public:
  RankLayout(std::vector<std::string> names, std::vector<int> sizes);
  int world() const { return world_; }
  // The groups of ranks that differ only along the dimensions in `dims` ("dp", "tp-pp", ...): each group
  // lists its ranks with the first named dimension (in layout order) fastest; the groups are ordered by
  // the remaining dimensions, fastest first (Megatron's generate_masked_orthogonal_rank_groups).
  std::vector<std::vector<int>> groups(const std::string& dims) const;
  // Which group of `groups(dims)` holds `rank`, and its place there.
  struct Membership {
    int group = 0, position = 0;
  };
  Membership membership(int rank, const std::string& dims) const;

 private:
  std::vector<bool> mask(const std::string& dims) const;
  std::vector<std::string> names_;
  std::vector<int> sizes_;
  int world_ = 1;
};

struct ParallelDims {
  int world = 1;
  ParallelSizes sizes;
  int dp = 1;   // world / (tp cp pp)
  int edp = 1;  // world / (etp ep pp)
  // Checks the sizes against the world (an error naming the flag and the sizes when they do not divide it).
  static ParallelDims make(int world, const ParallelSizes& sizes);
  RankLayout dense() const;   // tp-cp-ep-dp-pp with ep = 1
  RankLayout expert() const;  // tp-cp-ep-dp-pp with tp = etp, cp = 1, dp = edp
};

}  // namespace hytra::dist
