// Activation recompute as one unit (docs/spec/recompute.md, docs/ARCHITECTURE.md "The layer contract"):
//   { DropScope keep(ctx, active); ...forward... }  records every saved-state slot the forward uses and
//                                                    drops them when the scope ends (when active);
//   { RerunScope rerun(ctx); ...forward again... }  rebuilds them in backward, with ctx.recomputing
//                                                    set so layers skip their once-per-micro-batch
//                                                    bookkeeping (e.g. MoE token counts).
// The caller keeps the block's input (what the rerun starts from) outside the scope.
#pragma once
#include "nn/context.h"

namespace hytra {

class DropScope {
 public:
  DropScope(StepContext& ctx, bool active) : ctx_(ctx), active_(active) {
    if (active_) ctx_.begin_record();
  }
  ~DropScope() {
    if (active_) ctx_.drop(ctx_.end_record());
  }
  DropScope(const DropScope&) = delete;
  DropScope& operator=(const DropScope&) = delete;

 private:
  StepContext& ctx_;
  bool active_;
};

class RerunScope {
 public:
  explicit RerunScope(StepContext& ctx) : ctx_(ctx), was_(ctx.recomputing) { ctx_.recomputing = true; }
  ~RerunScope() { ctx_.recomputing = was_; }
  RerunScope(const RerunScope&) = delete;
  RerunScope& operator=(const RerunScope&) = delete;

 private:
  StepContext& ctx_;
  bool was_;
};

}  // namespace hytra
