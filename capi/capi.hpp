// capi/capi.hpp — shared by the C API's sources (include/loom/loom.h):
// errno across switches, objects built in place on first use, and C
// timespecs turned into loom deadlines.
//
// The C API is glue: every primitive is the C++ one of loom/sync.hpp, held
// in place inside the C struct. Nothing here synchronises on its own except
// the one-byte state that builds a statically initialised object exactly
// once.
#pragma once

#define LOOM_KEEP_LIBC_ERRNO  // inside the library errno is glibc's macro
#include <semaphore.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <new>
#include <utility>

#include "loom/fibre.hpp"
#include "loom/loom.h"
#include "loom/sync.hpp"

namespace loom::capi {

// ---- errno -------------------------------------------------------------------
//
// A fibre may resume on another kernel thread after any switch, and glibc's
// __errno_location() is declared const, so a compiler may reuse &errno
// computed before a switch. errno_slot() is a call it can neither inline
// nor fold (noinline, and an asm with a memory clobber makes it impure):
// every use looks the slot up on the kernel thread running at that moment.
int* errno_slot() noexcept;

// Saves the caller's errno on entry of a call that may switch; done(e)
// after the last switch sets errno to e if nonzero, else back to the saved
// value — so each fibre keeps its own errno across loom calls.
class ErrnoKeeper {
 public:
  ErrnoKeeper() noexcept : saved_(*errno_slot()) {}
  void done(int e = 0) noexcept { *errno_slot() = e ? e : saved_; }
  int saved() const noexcept { return saved_; }

