// sched/cpu_clock.hpp — a fibre's own CPU time (pthread_getcpuclockid,
// CLOCK_THREAD_CPUTIME_ID on a fibre), kept only for fibres whose clock was
// asked for.
//
// The kernel counts CPU time per kernel thread; a fibre's is the sum of the
// kernel thread's over the stretches it ran. Reading the kernel thread's
// CPU clock is a system call (no vDSO for it: ~100-200 ns), too dear for
// every switch, so a fibre is timed only from the moment its clock is first
// asked for (cpu_clock_start): then each switch into or out of it reads the
// clock once (Processor::switch_to tests one flag of each fibre otherwise).
// What it ran before that is not counted: its clock starts near zero, and
// differences — what programs measure — are exact to the kernel's
// accounting. Another fibre's clock adds, if it is running, the stretch
// since it came in by its kernel thread's clock (one more system call); the
// caller's own includes the stretch it is in.
#pragma once

#include <cstdint>

namespace loom::rt {

class Fibre;

// From now on f's CPU time accumulates (idempotent). On the caller itself
// timing starts at once; on another fibre, at its next switch in.
void cpu_clock_start(Fibre* f) noexcept;
// f's CPU time in nanoseconds (see above); 0 if it is not timed.
std::uint64_t cpu_clock_ns(Fibre* f) noexcept;
// Processor::switch_to, when prev or next is timed.
void cpu_clock_switch(Fibre* prev, Fibre* next, int tid) noexcept;  // tid: the switching kernel thread

}  // namespace loom::rt
