// apps/bench/lock_harness.hpp — the lock benchmark (thesis Algorithm 1, §4.5)
// as every C++ system runs it: loom, pthreads, Boost.Fiber. The Go peer
// (apps/baselines/lockbench-go/main.go) is a line-for-line translation.
//
//   T workers (threads or fibres) on C processors share L locks. Each loops:
//     work t_ncs;  pick a random lock;  lock;  work t_cs;  unlock;  count++
//
// What a program supplies is only how to start T workers on C processors and
// how to wait for them; the loop, the work, the measuring and the output are
// here, identical for every system:
//
//   work      a chain of 64-bit multiply-adds (an LCG) that the compiler can
//             neither vectorise nor fold; `iters` of it per call. Its speed
//             (iterations per µs) is calibrated once per benchmark run by the
//             driver (`--calibrate`, on CPU 1) and passed to every program as
//             --loop-per-us, so all C++ systems spin the same loop for the
//             same count. Go compiles the same chain to the same two
//             instructions; it is calibrated the same way, by its own binary.
//   window    a controller kernel thread (main, or a plain std::thread where
//             main must serve the runtime) sleeps --warmup, samples the
//             workers' counters, wall clock and getrusage(RUSAGE_SELF),
//             sleeps --duration, samples again, then raises the stop flag.
//             Only the window between the two samples is reported:
//             iterations_per_s = iterations / wall time, and
//             overhead_ns_per_iter = process CPU time / iterations
//                                    - (t_ncs + t_cs),
//             i.e. what the runtime (locking, scheduling, idle spinning)
//             burnt beyond the work itself. others_cpus: the CPU the rest
//             of the machine (other processes, interrupts charged to no
//             process, hypervisor steal) took meanwhile (/proc/stat), so
//             that a disturbed run can be recognised and repeated.
//   idle      with --idle S, after the workers have exited (the runtime still
//             up, its processors idle), the process CPU used over S seconds,
//             reported as idle_cpu_ms_per_s.
//
// Bad command lines: a message naming the program on stderr, exit 2.
#pragma once

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"

namespace lockbench {

// ---- the work loop -------------------------------------------------------------

// Keeps the CPU busy for `iters` steps of a dependent multiply-add chain
// (4 cycles a step on current x86: imul + add, no memory traffic). noinline
// so that every program runs this very code, whatever surrounds the call.
__attribute__((noinline)) inline std::uint64_t work(std::uint64_t iters, std::uint64_t x) {
  for (std::uint64_t i = 0; i < iters; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    asm volatile("" : "+r"(x));  // keep the chain: no closed form, no vectorising
  }
  return x;
}

inline std::uint64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ULL + std::uint64_t(ts.tv_nsec);
}

// Loop iterations per µs of this thread's CPU time: the median of 31 timed
// runs of ~2 ms each. The median rather than the fastest: on this shared
// machine the fastest run is 2-4 % quicker than the loop's typical speed
// inside a benchmark, which would show up as "overhead" in every system.
// What remains of that bias is measured by the driver's no-lock reference
// run (--no-locks) and shown beside the overheads.
//
// A 100 ms warm-up of the loop comes first: the first milliseconds of a
// process run slower here (the Go binary, calibrating 6 times in a row, gave
// 635, 743, then 797 ± 4 iterations/µs).
inline double calibrate() {
  std::uint64_t n = 1 << 12, x = 1;
  for (std::uint64_t t0 = thread_cpu_ns(); thread_cpu_ns() - t0 < 100000000;) x = work(n, x);
  for (;;) {  // size a run to at least 2 ms
    std::uint64_t t0 = thread_cpu_ns();
    x = work(n, x);
    if (thread_cpu_ns() - t0 >= 2000000) break;
    n *= 2;
  }
  std::vector<std::uint64_t> t;
  for (int i = 0; i < 31; ++i) {
    std::uint64_t t0 = thread_cpu_ns();
    x = work(n, x);
    t.push_back(thread_cpu_ns() - t0);
  }
  std::sort(t.begin(), t.end());
  if (x == 42) std::fputc(' ', stderr);  // keep x alive
  return double(n) / (double(t[t.size() / 2]) / 1000.0);
}

// ---- configuration -------------------------------------------------------------

