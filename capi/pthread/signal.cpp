// capi/pthread/signal.cpp — libloom-pthread's sigaction, signal, bsd_signal,
// sysv_signal (__sysv_signal, which strict-C builds call for signal),
// sigset, sigignore and siginterrupt, by glibc's names: each forwards to glibc's own
// sigaction (looked up in libc.so.6, base/sys.hpp), but installs a handler
// the program gives (not SIG_DFL or SIG_IGN) as a trampoline that marks the
// kernel thread as inside a handler while the program's handler runs
// (sched/in_handler.hpp). The library's I/O calls and sleeps (io.cpp) and
// sched_yield then behave in a handler as glibc's: they block the kernel
// thread, never switch fibres under the interrupted code.
//
// What the program sees is what glibc would show it:
//  - the handler is kept per signal (a seqlock'd pair: the function, and
//    whether it takes siginfo); the kernel holds the trampoline, with the
//    program's mask and flags and SA_SIGINFO added;
//  - oldact (and what signal/sigset return) is the program's handler and
//    flags, never the trampoline;
//  - SA_RESETHAND (sysv_signal's SA_ONESHOT) is the kernel's: it resets the
//    disposition to SIG_DFL at delivery, and the handler then runs once;
//  - SIG_DFL and SIG_IGN go to the kernel as they are (the table keeps the
//    last handler for a signal already on its way to the trampoline).
// The runtime's own handlers (the stall detector's, LOOM_STATS_SIGNAL's,
// the guard-page SIGSEGV handler) are installed through these too when the
// library is in the process, and run marked: none of them makes a call the
// mark changes.
//
// The same signal changed from two threads at once: one lock, taken with
// every signal blocked on the caller's kernel thread (a handler that calls
// sigaction, as old code re-arming with signal() does, cannot deadlock on
// it), so table and kernel change together.
//
// The first handler the program installs for an asynchronous signal turns
// on sigthread.cpp's interrupts (a handler due on a fibre parked in a wait
// cuts the wait short); the runtime's own handlers do not.
#include <dlfcn.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "base/sys.hpp"
#include "capi.hpp"
#include "sched/in_handler.hpp"
#include "sched/processor.hpp"
#include "signals.hpp"

extern "C" __sighandler_t __sysv_signal(int sig, __sighandler_t handler) noexcept;

namespace loom::capi::pthread_signal {

namespace {

using Sigaction = int (*)(int, const struct sigaction*, struct sigaction*);

Sigaction system_sigaction() noexcept {
  static std::atomic<Sigaction> f{nullptr};
  Sigaction p = f.load(std::memory_order_acquire);
  if (!p) {
    rt::sys::find_symbol(p, "libc.so.6", "sigaction");
    f.store(p, std::memory_order_release);
  }
  return p;
}
// Looked up before main: the first sigaction may come from a handler.
__attribute__((constructor)) void look_up_early() { system_sigaction(); }

// The program's handler of one signal. Written under the lock, read by the
// trampoline (any thread, any time): a sequence count, odd while writing.
struct Slot {
  std::atomic<unsigned> seq{0};
  std::atomic<void*> fn{nullptr};
  std::atomic<bool> info{false};  // SA_SIGINFO: fn takes (sig, info, context)
  bool wrapped = false;           // the last install gave the kernel the trampoline (under the lock)

