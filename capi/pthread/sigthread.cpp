// capi/pthread/sigthread.cpp — POSIX's per-thread signals for fibres, by
// glibc's names: pthread_sigmask, sigprocmask, pthread_kill,
// pthread_sigqueue, raise, kill and sigqueue (to this process; the three
// defined in C by sigcalls.c around loom_pthread_raise...), sigpending, sigwait, sigwaitinfo, sigtimedwait,
// sigsuspend and pause; glibc's other mask functions (sighold, sigrelse,
// sigpause, __sigpause, __xpg_sigpause, sigblock, sigsetmask, siggetmask),
// which glibc makes on the kernel thread's mask, on the fibre's instead.
//
// Each thread of loom_create (and main) has a mask and a pending set of its
// own (capi.hpp, SignalState, kept in its record's slot); a new thread
// starts with its creator's mask. The kernel knows nothing of them: loom
// never changes a processor's kernel mask for a fibre. So:
//  - a signal the kernel delivers runs the trampoline (sigtable.cpp) on
//    whatever processor it picked; route() (sigroute.cpp) then chooses the thread
//    POSIX would: a thread waiting for it (sigwait's set, sigsuspend's
//    unblocked ones) first, then the interrupted fibre if it does not block
//    it (the handler runs there, today's trampoline rules), then any thread
//    that does not block it (posted to it: it runs at that thread's next
//    delivery point, deliver_pending); if every thread blocks it, it stays
//    pending for the process until one unblocks it or waits for it. A
//    signal whose disposition is SIG_DFL reaches the trampoline only once a
//    fibre blocked it (sigtable.cpp, guard); before that, no fibre blocks it
//    and the kernel's default action is POSIX's.
//  - kill and sigqueue to this very process, from a fibre, for a signal the
//    program handles, are routed by route() before the call returns
//    (send_to_self), as the kernel delivers to a sender that does not block
//    it; others are the kernel's.
//  - pthread_kill(t, sig) never reaches the kernel: sig is posted to t's
//    pending set, and t's waits are woken. A signal t does not block whose
//    action is the default (terminate, stop) acts at once, process-wide, as
//    it would on glibc; one that is ignored is dropped.
//  - a wait (sigwait..., sigsuspend, pause) blocks the fibre on a semaphore
//    of its own (kept with the slot, never destroyed), which every post
//    posts — libloom-pthread's sem_post is async-signal-safe — after setting
//    the pending bit: no lost wake-up.
//  - "delivering" to the calling fibre a signal it does not block is a
//    tgkill (rt_tgsigqueueinfo, with the siginfo kept) to its own kernel
//    thread: the kernel runs the trampoline at once with the program's
//    sa_mask and flags, and route() sees a fibre that takes it.
//  - no lost wake-up between route and a waiter: route marks a signal
//    pending for the process, then looks at every thread's wait set and
//    mask again; a waiter publishes its set, then reads the pending sets
//    (a sequentially consistent pair). Realtime signals pending for the
//    process and a thread queue, each instance taken once, in order.
//  - interrupts: once the program installs a handler, a handler due on a
//    fibre parked in the parking lot (mutex, condvar, rwlock, barrier,
//    semaphore, futex, sleep) runs on it at once: a kernel thread of this
//    file's cuts the wait short (parking_lot::interrupt); sem_wait then
//    gives EINTR unless the handler has SA_RESTART, a sleep (nanosleep,
//    clock_nanosleep, usleep, sleep, a poll with nothing to watch) gives
//    EINTR whatever its flags, as the kernel's, the others wait on. So does
//    one due on a fibre waiting on a descriptor or a poll set in the io
//    layer (a blocking read, write, accept, connect..., poll, select,
//    epoll_wait): its wait's word is posted (rt::wake_io_wait), and the call
//    runs the handler and then waits again (SA_RESTART) or fails with EINTR
//    (always, for the poll family), as the kernel's calls do.
//    A fibre blocked in a system call loom does not see (glibc's own:
//    aio_suspend's futex, semop, flock, waitpid) is hurried: the signal is
//    sent to the kernel thread running it, marked, and runs there if it
//    lands in such a call ("hurry" below).
// Delivery points (deliver_pending): pthread_sigmask/sigprocmask, the
// waits, raise/pthread_kill to oneself, and sched_yield, the sleeps and
// poll-family waits of io.cpp. A fibre none of the above reaches (a tight
// loop, a join, a call loom makes on the offload cluster: a regular file, a
// terminal) runs a handler posted to it only when it next reaches one:
// docs/DESIGN.md, "Signals and fibres".
//
// Callers that are not fibres with a record (kernel threads that are not
// processors, a fork child, C++ loom::Fibres) and handlers get glibc's calls.
//
// The half of the above that runs in the trampoline or a poster — the
// process's pending set and realtime queue, posting to a thread, route()
// and a hurry's landing — is sigroute.cpp's, below this file (sigroute.hpp);
// the dispositions (action_of, guard, default_action) are sigtable.cpp's.
#include <semaphore.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "base/futex.hpp"
#include "base/spinlock.hpp"
#include "base/sys.hpp"
#include "capi.hpp"
#include "loom/loom.h"
#include "sched/cancel.hpp"
#include "sched/cluster.hpp"
#include "sched/monitor.hpp"
#include "sched/in_handler.hpp"
#include "sched/processor.hpp"
#include "signals.hpp"
#include "sigroute.hpp"
#include "sync/parking_lot.hpp"

extern "C" int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void), void* dso);
extern "C" void* __dso_handle;

