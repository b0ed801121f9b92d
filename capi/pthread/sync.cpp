// capi/pthread/sync.cpp — glibc's synchronisation objects, by glibc's names,
// in glibc's sizes, on loom's parking lot (runtime/sync/parking_lot.hpp).
//
// A program sized these objects with glibc's headers, and may have filled
// them with glibc's static initialisers, so this file includes the same
// <pthread.h> and <semaphore.h> and reinterprets their bytes. Every layout
// below keeps glibc's initialisers meaningful: all zero is an unlocked
// default object, and the few non-zero initialisers put their kind where
// glibc does (a mutex's __kind at offset 16, a rwlock's __flags at 48).
//
//   pthread_mutex_t (40)  @0 state (LOCKED 1, PARKED 2)  @4 recursion count
//                         @8 owner (recursive, errorcheck: fibre or thread)
//                         @16 kind (glibc's: 0 normal, 1 recursive,
//                             2 errorcheck, 3 adaptive; -1 destroyed)
//                         @23 condvar waiters that will take it back
//   pthread_cond_t (48)   @0 sequence  @4 waiters  @8 clock id
//   pthread_rwlock_t (56) @0 state (WRITER 1, READERS_PARKED 2,
//                         WRITERS_PARKED 4, readers x 8)  @24 writer
//                         @48 kind (0,1 prefer readers as glibc does;
//                             2 PREFER_WRITER_NONRECURSIVE)
//   pthread_barrier_t (32) @0 arrived | generation << 32  @8 count
//                         @12 threads inside wait (destroy waits for 0)
//   pthread_spinlock_t (4), pthread_once_t (4): one word each.
//   sem_t (32)            @0 value | kernel-thread waiters << 32 and @8
//                         private/shared: glibc's own layout, so named
//                         semaphores (glibc's sem_open) work here too;
//                         bit 63 of @0: fibres parked (private only);
//                         @12 posts in progress that found fibres parked,
//                         @16 link and @24 count of deferred wake-ups
//                         (sem_post from signal handlers).
//
// Cancellation points (cancel.cpp): the condvar waits (a request acts on
// entry, or ends the park and acts once the mutex is taken again) and the
// semaphore waits, even when they need not wait (a private semaphore's park ends
// with the request; a shared one looks for it between its polls).
//
// Waiting: a fibre parks in the parking lot, a kernel thread that is not a
// processor (or a processor's thread outside a fibre) waits there on a
// futex; calls before the runtime started are such kernel threads. The
// blocking paths keep each fibre's errno across switches (capi.hpp). A
// signal handler due on a parked fibre runs on it (sigthread.cpp, the
// parking lot's interrupt); sem_wait then fails with EINTR when the handler
// has no SA_RESTART, as glibc's does, and every other wait goes on.
//
// Process-shared, robust and priority-protocol objects are shared.cpp's
// (they must work between processes and outlive their owner): init marks
// them in their own bytes — glibc's __kind bits in a mutex, a bit in a
// condvar's clock word or an rwlock's kind word, a mark at @16 in a barrier —
// and the calls here hand them over on a branch loom's own objects never
// take (a bad mutex kind) or predict (one test per rwlock call and barrier
// wait, one per condvar wait and per signal that finds waiters). A mutex's
// top byte at @20 counts condvar waiters that will take it back: destroy
// gives EBUSY then, as glibc's. Spin locks and semaphores may be
// process-shared here: a spin lock needs nothing of loom, and a shared
// semaphore keeps glibc's futex protocol — a kernel thread sleeps on the
// shared futex, a fibre polls it (see sem_wait_shared_fibre).
// pthread_rwlock_destroy, as glibc's, checks nothing.
//
// errno: the blocking paths save the caller's errno on entry and set it (to
// the error, or back) on the kernel thread the fibre resumed on. A program
// compiled against glibc may still read the wrong one: <errno.h> declares
// __errno_location const, so a compiler may keep &errno from before the
// call — and after a migration that is the old kernel thread's errno. Only
// errno-setting calls that block are affected (here sem_*wait); the
// pthread_* functions return their errors. tests/pthread_lib's program reads
// errno through a call that cannot be folded; unmodified binaries cannot be
// changed so, and may read a stale errno after sem_wait/sem_timedwait fail.
#include <linux/futex.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <optional>

#include "base/futex.hpp"
#include "base/sys.hpp"
#include "capi.hpp"
#include "sched/cancel.hpp"
#include "sched/processor.hpp"
#include "shared.hpp"
#include "sync/parking_lot.hpp"
#include "sync/wait.hpp"

extern "C" int loom_pthread_mutex_lock(pthread_mutex_t* m);  // (below; nothrow.c's pthread_mutex_lock calls it)

namespace loom::capi::pthread {

namespace {

namespace pl = rt::parking_lot;
using rt::ParkResult;

static_assert(sizeof(pthread_mutex_t) == 40 && sizeof(pthread_cond_t) == 48 && sizeof(pthread_rwlock_t) == 56 &&
                  sizeof(pthread_barrier_t) == 32 && sizeof(sem_t) == 32 && sizeof(pthread_once_t) == 4 &&
                  sizeof(pthread_spinlock_t) == 4 && sizeof(pthread_mutexattr_t) == 4 &&
                  sizeof(pthread_condattr_t) == 4 && sizeof(pthread_rwlockattr_t) == 8 &&
                  sizeof(pthread_barrierattr_t) == 4,
              "glibc x86-64 object sizes");

template <class T>
std::atomic<T>& at(const volatile void* base, std::size_t offset) {
  static_assert(sizeof(std::atomic<T>) == sizeof(T) && std::atomic<T>::is_always_lock_free);
  return *reinterpret_cast<std::atomic<T>*>(const_cast<char*>(static_cast<const volatile char*>(base)) + offset);
}

// No object is touched after the operation that may let another thread
// destroy it (docs/DESIGN.md). tests/pthread_lib's destroy-after-use program
// compiles this file with LOOM_SYNC_TEST_HOOK naming a function of its own,
// called right after each such operation (released) and between a waiter's
// parked mark and its park (parking): it stalls the caller there while the
// other thread moves on, destroys the object and poisons its memory. The
// library's own build has no hook.
#ifdef LOOM_SYNC_TEST_HOOK
extern "C" void LOOM_SYNC_TEST_HOOK(const void* object, int point);
#define released(object) LOOM_SYNC_TEST_HOOK(object, 0)
#define parking(object) LOOM_SYNC_TEST_HOOK(object, 1)
#else
#define released(object) ((void)0)
#define parking(object) ((void)0)
#endif

bool on_fibre() {
  rt::Processor* p = rt::this_processor();
  if (!p) return false;
  rt::Fibre* f = p->current();
  return f && f != &p->idle_fibre();
}

// Lets others run while a spinner waits: the processor's other fibres (the
// holder may be one of them), or other threads.
void yield_now() {
  if (on_fibre())
    rt::this_processor()->yield();
  else
    rt::sys::sched_yield();
}

// An absolute time on clock c as a parking deadline (kForever for none).
Deadline deadline(clockid_t c, const timespec* abs) { return abs ? deadline_of(c, *abs) : kForever; }

// ---- mutex -------------------------------------------------------------------------

constexpr std::uint32_t kLocked = 1, kParked = 2;
constexpr rt::ParkToken kHandoff = 1;
enum {
  kNormal = PTHREAD_MUTEX_TIMED_NP,
  kRecursive = PTHREAD_MUTEX_RECURSIVE_NP,
  kErrorcheck = PTHREAD_MUTEX_ERRORCHECK_NP,
  kAdaptive = PTHREAD_MUTEX_ADAPTIVE_NP
};
constexpr int kSpinTries = 200;  // as loom::Mutex's spin policy

std::atomic<std::uint32_t>& mstate(pthread_mutex_t* m) { return at<std::uint32_t>(m, 0); }
std::uint32_t& mcount(pthread_mutex_t* m) { return *reinterpret_cast<std::uint32_t*>(reinterpret_cast<char*>(m) + 4); }
std::atomic<const void*>& mowner(pthread_mutex_t* m) { return at<const void*>(m, 8); }
std::atomic<int>& mkind(pthread_mutex_t* m) { return at<int>(m, 16); }
bool owned_kind(int k) { return k == kRecursive || k == kErrorcheck; }

// The holder of a normal or adaptive mutex, for the fibre listing only
// (nothing here reads it back): the thread pointer, which is the holder
// fibre's own block where each thread has one (libloom-pthread's default,
// sched/tls.hpp). One load of %fs:0 and a plain store on lock, a plain
// store on unlock: the fast path stays a CAS.
void note_holder(pthread_mutex_t* m) { mowner(m).store(__builtin_thread_pointer(), std::memory_order_relaxed); }

// rt::pthread_mutex_holder, for the listing's "held by".
// The mutex is read as memory that may be gone: its waiter may have been
// woken, and it destroyed and unmapped, since the listing found the waiter
// blocked on it (the listing faulted so, under load).
const void* holder_of(const void* object, bool* is_tcb) {
  pthread_mutex_t m;
  if (!rt::sys::peek(object, &m, sizeof m)) return nullptr;
  int k = mkind(&m).load(std::memory_order_relaxed);
  if (k < kNormal || k > kAdaptive) return nullptr;
  *is_tcb = !owned_kind(k);
  return mowner(&m).load(std::memory_order_relaxed);
}
[[maybe_unused]] const bool holder_hook = (rt::pthread_mutex_holder = &holder_of, true);

// loom's mutex policy (LOOM_MUTEX), read once: the barging spectrum of
// loom::Mutex carried over — blocking and spin barge, baton hands the lock
// to the first waiter, hybrid to a waiter parked for 100 us or more.
MutexPolicy policy() {
  static std::atomic<int> cached{-1};
  int p = cached.load(std::memory_order_relaxed);
  if (p < 0) cached.store(p = int(default_mutex_policy()), std::memory_order_relaxed);
  return MutexPolicy(p);
}

bool hand_over(std::int64_t since) {
  switch (policy()) {
    case MutexPolicy::baton:
      return true;
    case MutexPolicy::hybrid:
      return rt::now_ns() - since >= 100'000;
    default:
      return false;
  }
}

// The contended acquire. The word is the parked mark's handshake (see
// parking_lot.hpp): a waiter sets PARKED, then parks only while the word is
// still LOCKED|PARKED; release() clears LOCKED first and, seeing PARKED,
// unparks under the bucket lock that validate also runs under.
// Whether the calling kernel thread was of the asynchronous type, which it
// leaves for the deferred one (pthread_setcanceltype: cancel.cpp's, which
// is glibc's for a thread that is no fibre).
bool kernel_defer_async() {
  int old = PTHREAD_CANCEL_DEFERRED;
  return pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &old) == 0 && old == PTHREAD_CANCEL_ASYNCHRONOUS;
}
void kernel_restore_async() { pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, nullptr); }

