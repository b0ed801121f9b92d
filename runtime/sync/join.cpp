// sync/join.cpp — Fibre::join_until and try_join: a join that can give up.
//
// The join word (sched/fibre.hpp) admits one joiner, and its exit hands the
// processor straight to a parked fibre joiner; neither can be taken back.
// A timed joiner therefore publishes a record of its own instead of itself:
// its address | kJoinTimedTag. Two parties may take that value off the word,
// and exactly one does:
//  - the fibre's exit, by its exchange to kJoinDone (sched/processor.cpp's
//    post_exit, which then calls wake_timed_joiner);
//  - the joiner's timer, by a CAS from the tagged value back to
//    kJoinRunning: the fibre stays joinable, as if nobody had tried.
// Order, for a fibre joiner: in the post-switch action (its context saved),
// publish with a CAS from kJoinRunning; failing (the fibre has exited), set
// `phase` to kNothingArmed and reschedule self; else arm the timer and set
// `phase` to kArmed, the action's last touch of the record. Once published,
// the joiner may be woken (by the exit, or by a timer that fires at once on
// another processor) before that last store: so a woken joiner first waits
// for `phase` to leave kRegistering (a few instructions away, on another
// processor: the one that runs the action cannot run the joiner before it
// returns), and only then reads the outcome, removes its timer (the heap
// lock: an expire() that lost is done with the record) and returns. A
// kernel-thread joiner uses the foreign protocol with a futex timeout and
// on timeout takes back kJoinForeign with a CAS.
//
// A timed join is also a stop point (Fibre::request_stop; sched/cancel.hpp):
// the joiner publishes its record, tagged, in its cancel_waiter, and looks
// for a request before it suspends; a requester that finds the record waits
// for `phase` to leave kRegistering and, if armed, ends the join as the
// timer would, with the same CAS (a third party that may take the value,
// and still exactly one does). The joiner then removes its timer. A joiner
// that saw the request before suspending sets kNothingArmed itself, so a
// requester never waits for an action that will not come.
//
// Nothing of this runs unless a timed join is asked for: exit tests one bit
// more on a path that already branches on the word.
#include <stdexcept>

#include "base/futex.hpp"
#include "sched/cancel.hpp"
#include "sched/cluster.hpp"
#include "sched/processor.hpp"
#include "sync/wait.hpp"

