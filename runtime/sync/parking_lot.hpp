// sync/parking_lot.hpp — an address-keyed table of wait queues, so that a
// primitive keeps only a word or two of state (WebKit's WTF::ParkingLot and
// Rust's parking_lot crate: their ideas, not their code).
//
// Contract. A primitive owns one or two words of state; the parking lot owns
// every waiter. `key` is any address the primitive chooses (its state word,
// or state word + 1 for a second queue, as a rwlock's writers use).
//
//   park(key, validate, timed_out, deadline)
//       Takes the bucket lock of `key`, calls validate(ctx); if it returns
//       false, releases the lock and returns Invalid without waiting.
//       Otherwise queues a waiter record (on the caller's stack) and waits
//       until an unpark takes it (Unparked, with the token the unparker's
//       callback chose) or `deadline` passes (TimedOut).
//       There is no before_sleep hook (WebKit and Rust have one, to unlock
//       a condition variable's mutex once the waiter is queued): for a fibre
//       it would run in the post-switch action after the bucket unlock, when
//       an unparker may already have resumed the fibre and ended the frame
//       that holds the hook's context. loom's condition variable needs none
//       (a sequence word checked by validate closes the same window).
//   unpark_one(key, callback)
//       Under the bucket lock, takes the oldest waiter on `key` that has not
//       timed out, calls callback(ctx, result) with result.unparked and
//       result.more (another waiter on `key` remains) — even when nobody was
//       unparked, so the primitive can clear its "parked" bit under the same
//       lock validate runs under — and hands the returned token to the
//       waiter. Wakes it after releasing the lock.
//   unpark_all(key)
//       Every waiter on `key`, woken with token 0. Returns how many.
//   requeue(from, to, wake, move, validate, ctx)
//       futex(2)'s FUTEX_CMP_REQUEUE for loom's waiters. Takes the bucket
//       locks of both keys (in address order; one lock if they share a
//       bucket); if nobody waits on `from`, returns (valid, none moved)
//       without calling validate; else calls validate(ctx) if given (false:
//       not valid, nothing done), then takes the oldest `wake` waiters on `from` that have not
//       timed out and wakes them (token 0), and moves the next `move` onto
//       `to` (behind the waiters there): they go on waiting, now for an
//       unpark of `to`, with their deadlines. A waiter whose timeout fires
//       after the move unqueues itself from `to`'s bucket (the waiter's
//       bucket is read again under its lock until it holds still).
//   interrupt(key, fibre)
//       For signals (libloom-pthread): ends one fibre's wait as its timeout
//       would; park() runs the handler on it and waits again (see
//       SignalHooks below).
//   unpark_some(key, choose, callback)
//       For primitives with two kinds of waiter on one key (a rwlock's
//       readers and writers, told apart by the park token each parked
//       with): choose(ctx, queued) sees the OR of the park tokens of the
//       waiters on `key` and names which to take — the oldest `limit`
//       whose park token has a bit of `mask`; callback(ctx, result) then
//       sees how many were taken and the OR of the park tokens of those
//       left, and returns the token they all get. Both run under the bucket
//       lock, so the primitive decides whom to wake and changes its word in
//       one step that every validate is ordered against: its last touch of
//       the object can be that store, before anyone it wakes can run.
//
// The argument that nothing is lost is the primitive's, and it is always the
// same: a waiter sets a "parked" mark in the word, then parks with a
// validate that checks the word still says "wait"; an unlocker changes the
// word first, then, seeing the mark, unparks. validate and the unpark both
// run under the bucket lock, so either validate saw the change (and the
// waiter does not sleep) or the waiter was queued before the unparker looked.
//
// Waiting is runtime/sync/wait.hpp's protocol with the bucket's spin lock as
// the primitive's lock, for fibres and for kernel threads that are not loom
// processors (a futex on the waiter record); the four invariants of
// DESIGN.md hold here for the same reasons:
//  1. Publish after save: a fibre's record is queued under the bucket lock,
//     and the lock is released (and its timer armed) in the post-switch
//     action, after the fibre's context is saved. No unparker can see the
//     record, and no timer can fire for it, before the fibre can be resumed.
//  2. Wake exactly once: an unparker takes a record off the queue and CASes
//     its state from waiting to signalled; the timer (or a kernel thread's
//     own deadline) CASes it to timed out. One CAS wins. A losing unparker
//     takes the next record, so what it meant to give is not lost; a losing
//     timer does nothing. A record leaves the queue only under the bucket
//     lock, and a timed-out waiter returns only after it has been unqueued.
//  3. No lost wake-up for processors: waking is loom's schedule(), which
//     keeps that invariant; nothing here sleeps a processor.
//  4. Thread-locals after migration: park() reads the current processor
//     only before it blocks, and the wait.hpp functions it calls re-read it
//     through the out-of-line accessor.
//
// The table is fixed: kBuckets buckets, zero-initialised (constinit), so it
// works before any constructor has run — libloom-pthread's pthread_once and
// mutexes are called by other libraries' constructors before loom's. Growing
// the table (WebKit, Rust) needs allocation and a rehash under every bucket
// lock; with 4096 buckets and the few hundred objects a program waits on at
// once, sharing a bucket costs a few list steps, not a design.
//
// The runtime's own threads may call park() too: a processor running its
// idle fibre, or before a fibre runs on it, waits as a kernel thread.
#pragma once

