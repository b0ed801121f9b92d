// sync/mutex.cpp — one mutex, four policies along the barging spectrum
// (thesis §3.3), three types.
//
// State: one word, owner_: who holds it (a Fibre, or a kernel thread's
// marker: both even addresses), or null when free, with bit 0 (kParked)
// set while fibres may be queued on waiters_. The fast paths are a CAS
// null → self to lock and a CAS self → null to unlock, which fails when a
// waiter has set the mark; then unlock takes lock_ (which guards waiters_),
// decides whom to wake, and stores the word once, under lock_:
//   - blocking, spin: free, with the mark kept (kParked): the first waiter
//     is woken to compete with newcomers — barging;
//   - baton, and hybrid for a waiter queued longer than kHybridThreshold:
//     the waiter's identity (handed_over), the mark kept only if others
//     remain: the lock passes without being free, strictly FIFO.
// No lost wake-up: a locker sets the mark (or finds it) under lock_ before
// it queues, so the owner's unlock CAS fails and its slow path, which needs
// lock_, finds the waiter queued.
// Release is the last touch (docs/DESIGN.md): the unlock decides whom to
// wake before it releases, and its release is its last touch of the mutex —
// the CAS, or, in the slow path, lock_'s release: while lock_ is held the
// word keeps the mark (a freed word is kParked, not null), so a newcomer
// cannot take the mutex on the fast path, unlock it and destroy it before
// lock_ is released; it waits for lock_. Only the woken waiter's record is
// touched afterwards. (It used to store null and then read a waiter count,
// and take lock_ when it was not zero: a locker could take the mutex in
// between, unlock, destroy and free it first — tests/chaos_test.cpp
// DestroyAfterUse.) A mark left with nobody queued (a waiter timed out)
// costs the next unlock its slow path and the next lock its slow path once;
// the slow lock clears it when it finds the queue empty.
#include <cerrno>
#include <cstdio>
#include <system_error>

#include "base/chaos.hpp"
#include "base/options.hpp"
#include "base/sys.hpp"
#include "sched/cancel.hpp"
#include "sched/processor.hpp"
#include "sync/wait.hpp"

