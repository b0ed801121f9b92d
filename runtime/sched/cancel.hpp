// sched/cancel.hpp — a request that a fibre stop, acted on at its blocking
// points: the one mechanism under pthread_cancel and loom_cancel
// (capi/pthread/cancel.cpp, capi/thread.cpp) and, later, C++'s
// request_stop (issue 33). docs/DESIGN.md, "Cancellation".
//
// The runtime knows only a word per fibre (Fibre::cancel) and who waits
// where: what cancelling *does* (cleanup handlers, unwinding, PTHREAD_CANCELED)
// is the C layer's.
//  - request(f) sets kCancelRequested and, if f is blocked at a
//    cancellation point, wakes it: a parked wait whose ParkOps say
//    `cancellable` (sync/parking_lot: pthread condvars, semaphores, the
//    signal waits, futex waits, sleeps) returns ParkResult::Cancelled; a wait
//    for a descriptor or a poll set (runtime/io) is posted, so the call looks
//    again, finds the request and returns ECANCELED; a wait_on (sync/wait.hpp)
//    the C API made cancellable (Fibre::cancel_wait: loom_cond_wait,
//    loom_sem_wait) is ended as by a timeout, with the record kept alive by
//    the busy count while the requester uses it.
//  - The waiting side reads the word once per wait, after it noted what it
//    waits for (note_wait) and before it sleeps; request() writes the word
//    and then reads the note. The two sides are a Dekker pair, made with a
//    compiler fence on the waiting side and a heavy fence (membarrier, base/
//    membarrier.hpp) on the requesting one: either the waiter sees the
//    request, or the requester sees the note and wakes it. Without
//    membarrier (old kernels, TSan) the requester uses a full fence only,
//    and a request that lands in that window waits for the next blocking
//    point (documented).
//  - pending(f): requested, not disabled, not already acting. A fibre that
//    never is cancelled pays that one load per wait, nothing per switch.
#pragma once

#include <atomic>

#include "sched/fibre.hpp"

namespace loom::rt {

inline constexpr unsigned kCancelRequested = 1;  // set by request()
inline constexpr unsigned kCancelDisabled = 2;   // the fibre's cancel state is DISABLE
inline constexpr unsigned kCancelActing = 4;     // the fibre is acting on it (unwinding): no second time
inline constexpr unsigned kCancelAsync = 8;      // the fibre's cancel type is ASYNCHRONOUS (kept; see capi)
// Above the flags: how many requesters are looking at the fibre's waiter
// (cancel_waiter): a wait_on that published one does not return, and so
// end its record, until none is.
inline constexpr unsigned kCancelBusyUnit = 16;

// glibc acting on the request itself (its own cancellation point's check,
// or its SIGCANCEL handler: capi/pthread/cancel.cpp) says so only in its
// word in the fibre's block (EXITING, sched/tls.hpp): the handlers its
// unwinding runs must not see the request again at loom's points. Looked
// at only when a request is pending.
bool cancel_glibc_acting(const Fibre* f) noexcept;
inline bool cancel_pending(const Fibre* f) noexcept {
  return (f->cancel.load(std::memory_order_relaxed) & (kCancelRequested | kCancelDisabled | kCancelActing)) ==
             kCancelRequested &&
         !cancel_glibc_acting(f);
}
// The calling fibre's request, at a blocking point after its note_wait: the
// waiting side of the pair above. False on a kernel thread that is no fibre.
bool cancel_pending_here() noexcept;

// Sets f's request and wakes f if it waits at a cancellation point. Any
// thread; f must stay allocated for the call (the C layer's record keeps it).
void request_cancel(Fibre* f) noexcept;

// A sleep that is a cancellation point (the C API's sleeps; sync/sleep.cpp):
// until the monotonic deadline d, or false at once if a request is pending
// or when one comes.
bool sleep_until_cancellable(Deadline d);
// A sleep no request ends: the runtime's own (retry loops, slices).
void sleep_until_ns(Deadline d);
// The program's sleep (the C API's nanosleep family, and a poll with
// nothing to watch): until the monotonic deadline d; a cancellation point
// when `cancellable`; and ended by a signal handler that runs on the fibre
// during it (libloom-pthread's, through the parking lot's signal hooks),
// SA_RESTART or not, as the kernel never restarts a sleep (signal(7)).
// Without those hooks (no libloom-pthread, or no handler installed) it is
// sleep_until_cancellable's, and costs no more.
enum class SleepEnd { reached, cancelled, interrupted };
SleepEnd sleep_until_interruptible(Deadline d, bool cancellable);

// The io layer's part of request(), and of a signal handler due on a fibre
// (sync/parking_lot.hpp, SignalHooks::io_waiting): wakes a fibre noted as
// waiting on a descriptor (fd_in, fd_out) or a poll set (poll), which
// looks again (io/io.cpp). A post that finds nobody waiting leaves a token:
// a spurious wake-up later, no more.
void wake_io_wait(WaitKind kind, const void* object) noexcept;

}  // namespace loom::rt
