// sched/checks.cpp — the scheduler's invariant checks (sched/checks.hpp has
// the contract). Compiled only into the checking builds (LOOM_CHECKS, on
// with LOOM_CHAOS); the default library has no trace of it.
#include "sched/checks.hpp"

#if defined(LOOM_CHECKS_ON)

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>

#include "base/options.hpp"
#include "sched/cluster.hpp"
#include "sched/fibre.hpp"
#include "sched/processor.hpp"
#include "sched/stats.hpp"

namespace loom::rt {

namespace {
void start_wait_watch();
}  // namespace

namespace check {

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