// async_ok: the caller is pthread_mutex_lock, timedlock or clocklock, whose
// frames the unwinding may pass (nothrow.c; a noexcept C++ one ended it in
// std::terminate, an outside review found for timedlock), and acting there
// is what glibc does. Never the re-lock of a condvar wait: cancelled, it
// must return with the mutex held for the cleanup handlers (the same review
// found them run without it, and mutual exclusion broken).
int acquire_slow(std::atomic<std::uint32_t>& st, Deadline d, bool spin, bool async_ok = false) {
  int spins = spin ? kSpinTries : 0;
  ErrnoKeeper keep;
  for (;;) {
    std::uint32_t s = st.load(std::memory_order_relaxed);
    if (!(s & kLocked)) {
      if (st.compare_exchange_weak(s, s | kLocked, std::memory_order_acquire)) return keep.done(), 0;
      continue;
    }
    if (!(s & kParked)) {
      if (spins > 0) {
        --spins;
        rt::cpu_relax();
        continue;
      }
      if (!st.compare_exchange_weak(s, s | kParked, std::memory_order_relaxed)) continue;
    }
    pl::ParkOps ops;
    ops.ctx = &st;
    ops.stamp = policy() == MutexPolicy::hybrid;  // only hybrid's hand_over reads it
    ops.wait_kind = rt::WaitKind::pthread_mutex;  // the key is the mutex (its state word, at 0)
    ops.validate = [](void* c) {
      return static_cast<std::atomic<std::uint32_t>*>(c)->load(std::memory_order_relaxed) == (kLocked | kParked);
    };
    ops.timed_out = [](void* c, bool was_last) {
      if (was_last) static_cast<std::atomic<std::uint32_t>*>(c)->fetch_and(~kParked, std::memory_order_relaxed);
    };
    // No cancellation point; but with cancellation enabled and of the
    // asynchronous type a request ends the wait and acts, as glibc's signal
    // would end it (glibc's tst-cancel1: cancelled while it waits for a
    // mutex). The type is the fibre's own bit: one load.
    // A kernel thread (a fork child's: glibc's) of glibc's asynchronous
    // type: glibc's SIGCANCEL would unwind from inside the park, through
    // the parking lot's frames (std::terminate, 1 run in 7 of glibc's
    // tst-cancel1 forked). It waits deferred instead, cancellably (the
    // preload's pthread_cancel wakes it: cancel_kernel), and goes back to
    // the asynchronous type after, which acts on a request then, here.
    rt::Fibre* self = async_ok ? rt::this_fibre_or_null() : nullptr;
    const bool kernel_async = async_ok && !self && kernel_defer_async();
    ops.cancellable = kernel_async || (self &&
                                       (self->cancel.load(std::memory_order_relaxed) &
                                        (rt::kCancelAsync | rt::kCancelDisabled)) == rt::kCancelAsync &&
                                       cancel_acts_here());
    parking(&st);
    rt::Parked r = pl::park(&st, ops, d);
    if (kernel_async) kernel_restore_async();  // (acts when a request stands)
    if (r.result == ParkResult::Unparked && r.token == kHandoff) return keep.done(), 0;  // it is ours
    if (r.result == ParkResult::TimedOut) return keep.done(), ETIMEDOUT;
    if (r.result == ParkResult::Cancelled && self) cancel_point();  // (does not return when the request stands)
    spins = spin ? kSpinTries : 0;
  }
}

void release(std::atomic<std::uint32_t>& st) {
  std::uint32_t expected = kLocked;
  if (st.compare_exchange_strong(expected, 0, std::memory_order_release)) return released(&st);
  // PARKED: wake one, under the bucket lock, and decide the word there.
  pl::unpark_one(
      &st,
      [](void* c, rt::UnparkResult r) -> rt::ParkToken {
        auto& s = *static_cast<std::atomic<std::uint32_t>*>(c);
        if (r.unparked && hand_over(r.since)) {
          s.store(kLocked | (r.more ? kParked : 0), std::memory_order_relaxed);
          return kHandoff;  // still LOCKED: ownership passes to the waiter
        }
        s.store(r.more ? kParked : 0, std::memory_order_release);
        return 0;
      },
      &st);
  released(&st);
}

int valid_kind(pthread_mutex_t* m) {
  int k = mkind(m).load(std::memory_order_relaxed);
  return k >= kNormal && k <= kAdaptive ? k : -1;
}

// d: kNow for trylock, else a deadline (kForever for lock).
int mutex_lock(pthread_mutex_t* m, Deadline d, bool async_ok = false) {
  int k = valid_kind(m);
  if (k < 0) return shared::mutex_lock(m, d);  // not loom's: shared.cpp's, or EINVAL
  auto& st = mstate(m);
  if (!owned_kind(k)) {
    std::uint32_t z = 0;
    if (st.compare_exchange_strong(z, kLocked, std::memory_order_acquire)) return note_holder(m), 0;
    if (d == kNow) return EBUSY;
    int e = acquire_slow(st, d, k == kAdaptive || policy() == MutexPolicy::spin, async_ok);
    if (e == 0) note_holder(m);
    return e;
  }
  const void* self = rt::identity();
  if (mowner(m).load(std::memory_order_relaxed) == self) {
    if (k == kRecursive) {
      if (mcount(m) == UINT_MAX) return EAGAIN;
      ++mcount(m);
      return 0;
    }
    return d == kNow ? EBUSY : EDEADLK;
  }
  std::uint32_t z = 0;
  if (!st.compare_exchange_strong(z, kLocked, std::memory_order_acquire)) {
    if (d == kNow) return EBUSY;
    if (int e = acquire_slow(st, d, policy() == MutexPolicy::spin, async_ok)) return e;
  }
  mowner(m).store(self, std::memory_order_relaxed);
  mcount(m) = 1;
  return 0;
}

int mutex_unlock(pthread_mutex_t* m) {
  int k = valid_kind(m);
  if (k < 0) return shared::mutex_unlock(m);
  if (owned_kind(k)) {
    if (mowner(m).load(std::memory_order_relaxed) != rt::identity()) return EPERM;
    if (k == kRecursive && --mcount(m) > 0) return 0;
  }
  mowner(m).store(nullptr, std::memory_order_relaxed);
  release(mstate(m));
  return 0;
}

// (Called only from the C definitions of nothrow.c: async_ok.)
int mutex_timed(pthread_mutex_t* m, clockid_t c, const timespec* abs) {
  if (!supported_clock(c)) return EINVAL;
  int e = mutex_lock(m, kNow);
  if (e != EBUSY) return e;
  int k = valid_kind(m);
  if (k == kErrorcheck && mowner(m).load(std::memory_order_relaxed) == rt::identity()) return EDEADLK;
  if (!valid(abs)) return EINVAL;
  for (;;) {
    e = mutex_lock(m, deadline(c, abs), true);
    if (e != ETIMEDOUT || reached(c, *abs)) return e;
  }
}

// ---- mutex attributes: one int. bits 0-1 type, 4 robust, 8-9 protocol.

constexpr int kAttrType = 3, kAttrRobust = 16, kAttrProtoShift = 8, kAttrProtoMask = 3 << kAttrProtoShift;
int& attr_int(const void* a) { return *reinterpret_cast<int*>(const_cast<void*>(a)); }

constexpr int kAttrPshared = 64;

