#include "train/exit_signal.h"

#include <csignal>

#include "core/error.h"

namespace hytra {

namespace {
volatile std::sig_atomic_t g_received = 0;
struct sigaction g_previous {};

extern "C" void note_signal(int) { g_received = 1; }
}  // namespace

ExitSignal::ExitSignal(bool install) {
  if (!install) return;
  g_received = 0;
  struct sigaction sa {};
  sa.sa_handler = note_signal;
  sigemptyset(&sa.sa_mask);
  HYTRA_CHECK(sigaction(SIGTERM, &sa, &g_previous) == 0, "--exit-signal-handler: cannot install a SIGTERM handler");
  installed_ = true;
}

ExitSignal::~ExitSignal() {
  if (installed_) sigaction(SIGTERM, &g_previous, nullptr);
}

bool ExitSignal::received() const { return installed_ && g_received != 0; }

}  // namespace hytra
