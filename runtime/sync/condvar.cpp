// sync/condvar.cpp — condition variables over any loom::Mutex.
//
// wait: take the condvar's lock, release the mutex, enqueue, block (the
// condvar's lock is released after the switch). A notifier must hold the mutex to change the predicate, so it runs
// after the release and finds the waiter queued: no lost wake-up. Lock
// order is condvar lock → mutex lock, never the reverse (notify takes only
// the condvar's lock). The mutex is reacquired before returning, also after
// a timeout, as POSIX requires; a recursive mutex gets its depth back.
#include <cerrno>
#include <system_error>

#include "base/chaos.hpp"
#include "sync/wait.hpp"

namespace loom {

CondVar::~CondVar() { rt::dead_object(this, sizeof *this); }

int CondVar::wait_errno(Mutex& m, Deadline d) {
  if (m.type() != MutexType::normal && !m.held_by_caller()) return EPERM;
  rt::lock_object(lock_, this, "loom::CondVar");
  if (rt::expired(d)) {
    lock_.unlock();
    return ETIMEDOUT;  // the mutex was never released: nothing to reacquire
  }
  unsigned depth = m.recursion_;
  m.recursion_ = 1;
  // Release the mutex while holding lock_: a notifier needs lock_, so it
  // finds the record that wait_on queues before lock_ is released.
  m.unlock_errno();
  rt::Waiter w;
  rt::note_wait(rt::WaitKind::condvar, this);
  bool signalled = rt::wait_on(waiters_, lock_, w, d);
  m.lock_errno(kForever);
  m.recursion_ = depth;
  return signalled ? 0 : ETIMEDOUT;
}

void CondVar::wait(Mutex& m) {
  if (int e = wait_errno(m, kForever)) throw std::system_error(e, std::generic_category(), "loom::CondVar::wait");
}

bool CondVar::wait_until(Mutex& m, Clock::time_point t) {
  detail::StopPoint stop;  // (wait_on takes it: the mutex's relock is no stop point)
  int e = wait_errno(m, to_deadline(t));
  if (e == EPERM) throw std::system_error(e, std::generic_category(), "loom::CondVar::wait_until");
  return e == 0;
}

void CondVar::notify_one() {
  rt::lock_object(lock_, this, "loom::CondVar");
  rt::Waiter* w = rt::WaitList::signal_one(waiters_);
  lock_.unlock();  // the last touch: the woken waiter may destroy it
  LOOM_CHAOS_POINT(sync_release);
  if (w) rt::wake(w);
}

void CondVar::notify_all() {
  rt::WakeBatch batch;
  rt::lock_object(lock_, this, "loom::CondVar");
  while (rt::Waiter* w = rt::WaitList::signal_one(waiters_)) batch.add(w);
  lock_.unlock();  // the last touch
  LOOM_CHAOS_POINT(sync_release);
  batch.wake_all();
}

}  // namespace loom
