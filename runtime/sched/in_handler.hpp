// sched/in_handler.hpp — is this kernel thread running a program's signal
// handler?
//
// A handler runs on whatever its kernel thread was running: on a processor,
// on top of the interrupted fibre (or of the scheduler itself). A fibre-
// aware call made there would switch fibres inside the handler, with the
// interrupted code half done below it. So libloom-pthread interposes
// sigaction and signal (capi/pthread/signal.cpp, sigtable.cpp) and runs each handler the
// program installs inside a trampoline that sets this mark for the
// handler's length; the hooks by glibc's names (capi/pthread/io.cpp) and the
// I/O wrapper (io/io.cpp) then treat the caller as a kernel thread that is
// not a processor: glibc's calls, which block the kernel thread.
//
// The mark is the innermost trampoline's frame address and the fibre it
// interrupted. Each trampoline saves the mark it found and puts it back on
// return, so nested handlers, and a handler that interrupts a test of the
// mark, leave it as they found it. A handler that leaves by longjmp leaves
// its mark behind, so the mark holds only while the caller's stack pointer
// is below the frame, within kReach of it, on the fibre it interrupted; a
// call that fails that test clears it. (After a longjmp out of a handler
// that ran on an alternate signal stack, a call on a stack just below that
// one can still match: it takes glibc's path until the mark is cleared.)
// Rejected: a depth counter (a longjmp out would leave it raised for good,
// and the processor's fibres would then block it); clearing
// tls_processor for the handler (a longjmp out would leave a processor that
// no longer knows itself).
#pragma once

#include <cstddef>

namespace loom::rt {

// Trivial (no initialisers: zero as every thread_local starts), so that
// other objects reach it with no TLS wrapper call.
struct HandlerMark {
  const char* frame;  // the innermost trampoline's frame; null: none
  const void* fibre;  // the fibre it interrupted (null off a processor)
  // The kernel thread's mask before the outermost of the handlers running
  // (the kernel's word of it). A handler left without returning (a longjmp,
  // a thread's exit or cancellation unwinding out of it) never reaches the
  // sigreturn that puts it back: whoever finds the mark stale puts it back
  // (leave_handler_mask), or every fibre of the processor would run with
  // the handler's mask blocked.
  unsigned long outer_mask;
};
extern thread_local HandlerMark tls_handler_mark __attribute__((tls_model("initial-exec")));

// How far below its trampoline a handler's calls may be (its stack use).
inline constexpr std::size_t kHandlerReach = std::size_t(1) << 20;

// The frame and fibre tests; clears a stale mark. Out of line: a handler
// is rare, the test of the mark is on every hooked call.
bool handler_mark_holds() noexcept;

// The calling fibre leaves the handlers it runs in without returning from
// them (loom_exit, a cancellation acting there): the kernel thread's mask
// is put back as it was before the outermost, and the mark cleared.
void leave_handler_mask() noexcept;

inline bool in_signal_handler() noexcept {
  return __builtin_expect(tls_handler_mark.frame != nullptr, 0) && handler_mark_holds();
}

}  // namespace loom::rt
