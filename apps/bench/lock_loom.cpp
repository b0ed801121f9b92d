// lock_loom — the lock benchmark (lock_harness.hpp) on loom: T fibres on a
// loom::Cluster of C processors, L loom::Mutex of one policy.
//
//   --policy blocking|spin|baton|hybrid   the mutexes' MutexPolicy (default:
//       loom::default_mutex_policy(), i.e. LOOM_MUTEX or blocking).
//   --spin-us N   the cluster's SchedConfig::spin_us (default: LOOM_SPIN_US,
//       else 20): how long an idle processor looks for work before it sleeps.
//   --steal-fence lock|membarrier   the cluster's SchedConfig::steal_fence
//       (default: LOOM_STEAL_FENCE, else lock); a row's variant says
//       "fence=membarrier" when it is not the default. The row's
//       variant is "policy=X" unless X is blocking, the default, whose
//       variant is "" — plus any non-default LOOM_* scheduler setting
//       (loom_variant.hpp), so a variable left set in the shell shows.
//
// The workers' cluster is made here, as micro_loom does, so that its size is
// --processors whatever the affinity mask; the default cluster (main's) runs
// no fibres: main is the controller, asleep in the kernel but for samples,
// and its processors are idle, so their CPU (goal: none) is in the figures.
// Besides the harness's row, the cluster's counters over the window:
// sleeps, wakes and steals per iteration.
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "lock_harness.hpp"
#include "loom/loom.hpp"
#include "loom_variant.hpp"

namespace {

loom::MutexPolicy g_policy = loom::MutexPolicy::blocking;
std::optional<loom::StealFence> g_fence;  // --steal-fence, else LOOM_STEAL_FENCE
std::optional<unsigned> g_spin_us;         // --spin-us, else LOOM_SPIN_US

struct alignas(64) LMutex {
  LMutex() : m(g_policy) {}
  loom::Mutex m;
  void lock() { m.lock(); }
  void unlock() { m.unlock(); }
};

bool extra_flag(const char* prog, const std::string& flag, bench::ArgWalker& w) {
  if (flag == "--steal-fence") {
    std::string v = w.value();
    loom::StealFence f;
    if (!bench::parse_steal_fence(v, &f))
      bench::usage_error(prog, "bad value '" + v + "' for --steal-fence (want lock or membarrier)");
    g_fence = f;
    return true;
  }
  if (flag == "--spin-us") {
    std::string v = w.value();
    char* end = nullptr;
    unsigned long n = std::strtoul(v.c_str(), &end, 10);
    if (v.empty() || *end || n > 1'000'000)
      bench::usage_error(prog, "bad value '" + v + "' for --spin-us (want 0 to 1000000)");
    g_spin_us = unsigned(n);
    return true;
  }
  if (flag != "--policy") return false;
  std::string v = w.value();
  if (v == "blocking")
    g_policy = loom::MutexPolicy::blocking;
  else if (v == "spin")
    g_policy = loom::MutexPolicy::spin;
  else if (v == "baton")
    g_policy = loom::MutexPolicy::baton;
  else if (v == "hybrid")
    g_policy = loom::MutexPolicy::hybrid;
  else
    bench::usage_error(prog, "bad value '" + v + "' for --policy (want blocking, spin, baton or hybrid)");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  g_policy = loom::default_mutex_policy();
  lockbench::Config c =
      lockbench::parse("lock_loom", "loom (loom::Mutex, fibres on a loom::Cluster)", argc, argv, extra_flag,
                       "  --policy P         blocking, spin, baton or hybrid (default: LOOM_MUTEX, else blocking)\n"
                       "  --steal-fence F    lock or membarrier (default: LOOM_STEAL_FENCE, else lock)\n"
                       "  --spin-us N        idle spin before sleeping, µs (default: LOOM_SPIN_US, else 20)\n"
                       "The scheduler configuration comes from LOOM_* variables (loom/config.hpp).\n");
  const double rate = lockbench::loop_rate(c);
  loom::SchedConfig config = loom::SchedConfig::from_env();
  if (g_fence) config.steal_fence = *g_fence;
  if (g_spin_us) config.spin_us = *g_spin_us;
  std::string variant = bench::loom_variant(config);
  if (g_policy != loom::MutexPolicy::blocking)
    variant = std::string("policy=") + loom::to_string(g_policy) + (variant.empty() ? "" : " ") + variant;

  lockbench::Shared s(c, rate);
  std::unique_ptr<LMutex[]> locks(new LMutex[c.locks]);
  lockbench::Window w;
  loom::ClusterStats st0{}, st1{};
  double idle = 0;
  {
    loom::Cluster cluster(c.processors, config);
    loom::FibreAttr attr;
    attr.cluster = &cluster;
    std::vector<loom::Fibre> fibres;
    fibres.reserve(c.threads);
    for (unsigned i = 0; i < c.threads; ++i)
      fibres.emplace_back(attr, [&s, &locks, i] { lockbench::worker(s, locks, i); });
    w = lockbench::control(s, [&](int edge) { (edge == 0 ? st0 : st1) = cluster.stats(); });
    for (auto& f : fibres) f.join();
    // The workers are gone, the cluster is up and idle.
    if (c.idle_s > 0) idle = lockbench::idle_cpu_ms_per_s(c.idle_s);
  }

  bench::Json j = lockbench::row("loom", variant, s, rate, w);
  const double iters = double(w.iterations);
  j.add("policy", loom::to_string(g_policy))
      .add("mutex", "loom::Mutex")
      .add("config", config.describe())
      .add("sleeps_per_iter", iters > 0 ? double(st1.sleeps - st0.sleeps) / iters : std::nan(""))
      .add("wakes_per_iter", iters > 0 ? double(st1.wakes - st0.wakes) / iters : std::nan(""))
      .add("steals_per_iter", iters > 0 ? double(st1.steals - st0.steals) / iters : std::nan(""));
  if (c.idle_s > 0) j.add("idle_cpu_ms_per_s", idle);
  j.print();
  return 0;
}
