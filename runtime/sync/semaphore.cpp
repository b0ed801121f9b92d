// sync/semaphore.cpp — counting and binary semaphores on the wait protocol
// of sync/wait.hpp. release() hands its unit straight to a waiter won by
// signal_one (the count does not rise), so a unit is never both counted and
// given, and a waiter that timed out never consumes one.
#include <cerrno>
#include <system_error>

#include "base/chaos.hpp"
#include "sync/wait.hpp"

namespace loom {

Semaphore::Semaphore(unsigned initial, unsigned max) : count_(initial > max ? max : initial), max_(max ? max : 1) {}

Semaphore::~Semaphore() { rt::dead_object(this, sizeof *this); }

int Semaphore::acquire_errno(Deadline d) {
  rt::lock_object(lock_, this, "loom::Semaphore");
  if (count_ > 0) {
    --count_;
    lock_.unlock();
    return 0;
  }
  if (rt::expired(d)) {
    lock_.unlock();
    return d == kNow ? EAGAIN : ETIMEDOUT;
  }
  rt::Waiter w;
  rt::note_wait(rt::WaitKind::semaphore, this);
  return rt::wait_on(waiters_, lock_, w, d) ? 0 : ETIMEDOUT;
}

void Semaphore::acquire() { acquire_errno(kForever); }
bool Semaphore::try_acquire() { return acquire_errno(kNow) == 0; }
bool Semaphore::try_acquire_until(Clock::time_point t) {
  detail::StopPoint stop;
  return acquire_errno(to_deadline(t)) == 0;
}

int Semaphore::release_errno() {
  rt::lock_object(lock_, this, "loom::Semaphore");
  if (rt::Waiter* w = rt::WaitList::signal_one(waiters_)) {
    lock_.unlock();  // the last touch: the unit is the waiter's
    LOOM_CHAOS_POINT(sync_release);
    rt::wake(w);
    return 0;
  }
  int e = 0;
  if (count_ < max_)
    ++count_;
  else if (max_ != 1)
    e = EOVERFLOW;  // a binary semaphore just stays at 1
  lock_.unlock();
  LOOM_CHAOS_POINT(sync_release);
  return e;
}

void Semaphore::release() {
  if (int e = release_errno()) throw std::system_error(e, std::generic_category(), "loom::Semaphore::release");
}

unsigned Semaphore::value() const {
  rt::lock_object(lock_, this, "loom::Semaphore");
  unsigned n = count_;
  lock_.unlock();
  return n;
}

}  // namespace loom
