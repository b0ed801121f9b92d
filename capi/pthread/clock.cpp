// capi/pthread/clock.cpp — libloom-pthread's per-thread CPU clocks:
// clock_gettime and clock_getres of the clock pthread_getcpuclockid gives
// for a thread of loom's, and of CLOCK_THREAD_CPUTIME_ID on one, answer
// with the thread's fibre's own CPU time (sched/cpu_clock.hpp), as glibc's
// answer with its kernel thread's. Every other clock is glibc's, unchanged.
//
// What glibc does and this does not: a fibre's time is kept from the first
// time its clock is asked for (pthread_getcpuclockid, or its first read of
// CLOCK_THREAD_CPUTIME_ID), so it starts near zero there, where glibc's
// starts at the thread's birth; the clock of a
// thread that ended reads the one that took its slot, not EINVAL.
// timer_create and clock_nanosleep on such a clock are the kernel's
// answers to a clock id it does not know (EINVAL), where glibc's timer
// works on a thread's CPU clock; CLOCK_THREAD_CPUTIME_ID there is the
// processor's kernel thread's (the docs/DESIGN.md section "Per-thread CPU
// clocks").
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "base/sys.hpp"
#include "capi.hpp"

// glibc declares the timespec nonnull; a caller through dlsym may pass none.
#pragma GCC diagnostic ignored "-Wnonnull-compare"

namespace {

using ClockFn = int (*)(clockid_t, struct timespec*);

// glibc's own (its vDSO path), looked up in a constructor: until then (a
// library initialised earlier, a malloc's start-up) the system call, which
// is always right.
ClockFn real_gettime = nullptr;
ClockFn real_getres = nullptr;

__attribute__((constructor(105))) void find_clocks() {
  loom::rt::sys::find_symbol(real_getres, "libc.so.6", "clock_getres");
  loom::rt::sys::find_symbol(real_gettime, "libc.so.6", "clock_gettime");
}

int fail(int e) {
  errno = e;
  return -1;
}

// A thread's CPU clock of loom's (all such clocks are negative) or
// CLOCK_THREAD_CPUTIME_ID: the one test on the path of every other clock.
inline bool maybe_ours(clockid_t c) { return c < 0 || c == CLOCK_THREAD_CPUTIME_ID; }

}  // namespace

extern "C" {

int clock_gettime(clockid_t c, struct timespec* ts) {
  if (__builtin_expect(maybe_ours(c), 0)) {
    std::uint64_t ns = 0;
    if (loom::capi::fibre_cpu_clock(c, &ns)) {
      if (ns == ~std::uint64_t(0)) return fail(EINVAL);
      if (!ts) return fail(EFAULT);
      ts->tv_sec = time_t(ns / 1000000000u);
      ts->tv_nsec = long(ns % 1000000000u);
      return 0;
    }
  }
  if (ClockFn f = real_gettime) return f(c, ts);
  long r = ::syscall(SYS_clock_gettime, c, ts);
  return r == 0 ? 0 : -1;
}

int clock_getres(clockid_t c, struct timespec* res) {
  if (__builtin_expect(c < 0, 0)) {
    std::uint64_t ns = 0;
    if (loom::capi::fibre_cpu_clock(c, &ns)) {
      if (ns == ~std::uint64_t(0)) return fail(EINVAL);
      if (res) *res = timespec{0, 1};  // the kernel's CPU clocks count nanoseconds
      return 0;
    }
  }
  if (ClockFn f = real_getres) return f(c, res);
  long r = ::syscall(SYS_clock_getres, c, res);
  return r == 0 ? 0 : -1;
}

}  // extern "C"