namespace loom {

namespace rt {
namespace {

enum : int { kRegistering = 0, kArmed = 1, kNothingArmed = 2 };

struct TimedJoin {
  TimerNode timer;  // first member: TimerNode* → TimedJoin*
  Fibre* target = nullptr;
  Fibre* joiner = nullptr;
  Cluster* cluster = nullptr;
  std::atomic<int> phase{kRegistering};
  bool timed_out = false;  // written by the winning expire(), read by the joiner after it is scheduled
  bool stopped = false;    // the same, by a stop request that won (cancel_timed_join)
  std::uintptr_t word() const { return reinterpret_cast<std::uintptr_t>(this) | kJoinTimedTag; }
};
static_assert(alignof(TimedJoin) > 1);

bool timed_join_expire(TimerNode* n) {
  auto* tj = reinterpret_cast<TimedJoin*>(n);
  std::uintptr_t expected = tj->word();
  if (!tj->target->join.compare_exchange_strong(expected, kJoinRunning, std::memory_order_acq_rel)) return false;
  tj->timed_out = true;
  return true;
}

void timed_join_complete(TimerNode* n) { schedule(reinterpret_cast<TimedJoin*>(n)->joiner); }

void post_register_timed_joiner(Processor&, Fibre* joiner, void* arg) {
  auto* tj = static_cast<TimedJoin*>(arg);
  std::uintptr_t expected = kJoinRunning;
  if (!tj->target->join.compare_exchange_strong(expected, tj->word(), std::memory_order_acq_rel)) {
    tj->phase.store(kNothingArmed, std::memory_order_release);  // before the joiner can run
    schedule(joiner);                                           // it finished meanwhile
    return;
  }
  // (No deadline — Clock::time_point::max(), waiting only for the end or a
  // stop — no timer: it would have fired at once.)
  if (tj->timer.deadline != kForever) tj->cluster->add_timer(&tj->timer);
  tj->phase.store(kArmed, std::memory_order_release);  // the last touch: the joiner may be waiting for it
}

}  // namespace

void cancel_timed_join(void* record) noexcept {
  auto* tj = static_cast<TimedJoin*>(record);
  int phase;
  while ((phase = tj->phase.load(std::memory_order_acquire)) == kRegistering) cpu_relax();
  if (phase != kArmed) return;  // the fibre had ended, or the joiner saw the request itself
  std::uintptr_t expected = tj->word();
  if (!tj->target->join.compare_exchange_strong(expected, kJoinRunning, std::memory_order_acq_rel)) return;
  tj->stopped = true;
  schedule(tj->joiner);
}

void wake_timed_joiner(std::uintptr_t w) noexcept {
  schedule(reinterpret_cast<TimedJoin*>(w & ~kJoinTimedTag)->joiner);  // (it waits for its own registration to end)
}

}  // namespace rt

bool Fibre::join_until(std::chrono::steady_clock::time_point t) { return join_deadline(to_deadline(t)); }

bool Fibre::try_join() { return join_deadline(kNow); }

bool Fibre::wait_ended_until(std::chrono::steady_clock::time_point t) { return join_deadline(to_deadline(t), false); }

bool Fibre::join_deadline(std::int64_t d, bool release) {
  if (!f_) throw std::invalid_argument("loom: join of a fibre that is not joinable");
  if (f_ == rt::this_fibre_or_null()) throw std::invalid_argument("loom: a fibre cannot join itself");
  rt::Fibre* f = f_;
  if (f->join.load(std::memory_order_acquire) != rt::kJoinDone) {
    if (rt::expired(d)) return false;
    if (rt::Processor* p = rt::this_processor()) {
      rt::TimedJoin tj;
      tj.target = f;
      tj.joiner = p->current();
      tj.cluster = tj.joiner->cluster;
      tj.timer.deadline = d;
      tj.timer.expire = &rt::timed_join_expire;
      tj.timer.complete = &rt::timed_join_complete;
      rt::note_wait(rt::WaitKind::join, reinterpret_cast<const void*>(std::uintptr_t(f->id)));
      tj.joiner->cancel_waiter.store(reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(&tj) | rt::kTimedJoinWaiter),
                                     std::memory_order_release);
      if (rt::cancel_pending_here()) {
        tj.phase.store(rt::kNothingArmed, std::memory_order_release);  // (a requester may be waiting for it)
        rt::end_cancellable_wait(tj.joiner);
        return false;
      }
      p->suspend(&rt::post_register_timed_joiner, &tj);
      // Resumed: the exit woke us (or we found it done), the timer did, or
      // a stop request; the action that registered us may still be
      // finishing.
      int phase;
      while ((phase = tj.phase.load(std::memory_order_acquire)) == rt::kRegistering) rt::cpu_relax();
      rt::end_cancellable_wait(tj.joiner);  // no requester looks at tj from here
      if (tj.timed_out) return false;
      if (phase == rt::kArmed) tj.cluster->timers.remove(&tj.timer);
      if (tj.stopped) return false;  // still joinable
    } else {
      std::uintptr_t expected = rt::kJoinRunning;
      if (f->join.compare_exchange_strong(expected, rt::kJoinForeign, std::memory_order_acq_rel)) {
        while (f->done.load(std::memory_order_acquire) == 0) {
          if (d != kForever && rt::now_ns() >= d) {
            expected = rt::kJoinForeign;
            if (f->join.compare_exchange_strong(expected, rt::kJoinRunning, std::memory_order_acq_rel)) return false;
            while (f->done.load(std::memory_order_acquire) == 0) rt::futex_wait(&f->done, 0);  // the exit took it
            break;
          }
          rt::futex_wait(&f->done, 0, d);
        }
      }
    }
  }
  if (release) rt::release_fibre(std::exchange(f_, nullptr));
  return true;
}

}  // namespace loom
