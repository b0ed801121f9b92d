// context/context.hpp — the machine context switch, and everything the tools
// must be told about it. This is the only code that touches registers.
//
// The switch is Boost.Context's fcontext (jump_fcontext): it saves the
// callee-saved registers, the stack pointer and the return address on the
// old stack, and the x87/SSE control words; it does NOT save caller-saved
// registers (the compiler has spilled them around the call), signal masks,
// errno or any thread-local: those belong to the kernel thread, not the
// fibre, which is why code after a switch must re-read thread-locals
// (DESIGN.md invariant 4).
//
// Tools told about each switch (compiled in only when the tool is):
//  - AddressSanitizer: __sanitizer_start_switch_fiber before the jump,
//    __sanitizer_finish_switch_fiber after it, so ASan knows the new stack's
//    bounds and keeps a fake stack per fibre (a dying fibre passes null so
//    its fake stack is freed);
//  - ThreadSanitizer: one TSan fiber per context, __tsan_switch_to_fiber
//    before the jump, so happens-before follows the fibre, not the thread;
//  - valgrind: every mmap'ed stack is registered (VALGRIND_STACK_REGISTER),
//    so memcheck does not mistake a switch for a huge stack-pointer move.
#pragma once

#include <boost/context/detail/fcontext.hpp>
#include <cstddef>

namespace loom::rt {

using boost::context::detail::fcontext_t;
using boost::context::detail::transfer_t;

struct Context {
  fcontext_t fctx = nullptr;
  const void* stack_lo = nullptr;  // bounds for ASan; null until known
  std::size_t stack_size = 0;
  void* asan_fake_stack = nullptr;
  void* tsan_fiber = nullptr;
};

// A context that will start in `entry` on the stack [lo, lo+size).
void context_make(Context& c, void* lo, std::size_t size, void (*entry)(transfer_t));
// Adopts the running kernel thread's own stack as a context.
void context_adopt_thread(Context& c);
// Releases tool state of a context that will never run again; called from
// another context once `c` is off the CPU.
void context_destroy(Context& c);

// Leaves `from` for `to`, handing `data` over. Returns when someone switches
// back to `from`, with what they handed over; the caller must then call
// context_arrived(from). `from_dies`: `from` will never be resumed.
inline transfer_t context_jump(Context& from, Context& to, void* data, bool from_dies);
// Must run first thing in a context that was just switched to (including a
// new context's entry function).
void context_arrived(Context& self);

// Tool helpers for stacks (no-ops unless the tool is present).
unsigned tools_register_stack(void* lo, void* hi);
void tools_deregister_stack(unsigned id);
void sanitizer_unpoison(void* lo, std::size_t size);

// ---- inline part: the switch itself --------------------------------------

void sanitizer_before_jump(Context& from, Context& to, bool from_dies);

inline transfer_t context_jump(Context& from, Context& to, void* data, bool from_dies) {
#if defined(LOOM_ASAN) || defined(LOOM_TSAN)
  sanitizer_before_jump(from, to, from_dies);
#else
  (void)from;
  (void)from_dies;
#endif
  return boost::context::detail::jump_fcontext(to.fctx, data);
}

}  // namespace loom::rt
