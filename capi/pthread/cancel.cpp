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
//    changes, in a pthread_mutex_lock's wait for one of loom's own
//    mutexes, not a robust, priority or process-shared one: sync.cpp, and
//    inside the program's own raw syscall(2): futex.cpp, capi/thread.cpp's
//    async_call_enter). A thread in a loop without cancellation points is
//    not cancelled.
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
#include <time.h>
#include <ucontext.h>
#include <unwind.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

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

// ---- a glibc thread's asynchronous cancellation, kept out of loom's frames ----------------
//
// A fork child's threads are glibc's, and so is their asynchronous
// cancellation: glibc's handler unwinds from wherever SIGCANCEL lands. On
// glibc that passes libc's C frames; under the preload a thread may be
// inside one of libloom-pthread's functions (a wrapper on its way to or
// from glibc's: pthread_barrier_wait just woken), whose C++ frame the
// unwinding cannot pass (noexcept, as glibc declares those functions, or a
// place no table of its lists): std::terminate. So a SIGCANCEL that finds
// such a frame of loom's on the thread's stack is put off: a
// one-shot timer of the thread's own sends it again kPutOffNs later, until
// it lands where the unwinding meets none: loom's C frames (syscall.c's,
// nothrow.c's) and loom_program_syscall's instruction have no table, and a
// wrapper stopped in a call its table lists (the thread's start, thread.cpp's
// child_start; system's wait) lets it pass.
constexpr long kPutOffNs = 100'000;
constexpr int kPutOffTag = 0x6c6f6f6e;  // the timer's si_value ("loon")

struct PutOff {
  int timer = -1;  // the kernel's timer id, made at the first put-off
};
thread_local PutOff put_off __attribute__((tls_model("initial-exec")));

// Whether unwinding passes a C++ frame stopped at ip (the instruction, for
// the interrupted frame; the one before the return address, for callers):
// its table must list a call site covering ip — libstdc++'s personality
// ends in std::terminate at a place no entry lists, which is also how a
// noexcept function's table (none listed) says so. GCC's table: the
// landing pads' base, the types' table, then call sites (start, length,
// landing pad: offsets from the function's start; an action).
std::uint64_t uleb(const unsigned char*& p) {
  std::uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    unsigned char c = *p++;
    v |= std::uint64_t(c & 0x7f) << shift;
    if (!(c & 0x80)) return v;
  }
}

bool read_fixed(const unsigned char*& p, unsigned enc, std::uint64_t* v) {
  switch (enc & 0x0f) {
    case 0x01: *v = uleb(p); return true;  // DW_EH_PE_uleb128
    case 0x02: case 0x0a: { std::uint16_t x; std::memcpy(&x, p, 2); p += 2; *v = x; return true; }
    case 0x03: case 0x0b: { std::uint32_t x; std::memcpy(&x, p, 4); p += 4; *v = x; return true; }
    case 0x04: case 0x0c: { std::uint64_t x; std::memcpy(&x, p, 8); p += 8; *v = x; return true; }
    default: return false;
  }
}

bool unwinding_passes(_Unwind_Context* ctx, std::uintptr_t ip) {
  const auto* p = static_cast<const unsigned char*>(_Unwind_GetLanguageSpecificData(ctx));
  if (!p) return true;  // no table (C, loom_program_syscall): nothing to stop it
  const std::uintptr_t at = ip - _Unwind_GetRegionStart(ctx);
  unsigned lp_enc = *p++;
  if (lp_enc != 0xff) return false;  // (GCC's is always "omitted")
  if (*p++ != 0xff) uleb(p);         // the types' table
  unsigned cs_enc = *p++;
  std::uint64_t len = uleb(p);
  for (const unsigned char* end = p + len; p < end;) {
    std::uint64_t start, size, lp;
    if (!read_fixed(p, cs_enc, &start) || !read_fixed(p, cs_enc, &size) || !read_fixed(p, cs_enc, &lp)) return false;
    uleb(p);  // the action
    if (at < start) return false;  // (sorted by start)
    if (at < start + size) return true;
  }
  return false;
}

