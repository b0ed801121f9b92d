// sched/overflow.hpp — turning a guard-page hit into a message that names
// the fibre.
//
// A SIGSEGV handler runs on an alternate signal stack (each processor thread
// has one: the faulting stack is by definition full). If the faulting
// address lies in the guard page of the running fibre's stack, it prints
//   loom: fibre 42 "worker" overflowed its 64 KiB stack (guard page hit at 0x...)
// restores the default action and returns, so the fault repeats and the
// process dies of SIGSEGV as it would have (core dumps stay truthful). Any
// other fault goes to the handler that was installed before loom's.
#pragma once

namespace loom::rt {

void install_overflow_handler();
// Gives the calling thread an alternate signal stack; returns it (or null).
void* enter_signal_stack();
void leave_signal_stack(void* stack);

}  // namespace loom::rt
