// sched/raise.cpp — raise() under the native API (sched/signals.hpp).
//
// glibc's raise sends the signal to the calling
// kernel thread, and a fibre runs on a processor that blocks the process's
// signals. So a raise from a fibre acts as the program's own thread would
// (the program's mask being main's thread's): a signal main's thread
// blocks is left pending for the process (a sigwait or signalfd takes it);
// else it is delivered on the calling thread before raise returns, opened
// there for the moment of the send. Without it LOOM_DUMP_SIGNAL raised by a
// fibre that had moved to processor 1 stayed pending there for good.
// What it does not do: pthread_kill(pthread_self()) and a timer aimed at a
// processor's thread (SIGEV_THREAD_ID) still reach only that thread.
//
// Alone in its file: from libloom.a it is linked only into a program that
// calls raise and defines none of its own (libloom-pthread's, linked in,
// wins; preloaded, it comes first).
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/sys.hpp"
#include "sched/processor.hpp"
#include "sched/signals.hpp"

namespace loom::rt {

namespace {

// Whether main's kernel thread (the process's first: tid == pid) blocks
// sig, from the kernel's record of its mask.
bool main_blocks(int sig) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/status", int(::getpid()));
  std::FILE* f = std::fopen(path, "re");
  if (!f) return false;
  char line[256];
  unsigned long long blocked = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "SigBlk:", 7) == 0) blocked = std::strtoull(line + 7, nullptr, 16);
  std::fclose(f);
  return sig >= 1 && sig <= 64 && (blocked >> (sig - 1)) & 1;
}

}  // namespace

}  // namespace loom::rt

extern "C" __attribute__((visibility("default"))) int raise(int sig) {
  using namespace loom::rt;
  static int (*const glibc_raise)(int) = [] {
    int (*f)(int) = nullptr;
    sys::find_symbol(f, "libc.so.6", "raise");
    return f;
  }();
  if (!signals_to_main() || !this_processor_at_entry() || ::gettid() == ::getpid()) return glibc_raise(sig);
  if (sig < 1 || sig >= NSIG) {
    errno = EINVAL;
    return -1;
  }
  if (main_blocks(sig)) return ::kill(::getpid(), sig);
  sigset_t one, old;
  sigemptyset(&one);
  sigaddset(&one, sig);
  (sys::pthread().sigmask)(SIG_UNBLOCK, &one, &old);
  int r = int(::syscall(SYS_tgkill, ::getpid(), ::gettid(), sig));  // delivered before the mask comes back
  (sys::pthread().sigmask)(SIG_SETMASK, &old, nullptr);
  return r;
}
