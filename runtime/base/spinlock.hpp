// base/spinlock.hpp — the runtime's spin lock (defined in the public
// loom/detail/spinlock.hpp, because synchronisation objects embed one).
#pragma once

#include "loom/detail/spinlock.hpp"

namespace loom::rt {

using detail::cpu_relax;
using detail::SpinLock;

class SpinGuard {
 public:
  explicit SpinGuard(SpinLock& l) : l_(l) { l_.lock(); }
  ~SpinGuard() { l_.unlock(); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  SpinLock& l_;
};

}  // namespace loom::rt