namespace loom::capi::pthread_signal {
namespace {

// ---- sets ------------------------------------------------------------------------------

std::uint64_t to_bits(const sigset_t* s) {
  std::uint64_t b = 0;
  std::memcpy(&b, s, sizeof b);
  return b;
}
void to_set(std::uint64_t b, sigset_t* s) {
  sigemptyset(s);
  std::memcpy(s, &b, sizeof b);
}
// Never blocked (the kernel's rule), and glibc's own two (SIGCANCEL,
// SIGSETXID: glibc's pthread_sigmask leaves them out too).
constexpr std::uint64_t kUnblockable = (std::uint64_t(1) << (SIGKILL - 1)) | (std::uint64_t(1) << (SIGSTOP - 1)) |
                                       (std::uint64_t(1) << 31) | (std::uint64_t(1) << 32);

// The process's pending set, posting to a thread's, route() and the hurry's
// landing are the signal-context half of this file's story: sigroute.cpp.

// ---- interrupts: a handler due on a fibre parked in the parking lot ----------------------
//
// A handler posted to a thread whose fibre waits in a mutex, a condition
// variable, a barrier, a semaphore, a futex or a sleep runs on that fibre
// at once: its wait is cut short (parking_lot::interrupt), the handler runs
// there, and the wait goes on, unseen by the primitive — except sem_wait's,
// which ends with EINTR when the handler has no SA_RESTART, as glibc's
// does, and a sleep's, which ends with EINTR in any case (the kernel never
// restarts one: parking_lot::Interruptible::always).
// The cut is made by a kernel thread of its own (started with the first
// handler the program installs), woken through a futex word: a poster may
// be a signal handler, and interrupt() takes a bucket lock and schedules a
// fibre, which are not async-signal-safe. The waiter notes its key in its
// SignalState under the bucket lock (the parking hook) and then reads its
// pending set; a poster sets the pending bit, then asks (sigroute.cpp's
// ask_interrupt, on interrupt_word): one of the two sees the other.
bool on_parking(const void* key, const rt::Fibre* f);
rt::parking_lot::Handled on_interrupted();
bool on_io_waiting(rt::WaitKind kind, const void* object);

// ---- hurry: a handler due on a fibre blocked in a system call loom does not see ----------
//
// glibc's own waits (aio_suspend's and lio_listio's futex, a program's raw
// syscall) block the fibre's kernel thread with the fibre on it: no
// delivery point comes until the call returns. When neither the parking
// lot nor the io layer holds the fibre, and it runs on a processor that has
// not switched for kHurryLookNs and whose kernel thread sleeps in the
// kernel then (/proc's state, sched/stall.cpp's thread_state: 'S'), the
// interrupter sends each signal the fibre has pending (and does not
// block) to that kernel thread, by
// rt_tgsigqueueinfo with a siginfo of its own (kSiHurry, the thread's
// SignalState as the value): the kernel interrupts the call with the
// program's own flags (EINTR, or a restart with SA_RESTART) and runs the
// trampoline, where hurried() takes the signal from the fibre's pending set
// and hands its real siginfo to the handler — only if that fibre still runs
// there, blocked in a system call (the interrupted instruction is, or just
// follows, a `syscall`, with EINTR or a restart: a call that blocked) that
// is not loom's own code (whose locks a handler must not run on top of).
// Otherwise it does nothing: the signal stays pending for the fibre, which
// takes it at its next delivery point, as before.
//
// The window it leaves: the fibre leaves the kernel thread between the
// interrupter's look and the signal's arrival, and another fibre there is
// in a blocking call of its own: that call sees EINTR (if the handler has
// no SA_RESTART) with no handler run for it.

// The fibres to hurry, found in one pass of the interrupter: each with the
// processor running it and that processor's switch count then. Sent only
// if, kHurryLookNs later, the same fibre still runs there with no switch
// since (blocked, most likely, in its call: a fibre that is merely
// computing leaves soon, and its signal waits for its delivery point).
struct HurryCandidate {
  SignalState* s;
  rt::Processor* p;
  std::uint64_t id, switches;
};
constexpr int kHurryMax = 64;
constexpr long kHurryLookNs = 200'000;
HurryCandidate hurry_list[kHurryMax];  // the interrupter's only
int hurry_count = 0;

std::uint64_t switches_of(const rt::Processor& p) { return p.counters.get(rt::Stat::switches); }

void hurry_note(SignalState& s) {
#if !defined(__x86_64__)
  return;  // (hurried() reads x86-64's registers and instructions)
#endif
  std::uint64_t id = s.fibre_id.load(std::memory_order_acquire);
  if (!id) return;
  if (hurry_count == kHurryMax) {  // in the next pass
    s.interrupt.store(true, std::memory_order_seq_cst);
    interrupt_word.fetch_add(1, std::memory_order_seq_cst);
    return;
  }
  rt::Processor* p = nullptr;
  for (rt::Cluster* c = rt::Cluster::first(); c && !p; c = c->next_made()) p = c->runner_of_id(id);
  if (!p) return;  // not running: queued, it takes the signal when it runs
  hurry_list[hurry_count++] = HurryCandidate{&s, p, id, switches_of(*p)};
}

void hurry_send() {
  if (!hurry_count) return;
  timespec t{0, kHurryLookNs};
  // The kernel's sleep, which io.cpp's nanosleep gives a thread that is no
  // fibre, as this one (io.cpp sits above this file: it delivers signals).
  ::syscall(SYS_nanosleep, &t, nullptr);
  const long pid = ::getpid();
  for (int k = 0; k < hurry_count; ++k) {
    const HurryCandidate& h = hurry_list[k];
    auto still_there = [&h] {
      return h.p->running_id.load(std::memory_order_acquire) == h.id && switches_of(*h.p) == h.switches;
    };
    const long tid = h.p->tid.load(std::memory_order_relaxed);
    if (!tid || !still_there()) continue;
    // Asleep in the kernel, in a call of the program's (not one of loom's,
    // whose waits a skipped landing would only cut short), and still there
    // after that look.
    long nr;
    std::uintptr_t pc;
    if (rt::thread_state(pid_t(tid), &nr, &pc) != 'S' || nr < 0 || !pc || !program_call_site(pc - 2)) continue;
    if (!still_there()) continue;
    SignalState& s = *h.s;
    for (std::uint64_t ready = pending_for(s) & ~s.mask.load(std::memory_order_acquire); ready; ready &= ready - 1) {
      int sig = lowest(ready);
      // A one-shot disposition (SA_RESETHAND): the kernel resets it at the
      // landing, even one that runs nothing here.
      if (resets(sig)) continue;
      siginfo_t si;
      std::memset(&si, 0, sizeof si);
      si.si_signo = sig;
      si.si_code = kSiHurry;
      si.si_errno = kHurryErrno;
      si.si_pid = pid_t(pid);
      si.si_uid = ::getuid();
      si.si_value.sival_ptr = &s;
      ::syscall(SYS_rt_tgsigqueueinfo, pid, tid, long(sig), &si);
    }
  }
  hurry_count = 0;
}

bool interrupt_one(SignalState& s, void*) {
  if (!s.interrupt.exchange(false, std::memory_order_seq_cst)) return false;
  const void* key = s.parked_key.load(std::memory_order_seq_cst);
  const void* f = s.parked_fibre.load(std::memory_order_acquire);
  if (key && f) rt::parking_lot::interrupt(key, static_cast<const rt::Fibre*>(f));
  // (kind and object may come from two waits in turn: the later is posted,
  // and it is the one to cut short.)
  auto kind = rt::WaitKind(s.io_kind.load(std::memory_order_seq_cst));
  if (kind != rt::WaitKind::none) rt::wake_io_wait(kind, s.io_object.load(std::memory_order_acquire));
  if (!key && kind == rt::WaitKind::none) hurry_note(s);
  return false;  // on to the next
}

void* interrupter(void*) {
  ::prctl(PR_SET_NAME, "loom-interrupt", 0, 0, 0);
  sigset_t all;
  sigfillset(&all);
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, nullptr, _NSIG / 8);
  for (;;) {
    int v = interrupt_word.load(std::memory_order_seq_cst);
    any_signal_state(&interrupt_one, nullptr);
    hurry_send();
    rt::futex_wait(&interrupt_word, v);
  }
  return nullptr;
}
// ---- delivery on the calling fibre --------------------------------------------------------

// Sends sig with si to this kernel thread. Not noexcept, and opaque to the
// compiler (noipa: it would otherwise find it cannot throw): see run_here.
[[gnu::noipa]] void raise_here(int sig, siginfo_t* si) {
  const long pid = rt::raw_syscall(SYS_getpid, 0, 0, 0, 0, 0, 0), tid = rt::raw_syscall(SYS_gettid, 0, 0, 0, 0, 0, 0);
  if (rt::raw_syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, reinterpret_cast<long>(si), 0, 0) != 0)
    rt::raw_syscall(SYS_tgkill, pid, tid, sig, 0, 0, 0);
}