#include <atomic>
#include <cstdint>

#include "loom/sync.hpp"
#include "sched/fibre.hpp"

namespace loom::rt {

using ParkToken = std::uintptr_t;

// Cancelled: the waiter's ParkOps were `cancellable` and a cancellation
// request for its fibre was pending when it came or woke it (sched/cancel.hpp).
// Interrupted: interrupt() ended the wait of a waiter that parked with
// ParkOps::interruptible for a signal handler, which ran on it before park
// returned (and, unless_restart, had no SA_RESTART). Any other interrupted
// wait goes on (park validates again) once the handler ran: the primitive
// never sees it.
enum class ParkResult { Unparked, Invalid, TimedOut, Cancelled, Interrupted };

struct Parked {
  ParkResult result;
  ParkToken token;  // from the unparker's callback (Unparked only)
};

struct UnparkResult {
  bool unparked;       // a waiter was taken
  bool more;           // waiters on the key remain
  std::int64_t since;  // when the unparked waiter began waiting (now_ns), if it parked with ParkOps::stamp
};

namespace parking_lot {

// Whether a handler run on a parked fibre ends its wait (ParkOps::interruptible):
//   no              never: the wait goes on, unseen (a mutex, a condition
//                   variable: glibc's end with no EINTR either);
//   unless_restart  unless every handler that ran had SA_RESTART (sem_wait);
//   always          whenever a handler ran, SA_RESTART or not: a sleep, which
//                   the kernel never restarts after a handler (signal(7)).
// A signal that ran no handler (ignored, or blocked meanwhile) ends none.
enum class Interruptible : unsigned char { no, unless_restart, always };

// What the handlers run for an interrupted wait were (SignalHooks::
// interrupted): none ran, every one had SA_RESTART, or one had not.
enum class Handled : unsigned char { none, restart, interrupt };

// validate runs under the bucket lock; timed_out (may be null) runs under the bucket lock after a timed-out
// waiter left the queue, with `was_last` = no waiter on key with the same
// park token remains — the primitive may clear its parked mark there.
struct ParkOps {
  bool (*validate)(void* ctx) = nullptr;
  void (*timed_out)(void* ctx, bool was_last) = nullptr;
  void* ctx = nullptr;
  bool stamp = false;        // record when the waiter parked (UnparkResult::since); else since is 0
  ParkToken park_token = 0;  // the waiter's kind, for unpark_some (and was_last)
  // What the fibre listing says a parked fibre waits on (the object: key).
  WaitKind wait_kind = WaitKind::pthread;
  // A cancellation point: a fibre with a pending cancellation request does
  // not wait (Cancelled), and one that waits is woken by the request
  // (cancel below). Kernel threads that are not fibres ignore it.
  bool cancellable = false;
  // The primitive can fail with EINTR (sem_wait, a sleep): a handler run by
  // interrupt() ends the wait (ParkResult::Interrupted) as the enum says.
  Interruptible interruptible = Interruptible::no;
};

// unpark_some's choice: the oldest `limit` waiters whose park token & mask.
struct Take {
  ParkToken mask;
  unsigned limit;
};
struct SomeResult {
  unsigned unparked;    // how many were taken
  ParkToken remaining;  // OR of the park tokens of the waiters left on key
};

Parked park(const void* key, const ParkOps& ops, Deadline deadline);

// callback runs under the bucket lock, also when nothing was unparked.
UnparkResult unpark_one(const void* key, ParkToken (*callback)(void* ctx, UnparkResult r) = nullptr,
                        void* ctx = nullptr);
unsigned unpark_all(const void* key, ParkToken token = 0);
struct Requeued {
  bool valid;         // validate held (or there was none)
  unsigned woken;     // waiters on `from` unparked
  unsigned requeued;  // waiters moved to `to`
};
Requeued requeue(const void* from, const void* to, unsigned wake, unsigned move, bool (*validate)(void* ctx),
                 void* ctx);
// See the contract above. If every waiter chosen had timed out meanwhile,
// it chooses again among those left.
SomeResult unpark_some(const void* key, Take (*choose)(void* ctx, ParkToken queued),
                       ParkToken (*callback)(void* ctx, SomeResult r), void* ctx);

// Convenience: park with a lambda as validate (no timed_out hook).
template <class F>
Parked park_if(const void* key, F&& validate, Deadline deadline, WaitKind kind = WaitKind::pthread,
               bool cancellable = false) {
  ParkOps ops;
  ops.validate = [](void* c) { return (*static_cast<F*>(c))(); };
  ops.ctx = &validate;
  ops.wait_kind = kind;
  ops.cancellable = cancellable;
  return park(key, ops, deadline);
}

// A cancellation request for fibre f (sched/cancel.hpp, request_cancel): if
// f is parked on `key` in a cancellable wait, takes it off the queue (the
// primitive's timed_out hook runs, as for a timeout) and wakes it with
// Cancelled. True if it did.
bool cancel(const void* key, Fibre* f) noexcept;
// The same for a kernel thread (not a fibre) whose identity() is `ident`,
// parked in a cancellable wait on any key: its park returns Cancelled
// (libloom-pthread's pthread_cancel of a thread made in a fork child, whose
// cancellation is glibc's and acted on after the wait). Looks in every
// bucket: for a rare call. True if it ended a wait.
bool cancel_kernel(const void* ident) noexcept;
// Asked by a kernel thread's cancellable wait once it is queued: whether a
// request made before it was (which cancel_kernel did not find) is due now;
// then the wait ends Cancelled at once. The requester sets what this reads
// before it looks in the buckets: one of the two sees the other (set by
// libloom-pthread; null: never).
extern std::atomic<bool (*)()> kernel_cancel_due;
// Signals (libloom-pthread's sigthread.cpp sets these, once a program
// installs a handler; until then park() reads one null pointer more).
//   parking(key, fibre)  runs in park() under the bucket lock, before
//       validate, on a fibre: the signal side notes where the fibre waits,
//       then returns true if a handler is already due on it (the fibre
//       then does not sleep: park runs `interrupted` and returns). Called
//       again with a null key when the fibre resumes (no lock held),
//       unless interrupt() woke it — then only if the wait ends there
//       (ParkResult::Interrupted), not when it goes on.
//   interrupted()  runs on the fibre, outside any lock, when its wait was
//       cut short for a handler: it runs the handlers due, and says what
//       they were (Handled): park() then waits again or returns
//       Interrupted, as the wait's ParkOps::interruptible says.
//   io_waiting(kind, object)  the io layer's form of `parking`, for a
//       fibre about to sleep on a descriptor or a poll set (runtime/io: the
//       kind and object it noted, note_wait): the signal side notes them
//       (a handler due later posts that wait's word: wake_io_wait), then
//       returns true if a handler is already due (the call then does not
//       sleep: it runs `interrupted` outside the descriptor's turn, and
//       waits again (Handled::none, restart) or fails with EINTR; a
//       poll-family call always fails with EINTR, as the kernel's). Called
//       with WaitKind::none when the fibre wakes.
struct SignalHooks {
  std::atomic<bool (*)(const void* key, const Fibre* f)> parking{nullptr};
  std::atomic<Handled (*)()> interrupted{nullptr};
  std::atomic<bool (*)(WaitKind kind, const void* object)> io_waiting{nullptr};
};
extern SignalHooks signal_hooks;

// Ends fibre f's wait on key now (for a handler due on it): f leaves the
// queue as if its deadline had passed (the primitive's timed_out hook runs)
// and park() runs signal_hooks.interrupted, then waits again or returns
// Interrupted (ParkOps::interruptible). False if f was not
// parked on key. Never dereferences f. Not async-signal-safe (it takes the
// bucket lock and schedules f): libloom-pthread calls it from a kernel
// thread of its own.
bool interrupt(const void* key, const Fibre* f) noexcept;

// Statistics for tests: waiters queued now, across the table.
unsigned queued_now();

// In the child of a fork, before anything there waits or wakes: the one
// thread left is the one that forked, which was not waiting; every waiter
// queued is a fibre or thread of the parent's, and a bucket lock may be held
// by a thread that is not there. Empties the table and frees its locks, so
// that a wake in the child is not spent on a waiter that will never run
// (libloom-pthread's atfork child handler).
void forget_after_fork() noexcept;

}  // namespace parking_lot
}  // namespace loom::rt
