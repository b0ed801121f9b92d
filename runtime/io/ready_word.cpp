#include "io/ready_word.hpp"
#include "base/sys.hpp"

#include <sched.h>

#include <cerrno>

#include "sched/cluster.hpp"
#include "sched/processor.hpp"
#include "sched/timer.hpp"
#include "sync/wait.hpp"

namespace loom::rt {

namespace {

enum : int { kPosted = 0, kExpired = 1 };

// On the waiting fibre's stack, for the length of one wait. The word holds
// the Fibre itself, not this record, so a post touches nothing of the
// waiter's but what schedule() does; only the timer writes the result.
struct Parked {
  TimerNode timer;  // first member: TimerNode* -> Parked*
  std::atomic<std::uintptr_t>* word = nullptr;
  Fibre* fibre = nullptr;
  Cluster* cluster = nullptr;
  std::atomic<int> result{kPosted};
  std::atomic<bool> settled{false};  // timed waits: the park action is done with it
  const std::atomic<std::uint32_t>* gen = nullptr;  // ReadyWord::wait's gate
  std::uint32_t seen = 0;
};

bool parked_expire(TimerNode* n) {
  auto* r = reinterpret_cast<Parked*>(n);
  std::uintptr_t me = reinterpret_cast<std::uintptr_t>(r->fibre);
  if (!r->word->compare_exchange_strong(me, ReadyWord::kEmpty, std::memory_order_acq_rel)) return false;
  r->result.store(kExpired, std::memory_order_release);
  return true;
}

void parked_complete(TimerNode* n) { schedule(reinterpret_cast<Parked*>(n)->fibre); }

// The post-switch action of a wait (see ready_word.hpp).
void park(Processor&, Fibre*, void* arg) {
  auto* r = static_cast<Parked*>(arg);
  // Read before publishing: an untimed record may be gone once published.
  const bool timed = r->timer.deadline != kNoDeadline;
  Fibre* const self = r->fibre;
  std::atomic<std::uintptr_t>& word = *r->word;
  const std::atomic<std::uint32_t>* const gen = r->gen;
  const std::uint32_t seen = r->seen;
  std::uintptr_t cur = word.load(std::memory_order_acquire);
  for (;;) {
    if (cur == ReadyWord::kToken) {
      if (!word.compare_exchange_weak(cur, ReadyWord::kEmpty, std::memory_order_acq_rel)) continue;
      r->settled.store(true, std::memory_order_release);
      schedule(self);
      return;
    }
    // kEmpty: the turn mutex admits one waiter, so never another fibre.
    if (word.compare_exchange_weak(cur, reinterpret_cast<std::uintptr_t>(self), std::memory_order_seq_cst)) break;
  }
  // Published. A close bumps the count (seq_cst) before it posts: either it
  // posts after this publication and wakes the fibre, or the count read
  // here (seq_cst, after the publication) has changed. Then take the fibre
  // back unless a post already took it (and wakes it); either way it runs
  // at once and its caller sees the close.
  if (gen && gen->load(std::memory_order_seq_cst) != seen) {
    std::uintptr_t me = reinterpret_cast<std::uintptr_t>(self);
    if (word.compare_exchange_strong(me, ReadyWord::kEmpty, std::memory_order_acq_rel)) {
      r->settled.store(true, std::memory_order_release);  // ours again: the record is alive, no timer armed
      schedule(self);
      return;
    }
  }
  if (!timed) return;
  r->cluster->add_timer(&r->timer);
  r->settled.store(true, std::memory_order_release);
}

}  // namespace

void ReadyWord::post() noexcept {
  std::uintptr_t cur = word_.load(std::memory_order_acquire);
  for (;;) {
    if (cur == kToken) return;  // edges collapse
    if (__builtin_expect((cur & kCallbackBit) != 0, 0)) {
      if (post_callback(cur)) return;
      cur = word_.load(std::memory_order_acquire);
      continue;
    }
    std::uintptr_t next = cur == kEmpty ? kToken : kEmpty;
    if (!word_.compare_exchange_weak(cur, next, std::memory_order_acq_rel)) continue;
    if (cur != kEmpty) schedule(reinterpret_cast<Fibre*>(cur));  // took the waiter: its wake-up is ours
    return;
  }
}

// Out of line: the fibre path of post() only tests the bit.
__attribute__((noinline)) bool ReadyWord::post_callback(std::uintptr_t cur) noexcept {
  if (cur == kFiring) return true;  // collapses into the callback being invoked (see the header)
  if (!word_.compare_exchange_strong(cur, kFiring, std::memory_order_acquire)) return false;
  Callback fn = fn_;
  void* arg = arg_;
  word_.store(kEmpty, std::memory_order_release);  // fn_/arg_ read: the owner may arm again once fn ran
  fn(arg);
  return true;
}

int ReadyWord::arm(Callback fn, void* arg) noexcept {
  std::uintptr_t cur = word_.load(std::memory_order_acquire);
  for (;;) {
    if (cur == kToken) {
      if (word_.compare_exchange_weak(cur, kEmpty, std::memory_order_acq_rel)) return 1;
      continue;
    }
    if (cur != kEmpty) return EBUSY;
    // kEmpty was stored (release) after the last reader of fn_/arg_ read them.
    fn_ = fn;
    arg_ = arg;
    if (word_.compare_exchange_weak(cur, kCallback, std::memory_order_release, std::memory_order_acquire)) return 0;
  }
}

void ReadyWord::take_or_post(Callback& fn, void*& arg) noexcept {
  fn = nullptr;
  arg = nullptr;
  std::uintptr_t cur = word_.load(std::memory_order_acquire);
  for (int spins = 0;; ++spins) {
    if (cur == kFiring) {  // a poster is between its CAS and its two loads
      if (spins < 64)
        cpu_relax();
      else
        sys::sched_yield();  // ... and its kernel thread was preempted there
      cur = word_.load(std::memory_order_acquire);
      continue;
    }
    if (cur != kCallback) break;
    if (!word_.compare_exchange_weak(cur, kFiring, std::memory_order_acquire)) continue;
    fn = fn_;
    arg = arg_;
    word_.store(kEmpty, std::memory_order_release);
    return;
  }
  post();
}

bool ReadyWord::disarm() noexcept {
  std::uintptr_t cur = word_.load(std::memory_order_acquire);
  for (int spins = 0;; ++spins) {
    if (cur == kFiring) {  // a poster took it and is reading fn_/arg_: it will invoke it
      if (spins < 64)
        cpu_relax();
      else
        sys::sched_yield();
      cur = word_.load(std::memory_order_acquire);
      continue;
    }
    if (cur != kCallback) return false;
    if (word_.compare_exchange_weak(cur, kEmpty, std::memory_order_acq_rel)) return true;
  }
}

int ReadyWord::wait(Deadline d, const std::atomic<std::uint32_t>* gen, std::uint32_t seen) noexcept {
  std::uintptr_t cur = word_.load(std::memory_order_acquire);
  if (cur == kToken && word_.compare_exchange_strong(cur, kEmpty, std::memory_order_acq_rel)) return 0;
  if (expired(d)) return d == kNow ? EAGAIN : ETIMEDOUT;
  Processor* p = this_processor();
  Parked r;
  r.word = &word_;
  r.fibre = p->current();
  r.cluster = r.fibre->cluster;
  r.gen = gen;
  r.seen = seen;
  if (d != kForever) {
    r.timer.deadline = d;
    r.timer.expire = &parked_expire;
    r.timer.complete = &parked_complete;
  }
  p->suspend(&park, &r);
  // Resumed, maybe on another processor: by a post, by the timer, or by
  // the park action itself (the token arrived while it parked).
  if (d != kForever)
    while (!r.settled.load(std::memory_order_acquire)) cpu_relax();
  if (r.result.load(std::memory_order_acquire) == kPosted) {
    if (d != kForever) r.cluster->timers.remove(&r.timer);
    return 0;
  }
  return ETIMEDOUT;
}

}  // namespace loom::rt