// sig, which the caller's mask does not block, delivered here: the kernel
// runs the trampoline (handler, or the guarded default action) before the
// call returns. False if its action is to ignore it.
bool run_here(int sig, const SignalInfo& i) {
  Action a = action_of(sig);
  if (a == Action::ignore) return false;
  int e = *errno_slot();
  siginfo_t si;
  to_siginfo(sig, i, &si);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  ::syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, &one, nullptr, _NSIG / 8);  // the kernel thread's, as loom keeps it
  tls_delivering = &si;
  // The handler runs as this system call returns, and may be cancelled
  // there: its unwinding passes through this frame and its callers'. So
  // the call is not made through `syscall`, which glibc's header declares
  // nothrow, nor straight to rt::raw_syscall (noexcept): a caller with
  // cleanups of its own (sigsuspend's) lists no call site for a call that
  // cannot throw, and an unwinding from one it does not list ends in
  // std::terminate. raise_here may throw, as far as its callers know.
  raise_here(sig, &si);
  tls_delivering = nullptr;
  *errno_slot() = e;
  return true;
}

// A fibre with a record, not inside a handler: the per-thread rules apply.
SignalState* fibre_state() {
  rt::Processor* p = rt::this_processor_at_entry();
  if (!p || p->current() == &p->idle_fibre() || rt::in_signal_handler()) return nullptr;
  return signal_state();
}

// The info array: made with the slot's first record (thread.cpp); here too,
// should that allocation have failed.
bool prepare_wait(SignalState& s) {
  if (!s.info.load(std::memory_order_acquire)) {
    auto* a = new (std::nothrow) SignalInfo[64]();
    if (!a) return false;
    SignalInfo* none = nullptr;
    if (!s.info.compare_exchange_strong(none, a, std::memory_order_acq_rel)) delete[] a;
  }
  return true;
}

// Takes the posts made so far (what they posted is in the pending sets).
void drain(SignalState& s) {
  int e = *errno_slot();
  while (sem_trywait(&s.wake) == 0) {
  }
  *errno_slot() = e;
}

// Waits until s is posted to or the deadline (ns on CLOCK_MONOTONIC, -1:
// none) passes: false at the deadline.
bool sleep_on(SignalState& s, std::int64_t deadline) {
  int e = *errno_slot();
  int r;
  if (deadline < 0) {
    r = sem_wait(&s.wake);
  } else {
    timespec abs{time_t(deadline / 1'000'000'000), long(deadline % 1'000'000'000)};
    r = sem_clockwait(&s.wake, CLOCK_MONOTONIC, &abs);
  }
  bool timed_out = r != 0 && *errno_slot() == ETIMEDOUT;
  *errno_slot() = e;
  return !timed_out;
}

// route() looks for waiters only while some exist. Registering is one
// half of a pair with route's: the waiter stores `waits`, then reads the
// pending sets; route sets process_pending, then reads every `waits` (both
// sequentially consistent), so one of the two sees the other and no signal
// is left pending while its waiter sleeps.
struct WaitScope {
  SignalState& s;
  WaitScope(SignalState& st, std::uint64_t w) : s(st) {
    waiters.fetch_add(1, std::memory_order_seq_cst);
    s.waits.store(w, std::memory_order_seq_cst);
  }
  ~WaitScope() {
    std::uint64_t w = s.waits.exchange(0, std::memory_order_seq_cst);
    waiters.fetch_sub(1, std::memory_order_acq_rel);
    // A realtime instance route woke this thread for stays queued for the
    // process (post_routed): if it is still there, another thread that
    // waits for it or leaves it open is woken for it. The pair: this clears
    // `waits`, then reads the process's set; post_routed queues, then reads
    // `waits` (an outside review: a waiter whose short sigtimedwait had just
    // ended was woken, and a second waiter slept on with it pending).
    for (std::uint64_t q = process_pending_now() & w & ~(bit(SIGRTMIN) - 1); q; q &= q - 1)
      claim_queued(lowest(q));
  }
};

