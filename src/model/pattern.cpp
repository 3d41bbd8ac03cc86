// TEMP (lead, uncommitted): groups and plain symbols only.
#include "model/pattern.h"
namespace hytra {
LayerPlan build_layer_plan(const PlanOptions& opt) {
  LayerPlan p;
  p.main = opt.pattern;
  const std::string& s = *opt.pattern;
  int64_t phys = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    LayerItem it;
    if (s[i] == '[') {
      size_t j = s.find(']', i);
      it.symbols = s.substr(i + 1, j - i - 1);
      i = j;
    } else {
      it.symbols = std::string(1, s[i]);
    }
    for (size_t k = 0; k < it.symbols.size(); ++k) it.physical.push_back(phys++);
    it.logical = int64_t(p.items.size());
    p.items.push_back(it);
  }
  p.num_layers = phys - 1;
  return p;
}
}
