// sync/cancel.cpp — sched/cancel.hpp: the request and the wake-up of a fibre
// blocked at a cancellation point. The argument is in the header.
#include "sched/cancel.hpp"

#include "base/membarrier.hpp"
#include "sched/processor.hpp"
#include "sched/tls.hpp"
#include "sync/parking_lot.hpp"
#include "sync/wait.hpp"

namespace loom::rt {

namespace {

// What f noted it waits for, read after the heavy fence: either this sees
// the note of the wait f is in, or f's own check saw the request.
void wake_for_cancel(Fibre* f) {
  if (void* w = f->cancel_waiter.load(std::memory_order_acquire)) {
    // A wait_on of a cancellation point, or a timed join (kept alive by
    // our busy count).
    auto bits = reinterpret_cast<std::uintptr_t>(w);
    if (bits & kTimedJoinWaiter)
      cancel_timed_join(reinterpret_cast<void*>(bits & ~kTimedJoinWaiter));
    else
      cancel_waiter(static_cast<Waiter*>(w));
    return;
  }
  WaitKind kind = f->wait_kind.load(std::memory_order_acquire);
  const void* object = f->wait_object.load(std::memory_order_acquire);
  switch (kind) {
    case WaitKind::pthread:
    case WaitKind::condvar:    // (libloom-pthread's condvars and semaphores park with these kinds;
    case WaitKind::semaphore:  //  parking_lot::cancel skips any wait that is not cancellable)
    case WaitKind::futex:
    case WaitKind::sleep:
    case WaitKind::pthread_mutex:  // (cancellable only with the asynchronous type: capi/pthread/sync.cpp)
      parking_lot::cancel(object, f);  // finds nothing if the note is stale
      break;
    case WaitKind::fd_in:
    case WaitKind::fd_out:
    case WaitKind::poll:
      wake_io_wait(kind, object);
      break;
    default:
      break;  // not a cancellation point: it acts at its next one
  }
}

}  // namespace

bool cancel_glibc_acting(const Fibre* f) noexcept { return f->tcb && tls::glibc_exiting(f->tcb); }

bool cancel_pending_here() noexcept {
  Processor* p = this_processor();
  if (!p) return false;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // after the caller's note (the heavy fence pairs)
  return cancel_pending(p->current());
}

void request_cancel(Fibre* f) noexcept {
  f->cancel.fetch_or(kCancelRequested, std::memory_order_seq_cst);
  f->cancel.fetch_add(kCancelBusyUnit, std::memory_order_seq_cst);  // a wait_on's record stays while we look
  if (asymmetric_fences())
    heavy_fence();
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
  if (cancel_pending(f)) wake_for_cancel(f);  // (disabled, or already acting: it acts when it enables)
  f->cancel.fetch_sub(kCancelBusyUnit, std::memory_order_release);
}

}  // namespace loom::rt