// sigwait's family: the first of `set` pending for the caller or the
// process; meanwhile handlers of signals it does not block run (and the
// wait goes on, as POSIX has it). sig, or -EAGAIN at the deadline.
int wait_for(SignalState& s, std::uint64_t set, std::int64_t deadline, SignalInfo* out) {
  if (!prepare_wait(s)) return -EAGAIN;
  WaitScope w(s, set | ~s.mask.load(std::memory_order_relaxed));
  for (;;) {
    drain(s);
    std::uint64_t p = pending_for(s);
    for (std::uint64_t b = p & set; b; b &= b - 1)
      if (take(s, lowest(b), out)) return lowest(b);
    deliver_pending();
    // Pending in the kernel for the process (or this kernel thread), blocked
    // there by a mask the process started with.
    sigset_t ks;
    to_set(set, &ks);
    siginfo_t si;
    timespec zero{0, 0};
    int e = *errno_slot();
    long r = ::syscall(SYS_rt_sigtimedwait, &ks, &si, &zero, _NSIG / 8);
    *errno_slot() = e;
    if (r > 0 && is_hurry(si)) continue;  // a hurry the kernel mask held: not a signal
    if (r > 0) {
      *out = info_of(&si);
      return int(r);
    }
    if (!sleep_on(s, deadline)) return -EAGAIN;
  }
}

std::int64_t deadline_of(const timespec* t) {
  if (!t) return -1;
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return std::int64_t(now.tv_sec + t->tv_sec) * 1'000'000'000 + now.tv_nsec + t->tv_nsec;
}

// ---- the calls -----------------------------------------------------------------------------

template <class F>
void glibc_fn(F*& f, const char* name) {
  rt::sys::find_symbol(f, "libc.so.6", name);
}

struct Glibc {
  int (*sigmask)(int, const sigset_t*, sigset_t*);
  int (*procmask)(int, const sigset_t*, sigset_t*);
  int (*sigwait)(const sigset_t*, int*);
  int (*sigwaitinfo)(const sigset_t*, siginfo_t*);
  int (*sigtimedwait)(const sigset_t*, siginfo_t*, const timespec*);
  int (*sigsuspend)(const sigset_t*);
  int (*pause)();
  int (*sigpending)(sigset_t*);
  int (*raise)(int);
  int (*kill)(pthread_t, int);
  int (*sigqueue)(pthread_t, int, const union sigval);
};
const Glibc& glibc() {
  static const Glibc g = [] {
    Glibc r{};
    glibc_fn(r.sigmask, "pthread_sigmask");
    glibc_fn(r.procmask, "sigprocmask");
    glibc_fn(r.sigwait, "sigwait");
    glibc_fn(r.sigwaitinfo, "sigwaitinfo");
    glibc_fn(r.sigtimedwait, "sigtimedwait");
    glibc_fn(r.sigsuspend, "sigsuspend");
    glibc_fn(r.pause, "pause");
    glibc_fn(r.kill, "pthread_kill");
    glibc_fn(r.sigqueue, "pthread_sigqueue");
    glibc_fn(r.sigpending, "sigpending");
    glibc_fn(r.raise, "raise");
    return r;
  }();
  return g;
}
// fork: the child's one kernel thread continues the forking fibre, and a
// program it execs inherits the kernel thread's mask — POSIX says the
// forking thread's. Taken by the last prepare handler (registered before
// the program's, so run after them, just before the fork) and set in the
// child.
std::atomic<std::uint64_t> forking_mask{0};
std::atomic<bool> forking_fibre{false};
void before_fork() {
  SignalState* s = fibre_state();
  forking_fibre.store(s != nullptr, std::memory_order_relaxed);
  if (s) forking_mask.store(s->mask.load(std::memory_order_relaxed), std::memory_order_relaxed);
}
// The child of a fork: route leaves each signal to the thread the kernel
// picked (sigroute.cpp's fork_child), and the forking thread's kernel mask
// is its fibre's.
void in_child() {
  fork_child.store(true, std::memory_order_relaxed);
  rt_after_fork();
  if (!forking_fibre.load(std::memory_order_relaxed)) return;
  sigset_t k;
  to_set(forking_mask.load(std::memory_order_relaxed), &k);
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &k, nullptr, _NSIG / 8);
}

// A thread finishes (thread.cpp's signal_thread_end): from now on it
// blocks everything, so that routing passes it by, and pthread_kill sends
// it nothing.
// What was routed to it from the process and is still pending goes back
// to the process (another thread takes it, or it waits there until one
// can); what was sent to the thread itself ends with it, as on glibc.
void thread_ended(SignalState& s) {
  bool own = fibre_state() == &s;
  s.ended.store(true, std::memory_order_seq_cst);
  std::uint64_t was = s.mask.exchange(~kUnblockable, std::memory_order_seq_cst);
  std::uint64_t p = s.pending.exchange(0, std::memory_order_seq_cst);
  std::uint64_t back = p & s.routed.exchange(0, std::memory_order_acq_rel);
  SignalInfo* a = s.info.load(std::memory_order_acquire);
  drop_queued(s, ~std::uint64_t(0));
  // A realtime signal route woke this thread for stays queued for the
  // process: another thread is woken for it, as for those handed back.
  std::uint64_t queued_for_process = pending_for(s) & ~(bit(SIGRTMIN) - 1) & ~was;
  for (back |= queued_for_process; back; back &= back - 1) {
    int sig = lowest(back);
    bool taken = (queued_for_process & bit(sig)) ? claim_queued(sig)
                                                 : hand_back(sig, a ? a[sig - 1] : info_of(nullptr));
    if (taken || !own || (was & bit(sig))) continue;
    // No other thread can take it now: it runs here, where glibc's kernel
    // would have run it (the thread computed without a delivery point).
    SignalInfo i;
    if (take_process(sig, &i)) run_here(sig, i);
  }
}

