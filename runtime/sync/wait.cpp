#include "sync/wait.hpp"
#include "base/membarrier.hpp"

#include <cstring>

#include "sched/cancel.hpp"
#include "sched/cluster.hpp"
#include "sched/processor.hpp"

namespace loom::rt {

namespace {

// Even, like a Fibre's address: loom::Mutex keeps a mark in bit 0 of its owner.
alignas(8) thread_local char thread_identity;

bool timer_expire(TimerNode* n) {
  auto* w = reinterpret_cast<Waiter*>(n);
  int expected = kWaiting;
  return w->state.compare_exchange_strong(expected, kTimedOut, std::memory_order_acq_rel);
}

// Unqueue a waiter whose timeout won; the lock keeps it from running early.
void unqueue_timed_out(Waiter* w, WakeBatch& batch) {
  if (w->queued) WaitList::remove(*w->queue, w);
  if (w->on_timeout) w->on_timeout(w, batch);
}

void timer_complete(TimerNode* n) {
  auto* w = reinterpret_cast<Waiter*>(n);
  WakeBatch batch;
  Fibre* f = w->fibre;
  if (w->lock) {
    w->lock->lock();
    unqueue_timed_out(w, batch);
    w->lock->unlock();
  }
  batch.wake_all();
  schedule(f);  // from here on w may be gone
}

void post_block(Processor&, Fibre*, void* arg) {
  auto* w = static_cast<Waiter*>(arg);
  SpinLock* lock = w->lock;
  if (w->timer.deadline != kNoDeadline) w->cluster->add_timer(&w->timer);
  if (lock) lock->unlock();
}

}  // namespace

// The record is no longer published; once no requester is looking at it
// (the busy count), the wait may return and end it.
void end_cancellable_wait(Fibre* self) {
  self->cancel_waiter.store(nullptr, std::memory_order_relaxed);
  // The requester's heavy fence pairs with a compiler fence here; without
  // membarrier (old kernels, TSan) it is a plain fence, and this side needs
  // one too, or the store and the load below may pass each other (outside
  // review: a requester acting on a Waiter after wait_on returned).
  if (asymmetric_fences())
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
  while (self->cancel.load(std::memory_order_acquire) >= kCancelBusyUnit) cpu_relax();
}

Fibre* cancel_marked() noexcept {
  Processor* p = this_processor();
  return p && p->current()->cancel_wait ? p->current() : nullptr;
}

const void* identity() noexcept {
  if (Fibre* f = this_fibre_or_null()) return f;
  return &thread_identity;
}

void WakeBatch::wake_all() {
  while (head) {
    Waiter* w = head;
    head = w->next;
    wake(w);
  }
}

void WaitList::push_back(WaitQueue& q, Waiter* w) {
  w->next = nullptr;
  w->prev = static_cast<Waiter*>(q.tail_);
  if (w->prev)
    w->prev->next = w;
  else
    q.head_ = w;
  q.tail_ = w;
  w->queued = true;
  w->queue = &q;
}

void WaitList::remove(WaitQueue& q, Waiter* w) {
  if (w->prev)
    w->prev->next = w->next;
  else
    q.head_ = w->next;
  if (w->next)
    w->next->prev = w->prev;
  else
    q.tail_ = w->prev;
  w->next = w->prev = nullptr;
  w->queued = false;
}

Waiter* WaitList::signal_one(WaitQueue& q) {
  while (Waiter* w = front(q)) {
    remove(q, w);
    if (claim(w)) return w;
    // It timed out: its timer's complete() finds it unqueued and moves on.
  }
  return nullptr;
}

// The timer's order: the state first, on the record (alive: our busy
// count), and the primitive's lock only once the request has won it. A
// waiter a signaller claimed may have returned from the primitive's view,
// and the program may have destroyed the primitive since (a condvar after
// notify_all; a semaphore after its release): its lock is not to be
// touched then (outside review: a requester that locked first spun on a
// freed lock, or wrote into freed memory). A waiter the request won is
// still queued for the program, so its primitive is alive.
void cancel_waiter(Waiter* w) noexcept {
  int expected = kWaiting;
  if (!w->state.compare_exchange_strong(expected, kCancelled, std::memory_order_acq_rel)) return;
  WakeBatch batch;
  Fibre* f = w->fibre;
  w->lock->lock();  // (also waits for the waiter's switch: its post_block releases it)
  unqueue_timed_out(w, batch);
  w->lock->unlock();
  batch.wake_all();
  schedule(f);
}

void wake(Waiter* w) {
  if (Fibre* f = w->fibre) {
    schedule(f);
  } else {
    std::atomic<int>* word = &w->released;
    word->store(1, std::memory_order_release);  // last touch of the record
    futex_wake(word, 1);
  }
}

bool wait_on(WaitQueue& q, SpinLock& lock, Waiter& w, Deadline d) {
  w.lock = &lock;
  w.timed = d != kForever;
  WaitList::push_back(q, &w);
  if (Processor* p = this_processor()) {
    Fibre* self = p->current();
    w.fibre = self;
    if (!w.ident) w.ident = self;
    const bool cancellable = self->cancel_wait;  // (the one load a wait pays for cancellation)
    if (cancellable) {
      self->cancel_wait = false;
      w.timed = true;  // claimed by CAS: a request competes for the state too (cancel_waiter)
      self->cancel_waiter.store(&w, std::memory_order_release);  // (w filled in: the requester acquires) then the request
      // Pending: ended here, unless a requester that found the record
      // already won the state — it waits for the lock, and then unqueues
      // and schedules this fibre, which so must suspend as usual.
      int expected = kWaiting;
      if (cancel_pending_here() &&
          w.state.compare_exchange_strong(expected, kCancelled, std::memory_order_acq_rel)) {
        WakeBatch batch;
        unqueue_timed_out(&w, batch);
        lock.unlock();
        batch.wake_all();
        end_cancellable_wait(self);
        return false;
      }
    }
    if (d != kForever) {
      self->wait_deadline.store(d, std::memory_order_relaxed);
      w.cluster = self->cluster;
      w.timer.deadline = d;
      w.timer.expire = &timer_expire;
      w.timer.complete = &timer_complete;
    }
    p->suspend(&post_block, &w);
    // Resumed (maybe elsewhere): signalled, timed out and unqueued, or
    // cancelled and unqueued (cancel_waiter).
    if (cancellable) end_cancellable_wait(self);
    int st = w.state.load(std::memory_order_acquire);
    if (st == kSignalled || st == kCancelled) {
      if (d != kForever) w.cluster->timers.remove(&w.timer);
      return st == kSignalled;
    }
    return false;
  }
  // A kernel thread that is not a processor blocks itself (step 5).
  w.fibre = nullptr;
  if (!w.ident) w.ident = &thread_identity;
  lock.unlock();
  for (;;) {
    if (w.released.load(std::memory_order_acquire)) return true;
    bool signalled = w.state.load(std::memory_order_acquire) == kSignalled;
    if (!signalled && d != kForever && now_ns() >= d) {
      int expected = kWaiting;
      if (w.state.compare_exchange_strong(expected, kTimedOut, std::memory_order_acq_rel)) {
        WakeBatch batch;
        lock.lock();
        unqueue_timed_out(&w, batch);
        lock.unlock();
        batch.wake_all();
        return false;
      }
      signalled = true;  // a signal won meanwhile: wait for its release
    }
    futex_wait(&w.released, 0, signalled || d == kForever ? -1 : d);
  }
}

#if defined(LOOM_CHECKS)
void dead_object(void* object, unsigned long size) noexcept {
  std::memset(object, kDeadByte, size);
  asm volatile("" : : "r"(object) : "memory");  // not a dead store, though the object's lifetime ends here
}

void check::touched_dead(const void* object, const char* kind) noexcept {
  Processor* here = this_processor();
  Fibre* f = here ? here->current() : nullptr;
  if (here)
    fail(
        "%s %p touched after its destructor ran, by fibre %llu \"%s\" on processor %u of cluster %u (an operation "
        "that let another thread through and then went on using the object?)",
        kind, object, f ? (unsigned long long)f->id : 0ull, f && f->name ? f->name : "", here->index(),
        here->cluster().id());
  fail(
      "%s %p touched after its destructor ran, by a thread that is no processor (an operation that let another "
      "thread through and then went on using the object?)",
      kind, object);
}
#endif

}  // namespace loom::rt
