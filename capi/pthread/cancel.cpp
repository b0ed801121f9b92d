// capi/pthread/cancel.cpp — libloom-pthread's cancellation, by glibc's names:
// pthread_cancel, pthread_testcancel, pthread_setcancelstate,
// pthread_setcanceltype, and glibc's cleanup buffers (what C's
// pthread_cleanup_push and pthread_cleanup_push_defer_np compile to:
// __pthread_register_cancel, __pthread_unregister_cancel, their _defer and
// _restore forms, __pthread_unwind_next). docs/DESIGN.md, "Cancellation".
//
// What it reproduces of glibc's:
//  - deferred cancellation: pthread_cancel(t) marks t (runtime/sched/
//    cancel.hpp) and, if t waits at a cancellation point, wakes it; t acts
//    at its next cancellation point with cancellation enabled: the calls of
//    io.cpp (the read, write, recv, send, accept and connect families, poll,
//    select, epoll_wait, the sleeps), the condvar and semaphore waits
//    (sync.cpp), sigwait, sigwaitinfo, sigtimedwait, sigsuspend and pause
//    (sigthread.cpp, through sem_wait), pthread_join and its timed forms,
//    pthread_testcancel. A condvar wait acts with the mutex held again.
//  - acting is pthread_exit(PTHREAD_CANCELED) with cancellation disabled:
//    a forced unwind (capi/thread.cpp) that runs the cleanup buffers below
//    and C++ destructors and cleanup attributes in stack order, lets
//    `catch (...)` see it (it must rethrow: swallowing it aborts, glibc's
//    "exception not rethrown") and stops at the thread's start; then the
//    thread's key destructors run and a joiner gets PTHREAD_CANCELED.
//  - ESRCH only for a handle that names no thread (joined, or detached and
//    ended); a thread not yet started takes the request when it starts;
//    detached threads, ended-but-unjoined ones (0, nothing happens) and
//    main (its handlers run, then it ends as with pthread_exit: the process
//    lives on until the last thread) are cancelled as on glibc. Callers
//    that are not fibres (kernel threads; in a fork child every thread)
//    get glibc's functions, and io.cpp's calls on them are glibc's own
//    cancellation points.
//  - pthread_setcancelstate/type: EINVAL for bad values; enabling (or
//    choosing the asynchronous type) with a request pending and the
//    asynchronous type acts at once, as glibc.
// What it does not:
//  - asynchronous cancellation never interrupts user code: the type is kept
//    and acts as deferred (at cancellation points, when the state or type
//    changes, and in a pthread_mutex_lock's wait for one of loom's own
//    mutexes, not a robust, priority or process-shared one: sync.cpp). A thread in a
//    loop without cancellation points, or in a raw syscall(2), is not
//    cancelled.
//  - a request does not wake a thread blocked in a mutex (but with the
//    asynchronous type), rwlock or barrier (not cancellation points), in a process-shared
//    semaphore (it looks for the request between its polls), on io_uring's
//    read path, or in a call loom offloads (a regular file, a terminal): it
//    acts when that call returns and it reaches a cancellation point.
//  - glibc's cancellation points that loom does not intercept (stdio's
//    writes, open, fcntl with F_SETLKW, waitpid, system, msgrcv, lockf...)
//    check glibc's word in the fibre's own struct pthread, which loom keeps
//    told (capi.hpp, GlibcCancel; capi/thread.cpp): they act on entry, and
//    a fibre already blocked in the kernel there is interrupted as glibc
//    interrupts a thread — SIGCANCEL, sent here to the kernel thread running
//    the fibre ("a glibc cancellation point blocked in the kernel", below).
//    Callers that are not fibres of loom_create (kernel threads, a fork
//    child's threads, which are glibc's) get glibc's calls.
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "base/sys.hpp"
#include "capi.hpp"
#include "loom/loom.h"
#include "sched/cluster.hpp"
#include "sched/in_handler.hpp"
#include "sched/processor.hpp"
#include "sched/tls.hpp"
#include "signals.hpp"

