// queues_loom — the ready-queue experiment of thesis §4.2 (figure 4.1).
//
// Two clusters with P processors each and the same SchedConfig, whose
// `queue` (nemesis | locked | shared) is the variable. A cycle:
//   - for each cluster and each of its P processors, main creates one
//     spawner fibre there (push placement is round robin, so the P spawners
//     of a cluster start one per processor);
//   - each spawner creates N worker fibres in its own cluster (again round
//     robin over that cluster's processors) and joins them;
//   - each worker migrates to the other cluster and back, `--hops` times in
//     all (default 10: five round trips), then exits.
// The thesis had every processor create 1 million fibres; here N is 1000 by
// default, because all 2*P*N fibres are alive at once and each takes a stack
// (64 KiB and a guard mapping: vm.max_map_count is 65530 on our machines).
//
// migrations_per_s = 2*P*N*hops / wall time of the cycle, from the first
// spawner created to the last one joined: creating, starting and finishing
// the fibres is inside the time, as in the thesis's whole-run figure. A
// repeat runs whole cycles for --duration seconds; the figure is the median
// of the repeats. After every migration the worker checks that it is on the
// cluster it asked for; a mismatch is a runtime bug and ends the run (exit 1).
#include <sys/resource.h>
#include <sys/time.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness.hpp"
#include "loom/loom.hpp"
#include "loom_variant.hpp"

namespace {

const char* const kProg = "queues_loom";

struct Params {
  loom::SchedConfig config = loom::SchedConfig::from_env();
  std::uint64_t processors = 1;  // per cluster
  std::uint64_t fibres = 1000;   // per processor
  std::uint64_t hops = 10;       // migrations per fibre
  double duration_s = 1.0;       // per repeat
  double warmup_s = 1.0;
  unsigned repeats = 5;
};

void help() {
  std::printf(
      "usage: %s [--queue nemesis|locked|shared] [--processors P] [--fibres N] [--hops H]\n"
      "          [--duration S] [--warmup S] [--repeats R]\n"
      "Thesis §4.2: two clusters of P processors; per processor N fibres, each migrating between\n"
      "the clusters H times. Prints one JSON object: migrations_per_s = median of the repeats.\n"
      "  --queue Q        ready queue of both clusters (default: LOOM_QUEUE, else nemesis)\n"
      "  --processors P   processors per cluster (default 1, at most 64)\n"
      "  --fibres N       fibres per processor (default 1000)\n"
      "  --hops H         migrations per fibre (default 10)\n"
      "  --duration S     seconds of whole cycles per repeat (default 1)\n"
      "  --warmup S       seconds of cycles before measuring (default 1)\n"
      "  --repeats R      repeats (default 5)\n"
      "Other scheduler settings come from LOOM_* variables; a non-default setting is named in variant.\n",
      kProg);
}

Params parse(int argc, char** argv) {
  Params p;
  bench::ArgWalker w(kProg, argc, argv);
  while (const char* f = w.next()) {
    std::string flag = f;
    if (flag == "--help" || flag == "-h") {
      help();
      std::exit(0);
    } else if (flag == "--queue") {
      std::string q = w.value();
      if (q == "nemesis") p.config.queue = loom::QueueKind::nemesis;
      else if (q == "locked") p.config.queue = loom::QueueKind::locked;
      else if (q == "shared") p.config.queue = loom::QueueKind::shared;
      else bench::usage_error(kProg, "unknown queue '" + q + "' (nemesis, locked or shared)");
    } else if (flag == "--processors") {
      p.processors = bench::parse_count(kProg, "--processors", w.value());
      if (p.processors > 64) bench::usage_error(kProg, "bad value for --processors (at most 64)");
    } else if (flag == "--fibres") {
      p.fibres = bench::parse_count(kProg, "--fibres", w.value());
      if (p.fibres > 1000000) bench::usage_error(kProg, "bad value for --fibres (at most 1000000)");
    } else if (flag == "--hops") {
      p.hops = bench::parse_count(kProg, "--hops", w.value());
    } else if (flag == "--duration") {
      p.duration_s = bench::parse_seconds(kProg, "--duration", w.value(), false);
    } else if (flag == "--warmup") {
      p.warmup_s = bench::parse_seconds(kProg, "--warmup", w.value(), true);
    } else if (flag == "--repeats") {
      std::uint64_t r = bench::parse_count(kProg, "--repeats", w.value());
      if (r > 1000) bench::usage_error(kProg, "bad value for --repeats (at most 1000)");
      p.repeats = static_cast<unsigned>(r);
    } else {
      bench::usage_error(kProg, "unknown flag '" + flag + "'");
    }
  }
  return p;
}

std::uint64_t cpu_ns() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto ns = [](const timeval& tv) { return std::uint64_t(tv.tv_sec) * 1000000000u + std::uint64_t(tv.tv_usec) * 1000u; };
  return ns(ru.ru_utime) + ns(ru.ru_stime);
}

