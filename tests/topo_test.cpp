// runtime/topo: distance ranks and victim order on synthetic machines (so the
// expectations hold on any host), the real machine, LOOM_TOPOLOGY (in a child
// process: machine() is built once per process), and pinning.
#include "topo/topo.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "color/color.hpp"
#include "loom/color.hpp"
#include "loom/loom.hpp"
#include "sched/cluster.hpp"
#include "sched/processor.hpp"
#include "sched/steal_policy.hpp"
#include "test_util.hpp"

namespace {

namespace topo = loom::rt::topo;
using topo::Topology;

void expect_symmetric(const Topology& t) {
  for (unsigned a = 0; a < t.pus(); ++a) {
    EXPECT_EQ(t.distance(a, a), 0u) << a;
    for (unsigned b = 0; b < t.pus(); ++b) {
      EXPECT_EQ(t.distance(a, b), t.distance(b, a)) << a << "," << b;
      if (a != b) {
        EXPECT_GT(t.distance(a, b), 0u) << a << "," << b;
      }
      EXPECT_LE(t.distance(a, b), t.max_distance());
    }
  }
}

std::vector<unsigned> ordered_from(const Topology& t, unsigned from, std::vector<unsigned> pus) {
  t.order_by_distance(from, pus.data(), pus.size());
  return pus;
}

// ---- synthetic machines --------------------------------------------------------

TEST(Topo, TwoPackagesOfTwoL3) {
  Topology t = topo::from_synthetic("pack:2 l3:2 core:4 pu:1");
  ASSERT_EQ(t.pus(), 16u);
  EXPECT_TRUE(t.synthetic);
  for (unsigned i = 0; i < 16; ++i) EXPECT_EQ(t.pu_os[i], int(i));
  // No SMT and no per-core cache: the ranks are PU, L3, package, machine.
  EXPECT_EQ(t.level_names(), (std::vector<std::string>{"PU", "L3", "package", "machine"}));
  EXPECT_EQ(t.max_distance(), 3u);
  for (unsigned b = 0; b < 16; ++b) EXPECT_EQ(t.distance(0, b), b == 0 ? 0u : b < 4 ? 1u : b < 8 ? 2u : 3u) << b;
  EXPECT_EQ(t.distance(5, 6), 1u);
  EXPECT_EQ(t.distance(5, 9), 3u);
  EXPECT_EQ(t.distance(9, 14), 2u);
  expect_symmetric(t);
  EXPECT_EQ(t.cache_domains(), 4u);
  EXPECT_EQ(t.describe(), "2 packages, 4 L3, 16 cores, 16 PUs (synthetic)");
}

TEST(Topo, VictimOrderFromPu0IsSameL3ThenSamePackageThenTheOtherPackage) {
  Topology t = topo::from_synthetic("pack:2 l3:2 core:4 pu:1");
  // Candidates arrive longest busy first; equals keep that order.
  std::vector<unsigned> busy{15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  EXPECT_EQ(ordered_from(t, 0, busy), (std::vector<unsigned>{3, 2, 1, 7, 6, 5, 4, 15, 14, 13, 12, 11, 10, 9, 8}));
  std::vector<unsigned> mixed{8, 4, 1, 12, 5, 2, 9, 3};
  EXPECT_EQ(ordered_from(t, 0, mixed), (std::vector<unsigned>{1, 2, 3, 4, 5, 8, 12, 9}));
  EXPECT_EQ(ordered_from(t, 13, mixed), (std::vector<unsigned>{12, 8, 9, 4, 1, 5, 2, 3}));
  EXPECT_EQ(ordered_from(t, 0, {}), std::vector<unsigned>{});
  EXPECT_EQ(ordered_from(t, 0, {7}), std::vector<unsigned>{7});
}

TEST(Topo, SmtSiblingsAreNearest) {
  Topology t = topo::from_synthetic("pack:1 core:2 pu:2");
  ASSERT_EQ(t.pus(), 4u);
  EXPECT_EQ(t.level_names(), (std::vector<std::string>{"PU", "core", "package"}));
  EXPECT_EQ(t.distance(0, 1), 1u);
  EXPECT_EQ(t.distance(2, 3), 1u);
  EXPECT_EQ(t.distance(0, 2), 2u);
  EXPECT_EQ(t.distance(1, 3), 2u);
  expect_symmetric(t);
  EXPECT_EQ(t.cache_domains(), 1u);  // no caches: one group of cores, the package
  EXPECT_EQ(t.describe(), "1 package, 2 cores, 4 PUs (synthetic)");
  EXPECT_EQ(ordered_from(t, 2, {0, 1, 3}), (std::vector<unsigned>{3, 0, 1}));
}

TEST(Topo, CacheLevelsEachGetARank) {
  // SMT pairs under a private L2, pairs of cores under an L3.
  Topology t = topo::from_synthetic("pack:2 l3:2 l2:2 core:1 pu:2");
  ASSERT_EQ(t.pus(), 16u);
  EXPECT_EQ(t.level_names(), (std::vector<std::string>{"PU", "core", "L3", "package", "machine"}));
  EXPECT_EQ(t.distance(0, 1), 1u);
  EXPECT_EQ(t.distance(0, 2), 2u);
  EXPECT_EQ(t.distance(0, 4), 3u);
  EXPECT_EQ(t.distance(0, 8), 4u);
  EXPECT_EQ(t.cache_domains(), 4u);
  expect_symmetric(t);
}

TEST(Topo, NumaNodesPerPackage) {
  Topology t = topo::from_synthetic("numa:2 pack:1 l3:1 core:2 pu:1");
  ASSERT_EQ(t.pus(), 4u);
  EXPECT_EQ(t.level_names(), (std::vector<std::string>{"PU", "L3", "machine"}));
  EXPECT_EQ(t.distance(0, 1), 1u);
  EXPECT_EQ(t.distance(0, 2), 2u);
  EXPECT_EQ(t.cache_domains(), 2u);
  EXPECT_EQ(t.describe(), "2 packages, 2 NUMA nodes, 2 L3, 4 cores, 4 PUs (synthetic)");
}

TEST(Topo, NumaDistanceMatrixOrdersFarNodes) {
  // hwloc 2's synthetic syntax has no distances: from_synthetic adds the
  // matrix through hwloc's distances API, and build() reads it back with
  // hwloc_distances_get_by_type like a real machine's.
  // Nodes 0-1 and 2-3 are pairs (20); across pairs 30, except 0-3 at 40.
  std::vector<std::uint64_t> d{10, 20, 30, 40,  //
                               20, 10, 30, 30,  //
                               30, 30, 10, 20,  //
                               40, 30, 20, 10};
  Topology t = topo::from_synthetic("pack:4 [numa] l3:1 core:2 pu:1", d);
  ASSERT_EQ(t.pus(), 8u);
  EXPECT_EQ(t.level_names(), (std::vector<std::string>{"PU", "L3", "machine (NUMA distance 20)",
                                                       "machine (NUMA distance 30)", "machine (NUMA distance 40)"}));
  EXPECT_EQ(t.distance(0, 1), 1u);  // same L3
  EXPECT_EQ(t.distance(0, 2), 2u);  // node 1
  EXPECT_EQ(t.distance(0, 4), 3u);  // node 2
  EXPECT_EQ(t.distance(0, 6), 4u);  // node 3
  EXPECT_EQ(t.distance(2, 6), 3u);
  EXPECT_EQ(t.distance(4, 6), 2u);
  expect_symmetric(t);
  EXPECT_EQ(ordered_from(t, 0, {7, 6, 5, 4, 3, 2, 1}), (std::vector<unsigned>{1, 3, 2, 5, 4, 7, 6}));

  // Without the matrix the four nodes are equally far.
  Topology flat_numa = topo::from_synthetic("pack:4 [numa] l3:1 core:2 pu:1");
  EXPECT_EQ(flat_numa.distance(0, 2), flat_numa.distance(0, 6));
  EXPECT_THROW(topo::from_synthetic("pack:4 [numa] l3:1 core:2 pu:1", {10, 20, 20, 10}), std::invalid_argument);
}

TEST(Topo, RefusedDescriptionThrows) {
  EXPECT_THROW(topo::from_synthetic("bogus:3"), std::invalid_argument);
  EXPECT_THROW(topo::from_synthetic("pack:2 core:0"), std::invalid_argument);
}

TEST(Topo, FlatFallback) {
  Topology t = topo::flat(3);
  ASSERT_EQ(t.pus(), 3u);
  EXPECT_EQ(t.distance(0, 2), 1u);
  EXPECT_EQ(t.distance(1, 1), 0u);
  EXPECT_EQ(t.cache_domains(), 1u);
  EXPECT_FALSE(t.describe().empty());
  expect_symmetric(t);
}

// ---- the real machine ----------------------------------------------------------

std::set<int> affinity_of_this_thread() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::set<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.insert(c);
  return cpus;
}

TEST(Topo, RealMachineLoads) {
  Topology t = topo::from_machine();
  EXPECT_FALSE(t.synthetic);
  EXPECT_FALSE(t.describe().empty());
  ASSERT_GE(t.pus(), 1u);
  expect_symmetric(t);
  // The PUs are those this process may run on.
  std::set<int> pus(t.pu_os.begin(), t.pu_os.end());
  EXPECT_EQ(pus, affinity_of_this_thread());
  std::printf("machine: %s\n", t.describe().c_str());
  if (!std::getenv("LOOM_TOPOLOGY")) {
    EXPECT_EQ(topo::machine().pu_os, t.pu_os);
    EXPECT_EQ(topo::machine().describe(), t.describe());
    EXPECT_EQ(topo::multi_cache_domain(), t.cache_domains() > 1);
  }
}

TEST(Topo, ProcessorsGetPusRoundRobin) {
  const unsigned n = topo::machine().pus();
  loom::Cluster c(2 * n + 1);
  auto& impl = c.impl();
  for (unsigned i = 1; i < 2 * n + 1; ++i)
    EXPECT_EQ(impl.processor(i)->pu(), (impl.processor(i - 1)->pu() + 1) % n) << i;
  for (unsigned i = 0; i < 2 * n + 1; ++i) {
    const loom::rt::Processor& p = *impl.processor(i);
    EXPECT_LT(p.pu(), n);
    EXPECT_EQ(loom::rt::distance(p, p), 0u);
    EXPECT_EQ(loom::rt::distance(p, *impl.processor(0)), topo::machine().distance(p.pu(), impl.processor(0)->pu()));
  }
}

// ---- pinning -------------------------------------------------------------------

loom::FibreAttr on(loom::Cluster& c) {
  loom::FibreAttr a;
  a.cluster = &c;
  return a;
}

// Runs fibres on `c` until every processor has run one; returns, per
// processor index, the CPUs its kernel thread may run on.
std::map<unsigned, std::set<int>> affinity_per_processor(loom::Cluster& c) {
  std::mutex m;
  std::map<unsigned, std::set<int>> seen;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (seen.size() < c.processors() && std::chrono::steady_clock::now() < deadline) {
    std::vector<loom::Fibre> fibres;
    for (std::size_t i = 0; i < 4 * c.processors(); ++i) {
      fibres.emplace_back(on(c), [&] {
        // No switch between the two reads: both are this processor's.
        loom::rt::Processor* p = loom::rt::this_processor();
        std::set<int> cpus = affinity_of_this_thread();
        std::lock_guard<std::mutex> g(m);
        seen[p->index()] = cpus;
      });
    }
  }
  return seen;
}

TEST(Topo, PinPutsEachProcessorOnItsPu) {
  const Topology& t = topo::machine();
  if (t.synthetic) GTEST_SKIP() << "LOOM_TOPOLOGY is set";
  loom::SchedConfig cfg;
  cfg.pin = true;
  loom::Cluster c(t.pus() + 1, cfg);  // one PU gets two processors
  EXPECT_NE(c.config().describe().find("pin=on"), std::string::npos);
  auto seen = affinity_per_processor(c);
  ASSERT_EQ(seen.size(), c.processors());
  for (auto& [index, cpus] : seen) {
    int want = t.pu_os[c.impl().processor(index)->pu()];
    EXPECT_EQ(cpus, std::set<int>{want}) << "processor " << index;
  }
}

TEST(Topo, NoPinLeavesTheMaskAlone) {
  std::set<int> before = affinity_of_this_thread();
  loom::SchedConfig cfg;
  ASSERT_FALSE(cfg.pin);
  loom::Cluster c(3, cfg);
  for (auto& [index, cpus] : affinity_per_processor(c)) EXPECT_EQ(cpus, before) << "processor " << index;
  EXPECT_EQ(affinity_of_this_thread(), before);
}

TEST(Topo, PinningRefusesAnUnknownPu) {
  if (topo::machine().synthetic) GTEST_SKIP() << "LOOM_TOPOLOGY is set";
  std::set<int> before = affinity_of_this_thread();
  EXPECT_FALSE(topo::pin_current_thread(topo::machine().pus()));
  EXPECT_EQ(affinity_of_this_thread(), before);
}

// ---- LOOM_TOPOLOGY: children running the TopoChild tests -----------------------

using loom::test::Result;

Result run_child(const std::string& env, const std::string& test) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return {};
  self[len] = 0;
  return loom::test::run("env " + env + " " + self +
                         " --gtest_also_run_disabled_tests --gtest_filter=TopoChild.DISABLED_" + test);
}