// Every attribute's pshared, as a bit of an int: PTHREAD_PROCESS_SHARED
// makes the object shared.cpp's.
int set_pshared(int& word, int bit, int v) {
  if (v != PTHREAD_PROCESS_PRIVATE && v != PTHREAD_PROCESS_SHARED) return EINVAL;
  word = (word & ~bit) | (v == PTHREAD_PROCESS_SHARED ? bit : 0);
  return 0;
}
int get_pshared(int word, int bit, int* v) {
  *v = word & bit ? PTHREAD_PROCESS_SHARED : PTHREAD_PROCESS_PRIVATE;
  return 0;
}

// ---- condition variable ----------------------------------------------------------

std::atomic<std::uint32_t>& cseq(pthread_cond_t* c) { return at<std::uint32_t>(c, 0); }
std::atomic<std::uint32_t>& cwaiters(pthread_cond_t* c) { return at<std::uint32_t>(c, 4); }
std::atomic<int>& cclock(pthread_cond_t* c) { return at<int>(c, 8); }

// The waiter reads the sequence while it still holds the mutex and parks
// only if it is unchanged; a signaller bumps it before unparking. validate
// and unpark share the bucket lock, so a signal between the waiter's
// unlock and its park makes validate fail (a spurious wake-up, which POSIX
// allows) instead of being lost. `waiters` lets a signal with nobody
// waiting skip the parking lot (Dekker pair: waiter increments, then reads
// the sequence; signaller bumps the sequence, then reads waiters), and is
// the waiter's last touch of the condvar, so destroy can wait for it.
int cond_wait_foreign(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock, const timespec* abs);

// A process-shared condvar's waiter (shared.cpp) lets the mutex go and takes
// it back with the library's own calls, whatever the mutex: pthread_mutex_unlock,
// and what nothrow.c's pthread_mutex_lock calls.
const shared::MutexCalls kMutexCalls{&pthread_mutex_unlock, &loom_pthread_mutex_lock};

int cond_wait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock, const timespec* abs) {
  if (__builtin_expect(cclock(c).load(std::memory_order_relaxed) & shared::kCondShared, 0))
    return shared::cond_wait(c, m, clock & ~shared::kCondShared, abs, kMutexCalls);
  int k = valid_kind(m);
  if (k < 0) return cond_wait_foreign(c, m, clock, abs);
  const void* self = nullptr;
  if (owned_kind(k)) {
    self = rt::identity();
    if (mowner(m).load(std::memory_order_relaxed) != self) return EPERM;
  }
  if (abs && !valid(abs)) return EINVAL;
  cancel_point();  // a cancellation point (cancel.cpp): on entry with the mutex held, ...
  Deadline d = deadline(clock, abs);
  ErrnoKeeper keep;
  auto& seq = cseq(c);
  cwaiters(c).fetch_add(1, std::memory_order_seq_cst);
  std::uint32_t s = seq.load(std::memory_order_seq_cst);
  // Release the mutex entirely (a recursive one too), and take it back
  // with its count after waking.
  std::uint32_t count = mcount(m);
  shared::cond_users_add(m, 1);
  mowner(m).store(nullptr, std::memory_order_relaxed);
  release(mstate(m));
  rt::Parked r = pl::park_if(
      &seq, [&seq, s] { return seq.load(std::memory_order_relaxed) == s; }, d, rt::WaitKind::condvar,
      /*cancellable=*/cancel_acts_here() || !on_fibre());  // (a kernel thread: pthread_cancel's cancel_kernel)
  cwaiters(c).fetch_sub(1, std::memory_order_release);  // last touch of c
  released(c);
  auto& st = mstate(m);
  std::uint32_t z = 0;
  if (!st.compare_exchange_strong(z, kLocked, std::memory_order_acquire))
    acquire_slow(st, kForever, k == kAdaptive || policy() == MutexPolicy::spin);
  if (self) {
    mowner(m).store(self, std::memory_order_relaxed);
    mcount(m) = count;
  } else {
    note_holder(m);
  }
  shared::cond_users_add(m, -1);
  keep.done();
  if (r.result == ParkResult::Cancelled) cancel_point();  // ... and when a request ended the wait, the mutex taken again
  // A realtime clock set back makes the monotonic deadline early: then it
  // is a spurious wake-up, never an early ETIMEDOUT.
  return r.result == ParkResult::TimedOut && reached(clock, *abs) ? ETIMEDOUT : 0;
}

// A condvar of loom's with a mutex of shared.cpp's (robust, say): the same
// protocol, the mutex released and taken back through its own calls, and
// their error (EOWNERDEAD) returned.
int cond_wait_foreign(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock, const timespec* abs) {
  if (!shared::is_mutex_kind(mkind(m).load(std::memory_order_relaxed))) return EINVAL;
  if (abs && !valid(abs)) return EINVAL;
  cancel_point();  // a cancellation point, as cond_wait's: on entry with the mutex held, ...
  Deadline d = deadline(clock, abs);
  ErrnoKeeper keep;
  auto& seq = cseq(c);
  cwaiters(c).fetch_add(1, std::memory_order_seq_cst);
  std::uint32_t s = seq.load(std::memory_order_seq_cst);
  shared::cond_users_add(m, 1);
  if (int e = shared::mutex_unlock(m)) {
    shared::cond_users_add(m, -1);
    cwaiters(c).fetch_sub(1, std::memory_order_release);
    return keep.done(), e;
  }
  rt::Parked r = pl::park_if(
      &seq, [&seq, s] { return seq.load(std::memory_order_relaxed) == s; }, d, rt::WaitKind::condvar,
      /*cancellable=*/cancel_acts_here() || !on_fibre());
  cwaiters(c).fetch_sub(1, std::memory_order_release);  // last touch of c
  int e = shared::mutex_lock(m, kForever);
  if (e == 0 || e == EOWNERDEAD) shared::cond_users_add(m, -1);
  keep.done();
  if (r.result == ParkResult::Cancelled && (e == 0 || e == EOWNERDEAD)) cancel_point();  // ... and when a request ended it
  if (e) return e;
  return r.result == ParkResult::TimedOut && reached(clock, *abs) ? ETIMEDOUT : 0;
}

// ---- rwlock -------------------------------------------------------------------------
//
// Readers and writers park on one key, the lock itself, each with its kind's
// parked bit as park token, so that one bucket lock orders every waiter's
// validate against every unlock's decision. An unlock that finds a parked
// bit does not release first and then look (a reader could take the lock
// meanwhile, release it and destroy it, as POSIX allows, under the unlocker's
// feet): it keeps the lock, and under the bucket lock (unpark_some) chooses
// whom to wake and stores the word once — released, and handed to those
// woken (a writer, or every reader taken, counted in). That store is its
// last touch of the rwlock. A waiter woken with kHandoff owns the lock; one
// woken with 0 (the handover was no longer possible: a reader came in
// meanwhile) tries again.

constexpr std::uint32_t kWriter = 1, kReadersParked = 2, kWritersParked = 4, kReader = 8;
constexpr std::uint32_t kParkedBits = kReadersParked | kWritersParked;

std::atomic<std::uint32_t>& rwstate(pthread_rwlock_t* rw) { return at<std::uint32_t>(rw, 0); }
std::atomic<const void*>& rwowner(pthread_rwlock_t* rw) { return at<const void*>(rw, 24); }
bool prefer_writer(pthread_rwlock_t* rw) {
  return at<std::uint32_t>(rw, 48).load(std::memory_order_relaxed) == PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP;
}

// Readers wait while a writer holds it — and, preferring writers, while a
// writer waits (glibc's default lets readers in past waiting writers, so
// that a thread may take a read lock it already holds).
bool readers_blocked(std::uint32_t s, bool pw) { return (s & kWriter) || (pw && (s & kWritersParked)); }

// Who gives up what, for rw_handover.
enum class RwLeaving { writer, reader, nobody };

struct RwHandover {
  pthread_rwlock_t* rw;
  RwLeaving leaving;
  bool pw;
  rt::ParkToken took = 0;
};

// Whom to wake (under the bucket lock): after a writer, readers first
// unless writers are preferred; after the last reader, a writer first; when
// nobody leaves (a waiting writer timed out), only readers its mark held
// back, and only if no other writer keeps them out.
pl::Take rw_choose(void* c, rt::ParkToken queued) {
  auto* h = static_cast<RwHandover*>(c);
  bool writers = queued & kWritersParked, readers = queued & kReadersParked;
  // A writer that timed out while another holds the lock wakes nobody: the
  // holder's unlock will.
  if (h->leaving == RwLeaving::nobody && (rwstate(h->rw).load(std::memory_order_relaxed) & kWriter))
    return {h->took = 0, 0};
  bool writer_first = h->leaving == RwLeaving::reader || (h->leaving == RwLeaving::writer && (h->pw || !readers));
  if (writer_first && writers) return {h->took = kWritersParked, 1};
  if (readers && !(h->leaving == RwLeaving::nobody && h->pw && writers)) return {h->took = kReadersParked, UINT_MAX};
  return {h->took = 0, 0};
}

