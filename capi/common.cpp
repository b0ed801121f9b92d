// capi/common.cpp — errno, the build-once state and C time for the C API.
#include <climits>

#include "base/futex.hpp"
#include "base/spinlock.hpp"
#include "capi.hpp"
#include "sched/timer.hpp"

namespace loom::capi {

// Not inlinable, and impure (the asm's memory clobber), so neither GCC nor
// Clang may keep the address from one call for the next: see capi.hpp.
__attribute__((noinline)) int* errno_slot() noexcept {
  int* p = __errno_location();
  asm volatile("" : "+r"(p) : : "memory");
  return p;
}

void wait_while_building(const unsigned char* state) noexcept {
  // Construction is a placement new of a few stores: it never blocks.
  while (load_state(state) == kBuilding) rt::cpu_relax();
}

std::int64_t clock_ns(clockid_t c) noexcept {
  timespec ts;
  clock_gettime(c, &ts);
  return std::int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

namespace {
// abs in ns, saturated (a tv_sec far in the future is no deadline at all).
std::int64_t to_ns(const timespec& abs) {
  constexpr std::int64_t kMaxSec = INT64_MAX / 1000000000 - 1;
  if (abs.tv_sec > kMaxSec) return INT64_MAX;
  if (abs.tv_sec < -kMaxSec) return INT64_MIN;
  return std::int64_t(abs.tv_sec) * 1000000000 + abs.tv_nsec;
}
}  // namespace

Deadline deadline_of(clockid_t c, const timespec& abs) noexcept {
  std::int64_t ns = to_ns(abs);
  if (ns == INT64_MAX) return kForever;
  if (ns == INT64_MIN) return 1;
  std::int64_t now_mono = rt::now_ns();
  std::int64_t delta = ns - (c == CLOCK_MONOTONIC ? now_mono : clock_ns(c));
  if (delta <= 0) return 1;  // expired, but not kNow (ETIMEDOUT, not EBUSY)
  if (delta >= rt::kNoDeadline - now_mono) return kForever;
  return now_mono + delta;
}

bool reached(clockid_t c, const timespec& abs) noexcept { return clock_ns(c) >= to_ns(abs); }

}  // namespace loom::capi

extern "C" int* loom_errno_location(void) { return loom::capi::errno_slot(); }
