// capi/pthread/sigtable.cpp — the program's signal dispositions, as
// libloom-pthread keeps them (signal.cpp's sigaction, signal... set them;
// sigthread.cpp reads them), and the trampoline the kernel holds instead of
// the program's handlers. Each change goes to glibc's own sigaction (looked
// up in libc.so.6, base/sys.hpp), but a handler the program gives (not
// SIG_DFL or SIG_IGN) is installed as the trampoline, which first routes
// the signal (sigroute.cpp: it may be another thread's to take) and then
// runs the program's handler with the kernel thread marked as inside a
// handler (sched/in_handler.hpp). The library's I/O calls and sleeps
// (io.cpp) and sched_yield then behave in a handler as glibc's: they block
// the kernel thread, never switch fibres under the interrupted code.
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
//    last handler for a signal already on its way to the trampoline), but
//    for a signal a fibre blocked while its disposition was SIG_DFL: the
//    kernel keeps the trampoline for it (guard), which applies the default
//    action itself (default_action) when no thread blocks it.
// The runtime's own handlers (the stall detector's, LOOM_STATS_SIGNAL's,
// the guard-page SIGSEGV handler) are installed through these too when the
// library is in the process, and run marked: none of them makes a call the
// mark changes.
//
// The same signal changed from two threads at once: one lock, taken with
// every signal blocked on the caller's kernel thread (a handler that calls
// sigaction, as old code re-arming with signal() does, cannot deadlock on
// it), so table and kernel change together.
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

}  // namespace

namespace {

// Counts the trampoline's end for sig, whichever way it ends but a jump
// out of the handler (a sender waiting for it gives up after its bound).
struct DoneAtEnd {
  int sig;
  ~DoneAtEnd() { routing_done(sig); }
};

}  // namespace

void trampoline(int sig, siginfo_t* si, void* context) {
  DoneAtEnd done{sig};
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

namespace {

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

bool ignored_by_default(int sig) { return sig == SIGCHLD || sig == SIGURG || sig == SIGWINCH || sig == SIGCONT; }

// The flags the kernel gets for a guarded SIG_DFL. Not SA_NODEFER: the
// trampoline runs with the signal blocked, as a handler of the program's
// does, and default_action unblocks it itself for its tgkill. (With
// SA_NODEFER a storm of a blocked SIG_DFL realtime signal from another
// process nested the trampoline hundreds deep on a processor's stack:
// an outside review's program crashed in 14 of 20 runs.)
constexpr int kGuardFlags = SA_SIGINFO | SA_RESTART;

}  // namespace

int install(int sig, const struct sigaction* act, struct sigaction* oldact, bool* wrapped) {
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
  if (wrapped) *wrapped = wrap;
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

void* handler_of(int sig) noexcept { return slots[sig].read().fn; }

}  // namespace loom::capi::pthread_signal