// Realtime instances pending at exec (of `open`, about to be unblocked),
// routed one by one in the order they came, here rather than by the
// unblock that follows. (With the guard's SA_NODEFER, since dropped, the
// kernel delivered each pending instance on top of the one before and the
// innermost ran first: an exec'd image took 3, 2, 1 of values sent 1, 2,
// 3.) One that route leaves to this kernel thread goes back to the kernel,
// for the unblock that follows, as before.
void adopt_queued(std::uint64_t open) {
  const int rtmin = SIGRTMIN;
  std::uint64_t queued = 0;
  for (std::uint64_t g = open; g; g &= g - 1)
    if (lowest(g) >= rtmin && action_of(lowest(g)) != Action::ignore) queued |= bit(lowest(g));
  const long pid = ::getpid(), tid = ::syscall(SYS_gettid);
  while (queued) {
    sigset_t q;
    to_set(queued, &q);
    siginfo_t si;
    timespec zero{0, 0};
    long sig = ::syscall(SYS_rt_sigtimedwait, &q, &si, &zero, _NSIG / 8);
    if (sig <= 0) return;
    if (route(int(sig), &si, true)) continue;
    ::syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, &si);
    queued &= ~bit(int(sig));  // (what is left of it comes with the unblock)
  }
}

// Before the program runs: glibc's functions, main's record (with it
// main's mask, the kernel thread's at start-up) so that a handler finds it,
// and the fork handlers.
//
// A mask the process started with (inherited across exec) is main's
// fibre mask, not the kernel's: each signal it blocks is guarded (as
// set_mask does when a fibre blocks one) and then unblocked on this kernel
// thread, before the runtime starts the processors (which inherit it), so
// that the kernel delivers it to the trampoline, which routes it by the
// fibres' masks. One already pending at exec comes now, and waits for the
// process until a thread unblocks it.
__attribute__((constructor)) void look_up_early() {
  signal_thread_end = &thread_ended;
  glibc();
  sigset_t k;
  std::uint64_t inherited = 0;
  if (::syscall(SYS_rt_sigprocmask, SIG_BLOCK, nullptr, &k, _NSIG / 8) == 0) inherited = to_bits(&k) & ~kUnblockable;
  std::uint64_t open = 0;  // left to the kernel: the synchronous ones (raised on the faulting thread)
  for (std::uint64_t g = inherited; g; g &= g - 1)
    if (!synchronous(lowest(g))) open |= bit(lowest(g));
  if (open && !signal_state()) {
    next_thread_mask(&inherited);  // main's record (made by loom_self below)
    for (std::uint64_t g = open; g; g &= g - 1) guard(lowest(g));
    sigset_t u;
    to_set(open, &u);
    tls_adopting = true;  // what was pending at exec comes now
    adopt_queued(open);
    ::syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, &u, nullptr, _NSIG / 8);
    tls_adopting = false;
  }
  loom_self();
  next_thread_mask(nullptr);
  __register_atfork(&before_fork, nullptr, &in_child, &__dso_handle);
}

// pthread_sigmask on a fibre: 0 or the error number.
int set_mask(SignalState& s, int how, const sigset_t* set, sigset_t* old) {
  std::uint64_t was = s.mask.load(std::memory_order_relaxed);
  if (set) {
    std::uint64_t b = to_bits(set), now;
    switch (how) {
      case SIG_BLOCK:
        now = was | b;
        break;
      case SIG_UNBLOCK:
        now = was & ~b;
        break;
      case SIG_SETMASK:
        now = b;
        break;
      default:
        return EINVAL;
    }
    now &= ~kUnblockable;
    for (std::uint64_t g = now & ~was; g; g &= g - 1) guard(lowest(g));
    s.mask.store(now, std::memory_order_seq_cst);  // then deliver_pending reads the pending sets: route's pair
  }
  if (old) to_set(was, old);
  deliver_pending();
  return 0;
}

// A signal for thread s (not the caller's own, or the caller's with
// `self`): POSIX's rules of generation.
int send(SignalState& s, int sig, const SignalInfo& i, bool self) {
  bool blocked = s.mask.load(std::memory_order_acquire) & bit(sig);
  if (!blocked) {
    if (self) {
      run_here(sig, i);
      return 0;
    }
    switch (action_of(sig)) {
      case Action::ignore:
        return 0;
      case Action::terminate:
      case Action::stop:
        default_action(sig);  // process-wide: acts the same from here
        return 0;
      case Action::handler:
        break;
    }
  }
  post(s, sig, i);
  if (!blocked) ask_interrupt(s);
  return 0;
}

// kill and sigqueue aimed at this very process by a fibre, for a signal the
// program handles: routed here, before the call returns — to a thread that
// waits for it, to the caller if it does not block it (the handler runs
// now, as the kernel runs it for a sender that does not block it on its
// way out of the call), else to a thread that does not block it, else
// pending for the process. Sent to the process, the kernel handed it to
// whichever kernel thread it chose, whose trampoline routed it a moment
// later: after the caller's next call, a SIG_IGN that had to discard it
// (signal_review's flush, 2-4 runs in 25 of 300 rounds each) or a check
// that its handler ran. False: the kernel's kill, as before (a caller that
// is no fibre, in a handler or a fork child; a signal POSIX acts on
// process-wide at once, SIGKILL, SIGSTOP, SIGCONT; one loom routes by the
// thread that caused it; a default action or SIG_IGN) — and a caller that
// blocks it while another thread does not: posted to that thread, it would
// wait for the thread's next delivery point, for ever if the thread
// computes (an outside review's program: 10 hangs in 10), where the kernel
// most often hands it to an idle processor that runs it at once.
bool unblocked_elsewhere(SignalState& s, void* arg) {
  const auto* r = static_cast<const Routing*>(arg);
  return &s != r->skip && !(s.mask.load(std::memory_order_acquire) & bit(r->sig)) &&
         !s.ended.load(std::memory_order_acquire);
}

bool send_to_self(int sig, int code, void* value) {
  if (sig <= 0 || sig >= NSIG || sig == 32 || sig == 33 || sig == SIGKILL || sig == SIGSTOP || sig == SIGCONT ||
      synchronous(sig) || thread_directed(sig) || fork_child.load(std::memory_order_relaxed))
    return false;
  SignalState* s = fibre_state();
  if (!s || action_of(sig) != Action::handler) return false;
  if (s->mask.load(std::memory_order_acquire) & bit(sig)) {
    Routing probe{sig, SignalInfo{}, false, s, false};
    if (any_signal_state(&unblocked_elsewhere, &probe)) return false;
  }
  const SignalInfo i{code, int(::getpid()), unsigned(::getuid()), value};
  siginfo_t si;
  to_siginfo(sig, i, &si);
  if (route(sig, &si, false)) return true;
  if (s->mask.load(std::memory_order_acquire) & bit(sig)) return false;
  run_here(sig, i);
  return true;
}

