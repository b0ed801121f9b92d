// loom/sync.hpp — blocking synchronisation for fibres, all with timeouts.
//
// A fibre that waits frees its processor; it is woken exactly once, by a
// signal or by its timeout, never both (the loser of that race backs off
// without side effects, so a semaphore's count is conserved).
//
// Deadlines are CLOCK_MONOTONIC (std::chrono::steady_clock) points. Every
// blocking call has a timed form, which returns false (or ETIMEDOUT, or
// std::nullopt) at, never before, the deadline, and a try_ form that never
// blocks, with two exceptions where "try" means nothing: CondVar::wait (a
// wait with no time to wait; its timed forms take a predicate too) and
// call_once (is_done() asks instead). Barrier's timed and try arrivals
// withdraw on timeout; call_once_until gives up waiting for another
// caller's run. Fibre has join_for/join_until/try_join (fibre.hpp).
// The timed forms are stop points: Fibre::request_stop ends them as their
// deadline would (Clock::time_point::max(): no deadline, only a stop).
//
// Called from a kernel thread that is not a loom processor, every primitive
// works: the thread itself blocks (on a futex) instead of a fibre. The same
// object may be shared by fibres and such threads.
//
// The errno-style members (`*_errno`, returning 0 or an errno value) are
// what the C API exposes; the C++ members throw std::system_error where
// those return an error a correct program cannot see (EDEADLK, EPERM).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstddef>
#include <optional>
#include <utility>

#include "loom/detail/spinlock.hpp"
#include "loom/fibre.hpp"

namespace loom {

using Clock = std::chrono::steady_clock;

namespace rt {
struct Waiter;
struct BarrierTimeout;
struct WaitList;
struct WakeBatch;
struct MutexHolder;
}

// Absolute CLOCK_MONOTONIC deadline in ns; kForever = no deadline, and
// kNow = do not wait at all (the try_ forms).
using Deadline = std::int64_t;
inline constexpr Deadline kForever = -1;
inline constexpr Deadline kNow = 0;
Deadline to_deadline(Clock::time_point t);
Deadline deadline_after(std::chrono::nanoseconds d);

namespace this_fibre {
// True once the time has passed; false when Fibre::request_stop ended the
// sleep early (at once if one was pending). With no deadline
// (time_point::max(), a duration past it) a fibre sleeps until a stop; a
// kernel thread that is not a fibre returns at once.
bool sleep_for(std::chrono::nanoseconds d);
bool sleep_until(Clock::time_point t);
}  // namespace this_fibre

// The wait queue every primitive is built on (opaque here; see
// runtime/sync/wait.hpp for the protocol).
class WaitQueue {
 public:
  WaitQueue() = default;
  WaitQueue(const WaitQueue&) = delete;
  WaitQueue& operator=(const WaitQueue&) = delete;

 private:
  friend struct rt::WaitList;
  void* head_ = nullptr;
  void* tail_ = nullptr;
};

// ---- Semaphore ----------------------------------------------------------------

class Semaphore {
 public:
  static constexpr unsigned kMax = 0x7fffffff;
  // A counting semaphore; max = 1 makes a binary one (releases collapse).
  explicit Semaphore(unsigned initial = 0, unsigned max = kMax);
  ~Semaphore();
  void acquire();
  bool try_acquire();
  bool try_acquire_until(Clock::time_point t);
  template <class R, class P>
  bool try_acquire_for(std::chrono::duration<R, P> d) {
    detail::StopPoint stop;
    return acquire_errno(deadline_after(d)) == 0;
  }
  // Wakes one waiter or raises the count; EOVERFLOW past the maximum of a
  // counting semaphore (a binary one just stays at 1).
  int release_errno();
  void release();
  unsigned value() const;

  // 0, or ETIMEDOUT (EAGAIN for kNow) when the deadline passed first.
  int acquire_errno(Deadline d);

 private:
  mutable detail::SpinLock lock_;
  unsigned count_;
  unsigned max_;
  WaitQueue waiters_;
};

class BinarySemaphore : public Semaphore {
 public:
  explicit BinarySemaphore(bool available = false) : Semaphore(available ? 1 : 0, 1) {}
};

// ---- Mutex ----------------------------------------------------------------------

// The barging spectrum (thesis §3.3, figure 3.4):
//   blocking  unlock wakes the first waiter, who then competes for the lock
//             with newcomers (default);
//   spin      like blocking, but a locker first spins a while (adaptive to
//             short critical sections on other processors);
//   baton     unlock hands ownership to the first waiter: strict FIFO;
//   hybrid    barging, but a waiter that has waited longer than a threshold
//             (100 us) gets the lock handed to it.
enum class MutexPolicy { blocking, spin, baton, hybrid };
enum class MutexType { normal, recursive, errorcheck };

// The process default: LOOM_MUTEX=blocking|spin|baton|hybrid.
MutexPolicy default_mutex_policy();
const char* to_string(MutexPolicy);

class Mutex {
 public:
  explicit Mutex(MutexType type = MutexType::normal, MutexPolicy policy = default_mutex_policy());
  explicit Mutex(MutexPolicy policy) : Mutex(MutexType::normal, policy) {}
  ~Mutex();

