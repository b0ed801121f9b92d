#include "context/stack.hpp"

#include <sys/mman.h>

#include <new>

#include "context/context.hpp"

namespace loom::rt {

namespace {
std::atomic<std::size_t> mapped_bytes{0};
}  // namespace

std::size_t stack_bytes_mapped() noexcept { return mapped_bytes.load(std::memory_order_relaxed); }

Stack stack_allocate(std::size_t size) {
  size = (size + kGuardSize - 1) & ~(kGuardSize - 1);
  void* p = mmap(nullptr, size + kGuardSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  if (mprotect(p, kGuardSize, PROT_NONE) != 0) {
    munmap(p, size + kGuardSize);
    throw std::bad_alloc();
  }
  Stack s;
  s.base = static_cast<char*>(p);
  s.size = size;
  s.valgrind_id = tools_register_stack(s.lo(), s.hi());
  mapped_bytes.fetch_add(size, std::memory_order_relaxed);
  return s;
}

void stack_release(Stack& s) noexcept {
  if (!s.base) return;
  tools_deregister_stack(s.valgrind_id);
  // munmap leaves ASan's shadow as the last fibre's frames left it, and the
  // next mmap may return the same range to another fibre.
  sanitizer_unpoison(s.lo(), s.size);
  munmap(s.base, s.size + kGuardSize);
  mapped_bytes.fetch_sub(s.size, std::memory_order_relaxed);
  s = Stack{};
}

Stack stack_adopt(void* lo, std::size_t size) noexcept {
  Stack s;
  s.base = static_cast<char*>(lo) - kGuardSize;
  s.size = size;
  s.caller = true;
  s.valgrind_id = tools_register_stack(s.lo(), s.hi());
  return s;
}

void stack_forget(Stack& s) noexcept {
  if (!s.base) return;
  tools_deregister_stack(s.valgrind_id);
  sanitizer_unpoison(s.lo(), s.size);  // the program may reuse it for anything
  s = Stack{};
}

StackCache::~StackCache() { trim(0); }

void StackCache::trim(std::size_t keep) noexcept {
  while (slots_.size() > keep) {
    bytes_ -= slots_.back().size;
    stack_release(slots_.back());
    slots_.pop_back();
  }
}

void StackCache::trim_idle() noexcept {
  trim(kKeepIdle);
  while (bytes_ > kKeepIdleBytes) trim(slots_.size() - 1);
}

void StackCache::clear() noexcept {
  trim(0);
  std::vector<Stack>().swap(slots_);
}

Stack StackCache::get(std::size_t size) {
  size = (size + kGuardSize - 1) & ~(kGuardSize - 1);
  constexpr std::size_t kSearch = 8;
  const std::size_t n = slots_.size();
  for (std::size_t i = n; i-- > 0 && i + kSearch >= n;) {
    if (slots_[i].size == size) {
      Stack s = slots_[i];
      slots_[i] = slots_.back();
      slots_.pop_back();
      bytes_ -= s.size;
      // The previous fibre's frames left ASan poison behind.
      sanitizer_unpoison(s.lo(), s.size);
      hits_.store(hits_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return s;
    }
  }
  misses_.store(misses_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return stack_allocate(size);
}

void StackCache::put(Stack s) noexcept {
  if (slots_.size() >= kCapacity) return stack_release(s);
  // A large stack (glibc-sized, the pthread routes' default) goes into the
  // cache with only its top still committed, as glibc gives a finished
  // thread's stack back to the kernel below its last frames: a thread that
  // once recursed deep must not keep that memory for the next one.
  if (s.size > kKeepCommittedAbove) madvise(s.lo(), s.size - kKeepCommitted, MADV_DONTNEED);
  if (slots_.capacity() == 0) {
    try {
      slots_.reserve(kCapacity);
    } catch (...) {
      return stack_release(s);
    }
  }
  slots_.push_back(s);  // within capacity: cannot throw
  bytes_ += s.size;
}

}  // namespace loom::rt
