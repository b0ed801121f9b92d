// sched/monitor.cpp — the monitor (SchedConfig::handoff_us, slice_us;
// LOOM_HANDOFF_US, LOOM_SLICE_US): processors lost to what loom cannot see.
//
// A processor is one kernel thread. Under the preload a program reaches the
// kernel around the calls loom intercepts by name (liburing's own
// io_uring_enter, libgomp's inline futex) or busy-waits for a flag another
// thread sets (OpenBLAS): the kernel thread is then lost to loom for as long
// as that lasts, and every fibre queued on its processor waits — for good
// when the one it waits for is among them. Go's sysmon does this job there.
//
// One kernel thread of the runtime's looks at every processor of the
// clusters that ask for it (and runs the stall detector's looks,
// sched/stall.cpp). A processor is lost when its switch and yield counters
// have not moved since an earlier look while a fibre runs there, for
//   - handoff_us, with its kernel thread in the kernel (/proc's state, read
//     only for a processor that fibres wait for): a call loom did not see;
//   - slice_us on a CPU: a fibre running without a scheduling point, its
//     thread's CPU time (its CPUCLOCK_SCHED clock) grown by at least a
//     quarter of the time since an earlier look (a thread the kernel keeps off the CPU
//     on a machine busier than its CPUs is not helped by another thread).
// Both only while fibres wait for that processor (below).
// While a lost processor has fibres queued, or a cluster's processors are
// all lost while work waits outside their queues (a due timer, the staging
// or background queue, readiness on the epoll set), the monitor sends one
// helper at each look: a sleeping processor, woken to steal, or else — as
// long as fewer processors than the cluster's count are free (not held past
// the bound) — a spare processor (Cluster::activate_spare): a kernel thread beside the
// cluster's processors that steals (from a lost processor even with
// stealing off), polls and fires timers like any idle processor. Nothing is
// taken from the lost processor but what a thief may take: its kernel thread
// keeps it and goes on when the call returns, so no two kernel threads ever
// run one processor. Spares park once no processor has been lost for
// kLingerNs (Processor::park).
//
// Cost: nothing on a switch. The monitor reads each processor's counters
// and queue hint at each look: every handoff_us / 2 while some processor
// may be lost, backing off to 4 × handoff_us while fibres wait; while none
// does it naps, up to 10 or 32 × handoff_us, until a fibre is queued behind
// a running one (Cluster::announce_queued: two loads); it sleeps on a futex
// once every processor has slept for a second (a processor leaving its
// sleep wakes it: monitor_busy), so an idle process costs no wake-up.
#include "sched/monitor.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <new>
#include <unordered_map>
#include <vector>

#include "base/futex.hpp"
#include "base/sys.hpp"
#include "sched/cluster.hpp"
#include "sched/processor.hpp"
#include "sched/stats.hpp"

