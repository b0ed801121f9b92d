// base/membarrier.hpp — asymmetric memory barriers.
//
// A Dekker-style handshake between a frequent side and a rare side normally
// needs a full fence (a locked instruction) on both. With membarrier(2) the
// rare side pays instead: heavy_fence() makes every thread of the process
// execute a full barrier, so the frequent side needs only a compiler fence.
// loom uses it for ready queues: the owner pops on every switch, thieves
// steal rarely. Without kernel support (or under ThreadSanitizer, which does
// not model it), asymmetric_fences() is false and callers use a lock.
#pragma once

namespace loom::rt {

bool asymmetric_fences() noexcept;  // registers the process on first call
void heavy_fence() noexcept;

}  // namespace loom::rt
