// sync/barrier.cpp — Barrier and OnceFlag, both on the wait protocol
// (without timeouts, so every signal_one succeeds).
#include <stdexcept>

#include "base/chaos.hpp"
#include "sync/wait.hpp"

namespace loom {

Barrier::Barrier(unsigned count) : count_(count) {
  if (count == 0) throw std::invalid_argument("loom::Barrier: count must be at least 1");
}

Barrier::~Barrier() { rt::dead_object(this, sizeof *this); }

bool Barrier::arrive_and_wait() {
  rt::lock_object(lock_, this, "loom::Barrier");
  if (++arrived_ == count_) {
    // The last arrival is the serial one: it opens the next phase.
    arrived_ = 0;
    ++phase_;
    rt::WakeBatch batch;
    while (rt::Waiter* w = rt::WaitList::signal_one(waiters_)) batch.add(w);
    lock_.unlock();  // the last touch: a waiter let through may destroy it
    LOOM_CHAOS_POINT(sync_release);
    batch.wake_all();
    return true;
  }
  rt::Waiter w;
  rt::note_wait(rt::WaitKind::barrier, this);
  rt::wait_on(waiters_, lock_, w, kForever);
  return false;
}

bool OnceFlag::begin() {
  lock_.lock();
  for (;;) {
    if (state_ == 2) {
      lock_.unlock();
      return false;
    }
    if (state_ == 0) {
      state_ = 1;
      lock_.unlock();
      return true;
    }
    rt::Waiter w;
    rt::note_wait(rt::WaitKind::barrier, this);
    rt::wait_on(waiters_, lock_, w, kForever);  // returns with lock_ released
    lock_.lock();
  }
}

void OnceFlag::finish(bool done) {
  rt::WakeBatch batch;
  lock_.lock();
  state_ = done ? 2 : 0;
  while (rt::Waiter* w = rt::WaitList::signal_one(waiters_)) batch.add(w);
  lock_.unlock();
  batch.wake_all();
}

}  // namespace loom
