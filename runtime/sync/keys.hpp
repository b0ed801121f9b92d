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

}  // namespace loom