  struct Value {
    void* fn;
    bool info;
  };
  Value read() const noexcept {
    for (;;) {
      unsigned s = seq.load(std::memory_order_acquire);
      Value v{fn.load(std::memory_order_relaxed), info.load(std::memory_order_relaxed)};
      std::atomic_thread_fence(std::memory_order_acquire);
      if (!(s & 1) && seq.load(std::memory_order_relaxed) == s) return v;
    }
  }
  void write(Value v) noexcept {  // under the lock
    unsigned s = seq.load(std::memory_order_relaxed);
    seq.store(s + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    fn.store(v.fn, std::memory_order_relaxed);
    info.store(v.info, std::memory_order_relaxed);
    seq.store(s + 2, std::memory_order_release);
  }
};
Slot slots[_NSIG];

std::atomic<bool> guarded[_NSIG];  // guard(sig) was called: SIG_DFL is kept as the trampoline

void trampoline(int sig, siginfo_t* si, void* context) {
  Slot::Value h = slots[sig].read();
  {
    int e = errno;
    bool elsewhere = si && is_hurry(*si) ? !hurried(sig, si, context) : route(sig, si, h.fn == nullptr);
    errno = e;
    if (elsewhere) return;
  }
  if (!h.fn) {  // guarded SIG_DFL
    default_action(sig);
    return;
  }
  rt::HandlerMark saved = rt::tls_handler_mark;
  unsigned long before = 0;  // the kernel's word of the mask the kernel saved for this handler's return
  std::memcpy(&before, &static_cast<ucontext_t*>(context)->uc_sigmask, sizeof before);
  rt::tls_handler_mark = {static_cast<const char*>(__builtin_frame_address(0)), rt::this_fibre_or_null(),
                          saved.frame ? saved.outer_mask : before};
  if (h.info)
    reinterpret_cast<void (*)(int, siginfo_t*, void*)>(h.fn)(sig, si, context);
  else if (h.fn)
    reinterpret_cast<void (*)(int)>(h.fn)(sig);
  rt::tls_handler_mark = saved;
}

bool is_trampoline(const struct sigaction& a) { return (a.sa_flags & SA_SIGINFO) && a.sa_sigaction == &trampoline; }

// Every signal blocked on this kernel thread (raw: glibc's sigprocmask
// would leave its own two open), then the lock.
std::atomic_flag lock = ATOMIC_FLAG_INIT;
class Locked {
 public:
  Locked() noexcept {
    sigset_t all;
    sigfillset(&all);
    ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &saved_, _NSIG / 8);
    while (lock.test_and_set(std::memory_order_acquire)) rt::sys::sched_yield();
  }
  ~Locked() {
    lock.clear(std::memory_order_release);
    ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &saved_, nullptr, _NSIG / 8);
  }

 private:
  sigset_t saved_;
};

// A handler of this library's own (the runtime's stall detector, its
// statistics signals), not the program's.
bool own(void* fn) {
  Dl_info a, b;
  return dladdr(fn, &a) && dladdr(reinterpret_cast<void*>(&trampoline), &b) && a.dli_fbase == b.dli_fbase;
}

bool catchable_async(int sig);

bool ignored_by_default(int sig) { return sig == SIGCHLD || sig == SIGURG || sig == SIGWINCH || sig == SIGCONT; }

// The flags the kernel gets for a guarded SIG_DFL: SA_NODEFER, so that the
// trampoline's tgkill of the default action is delivered at once.
constexpr int kGuardFlags = SA_SIGINFO | SA_RESTART | SA_NODEFER;

int install(int sig, const struct sigaction* act, struct sigaction* oldact) {
  if (sig <= 0 || sig >= _NSIG) return system_sigaction()(sig, act, oldact);  // its EINVAL
  int e = errno;
  Locked l;
  Slot& slot = slots[sig];
  Slot::Value prev = slot.read();
  struct sigaction k, old;
  const struct sigaction* a = act;
  bool wrap = act && act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN;
  bool guard = act && act->sa_handler == SIG_DFL && !(act->sa_flags & SA_SIGINFO) &&
               guarded[sig].load(std::memory_order_relaxed);
  if (wrap) {
    k = *act;
    k.sa_sigaction = &trampoline;
    k.sa_flags |= SA_SIGINFO;
    a = &k;
    slot.write({(act->sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(act->sa_sigaction)
                                             : reinterpret_cast<void*>(act->sa_handler),
                (act->sa_flags & SA_SIGINFO) != 0});
  } else if (guard) {
    k = *act;
    k.sa_sigaction = &trampoline;
    k.sa_flags = kGuardFlags;
    a = &k;
    slot.write({nullptr, false});
    wrap = true;
  }
  if (system_sigaction()(sig, a, &old) != 0) {
    e = errno;
    if (wrap) slot.write(prev);
    errno = e;
    return -1;
  }
  if (oldact) {
    *oldact = old;
    if (is_trampoline(old) && !prev.fn) {  // guarded: SIG_DFL, as the program left it
      std::memset(oldact, 0, sizeof *oldact);
      oldact->sa_handler = SIG_DFL;
    } else if (is_trampoline(old)) {  // the program's, as it gave it
      if (prev.info) {
        oldact->sa_sigaction = reinterpret_cast<void (*)(int, siginfo_t*, void*)>(prev.fn);
      } else {
        oldact->sa_handler = reinterpret_cast<__sighandler_t>(prev.fn);
        oldact->sa_flags &= ~SA_SIGINFO;
      }
    } else if (slot.wrapped && !prev.info && old.sa_handler == SIG_DFL && (old.sa_flags & SA_RESETHAND)) {
      oldact->sa_flags &= ~SA_SIGINFO;  // reset at delivery: the kernel kept the trampoline's flags
    }
  }
  if (act) slot.wrapped = wrap;
  if (act && (act->sa_handler == SIG_IGN || (act->sa_handler == SIG_DFL && ignored_by_default(sig))))
    discard_pending(sig);  // POSIX: "any pending signal shall be discarded" (under the lock: no install meanwhile)
  errno = e;
  if (wrap && catchable_async(sig) && slot.read().fn && !own(slot.read().fn)) enable_interrupts();
  return 0;
}

bool catchable_async(int sig) {
  switch (sig) {
    case SIGKILL:
    case SIGSTOP:
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL:
    case SIGTRAP:
    case SIGSYS:
      return false;
    default:
      return sig > 0 && sig < _NSIG && (sig < 32 || sig >= SIGRTMIN);  // 32, 33: glibc's own
  }
}

}  // namespace

void guard(int sig) noexcept {
  if (!catchable_async(sig) || guarded[sig].load(std::memory_order_relaxed)) return;
  struct sigaction cur;
  if (install(sig, nullptr, &cur) != 0) return;
  guarded[sig].store(true, std::memory_order_relaxed);
  if (cur.sa_handler == SIG_DFL && !(cur.sa_flags & SA_SIGINFO)) install(sig, &cur, nullptr);  // now guarded
}

void default_action(int sig) noexcept {
  int e = errno;
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  {
    Locked l;  // no install meanwhile; every signal blocked here
    system_sigaction()(sig, &dfl, nullptr);
  }
  ::syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, &one, nullptr, _NSIG / 8);
  ::syscall(SYS_tgkill, ::getpid(), ::syscall(SYS_gettid), sig);  // terminate, core: not back
  // A stop signal, after SIGCONT (or one whose default is to ignore): the
  // guard again, unless the program changed the disposition meanwhile.
  Locked l;
  if (!slots[sig].read().fn) {
    struct sigaction k;
    std::memset(&k, 0, sizeof k);
    k.sa_sigaction = &trampoline;
    k.sa_flags = kGuardFlags;
    system_sigaction()(sig, &k, nullptr);
  }
  errno = e;
}

