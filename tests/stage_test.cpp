// tests/stage_test.cpp — loom::Stage (loom/stage.hpp): each policy's
// exclusion and order under many posters, the overlap it must allow, and
// the statistics adding up.
//
// Exclusion is checked with an in-flight counter per domain (the stage, a
// partition) that an operation raises on entry and lowers on exit: more
// than one inside is a violation. Order is checked per poster: each
// operation carries (poster, sequence number) and the domain remembers the
// last number it saw of each poster in plain memory, which only the
// domain's own serialisation protects (so TSan checks that too).
//
// Every check runs under each of the color layer's stealing policies, set
// on the test's own cluster. Overlap is only required where the policy can
// produce it: a color never moves under "none", so the shared operations of
// one color then run one after another on its processor's runner (allowed:
// shared work *may* overlap), while partitions still overlap because their
// colors are hashed over the processors.
#include "loom/stage.hpp"

#include <gtest/gtest.h>

#include <array>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "loom/cluster.hpp"
#include "loom/color.hpp"
#include "loom/fibre.hpp"
#include "loom/sync.hpp"
#include "test_util.hpp"

namespace {

using namespace std::chrono_literals;
using loom::Stage;
using loom::StagePolicy;

void spin_for(std::chrono::nanoseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

void raise_max(std::atomic<int>& max, int v) {
  int m = max.load();
  while (v > m && !max.compare_exchange_weak(m, v)) {
  }
}

const char* const kPolicies[] = {"none", "libasync-smp", "mely", "mely:base"};

std::string param_name(std::string p) {
  for (char& ch : p)
    if (ch == ':' || ch == '-') ch = '_';
  return p;
}

// A cluster of n processors whose color layer steals by `policy` and hashes
// new colors over its processors (whatever LOOM_COLOR_* say).
std::unique_ptr<loom::Cluster> cluster_with(unsigned n, const std::string& policy) {
  auto c = std::make_unique<loom::Cluster>(n);
  EXPECT_TRUE(loom::set_color_policy(*c, policy)) << policy;
  EXPECT_TRUE(loom::set_color_placement(*c, "hash"));
  return c;
}

bool steals(const std::string& policy) { return policy != "none"; }

// Runs poster(i) on `n` fibres of cluster c and one kernel thread that is
// not a processor (index n), and waits for all of them.
template <typename F>
void run_posters(loom::Cluster& c, int n, F poster) {
  std::vector<loom::Fibre> fibres;
  loom::FibreAttr a;
  a.cluster = &c;
  for (int i = 0; i < n; ++i) fibres.emplace_back(a, poster, i);
  std::thread outsider(poster, n);
  for (auto& f : fibres) f.join();
  outsider.join();
}

// A stage's in-flight counter and the largest value it reached.
struct InFlight {
  std::atomic<int> now{0};
  std::atomic<int> max{0};
  int enter() {
    int v = now.fetch_add(1) + 1;
    raise_max(max, v);
    return v;
  }
  void leave() { now.fetch_sub(1); }
};

// ---- exclusive -------------------------------------------------------------------------

class ExclusiveStage : public ::testing::TestWithParam<std::tuple<unsigned, const char*>> {};

TEST_P(ExclusiveStage, NeverOverlapsAndKeepsEachPostersOrder) {
  auto cl = cluster_with(std::get<0>(GetParam()), std::get<1>(GetParam()));
  loom::Cluster& c = *cl;
  Stage s("exclusive", StagePolicy::exclusive, 64, &c);
  constexpr int kPosters = 6;
  const long per = std::max(300L, loom::test::scaled(3000));  // TSan divides by 1000: keep enough to overlap
  InFlight inflight;
  long runs = 0;                        // plain: the stage serialises
  std::array<long, kPosters + 1> last;  // last sequence number seen per poster
  last.fill(-1);
  std::atomic<long> out_of_order{0};
  run_posters(c, kPosters, [&](int p) {
    for (long i = 0; i < per; ++i) {
      s.post([&, p, i] {
        inflight.enter();
        ++runs;
        if (last[p] >= i) out_of_order.fetch_add(1);
        last[p] = i;
        if (i % 64 == 0) spin_for(2us);  // let posters pile up behind it
        inflight.leave();
      });
    }
  });
  s.drain();
  EXPECT_EQ(inflight.max.load(), 1);
  EXPECT_EQ(out_of_order.load(), 0);
  EXPECT_EQ(runs, per * (kPosters + 1));
  for (int p = 0; p <= kPosters; ++p) EXPECT_EQ(last[p], per - 1) << "poster " << p;
  const loom::StageStats st = s.stats();
  EXPECT_EQ(st.posted, std::uint64_t(per * (kPosters + 1)));
  EXPECT_EQ(st.completed, st.posted);
  EXPECT_EQ(st.queued, 0u);
  EXPECT_EQ(st.running, 0u);
}

INSTANTIATE_TEST_SUITE_P(ProcessorsAndPolicies, ExclusiveStage,
                         ::testing::Combine(::testing::Values(1u, 2u, 4u), ::testing::ValuesIn(kPolicies)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "_" + param_name(std::get<1>(info.param));
                         });

// ---- partitioned -----------------------------------------------------------------------

class PartitionedStage : public ::testing::TestWithParam<const char*> {};

TEST_P(PartitionedStage, KeysSerialisedInOrderAndDifferentKeysOverlap) {
  const std::string policy = GetParam();
  auto cl = cluster_with(4, policy);
  loom::Cluster& c = *cl;
  constexpr unsigned kParts = 8;
  constexpr int kKeys = 32, kPosters = 4;
  Stage s("partitioned", StagePolicy::partitioned, kParts, &c);
  const long per = std::max(200L, loom::test::scaled(1500));
  std::array<InFlight, kParts> part;
  InFlight all;
  std::vector<std::array<long, kPosters + 1>> last(kKeys);  // per key, per poster
  for (auto& l : last) l.fill(-1);
  std::atomic<long> out_of_order{0};
  // Overlap across partitions depends on timing: give it a few rounds.
  for (int round = 0; round < 5 && all.max.load() < 2; ++round) {
    run_posters(c, kPosters, [&](int p) {
      for (long i = 0; i < per; ++i) {
        const int key = int((i * 7 + p) % kKeys);
        const long seq = round * per + i;
        s.post(std::uint64_t(key), [&, p, key, seq] {
          InFlight& mine = part[s.partition_of(std::uint64_t(key))];
          mine.enter();
          all.enter();
          if (last[key][p] >= seq) out_of_order.fetch_add(1);
          last[key][p] = seq;
          spin_for(5us);
          all.leave();
          mine.leave();
        });
      }
    });
    s.drain();
  }
  for (unsigned i = 0; i < kParts; ++i) EXPECT_LE(part[i].max.load(), 1) << "partition " << i;
  EXPECT_EQ(out_of_order.load(), 0);
  // Hashed over 4 processors, 8 colors land on at least two of them, so
  // partitions overlap even where colors never move.
  EXPECT_GE(all.max.load(), 2) << "no two partitions ever ran at once";
  const loom::StageStats st = s.stats();
  EXPECT_EQ(st.completed, st.posted);
}

INSTANTIATE_TEST_SUITE_P(Policies, PartitionedStage, ::testing::ValuesIn(kPolicies),
                         [](const auto& info) { return param_name(info.param); });

TEST(PartitionedStageOnly, UnkeyedPostsSpreadOverEveryPartition) {
  Stage s("spread", StagePolicy::partitioned, 4);
  std::array<std::atomic<int>, 4> seen{};
  for (int i = 0; i < 16; ++i)
    s.post([&] {
      const loom::Color col = loom::current_color();
      ASSERT_GE(col, s.first_color());
      ASSERT_LT(col - s.first_color(), 4u);
      seen[col - s.first_color()].fetch_add(1);
    });
  s.drain();
  for (auto& n : seen) EXPECT_EQ(n.load(), 4);
}

TEST(PartitionedStageOnly, KeysSpreadEvenWhenStrided) {
  Stage s("hash", StagePolicy::partitioned, 16);
  std::array<int, 16> hits{};
  for (std::uint64_t k = 0; k < 1024; ++k) {
    unsigned p = s.partition_of(k * 64);  // aligned pointers as keys
    ASSERT_LT(p, 16u);
    ++hits[p];
  }
  for (int h : hits) EXPECT_GT(h, 1024 / 16 / 2);
  EXPECT_EQ(Stage("one", StagePolicy::exclusive).partition_of(12345), 0u);
}

TEST(PartitionedStageOnly, PartitionCountIsChecked) {
  EXPECT_THROW(Stage("none", StagePolicy::partitioned, 0), std::invalid_argument);
  EXPECT_THROW(Stage("huge", StagePolicy::partitioned, loom::kStagePartitionsMax + 1), std::invalid_argument);
  Stage ok("ignored", StagePolicy::shared, 0);  // only partitioned stages count partitions
  EXPECT_EQ(ok.partitions(), 1u);
}

// ---- shared ----------------------------------------------------------------------------

class SharedStage : public ::testing::TestWithParam<const char*> {};

TEST_P(SharedStage, SharedPostsOverlapButNeverWithAnExclusiveOne) {
  const std::string policy = GetParam();
  auto cl = cluster_with(4, policy);
  loom::Cluster& c = *cl;
  Stage s("shared", StagePolicy::shared, 64, &c);
  const long per = std::max(200L, loom::test::scaled(1500));
  InFlight shared, exclusive;
  std::atomic<long> violations{0};
  std::atomic<long> exclusive_runs{0};
  for (int round = 0; round < (steals(policy) ? 5 : 1) && shared.max.load() < 2; ++round) {
    run_posters(c, 4, [&](int) {
      for (long i = 0; i < per; ++i) {
        if (i % 32 == 31) {
          s.post_exclusive([&] {
            if (exclusive.enter() != 1 || shared.now.load() != 0) violations.fetch_add(1);
            spin_for(2us);
            if (shared.now.load() != 0) violations.fetch_add(1);
            exclusive_runs.fetch_add(1);
            exclusive.leave();
          });
        } else {
          s.post([&] {
            shared.enter();
            if (exclusive.now.load() != 0) violations.fetch_add(1);
            spin_for(5us);
            if (exclusive.now.load() != 0) violations.fetch_add(1);
            shared.leave();
          });
        }
      }
    });
    s.drain();
  }
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(exclusive.max.load(), 1);
  EXPECT_GT(exclusive_runs.load(), 0);
  if (steals(policy)) {
    EXPECT_GE(shared.max.load(), 2) << "shared operations never overlapped";
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, SharedStage, ::testing::ValuesIn(kPolicies),
                         [](const auto& info) { return param_name(info.param); });

// ---- statistics ------------------------------------------------------------------------

TEST(StageStats, AddUpAndShowTheQueueBehindASlowOperation) {
  Stage s("stats", StagePolicy::exclusive);
  loom::StageStats st = s.stats();
  EXPECT_EQ(st.posted, 0u);
  EXPECT_EQ(st.queued, 0u);
  EXPECT_EQ(st.wait_max_ns, 0u);

  loom::Semaphore go(0);
  std::atomic<int> quick{0};
  s.post([&] { go.acquire(); });  // blocks holding the stage's color
  constexpr int kQuick = 5;
  for (int i = 0; i < kQuick; ++i) s.post([&] { quick.fetch_add(1); });
  for (int i = 0; s.stats().running == 0; ++i) {
    ASSERT_LT(i, 5000) << "the slow operation never started";
    loom::this_fibre::sleep_for(1ms);
  }
  st = s.stats();
  EXPECT_EQ(st.posted, std::uint64_t(kQuick + 1));
  EXPECT_EQ(st.running, 1u);
  EXPECT_EQ(st.queued, std::uint64_t(kQuick));
  EXPECT_GE(st.queued_max, std::uint64_t(kQuick));
  EXPECT_EQ(quick.load(), 0);
  const auto held = 3ms;
  loom::this_fibre::sleep_for(held);
  go.release();
  s.drain();

  st = s.stats();
  EXPECT_EQ(quick.load(), kQuick);
  EXPECT_EQ(st.posted, std::uint64_t(kQuick + 1));
  EXPECT_EQ(st.completed, st.posted);
  EXPECT_EQ(st.queued, 0u);
  EXPECT_EQ(st.running, 0u);
  const auto held_ns = std::uint64_t(std::chrono::nanoseconds(held).count());
  EXPECT_GE(st.run_max_ns, held_ns);   // the slow one
  EXPECT_GE(st.wait_max_ns, held_ns);  // the quick ones behind it
  EXPECT_GE(st.run_max_ns, st.run_mean_ns);
  EXPECT_GE(st.wait_max_ns, st.wait_mean_ns);
  EXPECT_GT(st.run_mean_ns, 0u);
  EXPECT_GT(st.wait_mean_ns, 0u);
}

std::string printed(void (*print)(std::FILE*, const void*), const void* arg) {
  std::FILE* f = std::tmpfile();
  print(f, arg);
  std::rewind(f);
  std::string out;
  char buf[512];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  std::fclose(f);
  return out;
}

TEST(StageStats, PrintShowsTheStageAndPrintStagesEveryLiveOne) {
  Stage a("printed-a", StagePolicy::partitioned, 3);
  std::string gone_name = "printed-gone";
  { Stage gone(gone_name, StagePolicy::shared); }
  {
    Stage b("printed-b", StagePolicy::shared);
    for (int i = 0; i < 10; ++i) a.post(std::uint64_t(i), [] {});
    a.drain();
    const std::string one = printed([](std::FILE* f, const void* s) { static_cast<const Stage*>(s)->print(f); }, &a);
    EXPECT_NE(one.find("printed-a"), std::string::npos) << one;
    EXPECT_NE(one.find("partitioned/3"), std::string::npos) << one;
    EXPECT_NE(one.find("wait-mean"), std::string::npos) << one;
    EXPECT_NE(one.find(" 10 "), std::string::npos) << one;
    const std::string all = printed([](std::FILE* f, const void*) { loom::print_stages(f); }, nullptr);
    EXPECT_NE(all.find("printed-a"), std::string::npos) << all;
    EXPECT_NE(all.find("printed-b"), std::string::npos) << all;
    EXPECT_LT(all.find("printed-a"), all.find("printed-b")) << "oldest first";
    EXPECT_EQ(all.find("printed-gone"), std::string::npos) << all;
  }
  const std::string all = printed([](std::FILE* f, const void*) { loom::print_stages(f); }, nullptr);
  EXPECT_EQ(all.find("printed-b"), std::string::npos) << all;
}

// ---- lifetime --------------------------------------------------------------------------

TEST(StageLifetime, DestructorWaitsForQueuedOperations) {
  std::atomic<int> ran{0};
  {
    Stage s("short-lived", StagePolicy::exclusive);
    for (int i = 0; i < 100; ++i)
      s.post([&] {
        spin_for(10us);
        ran.fetch_add(1);
      });
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(StageLifetime, CStyleOperationsAndOtherClusters) {
  loom::Cluster c(2);
  Stage s("c-style", StagePolicy::exclusive, 1, &c);
  EXPECT_EQ(&s.cluster(), &c);
  std::atomic<int> n{0};
  auto bump = [](void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); };
  for (int i = 0; i < 10; ++i) s.post(+bump, &n);
  s.post(7, +bump, &n);
  s.post_exclusive(+bump, &n);
  s.drain();
  EXPECT_EQ(n.load(), 12);
}

}  // namespace
