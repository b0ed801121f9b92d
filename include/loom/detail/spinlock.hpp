// loom/detail/spinlock.hpp — a test-and-test-and-set spin lock for critical
// sections of a few dozen instructions (queue consumers, wait lists, idle
// lists). Never held across a fibre switch or a system call. Public only
// because the synchronisation objects embed one.
#pragma once

#include <atomic>

namespace loom::detail {

inline void cpu_relax() { __builtin_ia32_pause(); }

class SpinLock {
 public:
  constexpr SpinLock() = default;
  bool try_lock() noexcept {
    return !held_.load(std::memory_order_relaxed) && !held_.exchange(true, std::memory_order_acquire);
  }
  void lock() noexcept {
    while (held_.exchange(true, std::memory_order_acquire)) {
      while (held_.load(std::memory_order_relaxed)) cpu_relax();
    }
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }
  bool is_locked() const noexcept { return held_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> held_{false};
};

}  // namespace loom::detail