namespace loom::rt {

std::atomic<int> monitor_sleeping{0};

void monitor_wake() noexcept {
  if (monitor_sleeping.exchange(0, std::memory_order_seq_cst)) futex_wake(&monitor_sleeping, 1);
}

namespace {

// Spares stay active this long after the monitor last found work waiting on
// a lost processor: a program that blocks again soon (an I/O thread's next
// call) finds its spare at work, without a wake-up.
constexpr std::int64_t kLingerNs = 100'000'000;

// A fibre held on a CPU this many slices with work waiting is a spinner
// whatever share of a CPU the kernel gave it (look: state 'R').
constexpr std::int64_t kStarvedSlices = 10;

// How long every processor sleeps before the monitor sleeps until one
// wakes (Cluster::go_busy).
constexpr std::int64_t kIdleNs = 1'000'000'000;

struct Watch {
  std::uint64_t switches = ~0ull;
  std::uint64_t id = 0;
  std::int64_t since = 0;  // the first look that saw these counters
  bool lost = false;       // counted and marked for this hold
  // The thread's CPU time at a look past the bound, and when: a fibre held
  // past the slice counts as a spinner only if its thread ran for most of
  // the time since (not one the kernel kept off a CPU).
  std::int64_t cpu_mark = -1, cpu_mark_at = 0;
};

// A kernel thread's CPU time in ns (its CPUCLOCK_SCHED clock, as glibc's
// pthread_getcpuclockid makes it for a thread id), or -1.
std::int64_t thread_cpu_ns(pid_t tid) {
  timespec ts;
  clockid_t clock = clockid_t((~unsigned(tid) << 3) | 6);
  if (!tid || clock_gettime(clock, &ts) != 0) return -1;
  return std::int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

class Monitor {
 public:
  [[noreturn]] void run() {
    proc_files_start();
    std::int64_t period = 0;
    std::int64_t quiet_since = 0;  // every processor asleep at every look since (0: not)
    std::int64_t deaf = 0;         // after a poke, naps hear no poke for this long
    std::int64_t poked_at = -1;    // when the last poke ended a nap
    bool lost_since_poke = false;  // a look found a processor lost since then
    for (;;) {
      const std::int64_t now = now_ns();
      bool busy = false, urgent = false, active = false, waiting = false;
      lost_seen_ = false;
      std::int64_t base = 0;  // the shortest period a cluster asks for
      for (Cluster* c = Cluster::first(); c; c = c->next_made()) {
        if (!c->alive()) continue;
        const SchedConfig& cfg = c->config();
        if (!cfg.handoff_us && !cfg.stall_ms) continue;
        if (!all_asleep(*c)) busy = true;
        if (!cfg.handoff_us) continue;
        std::int64_t b = std::int64_t(cfg.handoff_us) * 500;
        base = base ? std::min(base, b) : b;
        // Its records of processors (first sight of one, a spare) are
        // allocated: a process out of memory (glibc's tst-create-detached,
        // under RLIMIT_AS) had the monitor's thread killed by bad_alloc. It
        // looks again next time instead.
        try {
          look(*c, now, urgent, active, waiting);
        } catch (const std::bad_alloc&) {
          urgent = true;
        }
      }
      std::int64_t stall = 0;
      try {
        stall = stall_tick(now);
      } catch (const std::bad_alloc&) {
      }
      // Every processor asleep at every look for kIdleNs: the monitor
      // sleeps too, its spares parked first, until a processor wakes.
      // Before that it looks at most every 10 ms: waking it from go_busy
      // at every request of a server that idles between requests cost
      // more than its looks (2.7 times the CPU per request at one request
      // each 2 ms, an outside review measured).
      if (busy) {
        quiet_since = 0;
      } else if (!quiet_since) {
        quiet_since = now;
      } else if (now - quiet_since >= kIdleNs) {
        retire_all_spares();
        sleep_until_busy();
        period = quiet_since = 0;
        continue;
      }
      if (!base) base = stall ? stall : 100'000'000;
      if (lost_seen_) lost_since_poke = true;
      // Backing off: to 8 × base (4 ms by default) while fibres wait on a
      // switching processor. Otherwise a nap, which a fibre queued behind a
      // running one ends (Cluster::announce_queued): the way a processor
      // gets lost with work behind it (a thread blocks in a call loom does
      // not see with another queued behind it, or is queued behind one
      // that blocked). Naps back off to 20 × (10 ms) while some processor
      // ran fibres since the last look — one held by a call loom cannot see
      // is then found within two naps, with readiness that no push
      // announces — and to 64 × (32 ms) otherwise, a server that idles
      // between requests. Each look costs about 10 µs of CPU on this VM: a
      // server answering a request every 2 ms paid 30 % more CPU per
      // request with looks every 4 ms, and about 20 % with looks every 10
      // ms, before the naps; a processor lost so waited up to 10 ms for its
      // first look. A timer bounds the nap of a cluster with no processor
      // asleep to fire it.
      const bool nap = !waiting && !urgent;
      const std::int64_t cap = base * (waiting ? 8 : active ? 20 : 64);
      period = urgent || !period ? base : std::min(period * 2, cap);
      if (stall) period = std::min(period, stall);
      if (!nap) {
        sleep_ns(period);
        continue;
      }
      if (const std::int64_t timer = earliest_timer()) period = std::max(base, std::min(period, timer - now));
      // Deaf for a while after a poke, while pokes find nothing lost: a
      // one-processor ping-pong queues a fibre behind a running one at
      // every hand-off, and woke the monitor at each nap's start (3,000
      // times a second, +10 % CPU: an outside review). A poke that found
      // a processor lost makes the next one heard at once; a nap that ends
      // unpoked halves the deafness (a process gone quiet is heard again
      // within a few naps).
      const std::int64_t end = now + period;
      std::int64_t t = now_ns();
      if (poked_at >= 0 && t < poked_at + deaf) {
        sleep_ns(std::min(end, poked_at + deaf) - t);
        t = now_ns();
      }
      bool poked = false;
      if (t < end) {
        monitor_sleeping.store(kMonitorNapping, std::memory_order_seq_cst);
        futex_wait(&monitor_sleeping, kMonitorNapping, end);
        // 0: a push ended the nap (monitor_wake took the word).
        poked = monitor_sleeping.exchange(0, std::memory_order_relaxed) == 0;
      }
      if (poked) {
        deaf = poked_at < 0 || lost_since_poke ? 0 : std::min(base * 64, deaf ? deaf * 2 : base);
        poked_at = now_ns();
        lost_since_poke = false;
        if (!deaf) period = 0;  // look at once, then every base: a cold hand-off
      } else {
        deaf = deaf > base ? deaf / 2 : 0;
      }
    }
  }


 private:
  static void sleep_ns(std::int64_t ns) {
    timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
    sys::nanosleep(&ts, nullptr);
  }

  static bool all_asleep(Cluster& c) {
    return c.idle_processors() >= int(c.size() + c.active_spares());
  }

  // The earliest deadline of the timers of the watched clusters with no
  // processor asleep keeping them (0: none). A sleeping processor fires its
  // cluster's timers itself (the keeper): a periodic timer woke the monitor
  // at each deadline, 835 times a second for one of 1 ms (an outside
  // review). But sleepers may keep none: look() below.
  static std::int64_t earliest_timer() {
    std::int64_t t = 0;
    for (Cluster* c = Cluster::first(); c; c = c->next_made())
      if (c->alive() && c->config().handoff_us && (c->idle_processors() == 0 || !c->timers_kept()) &&
          c->timers.pending()) {
        std::int64_t d = c->timers.next();
        if (!t || d < t) t = d;
      }
    return t;
  }

  static void retire_all_spares() {
    for (Cluster* c = Cluster::first(); c; c = c->next_made())
      if (c->alive() && c->active_spares()) c->retire_spares();
  }

  static bool every_cluster_asleep() {
    for (Cluster* c = Cluster::first(); c; c = c->next_made())
      if (c->alive() && (c->config().handoff_us || c->config().stall_ms) && !all_asleep(*c)) return false;
    return true;
  }

  // Until a processor leaves its sleep. Announced, then looked again (a
  // processor that left its sleep before the announcement is seen here; one
  // after it sees the word: monitor_busy).
  static void sleep_until_busy() {
    monitor_sleeping.store(kMonitorAsleep, std::memory_order_seq_cst);
    if (!every_cluster_asleep()) {
      monitor_sleeping.store(0, std::memory_order_relaxed);
      return;
    }
    while (monitor_sleeping.load(std::memory_order_acquire) == kMonitorAsleep)
      futex_wait(&monitor_sleeping, kMonitorAsleep);
  }

  // Asleep in the kernel until something happens ('S'), or stopped: what
  // a spare can stand in for without competing for a CPU.
  static bool waits_in_kernel(char state) { return state == 'S' || state == 't' || state == 'T'; }

  static char state_of(Processor& p, long* nr) {
    pid_t tid = p.tid.load(std::memory_order_relaxed);
    return tid ? thread_state(tid, nr) : '?';  // (a spare whose thread has not run yet)
  }

  // Work the cluster's processors would find outside their own queues.
  static bool outside_work(Cluster& c, std::int64_t now) {
    return (c.timers.pending() && c.timers.next() <= now) || c.staging_nonempty() || c.background_nonempty() ||
           c.outside_ready();
  }

  // urgent: look again soon (a processor may be lost); active: some
  // processor ran fibres since the last look; waiting: fibres are queued
  // on some busy processor.
  void look(Cluster& c, std::int64_t now, bool& urgent, bool& active, bool& waiting_any) {
    // A color cluster's runners are pinned to their processors: no helper
    // could take them (DESIGN.md, "Lost processors": a limit).
    if (c.color.load(std::memory_order_relaxed)) return;
    const std::int64_t bound = std::int64_t(c.config().handoff_us) * 1000;
    const std::int64_t slice = std::max(bound, std::int64_t(c.config().slice_us) * 1000);
    int lost = 0, needy = 0, members = 0, held_n = 0, waits_n = 0;
    held_.clear();
    bool all_lost = true;
    int outside = -1;  // outside_work(), looked at once if needed
    auto pending = [&] {
      if (outside < 0) outside = outside_work(c, now);
      return outside == 1;
    };
    auto one = [&](Processor& p) {
      ++members;
      Watch& w = watch_[&p];
      std::uint64_t sw = p.counters.get(Stat::switches) + p.counters.get(Stat::yields);
      std::uint64_t id = p.running_id.load(std::memory_order_relaxed);
      const bool waiting = p.ready_queue().maybe_nonempty();
      if (id != 0 && waiting) waiting_any = true;
      if (id == 0 || sw != w.switches || id != w.id) {
        if (id != 0) active = true;
        if (w.lost) p.lost.store(false, std::memory_order_relaxed);
        w = Watch{sw, id, now, false};
        all_lost = false;
        return;
      }
      const std::int64_t held = now - w.since;
      if (held < bound) {
        all_lost = false;
        if (waiting) urgent = true;  // look again soon: it may be lost
        return;
      }
      ++held_n;  // no help to anyone now, lost or not
      held_.push_back({&p, held});
      char state = 0;
      long nr = -1;
      bool lost_now = false;
      if (waiting || pending()) {
        urgent = true;
        // (Found lost before, this hold: it stays so until it switches, and
        // /proc is not read again — a read is a round trip to loom-proc,
        // stall.cpp, which at every look competed for the CPUs with the
        // very spare standing in: a fibre queued behind a spinner on one
        // processor under io_uring waited 3 to 7 times as long.)
        if (!w.lost) state = state_of(p, &nr);
        if (w.lost || waits_in_kernel(state)) {
          lost_now = true;  // waiting in the kernel past the bound (or found lost before, this hold)
        } else if (state == 'D') {
          // Uninterruptible: the kernel's own work (the address-space lock
          // of mmap and mprotect, a page fault, a disk) ends by itself; a
          // spare would mostly queue for the same lock. Lost past the slice.
          // (10,000 connections' stacks and thread blocks, mapped at once,
          // held processors so for milliseconds and started spares.)
          lost_now = held >= slice;
        } else {
          // On a CPU, or runnable: past the slice, and only if it had the
          // CPU for at least a quarter of the time since the mark (four
          // spinners on two CPUs get half each). A thread the
          // kernel kept off the CPU (a machine busier than its CPUs) is not
          // helped by another thread: an echo test of 10,000 connections
          // whose client shares the CPUs started spares so.
          pid_t tid = p.tid.load(std::memory_order_relaxed);
          std::int64_t cpu = thread_cpu_ns(tid);
          if (w.cpu_mark < 0 || cpu < 0) {
            w.cpu_mark = cpu;
            w.cpu_mark_at = now;
          } else if (held >= slice && now - w.cpu_mark_at >= bound) {
            // (Since the first mark of this hold: over a shorter window a
            // thread that just had its turn on a CPU looks like a spinner —
            // 40 computing threads on 2 processors started 39 spares.)
            // Past kStarvedSlices slices it is lost whatever its share: on
            // a machine loaded past its CPUs (a load average of 14 on 2) four
            // spinners waiting for a fifth thread queued behind them had
            // under a quarter each, and waited for good.
            lost_now = (cpu - w.cpu_mark) * 4 >= now - w.cpu_mark_at || held >= kStarvedSlices * slice;
          }
        }
      }
      if (!lost_now) {
        all_lost = false;
        return;
      }
      ++lost;
      if (!w.lost) {
        w.lost = true;
        p.lost_call.store(state == 'R' ? -1 : nr, std::memory_order_relaxed);
        p.lost.store(true, std::memory_order_relaxed);
        c.shared_counters.add_shared(state == 'R' ? Stat::lost_running : Stat::lost_blocked, 1);
      }
      if (waiting) ++needy;
    };
    for (std::size_t i = 0, n = c.size(); i < n; ++i) one(*c.processor(i));
    for (std::size_t i = 0, n = c.spare_count(); i < n; ++i)
      if (Processor* s = c.spare(i); !s->parked.load(std::memory_order_relaxed)) one(*s);
    c.set_lost(lost);
    if (lost) lost_seen_ = true;
    if (members && all_lost && pending()) ++needy;
    ClusterWatch& cw = clusters_[&c];
    if (needy) {
      cw.last_need = now;
      urgent = true;
      // Held processors that wait — in the kernel ('S'), or spinning on a
      // CPU past the slice — whether or not fibres are queued behind them
      // (OpenBLAS's three spinning workers on spares, the fourth queued
      // behind the first: it needs a third spare). Read only now.
      if (members - held_n < int(c.size()) && int(c.active_spares()) >= int(c.size()))
        for (const Held& h : held_) {
          long nr;
          char st = state_of(*h.p, &nr);
          if (waits_in_kernel(st) || (st == 'R' && h.held >= slice)) ++waits_n;
        }
      // One helper per look: a sleeper woken to steal; else a spare, while
      // fewer processors than the cluster's count are free — not held past
      // the bound by one fibre, lost or not (one blocked with nothing queued
      // behind it counts too) — a spare stands in for a lost processor, as
      // Go's thread for a P whose thread blocks. Beyond as many spares as
      // processors, only for processors waiting in the kernel: ones held on
      // a CPU (or in the kernel's own work) compete with a spare for the
      // CPUs — 10,000 connections at once on 2 processors, held by turns in
      // loom's own mapping and ring calls, started 18 spares, and the
      // accepting thread's share of the CPUs fell until the listen queue
      // overflowed. (A spare per look for as long as work waited on a
      // lost processor started all 64 under an echo test whose main fibre
      // waited in waitpid while its processor's connections streamed: the
      // spares were busy, not asleep, and the queue never stayed empty.)
      if (c.idle_processors() > 0 ? c.wake_one()
                                  : members - held_n < int(c.size()) &&
                                        int(c.active_spares()) < int(c.size()) + waits_n && c.activate_spare())
        c.shared_counters.add_shared(Stat::handoffs, 1);
    } else if (c.active_spares() && !lost && now - cw.last_need > kLingerNs) {
      c.retire_spares();
    }
    // A due timer that no sleeper keeps, with processors asleep: the keeping
    // passes by a wake (a keeper woken releases it and wakes a sleeper,
    // add_timer wakes one), and the processor woken may take other work
    // instead — a fibre that then holds it for good (a spinner in a raw
    // call) — while the others sleep on without a deadline. A sleeper
    // woken fires it (find_work) or becomes the keeper. (An outside review:
    // rounds of four threads in raw 20 µs nanosleeps on two processors,
    // main's own sleep never ended, 3 runs in 5.)
    if (!needy && c.idle_processors() > 0 && c.timers.pending() && c.timers.next() <= now && !c.timers_kept() &&
        c.wake_one())
      c.shared_counters.add_shared(Stat::handoffs, 1);
  }

  struct ClusterWatch {
    std::int64_t last_need = 0;
  };
  struct Held {
    Processor* p;
    std::int64_t held;
  };
  std::vector<Held> held_;  // this look's processors held past the bound
  bool lost_seen_ = false;  // this round of looks found a processor lost
  std::unordered_map<Processor*, Watch> watch_;
  std::unordered_map<Cluster*, ClusterWatch> clusters_;
};

void* monitor_main(void*) { Monitor().run(); }

}  // namespace

void monitor_start() {
  static std::atomic<bool> started{false};
  if (started.exchange(true)) return;
  if (!start_runtime_thread("loom-monitor", &monitor_main))
    std::fprintf(stderr, "loom: monitor: cannot start its thread; lost processors are not taken back\n");
}

}  // namespace loom::rt