bool restarts(int sig) noexcept {
  struct sigaction a;
  return sig > 0 && sig < _NSIG && install(sig, nullptr, &a) == 0 && (a.sa_flags & SA_RESTART);
}

bool resets(int sig) noexcept {
  struct sigaction a;
  return sig > 0 && sig < _NSIG && install(sig, nullptr, &a) == 0 && (a.sa_flags & SA_RESETHAND);
}

Action action_of(int sig) noexcept {
  struct sigaction a;
  if (sig <= 0 || sig >= _NSIG || install(sig, nullptr, &a) != 0) return Action::ignore;
  if (a.sa_flags & SA_SIGINFO) return Action::handler;
  if (a.sa_handler == SIG_IGN) return Action::ignore;
  if (a.sa_handler != SIG_DFL) return Action::handler;
  if (ignored_by_default(sig)) return Action::ignore;
  switch (sig) {
    case SIGSTOP:
    case SIGTSTP:
    case SIGTTIN:
    case SIGTTOU:
      return Action::stop;
    default:
      return Action::terminate;
  }
}

namespace {

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
  if (install(sig, &a, &old) < 0) return SIG_ERR;
  return old.sa_handler;
}

}  // namespace

}  // namespace loom::capi::pthread_signal

using namespace loom::capi::pthread_signal;

extern "C" {

int sigaction(int sig, const struct sigaction* __restrict act, struct sigaction* __restrict oldact) noexcept {
  return install(sig, act, oldact);
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
  if (install(sig, nullptr, &a) < 0) return -1;
  interrupts[sig].store(interrupt != 0, std::memory_order_relaxed);
  if (interrupt)
    a.sa_flags &= ~SA_RESTART;
  else
    a.sa_flags |= SA_RESTART;
  return install(sig, &a, nullptr);
}

// System V's: sig ignored, through sigaction above (glibc's calls its own).
int sigignore(int sig) noexcept {
  struct sigaction a;
  std::memset(&a, 0, sizeof a);
  a.sa_handler = SIG_IGN;
  sigemptyset(&a.sa_mask);
  return install(sig, &a, nullptr);
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
    if (install(sig, nullptr, &a) < 0) return SIG_ERR;
    return a.sa_handler;
  }
  struct sigaction a, prev;
  std::memset(&a, 0, sizeof a);
  a.sa_handler = disp;
  sigemptyset(&a.sa_mask);
  if (install(sig, &a, &prev) < 0) return SIG_ERR;
  if (sigprocmask(SIG_UNBLOCK, &one, &old) < 0) return SIG_ERR;
  return sigismember(&old, sig) ? SIG_HOLD : prev.sa_handler;
}

}  // extern "C"