namespace loom {

namespace {

constexpr std::int64_t kHybridThresholdNs = 100'000;
constexpr int kSpinTries = 200;
constexpr std::uintptr_t kParked = 1;

std::uintptr_t bits(const void* w) { return reinterpret_cast<std::uintptr_t>(w); }
const void* holder(const void* w) { return reinterpret_cast<const void*>(bits(w) & ~kParked); }
bool marked(const void* w) { return bits(w) & kParked; }
const void* with_mark(const void* w) { return reinterpret_cast<const void*>(bits(w) | kParked); }

[[noreturn]] void fail(int e, const char* what) { throw std::system_error(e, std::generic_category(), what); }

}  // namespace

MutexPolicy default_mutex_policy() {
  static const MutexPolicy p =
      static_cast<MutexPolicy>(rt::env_choice("LOOM_MUTEX", {"blocking", "spin", "baton", "hybrid"}, 0));
  return p;
}

const char* to_string(MutexPolicy p) {
  switch (p) {
    case MutexPolicy::blocking: return "blocking";
    case MutexPolicy::spin: return "spin";
    case MutexPolicy::baton: return "baton";
    case MutexPolicy::hybrid: return "hybrid";
  }
  return "?";
}

Mutex::Mutex(MutexType type, MutexPolicy policy) : type_(type), policy_(policy) {}

Mutex::~Mutex() { rt::dead_object(this, sizeof *this); }

namespace rt {
const void* MutexHolder::of(const Mutex& m) noexcept {
  // Read as memory that may be gone: the waiter may have been woken, and
  // the mutex destroyed and unmapped, since the listing found it blocked.
  const void* w = nullptr;
  return sys::peek(&m.owner_, &w, sizeof w) ? holder(w) : nullptr;
}
const void* (*pthread_mutex_holder)(const void*, bool*) = nullptr;
bool (*fd_turn_of)(const void*, int*, bool*) = nullptr;
}  // namespace rt

bool Mutex::held_by_caller() const { return holder(owner_.load(std::memory_order_relaxed)) == rt::identity(); }

int Mutex::lock_errno(Deadline d) {
  const void* self = rt::identity();
  if (holder(owner_.load(std::memory_order_relaxed)) == self) {
    if (type_ == MutexType::recursive) {
      if (recursion_ == ~0u) return EAGAIN;
      ++recursion_;
      return 0;
    }
    if (type_ == MutexType::errorcheck) return EDEADLK;
    if (d == kNow) return EBUSY;  // a normal mutex relocked: deadlock (or timeout) follows, as POSIX says
  }
  const void* seen = nullptr;
  if (owner_.compare_exchange_strong(seen, self, std::memory_order_acquire)) {
    recursion_ = 1;
    return 0;
  }
  // Free but marked: the slow path takes it (and tidies the mark).
  if (d == kNow && holder(seen) != nullptr) return EBUSY;
  if (policy_ == MutexPolicy::spin && rt::this_processor()) {
    for (int i = 0; i < kSpinTries && holder(seen) != nullptr; ++i) {
      rt::cpu_relax();
      seen = owner_.load(std::memory_order_relaxed);
      if (seen == nullptr && owner_.compare_exchange_strong(seen, self, std::memory_order_acquire)) {
        recursion_ = 1;
        return 0;
      }
    }
  }
  return slow_lock(d, self);
}

int Mutex::slow_lock(Deadline d, const void* self) {
  // A wait the caller made a cancellation point (Fibre::cancel_wait: loom's
  // I/O waiting for a descriptor's turn, io.cpp): each of its waits is
  // cancellable, not only the first (a waiter woken to compete may wait
  // again), and one a request ended gives ECANCELED.
  rt::Fibre* cancellable = rt::cancel_marked();
  for (;;) {
    rt::lock_object(lock_, this, "loom::Mutex");
    const void* seen = owner_.load(std::memory_order_relaxed);
    bool mine = false;
    for (;;) {
      if (holder(seen) == nullptr) {
        // Free: take it, marked while fibres are still queued.
        const void* next = rt::WaitList::empty(waiters_) ? self : with_mark(self);
        if (owner_.compare_exchange_weak(seen, next, std::memory_order_acquire)) {
          mine = true;
          break;
        }
      } else if (marked(seen) ||
                 owner_.compare_exchange_weak(seen, with_mark(seen), std::memory_order_relaxed)) {
        break;  // held and marked: its unlock takes lock_ and finds the record queued below
      }
    }
    if (mine) {
      lock_.unlock();
      recursion_ = 1;
      return 0;
    }
    if (rt::expired(d)) {
      lock_.unlock();  // the mark stays: the owner's unlock finds nobody and clears it
      return d == kNow ? EBUSY : ETIMEDOUT;
    }
    rt::Waiter w;
    w.ident = self;
    if (policy_ == MutexPolicy::hybrid) w.since = rt::now_ns();
    rt::count(rt::Stat::mutex_blocks);
    rt::note_wait(rt::WaitKind::mutex, this);
    if (cancellable) cancellable->cancel_wait = true;  // (wait_on takes it)
    if (!rt::wait_on(waiters_, lock_, w, d)) return cancellable && rt::cancel_pending(cancellable) ? ECANCELED : ETIMEDOUT;
    if (w.handed_over) {
      recursion_ = 1;
      return 0;
    }
    // Woken to compete: try again (barging).
  }
}

void Mutex::lock() {
  if (int e = lock_errno(kForever)) fail(e, "loom::Mutex::lock");
}
bool Mutex::try_lock() { return lock_errno(kNow) == 0; }
bool Mutex::try_lock_until(Clock::time_point t) {
  detail::StopPoint stop;
  int e = lock_errno(to_deadline(t));
  if (e == EDEADLK) fail(e, "loom::Mutex::try_lock_until");
  return e == 0;
}

int Mutex::unlock_errno() {
  const void* seen = owner_.load(std::memory_order_relaxed);
  if (type_ != MutexType::normal && holder(seen) != rt::identity()) return EPERM;
  if (type_ == MutexType::recursive && --recursion_ > 0) return 0;

  // Nobody marked it: the CAS is the release and the last touch.
  if (!marked(seen) && owner_.compare_exchange_strong(seen, nullptr, std::memory_order_release)) {
    LOOM_CHAOS_POINT(sync_release);
    return 0;
  }
  // Marked: decide whom to wake, then release under lock_.
  rt::lock_object(lock_, this, "loom::Mutex");
  rt::Waiter* front = rt::WaitList::front(waiters_);
  bool hand = front && (policy_ == MutexPolicy::baton ||
                        (policy_ == MutexPolicy::hybrid && rt::now_ns() - front->since >= kHybridThresholdNs));
  rt::Waiter* w = rt::WaitList::signal_one(waiters_);
  const void* next = reinterpret_cast<const void*>(kParked);  // free; newcomers queue behind lock_
  if (w && hand) {
    // The waiter cannot run before its wake-up below: the word may go
    // unmarked when it was the last.
    w->handed_over = true;
    next = rt::WaitList::empty(waiters_) ? w->ident : with_mark(w->ident);
    rt::count(rt::Stat::mutex_handoffs);
  }
  owner_.store(next, std::memory_order_release);
  lock_.unlock();  // the last touch of the mutex
  LOOM_CHAOS_POINT(sync_release);
  if (w) rt::wake(w);
  return 0;
}

void Mutex::unlock() {
  if (int e = unlock_errno()) fail(e, "loom::Mutex::unlock");
}

}  // namespace loom
