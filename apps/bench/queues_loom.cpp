// queues_loom — the ready-queue experiment of thesis §4.2 (figure 4.1).
//
// Two clusters with P processors each and the same SchedConfig, whose
// `queue` (nemesis | locked | shared) is the variable. One timed run:
//   - for each cluster and each of its P processors, main creates one
//     spawner fibre there (push placement is round robin, so the P spawners
//     of a cluster start one per processor);
//   - each spawner, `waves` times: creates N worker fibres in its own
//     cluster (placed round robin over its processors) and joins them;
//   - each worker migrates to the other cluster and back, `--hops` times in
//     all (default 10, as in the thesis: five round trips), then exits.
// So every processor creates N fibres per wave, 2*P*N are alive at once, and
// a wave is 2*P*N*hops migrations. The thesis had every processor create 1
// million fibres; with all of a wave's fibres alive at once, that many 64 KiB
// stacks (each a mapping plus a guard page) would exceed vm.max_map_count
// (65530) here, so N is a flag (default 1000) and a run is repeated waves.
//
// migrations_per_s = migrations / wall time from the first spawner created
// to the last one joined, so creating, starting and ending the fibres is
// inside the time, as in the thesis's whole-run figure. Waves per run are
// sized from the warm-up to --duration seconds (harness.hpp), and the figure
// is the median of --repeats runs. After every migration the worker checks
// that it is on the cluster it asked for; a mismatch is a runtime bug and
// ends the program (exit 1).
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
  bench::Options run;            // waves per run (iterations), duration, warm-up, repeats
};

void help() {
  std::printf(
      "usage: %s [--queue nemesis|locked|shared] [--processors P] [--fibres N] [--hops H]\n"
      "          [--waves W | --duration S] [--warmup S] [--repeats R]\n"
      "Thesis §4.2: two clusters of P processors; per processor N fibres, each migrating between\n"
      "the clusters H times. Prints one JSON object: migrations_per_s = median of the repeats.\n"
      "  --queue Q        ready queue of both clusters (default: LOOM_QUEUE, else nemesis)\n"
      "  --processors P   processors per cluster (default 1, at most 64)\n"
      "  --fibres N       fibres per processor (default 1000)\n"
      "  --hops H         migrations per fibre (default 10)\n"
      "  --waves W        waves per run: each spawner creates and joins N fibres W times\n"
      "                   (default: sized from the warm-up to --duration)\n"
      "  --duration S     target seconds per run (default 1)\n"
      "  --warmup S       seconds of waves before measuring (default 1)\n"
      "  --repeats R      runs; the figure is their median (default 5)\n"
      "Other scheduler settings come from LOOM_* variables; a non-default setting is named in variant.\n",
      kProg);
}

Params parse(int argc, char** argv) {
  Params p;
  p.run.duration_s = 1.0;
  bench::ArgWalker w(kProg, argc, argv);
  while (const char* f = w.next()) {
    std::string flag = f;
    if (flag == "--help" || flag == "-h") {
      help();
      std::exit(0);
    } else if (flag == "--queue") {
      std::string q = w.value();
      if (q == "nemesis")
        p.config.queue = loom::QueueKind::nemesis;
      else if (q == "locked")
        p.config.queue = loom::QueueKind::locked;
      else if (q == "shared")
        p.config.queue = loom::QueueKind::shared;
      else
        bench::usage_error(kProg, "unknown queue '" + q + "' (nemesis, locked or shared)");
    } else if (flag == "--processors") {
      p.processors = bench::parse_count(kProg, "--processors", w.value());
      if (p.processors > 64) bench::usage_error(kProg, "bad value for --processors (at most 64)");
    } else if (flag == "--fibres") {
      p.fibres = bench::parse_count(kProg, "--fibres", w.value());
      if (p.fibres > 1000000) bench::usage_error(kProg, "bad value for --fibres (at most 1000000)");
    } else if (flag == "--hops") {
      p.hops = bench::parse_count(kProg, "--hops", w.value());
    } else if (flag == "--waves") {
      p.run.iterations = bench::parse_count(kProg, "--waves", w.value());
    } else if (flag == "--duration") {
      p.run.duration_s = bench::parse_seconds(kProg, "--duration", w.value(), false);
    } else if (flag == "--warmup") {
      p.run.warmup_s = bench::parse_seconds(kProg, "--warmup", w.value(), true);
    } else if (flag == "--repeats") {
      std::uint64_t r = bench::parse_count(kProg, "--repeats", w.value());
      if (r > 1000) bench::usage_error(kProg, "bad value for --repeats (at most 1000)");
      p.run.repeats = static_cast<unsigned>(r);
    } else {
      bench::usage_error(kProg, "unknown flag '" + flag + "'");
    }
  }
  return p;
}