// The one store (under the bucket lock): our hold released, the parked
// bits as the queue now says, and the lock handed to those taken if it is
// still theirs to have.
rt::ParkToken rw_decide(void* c, pl::SomeResult r) {
  auto* h = static_cast<RwHandover*>(c);
  auto& st = rwstate(h->rw);
  std::uint32_t s = st.load(std::memory_order_relaxed);
  for (;;) {
    std::uint32_t base = h->leaving == RwLeaving::writer ? s & ~kWriter : h->leaving == RwLeaving::reader ? s - kReader : s;
    base = (base & ~kParkedBits) | std::uint32_t(r.remaining);
    std::uint32_t next = base;
    rt::ParkToken token = 0;
    if (r.unparked && h->took == kWritersParked && (base & ~kParkedBits) == 0) {
      next = base | kWriter;
      token = kHandoff;
    } else if (r.unparked && h->took == kReadersParked && !(base & kWriter)) {
      next = base + r.unparked * kReader;
      token = kHandoff;
    }
    if (st.compare_exchange_weak(s, next, std::memory_order_acq_rel, std::memory_order_relaxed)) return token;
  }
}

void rw_handover(pthread_rwlock_t* rw, RwLeaving leaving) {
  RwHandover h{rw, leaving, prefer_writer(rw)};
  pl::unpark_some(rw, &rw_choose, &rw_decide, &h);
  released(rw);
}

struct RwPark {
  pthread_rwlock_t* rw;
  bool pw;
};

bool rw_shared(pthread_rwlock_t* rw) {
  return __builtin_expect(at<std::uint32_t>(rw, 48).load(std::memory_order_relaxed) & shared::kRwShared, 0);
}

int rdlock(pthread_rwlock_t* rw, Deadline d) {
  if (rw_shared(rw)) return shared::rw_rdlock(rw, d);
  auto& st = rwstate(rw);
  const bool pw = prefer_writer(rw);
  std::optional<ErrnoKeeper> keep;  // only once it may switch
  int e;
  for (;;) {
    std::uint32_t s = st.load(std::memory_order_relaxed);
    if (!readers_blocked(s, pw)) {
      if (s >= UINT32_MAX - kReader) {
        e = EAGAIN;
        break;
      }
      if (st.compare_exchange_weak(s, s + kReader, std::memory_order_acquire)) {
        e = 0;
        break;
      }
      continue;
    }
    if (d == kNow) {
      e = EBUSY;
      break;
    }
    if ((s & kWriter) && rwowner(rw).load(std::memory_order_relaxed) == rt::identity()) {
      e = EDEADLK;
      break;
    }
    if (!(s & kReadersParked) && !st.compare_exchange_weak(s, s | kReadersParked, std::memory_order_relaxed)) continue;
    if (!keep) keep.emplace();
    RwPark ctx{rw, pw};
    pl::ParkOps ops;
    ops.ctx = &ctx;
    ops.park_token = kReadersParked;
    ops.wait_kind = rt::WaitKind::rwlock_read;
    ops.validate = [](void* c) {
      auto* p = static_cast<RwPark*>(c);
      std::uint32_t v = rwstate(p->rw).load(std::memory_order_relaxed);
      return (v & kReadersParked) && readers_blocked(v, p->pw);
    };
    ops.timed_out = [](void* c, bool was_last) {
      if (was_last) rwstate(static_cast<RwPark*>(c)->rw).fetch_and(~kReadersParked);
    };
    parking(rw);
    rt::Parked r = pl::park(rw, ops, d);
    if (r.result == ParkResult::Unparked && r.token == kHandoff) {
      e = 0;  // counted in by the unlocker
      break;
    }
    if (r.result == ParkResult::TimedOut) {
      e = ETIMEDOUT;
      break;
    }
  }
  if (keep) keep->done();
  return e;
}

int wrlock(pthread_rwlock_t* rw, Deadline d) {
  if (rw_shared(rw)) return shared::rw_wrlock(rw, d);
  auto& st = rwstate(rw);
  const void* self = rt::identity();
  std::optional<ErrnoKeeper> keep;  // only once it may switch
  int e;
  for (;;) {
    std::uint32_t s = st.load(std::memory_order_relaxed);
    if ((s & ~kParkedBits) == 0) {
      if (st.compare_exchange_weak(s, s | kWriter, std::memory_order_acquire)) {
        rwowner(rw).store(self, std::memory_order_relaxed);
        e = 0;
        break;
      }
      continue;
    }
    if (d == kNow) {
      e = EBUSY;
      break;
    }
    if ((s & kWriter) && rwowner(rw).load(std::memory_order_relaxed) == self) {
      e = EDEADLK;
      break;
    }
    if (!(s & kWritersParked) && !st.compare_exchange_weak(s, s | kWritersParked, std::memory_order_seq_cst)) continue;
    if (!keep) keep.emplace();
    pl::ParkOps ops;
    ops.ctx = rw;
    ops.park_token = kWritersParked;
    ops.wait_kind = rt::WaitKind::rwlock_write;
    ops.validate = [](void* c) {
      std::uint32_t v = rwstate(static_cast<pthread_rwlock_t*>(c)).load(std::memory_order_seq_cst);
      return (v & kWritersParked) && (v & ~kParkedBits) != 0;
    };
    ops.timed_out = [](void* c, bool was_last) {
      if (was_last) rwstate(static_cast<pthread_rwlock_t*>(c)).fetch_and(~kWritersParked);
    };
    parking(rw);
    rt::Parked r = pl::park(rw, ops, d);
    if (r.result == ParkResult::Unparked && r.token == kHandoff) {
      rwowner(rw).store(self, std::memory_order_relaxed);  // handed over by the unlocker
      e = 0;
      break;
    }
    if (r.result == ParkResult::TimedOut) {
      // Readers held back by our mark (preferring writers) may enter now.
      // (We are still inside a call on the lock: it is alive.)
      rw_handover(rw, RwLeaving::nobody);
      e = ETIMEDOUT;
      break;
    }
  }
  if (keep) keep->done();
  return e;
}

int rw_unlock(pthread_rwlock_t* rw) {
  if (rw_shared(rw)) return shared::rw_unlock(rw);
  auto& st = rwstate(rw);
  std::uint32_t s = st.load(std::memory_order_relaxed);
  if (s & kWriter) {
    if (rwowner(rw).load(std::memory_order_relaxed) != rt::identity()) return EPERM;
    rwowner(rw).store(nullptr, std::memory_order_relaxed);
    // Nobody parked: the release is one CAS, and the last touch.
    while (!(s & kParkedBits))
      if (st.compare_exchange_weak(s, s & ~kWriter, std::memory_order_release, std::memory_order_relaxed))
        return released(rw), 0;
    rw_handover(rw, RwLeaving::writer);
    return 0;
  }
  for (;;) {
    if (s < kReader) return EPERM;
    // Not the last reader, or nobody parked: one CAS. The last reader with
    // someone parked keeps its hold until rw_decide. (A parked writer set
    // its mark before validating "held", seq_cst both sides: either it
    // sees no readers and retries, or this CAS fails on its mark.)
    if (s >= 2 * kReader || !(s & kParkedBits)) {
      if (st.compare_exchange_weak(s, s - kReader, std::memory_order_seq_cst, std::memory_order_relaxed))
        return released(rw), 0;
      continue;
    }
    rw_handover(rw, RwLeaving::reader);
    return 0;
  }
}

template <class Op>
int rw_timed(clockid_t c, const timespec* abs, Op&& op) {
  if (!supported_clock(c)) return EINVAL;
  int e = op(kNow);
  if (e != EBUSY) return e;
  if (!valid(abs)) return EINVAL;
  for (;;) {
    e = op(deadline(c, abs));
    if (e != ETIMEDOUT || reached(c, *abs)) return e;
  }
}

// ---- barrier ----------------------------------------------------------------------------

std::atomic<std::uint64_t>& bword(pthread_barrier_t* b) { return at<std::uint64_t>(b, 0); }
std::atomic<std::uint32_t>& bcount(pthread_barrier_t* b) { return at<std::uint32_t>(b, 8); }
std::atomic<std::uint32_t>& binside(pthread_barrier_t* b) { return at<std::uint32_t>(b, 12); }

// ---- once -------------------------------------------------------------------------------

constexpr int kOnceRunning = 1, kOnceDone = 2, kOnceParked = 4;

// ---- semaphores ---------------------------------------------------------------------------

constexpr int kFutexShared = 128;  // glibc's sem.private for a shared semaphore
std::atomic<std::uint64_t>& sdata(sem_t* s) { return at<std::uint64_t>(s, 0); }
std::atomic<std::uint32_t>& svalue(sem_t* s) { return at<std::uint32_t>(s, 0); }
int sprivate(sem_t* s) { return at<int>(s, 8).load(std::memory_order_relaxed); }
std::atomic<std::uint32_t>& sposting(sem_t* s) { return at<std::uint32_t>(s, 12); }
std::atomic<sem_t*>& snext(sem_t* s) { return at<sem_t*>(s, 16); }
std::atomic<std::uint32_t>& spending(sem_t* s) { return at<std::uint32_t>(s, 24); }
constexpr std::uint64_t kOneWaiter = std::uint64_t(1) << 32;
// In the data word of a private semaphore, beside glibc's count of
// kernel-thread waiters: fibres may be parked (set by a fibre before it
// parks, cleared under the bucket lock when none is left). A post reads it
// in the same CAS that adds its unit.
constexpr std::uint64_t kFibresParked = std::uint64_t(1) << 63;
constexpr std::uint64_t kKernelWaiters = ~kFibresParked & ~std::uint64_t(0xffffffff);

