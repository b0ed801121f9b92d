// base/futex.hpp — kernel-level blocking for processors (kernel threads).
//
// WakeFlag is a binary semaphore on a futex: post() makes one pending wake-up
// (posts collapse), wait() consumes it or sleeps until one arrives or the
// absolute CLOCK_MONOTONIC deadline passes. A post that precedes the wait is
// never lost — this is what lets a processor announce "idle", take a last
// look at the queues, and then sleep without missing work published in
// between (DESIGN.md invariant 3).
#pragma once

#include <atomic>
#include <cstdint>

namespace loom::rt {

void futex_wait(std::atomic<int>* addr, int expected, std::int64_t deadline_ns = -1);
void futex_wake(std::atomic<int>* addr, int count);
// A system call made by the instruction itself: the kernel's result (-errno
// on failure), errno untouched. For code that must not reach any function
// named syscall — libloom-pthread defines one (capi/pthread/futex.cpp),
// whose pass-through this is; no lookup, so it works before any
// constructor has run (jemalloc calls syscall from inside dlopen's malloc).
long raw_syscall(long n, long a0, long a1, long a2, long a3, long a4, long a5) noexcept;

// futex(2) through glibc's own syscall(2), never an interposer's:
// libloom-pthread defines syscall to park fibres on the program's own futex
// waits (capi/pthread/futex.cpp), and loom's futexes are not the program's.
// -1 and errno, as syscall(2).
long sys_futex(void* addr, int op, std::uint32_t val, const void* timeout, void* addr2, std::uint32_t val3) noexcept;

class WakeFlag {
 public:
  // Returns true if a post was consumed, false on timeout.
  bool wait(std::int64_t deadline_ns = -1) noexcept;
  void post() noexcept {
    if (state_.exchange(1, std::memory_order_seq_cst) == 0 && sleeping_.load(std::memory_order_seq_cst))
      futex_wake(&state_, 1);
  }
  bool try_consume() noexcept { return state_.exchange(0, std::memory_order_acquire) == 1; }

 private:
  std::atomic<int> state_{0};     // 1 = a post is pending
  std::atomic<int> sleeping_{0};  // the owner is in (or entering) futex_wait
};

// Monotonic clock in nanoseconds.
std::int64_t now_ns() noexcept;

}  // namespace loom::rt
