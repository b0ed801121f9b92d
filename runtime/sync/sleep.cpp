// sync/sleep.cpp — deadlines and sleeping, on the same timer path as every
// timed wait (a Waiter with no queue: only its timer can wake it).
#include <time.h>

#include <cerrno>

#include "sched/processor.hpp"
#include "base/sys.hpp"
#include "sync/wait.hpp"

namespace loom {

Deadline to_deadline(Clock::time_point t) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  if (ns >= rt::kNoDeadline) return kForever;  // time_point::max(): no deadline
  return ns <= 0 ? 1 : ns;  // 0 means "now": a past point is expired anyway
}

Deadline deadline_after(std::chrono::nanoseconds d) {
  std::int64_t now = rt::now_ns();
  if (d.count() <= 0) return now;
  if (d.count() >= rt::kNoDeadline - now) return kForever;  // would overflow: no deadline
  return now + d.count();
}

namespace rt {

// Sleeps the caller until the monotonic deadline d.
void sleep_until_ns(Deadline d) {
  if (d == kForever || now_ns() >= d) return;
  if (this_processor()) {
    SpinLock lock;  // wait_on's protocol needs one; only the timer takes it
    WaitQueue q;
    Waiter w;
    lock.lock();
    note_wait(WaitKind::sleep, nullptr);  // (wait_on stores the deadline)
    wait_on(q, lock, w, d);  // only the timer can end this wait
    return;
  }
  timespec ts{time_t(d / 1000000000), long(d % 1000000000)};
  while (sys::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

}  // namespace rt

namespace this_fibre {
void sleep_for(std::chrono::nanoseconds d) { rt::sleep_until_ns(deadline_after(d)); }
void sleep_until(Clock::time_point t) { rt::sleep_until_ns(to_deadline(t)); }
}  // namespace this_fibre

}  // namespace loom