std::atomic<std::uint64_t> g_misplaced{0};

// See micro_loom.cpp: Fibres are made with an explicit const FibreAttr&.
const loom::FibreAttr kSameCluster{};

void worker(loom::Cluster* home, loom::Cluster* away, std::uint64_t hops) {
  for (std::uint64_t h = 0; h < hops; ++h) {
    loom::Cluster& to = (h % 2 == 0) ? *away : *home;
    loom::this_fibre::migrate(to);
    if (loom::Cluster::current().id() != to.id()) g_misplaced.fetch_add(1, std::memory_order_relaxed);
  }
}

void spawner(loom::Cluster* home, loom::Cluster* away, std::uint64_t n, std::uint64_t hops) {
  std::vector<loom::Fibre> workers;
  workers.reserve(n);
  for (std::uint64_t i = 0; i < n; ++i) workers.emplace_back(kSameCluster, worker, home, away, hops);
  for (loom::Fibre& f : workers) f.join();
}

// One cycle; returns its wall time in ns.
std::uint64_t cycle(loom::Cluster& a, loom::Cluster& b, const Params& p) {
  std::uint64_t t0 = bench::now_ns();
  std::vector<loom::Fibre> spawners;
  spawners.reserve(2 * p.processors);
  for (loom::Cluster* home : {&a, &b}) {
    loom::Cluster* away = home == &a ? &b : &a;
    loom::FibreAttr attr;
    attr.cluster = home;
    const loom::FibreAttr& cattr = attr;
    for (std::uint64_t i = 0; i < p.processors; ++i) spawners.emplace_back(cattr, spawner, home, away, p.fibres, p.hops);
  }
  for (loom::Fibre& f : spawners) f.join();
  std::uint64_t t = bench::now_ns() - t0;
  if (std::uint64_t bad = g_misplaced.load()) {
    std::fprintf(stderr, "%s: %llu migrations ended on a cluster other than the one asked for (queue=%s, P=%llu)\n",
                 kProg, static_cast<unsigned long long>(bad), loom::to_string(p.config.queue),
                 static_cast<unsigned long long>(p.processors));
    std::exit(1);
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const Params p = parse(argc, argv);
  const std::uint64_t per_cycle = 2 * p.processors * p.fibres * p.hops;

  loom::Cluster a(p.processors, p.config), b(p.processors, p.config);

  std::uint64_t warm_start = bench::now_ns();
  while (bench::now_ns() - warm_start < p.warmup_s * 1e9) cycle(a, b, p);
  double warmup_s = (bench::now_ns() - warm_start) / 1e9;

  std::vector<double> rates, cpu_per_mig;
  std::uint64_t cycles_total = 0;
  for (unsigned r = 0; r < p.repeats; ++r) {
    std::uint64_t wall = 0, cycles = 0, c0 = cpu_ns();
    do {
      wall += cycle(a, b, p);
      ++cycles;
    } while (wall < p.duration_s * 1e9);
    std::uint64_t cpu = cpu_ns() - c0;
    rates.push_back(double(cycles * per_cycle) / (wall / 1e9));
    cpu_per_mig.push_back(double(cpu) / double(cycles * per_cycle));
    cycles_total += cycles;
  }

  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  bench::Json j;
  j.add("bench", "queues")
      .add("system", "loom")
      .add("variant", bench::loom_variant(p.config))
      .add("queue", loom::to_string(p.config.queue))
      .add("processors", p.processors)
      .add("clusters", 2u)
      .add("fibres_per_processor", p.fibres)
      .add("hops", p.hops)
      .add("migrations_per_cycle", per_cycle)
      .add("migrations_per_s", bench::median(rates))
      .add("samples_per_s", rates)
      .add("cpu_ns_per_migration", bench::median(cpu_per_mig))
      .add("cycles", cycles_total)
      .add("repeats", p.repeats)
      .add("warmup_s", warmup_s)
      .add("max_rss_kib", std::uint64_t(ru.ru_maxrss))
      .add("cpus", bench::allowed_cpus())
      .add("config", p.config.describe())
      .print();
  return 0;
}
