#include "base/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "base/sys.hpp"

namespace loom::rt {

namespace {
using SyscallFn = long (*)(long, ...);
SyscallFn libc_syscall_fn = nullptr;  // looked up at load, or at the first use before that

SyscallFn libc_syscall() noexcept {
  SyscallFn f = __atomic_load_n(&libc_syscall_fn, __ATOMIC_ACQUIRE);
  if (__builtin_expect(!f, 0)) {
    sys::find_symbol(f, "libc.so.6", "syscall");
    __atomic_store_n(&libc_syscall_fn, f, __ATOMIC_RELEASE);
  }
  return f;
}
__attribute__((constructor)) void look_up_libc_syscall() { libc_syscall(); }
}  // namespace

long sys_futex(void* addr, int op, std::uint32_t val, const void* timeout, void* addr2, std::uint32_t val3) noexcept {
  return libc_syscall()(SYS_futex, addr, op, val, timeout, addr2, val3);
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
