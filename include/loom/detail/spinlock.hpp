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
  // Relaxed by default (a hint). A caller that, seeing it free, goes on to
  // use data the last holder wrote passes acquire: the unlock's release
  // then happens before that use.
  bool is_locked(std::memory_order mo = std::memory_order_relaxed) const noexcept { return held_.load(mo); }

 private:
  std::atomic<bool> held_{false};
};

}  // namespace loom::detail