TEST(Topo, EnvironmentSelectsASyntheticMachine) {
  Result r = run_child("LOOM_TOPOLOGY='pack:2 l3:2 core:4 pu:1' LOOM_PROCESSORS=2", "Synthetic16");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("[  PASSED  ] 1 test"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("loom: not pinning processors: LOOM_TOPOLOGY describes a synthetic machine"), std::string::npos)
      << r.out;
}

TEST(Topo, ColorLocalityOrdersVictimsNearestFirst) {
  Result r = run_child("LOOM_TOPOLOGY='pack:2 l3:2 core:4 pu:1' LOOM_PROCESSORS=2", "ColorLocality16");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("[  PASSED  ] 1 test"), std::string::npos) << r.out;
}

TEST(Topo, RefusedEnvironmentIsReportedAndTheMachineUsed) {
  Result r = run_child("LOOM_TOPOLOGY=bogus:3", "Refused");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("[  PASSED  ] 1 test"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("loom: LOOM_TOPOLOGY=bogus:3: expected an hwloc synthetic topology (e.g. \"pack:2 core:4 pu:1\"); using the machine's"),
            std::string::npos)
      << r.out;
}

// hwloc cannot read the machine (HWLOC_FSROOT: a /sys-less container): its
// own complaint never reaches the program's stderr, loom falls back to the
// flat topology and says so once, only under LOOM_VERBOSE.
TEST(Topo, UnreadableMachineIsFlatAndQuiet) {
  std::string root = ::testing::TempDir() + "topo_empty_root";
  mkdir(root.c_str(), 0700);
  Result quiet = run_child("HWLOC_FSROOT=" + root + " LOOM_VERBOSE=", "Flat");
  EXPECT_EQ(quiet.status, 0) << quiet.out;
  EXPECT_NE(quiet.out.find("[  PASSED  ] 1 test"), std::string::npos) << quiet.out;
  EXPECT_EQ(quiet.out.find("hwloc"), std::string::npos) << quiet.out;
  Result verbose = run_child("HWLOC_FSROOT=" + root + " LOOM_VERBOSE=on", "Flat");
  EXPECT_EQ(verbose.status, 0) << verbose.out;
  EXPECT_EQ(verbose.out.find("[hwloc"), std::string::npos) << verbose.out;
  const std::string notice = "loom: hwloc could not read this machine's topology; using ";
  auto at = verbose.out.find(notice);
  EXPECT_NE(at, std::string::npos) << verbose.out;
  EXPECT_EQ(verbose.out.find(notice, at + 1), std::string::npos) << "said more than once:\n" << verbose.out;
}

