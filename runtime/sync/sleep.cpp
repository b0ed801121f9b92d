// sync/sleep.cpp — deadlines and sleeping, on the same timer path as every
// timed wait: a fibre parks (sync/parking_lot) on its own block's address,
// which nobody unparks, so only its timer wakes it — or, for the C API's
// sleeps (sleep_until_cancellable), a cancellation request
// (sched/cancel.hpp), and, for the program's (sleep_until_interruptible), a
// signal handler that runs on it (parking_lot::interrupt: the wait parks
// Interruptible::always). The runtime's own sleeps (pauses between looks)
// are neither: they would spin once a request is pending, and a program's
// handler has nothing to say to them.
#include <time.h>

#include <cerrno>

#include "sched/cancel.hpp"
#include "sched/processor.hpp"
#include "base/sys.hpp"
#include "sync/parking_lot.hpp"
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

namespace {
// Cancelled only if cancellable, interrupted only if interruptible (a
// fibre's: a kernel thread sleeps on through its signals, as before).
// With no deadline a cancellable sleep of a fibre lasts until a request
// (this_fibre::sleep_until(time_point::max())); any other returns at once.
SleepEnd sleep_parked(Deadline d, bool cancellable, bool interruptible) {
  Processor* p = this_processor();
  if (d == kForever ? !(cancellable && p) : now_ns() >= d) return SleepEnd::reached;
  if (p) {
    parking_lot::ParkOps ops;
    ops.wait_kind = WaitKind::sleep;
    ops.cancellable = cancellable;
    if (interruptible) ops.interruptible = parking_lot::Interruptible::always;
    switch (parking_lot::park(p->current(), ops, d).result) {
      case ParkResult::Cancelled:
        return SleepEnd::cancelled;
      case ParkResult::Interrupted:
        return SleepEnd::interrupted;
      default:
        return SleepEnd::reached;
    }
  }
  timespec ts{time_t(d / 1000000000), long(d % 1000000000)};
  while (sys::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
  return SleepEnd::reached;
}
}  // namespace

// Sleeps the caller until the monotonic deadline d.
void sleep_until_ns(Deadline d) { sleep_parked(d, false, false); }

bool sleep_until_cancellable(Deadline d) { return sleep_parked(d, true, false) != SleepEnd::cancelled; }

SleepEnd sleep_until_interruptible(Deadline d, bool cancellable) { return sleep_parked(d, cancellable, true); }

}  // namespace rt

// The program's sleeps are stop points (Fibre::request_stop); the
// runtime's own (rt::sleep_until_ns) are not: its retry loops would spin.
namespace this_fibre {
bool sleep_for(std::chrono::nanoseconds d) { return rt::sleep_until_cancellable(deadline_after(d)); }
bool sleep_until(Clock::time_point t) { return rt::sleep_until_cancellable(to_deadline(t)); }
}  // namespace this_fibre

}  // namespace loom
