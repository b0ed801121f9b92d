// Regressions for races found under adversarial schedules (issue 25). Each
// test is an ordinary stress test in every build; in the chaos build
// (cmake -DLOOM_CHAOS=ON, `make chaos`) its ctest twin narrows the
// perturbation to the race's window (LOOM_CHAOS_ONLY) and stalls there on
// every pass, so that it fails within a few seeds when the fix is missing,
// where a plain run found it about once in four TSan runs.
#include "base/chaos.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "loom/color.hpp"
#include "loom/loom.hpp"
#include "sched/cluster.hpp"
#include "sched/fibre.hpp"
#include "sched/processor.hpp"
#include "test_util.hpp"

namespace {

using loom::Cluster;
using loom::Color;
using loom::test::scaled;

struct Colors {
  Colors(unsigned colors, unsigned posters) : colors(colors), inflight(colors), next(colors * posters) {}
  unsigned colors;
  std::vector<std::atomic<int>> inflight;  // per color
  std::vector<std::atomic<long>> next;     // per poster and color: the sequence number expected
  std::atomic<long> done{0}, violations{0};
};

struct Ev {
  Colors* cs;
  unsigned color;
  long seq;
};

void run_event(void* p) {
  std::unique_ptr<Ev> e(static_cast<Ev*>(p));
  Colors& cs = *e->cs;
  std::atomic<int>& inflight = cs.inflight[e->color % cs.colors];  // the color's, whoever posted
  if (inflight.fetch_add(1) != 0) cs.violations.fetch_add(1);
  if (cs.next[e->color].load() != e->seq) cs.violations.fetch_add(1);
  cs.next[e->color].store(e->seq + 1);
  auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(3);
  while (std::chrono::steady_clock::now() < end) {
  }
  inflight.fetch_sub(1);
  cs.done.fetch_add(1);
}

bool wait_for(const std::atomic<long>& n, long want) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (n.load() < want) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return true;
}

// The color-transit race of 2026-11-27 (8a716ad): a thief unlinks a queue
// under its victim's lock and links it under its own; between the two, a
// post (or a colored fibre's release) found the queue owned by the thief and
// linked it on the thief's list, where a second thief stole it from under
// the first, and the two wrote it under different locks (then a use after
// free). Here the colors of one poster all start on one processor (local
// placement), so idle processors steal them, while kernel threads post to
// the same colors all the time: posts land while queues are in transit.
// The checking builds report the first link in transit at once
// (color.cpp: a queue is linked only by its owner, never in transit); a
// plain build sees a lost, doubled or overlapping event, or a crash.
TEST(ColorTransit, AQueueInTransitIsLinkedOnlyByItsThief) {
  Cluster cl(4, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, "libasync-smp"));
  loom::set_color_placement(cl, "local");
  const unsigned kColors = 8, kPosters = 3;
  Color base = loom::allocate_colors(kColors);
  const long per_poster = std::max(3000L, scaled(60000)) / kPosters;
  // Each poster has its own colors' sequence: colors are split between
  // posters by index, so that per-color order is defined.
  Colors cs(kColors, kPosters);
  auto poster = [&](unsigned p) {
    std::vector<long> seq(kColors, 0);
    for (long i = 0; i < per_poster; ++i) {
      unsigned c = unsigned(i % kColors);
      loom::post(base + c, &run_event, new Ev{&cs, p * kColors + c, seq[c]++}, &cl);
      if (i % 64 == 0) {
        if (p == 0)
          loom::this_fibre::yield();
        else
          std::this_thread::yield();
      }
    }
  };
  {
    loom::FibreAttr a;
    a.cluster = &cl;
    loom::Fibre local(a, poster, 0u);
    std::vector<std::thread> outside;
    for (unsigned p = 1; p < kPosters; ++p) outside.emplace_back(poster, p);
    for (auto& t : outside) t.join();
  }
  ASSERT_TRUE(wait_for(cs.done, per_poster * kPosters)) << cs.done.load() << " of " << per_poster * kPosters;
  EXPECT_EQ(cs.violations.load(), 0);
}

#if defined(LOOM_CHECKS_ON)
// The checking builds' invariants report the breach, naming who, and abort.
// (White-box: the runtime's own calls never break them on purpose.)
TEST(Checks, PushLocalFromAnotherThreadIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Cluster cl(1, loom::SchedConfig{});
  loom::rt::Processor* p = cl.impl().processor(0);
  // main runs on the default cluster's processor, not on cl's.
  EXPECT_DEATH(p->push_local(nullptr),
               "invariant broken: push_local on processor 0 of cluster [0-9]+ from processor 0");
}

TEST(Checks, APinnedFibreSwitchedToElsewhereIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  loom::rt::Fibre f;
  f.id = 77;
  f.name = "runner";
  f.pinned = true;
  f.affinity = nullptr;  // pinned elsewhere
  loom::rt::Processor* here = loom::rt::this_processor();
  ASSERT_NE(here, nullptr);
  EXPECT_DEATH(LOOM_CHECK_SWITCH(&f, *here), "pinned fibre 77 \"runner\" switched to on processor");
}
#endif

}  // namespace
