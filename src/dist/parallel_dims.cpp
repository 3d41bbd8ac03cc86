#include "dist/parallel_dims.h"

#include <algorithm>

#include "core/error.h"

namespace hytra::dist {

namespace {

std::vector<std::string> split_dims(const std::string& dims) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= dims.size()) {
    const size_t end = std::min(dims.find('-', start), dims.size());
    out.push_back(dims.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// index -> coordinates along `shape`, the first fastest.
std::vector<int> decompose(int index, const std::vector<int>& shape) {
  std::vector<int> c(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    c[i] = index % shape[i];
    index /= shape[i];
  }
  return c;
}

}  // namespace

RankLayout::RankLayout(std::vector<std::string> names, std::vector<int> sizes)
    : names_(std::move(names)), sizes_(std::move(sizes)) {
  HYTRA_ASSERT(names_.size() == sizes_.size(), "RankLayout: one size a dimension");
  for (int s : sizes_) {
    HYTRA_CHECK(s >= 1, "parallel layout: every size must be at least 1");
    world_ *= s;
  }
}

std::vector<bool> RankLayout::mask(const std::string& dims) const {
  std::vector<bool> m(names_.size(), false);
  for (const std::string& d : split_dims(dims)) {
    const auto it = std::find(names_.begin(), names_.end(), d);
    HYTRA_ASSERT(it != names_.end(), "RankLayout: no dimension ", d, " in ", dims);
    m[size_t(it - names_.begin())] = true;
  }
  return m;
}

std::vector<std::vector<int>> RankLayout::groups(const std::string& dims) const {
  const std::vector<bool> m = mask(dims);
  std::vector<int> in_shape, in_stride, out_shape, out_stride;
  int stride = 1;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    (m[i] ? in_shape : out_shape).push_back(sizes_[i]);
    (m[i] ? in_stride : out_stride).push_back(stride);
    stride *= sizes_[i];
  }
  int group_size = 1;
  for (int s : in_shape) group_size *= s;
  std::vector<std::vector<int>> out(size_t(world_ / group_size));
  for (int g = 0; g < int(out.size()); ++g) {
    const std::vector<int> gc = decompose(g, out_shape);
    int base = 0;
    for (size_t i = 0; i < gc.size(); ++i) base += gc[i] * out_stride[i];
    for (int r = 0; r < group_size; ++r) {
      const std::vector<int> rc = decompose(r, in_shape);
      int rank = base;
      for (size_t i = 0; i < rc.size(); ++i) rank += rc[i] * in_stride[i];
      out[size_t(g)].push_back(rank);
    }
  }
  return out;
}

RankLayout::Membership RankLayout::membership(int rank, const std::string& dims) const {
  const std::vector<std::vector<int>> all = groups(dims);
  for (size_t g = 0; g < all.size(); ++g) {
    const auto it = std::find(all[g].begin(), all[g].end(), rank);
    if (it != all[g].end()) return {int(g), int(it - all[g].begin())};
  }
  HYTRA_ASSERT(false, "RankLayout: rank ", rank, " is outside the world of ", world_);
  return {};
}

ParallelDims ParallelDims::make(int world, const ParallelSizes& s) {
  HYTRA_CHECK(world >= 1, "parallel layout: the world size must be at least 1 (got ", world, ")");
  auto positive = [](int v, const char* flag) { HYTRA_CHECK(v >= 1, flag, " must be at least 1 (got ", v, ")"); };
  positive(s.tp, "--tensor-model-parallel-size");
  positive(s.pp, "--pipeline-model-parallel-size");
  positive(s.cp, "--context-parallel-size");
  positive(s.ep, "--expert-model-parallel-size");
  HYTRA_CHECK(s.etp >= 0, "--expert-tensor-parallel-size must be at least 1 (got ", s.etp, ")");
  ParallelDims d;
  d.world = world;
  d.sizes = s;
  if (d.sizes.etp == 0) d.sizes.etp = s.tp;
  const int model = s.tp * s.cp * s.pp;
  HYTRA_CHECK(world % model == 0, "the world size ", world, " is not divisible by --tensor-model-parallel-size (", s.tp,
              ") x --context-parallel-size (", s.cp, ") x --pipeline-model-parallel-size (", s.pp, ") = ", model);
  d.dp = world / model;
  const int expert = d.sizes.etp * s.ep * s.pp;
  HYTRA_CHECK(world % expert == 0, "the world size ", world, " is not divisible by --expert-tensor-parallel-size (",
              d.sizes.etp, ") x --expert-model-parallel-size (", s.ep, ") x --pipeline-model-parallel-size (", s.pp,
              ") = ", expert);
  d.edp = world / expert;
  return d;
}

RankLayout ParallelDims::dense() const {
  return RankLayout({"tp", "cp", "ep", "dp", "pp"}, {sizes.tp, sizes.cp, 1, dp, sizes.pp});
}

RankLayout ParallelDims::expert() const {
  return RankLayout({"tp", "cp", "ep", "dp", "pp"}, {sizes.etp, 1, sizes.ep, edp, sizes.pp});
}

}  // namespace hytra::dist
