// sched/signals.cpp — where the native API's signals go (signals.hpp).
//
// raise() is sched/raise.cpp's.
#include "sched/signals.hpp"

#include <dlfcn.h>

#include "base/options.hpp"
#include "base/sys.hpp"

namespace loom::rt {

bool signals_to_main() {
  static const bool on = [] {
    if (env_choice("LOOM_SIGNALS", {"main", "any"}, 0) != 0) return false;
    return ::dlsym(RTLD_DEFAULT, "pthread_create") == reinterpret_cast<void*>(sys::pthread().create);
  }();
  return on;
}

void block_process_signals(sigset_t& mask) {
  static const int stall = [] {
    int s = env_signal("LOOM_STALL_SIGNAL", "SIGRTMIN+6");
    return s ? s : SIGRTMIN + 6;
  }();
  for (int s = 1; s < NSIG; ++s) {
    if (s == SIGSEGV || s == SIGBUS || s == SIGFPE || s == SIGILL || s == SIGTRAP || s == SIGSYS || s == SIGPIPE ||
        s == SIGXFSZ || s == SIGKILL || s == SIGSTOP || s == stall)
      continue;
    sigaddset(&mask, s);
  }
}

}  // namespace loom::rt
