#include "base/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

namespace loom::rt {

#if defined(__x86_64__)
long raw_syscall(long n, long a0, long a1, long a2, long a3, long a4, long a5) noexcept {
  register long r10 __asm__("r10") = a3;
  register long r8 __asm__("r8") = a4;
  register long r9 __asm__("r9") = a5;
  long r;
  __asm__ volatile("syscall"
                   : "=a"(r)
                   : "a"(n), "D"(a0), "S"(a1), "d"(a2), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return r;
}
#elif defined(__aarch64__)
long raw_syscall(long n, long a0, long a1, long a2, long a3, long a4, long a5) noexcept {
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a0;
  register long x1 __asm__("x1") = a1;
  register long x2 __asm__("x2") = a2;
  register long x3 __asm__("x3") = a3;
  register long x4 __asm__("x4") = a4;
  register long x5 __asm__("x5") = a5;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
  return x0;
}
#else
#error "loom: raw_syscall needs this architecture's system call instruction"
#endif

long sys_futex(void* addr, int op, std::uint32_t val, const void* timeout, void* addr2, std::uint32_t val3) noexcept {
  long r = raw_syscall(SYS_futex, long(addr), op, long(val), long(timeout), long(addr2), long(val3));
  if (r < 0 && r > -4096) {
    errno = int(-r);
    return -1;
  }
  return r;
}

void futex_wait(std::atomic<int>* addr, int expected, std::int64_t deadline_ns) {
  timespec ts;
  timespec* tsp = nullptr;
  if (deadline_ns >= 0) {
    ts.tv_sec = deadline_ns / 1000000000;
    ts.tv_nsec = deadline_ns % 1000000000;
    tsp = &ts;
  }
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline.
  sys_futex(addr, FUTEX_WAIT_BITSET_PRIVATE, std::uint32_t(expected), tsp, nullptr, FUTEX_BITSET_MATCH_ANY);
}

void futex_wake(std::atomic<int>* addr, int count) {
  sys_futex(addr, FUTEX_WAKE_PRIVATE, std::uint32_t(count), nullptr, nullptr, 0);
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