struct Config {
  unsigned threads = 1;
  unsigned locks = 1;
  unsigned processors = 1;
  std::uint64_t t_cs_ns = 20000;
  std::uint64_t t_ncs_ns = 20000;
  double duration_s = 1.0;
  double warmup_s = 0.5;
  double idle_s = 0;
  double loop_per_us = 0;  // 0: calibrate here
  bool calibrate_only = false;
  bool no_locks = false;  // the work reference: the same loop without locking
  std::uint64_t seed = 1;
};

// A program's own flags: returns true when it consumed `flag` (reading its
// value from the walker).
using ExtraFlag = bool (*)(const char* prog, const std::string& flag, bench::ArgWalker& w);

inline void print_help(const char* prog, const char* system, const char* extra) {
  std::printf(
      "usage: %s --threads T --locks L --processors C [--t-cs NS] [--t-ncs NS]\n"
      "          [--duration S] [--warmup S] [--idle S] [--loop-per-us X] [--seed N]\n"
      "       %s --calibrate\n"
      "The lock benchmark (thesis Algorithm 1) on %s: T workers on C processors, each\n"
      "looping: work t_ncs, lock one of L locks at random, work t_cs, unlock.\n"
      "Prints one JSON object on stdout (bench \"lock\").\n"
      "  --threads T        workers (default 1)\n"
      "  --locks L          locks (default 1)\n"
      "  --processors C     processors / kernel threads running workers (default 1)\n"
      "  --t-cs NS          work inside the lock, ns (default 20000)\n"
      "  --t-ncs NS         work outside the lock, ns (default 20000)\n"
      "  --duration S       measured window, seconds (default 1)\n"
      "  --warmup S         running time before the window, seconds (default 0.5)\n"
      "  --idle S           after the workers exit, measure the CPU the idle runtime\n"
      "                     burns over S seconds (default 0: not measured)\n"
      "  --loop-per-us X    work-loop iterations per µs (default: calibrate here)\n"
      "  --seed N           seed of the workers' lock choices (default 1)\n"
      "  --no-locks         the work reference: the same loop, random choice included,\n"
      "                     but no lock taken (what the work itself costs here)\n"
      "  --calibrate        print {\"loop_iters_per_us\": X} for this CPU and exit\n",
      prog, prog, system);
  if (extra) std::printf("%s", extra);
}

inline unsigned parse_unsigned(const char* prog, const char* flag, const char* s, std::uint64_t max) {
  std::uint64_t v = bench::parse_count(prog, flag, s);
  if (v > max)
    bench::usage_error(prog,
                       std::string("bad value '") + s + "' for " + flag + " (at most " + std::to_string(max) + ")");
  return unsigned(v);
}

inline Config parse(const char* prog, const char* system, int argc, char** argv, ExtraFlag extra = nullptr,
                    const char* help_extra = nullptr) {
  Config c;
  bench::ArgWalker w(prog, argc, argv);
  while (const char* f = w.next()) {
    std::string flag = f;
    if (flag == "--help" || flag == "-h") {
      print_help(prog, system, help_extra);
      std::exit(0);
    } else if (flag == "--threads") {
      c.threads = parse_unsigned(prog, "--threads", w.value(), 100000);
    } else if (flag == "--locks") {
      c.locks = parse_unsigned(prog, "--locks", w.value(), 100000);
    } else if (flag == "--processors") {
      c.processors = parse_unsigned(prog, "--processors", w.value(), 1024);
    } else if (flag == "--t-cs") {
      c.t_cs_ns = parse_unsigned(prog, "--t-cs", w.value(), 100000000);
    } else if (flag == "--t-ncs") {
      c.t_ncs_ns = parse_unsigned(prog, "--t-ncs", w.value(), 100000000);
    } else if (flag == "--duration") {
      c.duration_s = bench::parse_seconds(prog, "--duration", w.value(), false);
    } else if (flag == "--warmup") {
      c.warmup_s = bench::parse_seconds(prog, "--warmup", w.value(), true);
    } else if (flag == "--idle") {
      c.idle_s = bench::parse_seconds(prog, "--idle", w.value(), true);
    } else if (flag == "--seed") {
      c.seed = bench::parse_count(prog, "--seed", w.value());
    } else if (flag == "--loop-per-us") {
      const char* s = w.value();
      char* end = nullptr;
      double v = (s && *s) ? std::strtod(s, &end) : -1;
      if (!s || !*s || *end != '\0' || !std::isfinite(v) || v <= 0 || v > 1e6)
        bench::usage_error(prog, std::string("bad value '") + s + "' for --loop-per-us (want a number above 0)");
      c.loop_per_us = v;
    } else if (flag == "--calibrate") {
      c.calibrate_only = true;
    } else if (flag == "--no-locks") {
      c.no_locks = true;
    } else if (!(extra && extra(prog, flag, w))) {
      bench::usage_error(prog, "unknown flag '" + flag + "'");
    }
  }
  if (c.calibrate_only) {
    std::printf("{\"loop_iters_per_us\":%s}\n", bench::json_number(calibrate()).c_str());
    std::exit(0);
  }
  return c;
}