// Under the bucket lock of key (null: the fibre resumed).
bool on_parking(const void* key, const rt::Fibre* f) {
  SignalState* s = fibre_state();
  if (!s) return false;
  if (key == &s->wake) {  // a wait of this file's, which takes its signals itself
    s->parked_key.store(nullptr, std::memory_order_relaxed);
    return false;
  }
  if (!key) {  // resumed (no lock held): a delivery point, for what came as it woke
    if (s->parked_key.exchange(nullptr, std::memory_order_seq_cst)) deliver_pending();
    return false;
  }
  s->parked_fibre.store(f, std::memory_order_relaxed);
  s->parked_key.store(key, std::memory_order_seq_cst);
  return (pending_for(*s) & ~s->mask.load(std::memory_order_relaxed)) != 0;
}

// The io layer's (parking_lot::SignalHooks::io_waiting): the object first,
// then the kind, which interrupt_one reads first. Then, as on_parking, the
// pending set: either a poster's ask finds the kind, or this finds its bit.
bool on_io_waiting(rt::WaitKind kind, const void* object) {
  SignalState* s = fibre_state();
  if (!s) return false;
  if (kind == rt::WaitKind::none) {
    s->io_kind.store(0, std::memory_order_relaxed);
    return false;
  }
  s->io_object.store(object, std::memory_order_relaxed);
  s->io_kind.store(static_cast<unsigned char>(kind), std::memory_order_seq_cst);
  if ((pending_for(*s) & ~s->mask.load(std::memory_order_relaxed)) == 0) return false;
  s->io_kind.store(0, std::memory_order_relaxed);  // it does not sleep
  return true;
}

// deliver_pending's loop, telling what ran: the wait decides whether it
// goes on (parking_lot::Interruptible; the io layer's, wait_and_retry).
rt::parking_lot::Handled on_interrupted() {
  using rt::parking_lot::Handled;
  SignalState* s = fibre_state();
  if (!s) return Handled::none;
  // parked_key stays: the wait most likely goes on, and a signal routed
  // meanwhile is better posted here than run on an idle processor.
  Handled ran = Handled::none;
  for (;;) {
    std::uint64_t ready = pending_for(*s) & ~s->mask.load(std::memory_order_acquire);
    if (!ready) return ran;
    int sig = lowest(ready);
    SignalInfo i;
    if (take(*s, sig, &i) && run_here(sig, i))
      ran = restarts(sig) && ran != Handled::interrupt ? Handled::restart : Handled::interrupt;
  }
}

}  // namespace

void enable_interrupts() noexcept {
  if (interrupts_on.load(std::memory_order_acquire)) return;
  if (!rt::this_processor_at_entry()) return;  // no fibres here (a fork child's threads are glibc's)
  static std::atomic_flag starting = ATOMIC_FLAG_INIT;
  if (starting.test_and_set(std::memory_order_acq_rel)) return;
  int (*create)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*) = nullptr;
  rt::sys::find_symbol(create, "libc.so.6", "pthread_create");
  pthread_t t;
  if (!create || create(&t, nullptr, &interrupter, nullptr) != 0) return;  // handlers wait for a delivery point
  rt::parking_lot::signal_hooks.interrupted.store(&on_interrupted, std::memory_order_release);
  rt::parking_lot::signal_hooks.parking.store(&on_parking, std::memory_order_release);
  rt::parking_lot::signal_hooks.io_waiting.store(&on_io_waiting, std::memory_order_release);
  interrupts_on.store(true, std::memory_order_release);
}

bool fibre_mask(std::uint64_t* out) noexcept {
  SignalState* s = fibre_state();
  if (!s) return false;
  *out = s->mask.load(std::memory_order_relaxed);
  return true;
}

// What is pending for s and open, run here. Not noexcept, unlike
// deliver_pending: a handler it runs may end the thread (pthread_exit),
// and the unwinding must pass (kill's await_routing).
void run_pending(SignalState& s) {
  for (;;) {
    std::uint64_t mask = s.mask.load(std::memory_order_acquire);
    std::uint64_t ready = pending_for(s) & ~mask;
    if (__builtin_expect(ready == 0, 1)) return;
    int sig = lowest(ready);
    SignalInfo i;
    if (take(s, sig, &i)) run_here(sig, i);
  }
}

void deliver_pending() noexcept {
  if (SignalState* s = fibre_state()) run_pending(*s);
}

}  // namespace loom::capi::pthread_signal

using namespace loom;
using namespace loom::capi;
using namespace loom::capi::pthread_signal;

