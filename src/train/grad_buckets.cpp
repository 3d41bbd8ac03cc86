#include "train/grad_buckets.h"

#include <algorithm>

#include "core/error.h"

namespace hytra {

std::vector<GradBucket> plan_grad_buckets(ParamStore& params, int64_t bucket_elems) {
  const std::vector<Param*>& all = params.all();
  HYTRA_ASSERT(!all.empty() && !all[0]->follows_previous, "plan_grad_buckets: no parameters");
  std::vector<GradBucket> out;
  int64_t end = params.flat_grads().numel();  // the open bucket's end
  size_t end_param = all.size();
  for (size_t i = all.size(); i-- > 0;) {
    const Param& p = *all[i];
    if (i + 1 < end_param && all[i + 1]->expert_parallel != p.expert_parallel) {  // one kind a bucket
      out.push_back({{all[i + 1]->offset, end}, i + 1, end_param, all[i + 1]->expert_parallel});
      end = all[i + 1]->offset;
      end_param = i + 1;
    }
    const bool cut = i == 0 || (!p.follows_previous && bucket_elems > 0 && end - p.offset >= bucket_elems);
    if (!cut) continue;
    out.push_back({{p.offset, end}, i, end_param, p.expert_parallel});
    end = p.offset;
    end_param = i;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace hytra