  // std::Lockable / TimedLockable. lock() of an error-checking mutex the
  // caller holds throws std::system_error(EDEADLK); unlock() by a
  // non-owner of an error-checking or recursive mutex throws EPERM.
  void lock();
  bool try_lock();
  bool try_lock_until(Clock::time_point t);
  template <class R, class P>
  bool try_lock_for(std::chrono::duration<R, P> d) {
    detail::StopPoint stop;
    return lock_errno(deadline_after(d)) == 0;
  }
  void unlock();

  // 0, EBUSY (kNow and held), ETIMEDOUT, EDEADLK (error-checking relock;
  // a normal mutex relocked by its owner deadlocks, or times out, as POSIX
  // says), EAGAIN (recursion count overflow).
  int lock_errno(Deadline d);
  // 0, or EPERM when the caller does not hold it (errorcheck, recursive).
  int unlock_errno();

  MutexType type() const { return type_; }
  MutexPolicy policy() const { return policy_; }
  bool held_by_caller() const;

 private:
  friend class CondVar;
  friend struct rt::MutexHolder;  // the fibre listing's "held by"
  int slow_lock(Deadline d, const void* self);
  std::atomic<const void*> owner_{nullptr};  // the owner, and bit 0: fibres may be queued (mutex.cpp)
  detail::SpinLock lock_;  // guards waiters_
  MutexType type_;
  MutexPolicy policy_;
  unsigned recursion_ = 0;
  WaitQueue waiters_;
};

// ---- CondVar --------------------------------------------------------------------

class CondVar {
 public:
  CondVar() = default;
  ~CondVar();
  // The mutex must be held by the caller (EPERM otherwise, for
  // error-checking and recursive mutexes). It is released while waiting
  // and held again on return, also after a timeout.
  void wait(Mutex& m);
  template <class Pred>
  void wait(Mutex& m, Pred p) {
    while (!p()) wait(m);
  }
  // false on timeout.
  bool wait_until(Mutex& m, Clock::time_point t);
  template <class R, class P>
  bool wait_for(Mutex& m, std::chrono::duration<R, P> d) {
    detail::StopPoint stop;
    return wait_errno(m, deadline_after(d)) == 0;
  }
  // With a predicate, as std::condition_variable_any's: waits until p()
  // holds or the deadline passes; returns p() as it is then (true also when
  // the predicate came true exactly at the timeout).
  template <class Pred>
  bool wait_until(Mutex& m, Clock::time_point t, Pred p) {
    while (!p())
      if (!wait_until(m, t)) return p();
    return true;
  }
  template <class R, class P, class Pred>
  bool wait_for(Mutex& m, std::chrono::duration<R, P> d, Pred p) {
    return wait_until(m, Clock::now() + std::chrono::ceil<Clock::duration>(d), std::move(p));
  }
  void notify_one();
  void notify_all();

  // 0, ETIMEDOUT, EPERM.
  int wait_errno(Mutex& m, Deadline d);

 private:
  detail::SpinLock lock_;
  WaitQueue waiters_;
};

// ---- RWLock ---------------------------------------------------------------------

enum class RWPreference {
  writer,  // a waiting writer blocks new readers: no writer starvation (default here;
           // C's loom_rwlock_t and pthread_rwlock_t prefer readers, as glibc's do)
  reader,  // readers join while any reader holds it; writers may starve
};

class RWLock {
 public:
  explicit RWLock(RWPreference pref = RWPreference::writer) : pref_(pref) {}
  ~RWLock();
  void lock_shared();
  bool try_lock_shared();
  bool try_lock_shared_until(Clock::time_point t);
  void unlock_shared();
  void lock();
  bool try_lock();
  bool try_lock_until(Clock::time_point t);
  void unlock();

  // 0, EBUSY (kNow), ETIMEDOUT, EDEADLK (write lock held by the caller),
  // EAGAIN (too many readers).
  int lock_shared_errno(Deadline d);
  int lock_errno(Deadline d);
  // 0, or EPERM when not held in that mode (the write side knows its owner).
  int unlock_errno();