extern "C" {

int pthread_sigmask(int how, const sigset_t* set, sigset_t* old) {
  if (SignalState* s = fibre_state()) return set_mask(*s, how, set, old);
  auto mask = glibc().sigmask;  // (not followed by '(': <signal.h> has a sigmask macro)
  return mask(how, set, old);
}

int sigprocmask(int how, const sigset_t* set, sigset_t* old) noexcept {
  if (SignalState* s = fibre_state()) {
    if (int e = set_mask(*s, how, set, old)) {
      *errno_slot() = e;
      return -1;
    }
    return 0;
  }
  return glibc().procmask(how, set, old);
}

int pthread_kill(pthread_t t, int sig) {
  if (sig < 0 || sig >= NSIG || sig == 32 || sig == 33) return EINVAL;
  if (pthread_t g = forking_thread_in_child(t)) return glibc().kill(g, sig);
  SignalState* target = signal_state(t);
  SignalState* self = fibre_state();
  if (!target) {
    if (glibc_thread_of_fork_child(t)) return glibc().kill(t, sig);
    if (t != loom_self()) return ESRCH;
    if (sig == 0) return 0;
    int e = *errno_slot();  // a caller without a record: its own kernel thread
    int r = ::syscall(SYS_tgkill, ::getpid(), ::syscall(SYS_gettid), sig) == 0 ? 0 : *errno_slot();
    *errno_slot() = e;
    return r;
  }
  // A thread that has finished, not yet joined: glibc (2.34 on) sends
  // nothing and returns 0.
  if (sig == 0 || target->ended.load(std::memory_order_acquire)) return 0;
  return send(*target, sig, SignalInfo{SI_TKILL, int(::getpid()), unsigned(::getuid()), nullptr}, target == self);
}

int pthread_sigqueue(pthread_t t, int sig, const union sigval value) {
  if (sig < 0 || sig >= NSIG || sig == 32 || sig == 33) return EINVAL;
  if (pthread_t g = forking_thread_in_child(t)) return glibc().sigqueue(g, sig, value);
  SignalState* target = signal_state(t);
  if (!target && glibc_thread_of_fork_child(t)) return glibc().sigqueue(t, sig, value);
  if (!target) return t == loom_self() ? ENOTSUP : ESRCH;
  if (target->ended.load(std::memory_order_acquire)) return ESRCH;  // finished (glibc: its tid is gone)
  if (sig == 0) return 0;
  return send(*target, sig, SignalInfo{SI_QUEUE, int(::getpid()), unsigned(::getuid()), value.sival_ptr},
              target == fibre_state());
}

int loom_pthread_raise(int sig) {
  SignalState* s = fibre_state();
  if (!s) return glibc().raise(sig);
  if (sig < 0 || sig >= NSIG || sig == 32 || sig == 33) {
    *errno_slot() = EINVAL;
    return -1;
  }
  if (sig == 0) return 0;
  return send(*s, sig, SignalInfo{SI_TKILL, int(::getpid()), unsigned(::getuid()), nullptr}, true);
}

// A kill that the kernel delivers to this process among others — to its
// process group (kill(0), killpg), or to itself where send_to_self leaves
// it to the kernel (SIGCONT; a caller that blocks it while another thread
// does not) — for a signal the program handles, from a fibre: the kernel
// hands it to a kernel thread of its choice, whose trampoline routes it (or
// runs its handler there) a moment later. The sender waits for that
// trampoline to end (its count for the signal moves; at most 20 ms: the
// kernel may hold it, every kernel thread blocking it, or the handler may
// jump out), then runs what is pending for it. Meanwhile it is the
// signal's awaiting sender (awaiting_kill): a trampoline on an idle
// processor or a thread of loom's posts it to the sender, where it would
// have run it there, after the call (an outside review: a handler of
// 100 ms outlasted the wait): so a handler due on the
// sender has run when kill returns, as POSIX asks when the sender is the
// only thread that does not block it (an outside review: kill(0) and
// killpg ran it after the call).
bool reaches_self(pid_t pid, int sig) {
  if (sig <= 0 || sig >= NSIG || sig == 32 || sig == 33 || sig == SIGKILL || sig == SIGSTOP || synchronous(sig) ||
      fork_child.load(std::memory_order_relaxed) || !fibre_state())
    return false;
  if (pid != 0 && pid != ::getpid() && !(pid < -1 && -pid == ::getpgrp())) return false;
  return action_of(sig) == Action::handler;
}

void await_routing(SignalState& s, int sig, unsigned seen) {
  timespec start;
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  for (unsigned spins = 0; routings(sig) == seen; ++spins) {
    if (spins < 256) {
      rt::cpu_relax();
      continue;
    }
    timespec now;
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - start.tv_sec) * 1'000'000'000L + (now.tv_nsec - start.tv_nsec) > 20'000'000L) break;
    rt::raw_syscall(SYS_sched_yield, 0, 0, 0, 0, 0, 0);
  }
  awaiting_kill(sig, &s, nullptr);
  run_pending(s);
}

int loom_pthread_kill_pid(pid_t pid, int sig) {
  if (pid == ::getpid() && send_to_self(sig, SI_USER, nullptr)) return 0;
  SignalState* waiting = reaches_self(pid, sig) ? fibre_state() : nullptr;
  const unsigned seen = waiting ? routings(sig) : 0;
  if (waiting) awaiting_kill(sig, nullptr, waiting);
  long r = rt::raw_syscall(SYS_kill, pid, sig, 0, 0, 0, 0);
  if (r < 0) {
    if (waiting) awaiting_kill(sig, waiting, nullptr);
    *errno_slot() = int(-r);
    return -1;
  }
  if (waiting) await_routing(*waiting, sig, seen);
  return 0;
}

int loom_pthread_sigqueue_pid(pid_t pid, int sig, const union sigval value) {
  if (pid == ::getpid()) {
    queue_failed();  // (cleared)
    if (send_to_self(sig, SI_QUEUE, value.sival_ptr)) {
      if (!queue_failed()) return 0;
      *errno_slot() = EAGAIN;  // the realtime queue is full: dropped, as the kernel refuses it
      return -1;
    }
    if (sig >= SIGRTMIN && sig <= SIGRTMAX && queue_full()) {  // the trampoline would drop it
      *errno_slot() = EAGAIN;
      return -1;
    }
  }
  siginfo_t si;
  to_siginfo(sig, SignalInfo{SI_QUEUE, int(::getpid()), unsigned(::getuid()), value.sival_ptr}, &si);
  long r = rt::raw_syscall(SYS_rt_sigqueueinfo, pid, sig, reinterpret_cast<long>(&si), 0, 0, 0);
  if (r < 0) {
    *errno_slot() = int(-r);
    return -1;
  }
  return 0;
}

int sigpending(sigset_t* set) noexcept {
  SignalState* s = fibre_state();
  if (!s) return glibc().sigpending(set);
  sigset_t k;
  if (glibc().sigpending(&k) != 0) return -1;
  to_set((to_bits(&k) | pending_for(*s)) & s->mask.load(std::memory_order_relaxed), set);
  return 0;
}

int sigwait(const sigset_t* __restrict set, int* __restrict sig) {
  SignalState* s = fibre_state();
  if (!s) return glibc().sigwait(set, sig);
  SignalInfo i;
  int r = wait_for(*s, to_bits(set) & ~kUnblockable, -1, &i);
  if (r < 0) return -r;
  *sig = r;
  return 0;
}

static int fill(int r, siginfo_t* info, const SignalInfo& i) {
  if (r < 0) {
    *errno_slot() = -r;
    return -1;
  }
  if (info) to_siginfo(r, i, info);
  return r;
}

