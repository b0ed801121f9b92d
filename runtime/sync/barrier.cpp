// sync/barrier.cpp — Barrier and OnceFlag, both on the wait protocol.
// Their timed forms: a barrier arrival that times out withdraws (pthread
// barriers have no timed wait; this is loom's own, see BarrierTimeout), and
// call_once_until gives up waiting for another caller's run of the function
// (std::call_once has no timed form either).
#include <cerrno>
#include <stdexcept>

#include "base/chaos.hpp"
#include "sync/wait.hpp"

namespace loom {

Barrier::Barrier(unsigned count) : count_(count) {
  if (count == 0) throw std::invalid_argument("loom::Barrier: count must be at least 1");
}

Barrier::~Barrier() { rt::dead_object(this, sizeof *this); }

// A timed-out arrival leaves under the lock (the wait protocol's on_timeout,
// run by the timer or by the kernel thread itself): it withdraws its count if
// its phase is still open; if the phase completed first (the last arrival
// counted it and found it timed out), it reports the phase instead.
struct rt::BarrierTimeout {
  static void withdraw(Waiter* w, WakeBatch&) {
    auto* b = static_cast<Barrier*>(w->owner_object);
    if (b->phase_ == w->tag)
      --b->arrived_;
    else
      w->handed_over = true;
  }
};

int Barrier::arrive_and_wait_errno(Deadline d, bool* serial) {
  *serial = false;
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
    *serial = true;
    return 0;
  }
  if (rt::expired(d)) {
    --arrived_;
    lock_.unlock();
    return d == kNow ? EBUSY : ETIMEDOUT;
  }
  rt::Waiter w;
  // (Also with no deadline: a timed form's stop point ends the wait as a
  // timeout does, and Clock::time_point::max() is no deadline.)
  w.tag = phase_;
  w.owner_object = this;
  w.on_timeout = &rt::BarrierTimeout::withdraw;
  rt::note_wait(rt::WaitKind::barrier, this);
  if (rt::wait_on(waiters_, lock_, w, d) || w.handed_over) return 0;
  return ETIMEDOUT;
}

bool Barrier::arrive_and_wait() {
  bool serial;
  arrive_and_wait_errno(kForever, &serial);
  return serial;
}

std::optional<bool> Barrier::arrive_and_wait_until(Clock::time_point t) {
  detail::StopPoint stop;
  return arrive_result(to_deadline(t));
}

int OnceFlag::begin(Deadline d) {
  // A stop point (call_once_until's) for each of its waits: a run that
  // failed wakes the waiters, and one may find another run started.
  rt::Fibre* stoppable = rt::cancel_marked();
  lock_.lock();
  for (;;) {
    if (state_ == 2) {
      lock_.unlock();
      return 0;
    }
    if (state_ == 0) {
      state_ = 1;
      lock_.unlock();
      return 1;
    }
    if (rt::expired(d)) {
      lock_.unlock();
      return -1;
    }
    rt::Waiter w;
    rt::note_wait(rt::WaitKind::barrier, this);
    if (stoppable) stoppable->cancel_wait = true;  // (wait_on takes it)
    if (!rt::wait_on(waiters_, lock_, w, d)) return -1;  // returns with lock_ released
    lock_.lock();
  }
}

void OnceFlag::finish(bool done) {
  rt::WakeBatch batch;
  lock_.lock();
  __atomic_store_n(&state_, std::uint8_t(done ? 2 : 0), __ATOMIC_RELEASE);  // is_done() reads it unlocked
  while (rt::Waiter* w = rt::WaitList::signal_one(waiters_)) batch.add(w);
  lock_.unlock();
  batch.wake_all();
}

}  // namespace loom
