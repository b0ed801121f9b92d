// lock_trace_loom — why a round of the lock benchmark is slow: the goal
// point of lock_loom (T fibres, one loom::Mutex, 2 processors, t_cs = t_ncs
// = 20 µs by default) with every critical section of a 1 s window logged
// (TSC at acquire and release, the kernel thread, the fibre), then:
//
//   alternation   how often the next critical section ran on the other
//                 kernel thread (a good round keeps both busy: ~0.95);
//   barging       how often the unlocker took the lock again itself: the
//                 waiter it woke had not run within the unlocker's 20 µs
//                 of non-critical work;
//   gaps          release → next acquire, split by same / other thread;
//   CPU per iteration and the cluster's sleeps and steals per iteration.
//
//   lock_trace_loom [--threads T] [--processors C] [--steal-fence membarrier|lock]
//                   [--work-us W] [--rounds R]
//
// Prints one line per round (a new cluster and new fibres each), for the
// diagnosis in docs/BENCHMARKS.md; not part of scripts/bench.
#include <x86intrin.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "lock_harness.hpp"
#include "loom/loom.hpp"
#include "loom_variant.hpp"

namespace {

struct Event {
  std::uint64_t acquired, released;
  int thread, fibre;
};

std::atomic<int> next_thread{0};
thread_local int my_thread = -1;
int thread_index() {
  if (my_thread < 0) my_thread = next_thread.fetch_add(1);
  return my_thread;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "lock_trace_loom: %s\nusage: lock_trace_loom [--threads T] [--processors C] "
               "[--steal-fence membarrier|lock] [--work-us W] [--rounds R]\n",
               why);
  std::exit(2);
}

unsigned number(const char* flag, const char* v, unsigned lo, unsigned hi) {
  char* end = nullptr;
  unsigned long x = v ? std::strtoul(v, &end, 10) : 0;
  if (!v || *end || *v == '-' || x < lo || x > hi)
    usage((std::string("bad value for ") + flag + " (want " + std::to_string(lo) + ".." + std::to_string(hi) + ")").c_str());
  return unsigned(x);
}

double us_of(const timeval& t) { return double(t.tv_sec) * 1e6 + double(t.tv_usec); }

void summary(std::vector<double> v, const char* name) {
  if (v.empty()) return (void)std::printf("  %s: none\n", name);
  std::sort(v.begin(), v.end());
  double s = 0;
  for (double x : v) s += x;
  std::printf("  %s: n=%zu mean=%.2f median=%.2f p90=%.2f µs\n", name, v.size(), s / double(v.size()), v[v.size() / 2],
              v[v.size() * 9 / 10]);
}

}  // namespace

int main(int argc, char** argv) {
  unsigned threads = 1024, processors = 2, work_us = 20, rounds = 1;
  loom::SchedConfig config = loom::SchedConfig::from_env();
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    const char* v = i + 1 < argc ? argv[++i] : nullptr;
    if (f == "--threads")
      threads = number("--threads", v, 2, 1 << 16);
    else if (f == "--processors")
      processors = number("--processors", v, 1, 256);
    else if (f == "--work-us")
      work_us = number("--work-us", v, 1, 100000);
    else if (f == "--rounds")
      rounds = number("--rounds", v, 1, 1000);
    else if (f == "--steal-fence" && v && bench::parse_steal_fence(v, &config.steal_fence))
      ;
    else
      usage(("bad argument '" + f + "'").c_str());
  }
  const double rate = lockbench::calibrate();
  const std::uint64_t iters = std::uint64_t(work_us * rate);
  std::uint64_t t0 = __rdtsc();
  usleep(100000);
  const double tsc_per_us = double(__rdtsc() - t0) / 1e5;

  for (unsigned round = 0; round < rounds; ++round) {
    std::vector<Event> log(400000);
    std::size_t n = 0;  // written by the lock holder only
    std::atomic<bool> stop{false}, recording{false};
    loom::Mutex m;
    loom::ClusterStats st0{}, st1{};
    rusage r0{}, r1{};
    {
      loom::Cluster cluster(processors, config);
      loom::FibreAttr attr;
      attr.cluster = &cluster;
      std::vector<loom::Fibre> fibres;
      fibres.reserve(threads);
      for (unsigned i = 0; i < threads; ++i)
        fibres.emplace_back(attr, [&, i] {
          std::uint64_t x = i;
          while (!stop.load(std::memory_order_relaxed)) {
            x = lockbench::work(iters, x);
            m.lock();
            std::uint64_t a = __rdtsc();
            int t = thread_index();
            x = lockbench::work(iters, x);
            if (recording.load(std::memory_order_relaxed) && n < log.size()) log[n++] = Event{a, __rdtsc(), t, int(i)};
            m.unlock();
          }
          if (x == 42) std::fputc(' ', stderr);
        });
      usleep(300000);
      st0 = cluster.stats();
      getrusage(RUSAGE_SELF, &r0);
      recording = true;
      usleep(1000000);
      recording = false;
      st1 = cluster.stats();
      getrusage(RUSAGE_SELF, &r1);
      stop = true;
      for (auto& f : fibres) f.join();
    }
    if (n < 2) {
      std::printf("round %u: fewer than 2 critical sections\n", round);
      continue;
    }
    const double cpu = us_of(r1.ru_utime) + us_of(r1.ru_stime) - us_of(r0.ru_utime) - us_of(r0.ru_stime);
    std::size_t other = 0, barged = 0;
    std::vector<double> gap_other, gap_same;
    for (std::size_t k = 1; k < n; ++k) {
      double gap = double(std::int64_t(log[k].acquired - log[k - 1].released)) / tsc_per_us;
      (log[k].thread != log[k - 1].thread ? gap_other : gap_same).push_back(gap);
      other += log[k].thread != log[k - 1].thread;
      barged += log[k].fibre == log[k - 1].fibre;
    }
    const double d = double(n);
    std::printf("round %u: %s  iterations %zu  CPU/iteration %.2f µs  alternation %.3f  barging %.3f  "
                "sleeps/it %.4f  steals/it %.3f\n",
                round, (std::string("fence=") + loom::to_string(config.steal_fence)).c_str(), n, cpu / d,
                double(other) / (d - 1), double(barged) / (d - 1), double(st1.sleeps - st0.sleeps) / d,
                double(st1.steals - st0.steals) / d);
    summary(gap_other, "gap to the next critical section, other thread");
    summary(gap_same, "gap to the next critical section, same thread");
  }
  return 0;
}
