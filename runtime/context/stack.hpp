// context/stack.hpp — fibre stacks.
//
// A stack is one anonymous mapping: a PROT_NONE guard page at the low end,
// then `size` bytes of stack growing down towards it. Pages are committed by
// the kernel only when touched (MAP_NORESERVE), so a 64 KiB stack whose fibre
// uses 3 KiB costs one or two pages of memory. Stacks are registered with
// valgrind so that its memcheck follows switches onto them.
//
// StackCache keeps freed stacks per processor, so that creating a fibre
// normally makes no system call (an mmap, mprotect and munmap cost ~18 us on
// this project's KVM machines: 100x a whole create+join). It is touched only
// by its own processor. It holds up to kCapacity stacks while the processor
// is busy, and is trimmed to kKeepIdle when the processor goes to sleep, so
// memory returns to its baseline once a burst of fibres is over.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::rt {

inline constexpr std::size_t kGuardSize = 4096;
// Stacks larger than this are cached with only their top kKeepCommitted
// bytes left committed (StackCache::put).
inline constexpr std::size_t kKeepCommittedAbove = std::size_t(1) << 20;
inline constexpr std::size_t kKeepCommitted = std::size_t(64) << 10;

struct Stack {
  char* base = nullptr;  // start of the mapping: the guard page
  std::size_t size = 0;  // usable bytes above the guard page
  unsigned valgrind_id = 0;
  // The program's own memory (FibreAttr::stack_addr, pthread_attr_setstack):
  // no guard page of loom's (base is one page below it, never touched:
  // a fault there still reads as an overflow), never cached or unmapped.
  bool caller = false;

  char* lo() const { return base + kGuardSize; }  // lowest usable byte
  char* hi() const { return base + kGuardSize + size; }  // one past the top
  bool in_guard(const void* p) const {
    auto c = static_cast<const char*>(p);
    return base && c >= base && c < base + kGuardSize;
  }
  explicit operator bool() const { return base != nullptr; }
  // A copy with the base read once (acquire): another thread's view of a
  // fibre's stack, which a rest gives back and a restart gives anew
  // (io/rest.hpp); an empty copy when it has none.
  Stack loaded() const noexcept {
    Stack s = *this;
    s.base = __atomic_load_n(&base, __ATOMIC_ACQUIRE);
    return s;
  }
};

// Rounds `size` up to whole pages. Throws std::bad_alloc when the kernel
// refuses the mapping (out of memory or vm.max_map_count reached).
Stack stack_allocate(std::size_t size);
void stack_release(Stack& s) noexcept;
// A stack the program gives, [lo, lo+size): registered with the tools as
// loom's own are; stack_forget undoes that and leaves the memory alone.
Stack stack_adopt(void* lo, std::size_t size) noexcept;
void stack_forget(Stack& s) noexcept;
// Bytes of stacks mapped now (usable sizes, guard pages not counted),
// process-wide: kept beside the mmap and munmap calls, off the cached path.
std::size_t stack_bytes_mapped() noexcept;

class StackCache {
 public:
  static constexpr std::size_t kCapacity = 1024;
  // Kept while the processor sleeps: this many stacks, and no more than
  // this many bytes of them (glibc keeps 40 MiB of finished threads'
  // stacks): sixteen 8 MiB pthread-sized stacks per sleeping processor held
  // the address space a program under RLIMIT_AS needed for new threads.
  static constexpr std::size_t kKeepIdle = 16;
  static constexpr std::size_t kKeepIdleBytes = std::size_t(40) << 20;
  ~StackCache();
  // From the cache if one of that size is among the most recently freed
  // few (stacks of one size dominate: the cluster default).
  Stack get(std::size_t size);
  void put(Stack s) noexcept;  // keeps it, or releases it when full
  void trim(std::size_t keep) noexcept;  // releases all but `keep`
  void trim_idle() noexcept;             // down to kKeepIdle and kKeepIdleBytes
  void clear() noexcept;                 // releases everything, slots too
  std::size_t cached() const { return slots_.size(); }
  // Whether trim_idle() would give any back.
  bool over_idle() const { return slots_.size() > kKeepIdle || bytes_ > kKeepIdleBytes; }
  // get()s served from the cache and by a new mapping (statistics).
  std::uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  std::uint64_t misses() const { return misses_.load(std::memory_order_relaxed); }

 private:
  std::vector<Stack> slots_;  // reserved to kCapacity on first use
  std::size_t bytes_ = 0;     // their usable sizes, summed
  // Written by the owning processor only, read by anyone.
  std::atomic<std::uint64_t> hits_{0}, misses_{0};
};

}  // namespace loom::rt