 private:
  int saved_;
};

// ---- objects built on first use ---------------------------------------------------
//
// _loom_state of every C synchronisation object.
enum : unsigned char {
  kUnset = 0,      // all zero: static initialiser (or never initialised)
  kBuilding = 1,   // one caller is constructing it
  kReady = 2,      // holds a live C++ object
  kDestroyed = 3,  // destroy()ed: EINVAL until initialised again
};

inline unsigned char load_state(const unsigned char* s) { return __atomic_load_n(s, __ATOMIC_ACQUIRE); }
inline void store_state(unsigned char* s, unsigned char v) { __atomic_store_n(s, v, __ATOMIC_RELEASE); }

void wait_while_building(const unsigned char* state) noexcept;

// The C++ object of C object `o`, built by `make(void* where)` if `o` is
// still in its static (all-zero) state; nullptr when it was destroyed or,
// with build_unset = false, never initialised.
//
// Every lock and unlock of a C mutex starts here (loom-memcached: 18 times
// a request), so the common case — built, ready — is an inline load and
// compare; building, waiting for another builder and refusing are out of
// line (object_slow). When all of it was one template, mutex_of was not
// inlined: 15 instructions a use, 165 of loom-memcached's 4,379 a request
// (callgrind; docs/BENCHMARKS.md, "one request side by side").
template <class T, class C, class Make>
__attribute__((noinline)) T* object_slow(C* o, Make&& make, bool build_unset) {
  void* where = &o->_loom_impl;
  for (;;) {
    unsigned char s = load_state(&o->_loom_state);
    if (s == kReady) return std::launder(static_cast<T*>(where));
    if (s == kUnset && build_unset) {
      if (__atomic_compare_exchange_n(&o->_loom_state, &s, kBuilding, false, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
        make(where);
        store_state(&o->_loom_state, kReady);
        return std::launder(static_cast<T*>(where));
      }
      continue;
    }
    if (s == kBuilding) {
      wait_while_building(&o->_loom_state);
      continue;
    }
    return nullptr;
  }
}

template <class T, class C, class Make>
inline T* object(C* o, Make&& make, bool build_unset = true) {
  static_assert(sizeof(T) <= sizeof(o->_loom_impl), "loom.h: C object too small for its C++ object");
  static_assert(alignof(T) <= alignof(decltype(o->_loom_impl)), "loom.h: C object under-aligned");
  if (__builtin_expect(load_state(&o->_loom_state) == kReady, 1))
    return std::launder(reinterpret_cast<T*>(&o->_loom_impl));
  return object_slow<T>(o, std::forward<Make>(make), build_unset);
}

// ---- time ----------------------------------------------------------------------------

inline bool valid(const timespec* t) { return t && t->tv_nsec >= 0 && t->tv_nsec < 1000000000; }
inline bool supported_clock(clockid_t c) { return c == CLOCK_REALTIME || c == CLOCK_MONOTONIC; }
std::int64_t clock_ns(clockid_t c) noexcept;
// An absolute time on clock c (REALTIME or MONOTONIC) as a monotonic
// Deadline: a past time is expired (but not kNow); far ones are kForever.
Deadline deadline_of(clockid_t c, const timespec& abs) noexcept;
// True once clock c has reached abs (a realtime clock may have been set
// back after the deadline was computed).
bool reached(clockid_t c, const timespec& abs) noexcept;

// The timed-wait loop every timed C call shares: op(kNow) first (POSIX: the
// abstime need not be valid when nothing blocks), then EINVAL for a bad
// abstime, then op(deadline) until the clock has really reached abstime.
// `busy` is what op(kNow) returns when it would block.
template <class Op>
int timed(clockid_t c, const timespec* abs, int busy, Op&& op) {
  if (!supported_clock(c)) return EINVAL;
  int e = op(kNow);
  if (e != busy) return e;
  if (!valid(abs)) return EINVAL;
  for (;;) {
    e = op(deadline_of(c, *abs));
    if (e != ETIMEDOUT || reached(c, *abs)) return e;
  }
}

// ---- for libloom-pthread (capi/pthread/) -----------------------------------------------
//
// pthread_cleanup_push, compiled against glibc's <pthread.h> (C without
// exceptions), registers a buffer with __pthread_register_cancel; libloom-
// pthread keeps that chain per fibre of loom_create (and main) in its
// record, with the value pthread_exit passes while the handlers run.
struct GlibcCleanup {
  void* chain = nullptr;   // the innermost __pthread_unwind_buf_t
  void* retval = nullptr;  // pthread_exit's argument, while the chain runs
};
// The caller's; nullptr for a caller without a record (a kernel thread that
// is not a processor, a C++ loom::Fibre).
GlibcCleanup* glibc_cleanup() noexcept;
// Set by libloom-pthread (capi/pthread/cancel.cpp): takes the innermost
// buffer off the chain and longjmps into it (its handler then calls
// __pthread_unwind_next, which calls continue_exit). loom_exit's unwinding
// calls it when it reaches the buffer's frame.
extern void (*run_glibc_cleanup)(GlibcCleanup*);
// glibc's own cancellation points (stdio's writes, open, lockf...: glibc's
// internal SYSCALL_CANCEL, which loom does not intercept) check the running
// block's `cancelhandling` word, the fibre's own with per-fibre TLS. Set by
// libloom-pthread when that is on and glibc says where the word is: glibc's
// __pthread_register_cancel and __pthread_unregister_cancel, called on the
// fibre (they write its own block's chain of buffers, which glibc's
// unwinding follows). nullptr: glibc's checks are not told of loom's
// requests (the link route, LOOM_TLS=off).
// interrupt: a request found the fibre `f` inside one of those calls (its
// word's asynchronous-type bit, which glibc sets around the system call):
// signal the kernel thread running it, as glibc's pthread_cancel signals a
// thread's tid, so that the call is ended there and the fibre acts.
struct GlibcCancel {
  void (*reg)(void* buf);
  void (*unreg)(void* buf);
  void (*interrupt)(void* f);
};
extern const GlibcCancel* glibc_cancel;
// The innermost buffer of the calling thread's block's chain (glibc's
// register stores it in a probe's link, taken back at once); with
// glibc_cancel set.
void* glibc_innermost_buffer() noexcept;
// Sets glibc_cancel when it can (capi/pthread/cancel.cpp).
void tell_glibc_checks() noexcept;
// glibc's unwinding (a glibc cancellation point acted on a request loom put
// in the fibre's word) reached the innermost buffer's handler, which called
// __pthread_unwind_next: loom takes over as if it had acted itself (the
// caller has already taken the buffer off both chains).
void glibc_acted() noexcept;
// Goes on with the calling thread's loom_exit after a glibc cleanup
// buffer's handler ran (returns only for a caller without a record).
void continue_exit();
// A cancellation point of the C API (capi/thread.cpp): if the calling fibre
// has a pending cancellation request (runtime/sched/cancel.hpp) and a
// record, it acts on it (loom_exit(LOOM_CANCELED)) and does not return.
// One load when nothing is pending. Calls that wait call it on entry and
// again after a wait the request ended (ECANCELED, ParkResult::Cancelled).
// (On a kernel thread that is not a fibre — a fork child's threads, glibc's
// own — the thread's cancellation is glibc's: cancel_point is glibc's
// pthread_testcancel, kernel_testcancel.)
void cancel_point();
void kernel_testcancel();
// Whether a cancellation request of the calling fibre is the C layer's to
// act on (it has a record: loom_create's threads and main). A wait may be
// ended by a request only then: a C++ loom::Fibre asked to stop
// (Fibre::request_stop) keeps its sleeps, condvar and semaphore waits.
bool cancel_acts_here() noexcept;
// Brackets a loom::CondVar or Semaphore wait of the C API that is a
// cancellation point (loom_cond_wait, loom_sem_wait...): a request wakes it
// (it ends as a timeout would, runtime/sync/wait.hpp); call cancel_point
// after it.
struct CancellableWait {
  CancellableWait() noexcept;
  ~CancellableWait();
  void* fibre;
};
// libloom-pthread's signals of one thread (capi/pthread/sigthread.cpp): its
// mask, what is pending for it, and what it waits for. Kept in the record's
// slot, which outlives the record (slots are reused, never freed), so that
// a signal handler on any kernel thread may read and post to any slot, and
// so that `wake` is never destroyed under a poster. Bit s-1 of a set is
// signal s.
// The instruction of the program's system calls through syscall(2)
// (capi/pthread/futex.cpp), in [loom_program_syscall,
// loom_program_syscall_end): where a hurried handler may run
// (capi/pthread/sigthread.cpp).
#if defined(__x86_64__)
}  // namespace loom::capi
extern "C" long loom_program_syscall(long n, long a0, long a1, long a2, long a3, long a4, long a5);
extern "C" const char loom_program_syscall_end[];
namespace loom::capi {
#endif
// Whether code at ip is loom's (libloom's or libloom-pthread's executable
// segments, noted at libloom-pthread's start: capi/pthread/futex.cpp).
bool loom_code_at(std::uintptr_t ip) noexcept;
// Whether a system call instruction at ip is the program's: outside loom's
// code, or the program's own syscall(2)'s (loom_program_syscall).
bool program_call_site(std::uintptr_t ip) noexcept;
// Bracket the program's own system call through syscall(2) (futex.cpp):
// with the calling fibre's cancellation enabled and asynchronous, the call
// is inside glibc's "asynchronous" window, where a request ends it as
// glibc's asynchronous cancellation would (capi/thread.cpp). enter returns
// the fibre's glibc word with that bit set, or nullptr (not such a fibre:
// nothing to undo); either may act on a request already made (loom_exit's
// unwinding: they do not return then).
int* async_call_enter();
void async_call_leave(int* word);

struct SignalInfo {  // what sigwaitinfo reports of a pending signal
  int code;
  int pid;
  unsigned uid;
  void* value;
};
struct SignalState {
  std::atomic<std::uint64_t> mask{0};      // blocked (pthread_sigmask)
  std::atomic<std::uint64_t> pending{0};   // sent to this thread, not yet taken
  std::atomic<std::uint64_t> waits{0};     // a wait ends when one of these arrives
  sem_t wake{};                            // its waits wait on it (all zero: a valid, empty semaphore)
  std::atomic<SignalInfo*> info{nullptr};  // [64], made with the slot's first record
  // Where its fibre is parked in the parking lot (null: it is not), and
  // that fibre, for a handler that must cut the wait short; and whether
  // one was asked for (sigthread.cpp, "interrupts").
  std::atomic<const void*> parked_key{nullptr};
  std::atomic<const void*> parked_fibre{nullptr};
  // Where its fibre sleeps in the io layer (rt::WaitKind: a descriptor or a
  // poll set; none when it does not), and what on: the wait a handler due
  // on it posts (sigthread.cpp, "interrupts").
  std::atomic<unsigned char> io_kind{0};
  std::atomic<const void*> io_object{nullptr};
  // Its alternate signal stack as sigaltstack set it (sigthread.cpp; flags
  // SS_DISABLE: none): kept, reported, never given to the kernel thread.
  // Written and read by the thread itself.
  void* alt_sp = nullptr;
  std::size_t alt_size = 0;
  int alt_flags = 0;
  std::atomic<bool> interrupt{false};
  // Its thread's fibre (its id: the fibre may end meanwhile), for a
  // handler due on it while it is blocked in a system call loom does not
  // see (sigthread.cpp, "hurry"). Set as the fibre starts.
  std::atomic<std::uint64_t> fibre_id{0};
  // Its thread has finished (it may not be joined yet): pthread_kill sends
  // nothing, routing passes it by (sigthread.cpp, thread_ended).
  std::atomic<bool> ended{false};
  // Of `pending`, the signals routed here from the process (not sent to
  // this thread): what it did not take when it ends goes back to the process.
  std::atomic<std::uint64_t> routed{0};
  // The realtime instances sent to this thread, queued (sigroute.cpp): the
  // first and last node of signal 32 + k's list (node number + 1; 0: none),
  // under the realtime lock.
  std::uint32_t rt_head[33]{}, rt_tail[33]{};
};
// The mask the next thread the caller creates starts with, instead of the
// caller's (pthread_attr_setsigmask_np): set just before loom_create, which
// takes it; null clears it (after a loom_create that failed early).
void next_thread_mask(const std::uint64_t* mask) noexcept;
// The caller's (nullptr for a caller without a record); async-signal-safe.
SignalState* signal_state() noexcept;
// The live thread `id` names; nullptr for a stale or foreign handle.
SignalState* signal_state(loom_t id) noexcept;
// Calls fn on every live thread's state until it returns true (then true);
// async-signal-safe. A thread may end meanwhile: what is posted to it is lost.
bool any_signal_state(bool (*fn)(SignalState&, void*), void* arg) noexcept;

// How many fibres loom_create has made so far. With LOOM_PTHREAD_STATS=1 in
// the environment the count is also written to stderr at exit ("loom: N
// threads ran as fibres"): tests use it to tell a run on fibres from a
// silent fall-through to glibc's threads.
long fibres_created() noexcept;

// loom_rest from a thread of loom_create (capi/thread.cpp): the restarted
// fibre must run the thread's trampoline, so that loom_self, loom_exit and
// the record's end keep working. Rewrites fn/arg to it (storing the
// caller's in the record); leaves them for any other caller.
void rest_as_thread(void (*&fn)(void*), void*& arg) noexcept;

// What a loom_attr_t says of a new fibre (stack size, priority, cluster,
// color), for a fibre that is not a thread of loom_create (loom_rest_start_
// until): 0, or EINVAL for an object loom_attr_init did not initialise.
int fibre_attr_of(const loom_attr_t* a, FibreAttr* out) noexcept;

// The child of a fork: called when the thread that forked ends there (its
// start routine returns) before the process exits with status 0; set by
// libloom-pthread, whose threads made in the child must end first.
extern void (*fork_child_thread_end)();
// A thread of loom_create (or main, by pthread_exit) finishes, before a
// joiner can see it: set by libloom-pthread (sigthread.cpp), which marks
// its signal state ended and hands the process-directed signals still
// pending there back to the process.
extern void (*signal_thread_end)(SignalState& s);
// The child of a fork: the thread that forked (`id`, its handle from before
// the fork) ends there with pthread_exit(retval); if it is main, a thread
// joining it gets retval (only main's record can be joined without its
// fibre's own exit).
void record_exit_value(loom_t id, void* retval) noexcept;
// `id` is main's, and its name is still loom's default ("main"): glibc's
// answer is the process's name (libloom-pthread's pthread_getname_np).
bool unnamed_main(loom_t id) noexcept;
// `id` is main's (libloom-pthread asks glibc about the initial thread's stack).
bool is_main_thread(loom_t id) noexcept;
// A thread's CPU clock (pthread_getcpuclockid): a clock id of loom's, and
// from now on its fibre's CPU time is kept (sched/cpu_clock.hpp). ESRCH:
// not a live thread of loom_create (or main).
int thread_cpu_clock(loom_t id, clockid_t* out) noexcept;
// clock_gettime of a clock that is loom's: a thread's CPU clock, or
// CLOCK_THREAD_CPUTIME_ID on a thread of loom's (its fibre's own time, kept
// from this first read on). False: the kernel's clock. *ns = all ones: the
// thread is gone (EINVAL, as the kernel says of a dead thread's clock).
bool fibre_cpu_clock(clockid_t c, std::uint64_t* ns) noexcept;

}  // namespace loom::capi
