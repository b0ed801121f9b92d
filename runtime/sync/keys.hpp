// sync/keys.hpp — what the runtime's glue needs of sync/keys.cpp beyond
// loom/sync.hpp's key calls.
#pragma once

namespace loom {
namespace rt {
class Fibre;
}

// The child of a fork, on its one kernel thread, while `f` (the fibre that
// forked) is still the running fibre: its key values become the kernel
// thread's, which the thread goes on with once it is no longer a processor
// (POSIX: the child's thread keeps its thread-specific data).
void keys_move_to_kernel_thread(rt::Fibre* f) noexcept;

// The child of a fork: the key registry's lock starts free (a thread the
// child does not have may have held it at the fork; each step of a
// create or delete is one atomic store, so a half-done one leaves a
// registry the child can use).
void keys_after_fork_in_child() noexcept;

// The calling kernel thread's key destructors, in rounds, as at its exit
// (the forking thread of a fork child ending with pthread_exit: it then
// waits for the child's other threads, which a destructor may release).
void keys_run_kernel_thread_destructors() noexcept;

}  // namespace loom