int sigwaitinfo(const sigset_t* __restrict set, siginfo_t* __restrict info) {
  SignalState* s = fibre_state();
  if (!s) return glibc().sigwaitinfo(set, info);
  SignalInfo i;
  return fill(wait_for(*s, to_bits(set) & ~kUnblockable, -1, &i), info, i);
}

int sigtimedwait(const sigset_t* __restrict set, siginfo_t* __restrict info, const struct timespec* __restrict t) {
  SignalState* s = fibre_state();
  if (!s) return glibc().sigtimedwait(set, info, t);
  if (t && (t->tv_sec < 0 || t->tv_nsec < 0 || t->tv_nsec >= 1'000'000'000)) {
    *errno_slot() = EINVAL;
    return -1;
  }
  SignalInfo i;
  return fill(wait_for(*s, to_bits(set) & ~kUnblockable, deadline_of(t), &i), info, i);
}

int sigsuspend(const sigset_t* set) {
  SignalState* s = fibre_state();
  if (!s) return glibc().sigsuspend(set);
  std::uint64_t was = s->mask.load(std::memory_order_relaxed);
  std::uint64_t now = to_bits(set) & ~kUnblockable;
  if (!prepare_wait(*s)) {
    *errno_slot() = ENOMEM;
    return -1;
  }
  for (std::uint64_t g = now & ~was; g; g &= g - 1) guard(lowest(g));
  s->mask.store(now, std::memory_order_seq_cst);
  {
    WaitScope w(*s, ~now);
    for (;;) {
      drain(*s);
      std::uint64_t ready = pending_for(*s) & ~now;
      SignalInfo i;
      if (ready && take(*s, lowest(ready), &i)) {
        if (run_here(lowest(ready), i)) break;  // its handler ran (with the mask sigsuspend gave)
        continue;                               // ignored: the wait goes on
      }
      sleep_on(*s, -1);
    }
  }
  s->mask.store(was, std::memory_order_release);
  deliver_pending();
  *errno_slot() = EINTR;
  return -1;
}

int pause(void) {
  SignalState* s = fibre_state();
  if (!s) return glibc().pause();
  sigset_t now;
  to_set(s->mask.load(std::memory_order_relaxed), &now);
  return sigsuspend(&now);
}

// glibc's other mask functions change the kernel thread's mask themselves
// (its internal sigprocmask and sigsuspend): here they go through the ones
// above, on a fibre its mask, elsewhere glibc's as before.
int sighold(int sig) noexcept {
  sigset_t one;
  sigemptyset(&one);
  if (sigaddset(&one, sig) < 0) return -1;
  return sigprocmask(SIG_BLOCK, &one, nullptr);
}

int sigrelse(int sig) noexcept {
  sigset_t one;
  sigemptyset(&one);
  if (sigaddset(&one, sig) < 0) return -1;
  return sigprocmask(SIG_UNBLOCK, &one, nullptr);
}

// System V's sigpause(sig) (X/Open's, __xpg_sigpause), and the BSD one
// (__sigpause(mask, 0)), whose argument is a mask of the first 32 signals.
int __sigpause(int sig_or_mask, int is_sig) {
  sigset_t set;
  if (is_sig) {
    if (sigprocmask(SIG_BLOCK, nullptr, &set) < 0) return -1;
    if (sigdelset(&set, sig_or_mask) < 0) return -1;
  } else {
    to_set(std::uint32_t(sig_or_mask), &set);
  }
  return sigsuspend(&set);
}
int __xpg_sigpause(int sig) { return __sigpause(sig, 1); }
// The symbol sigpause itself (<signal.h> maps the name to __xpg_sigpause).
int loom_sigpause_symbol(int sig) __asm__("sigpause");
int loom_sigpause_symbol(int sig) { return __sigpause(sig, 1); }

// BSD's, deprecated but still in glibc: masks of the first 32 signals.
static int bsd_mask(int how, int mask) {
  sigset_t set, old;
  to_set(std::uint32_t(mask), &set);
  if (sigprocmask(how, &set, &old) < 0) return -1;
  return int(std::uint32_t(to_bits(&old)));
}
int sigblock(int mask) noexcept { return bsd_mask(SIG_BLOCK, mask); }
int sigsetmask(int mask) noexcept { return bsd_mask(SIG_SETMASK, mask); }
int siggetmask(void) noexcept { return bsd_mask(SIG_BLOCK, 0); }

}  // extern "C"

// ---- alternate signal stacks ------------------------------------------------------------
//
// sigaltstack is per thread: a fibre's is kept in its SignalState and
// reported back, and never given to its processor's kernel thread, whose
// alternate stack is loom's own (a fibre's overflow is reported from it;
// runtime/sched/overflow.cpp). Given to the kernel thread, one thread's
// stack would serve every fibre that runs there, and be left registered
// after the thread freed it (Rust's runtime frees each thread's at its
// end). A handler installed with SA_ONSTACK runs on the processor's
// alternate stack (256 KiB, runtime/sched/overflow.cpp), not on the
// thread's own: never SS_ONSTACK then, and so never EPERM. Callers that
// are not fibres with a record get glibc's.
extern "C" int sigaltstack(const stack_t* ss, stack_t* old) noexcept {
  SignalState* s = signal_state();
  if (!s || !rt::this_processor_at_entry()) return int(::syscall(SYS_sigaltstack, ss, old));
  if (ss) {
    if (ss->ss_flags & ~(SS_DISABLE | int(1u << 31))) {  // (1 << 31: Linux's SS_AUTODISARM)
      *errno_slot() = EINVAL;
      return -1;
    }
    if (!(ss->ss_flags & SS_DISABLE) && ss->ss_size < std::size_t(MINSIGSTKSZ)) {
      *errno_slot() = ENOMEM;
      return -1;
    }
  }
  if (old) {
    old->ss_sp = s->alt_sp;
    old->ss_size = s->alt_size;
    old->ss_flags = s->alt_flags & SS_DISABLE;
  }
  if (ss) {
    const bool off = ss->ss_flags & SS_DISABLE;
    s->alt_sp = off ? nullptr : ss->ss_sp;
    s->alt_size = off ? 0 : ss->ss_size;
    s->alt_flags = off ? SS_DISABLE : 0;
  }
  return 0;
}