 private:
  friend struct RWLockAccess;
  bool writer_may_enter() const;
  void wake_after_release_into(rt::WakeBatch& batch, bool writer_left);
  detail::SpinLock lock_;
  RWPreference pref_;
  unsigned readers_ = 0;
  const void* writer_ = nullptr;
  unsigned writers_waiting_ = 0;
  WaitQueue readers_q_;
  WaitQueue writers_q_;
};

// ---- Barrier --------------------------------------------------------------------

class Barrier {
 public:
  // count >= 1 (std::invalid_argument otherwise).
  explicit Barrier(unsigned count);
  ~Barrier();
  // Blocks until `count` callers have arrived; returns true for exactly one
  // of them per phase (the serial one, as PTHREAD_BARRIER_SERIAL_THREAD).
  bool arrive_and_wait();
  // Timed: std::nullopt when the deadline passes before the phase completes;
  // the arrival is then withdrawn (the phase still needs `count` others).
  // Else as arrive_and_wait. An arrival counted into a phase that completed
  // just as its timer fired reports the phase (after the deadline, then).
  std::optional<bool> arrive_and_wait_until(Clock::time_point t);
  template <class R, class P>
  std::optional<bool> arrive_and_wait_for(std::chrono::duration<R, P> d) {
    detail::StopPoint stop;
    return arrive_result(deadline_after(d));
  }
  // Never blocks: completes the phase if this is its last arrival (true),
  // else withdraws and returns std::nullopt.
  std::optional<bool> try_arrive_and_wait() { return arrive_result(kNow); }
  // 0 (*serial set), EBUSY (kNow, withdrawn), ETIMEDOUT (withdrawn).
  int arrive_and_wait_errno(Deadline d, bool* serial);

 private:
  friend struct rt::BarrierTimeout;
  std::optional<bool> arrive_result(Deadline d) {
    bool serial = false;
    if (arrive_and_wait_errno(d, &serial) != 0) return std::nullopt;
    return serial;
  }
  detail::SpinLock lock_;
  unsigned count_;
  unsigned arrived_ = 0;
  std::uint64_t phase_ = 0;
  WaitQueue waiters_;
};

// ---- Once -----------------------------------------------------------------------

class OnceFlag {
 public:
  constexpr OnceFlag() = default;
  // The function has run to completion (never blocks).
  bool is_done() const noexcept { return __atomic_load_n(&state_, __ATOMIC_ACQUIRE) == 2; }

 private:
  template <class F>
  friend void call_once(OnceFlag& flag, F&& f);
  template <class F>
  friend bool run_once(OnceFlag& flag, Deadline d, F& f, bool timed);
  // 1: the caller runs the function; 0: it has run; -1: the deadline passed
  // while another caller was running it.
  int begin(Deadline d);
  void finish(bool done); // done=false: the function threw, let another try
  detail::SpinLock lock_;
  std::uint8_t state_ = 0;  // 0 not run, 1 running, 2 done
  WaitQueue waiters_;
};

// Runs f exactly once per flag; concurrent callers wait until it returned.
// If f throws, the exception propagates and a later caller runs f again.
// timed: the wait for another caller's run is a stop point (not f).
template <class F>
bool run_once(OnceFlag& flag, Deadline d, F& f, bool timed) {
  int r;
  {
    detail::StopPoint stop(timed);
    r = flag.begin(d);
  }
  if (r <= 0) return r == 0;
  try {
    f();
  } catch (...) {
    flag.finish(false);
    throw;
  }
  flag.finish(true);
  return true;
}

template <class F>
void call_once(OnceFlag& flag, F&& f) {
  run_once(flag, kForever, f, false);
}

// Timed: false when the deadline passes while another caller runs f (a
// caller that gets to run f runs it to the end, whatever the deadline);
// true once f has run, here or elsewhere.
template <class F>
bool call_once_until(OnceFlag& flag, Clock::time_point t, F&& f) {
  return run_once(flag, to_deadline(t), f, true);
}
template <class R, class P, class F>
bool call_once_for(OnceFlag& flag, std::chrono::duration<R, P> d, F&& f) {
  return run_once(flag, deadline_after(d), f, true);
}

// ---- fibre-local keys -----------------------------------------------------------

// Like pthread keys, per fibre (per kernel thread for callers that are not
// fibres). At a fibre's exit, destructors of non-null values run, repeated
// up to kKeyDestructorRounds times while values remain, as POSIX says.
inline constexpr unsigned kKeysMax = 1024;  // = glibc's PTHREAD_KEYS_MAX
inline constexpr unsigned kKeyDestructorRounds = 4;
using Key = unsigned;
// 0, or EAGAIN when all kKeysMax keys are in use.
int key_create(Key* key, void (*destructor)(void*));
// 0, or EINVAL for a key that is not in use.
int key_delete(Key key);
void* get_specific(Key key);  // null for an invalid key
// 0, EINVAL (invalid key), ENOMEM.
int set_specific(Key key, const void* value);

}  // namespace loom
