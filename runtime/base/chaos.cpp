// base/chaos.cpp — the perturbation points' decisions and the invariant
// checks (base/chaos.hpp has the contract). Compiled only into the chaos
// and checking builds; the default library has no trace of it.
#include "base/chaos.hpp"

#if defined(LOOM_CHECKS_ON)

#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/futex.hpp"
#include "base/options.hpp"
#include "base/spinlock.hpp"
#include "sched/cluster.hpp"
#include "sched/fibre.hpp"
#include "sched/processor.hpp"
#include "sched/stats.hpp"
#include "sync/wait.hpp"

namespace loom::rt {

bool start_runtime_thread(const char* name, void* (*fn)(void*));

namespace {

void start_wait_watch();

}  // namespace

#if defined(LOOM_CHAOS)
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
    // A processor is named by its cluster and index, which a replay gives
    // it again; any other thread by the order it first passed a point.
    if (Processor* p = this_processor())
      t.key = (std::uint64_t(p->cluster().id()) << 16) | p->index();
    else
      t.key = (1ull << 40) + next_foreign.fetch_add(1, std::memory_order_relaxed);
    t.ready = true;
    // Sleeps as short as asked: the default 50 µs of slack would make
    // every sleep at least that long.
    prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);
    start_wait_watch();
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

// Printed at load, before main: a run that dies says its seed.
__attribute__((constructor)) void announce() { (void)settings(); }

}  // namespace chaos
#endif  // LOOM_CHAOS

// ---- invariant checks -----------------------------------------------------------

namespace check {

void fail(const char* fmt, ...) noexcept {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
#if defined(LOOM_CHAOS)
  std::fprintf(stderr, "loom: invariant broken: %s (chaos seed %llu)\n", buf, chaos::seed());
#else
  std::fprintf(stderr, "loom: invariant broken: %s\n", buf);
#endif
  std::fflush(stderr);
  std::abort();
}

namespace {
const char* name_of(const Fibre* f) { return f->name ? f->name : ""; }
}  // namespace

void on_switch(const Fibre* next, const Processor& p) noexcept {
  // (On the shared queue, every processor runs every fibre: nothing is pinned.)
  if (next->pinned && next->affinity != &p && !p.cluster().shared_queue())
    fail("pinned fibre %llu \"%s\" switched to on processor %u of cluster %u; its processor is %d",
         (unsigned long long)next->id, name_of(next), p.index(), p.cluster().id(),
         next->affinity ? int(next->affinity->index()) : -1);
  start_wait_watch();
}

void touched_dead(const void* object, const char* kind) noexcept {
  Processor* here = this_processor();
  Fibre* f = here ? here->current() : nullptr;
  if (here)
    fail(
        "%s %p touched after its destructor ran, by fibre %llu \"%s\" on processor %u of cluster %u (an operation "
        "that let another thread through and then went on using the object?)",
        kind, object, f ? (unsigned long long)f->id : 0ull, f ? name_of(f) : "", here->index(), here->cluster().id());
  fail(
      "%s %p touched after its destructor ran, by a thread that is no processor (an operation that let another "
      "thread through and then went on using the object?)",
      kind, object);
}

void on_owner(const Processor& p, const char* what) noexcept {
  Processor* here = this_processor();
  if (here != &p) {
    Fibre* f = here ? here->current() : nullptr;
    fail("%s on processor %u of cluster %u from %s%u (fibre %llu \"%s\"): only its owner may", what, p.index(),
         p.cluster().id(), here ? "processor " : "a thread that is no processor", here ? here->index() : 0u,
         f ? (unsigned long long)f->id : 0ull, f ? name_of(f) : "");
  }
}

}  // namespace check

// ---- a ready fibre waits behind a busy processor while another sleeps --------

namespace {

// Sampled every kPeriodMs per processor: "held" since when its switch count
// last moved while fibres were queued on it, "asleep" since when it last
// was not idle (or was woken).
struct Sample {
  std::uint64_t switches = ~0ull;
  std::uint64_t wakes = ~0ull;
  std::int64_t held_since = -1;
  std::int64_t asleep_since = -1;
};

constexpr unsigned kPeriodMs = 50;
constexpr std::size_t kMaxWatched = 1024;

struct WaitWatch {
  struct Entry {
    const Processor* p = nullptr;
    Sample s;
  };
  Entry entries[kMaxWatched];
  std::size_t used = 0;

  Sample& of(const Processor* p) {
    for (std::size_t i = 0; i < used; ++i)
      if (entries[i].p == p) return entries[i].s;
    if (used == kMaxWatched) return entries[kMaxWatched - 1].s;  // (shared: the check is a hint there)
    entries[used].p = p;
    return entries[used++].s;
  }

  void look(Cluster& c, std::int64_t now, std::int64_t bound) {
    std::size_t n = c.size();
    if (n < 2 || !c.stealing()) return;
    const Processor* held = nullptr;
    const Processor* asleep = nullptr;
    for (std::size_t i = 0; i < n; ++i) {
      Processor* p = c.processor(i);
      if (!p) continue;
      Sample& s = of(p);
      std::uint64_t sw = p->counters.get(Stat::switches) + p->counters.get(Stat::yields);
      std::uint64_t wk = p->wakes.load(std::memory_order_relaxed);
      bool idle = p->idle.load(std::memory_order_relaxed);
      bool waiting = !idle && p->running_id.load(std::memory_order_relaxed) != 0 && p->ready_queue().maybe_nonempty();
      if (!waiting || sw != s.switches) s.held_since = waiting ? now : -1;
      if (!idle || wk != s.wakes) s.asleep_since = idle ? now : -1;
      s.switches = sw;
      s.wakes = wk;
      if (s.held_since >= 0 && now - s.held_since >= bound) held = p;
      if (s.asleep_since >= 0 && now - s.asleep_since >= bound) asleep = p;
    }
    if (held && asleep)
      check::fail(
          "a ready fibre has waited %lld ms behind processor %u of cluster %u (running fibre %llu \"%s\", "
          "no switch) while processor %u slept",
          (long long)(now - of(held).held_since) / 1000000, held->index(), c.id(),
          (unsigned long long)held->running_id.load(std::memory_order_relaxed),
          held->running_name.load(std::memory_order_relaxed) ? held->running_name.load(std::memory_order_relaxed) : "",
          asleep->index());
  }
};

std::int64_t wait_bound_ns = 0;

void* wait_watch_main(void*) {
  static WaitWatch w;
  for (;;) {
    timespec ts{0, long(kPeriodMs) * 1000000L};
    ::syscall(SYS_nanosleep, &ts, nullptr);
    std::int64_t now = now_ns();
    for (Cluster* c = Cluster::first(); c; c = c->next_made()) w.look(*c, now, wait_bound_ns);
  }
  return nullptr;
}

void start_wait_watch() {
  static std::atomic<bool> started{false};
  if (started.load(std::memory_order_relaxed) || started.exchange(true, std::memory_order_acq_rel)) return;
  wait_bound_ns = std::int64_t(env_size("LOOM_CHECK_WAIT_MS", 2000, 0, 3'600'000)) * 1000000;
  if (wait_bound_ns && !start_runtime_thread("loom-check", &wait_watch_main))
    std::fprintf(stderr, "loom: invariant checks: cannot start the waiting-fibre watch; off\n");
}

}  // namespace

}  // namespace loom::rt

#endif  // LOOM_CHECKS_ON
