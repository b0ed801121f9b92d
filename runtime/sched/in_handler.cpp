#include "sched/in_handler.hpp"

#include <signal.h>
#include <sys/syscall.h>

#include <cstdint>

#include "base/futex.hpp"
#include "sched/processor.hpp"

namespace loom::rt {

thread_local HandlerMark tls_handler_mark __attribute__((tls_model("initial-exec")));

__attribute__((noinline)) bool handler_mark_holds() noexcept {
  auto sp = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  auto frame = reinterpret_cast<std::uintptr_t>(tls_handler_mark.frame);
  if (frame && sp < frame && frame - sp < kHandlerReach && this_fibre_or_null() == tls_handler_mark.fibre) return true;
  leave_handler_mask();  // left by a longjmp out of its handler, or an unwinding
  return false;
}

void leave_handler_mask() noexcept {
  if (!tls_handler_mark.frame) return;
  tls_handler_mark.frame = nullptr;
  unsigned long m = tls_handler_mark.outer_mask;
  raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&m), 0, sizeof m, 0, 0);
}

}  // namespace loom::rt
