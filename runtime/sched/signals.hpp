// sched/signals.hpp — where the native API's signals go (LOOM_SIGNALS).
//
// Under the native API (no pthread layer loaded: libloom-pthread routes
// signals per thread itself) with LOOM_SIGNALS=main, the default, every
// processor's kernel thread but main's blocks the signals sent to the
// process, so the kernel gives them to main's kernel thread, whose mask
// main sets: blocking SIGTERM with pthread_sigmask at the top of main, then
// waiting for it in a fibre (loom::io::wait_signal, a signalfd), works as
// with kernel threads made after the block. The processors start before
// main; with SIGTERM open on one, the kernel killed the process there.
#pragma once

#include <signal.h>

namespace loom::rt {

// LOOM_SIGNALS=main under the native API (read once).
bool signals_to_main();

// Adds to mask every signal but the synchronous ones (faults, SIGPIPE,
// SIGXFSZ: the kernel gives them to the thread that caused them) and the
// stall detector's, which it sends to a processor.
void block_process_signals(sigset_t& mask);

}  // namespace loom::rt
