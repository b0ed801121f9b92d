// sync/parking_lot.cpp — see parking_lot.hpp for the contract and the
// argument. The waiting itself is wait.hpp's protocol, step for step; what
// differs is that one bucket's queue holds the waiters of many keys, so the
// unparkers look for their key, and a timed-out waiter tells its primitive
// whether it was the last one on its key. A requeue (futex(2)'s) may move a
// waiter to another bucket: its `bucket` changes only with both buckets
// locked, so whoever must lock a waiter's bucket from outside (its timeout)
// reads it, locks, and reads again (lock_bucket).
#include "sync/parking_lot.hpp"

#include <new>

#include "sched/cancel.hpp"
#include "sched/cluster.hpp"
#include "sched/processor.hpp"
#include "sync/wait.hpp"

namespace loom::rt::parking_lot {

namespace {

struct alignas(64) Bucket {
  SpinLock lock;
  WaitQueue queue;
};

constexpr unsigned kBucketBits = 12;
constexpr unsigned kBuckets = 1u << kBucketBits;
// Constant-initialised (constexpr constructors only): usable before any
// constructor of the process has run.
Bucket table[kBuckets];

Bucket& bucket_of(const void* key) {
  auto k = reinterpret_cast<std::uintptr_t>(key);
  return table[(k * 0x9E3779B97F4A7C15ull) >> (64 - kBucketBits)];
}

struct ParkWaiter : Waiter {
  const void* key = nullptr;
  const ParkOps* ops = nullptr;
  Bucket* bucket = nullptr;  // changed by a requeue, under both buckets' locks (lock_bucket)
  ParkToken token = 0;
  ParkToken park_token = 0;  // ParkOps::park_token
  bool interrupted = false;  // interrupt() won: set before the fibre is scheduled
};

ParkWaiter* pw(Waiter* w) { return static_cast<ParkWaiter*>(w); }

bool has_key(Bucket& b, const void* key, ParkToken park_token) {
  for (Waiter* w = WaitList::front(b.queue); w; w = w->next)
    if (pw(w)->key == key && pw(w)->park_token == park_token) return true;
  return false;
}

// Locks the bucket w is queued in now: a requeue may move w between the
// read and the lock.
Bucket* lock_bucket(ParkWaiter* w) {
  for (;;) {
    Bucket* b = __atomic_load_n(&w->bucket, __ATOMIC_ACQUIRE);
    b->lock.lock();
    if (__atomic_load_n(&w->bucket, __ATOMIC_RELAXED) == b) return b;
    b->lock.unlock();
  }
}

// With the bucket lock held, after a timeout won the CAS.
void unqueue_timed_out(ParkWaiter* w) {
  if (w->queued) WaitList::remove(w->bucket->queue, w);
  if (w->ops->timed_out) w->ops->timed_out(w->ops->ctx, !has_key(*w->bucket, w->key, w->park_token));
}

bool timer_expire(TimerNode* n) {
  auto* w = reinterpret_cast<Waiter*>(n);
  int expected = kWaiting;
  return w->state.compare_exchange_strong(expected, kTimedOut, std::memory_order_acq_rel);
}

void timer_complete(TimerNode* n) {
  ParkWaiter* w = pw(reinterpret_cast<Waiter*>(n));
  Fibre* f = w->fibre;
  Bucket* b = lock_bucket(w);
  unqueue_timed_out(w);
  b->lock.unlock();
  schedule(f);  // from here on w may be gone
}

// Runs on the processor the parking fibre left, after its context is saved.
// Nothing may touch w after the unlock: an unparker may wake the fibre,
// which may return from park() on another processor at once.
void post_park(Processor&, Fibre*, void* arg) {
  ParkWaiter* w = static_cast<ParkWaiter*>(arg);
  if (w->timer.deadline != kNoDeadline) w->cluster->add_timer(&w->timer);
  w->bucket->lock.unlock();  // (held since park(): no requeue has moved w)
}

bool is_fibre(Processor* p) {
  if (!p) return false;
  Fibre* f = p->current();
  return f && f != &p->idle_fibre();
}

}  // namespace

SignalHooks signal_hooks;

bool interrupt(const void* key, const Fibre* f) noexcept {
  Bucket& b = bucket_of(key);
  b.lock.lock();
  ParkWaiter* found = nullptr;
  for (Waiter* w = WaitList::front(b.queue); w; w = w->next)
    if (pw(w)->key == key && w->fibre == f) {
      found = pw(w);
      break;
    }
  int expected = kWaiting;
  if (!found || !found->state.compare_exchange_strong(expected, kTimedOut, std::memory_order_acq_rel)) {
    b.lock.unlock();
    return false;
  }
  found->interrupted = true;
  Fibre* target = found->fibre;
  unqueue_timed_out(found);
  b.lock.unlock();
  schedule(target);  // from here on found may be gone
  return true;
}

// One wait; Interrupted when interrupt() cut it short (or a handler was
// already due): park() runs the handlers and decides.
Parked park_once(const void* key, const ParkOps& ops, Deadline deadline) {
  Bucket& b = bucket_of(key);
  ParkWaiter w;
  w.key = key;
  w.park_token = ops.park_token;
  w.ops = &ops;
  w.bucket = &b;
  w.lock = &b.lock;
  b.lock.lock();
  if (auto h = signal_hooks.parking.load(std::memory_order_relaxed)) {
    Processor* p = this_processor();
    if (is_fibre(p) && h(key, p->current())) {
      b.lock.unlock();
      return {ParkResult::Interrupted, 0};
    }
  }
  if (ops.validate && !ops.validate(ops.ctx)) {
    b.lock.unlock();
    return {ParkResult::Invalid, 0};
  }
  if (expired(deadline)) {
    b.lock.unlock();
    return {ParkResult::TimedOut, 0};
  }
  if (ops.stamp) w.since = now_ns();
  w.timed = deadline != kForever;
  WaitList::push_back(b.queue, &w);

  Processor* p = this_processor();
  if (is_fibre(p)) {
    Fibre* self = p->current();
    w.fibre = self;
    w.ident = self;
    if (deadline != kForever) {
      w.cluster = self->cluster;
      w.timer.deadline = deadline;
      w.timer.expire = &timer_expire;
      w.timer.complete = &timer_complete;
    }
    note_wait(ops.wait_kind, key);
    if (deadline != kForever) self->wait_deadline.store(deadline, std::memory_order_relaxed);  // for the listing
    if (ops.cancellable && cancel_pending_here()) {  // the one load a cancellation point pays
      unqueue_timed_out(&w);
      b.lock.unlock();
      if (auto h = signal_hooks.parking.load(std::memory_order_relaxed)) h(nullptr, self);  // not parked after all
      return {ParkResult::Cancelled, 0};
    }
    p->suspend(&post_park, &w);
    // Resumed, perhaps on another processor: unparked, timed out and
    // already unqueued by timer_complete, cancelled (cancel below), or
    // interrupted (then it will most likely park again: the signal side
    // still counts it parked until park() says the wait is over).
    if (!w.interrupted)
      if (auto h = signal_hooks.parking.load(std::memory_order_relaxed)) h(nullptr, self);  // no longer parked
    int st = w.state.load(std::memory_order_acquire);
    if (st == kSignalled) {
      if (deadline != kForever) w.cluster->timers.remove(&w.timer);
      return {ParkResult::Unparked, w.token};
    }
    if (st == kCancelled) {
      if (deadline != kForever) w.cluster->timers.remove(&w.timer);
      return {ParkResult::Cancelled, 0};
    }
    if (w.interrupted) {  // interrupt() unqueued it; its timer, if any, is still armed
      if (deadline != kForever) w.cluster->timers.remove(&w.timer);
      return {ParkResult::Interrupted, 0};
    }
    return {ParkResult::TimedOut, 0};
  }

  // A kernel thread (not running a fibre) blocks itself: wait.hpp step 5.
  w.fibre = nullptr;
  w.ident = identity();
  b.lock.unlock();
  // Ends the wait on the thread's own: off the queue, as after a timeout.
  auto leave = [&w](ParkResult why) -> Parked {
    Bucket* now = lock_bucket(&w);
    unqueue_timed_out(&w);
    now->lock.unlock();
    return {why, 0};
  };
  if (auto due = kernel_cancel_due.load(std::memory_order_acquire); ops.cancellable && due && due()) {
    int expected = kWaiting;
    if (w.state.compare_exchange_strong(expected, kCancelled, std::memory_order_acq_rel))
      return leave(ParkResult::Cancelled);
    // (else an unpark or cancel_kernel won: below)
  }
  for (;;) {
    if (w.released.load(std::memory_order_acquire)) {
      if (w.state.load(std::memory_order_acquire) != kCancelled) return {ParkResult::Unparked, w.token};
      return leave(ParkResult::Cancelled);  // cancel_kernel's: still queued
    }
    bool signalled = w.state.load(std::memory_order_acquire) == kSignalled;
    if (!signalled && deadline != kForever && now_ns() >= deadline) {
      int expected = kWaiting;
      if (w.state.compare_exchange_strong(expected, kTimedOut, std::memory_order_acq_rel))
        return leave(ParkResult::TimedOut);
      signalled = true;  // an unpark won meanwhile: wait for its release
    }
    futex_wait(&w.released, 0, signalled || deadline == kForever ? -1 : deadline);
  }
}

bool cancel(const void* key, Fibre* f) noexcept {
  Bucket& b = bucket_of(key);
  ParkWaiter* won = nullptr;
  b.lock.lock();
  for (Waiter* w = WaitList::front(b.queue); w; w = w->next) {
    ParkWaiter* x = pw(w);
    if (x->fibre != f || x->key != key || !x->ops->cancellable) continue;
    // Queued under this lock: its context is saved (post_park unlocks after
    // the switch), no unparker has taken it; only its timer may compete.
    int expected = kWaiting;
    if (x->state.compare_exchange_strong(expected, kCancelled, std::memory_order_acq_rel)) {
      unqueue_timed_out(x);
      won = x;
    }
    break;
  }
  b.lock.unlock();
  if (!won) return false;
  schedule(f);  // from here on the record may be gone
  return true;
}

std::atomic<bool (*)()> kernel_cancel_due{nullptr};

bool cancel_kernel(const void* ident) noexcept {
  for (Bucket& b : table) {
    b.lock.lock();
    ParkWaiter* won = nullptr;
    for (Waiter* w = WaitList::front(b.queue); w; w = w->next) {
      ParkWaiter* x = pw(w);
      if (x->fibre || x->ident != ident || !x->ops->cancellable) continue;
      int expected = kWaiting;
      if (x->state.compare_exchange_strong(expected, kCancelled, std::memory_order_acq_rel)) won = x;
      break;
    }
    b.lock.unlock();
    if (won) {
      // It waits for `released` (a timeout of its own finds the state taken
      // and waits too), then leaves the queue itself; from the store on, the
      // record may be gone (a wake of its word then is harmless).
      won->released.store(1, std::memory_order_release);
      futex_wake(&won->released, 1);
      return true;
    }
  }
  return false;
}

Parked park(const void* key, const ParkOps& ops, Deadline deadline) {
  for (;;) {
    Parked r = park_once(key, ops, deadline);
    if (r.result != ParkResult::Interrupted) return r;
    // The handlers due run here, on the fibre, no lock held; then the wait
    // goes on (validate again) unless the primitive can fail with EINTR
    // and a handler that ends it ran (Interruptible).
    auto h = signal_hooks.interrupted.load(std::memory_order_acquire);
    Handled ran = h ? h() : Handled::none;
    if ((ops.interruptible == Interruptible::always && ran != Handled::none) ||
        (ops.interruptible == Interruptible::unless_restart && ran == Handled::interrupt)) {
      // Over (EINTR): no longer parked for the signal side, which would
      // otherwise post a handler routed to the fibre now for its next
      // delivery point, as to a fibre still waiting. (Only a fibre's park
      // is interrupted.)
      if (auto p = signal_hooks.parking.load(std::memory_order_relaxed)) p(nullptr, this_processor()->current());
      return r;
    }
  }
}

UnparkResult unpark_one(const void* key, ParkToken (*callback)(void*, UnparkResult), void* ctx) {
  Bucket& b = bucket_of(key);
  UnparkResult r{false, false, 0};
  ParkWaiter* won = nullptr;
  b.lock.lock();
  for (Waiter* w = WaitList::front(b.queue); w;) {
    Waiter* next = w->next;
    if (pw(w)->key == key) {
      if (won) {
        r.more = true;
        break;
      }
      WaitList::remove(b.queue, w);
      if (claim(w)) won = pw(w);
      // else it timed out: its timer's complete finds it unqueued.
    }
    w = next;
  }
  if (won) {
    r.unparked = true;
    r.since = won->since;
  }
  ParkToken token = callback ? callback(ctx, r) : 0;
  if (won) won->token = token;
  b.lock.unlock();
  if (won) wake(won);
  return r;
}

unsigned unpark_all(const void* key, ParkToken token) {
  Bucket& b = bucket_of(key);
  WakeBatch batch;
  unsigned n = 0;
  b.lock.lock();
  for (Waiter* w = WaitList::front(b.queue); w;) {
    Waiter* next = w->next;
    if (pw(w)->key == key) {
      WaitList::remove(b.queue, w);
      if (claim(w)) {
        pw(w)->token = token;
        batch.add(w);
        ++n;
      }
    }
    w = next;
  }
  b.lock.unlock();
  batch.wake_all();
  return n;
}

Requeued requeue(const void* from, const void* to, unsigned nwake, unsigned nmove, bool (*validate)(void*), void* ctx) {
  Bucket& b1 = bucket_of(from);
  Bucket& b2 = bucket_of(to);
  Bucket* first = &b1 < &b2 ? &b1 : &b2;
  Bucket* second = &b1 < &b2 ? &b2 : &b1;
  first->lock.lock();
  if (second != first) second->lock.lock();
  auto unlock = [&] {
    if (second != first) second->lock.unlock();
    first->lock.unlock();
  };
  Requeued r{true, 0, 0};
  bool any = false;
  for (Waiter* w = WaitList::front(b1.queue); w && !any; w = w->next) any = pw(w)->key == from;
  if (!any) {  // nothing to do here: validate is not called
    unlock();
    return r;
  }
  if (validate && !validate(ctx)) {
    unlock();
    r.valid = false;
    return r;
  }
  WakeBatch batch;
  for (Waiter* w = WaitList::front(b1.queue); w && (r.woken < nwake || r.requeued < nmove);) {
    Waiter* next = w->next;
    if (pw(w)->key == from) {
      if (r.woken < nwake) {
        WaitList::remove(b1.queue, w);
        if (claim(w)) {
          pw(w)->token = 0;
          batch.add(w);
          ++r.woken;
        }
        // else it timed out: its timer's complete finds it unqueued.
      } else if (w->state.load(std::memory_order_acquire) == kWaiting) {
        // (One whose timeout won is on its way out of b1: left there.)
        if (&b2 != &b1) {
          WaitList::remove(b1.queue, w);
          WaitList::push_back(b2.queue, w);
          __atomic_store_n(&pw(w)->bucket, &b2, __ATOMIC_RELEASE);
          w->lock = &b2.lock;
        }
        pw(w)->key = to;
        ++r.requeued;
      }
    }
    w = next;
  }
  unlock();
  batch.wake_all();
  return r;
}

SomeResult unpark_some(const void* key, Take (*choose)(void*, ParkToken), ParkToken (*callback)(void*, SomeResult),
                       void* ctx) {
  Bucket& b = bucket_of(key);
  WakeBatch batch;
  SomeResult r{0, 0};
  b.lock.lock();
  for (;;) {
    // Waiters whose timer already won their state are on their way out.
    ParkToken queued = 0;
    for (Waiter* w = WaitList::front(b.queue); w; w = w->next)
      if (pw(w)->key == key && w->state.load(std::memory_order_acquire) == kWaiting) queued |= pw(w)->park_token;
    Take t = choose(ctx, queued);
    bool lost = false;
    for (Waiter* w = WaitList::front(b.queue); w && r.unparked < t.limit;) {
      Waiter* next = w->next;
      if (pw(w)->key == key && (pw(w)->park_token & t.mask)) {
        WaitList::remove(b.queue, w);
        if (claim(w)) {
          batch.add(w);
          ++r.unparked;
        } else {
          lost = true;  // it timed out: its timer's complete finds it unqueued
        }
      }
      w = next;
    }
    if (r.unparked > 0 || !lost) break;
  }
  for (Waiter* w = WaitList::front(b.queue); w; w = w->next)
    if (pw(w)->key == key) r.remaining |= pw(w)->park_token;
  ParkToken token = callback(ctx, r);
  for (Waiter* w = batch.head; w; w = w->next) pw(w)->token = token;
  b.lock.unlock();
  batch.wake_all();
  return r;
}

unsigned queued_now() {
  unsigned n = 0;
  for (Bucket& b : table) {
    b.lock.lock();
    for (Waiter* w = WaitList::front(b.queue); w; w = w->next) ++n;
    b.lock.unlock();
  }
  return n;
}

void forget_after_fork() noexcept {
  for (Bucket& b : table) new (&b) Bucket();
}

}  // namespace loom::rt::parking_lot
