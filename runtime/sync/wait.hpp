// sync/wait.hpp — the one waiting mechanism under every primitive.
//
// A Waiter is a record on the waiting fibre's (or kernel thread's) stack:
//
//   state    kWaiting → kSignalled   set by a signaller, with a CAS (a plain
//                                    store when the waiter has no deadline)
//            kWaiting → kTimedOut    set by the timer (or the thread's own
//                                    futex timeout), with a CAS
// Exactly one CAS succeeds; its winner makes the waiter runnable, exactly
// once. The loser backs off and leaves no trace:
//  - a signaller that loses (the waiter timed out) has already taken the
//    waiter off the queue under the primitive's lock; it just tries the next
//    waiter, so nothing it meant to give (a semaphore unit, a mutex, a
//    barrier phase) is lost;
//  - a timer that loses does nothing (it has already left the timer heap).
//
// Protocol, step by step, and why each order is safe:
//  1. The waiter takes the primitive's spin lock, finds it must wait,
//     enqueues its record (queued = true) and calls block(). For fibres,
//     block() suspends with a post-switch action that (a) arms the timer,
//     then (b) releases the primitive's lock. Both happen after the fibre's
//     context is saved (DESIGN.md invariant 1): no signaller can see the
//     record, and no timer can fire for it, before the fibre can be resumed.
//     (a) before (b): a signaller that wins and wakes the fibre finds the
//     timer armed, so the fibre's own cancel (step 4) cannot miss it.
//  2. A signaller, holding the primitive's lock, pops records from the front
//     and CASes each until one succeeds (signal_one), and after releasing the
//     lock makes it runnable (wake): schedule() for a fibre, a futex wake for
//     a kernel thread.
//  3. The timer's expire() (under the timer heap lock) CASes; on success its
//     complete() takes the primitive's lock, removes the record if a
//     signaller has not popped it, runs the primitive's on_timeout hook
//     (e.g. a waiting writer leaving lets readers in), releases the lock and
//     schedules the fibre. The record is still queued until then, so the
//     fibre cannot run and free it early.
//  4. A fibre woken by a signal cancels its timer: TimerHeap::remove() takes
//     the heap lock, so an expire() that lost the CAS has finished with the
//     record before the fibre returns and its stack frame is reused.
//  5. A kernel thread (not a loom processor) waits on a futex on `released`
//     with its deadline; at the deadline it CASes `state` for itself and, if
//     it won, takes the primitive's lock to unqueue itself. If a signal won,
//     it waits for `released`, the signaller's last write to the record
//     (after, e.g., handing over a mutex), so the record outlives every use.
//     The futex wake that follows that store only names the address: at
//     worst a spurious wake of a later waiter there, which futex users
//     tolerate.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/check.hpp"
#include "base/futex.hpp"
#include "base/spinlock.hpp"
#include "loom/sync.hpp"
#include "sched/fibre.hpp"
#include "sched/timer.hpp"

