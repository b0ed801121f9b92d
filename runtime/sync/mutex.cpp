// sync/mutex.cpp — one mutex, four policies along the barging spectrum
// (thesis §3.3), three types.
//
// State: owner_ (who holds it, null when free) and waiting_ (how many are
// queued or about to be). The fast paths are a CAS to lock and a store to
// unlock. The no-lost-wake-up argument is a Dekker pair:
//   locker:   waiting_++ (seq_cst)  then  CAS owner_ null → self
//   unlocker: owner_ = null (seq_cst)  then  load waiting_
// so either the locker's CAS sees the free lock, or the unlocker sees the
// waiter and wakes one. A woken waiter (blocking, spin) competes again with
// newcomers — barging. Under `baton`, and under `hybrid` for a waiter queued
// longer than kHybridThreshold, unlock does not free the lock: it makes the
// first waiter the owner and wakes it (handed_over), strictly FIFO.
#include <cerrno>
#include <cstdio>
#include <system_error>

#include "base/options.hpp"
#include "sched/processor.hpp"
#include "sync/wait.hpp"

namespace loom {

namespace {

constexpr std::int64_t kHybridThresholdNs = 100'000;
constexpr int kSpinTries = 200;

void mutex_on_timeout(rt::Waiter* w, rt::WakeBatch&) {
  static_cast<std::atomic<unsigned>*>(w->owner_object)->fetch_sub(1, std::memory_order_relaxed);
}

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

Mutex::~Mutex() = default;

namespace rt {
const void* MutexHolder::of(const Mutex& m) noexcept { return m.owner_.load(std::memory_order_relaxed); }
const void* (*pthread_mutex_holder)(const void*, bool*) = nullptr;
}  // namespace rt

bool Mutex::held_by_caller() const { return owner_.load(std::memory_order_relaxed) == rt::identity(); }

int Mutex::lock_errno(Deadline d) {
  const void* self = rt::identity();
  if (owner_.load(std::memory_order_relaxed) == self) {
    if (type_ == MutexType::recursive) {
      if (recursion_ == ~0u) return EAGAIN;
      ++recursion_;
      return 0;
    }
    if (type_ == MutexType::errorcheck) return EDEADLK;
    if (d == kNow) return EBUSY;  // a normal mutex relocked: deadlock (or timeout) follows, as POSIX says
  }
  const void* none = nullptr;
  if (owner_.compare_exchange_strong(none, self, std::memory_order_acquire)) {
    recursion_ = 1;
    return 0;
  }
  if (d == kNow) return EBUSY;
  if (policy_ == MutexPolicy::spin && rt::this_processor()) {
    for (int i = 0; i < kSpinTries; ++i) {
      rt::cpu_relax();
      none = nullptr;
      if (owner_.load(std::memory_order_relaxed) == nullptr &&
          owner_.compare_exchange_strong(none, self, std::memory_order_acquire)) {
        recursion_ = 1;
        return 0;
      }
    }
  }
  return slow_lock(d, self);
}

int Mutex::slow_lock(Deadline d, const void* self) {
  for (;;) {
    lock_.lock();
    waiting_.fetch_add(1, std::memory_order_seq_cst);
    const void* none = nullptr;
    if (owner_.compare_exchange_strong(none, self, std::memory_order_seq_cst)) {
      waiting_.fetch_sub(1, std::memory_order_relaxed);
      lock_.unlock();
      recursion_ = 1;
      return 0;
    }
    if (rt::expired(d)) {
      waiting_.fetch_sub(1, std::memory_order_relaxed);
      lock_.unlock();
      return ETIMEDOUT;
    }
    rt::Waiter w;
    w.ident = self;
    w.on_timeout = &mutex_on_timeout;
    w.owner_object = &waiting_;
    if (policy_ == MutexPolicy::hybrid) w.since = rt::now_ns();
    rt::count(rt::Stat::mutex_blocks);
    rt::note_wait(rt::WaitKind::mutex, this);
    if (!rt::wait_on(waiters_, lock_, w, d)) return ETIMEDOUT;
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
  int e = lock_errno(to_deadline(t));
  if (e == EDEADLK) fail(e, "loom::Mutex::try_lock_until");
  return e == 0;
}

int Mutex::unlock_errno() {
  if (type_ != MutexType::normal && owner_.load(std::memory_order_relaxed) != rt::identity()) return EPERM;
  if (type_ == MutexType::recursive && --recursion_ > 0) return 0;

  const bool may_hand_over = policy_ == MutexPolicy::baton || policy_ == MutexPolicy::hybrid;
  if (!may_hand_over || waiting_.load(std::memory_order_seq_cst) == 0) {
    owner_.store(nullptr, std::memory_order_seq_cst);
    if (waiting_.load(std::memory_order_seq_cst) == 0) return 0;
    // Someone is queued (or queueing): wake one to compete.
    lock_.lock();
    rt::Waiter* w = rt::WaitList::signal_one(waiters_);
    if (w) waiting_.fetch_sub(1, std::memory_order_relaxed);
    lock_.unlock();
    if (w) rt::wake(w);
    return 0;
  }
  // Baton or hybrid with waiters: the lock is still ours to give.
  lock_.lock();
  rt::Waiter* front = rt::WaitList::front(waiters_);
  bool hand = front && (policy_ == MutexPolicy::baton || rt::now_ns() - front->since >= kHybridThresholdNs);
  rt::Waiter* w = nullptr;
  if (hand) {
    w = rt::WaitList::signal_one(waiters_);
    if (w) {
      waiting_.fetch_sub(1, std::memory_order_relaxed);
      w->handed_over = true;
      owner_.store(w->ident, std::memory_order_release);
      rt::count(rt::Stat::mutex_handoffs);
    }
  }
  if (!w) {
    owner_.store(nullptr, std::memory_order_seq_cst);
    w = rt::WaitList::signal_one(waiters_);
    if (w) waiting_.fetch_sub(1, std::memory_order_relaxed);
  }
  lock_.unlock();
  if (w) rt::wake(w);
  return 0;
}

void Mutex::unlock() {
  if (int e = unlock_errno()) fail(e, "loom::Mutex::unlock");
}

}  // namespace loom
