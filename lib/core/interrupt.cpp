#include "core/interrupt.h"

#include <csignal>

namespace ib {

namespace {
volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_sigint(int) {
  g_interrupted = 1;
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}
}  // namespace

void install_interrupt_handler() {
  std::signal(SIGINT, on_sigint);
  std::signal(SIGTERM, on_sigint);
}

bool interrupted() { return g_interrupted != 0; }

void request_interrupt() { g_interrupted = 1; }

void reset_interrupt() { g_interrupted = 0; }

}  // namespace ib
