// capi/pthread/signal.cpp — libloom-pthread's sigaction, signal, bsd_signal,
// sysv_signal (__sysv_signal, which strict-C builds call for signal),
// sigset, sigignore and siginterrupt, by glibc's names: each changes the
// program's disposition in sigtable.cpp's table, which forwards it to
// glibc's own sigaction but installs a handler the program gives as a
// trampoline (sigtable.cpp says what the program sees, as glibc would show
// it). signal() is glibc's __bsd_signal (SA_RESTART, unless siginterrupt
// asked otherwise), sysv_signal its __sysv_signal (SA_RESETHAND |
// SA_NODEFER); sigset and sigignore are System V's, as glibc's
// sysdeps/posix/sigset.c, on the calling fibre's mask (sigthread.cpp).
//
// The first handler the program installs for an asynchronous signal turns
// on sigthread.cpp's interrupts (a handler due on a fibre parked in a wait
// cuts the wait short); the runtime's own handlers do not.
#include <dlfcn.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "signals.hpp"

extern "C" __sighandler_t __sysv_signal(int sig, __sighandler_t handler) noexcept;

namespace loom::capi::pthread_signal {

namespace {

// A handler of this library's own (the runtime's stall detector, its
// statistics signals), not the program's.
bool own(void* fn) {
  Dl_info a, b;
  return dladdr(fn, &a) && dladdr(reinterpret_cast<void*>(&trampoline), &b) && a.dli_fbase == b.dli_fbase;
}

// install (sigtable.cpp), for the program's calls here: then the
// interrupts, for the first handler of the program's.
int install_for_program(int sig, const struct sigaction* act, struct sigaction* oldact) {
  bool wrap = false;
  int r = install(sig, act, oldact, &wrap);
  if (r != 0) return r;
  if (wrap && catchable_async(sig) && handler_of(sig) && !own(handler_of(sig))) enable_interrupts();
  return 0;
}

std::atomic<bool> interrupts[_NSIG];  // siginterrupt(sig, 1): signal() leaves out SA_RESTART

// signal() as glibc's __bsd_signal, sysv_signal as __sysv_signal.
__sighandler_t set_handler(int sig, __sighandler_t handler, bool sysv) {
  if (handler == SIG_ERR || sig <= 0 || sig >= _NSIG) {
    errno = EINVAL;
    return SIG_ERR;
  }
  struct sigaction a, old;
  std::memset(&a, 0, sizeof a);
  a.sa_handler = handler;
  sigemptyset(&a.sa_mask);
  if (sysv) {
    a.sa_flags = SA_RESETHAND | SA_NODEFER;
  } else {
    sigaddset(&a.sa_mask, sig);
    a.sa_flags = interrupts[sig].load(std::memory_order_relaxed) ? 0 : SA_RESTART;
  }
  if (install_for_program(sig, &a, &old) < 0) return SIG_ERR;
  return old.sa_handler;
}

}  // namespace

}  // namespace loom::capi::pthread_signal

using namespace loom::capi::pthread_signal;

extern "C" {

int sigaction(int sig, const struct sigaction* __restrict act, struct sigaction* __restrict oldact) noexcept {
  return install_for_program(sig, act, oldact);
}

__sighandler_t signal(int sig, __sighandler_t handler) noexcept { return set_handler(sig, handler, false); }
__sighandler_t bsd_signal(int sig, __sighandler_t handler) noexcept { return set_handler(sig, handler, false); }
__sighandler_t sysv_signal(int sig, __sighandler_t handler) noexcept { return set_handler(sig, handler, true); }
__sighandler_t __sysv_signal(int sig, __sighandler_t handler) noexcept { return set_handler(sig, handler, true); }

int siginterrupt(int sig, int interrupt) noexcept {
  if (sig <= 0 || sig >= _NSIG) {
    errno = EINVAL;
    return -1;
  }
  struct sigaction a;
  if (install_for_program(sig, nullptr, &a) < 0) return -1;
  interrupts[sig].store(interrupt != 0, std::memory_order_relaxed);
  if (interrupt)
    a.sa_flags &= ~SA_RESTART;
  else
    a.sa_flags |= SA_RESTART;
  return install_for_program(sig, &a, nullptr);
}

// System V's: sig ignored, through sigaction above (glibc's calls its own).
int sigignore(int sig) noexcept {
  struct sigaction a;
  std::memset(&a, 0, sizeof a);
  a.sa_handler = SIG_IGN;
  sigemptyset(&a.sa_mask);
  return install_for_program(sig, &a, nullptr);
}

// System V's: SIG_HOLD blocks the signal; anything else is installed with
// no flags and unblocks it. Returns SIG_HOLD if it was blocked, else the
// former disposition (glibc's sysdeps/posix/sigset.c).
__sighandler_t sigset(int sig, __sighandler_t disp) noexcept {
  sigset_t one, old;
  sigemptyset(&one);
  if (sigaddset(&one, sig) < 0) return SIG_ERR;
  if (disp == SIG_HOLD) {
    if (sigprocmask(SIG_BLOCK, &one, &old) < 0) return SIG_ERR;
    if (sigismember(&old, sig)) return SIG_HOLD;
    struct sigaction a;
    if (install_for_program(sig, nullptr, &a) < 0) return SIG_ERR;
    return a.sa_handler;
  }
  struct sigaction a, prev;
  std::memset(&a, 0, sizeof a);
  a.sa_handler = disp;
  sigemptyset(&a.sa_mask);
  if (install_for_program(sig, &a, &prev) < 0) return SIG_ERR;
  if (sigprocmask(SIG_UNBLOCK, &one, &old) < 0) return SIG_ERR;
  return sigismember(&old, sig) ? SIG_HOLD : prev.sa_handler;
}

}  // extern "C"