namespace loom::capi::pthread_cancel {
namespace {

// glibc's own functions, for callers that are not loom's (kernel threads
// that are not processors, a fork child's threads).
struct Glibc {
  void (*register_cancel)(__pthread_unwind_buf_t*);
  void (*unregister_cancel)(__pthread_unwind_buf_t*);
  void (*register_cancel_defer)(__pthread_unwind_buf_t*);
  void (*unregister_cancel_restore)(__pthread_unwind_buf_t*);
  void (*unwind_next)(__pthread_unwind_buf_t*);
  int (*cancel)(pthread_t);
  pthread_t (*self)();
  void (*testcancel)();
  int (*setcancelstate)(int, int*);
  int (*setcanceltype)(int, int*);
  int (*libc_sigaction)(int, const struct sigaction*, struct sigaction*);
};

// Looked up in libc.so.6 itself (base/sys.cpp's rule: not RTLD_NEXT).
const Glibc& glibc() {
  static const Glibc g = [] {
    Glibc r{};
    rt::sys::find_symbol(r.register_cancel, "libc.so.6", "__pthread_register_cancel");
    rt::sys::find_symbol(r.unregister_cancel, "libc.so.6", "__pthread_unregister_cancel");
    rt::sys::find_symbol(r.register_cancel_defer, "libc.so.6", "__pthread_register_cancel_defer");
    rt::sys::find_symbol(r.unregister_cancel_restore, "libc.so.6", "__pthread_unregister_cancel_restore");
    rt::sys::find_symbol(r.unwind_next, "libc.so.6", "__pthread_unwind_next");
    rt::sys::find_symbol(r.cancel, "libc.so.6", "pthread_cancel");
    rt::sys::find_symbol(r.self, "libc.so.6", "pthread_self");
    rt::sys::find_symbol(r.testcancel, "libc.so.6", "pthread_testcancel");
    rt::sys::find_symbol(r.setcancelstate, "libc.so.6", "pthread_setcancelstate");
    rt::sys::find_symbol(r.setcanceltype, "libc.so.6", "pthread_setcanceltype");
    rt::sys::find_symbol(r.libc_sigaction, "libc.so.6", "__libc_sigaction");
    return r;
  }();
  return g;
}

bool on_fibre() { return rt::this_fibre_or_null() != nullptr; }

// ---- glibc's cleanup buffers ---------------------------------------------------------------
//
// __pthread_unwind_buf_t: a jmp_buf (set by the push macro with
// __sigsetjmp(buf, 0): no signal mask saved) and four words glibc keeps for
// itself (its chain's link, its old-style cleanup chain, the saved cancel
// type: the first three); we use the fourth as the link to the next outer
// buffer and the third for pthread_cleanup_push_defer_np's saved cancel
// type. The chain is kept per fibre of loom_create (and main) in its record
// (capi.hpp, GlibcCleanup). When glibc's own cancellation checks see loom's
// requests (capi.hpp, GlibcCancel), each buffer is also on glibc's chain in
// the fibre's block (the first word its link), which glibc's unwinding
// follows: its outermost is start_with_landing's (capi/thread.cpp).
void*& link_of(__pthread_unwind_buf_t* b) { return b->__pad[3]; }

void glibc_reg(void* b) { glibc().register_cancel(static_cast<__pthread_unwind_buf_t*>(b)); }
void glibc_unreg(void* b) { glibc().unregister_cancel(static_cast<__pthread_unwind_buf_t*>(b)); }

// ---- a glibc cancellation point blocked in the kernel ----------------------------------
//
// glibc's own cancellation points (SYSCALL_CANCEL: wait, waitpid, an open
// that blocks, msgrcv, fcntl's F_SETLKW, lockf, tcdrain...) set the
// asynchronous-type bit in the running block's word for the length of the
// system call; glibc's pthread_cancel, finding it, sends SIGCANCEL to the
// thread's tid and glibc's handler unwinds from inside the call. A fibre's
// block is its own but its tid is its processor's kernel thread's:
// loom_cancel, finding the bit in the fibre's word, calls interrupt(),
// which signals the kernel thread running the fibre now (Cluster::
// runner_of), and on_sigcancel, installed at start-up in glibc's place
// (glibc installs its own only when its pthread_cancel runs, which in a
// process with processors it never does; a fork child's glibc installs its
// own at its first), does there what glibc's does. The fibre may have left
// the call between the look and the signal, and another be running there:
// the handler acts for whichever block is installed, and only on glibc's
// own condition — inside such a call, cancellation enabled, a request made,
// not already exiting — so a late signal acts for nobody (a call of the
// other fibre's that the kernel does not restart then sees EINTR: a window
// glibc does not have, where only the cancelled thread can see one).
constexpr int kSigCancel = 32;  // __SIGRTMIN

// glibc's own handler, once its pthread_cancel installed it (a request for
// one of glibc's threads: keep_on_sigcancel): what a thread that is not
// loom's gets.
void (*glibc_sigcancel)(int, siginfo_t*, void*) = nullptr;

void on_sigcancel(int sig, siginfo_t* si, void* uc) {
  if (!on_fibre() || !glibc_cleanup()) {  // not a thread of loom_create
    if (glibc_sigcancel) glibc_sigcancel(sig, si, uc);
    return;
  }
  if (si->si_code != SI_TKILL || si->si_pid != pid_t(::syscall(SYS_getpid))) return;
  int* w = rt::tls::cancelhandling(rt::tls::current());
  if (!w) return;
  int v = __atomic_load_n(w, __ATOMIC_RELAXED);
  do {
    using namespace rt::tls;
    if ((v & (kGlibcStateDisabled | kGlibcAsync | kGlibcCanceled | kGlibcExiting)) != (kGlibcAsync | kGlibcCanceled))
      return;
  } while (!__atomic_compare_exchange_n(w, &v, v | rt::tls::kGlibcCanceling | rt::tls::kGlibcExiting, true, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED));
  // The unwinding leaves this handler without a sigreturn: the kernel
  // thread's mask is put back as the signal found it (SIGCANCEL would stay
  // blocked for the fibres it runs next) — or, when the signal found the
  // fibre inside a program's handler, which the unwinding leaves too, as
  // it was before that one (rt::leave_handler_mask).
  if (rt::in_signal_handler())
    rt::leave_handler_mask();
  else
    ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &static_cast<ucontext_t*>(uc)->uc_sigmask, nullptr, 8L);
  // glibc's __do_cancel: its unwinding from the block's innermost buffer
  // (__pthread_unwind_next on a buffer whose link is it), through this
  // frame, the signal frame and the call, to the program's handlers and
  // the thread's landing (capi/thread.cpp), as when a check on entry acts.
  __pthread_unwind_buf_t next;
  next.__pad[0] = glibc_innermost_buffer();
  if (next.__pad[0]) glibc().unwind_next(&next);
}

void interrupt(void* fp) {
  auto* f = static_cast<rt::Fibre*>(fp);
  rt::Processor* p = f->cluster ? f->cluster->runner_of(f) : nullptr;
  if (!p) return;  // it left the call: nothing to interrupt
  if (pid_t tid = p->tid.load(std::memory_order_relaxed))
    ::syscall(SYS_tgkill, ::syscall(SYS_getpid), long(tid), long(kSigCancel));
}

const GlibcCancel kGlibcCancel{&glibc_reg, &glibc_unreg, &interrupt};

// glibc's pthread_cancel installs its own handler at its first call (for one
// of glibc's threads: a fork child's, a timer's). Where fibres run, loom's
// must stay (glibc's marks whatever block it finds installed as cancelled,
// and a late signal would find another fibre's): put back, with glibc's
// kept for the threads that are glibc's.
int glibc_cancel_keeping_ours(pthread_t t) {
  int e = glibc().cancel(t);
  if (glibc_cancel) {
    struct sigaction now {};
    if (glibc().libc_sigaction(kSigCancel, nullptr, &now) == 0 && (now.sa_flags & SA_SIGINFO) &&
        now.sa_sigaction != &on_sigcancel) {
      glibc_sigcancel = now.sa_sigaction;
      now.sa_sigaction = &on_sigcancel;
      glibc().libc_sigaction(kSigCancel, &now, nullptr);
    }
  }
  return e;
}

// capi/thread.cpp's unwinding reached the innermost buffer's frame: back
// into the push macro, whose `if` runs the handler and then calls
// __pthread_unwind_next, which goes on unwinding. The buffer's tag has
// glibc's jmp_buf layout up to __mask_was_saved, which is 0: longjmp reads
// no further.
void run_innermost(GlibcCleanup* g) {
  auto* b = static_cast<__pthread_unwind_buf_t*>(g->chain);
  g->chain = link_of(b);
  if (glibc_cancel) glibc_cancel->unreg(b);
  longjmp(reinterpret_cast<__jmp_buf_tag*>(b->__cancel_jmp_buf), 1);
}

__attribute__((constructor)) void install() { run_glibc_cleanup = &run_innermost; }

}  // namespace

}  // namespace loom::capi::pthread_cancel