// Clears the parked mark when no fibre is left (the unpark's callback, under
// the bucket lock that the fibres' validate runs under).
rt::ParkToken sem_unparked(void* c, rt::UnparkResult r) {
  if (!r.more) sdata(static_cast<sem_t*>(c)).fetch_and(~kFibresParked, std::memory_order_relaxed);
  return 0;
}

long futex(void* addr, int op, int private_flag, std::uint32_t val, const timespec* t) {
  if (t && t->tv_sec < 0) {  // long past: the kernel would say EINVAL, glibc says ETIMEDOUT
    *errno_slot() = ETIMEDOUT;
    return -1;
  }
  int flags = private_flag == kFutexShared ? 0 : FUTEX_PRIVATE_FLAG;
  return rt::sys_futex(addr, op | flags, val, t, nullptr, FUTEX_BITSET_MATCH_ANY);
}

// glibc's own protocol (nptl/sem_waitcommon.c), for kernel threads and for
// shared semaphores: count ourselves in the high half, sleep on the value
// word while it is 0 (the kernel compares), take a unit and leave the count
// in one CAS. Interoperates with glibc's sem_post in another process.
// A cancellation point of glibc's (the thread is glibc's): its request sets
// a flag and wakes nobody, so the sleep is cut into slices of
// kSemCancelSliceNs, and glibc's pthread_testcancel acts between them.
constexpr std::int64_t kSemCancelSliceNs = 50'000'000;

int sem_wait_futex(sem_t* s, clockid_t clock, const timespec* abs) {
  auto& data = sdata(s);
  data.fetch_add(kOneWaiter, std::memory_order_seq_cst);
  for (;;) {
    std::uint64_t d = data.load(std::memory_order_seq_cst);
    if (std::uint32_t(d) == 0) {
      // The slice's end on the caller's clock (monotonic without a deadline).
      const clockid_t c = abs ? clock : CLOCK_MONOTONIC;
      const std::int64_t end = clock_ns(c) + kSemCancelSliceNs;
      const timespec slice{time_t(end / 1000000000), long(end % 1000000000)};
      const bool last = abs && std::int64_t(abs->tv_sec) * 1000000000 + abs->tv_nsec <= end;
      int op = FUTEX_WAIT_BITSET | (c == CLOCK_REALTIME ? FUTEX_CLOCK_REALTIME : 0);
      if (futex(&svalue(s), op, sprivate(s), 0, last ? abs : &slice) < 0) {
        int e = *errno_slot();
        if ((e == ETIMEDOUT && last) || e == EINTR) {
          data.fetch_sub(kOneWaiter, std::memory_order_relaxed);
          return e;
        }
        if (e == ETIMEDOUT) {  // the slice's end: glibc's request, if any, acts here
          data.fetch_sub(kOneWaiter, std::memory_order_relaxed);
          kernel_testcancel();
          data.fetch_add(kOneWaiter, std::memory_order_seq_cst);
        }
      }
      continue;
    }
    if (data.compare_exchange_weak(d, d - 1 - kOneWaiter, std::memory_order_acquire)) return 0;
  }
}

// sem_post is async-signal-safe (POSIX), so its wake of a parked fibre must
// not take a lock that the code it interrupted may hold — and unparking
// takes the bucket's spin lock, then the scheduler's locks (a processor's
// idle list). So the post queues the semaphore, lock-free, for the waker
// thread, which unparks in its place:
//   - `pending` counts posts not yet seen by the waker; the post that moves
//     it from 0 pushes the semaphore onto a Treiber stack (one CAS loop,
//     safe to re-enter from a handler: a push interrupted by a push leaves
//     both on the stack) and wakes the waker's futex (a system call);
//   - the waker takes the whole stack with one exchange (no ABA: nobody
//     else pops), and for each semaphore unparks as many fibres as there
//     are units, then CASes `pending` from what it read back to 0; a post
//     meanwhile makes the CAS fail and the waker looks again. That CAS is
//     its last touch of the semaphore: sem_destroy waits for pending == 0.
// Kernel-thread waiters are woken by the post itself through the futex, as
// glibc does (a system call takes no user-space lock).
// The cost is a hop through the waker for every post that finds a fibre
// waiting; a post that finds none is a CAS (and the loads before it).
std::atomic<sem_t*> g_deferred{nullptr};
std::atomic<int> g_deferred_word{0};
std::atomic<int> g_waker_state{0};  // 0 none, 1 starting, 2 running

void* waker_main(void*) {
  sigset_t all;
  sigfillset(&all);
  (rt::sys::pthread().sigmask)(SIG_BLOCK, &all, nullptr);
  for (;;) {
    int w = g_deferred_word.load(std::memory_order_acquire);
    sem_t* list = g_deferred.exchange(nullptr, std::memory_order_acquire);
    if (!list) {
      rt::futex_wait(&g_deferred_word, w);
      continue;
    }
    while (list) {
      sem_t* s = list;
      list = snext(s).load(std::memory_order_relaxed);
      for (;;) {
        std::uint32_t p = spending(s).load(std::memory_order_acquire);
        std::uint32_t units = svalue(s).load(std::memory_order_seq_cst);
        while (units-- > 0 && pl::unpark_one(s, &sem_unparked, s).unparked) {
        }
        if (spending(s).compare_exchange_strong(p, 0, std::memory_order_acq_rel)) break;
      }
    }
  }
  return nullptr;
}

void start_waker() {
  int expected = 0;
  if (g_waker_state.load(std::memory_order_acquire) == 2) return;
  if (!g_waker_state.compare_exchange_strong(expected, 1)) {
    while (g_waker_state.load(std::memory_order_acquire) != 2) rt::sys::sched_yield();
    return;
  }
  // A fork child has no waker: the next fibre to wait there starts one.
  // (A semaphore queued for the parent's waker at the fork stays queued.)
  static bool atfork_done = false;
  if (!atfork_done) {
    atfork_done = true;
    pthread_atfork(nullptr, nullptr, [] {
      g_deferred.store(nullptr, std::memory_order_relaxed);
      g_deferred_word.store(0, std::memory_order_relaxed);
      g_waker_state.store(0, std::memory_order_relaxed);
    });
  }
  pthread_t t;
  const auto& sys = rt::sys::pthread();
  if (sys.create(&t, nullptr, &waker_main, nullptr) == 0) {
    sys.detach(t);
    sys.setname_np(t, "loom-sem-waker");
  }
  g_waker_state.store(2, std::memory_order_release);
}

void defer_wake(sem_t* s) {
  if (spending(s).fetch_add(1, std::memory_order_seq_cst) != 0) return;  // queued already
  sem_t* head = g_deferred.load(std::memory_order_relaxed);
  do {
    snext(s).store(head, std::memory_order_relaxed);
  } while (!g_deferred.compare_exchange_weak(head, s, std::memory_order_release, std::memory_order_relaxed));
  g_deferred_word.fetch_add(1, std::memory_order_seq_cst);
  rt::futex_wake(&g_deferred_word, 1);
}

// A fibre waits on a private semaphore in the parking lot. The parked mark
// is set with the value seen 0, so a post's increment comes after it and
// sees it; validate (value still 0, mark still set) and the waker's unpark
// share the bucket lock.
int sem_wait_fibre(sem_t* s, clockid_t clock, const timespec* abs) {
  auto& data = sdata(s);
  start_waker();  // before anyone can see us waiting: see sem_post
  Deadline dl = deadline(clock, abs);
  int e = 0;
  pl::ParkOps ops;
  ops.ctx = s;
  ops.wait_kind = rt::WaitKind::semaphore;
  ops.cancellable = cancel_acts_here();  // sem_wait's caller acts on ECANCELED (cancel_point)
  ops.interruptible = pl::Interruptible::unless_restart;  // EINTR after a handler without SA_RESTART (sigthread.cpp)
  ops.validate = [](void* c) {
    std::uint64_t v = sdata(static_cast<sem_t*>(c)).load(std::memory_order_seq_cst);
    return std::uint32_t(v) == 0 && (v & kFibresParked);
  };
  ops.timed_out = [](void* c, bool was_last) {
    if (was_last) sdata(static_cast<sem_t*>(c)).fetch_and(~kFibresParked, std::memory_order_relaxed);
  };
  for (;;) {
    std::uint64_t d = data.load(std::memory_order_seq_cst);
    if (std::uint32_t(d) > 0) {
      if (data.compare_exchange_weak(d, d - 1, std::memory_order_acquire)) break;
      continue;
    }
    if (!(d & kFibresParked) && !data.compare_exchange_weak(d, d | kFibresParked, std::memory_order_seq_cst)) continue;
    parking(s);
    rt::Parked r = pl::park(s, ops, dl);
    if (r.result == ParkResult::Cancelled) {
      e = ECANCELED;
      break;
    }
    if (r.result == ParkResult::Interrupted) {  // a handler without SA_RESTART ran (sigthread.cpp)
      e = EINTR;
      break;
    }
    if (r.result == ParkResult::TimedOut) {
      if (abs && !reached(clock, *abs)) {
        dl = deadline(clock, abs);
        continue;
      }
      e = ETIMEDOUT;
      break;
    }
  }
  return e;
}

