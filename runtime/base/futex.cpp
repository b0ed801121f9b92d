#include "base/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

namespace loom::rt {

void futex_wait(std::atomic<int>* addr, int expected, std::int64_t deadline_ns) {
  timespec ts;
  timespec* tsp = nullptr;
  if (deadline_ns >= 0) {
    ts.tv_sec = deadline_ns / 1000000000;
    ts.tv_nsec = deadline_ns % 1000000000;
    tsp = &ts;
  }
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline.
  syscall(SYS_futex, reinterpret_cast<int*>(addr), FUTEX_WAIT_BITSET_PRIVATE, expected, tsp, nullptr,
          FUTEX_BITSET_MATCH_ANY);
}

void futex_wake(std::atomic<int>* addr, int count) {
  syscall(SYS_futex, reinterpret_cast<int*>(addr), FUTEX_WAKE_PRIVATE, count, nullptr, nullptr, 0);
}

bool WakeFlag::wait(std::int64_t deadline_ns) noexcept {
  for (;;) {
    if (state_.exchange(0, std::memory_order_acquire) == 1) return true;
    if (deadline_ns >= 0 && now_ns() >= deadline_ns) return false;
    sleeping_.store(1, std::memory_order_seq_cst);
    // Re-check after announcing: a post between the exchange above and the
    // store would otherwise skip the futex_wake while we go to sleep.
    if (state_.load(std::memory_order_seq_cst) == 0) futex_wait(&state_, 0, deadline_ns);
    sleeping_.store(0, std::memory_order_relaxed);
  }
}

std::int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace loom::rt