std::uint64_t cpu_ns() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto ns = [](const timeval& tv) {
    return std::uint64_t(tv.tv_sec) * 1000000000u + std::uint64_t(tv.tv_usec) * 1000u;
  };
  return ns(ru.ru_utime) + ns(ru.ru_stime);
}

std::atomic<std::uint64_t> g_misplaced{0};

void worker(loom::Cluster* home, loom::Cluster* away, std::uint64_t hops) {
  for (std::uint64_t h = 0; h < hops; ++h) {
    loom::Cluster& to = (h % 2 == 0) ? *away : *home;
    loom::this_fibre::migrate(to);
    if (loom::Cluster::current().id() != to.id()) g_misplaced.fetch_add(1, std::memory_order_relaxed);
  }
}

void spawner(loom::Cluster* home, loom::Cluster* away, std::uint64_t waves, std::uint64_t n, std::uint64_t hops) {
  std::vector<loom::Fibre> workers;
  workers.reserve(n);
  for (std::uint64_t w = 0; w < waves; ++w) {
    for (std::uint64_t i = 0; i < n; ++i) workers.emplace_back(worker, home, away, hops);
    for (loom::Fibre& f : workers) f.join();
    workers.clear();
  }
}

// One timed run of `waves` waves; returns its wall time in ns.
double run(loom::Cluster& a, loom::Cluster& b, const Params& p, std::uint64_t waves) {
  std::uint64_t t0 = bench::now_ns();
  std::vector<loom::Fibre> spawners;
  spawners.reserve(2 * p.processors);
  for (loom::Cluster* home : {&a, &b}) {
    loom::Cluster* away = home == &a ? &b : &a;
    loom::FibreAttr attr;
    attr.cluster = home;
    for (std::uint64_t i = 0; i < p.processors; ++i)
      spawners.emplace_back(attr, spawner, home, away, waves, p.fibres, p.hops);
  }
  for (loom::Fibre& f : spawners) f.join();
  std::uint64_t t = bench::now_ns() - t0;
  if (std::uint64_t bad = g_misplaced.load()) {
    std::fprintf(stderr, "%s: %llu migrations ended on a cluster other than the one asked for (queue=%s, P=%llu)\n",
                 kProg, static_cast<unsigned long long>(bad), loom::to_string(p.config.queue),
                 static_cast<unsigned long long>(p.processors));
    std::exit(1);
  }
  return double(t);
}

}  // namespace

int main(int argc, char** argv) {
  const Params p = parse(argc, argv);
  const std::uint64_t per_wave = 2 * p.processors * p.fibres * p.hops;

  loom::Cluster a(p.processors, p.config), b(p.processors, p.config);

  std::vector<double> cpu_per_migration;
  std::uint64_t measured_waves = 0, all_waves = 0;
  const loom::ClusterStats sa = a.stats(), sb = b.stats();
  bench::Measurement m = bench::measure(p.run, [&](std::uint64_t waves) {
    std::uint64_t c0 = cpu_ns();
    double ns = run(a, b, p, waves);
    cpu_per_migration.push_back(double(cpu_ns() - c0) / double(waves * per_wave));
    measured_waves = waves;
    all_waves += waves;
    return ns;
  });
  // Scheduler counters of both clusters over every wave (warm-up included),
  // per migration: they say whether processors were busy or sleeping.
  const loom::ClusterStats ea = a.stats(), eb = b.stats();
  const double migrations = double(all_waves * per_wave);
  auto per_migration = [&](std::uint64_t loom::ClusterStats::*field) {
    return double((ea.*field - sa.*field) + (eb.*field - sb.*field)) / migrations;
  };
  // The last `repeats` entries are the measured runs (the rest were warm-up).
  std::vector<double> cpu(cpu_per_migration.end() - p.run.repeats, cpu_per_migration.end());
  std::vector<double> rates;
  for (double ns_per_wave : m.samples) rates.push_back(per_wave / ns_per_wave * 1e9);

  bench::Json j;
  j.add("bench", "queues")
      .add("system", "loom")
      .add("variant", bench::loom_variant(p.config))
      .add("queue", loom::to_string(p.config.queue))
      .add("processors", p.processors)
      .add("clusters", 2u)
      .add("fibres_per_processor", p.fibres)
      .add("hops", p.hops)
      .add("migrations_per_wave", per_wave)
      .add("waves", measured_waves)
      .add("migrations_per_s", bench::median(rates))
      .add("samples_per_s", rates)
      .add("cpu_ns_per_migration", bench::median(cpu))
      .add("repeats", p.run.repeats)
      .add("warmup_s", m.warmup_s)
      .add("max_rss_kib", bench::max_rss_kib())
      .add("cpus", bench::allowed_cpus())
      .add("sleeps_per_migration", per_migration(&loom::ClusterStats::sleeps))
      .add("wakes_per_migration", per_migration(&loom::ClusterStats::wakes))
      .add("steals_per_migration", per_migration(&loom::ClusterStats::steals))
      .add("config", p.config.describe())
      .print();
  return 0;
}