namespace loom::rt {

class Cluster;
struct WakeBatch;

// kCancelled: a cancellation request woke it (parking_lot::cancel, under
// the bucket lock, by the same CAS as a timeout: sched/cancel.hpp).
enum WaitState : int { kWaiting = 0, kSignalled = 1, kTimedOut = 2, kCancelled = 3 };

struct Waiter {
  TimerNode timer;  // first member: TimerNode* → Waiter*
  Waiter* next = nullptr;
  Waiter* prev = nullptr;
  bool queued = false;
  bool timed = false;        // has a deadline, or is cancellable: its timer (or, on a kernel thread,
                             // itself) or a cancellation request may claim state
  std::atomic<int> state{kWaiting};
  std::atomic<int> released{0};  // kernel threads: the signaller is done
  Fibre* fibre = nullptr;    // null for a kernel thread
  const void* ident = nullptr;  // who waits (see identity())
  SpinLock* lock = nullptr;  // the primitive's lock
  WaitQueue* queue = nullptr;
  Cluster* cluster = nullptr;  // whose timer heap
  // Primitive-specific: runs under the primitive's lock after a timed-out
  // waiter left its queue; may add waiters to wake.
  void (*on_timeout)(Waiter* w, WakeBatch& batch) = nullptr;
  void* owner_object = nullptr;  // the primitive, for on_timeout
  std::uintptr_t tag = 0;        // primitive-specific (reader/writer, ...)
  std::int64_t since = 0;        // when it started waiting: set only by a hybrid mutex (a clock read per wait was 17 % of a hand-off)
  bool handed_over = false;      // ownership was passed with the signal
};

// A signaller's kWaiting → kSignalled, under the waiter's queue lock. Only a
// timed waiter's timeout competes for the state, so an untimed one is claimed
// with a plain store (a locked instruction less per wake-up).
inline bool claim(Waiter* w) noexcept {
  if (!w->timed) {
    w->state.store(kSignalled, std::memory_order_release);
    return true;
  }
  int expected = kWaiting;
  return w->state.compare_exchange_strong(expected, kSignalled, std::memory_order_acq_rel);
}

// The waiters a primitive decided to wake while holding its lock; woken
// after the lock is released.
struct WakeBatch {
  Waiter* head = nullptr;
  void add(Waiter* w) {
    w->next = head;
    head = w;
  }
  void wake_all();  // wakes each (reads `next` before waking)
};

// FIFO list operations on a WaitQueue; the primitive's lock is held.
struct WaitList {
  static void push_back(WaitQueue& q, Waiter* w);
  static Waiter* front(WaitQueue& q) { return static_cast<Waiter*>(q.head_); }
  static bool empty(const WaitQueue& q) { return q.head_ == nullptr; }
  static void remove(WaitQueue& q, Waiter* w);
  // Pops waiters until one is won from kWaiting (step 2); null if none.
  static Waiter* signal_one(WaitQueue& q);
};

// The caller's identity for ownership: its Fibre, or a per-kernel-thread
// address for threads that are not processors.
const void* identity() noexcept;

// Step 1: with `lock` held and `w` filled in, enqueue on q and wait until
// signalled (true) or timed out (false). Returns with `lock` released.
// A fibre whose cancel_wait is set (the C API's cancellation points) also
// ends its wait for a cancellation request (false, w.state kCancelled), or
// does not wait when one is pending (sched/cancel.hpp).
bool wait_on(WaitQueue& q, SpinLock& lock, Waiter& w, Deadline d);
// Makes a waiter won by signal_one runnable (call without the lock).
void wake(Waiter* w);
// A cancellation request for the fibre waiting on w (published in
// Fibre::cancel_waiter; sched/cancel.hpp keeps w alive meanwhile): if w is
// still queued, ends its wait as a timeout would, with state kCancelled.
void cancel_waiter(Waiter* w) noexcept;
// The calling fibre when its next wait is marked cancellable
// (Fibre::cancel_wait), else null: a primitive that may wait more than once
// per call (a mutex woken to compete, a once flag whose run failed) marks
// each of its waits again.
Fibre* cancel_marked() noexcept;
// The waiting side's end of a cancellable wait: unpublishes self's record
// (Fibre::cancel_waiter) and waits until no requester looks at it.
void end_cancellable_wait(Fibre* self);
// A requester's look at a timed join published in Fibre::cancel_waiter
// (tagged with kTimedJoinWaiter; sync/join.cpp): ends the join as its
// timer would, if neither the timer nor the fibre's exit has yet.
inline constexpr std::uintptr_t kTimedJoinWaiter = 1;
void cancel_timed_join(void* record) noexcept;

inline bool expired(Deadline d) { return d != kForever && (d == kNow || now_ns() >= d); }

// ---- Release is the last touch (docs/DESIGN.md), checked ---------------------
// An operation that may let another thread through (an unlock, a post, a
// notify, a barrier's last arrival) must not touch the object after the
// store that does so: the thread let through may destroy it and reuse its
// memory at once, as POSIX allows. In a checking build (LOOM_CHECKS) every
// primitive's destructor fills the object with kDeadByte (dead_object), and
// the runtime takes a primitive's spin lock only through lock_object, which
// first reads the lock's byte: kDeadByte there is a touch after the
// destructor ran, reported with the object, the fibre and the processor
// (then abort). Every path into a primitive takes its lock or fails a CAS
// into a path that does, so a late touch is caught at its first step when
// the memory still holds the fill (tests/chaos_test.cpp DestroyAfterUse
// keeps it so). In the default build dead_object does nothing and
// lock_object is lock().
#if defined(LOOM_CHECKS)
void dead_object(void* object, unsigned long size) noexcept;  // out of line: not a dead store
namespace check {
[[noreturn]] void touched_dead(const void* object, const char* kind) noexcept;
}
#else
inline void dead_object(void*, unsigned long) noexcept {}
#endif
inline void lock_object(SpinLock& l, const void* object, const char* kind) noexcept {
#if defined(LOOM_CHECKS)
  if (__atomic_load_n(reinterpret_cast<const unsigned char*>(&l), __ATOMIC_RELAXED) == kDeadByte)
    check::touched_dead(object, kind);
#endif
  (void)object;
  (void)kind;
  l.lock();
}

}  // namespace loom::rt