// A fibre on a process-shared semaphore (sem_open's, or sem_init(s, 1, n)):
// its posters may be in another process, waking only a futex, and a fibre
// cannot sleep on a futex without blocking its processor — which would
// deadlock a poster that is a fibre of the same processor. So it polls,
// sleeping as a fibre between looks, 50 us doubling to 1 ms.
int sem_wait_shared_fibre(sem_t* s, clockid_t clock, const timespec* abs) {
  auto& data = sdata(s);
  std::int64_t pause_ns = 50'000;
  for (;;) {
    std::uint64_t d = data.load(std::memory_order_acquire);
    if (std::uint32_t(d) > 0) {
      if (data.compare_exchange_weak(d, d - 1, std::memory_order_acquire)) return 0;
      continue;
    }
    std::int64_t sleep_ns = pause_ns;
    if (abs) {
      if (reached(clock, *abs)) return ETIMEDOUT;
      std::int64_t left = std::int64_t(abs->tv_sec) * 1000000000 + abs->tv_nsec - clock_ns(clock);
      if (left < sleep_ns) sleep_ns = left > 0 ? left : 0;
    }
    rt::sleep_until_ns(rt::now_ns() + sleep_ns);  // (no stop point: a stopped fibre that is no thread would poll hot)
    if (rt::cancel_pending_here() && cancel_acts_here()) return ECANCELED;  // a cancellation point: looked for between polls
    if (pause_ns < 1'000'000) pause_ns *= 2;
  }
}

int sem_wait_common(sem_t* s, clockid_t clock, const timespec* abs) {
  if (abs && !valid(abs)) return EINVAL;  // glibc looks at the time first
  cancel_point();  // a cancellation point even when it need not wait, as glibc's (tst-cancel12)
  auto& data = sdata(s);
  std::uint64_t d = data.load(std::memory_order_relaxed);
  while (std::uint32_t(d) > 0)
    if (data.compare_exchange_weak(d, d - 1, std::memory_order_acquire)) return 0;
  if (!on_fibre()) return sem_wait_futex(s, clock, abs);
  if (sprivate(s) != kFutexShared) return sem_wait_fibre(s, clock, abs);
  return sem_wait_shared_fibre(s, clock, abs);
}

// Fails with -1 and errno e (kept per fibre), or returns 0 (errno as it was).
int sem_result(ErrnoKeeper& keep, int e) {
  if (e == ECANCELED) cancel_point();  // a request ended the wait
  keep.done(e);
  return e ? -1 : 0;
}

}  // namespace
}  // namespace loom::capi::pthread

using namespace loom;
using namespace loom::capi;
using namespace loom::capi::pthread;

extern "C" {

// ---- mutex ----------------------------------------------------------------------------

int pthread_mutex_init(pthread_mutex_t* m, const pthread_mutexattr_t* a) noexcept {
  int kind = kNormal;
  if (a) {
    int v = attr_int(a);
    kind = v & kAttrType;
    if (v & (kAttrRobust | kAttrPshared | kAttrProtoMask))
      return shared::mutex_init(m, kind, v & kAttrRobust, (v & kAttrProtoMask) >> kAttrProtoShift, v & kAttrPshared,
                                (v & shared::kCeilingMask) >> shared::kCeilingShift);
  }
  std::memset(static_cast<void*>(m), 0, sizeof *m);
  mkind(m).store(kind, std::memory_order_release);
  return 0;
}

int pthread_mutex_destroy(pthread_mutex_t* m) noexcept {
  if (valid_kind(m) < 0) return shared::mutex_destroy(m);
  if ((mstate(m).load(std::memory_order_relaxed) & kLocked) || shared::cond_users(m)) return EBUSY;
  mkind(m).store(-1, std::memory_order_relaxed);
  return 0;
}

// pthread_mutex_lock, timedlock and clocklock themselves are nothrow.c's
// (C frames, which a cancellation's unwinding passes; glibc's declarations
// make C++ ones noexcept, where it would end in std::terminate).
int loom_pthread_mutex_lock(pthread_mutex_t* m) { return mutex_lock(m, kForever, true); }
int loom_pthread_mutex_timedlock(pthread_mutex_t* m, const timespec* abs) {
  return mutex_timed(m, CLOCK_REALTIME, abs);
}
int loom_pthread_mutex_clocklock(pthread_mutex_t* m, clockid_t c, const timespec* abs) {
  return mutex_timed(m, c, abs);
}
int pthread_mutex_trylock(pthread_mutex_t* m) noexcept { return mutex_lock(m, kNow); }
int pthread_mutex_unlock(pthread_mutex_t* m) noexcept { return mutex_unlock(m); }
// Robust and PRIO_PROTECT mutexes are shared.cpp's (EINVAL for loom's, as
// glibc for a mutex that is not robust, or of another protocol).
int pthread_mutex_consistent(pthread_mutex_t* m) noexcept { return shared::mutex_consistent(m); }
int loom_mutex_consistent_np(pthread_mutex_t*) noexcept __asm__("pthread_mutex_consistent_np");
int loom_mutex_consistent_np(pthread_mutex_t* m) noexcept { return shared::mutex_consistent(m); }
int pthread_mutex_getprioceiling(const pthread_mutex_t* m, int* c) noexcept {
  return shared::mutex_getprioceiling(m, c);
}
int pthread_mutex_setprioceiling(pthread_mutex_t* m, int c, int* old) noexcept {
  return shared::mutex_setprioceiling(m, c, old);
}

int pthread_mutexattr_init(pthread_mutexattr_t* a) noexcept {
  attr_int(a) = PTHREAD_MUTEX_DEFAULT;
  return 0;
}
int pthread_mutexattr_destroy(pthread_mutexattr_t*) noexcept { return 0; }
int pthread_mutexattr_settype(pthread_mutexattr_t* a, int type) noexcept {
  if (type < kNormal || type > kAdaptive) return EINVAL;
  attr_int(a) = (attr_int(a) & ~kAttrType) | type;
  return 0;
}
int pthread_mutexattr_gettype(const pthread_mutexattr_t* a, int* type) noexcept {
  *type = attr_int(a) & kAttrType;
  return 0;
}
int pthread_mutexattr_setpshared(pthread_mutexattr_t* a, int v) noexcept {
  return set_pshared(attr_int(a), kAttrPshared, v);
}
int pthread_mutexattr_getpshared(const pthread_mutexattr_t* a, int* v) noexcept {
  return get_pshared(attr_int(a), kAttrPshared, v);
}
int pthread_mutexattr_setrobust(pthread_mutexattr_t* a, int r) noexcept {
  if (r != PTHREAD_MUTEX_STALLED && r != PTHREAD_MUTEX_ROBUST) return EINVAL;
  attr_int(a) = (attr_int(a) & ~kAttrRobust) | (r == PTHREAD_MUTEX_ROBUST ? kAttrRobust : 0);
  return 0;
}
int pthread_mutexattr_getrobust(const pthread_mutexattr_t* a, int* r) noexcept {
  *r = attr_int(a) & kAttrRobust ? PTHREAD_MUTEX_ROBUST : PTHREAD_MUTEX_STALLED;
  return 0;
}
// The _np names are macros or redirects in <pthread.h>; old binaries still
// call them by these symbols.
int loom_mutexattr_setrobust_np(pthread_mutexattr_t* a, int r) noexcept __asm__("pthread_mutexattr_setrobust_np");
int loom_mutexattr_setrobust_np(pthread_mutexattr_t* a, int r) noexcept { return pthread_mutexattr_setrobust(a, r); }
int loom_mutexattr_getrobust_np(const pthread_mutexattr_t* a, int* r) noexcept
    __asm__("pthread_mutexattr_getrobust_np");
int loom_mutexattr_getrobust_np(const pthread_mutexattr_t* a, int* r) noexcept {
  return pthread_mutexattr_getrobust(a, r);
}
// Priority protocols: recorded, and the mutex made shared.cpp's (no
// priority changes: see there).
int pthread_mutexattr_setprotocol(pthread_mutexattr_t* a, int p) noexcept {
  if (p != PTHREAD_PRIO_NONE && p != PTHREAD_PRIO_INHERIT && p != PTHREAD_PRIO_PROTECT) return EINVAL;
  attr_int(a) = (attr_int(a) & ~kAttrProtoMask) | (p << kAttrProtoShift);
  return 0;
}
int pthread_mutexattr_getprotocol(const pthread_mutexattr_t* a, int* p) noexcept {
  *p = (attr_int(a) & kAttrProtoMask) >> kAttrProtoShift;
  return 0;
}
int pthread_mutexattr_setprioceiling(pthread_mutexattr_t* a, int c) noexcept {
  if (!shared::valid_ceiling(c)) return EINVAL;
  attr_int(a) = (attr_int(a) & ~shared::kCeilingMask) | (c << shared::kCeilingShift);
  return 0;
}
int pthread_mutexattr_getprioceiling(const pthread_mutexattr_t* a, int* c) noexcept {
  int v = (attr_int(a) & shared::kCeilingMask) >> shared::kCeilingShift;
  *c = v ? v : shared::min_ceiling();  // as glibc: an unset ceiling reads as SCHED_FIFO's minimum
  return 0;
}

// ---- condition variables ------------------------------------------------------------------

int pthread_cond_init(pthread_cond_t* c, const pthread_condattr_t* a) noexcept {
  std::memset(static_cast<void*>(c), 0, sizeof *c);
  int v = a ? attr_int(a) : CLOCK_REALTIME << 1;
  cclock(c).store((v >> 1) | (v & 1 ? shared::kCondShared : 0), std::memory_order_release);
  return 0;
}
int pthread_cond_destroy(pthread_cond_t* c) noexcept {
  // Waiters woken by a signal or broadcast may still be leaving (POSIX
  // allows destroying right after the broadcast): wait for their last touch.
  while (cwaiters(c).load(std::memory_order_acquire) != 0) yield_now();
  return 0;
}
// (A process-shared condvar's waiters sleep on the word in the kernel, or
// another process: shared.cpp wakes them.)
int pthread_cond_signal(pthread_cond_t* c) noexcept {
  cseq(c).fetch_add(1, std::memory_order_seq_cst);
  if (cwaiters(c).load(std::memory_order_seq_cst) != 0) {
    if (cclock(c).load(std::memory_order_relaxed) & shared::kCondShared)
      shared::cond_wake(c, false);
    else
      pl::unpark_one(&cseq(c));
  }
  return 0;
}
int pthread_cond_broadcast(pthread_cond_t* c) noexcept {
  cseq(c).fetch_add(1, std::memory_order_seq_cst);
  if (cwaiters(c).load(std::memory_order_seq_cst) != 0) {
    if (cclock(c).load(std::memory_order_relaxed) & shared::kCondShared)
      shared::cond_wake(c, true);
    else
      pl::unpark_all(&cseq(c));
  }
  return 0;
}
int pthread_cond_wait(pthread_cond_t* c, pthread_mutex_t* m) { return cond_wait(c, m, CLOCK_REALTIME, nullptr); }
int pthread_cond_timedwait(pthread_cond_t* c, pthread_mutex_t* m, const timespec* abs) {
  return cond_wait(c, m, cclock(c).load(std::memory_order_relaxed) & ~shared::kCondShared, abs);
}
int pthread_cond_clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock, const timespec* abs) {
  if (!supported_clock(clock)) return EINVAL;
  return cond_wait(c, m, clock, abs);
}

