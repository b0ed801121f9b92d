// base/chaos.cpp — the perturbation points' decisions (base/chaos.hpp has
// the contract). Compiled only into the chaos build; the default library
// has no trace of it.
#include "base/chaos.hpp"

#if defined(LOOM_CHAOS)

#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/options.hpp"
#include "base/spinlock.hpp"  // cpu_relax

namespace loom::rt {

namespace chaos {
namespace {

constexpr const char* kNames[] = {
#define LOOM_CHAOS_NAME(name) #name,
    LOOM_CHAOS_POINTS(LOOM_CHAOS_NAME)
#undef LOOM_CHAOS_NAME
};
constexpr unsigned kPoints = unsigned(Point::count);

std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Settings {
  bool on = true;
  std::uint64_t seed = 0;
  std::uint64_t rate = 4;
  bool only[kPoints];  // LOOM_CHAOS_ONLY: the points perturbed (all by default)
  Settings() {
    const char* s = std::getenv("LOOM_CHAOS");
    if (s && (!std::strcmp(s, "off") || !std::strcmp(s, "no"))) {
      on = false;
      std::fprintf(stderr, "loom: chaos off (LOOM_CHAOS=%s)\n", s);
      return;
    }
    char* end = nullptr;
    if (s && *s) seed = std::strtoull(s, &end, 10);
    if (!s || !*s || *end) {
      if (s && *s) std::fprintf(stderr, "loom: LOOM_CHAOS=%s: expected a seed (a number) or off; using the clock\n", s);
      timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      seed = (std::uint64_t(ts.tv_sec) * 1000003u + std::uint64_t(ts.tv_nsec)) % 1000000000ull;
    }
    rate = env_size("LOOM_CHAOS_RATE", 4, 1, 1u << 20);
    const char* list = std::getenv("LOOM_CHAOS_ONLY");
    for (unsigned i = 0; i < kPoints; ++i) only[i] = !list || !*list;
    for (const char* n = list; n && *n;) {
      std::size_t len = std::strcspn(n, ",");
      bool known = false;
      for (unsigned i = 0; i < kPoints; ++i)
        if (std::strlen(kNames[i]) == len && !std::strncmp(kNames[i], n, len)) only[i] = known = true;
      if (!known) std::fprintf(stderr, "loom: LOOM_CHAOS_ONLY: no point named '%.*s'; ignored\n", int(len), n);
      n += len + (n[len] == ',');
    }
    std::fprintf(stderr, "loom: chaos seed %llu (replay: LOOM_CHAOS=%llu, exact with LOOM_PROCESSORS=1)\n",
                 (unsigned long long)seed, (unsigned long long)seed);
  }
};

Settings& settings() {
  static Settings s;  // on first use: a point may be passed before this file's constructors ran
  return s;
}

// One per kernel thread: its key and its pass count at each point.
struct ThreadState {
  bool ready = false;
  std::uint64_t key = 0;
  std::uint32_t passes[kPoints] = {};
};
thread_local ThreadState tls_state __attribute__((tls_model("initial-exec")));
std::atomic<std::uint64_t> next_foreign{0};

ThreadState& state() {
  ThreadState& t = tls_state;
  if (__builtin_expect(!t.ready, 0)) {
    // Not named by name_thread (no processor): by the order it first
    // passed a point.
    t.key = (1ull << 40) + next_foreign.fetch_add(1, std::memory_order_relaxed);
    t.ready = true;
    // Sleeps as short as asked: the default 50 µs of slack would make
    // every sleep at least that long.
    prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);
  }
  return t;
}

void stall_for(std::uint64_t r) {
  switch ((r >> 20) % 3) {
    case 0:
      ::syscall(SYS_sched_yield);  // the kernel's, not libloom-pthread's
      break;
    case 1:
      for (std::uint64_t i = 0, n = 16 + (r >> 24) % 4096; i < n; ++i) cpu_relax();
      break;
    default: {
      timespec ts{0, long(1000 + (r >> 24) % 20000)};  // 1–21 µs (plus the kernel's slack)
      ::syscall(SYS_nanosleep, &ts, nullptr);
      break;
    }
  }
}

}  // namespace

void point(Point p) noexcept {
  Settings& s = settings();
  if (!s.on) return;
  ThreadState& t = state();
  unsigned i = unsigned(p);
  if (!s.only[i]) return;
  std::uint64_t r = mix(mix(mix(s.seed ^ t.key) + i) + t.passes[i]++);
  if (r % s.rate != 0) return;
  stall_for(r);
}

unsigned long long seed() noexcept { return settings().seed; }

void name_thread(std::uint64_t key) noexcept {
  // A processor, by its cluster and index, which a replay gives it again
  // (not counted among the other threads: their names stay as they were).
  ThreadState& t = tls_state;
  if (!t.ready) prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);
  t.key = key;
  t.ready = true;
}

// Printed at load, before main: a run that dies says its seed.
__attribute__((constructor)) void announce() { (void)settings(); }

}  // namespace chaos

}  // namespace loom::rt

#endif  // LOOM_CHAOS

