#include "sched/in_handler.hpp"

#include <cstdint>

#include "sched/processor.hpp"

namespace loom::rt {

thread_local HandlerMark tls_handler_mark __attribute__((tls_model("initial-exec")));

__attribute__((noinline)) bool handler_mark_holds() noexcept {
  auto sp = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  auto frame = reinterpret_cast<std::uintptr_t>(tls_handler_mark.frame);
  if (frame && sp < frame && frame - sp < kHandlerReach && this_fibre_or_null() == tls_handler_mark.fibre) return true;
  tls_handler_mark.frame = nullptr;  // left by a longjmp out of its handler
  return false;
}

}  // namespace loom::rt