// condattr: one int, bit 0 pshared, clock id above.
int pthread_condattr_init(pthread_condattr_t* a) noexcept {
  attr_int(a) = CLOCK_REALTIME << 1;
  return 0;
}
int pthread_condattr_destroy(pthread_condattr_t*) noexcept { return 0; }
int pthread_condattr_setclock(pthread_condattr_t* a, clockid_t c) noexcept {
  if (!supported_clock(c)) return EINVAL;
  attr_int(a) = (c << 1) | (attr_int(a) & 1);
  return 0;
}
int pthread_condattr_getclock(const pthread_condattr_t* a, clockid_t* c) noexcept {
  *c = attr_int(a) >> 1;
  return 0;
}
int pthread_condattr_setpshared(pthread_condattr_t* a, int v) noexcept { return set_pshared(attr_int(a), 1, v); }
int pthread_condattr_getpshared(const pthread_condattr_t* a, int* v) noexcept {
  return get_pshared(attr_int(a), 1, v);
}

// ---- rwlocks ----------------------------------------------------------------------------

int pthread_rwlock_init(pthread_rwlock_t* rw, const pthread_rwlockattr_t* a) noexcept {
  std::memset(static_cast<void*>(rw), 0, sizeof *rw);
  std::uint32_t kind = a ? attr_int(a) : PTHREAD_RWLOCK_DEFAULT_NP;
  if (a && reinterpret_cast<const int*>(a)[1] == PTHREAD_PROCESS_SHARED) kind |= shared::kRwShared;
  at<std::uint32_t>(rw, 48).store(kind, std::memory_order_release);
  return 0;
}
// glibc's checks nothing (a held rwlock is destroyed with 0: tst-rwlock6).
int pthread_rwlock_destroy(pthread_rwlock_t*) noexcept { return 0; }
int pthread_rwlock_rdlock(pthread_rwlock_t* rw) noexcept { return rdlock(rw, kForever); }
int pthread_rwlock_tryrdlock(pthread_rwlock_t* rw) noexcept { return rdlock(rw, kNow); }
int pthread_rwlock_timedrdlock(pthread_rwlock_t* rw, const timespec* abs) noexcept {
  return rw_timed(CLOCK_REALTIME, abs, [rw](Deadline d) { return rdlock(rw, d); });
}
int pthread_rwlock_clockrdlock(pthread_rwlock_t* rw, clockid_t c, const timespec* abs) noexcept {
  return rw_timed(c, abs, [rw](Deadline d) { return rdlock(rw, d); });
}
int pthread_rwlock_wrlock(pthread_rwlock_t* rw) noexcept { return wrlock(rw, kForever); }
int pthread_rwlock_trywrlock(pthread_rwlock_t* rw) noexcept { return wrlock(rw, kNow); }
int pthread_rwlock_timedwrlock(pthread_rwlock_t* rw, const timespec* abs) noexcept {
  return rw_timed(CLOCK_REALTIME, abs, [rw](Deadline d) { return wrlock(rw, d); });
}
int pthread_rwlock_clockwrlock(pthread_rwlock_t* rw, clockid_t c, const timespec* abs) noexcept {
  return rw_timed(c, abs, [rw](Deadline d) { return wrlock(rw, d); });
}
int pthread_rwlock_unlock(pthread_rwlock_t* rw) noexcept { return rw_unlock(rw); }

// rwlockattr: glibc's two ints, kind and pshared.
int pthread_rwlockattr_init(pthread_rwlockattr_t* a) noexcept {
  std::memset(static_cast<void*>(a), 0, sizeof *a);
  return 0;
}
int pthread_rwlockattr_destroy(pthread_rwlockattr_t*) noexcept { return 0; }
int pthread_rwlockattr_setkind_np(pthread_rwlockattr_t* a, int k) noexcept {
  if (k != PTHREAD_RWLOCK_PREFER_READER_NP && k != PTHREAD_RWLOCK_PREFER_WRITER_NP &&
      k != PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP)
    return EINVAL;
  attr_int(a) = k;
  return 0;
}
int pthread_rwlockattr_getkind_np(const pthread_rwlockattr_t* a, int* k) noexcept {
  *k = attr_int(a);
  return 0;
}
int pthread_rwlockattr_setpshared(pthread_rwlockattr_t* a, int v) noexcept {
  if (v != PTHREAD_PROCESS_PRIVATE && v != PTHREAD_PROCESS_SHARED) return EINVAL;
  reinterpret_cast<int*>(a)[1] = v;
  return 0;
}
int pthread_rwlockattr_getpshared(const pthread_rwlockattr_t* a, int* v) noexcept {
  *v = reinterpret_cast<const int*>(a)[1];
  return 0;
}

// ---- barriers -------------------------------------------------------------------------------

int pthread_barrier_init(pthread_barrier_t* b, const pthread_barrierattr_t* a, unsigned count) noexcept {
  if (count == 0 || count > INT_MAX) return EINVAL;
  std::memset(static_cast<void*>(b), 0, sizeof *b);
  if (a && attr_int(a) == PTHREAD_PROCESS_SHARED) at<std::uint32_t>(b, 16).store(shared::kBarrierShared);
  bcount(b).store(count, std::memory_order_release);
  return 0;
}
int pthread_barrier_destroy(pthread_barrier_t* b) noexcept {
  // Threads released from the last round may still be on their way out.
  while (binside(b).load(std::memory_order_acquire) != 0) {
    if (std::uint32_t(bword(b).load(std::memory_order_acquire)) != 0) return EBUSY;  // a round is filling
    yield_now();
  }
  bcount(b).store(0, std::memory_order_relaxed);
  return 0;
}
// The round's state is one word — arrived in the low half, generation in the
// high — so the last arrival's reset and generation bump are one CAS, and a
// thread of the next round cannot count itself into the old one. Waiters
// park while the generation is theirs; `inside` is each thread's last touch.
int pthread_barrier_wait(pthread_barrier_t* b) noexcept {
  if (__builtin_expect(at<std::uint32_t>(b, 16).load(std::memory_order_relaxed) == shared::kBarrierShared, 0))
    return shared::barrier_wait(b);
  std::uint32_t count = bcount(b).load(std::memory_order_acquire);
  if (count == 0) return EINVAL;
  binside(b).fetch_add(1, std::memory_order_acquire);
  auto& word = bword(b);
  std::uint64_t v = word.load(std::memory_order_acquire);
  for (;;) {
    std::uint32_t arrived = std::uint32_t(v);
    if (arrived + 1 == count) {
      if (word.compare_exchange_weak(v, ((v >> 32) + 1) << 32, std::memory_order_acq_rel)) {
        released(b);  // (the others may leave now, but destroy waits for `inside`)
        pl::unpark_all(&word);
        binside(b).fetch_sub(1, std::memory_order_release);
        return PTHREAD_BARRIER_SERIAL_THREAD;
      }
      continue;
    }
    if (word.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) break;
  }
  const std::uint64_t gen = v >> 32;
  ErrnoKeeper keep;
  while (word.load(std::memory_order_acquire) >> 32 == gen)
    pl::park_if(
        &word, [&word, gen] { return word.load(std::memory_order_acquire) >> 32 == gen; }, kForever,
        rt::WaitKind::barrier);
  keep.done();
  binside(b).fetch_sub(1, std::memory_order_release);
  released(b);
  return 0;
}
int pthread_barrierattr_init(pthread_barrierattr_t* a) noexcept {
  attr_int(a) = PTHREAD_PROCESS_PRIVATE;
  return 0;
}
int pthread_barrierattr_destroy(pthread_barrierattr_t*) noexcept { return 0; }
int pthread_barrierattr_setpshared(pthread_barrierattr_t* a, int v) noexcept {
  if (v != PTHREAD_PROCESS_PRIVATE && v != PTHREAD_PROCESS_SHARED) return EINVAL;
  attr_int(a) = v;
  return 0;
}
int pthread_barrierattr_getpshared(const pthread_barrierattr_t* a, int* v) noexcept {
  *v = attr_int(a);
  return 0;
}