// Whether a frame of loom's that the unwinding cannot pass lies between the
// signal frame and the thread's start (walked from the handler: the frames
// up to the signal's own are the handler's).
bool loom_frame_below() {
  struct Walk {
    bool past_signal = false, loom = false;
  } walk;
  _Unwind_Backtrace(
      [](_Unwind_Context* ctx, void* arg) -> _Unwind_Reason_Code {
        auto* w = static_cast<Walk*>(arg);
        int before = 0;
        std::uintptr_t ip = _Unwind_GetIPInfo(ctx, &before);
        if (!w->past_signal) {
          w->past_signal = before != 0;  // the interrupted frame: its ip is the instruction itself
          if (!w->past_signal) return _URC_NO_REASON;
        }
        if (!ip) return _URC_END_OF_STACK;
        if (!before) --ip;
        if (loom_code_at(ip) && !unwinding_passes(ctx, ip)) {
          w->loom = true;
          return _URC_END_OF_STACK;
        }
        return _URC_NO_REASON;
      },
      &walk);
  return walk.loom;
}

// SIGCANCEL for a thread that is not loom's, to glibc's handler now or,
// with loom's frames below, again in kPutOffNs.
void glibc_thread_sigcancel(int sig, siginfo_t* si, void* uc) {
  const long pid = ::syscall(SYS_getpid);
  siginfo_t again;
  if (si->si_code == SI_TIMER && si->si_value.sival_int == kPutOffTag) {
    again = *si;  // as the put-off signal's sender made it
    again.si_code = SI_TKILL;
    again.si_pid = pid_t(pid);
    again.si_uid = ::getuid();
    si = &again;
  } else if (si->si_code != SI_TKILL || si->si_pid != pid) {
    return glibc_sigcancel(sig, si, uc);  // glibc's checks turn it away
  }
  if (loom_frame_below()) {
    PutOff& p = put_off;
    if (p.timer < 0) {
      sigevent ev{};
      ev.sigev_notify = SIGEV_THREAD_ID;
      ev.sigev_signo = sig;
      ev.sigev_value.sival_int = kPutOffTag;
      ev._sigev_un._tid = pid_t(::syscall(SYS_gettid));
      int id = -1;
      if (::syscall(SYS_timer_create, CLOCK_MONOTONIC, &ev, &id) != 0) return glibc_sigcancel(sig, si, uc);
      p.timer = id;
    }
    itimerspec t{};
    t.it_value.tv_nsec = kPutOffNs;
    if (::syscall(SYS_timer_settime, p.timer, 0, &t, nullptr) == 0) return;
  }
  if (put_off.timer >= 0) {  // (glibc's handler does not return when it acts)
    ::syscall(SYS_timer_delete, put_off.timer);
    put_off.timer = -1;
  }
  glibc_sigcancel(sig, si, uc);
}

void on_sigcancel(int sig, siginfo_t* si, void* uc) {
  if (!on_fibre() || !glibc_cleanup()) {  // not a thread of loom_create
    if (glibc_sigcancel) glibc_thread_sigcancel(sig, si, uc);
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
    // glibc's pthread_cancel installs its handler at its first call, then
    // signals; were that first call a fork child's asynchronous
    // cancellation, the signal could land before loom's handler is back
    // (glibc_cancel_keeping_ours) and unwind into loom's frames. So the
    // first call is made now, on a stand-in that is cancelled already (it
    // does nothing else), and glibc's handler kept for glibc's threads.
    if (void* b = rt::tls::cancelled_stand_in(); b && g.cancel) {
      g.cancel(reinterpret_cast<pthread_t>(b));
      struct sigaction now {};
      if (g.libc_sigaction(kSigCancel, nullptr, &now) == 0 && (now.sa_flags & SA_SIGINFO) &&
          now.sa_sigaction != &on_sigcancel)
        glibc_sigcancel = now.sa_sigaction;
    }
    struct sigaction sa {};
    sa.sa_sigaction = &on_sigcancel;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;  // glibc's own flags for it
    sigemptyset(&sa.sa_mask);
    if (g.libc_sigaction(kSigCancel, &sa, nullptr) != 0) return;
    glibc_cancel = &kGlibcCancel;
  }
}

namespace {

// Once thread.cpp's constructor (111, just before) has turned per-fibre
// thread-locals on.
__attribute__((constructor(112))) void tell_glibc_checks_at_start() {
  if (rt::tls::enable()) tell_glibc_checks();
}

}  // namespace

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