using namespace loom;
using namespace loom::capi;
using namespace loom::capi::pthread_cancel;

// From libloom-pthread's constructor, on main, once per-fibre TLS is on:
// glibc's checks see loom's requests if glibc says where its word is.
void loom::capi::tell_glibc_checks() noexcept {
  if (rt::tls::switching && rt::tls::cancelhandling(rt::tls::current())) {
    const Glibc& g = glibc();
    if (!g.libc_sigaction) return;
    struct sigaction sa {};
    sa.sa_sigaction = &on_sigcancel;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;  // glibc's own flags for it
    sigemptyset(&sa.sa_mask);
    if (g.libc_sigaction(kSigCancel, &sa, nullptr) != 0) return;
    glibc_cancel = &kGlibcCancel;
  }
}

extern "C" {

void __pthread_register_cancel(__pthread_unwind_buf_t* b) {
  if (GlibcCleanup* g = glibc_cleanup()) {
    link_of(b) = g->chain;
    g->chain = b;
    if (glibc_cancel) glibc_cancel->reg(b);
  } else if (!on_fibre()) {
    glibc().register_cancel(b);
  }
}

void __pthread_unregister_cancel(__pthread_unwind_buf_t* b) {
  if (GlibcCleanup* g = glibc_cleanup()) {
    g->chain = link_of(b);
    if (glibc_cancel) glibc_cancel->unreg(b);
  } else if (!on_fibre()) {
    glibc().unregister_cancel(b);
  }
}

void __pthread_register_cancel_defer(__pthread_unwind_buf_t* b) {
  if (!glibc_cleanup() && !on_fibre()) return glibc().register_cancel_defer(b);
  int old = PTHREAD_CANCEL_DEFERRED;
  loom_setcanceltype(LOOM_CANCEL_DEFERRED, &old);
  b->__pad[2] = reinterpret_cast<void*>(static_cast<std::intptr_t>(old));
  __pthread_register_cancel(b);
}

void __pthread_unregister_cancel_restore(__pthread_unwind_buf_t* b) {
  if (!glibc_cleanup() && !on_fibre()) return glibc().unregister_cancel_restore(b);
  __pthread_unregister_cancel(b);
  loom_setcanceltype(static_cast<int>(reinterpret_cast<std::intptr_t>(b->__pad[2])), nullptr);
}

// A buffer's handler ran (the unwinding longjmp'd into its frame): the
// unwinding goes on from here, outwards.
void __pthread_unwind_next(__pthread_unwind_buf_t* b) {
  if (GlibcCleanup* g = glibc_cleanup()) {
    if (g->chain == b) {  // glibc's unwinding longjmp'd here (loom's takes b off first): loom's from now on
      g->chain = link_of(b);
      if (glibc_cancel) glibc_cancel->unreg(b);
      glibc_acted();
    }
    continue_exit();
  }
  glibc().unwind_next(b);
  __builtin_unreachable();
}

// A caller that is not a fibre (a kernel thread: a fork child's threads,
// its forking thread, threads made beneath the library) is glibc's: its
// state, type and checks are glibc's, and its cancellation points are
// glibc's own functions (io.cpp calls them for such callers).
int pthread_setcancelstate(int state, int* old) {
  return on_fibre() ? loom_setcancelstate(state, old) : glibc().setcancelstate(state, old);
}
int pthread_setcanceltype(int type, int* old) {
  return on_fibre() ? loom_setcanceltype(type, old) : glibc().setcanceltype(type, old);
}

int pthread_cancel(pthread_t t) {
  if (pthread_signal::glibc_thread_of_fork_child(t)) {
    int e = glibc_cancel_keeping_ours(t);
    if (e == 0) pthread_signal::wake_fork_child_thread(t);
    return e;
  }
  if (!on_fibre() && t == pthread_self()) return glibc_cancel_keeping_ours(glibc().self());  // (a fork child's forking thread)
  if (pthread_t g = pthread_signal::forking_thread_in_child(t)) return glibc_cancel_keeping_ours(g);  // ... from another
  return loom_cancel(t);
}

void pthread_testcancel(void) {
  if (on_fibre())
    loom_testcancel();
  else
    glibc().testcancel();
}

}  // extern "C"