// ---- spin locks ------------------------------------------------------------------------------
//
// A real spin lock, as glibc's — except that a fibre spinning on a lock
// held by another fibre of its own processor would spin forever: every
// 64 polls it yields (to the processor's other fibres, or, on a kernel
// thread, to other threads).

int pthread_spin_init(pthread_spinlock_t* l, int pshared) noexcept {
  if (pshared != PTHREAD_PROCESS_PRIVATE && pshared != PTHREAD_PROCESS_SHARED) return EINVAL;
  at<int>(l, 0).store(0, std::memory_order_release);
  return 0;
}
int pthread_spin_destroy(pthread_spinlock_t*) noexcept { return 0; }
int pthread_spin_lock(pthread_spinlock_t* l) noexcept {
  auto& w = at<int>(l, 0);
  unsigned polls = 0;
  while (w.exchange(1, std::memory_order_acquire) != 0) {
    while (w.load(std::memory_order_relaxed) != 0) {
      rt::cpu_relax();
      if ((++polls & 63) == 0) yield_now();
    }
  }
  return 0;
}
int pthread_spin_trylock(pthread_spinlock_t* l) noexcept {
  return at<int>(l, 0).exchange(1, std::memory_order_acquire) == 0 ? 0 : EBUSY;
}
int pthread_spin_unlock(pthread_spinlock_t* l) noexcept {
  at<int>(l, 0).store(0, std::memory_order_release);
  released(const_cast<const int*>(l));
  return 0;
}

// ---- once --------------------------------------------------------------------------------------
//
// 0 → RUNNING (one caller runs init) → DONE; others set PARKED and park
// while the word is RUNNING|PARKED. Works before the runtime has started
// (the parking lot needs no set-up; such callers wait on a futex). An
// exception thrown by init_routine (std::call_once from C++) puts the
// word back to 0 so that another caller runs it, as glibc's cleanup does.

}  // extern "C" (again below: the helpers here are this file's own, not exported)

extern "C" {
void __pthread_register_cancel(__pthread_unwind_buf_t* b);
void __pthread_unregister_cancel(__pthread_unwind_buf_t* b);
[[noreturn]] void __pthread_unwind_next(__pthread_unwind_buf_t* b);
}

namespace {

void once_reset(std::atomic<int>& st) {
  if (st.exchange(0, std::memory_order_release) & kOnceParked) pl::unpark_all(&st);
}

// init, with the word put back if it does not return: a C++ exception
// (std::call_once), or the thread's cancellation or exit inside it. The
// latter through a cleanup buffer on the thread's chain, as glibc's
// pthread_once has (cancel.cpp): an unwinding that cannot walk init's
// frames (C built without unwind tables) jumps to the next buffer, and
// would pass a C++ catch by (glibc's tst-oncey3: the next pthread_once
// waited for ever).
[[gnu::noinline]] void run_once_init(std::atomic<int>* st, void (*init)(void)) {
  __pthread_unwind_buf_t buf;
  std::memset(&buf, 0, sizeof buf);
  if (__sigsetjmp(reinterpret_cast<__jmp_buf_tag*>(buf.__cancel_jmp_buf), 0)) {
    once_reset(*st);
    __pthread_unwind_next(&buf);
  }
  __pthread_register_cancel(&buf);
  try {
    init();
  } catch (...) {
    __pthread_unregister_cancel(&buf);
    once_reset(*st);
    throw;
  }
  __pthread_unregister_cancel(&buf);
}

}  // namespace

extern "C" {

int pthread_once(pthread_once_t* once, void (*init)(void)) {
  auto& st = at<int>(once, 0);
  if (st.load(std::memory_order_acquire) == kOnceDone) return 0;
  for (;;) {
    int s = st.load(std::memory_order_acquire);
    if (s == kOnceDone) return 0;
    if (s == 0) {
      if (!st.compare_exchange_weak(s, kOnceRunning, std::memory_order_acquire)) continue;
      run_once_init(&st, init);
      int was = st.exchange(kOnceDone, std::memory_order_release);
      released(const_cast<const int*>(once));
      if (was & kOnceParked) pl::unpark_all(&st);  // the address only
      return 0;
    }
    if (!(s & kOnceParked) && !st.compare_exchange_weak(s, s | kOnceParked, std::memory_order_relaxed)) continue;
    ErrnoKeeper keep;
    pl::park_if(
        &st, [&st] { return st.load(std::memory_order_relaxed) == (kOnceRunning | kOnceParked); }, kForever);
    keep.done();
  }
}

// ---- unnamed semaphores -----------------------------------------------------------------------

int sem_init(sem_t* s, int pshared, unsigned value) noexcept {
  if (value > SEM_VALUE_MAX) {
    *errno_slot() = EINVAL;
    return -1;
  }
  std::memset(static_cast<void*>(s), 0, sizeof *s);
  sdata(s).store(value, std::memory_order_relaxed);
  at<int>(s, 8).store(pshared ? kFutexShared : 0, std::memory_order_release);
  return 0;
}
int sem_destroy(sem_t* s) noexcept {
  // A post that found fibres parked, and the waker it queued the semaphore
  // for, may still be at it: wait for their last touches. `posting` first:
  // a post raises `pending` before it lowers `posting`.
  while (sposting(s).load(std::memory_order_acquire) != 0 || spending(s).load(std::memory_order_acquire) != 0)
    yield_now();
  return 0;
}
int sem_wait(sem_t* s) {
  ErrnoKeeper keep;
  return sem_result(keep, sem_wait_common(s, CLOCK_REALTIME, nullptr));
}
int sem_timedwait(sem_t* s, const timespec* abs) {
  ErrnoKeeper keep;
  return sem_result(keep, sem_wait_common(s, CLOCK_REALTIME, abs));
}
int sem_clockwait(sem_t* s, clockid_t clock, const timespec* abs) {
  ErrnoKeeper keep;
  if (!supported_clock(clock)) return sem_result(keep, EINVAL);
  return sem_result(keep, sem_wait_common(s, clock, abs));
}
int sem_trywait(sem_t* s) noexcept {
  auto& data = sdata(s);
  std::uint64_t d = data.load(std::memory_order_relaxed);
  while (std::uint32_t(d) > 0)
    if (data.compare_exchange_weak(d, d - 1, std::memory_order_acquire)) return 0;
  *errno_slot() = EAGAIN;
  return -1;
}
// The increment lets a waiter return, and destroy and reuse the semaphore
// (a semaphore on the waiter's stack): after it the post touches nothing of
// it but the futex's address, as glibc's — unless it found fibres parked;
// then it announced itself in `posting` before the increment, and
// sem_destroy waits for it (and for the waker) before the memory is reused.
int sem_post(sem_t* s) noexcept {
  auto& data = sdata(s);
  const int priv = sprivate(s);  // before the increment, as glibc
  bool announced = false;
  std::uint64_t d = data.load(std::memory_order_relaxed);
  for (;;) {
    if (std::uint32_t(d) == SEM_VALUE_MAX) {
      if (announced) sposting(s).fetch_sub(1, std::memory_order_release);
      *errno_slot() = EOVERFLOW;
      return -1;
    }
    if ((d & kFibresParked) && !announced) {
      sposting(s).fetch_add(1, std::memory_order_seq_cst);
      announced = true;
    }
    if (data.compare_exchange_weak(d, d + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) break;
  }
  released(s);
  if (d & kKernelWaiters) futex(&svalue(s), FUTEX_WAKE, priv, 1, nullptr);  // the address only
  if (announced) {
    if (d & kFibresParked) defer_wake(s);
    sposting(s).fetch_sub(1, std::memory_order_release);  // the post's last touch
  }
  return 0;
}
int sem_getvalue(sem_t* s, int* v) noexcept {
  *v = int(svalue(s).load(std::memory_order_relaxed));
  return 0;
}

}  // extern "C"