// ---- the shared state and the loop ---------------------------------------------

struct alignas(64) Counter {
  std::atomic<std::uint64_t> n{0};
};

struct Shared {
  Shared(const Config& c, double loop_per_us)
      : cfg(c),
        cs_iters(std::uint64_t(double(c.t_cs_ns) * loop_per_us / 1000.0 + 0.5)),
        ncs_iters(std::uint64_t(double(c.t_ncs_ns) * loop_per_us / 1000.0 + 0.5)),
        counts(new Counter[c.threads]) {}
  const Config cfg;
  const std::uint64_t cs_iters;
  const std::uint64_t ncs_iters;
  std::unique_ptr<Counter[]> counts;  // one per worker, single writer
  alignas(64) std::atomic<bool> stop{false};
  alignas(64) std::atomic<std::uint64_t> sink{0};

  std::uint64_t total() const {
    std::uint64_t s = 0;
    for (unsigned i = 0; i < cfg.threads; ++i) s += counts[i].n.load(std::memory_order_relaxed);
    return s;
  }
};

// Worker `index`'s loop. Locks is anything indexable whose elements have
// lock() and unlock().
template <typename Locks>
void worker(Shared& s, Locks& locks, unsigned index) {
  // xorshift64*, seeded per worker: the lock sequence is the same for every
  // system given the same --seed.
  std::uint64_t r = (s.cfg.seed * 0x9E3779B97F4A7C15ULL) ^ (std::uint64_t(index + 1) * 0xD1B54A32D192ED03ULL);
  if (r == 0) r = 1;
  std::uint64_t x = index, count = 0;
  const unsigned nlocks = s.cfg.locks;
  const bool no_locks = s.cfg.no_locks;
  while (!s.stop.load(std::memory_order_relaxed)) {
    x = work(s.ncs_iters, x);
    r ^= r >> 12;
    r ^= r << 25;
    r ^= r >> 27;
    unsigned l = unsigned(((r * 0x2545F4914F6CDD1DULL) >> 32) % nlocks);
    if (no_locks) {
      x = work(s.cs_iters, x + l);
    } else {
      locks[l].lock();
      x = work(s.cs_iters, x);
      locks[l].unlock();
    }
    s.counts[index].n.store(++count, std::memory_order_relaxed);
  }
  s.sink.fetch_add(x, std::memory_order_relaxed);
}

// ---- measuring -------------------------------------------------------------------

inline std::uint64_t process_cpu_ns() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto ns = [](const timeval& tv) {
    return std::uint64_t(tv.tv_sec) * 1000000000ULL + std::uint64_t(tv.tv_usec) * 1000ULL;
  };
  return ns(ru.ru_utime) + ns(ru.ru_stime);
}

// The whole machine's busy time so far (/proc/stat: user, nice, system,
// irq, softirq, steal), in ns; 0 if unreadable. Set against this process's
// CPU over the window it tells how much CPU other processes took meanwhile:
// on this shared 2-CPU machine the one thing that can halve a figure.
inline std::uint64_t machine_busy_ns() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return 0;
  unsigned long long v[8] = {};
  int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                      &v[7]);
  std::fclose(f);
  if (n != 8) return 0;
  const unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];  // not idle (3), iowait (4)
  return std::uint64_t(busy * (1000000000ULL / std::uint64_t(sysconf(_SC_CLK_TCK))));
}

struct Window {
  std::uint64_t iterations = 0;
  std::uint64_t wall_ns = 0;
  std::uint64_t cpu_ns = 0;
  std::uint64_t machine_busy_ns = 0;  // all processes, all CPUs (/proc/stat)
  std::uint64_t vol_switches = 0;     // voluntary context switches (kernel), whole process
  std::uint64_t invol_switches = 0;   // involuntary ones (preempted)
};

inline void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::nanoseconds(std::int64_t(s * 1e9))); }

