#include "core/fiber.h"

#include <ucontext.h>

#include "core/error.h"

// AddressSanitizer must be told when the stack changes under it.
#if defined(__SANITIZE_ADDRESS__)
#define HYTRA_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HYTRA_FIBER_ASAN 1
#endif
#endif
#ifdef HYTRA_FIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace hytra {

struct Fiber::Context {
  ucontext_t fiber, owner;
  const void* owner_stack = nullptr;  // (ASan) the owner's stack while the fiber runs
  size_t owner_stack_size = 0;
  void* fake_stack = nullptr;
};

namespace {
thread_local Fiber* running = nullptr;  // the fiber this thread runs now
}  // namespace

Fiber::Fiber(std::function<void()> body, size_t stack_bytes)
    : body_(std::move(body)),
      stack_(new char[stack_bytes]),
      stack_bytes_(stack_bytes),
      ctx_(std::make_unique<Context>()) {
  HYTRA_CHECK(getcontext(&ctx_->fiber) == 0, "fiber: getcontext failed");
  ctx_->fiber.uc_stack.ss_sp = stack_.get();
  ctx_->fiber.uc_stack.ss_size = stack_bytes;
  ctx_->fiber.uc_link = nullptr;  // entry() never returns: it switches back itself
  makecontext(&ctx_->fiber, &Fiber::entry, 0);
}

Fiber::~Fiber() = default;

void Fiber::entry() {
  Fiber* self = running;
#ifdef HYTRA_FIBER_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &self->ctx_->owner_stack, &self->ctx_->owner_stack_size);
#endif
  try {
    self->body_();
  } catch (...) {
    self->error_ = std::current_exception();
  }
  self->done_ = true;
  Context& c = *self->ctx_;
#ifdef HYTRA_FIBER_ASAN
  __sanitizer_start_switch_fiber(nullptr, c.owner_stack, c.owner_stack_size);  // this stack is finished
#endif
  setcontext(&c.owner);
}

bool Fiber::resume() {
  HYTRA_ASSERT(!done_, "fiber: resumed after it ended");
  HYTRA_ASSERT(running == nullptr, "fiber: resumed from inside a fiber");
  running = this;
  Context& c = *ctx_;
#ifdef HYTRA_FIBER_ASAN
  __sanitizer_start_switch_fiber(&c.fake_stack, stack_.get(), stack_bytes_);
#endif
  HYTRA_CHECK(swapcontext(&c.owner, &c.fiber) == 0, "fiber: swapcontext failed");
#ifdef HYTRA_FIBER_ASAN
  __sanitizer_finish_switch_fiber(c.fake_stack, nullptr, nullptr);
#endif
  running = nullptr;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
  return !done_;
}

void Fiber::yield() {
  Fiber* self = running;
  HYTRA_ASSERT(self != nullptr, "fiber: yield outside a fiber");
  Context& c = *self->ctx_;
  void* fake = nullptr;
#ifdef HYTRA_FIBER_ASAN
  __sanitizer_start_switch_fiber(&fake, c.owner_stack, c.owner_stack_size);
#endif
  HYTRA_CHECK(swapcontext(&c.fiber, &c.owner) == 0, "fiber: swapcontext failed");
#ifdef HYTRA_FIBER_ASAN
  __sanitizer_finish_switch_fiber(fake, &c.owner_stack, &c.owner_stack_size);
#endif
  (void)fake;
}

bool Fiber::inside() { return running != nullptr; }

}  // namespace hytra