// Disabled: run only as children, by the tests above.
TEST(TopoChild, DISABLED_Flat) {
  EXPECT_FALSE(topo::machine().synthetic);
  EXPECT_NE(topo::machine().describe().find("flat"), std::string::npos) << topo::machine().describe();
  EXPECT_NE(topo::from_machine().describe().find("flat"), std::string::npos);  // again: still quiet
  std::atomic<int> ran{0};
  { loom::Fibre a([&] { ++ran; }), b([&] { ++ran; }); }
  EXPECT_EQ(ran.load(), 2);
}

TEST(TopoChild, DISABLED_Synthetic16) {
  const Topology& t = topo::machine();
  EXPECT_TRUE(t.synthetic);
  EXPECT_EQ(t.describe(), "2 packages, 4 L3, 16 cores, 16 PUs (synthetic)");
  EXPECT_TRUE(topo::multi_cache_domain());
  EXPECT_FALSE(topo::pin_current_thread(0));  // synthetic: reported, not pinned

  // A 16-processor cluster: its processors take PUs 2..15, 0, 1 after the
  // default cluster's two. The default policy orders victims nearest first,
  // longest busy first among equals.
  loom::Cluster c(16);
  std::vector<loom::rt::Processor*> procs;
  for (unsigned i = 0; i < 16; ++i) procs.push_back(c.impl().processor(i));
  EXPECT_EQ(procs[0]->pu(), 2u);
  EXPECT_EQ(procs[15]->pu(), 1u);
  loom::rt::Processor* thief = procs[14];  // PU 0
  ASSERT_EQ(thief->pu(), 0u);
  std::vector<loom::rt::Processor*> victims;
  for (int i = 15; i >= 0; --i)
    if (procs[i] != thief) victims.push_back(procs[i]);
  auto policy = loom::rt::make_steal_policy("longest-busy");
  ASSERT_EQ(policy->order(*thief, victims.data(), victims.size()), victims.size());
  std::vector<unsigned> pus;
  for (auto* v : victims) pus.push_back(v->pu());
  EXPECT_EQ(pus, (std::vector<unsigned>{1, 3, 2, 7, 6, 5, 4, 15, 14, 13, 12, 11, 10, 9, 8}));
  for (std::size_t i = 1; i < victims.size(); ++i)
    EXPECT_LE(loom::rt::distance(*thief, *victims[i - 1]), loom::rt::distance(*thief, *victims[i]));

  // Fibres still run on a synthetic machine with more PUs than CPUs.
  std::atomic<int> ran{0};
  {
    std::vector<loom::Fibre> v;
    for (int i = 0; i < 64; ++i) v.emplace_back(on(c), [&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 64);
}

// The color layer's victim order on the same machine, from the thief on PU
// 0, with the processor on PU 9 the most loaded: mely:base (no locality)
// puts it first, then the others after it by index; mely:locality and mely
// keep that order only among equally near victims: same L3, same package,
// the other package.
TEST(TopoChild, DISABLED_ColorLocality16) {
  ASSERT_TRUE(topo::machine().synthetic);
  loom::Cluster c(16);
  ASSERT_TRUE(loom::set_color_policy(c, "none"));  // nobody steals the load below
  auto& impl = c.impl();
  loom::rt::Processor* thief = impl.processor(14);
  ASSERT_EQ(thief->pu(), 0u);
  ASSERT_EQ(impl.processor(7)->pu(), 9u);
  loom::rt::ColorLayer& layer = loom::rt::color_layer(impl);
  // White-box: processor 7's color core reports queued events.
  loom::rt::ColorCore* loaded = layer.core(7);
  loaded->items = 5;
  auto order = [&](const char* policy) {
    std::vector<loom::rt::Processor*> victims;
    for (unsigned i = 0; i < 16; ++i)
      if (i != 14) victims.push_back(impl.processor(i));
    auto p = loom::rt::make_color_policy(policy, layer);
    EXPECT_EQ(p->order(*thief, victims.data(), victims.size()), victims.size()) << policy;
    std::vector<unsigned> pus;
    for (auto* v : victims) pus.push_back(v->pu());
    return pus;
  };
  EXPECT_EQ(order("mely:base"), (std::vector<unsigned>{9, 10, 11, 12, 13, 14, 15, 1, 2, 3, 4, 5, 6, 7, 8}));
  const std::vector<unsigned> nearest{1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 8};
  EXPECT_EQ(order("mely:locality"), nearest);
  EXPECT_EQ(order("mely"), nearest);
  EXPECT_EQ(order("mely:time-left,locality"), nearest);
  loaded->items = 0;
}

TEST(TopoChild, DISABLED_Refused) {
  EXPECT_FALSE(topo::machine().synthetic);
  EXPECT_EQ(topo::machine().pu_os, topo::from_machine().pu_os);
}

}  // namespace