// The controller: warm-up, window, stop. Runs on a kernel thread that is not
// one of the workers' processors. `at_edge(0)` and `at_edge(1)` run right
// after the window's first and last sample (a program's own counters).
inline Window control(Shared& s, const std::function<void(int)>& at_edge = nullptr) {
  auto snap = [&s](Window& w, rusage& ru) {
    w.iterations = s.total();
    w.wall_ns = bench::now_ns();
    getrusage(RUSAGE_SELF, &ru);
    w.machine_busy_ns = machine_busy_ns();
  };
  auto ns = [](const timeval& tv) {
    return std::uint64_t(tv.tv_sec) * 1000000000ULL + std::uint64_t(tv.tv_usec) * 1000ULL;
  };
  sleep_s(s.cfg.warmup_s);
  Window a, b;
  rusage ra{}, rb{};
  snap(a, ra);
  if (at_edge) at_edge(0);
  sleep_s(s.cfg.duration_s);
  snap(b, rb);
  if (at_edge) at_edge(1);
  s.stop.store(true, std::memory_order_relaxed);
  Window w;
  w.iterations = b.iterations - a.iterations;
  w.wall_ns = b.wall_ns - a.wall_ns;
  w.cpu_ns = (ns(rb.ru_utime) + ns(rb.ru_stime)) - (ns(ra.ru_utime) + ns(ra.ru_stime));
  w.machine_busy_ns = a.machine_busy_ns && b.machine_busy_ns ? b.machine_busy_ns - a.machine_busy_ns : 0;
  w.vol_switches = std::uint64_t(rb.ru_nvcsw - ra.ru_nvcsw);
  w.invol_switches = std::uint64_t(rb.ru_nivcsw - ra.ru_nivcsw);
  return w;
}

// Process CPU burnt over `seconds` while the caller sleeps: ms of CPU per s.
inline double idle_cpu_ms_per_s(double seconds) {
  std::uint64_t c0 = process_cpu_ns(), t0 = bench::now_ns();
  sleep_s(seconds);
  std::uint64_t c1 = process_cpu_ns(), t1 = bench::now_ns();
  return double(c1 - c0) / 1e6 / (double(t1 - t0) / 1e9);
}

// The program's one output row.
inline bench::Json row(const char* system, const std::string& variant, const Shared& s, double loop_per_us,
                       const Window& w) {
  const Config& c = s.cfg;
  double iters = double(w.iterations);
  bench::Json j;
  j.add("bench", "lock")
      .add("system", system)
      .add("variant", variant)
      .add("threads", c.threads)
      .add("locks", c.locks)
      .add("processors", c.processors)
      .add("work_ns", std::uint64_t(c.t_ncs_ns))
      .add("t_cs_ns", std::uint64_t(c.t_cs_ns))
      .add("t_ncs_ns", std::uint64_t(c.t_ncs_ns))
      .add("iterations_per_s", iters / (double(w.wall_ns) / 1e9))
      .add("overhead_ns_per_iter", iters > 0 ? double(w.cpu_ns) / iters - double(c.t_cs_ns + c.t_ncs_ns) : std::nan(""))
      .add("cpu_ns_per_iter", iters > 0 ? double(w.cpu_ns) / iters : std::nan(""))
      .add("cpu_utilisation", double(w.cpu_ns) / double(w.wall_ns))
      .add("iterations", w.iterations)
      .add("window_s", double(w.wall_ns) / 1e9)
      .add("warmup_s", c.warmup_s)
      .raw("no_locks", c.no_locks ? "true" : "false")
      .add("kernel_switches_per_iter", iters > 0 ? double(w.vol_switches + w.invol_switches) / iters : std::nan(""))
      .add("involuntary_switches_per_iter", iters > 0 ? double(w.invol_switches) / iters : std::nan(""))
      // CPUs' worth of time other processes (and the hypervisor's steal) took
      // during the window; /proc/stat counts in ticks, so ~0.02 is noise.
      .add("others_cpus", w.machine_busy_ns
                              ? std::max(0.0, double(w.machine_busy_ns) - double(w.cpu_ns)) / double(w.wall_ns)
                              : std::nan(""))
      .add("loop_iters_per_us", loop_per_us)
      .add("cs_loop_iters", s.cs_iters)
      .add("ncs_loop_iters", s.ncs_iters)
      .add("cpus", bench::allowed_cpus())
      .add("max_rss_kib", bench::max_rss_kib());
  return j;
}

inline double loop_rate(const Config& c) { return c.loop_per_us > 0 ? c.loop_per_us : calibrate(); }

}  // namespace lockbench
