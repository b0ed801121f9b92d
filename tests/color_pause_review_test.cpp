// An outside review of "steals must pay" (the color layer's thief pauses and
// their timer) and of the timer keeper's hand-off (a keeper woken while
// timers are pending wakes a sleeper to keep them). Each test asserts
// eventual progress or counts, never timings: the machine is shared.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom/color.hpp"
#include "loom/loom.hpp"
#include "sched/cluster.hpp"
#include "test_util.hpp"

namespace {

using namespace std::chrono_literals;
using loom::Cluster;
using loom::Color;
using loom::test::scaled;

void spin_for(std::chrono::microseconds d) {
  auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

bool wait_until(const std::atomic<long>& n, long want, std::chrono::seconds limit = 60s) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (n.load() < want) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(200us);
  }
  return true;
}

// ---- the keeper's hand-off ------------------------------------------------------

// An idle cluster with one timer pending (a fibre in sleep_for) must sleep
// while it waits: a handful of idle sleeps, not one per pass of the idle
// loop. A keeper that woke while timers are pending woke a sleeper with
// wake_one(), which may pick the keeper itself (still on the idle list
// when its sleep ended at a deadline or at add_timer's re-arm wake): its
// next sleep then returns at once and it wakes itself again, for as long as
// any timer is pending. One processor has no one else to wake, so it spun.
class KeeperHandOff : public testing::TestWithParam<std::size_t> {};

TEST_P(KeeperHandOff, AnIdleClusterWithAPendingTimerSleeps) {
  Cluster cl(GetParam());
  // Let the processors settle into their first sleep.
  std::this_thread::sleep_for(50ms);
  const loom::ClusterStats before = cl.stats();
  std::atomic<long> woke{0};
  // Two timers: when the first fires (the keeper's sleep ends at its
  // deadline), the second is still pending for 400 ms.
  loom::Fibre early(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
    loom::this_fibre::sleep_for(100ms);
    woke.fetch_add(1);
  });
  loom::Fibre late(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
    loom::this_fibre::sleep_for(500ms);
    woke.fetch_add(1);
  });
  early.join();
  late.join();
  const loom::ClusterStats after = cl.stats();
  ASSERT_EQ(woke.load(), 2);
  std::printf("%zu processor(s): %llu sleeps, %llu wakes\n", GetParam(),
              (unsigned long long)(after.sleeps - before.sleeps), (unsigned long long)(after.wakes - before.wakes));
  const auto sleeps = after.sleeps - before.sleeps, wakes = after.wakes - before.wakes;
  // A sleep of half a second needs a few idle sleeps per processor; a
  // keeper that wakes itself needs one per pass of its idle loop (hundreds
  // of thousands). 1,000 leaves room for the noisiest guest.
  EXPECT_LT(sleeps, 1000u) << "idle sleeps while one timer was pending, on " << GetParam() << " processor(s)";
  EXPECT_LT(wakes, 1000u) << "wake-ups while one timer was pending, on " << GetParam() << " processor(s)";
}

// The same beside a busy processor (a fibre that spins, as an event waiting
// for a stolen color does): the idle one keeps the timers and sleeps until
// they are due. add_timer's re-arm wake left the keeper on the idle list,
// the only one there: it woke itself on every pass (a paused color thief so
// looked ~1.8M times a second instead of sleeping out its pause).
TEST_P(KeeperHandOff, AnIdleProcessorBesideABusyOneSleeps) {
  if (GetParam() < 2) GTEST_SKIP() << "needs a busy processor beside an idle one";
  Cluster cl(GetParam());
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<loom::Fibre>> busy;
  for (std::size_t i = 0; i + 1 < GetParam(); ++i)
    busy.push_back(std::make_unique<loom::Fibre>(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
      while (!stop.load()) {
      }
    }));
  std::this_thread::sleep_for(50ms);
  const loom::ClusterStats before = cl.stats();
  std::atomic<long> woke{0};
  loom::Fibre early(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
    loom::this_fibre::sleep_for(100ms);
    woke.fetch_add(1);
  });
  loom::Fibre late(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
    loom::this_fibre::sleep_for(400ms);
    woke.fetch_add(1);
  });
  early.join();
  late.join();
  const loom::ClusterStats after = cl.stats();
  stop.store(true);
  for (auto& f : busy) f->join();
  ASSERT_EQ(woke.load(), 2);
  const auto sleeps = after.sleeps - before.sleeps;
  std::printf("%zu processor(s), %zu busy: %llu sleeps\n", GetParam(), GetParam() - 1, (unsigned long long)sleeps);
  EXPECT_LT(sleeps, 1000u) << "idle sleeps while timers were pending beside a busy processor";
}

INSTANTIATE_TEST_SUITE_P(Processors, KeeperHandOff, testing::Values(1u, 2u, 4u));

// ---- pauses ----------------------------------------------------------------------

struct Count {
  std::atomic<long>* n;
  void operator()() { n->fetch_add(1); }
};

// Waves of one-event colors posted by a fibre that then keeps its
// processor busy, so that the other processors steal them blind (mely:base
// weighs nothing) and lose: until the cluster's thieves are paused, or a
// bound. Returns whether they were; every event ran.
bool drive_pause(Cluster& cl, std::atomic<long>& n, long& posted) {
  const long kWave = std::max(200L, scaled(3000));
  auto end = std::chrono::steady_clock::now() + 30s;
  for (int wave = 0; wave < 100 && std::chrono::steady_clock::now() < end; ++wave) {
    Color base = loom::allocate_colors(std::uint32_t(kWave));
    loom::Fibre holder(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
      for (long i = 0; i < kWave; ++i) loom::post(base + Color(i), Count{&n});
      spin_for(3ms);
    });
    holder.join();
    posted += kWave;
    if (!wait_until(n, posted)) return false;
    if (loom::steal_payoff(cl).paused) return true;
  }
  return loom::steal_payoff(cl).paused;
}

// One round of "a ready event never waits for ever behind a running one":
// an event of color A that spins until an event of color B, B+1 or B+2, posted after it
// on the same processor (local placement), has run. Only a thief can run B.
// Returns whether B ran within `limit` (the spinner gives up then, so that
// a failure ends).
bool behind_a_long_event(Cluster& cl, Color a, Color b, std::chrono::seconds limit) {
  auto flag = std::make_shared<std::atomic<int>>(0);
  auto gave_up = std::make_shared<std::atomic<int>>(0);
  loom::Fibre poster(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
    loom::post(a, [flag, gave_up, limit] {
      auto end = std::chrono::steady_clock::now() + limit;
      while (!flag->load()) {
        if (std::chrono::steady_clock::now() > end) {
          gave_up->store(1);
          return;
        }
      }
    });
    // Three colors of three events behind it: libasync-smp's rule (and
    // mely:base's) takes only a queue with under half the victim's items,
    // so a lone color (or one of two even ones) behind a long event is
    // never stolen under those policies (by design, before the pauses too).
    for (Color k : {b, b + 1, b + 2})
      for (int i = 0; i < 3; ++i) loom::post(k, [flag] { flag->store(1); });
  });
  poster.join();
  auto end = std::chrono::steady_clock::now() + limit + 10s;
  while (!flag->load() && !gave_up->load() && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(100us);
  // Let the spinner see the flag and end before the next round.
  while (!flag->load() && !gave_up->load()) std::this_thread::sleep_for(1ms);
  return flag->load() && !gave_up->load();
}

class StealPause : public testing::TestWithParam<std::size_t> {};

// Thieves paused, one processor's runner inside an event that waits for a
// color queued behind it: the pause's timer must end the pause and wake a
// thief, round after round (each steal is one that does not pay, so the
// pauses grow to their longest). The other processors are asleep as this
// starts, one of them the timers' keeper.
TEST_P(StealPause, WorkBehindALongEventIsStolenWhileThievesArePaused) {
  Cluster cl(GetParam());
  ASSERT_TRUE(loom::set_color_policy(cl, "mely:base"));
  ASSERT_TRUE(loom::set_color_placement(cl, "local"));
  std::atomic<long> n{0};
  long posted = 0;
  ASSERT_TRUE(drive_pause(cl, n, posted)) << "thieves were never paused: the test did not test";
  const int kRounds = int(std::max(20L, scaled(200)));
  Color c = loom::allocate_colors(std::uint32_t(4 * kRounds));
  int paused_rounds = 0;
  for (int r = 0; r < kRounds; ++r) {
    if (loom::steal_payoff(cl).paused) ++paused_rounds;
    ASSERT_TRUE(behind_a_long_event(cl, c + Color(4 * r), c + Color(4 * r + 1), 30s))
        << "round " << r << ": the color behind a long event was never stolen; paused " << loom::steal_payoff(cl).paused
        << ", paid share " << loom::steal_payoff(cl).paid_share;
  }
  EXPECT_GT(paused_rounds, 0) << "no round began paused: the test did not test";
  std::printf("%zu processors: %d of %d rounds began paused, looks held %llu\n", GetParam(), paused_rounds, kRounds,
              (unsigned long long)loom::steal_payoff(cl).looks_held);
}

// set_color_policy starts a new account: thieves are no longer paused, and
// work behind a long event is stolen.
TEST_P(StealPause, SetPolicyWhilePausedEndsThePause) {
  Cluster cl(GetParam());
  ASSERT_TRUE(loom::set_color_policy(cl, "mely:base"));
  ASSERT_TRUE(loom::set_color_placement(cl, "local"));
  std::atomic<long> n{0};
  long posted = 0;
  ASSERT_TRUE(drive_pause(cl, n, posted)) << "thieves were never paused: the test did not test";
  ASSERT_TRUE(loom::set_color_policy(cl, "libasync-smp"));
  EXPECT_FALSE(loom::steal_payoff(cl).paused);
  EXPECT_EQ(loom::steal_payoff(cl).paid_share, 1.0);
  Color c = loom::allocate_colors(4);
  EXPECT_TRUE(behind_a_long_event(cl, c, c + 1, 30s));
}

// Clusters destroyed while their thieves are paused (the pause timer
// armed): nothing crashes, every event ran, and the retired cluster's timer
// heap keeps no node of its color layer.
TEST_P(StealPause, ClustersDestroyedWhilePausedLeaveNoTimerBehind) {
  const int kClusters = int(std::max(4L, scaled(16)));
  int paused = 0;
  for (int i = 0; i < kClusters; ++i) {
    std::atomic<long> n{0};
    long posted = 0;
    loom::rt::Cluster* impl = nullptr;
    {
      Cluster cl(GetParam());
      impl = &cl.impl();
      ASSERT_TRUE(loom::set_color_policy(cl, "mely:base"));
      ASSERT_TRUE(loom::set_color_placement(cl, "local"));
      if (drive_pause(cl, n, posted)) ++paused;
      // More one-event colors still queued as the cluster goes: the
      // runners drain them (their steals' accounts may set pauses then).
      Color base = loom::allocate_colors(256);
      loom::Fibre holder(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
        for (int k = 0; k < 256; ++k) loom::post(base + Color(k), Count{&n});
      });
      holder.join();
      posted += 256;
    }
    EXPECT_EQ(n.load(), posted) << "cluster " << i;
    EXPECT_FALSE(impl->timers.pending()) << "cluster " << i << ": a timer left in a retired cluster's heap";
  }
  EXPECT_GT(paused, 0) << "no cluster was paused as it went: the test did not test";
}

INSTANTIATE_TEST_SUITE_P(Processors, StealPause, testing::Values(2u, 3u));

// ---- exactly once, FIFO and exclusion under pauses -------------------------------

struct Tally {
  explicit Tally(std::size_t colors, std::size_t events) : inflight(colors), next(colors), runs(events) {}
  std::vector<std::atomic<int>> inflight;
  std::vector<std::atomic<long>> next;
  std::vector<std::atomic<unsigned char>> runs;
  std::atomic<long> done{0}, overlap{0}, disorder{0};
};

struct Ev {
  Tally* t;
  std::size_t color;
  long seq;
  long id;
  bool shared;
  bool dear;
};

void run_ev(void* p) {
  std::unique_ptr<Ev> e(static_cast<Ev*>(p));
  Tally& t = *e->t;
  int add = e->shared ? 1 : 1000;
  int before = t.inflight[e->color].fetch_add(add);
  if (e->shared ? before >= 1000 : before != 0) t.overlap.fetch_add(1);
  if (!e->shared) {
    if (t.next[e->color].load() != e->seq) t.disorder.fetch_add(1);
    t.next[e->color].store(e->seq + 1);
  }
  if (e->dear) spin_for(30us);
  t.inflight[e->color].fetch_sub(add);
  t.runs[std::size_t(e->id)].fetch_add(1);
  t.done.fetch_add(1);
}
void run_dear(void* p) { run_ev(p); }  // a handler of its own: its cost is measured apart

// Posters on several processors of two clusters post to one-event colors
// (steals that lose: pauses), a few long-lived colors with dear events
// (steals that pay), and shared events on those; a kernel thread changes
// the policy meanwhile (each change resets the account while runners close
// theirs). Each event runs once, exclusive events of a color in order and
// alone, shared ones never beside an exclusive one.
TEST(StealPauseStress, ExactlyOnceInOrderAndExclusiveUnderPausesAndPolicyChanges) {
  const std::size_t kPosters = 2, kLong = 8;
  const long kPerPoster = std::max(2000L, scaled(40000));
  const long kEvents = long(kPosters) * kPerPoster;
  struct One {
    std::unique_ptr<Cluster> cl;
    std::unique_ptr<Tally> t;
    Color base = 0;
  };
  One cs[2];
  for (auto& o : cs) {
    o.cl = std::make_unique<Cluster>(3);
    loom::set_color_placement(*o.cl, "local");
    loom::set_color_policy(*o.cl, "mely:base");
    // colors: kLong long-lived, then one per poster's cheap one-event colors
    o.t = std::make_unique<Tally>(kLong + std::size_t(kEvents), std::size_t(kEvents));
    o.base = loom::allocate_colors(std::uint32_t(kLong + std::size_t(kEvents)));
  }
  std::atomic<bool> stop{false};
  std::thread flipper([&] {
    const char* pols[] = {"mely:base", "libasync-smp", "mely", "mely:locality", "mely:penalty"};
    for (unsigned i = 0; !stop.load(); ++i) {
      for (auto& o : cs) loom::set_color_policy(*o.cl, pols[i % 5]);
      std::this_thread::sleep_for(40ms);
    }
  });
  std::vector<std::unique_ptr<loom::Fibre>> posters;
  // Per long color: one poster owns its sequence (exclusive events of a
  // color come from one poster, so their order is the post order).
  for (auto& o : cs)
    for (std::size_t pi = 0; pi < kPosters; ++pi) {
      One* op = &o;
      posters.push_back(std::make_unique<loom::Fibre>(
          loom::FibreAttr{0, loom::Priority::normal, o.cl.get()}, [op, pi, kPerPoster, kLong] {
            Tally& t = *op->t;
            std::vector<long> seq(kLong, 0);
            for (long k = 0; k < kPerPoster; ++k) {
              long id = long(pi) * kPerPoster + k;
              unsigned kind = unsigned(k % 10);
              if (kind < 6) {  // a one-event color
                std::size_t color = kLong + std::size_t(id);
                loom::post(op->base + Color(color), &run_ev, new Ev{&t, color, 0, id, false, false});
              } else {
                std::size_t color = (pi * 4 + std::size_t(k % 4)) % kLong;  // four long colors per poster
                bool shared = kind == 9;
                long s = shared ? -1 : seq[color]++;
                if (shared)
                  loom::post_shared(op->base + Color(color), &run_ev, new Ev{&t, color, s, id, true, false});
                else
                  loom::post(op->base + Color(color), &run_dear, new Ev{&t, color, s, id, false, true});
              }
              if (k % 500 == 499) {  // a wave posted: keep the processor busy a while (others steal), then yield
                spin_for(2ms);
                loom::this_fibre::yield();
              }
            }
          }));
    }
  for (auto& f : posters) f->join();
  bool all = true;
  for (auto& o : cs) all = wait_until(o.t->done, kEvents, 120s) && all;
  stop.store(true);
  flipper.join();
  for (auto& o : cs) {
    Tally& t = *o.t;
    EXPECT_EQ(t.done.load(), kEvents);
    EXPECT_EQ(t.overlap.load(), 0);
    EXPECT_EQ(t.disorder.load(), 0);
    long twice = 0, never = 0;
    for (auto& r : t.runs) {
      if (r.load() == 0) ++never;
      if (r.load() > 1) ++twice;
    }
    EXPECT_EQ(never, 0);
    EXPECT_EQ(twice, 0);
    std::printf("cluster %u: stolen %llu colors, share %.2f, looks held %llu\n", o.cl->id(),
                (unsigned long long)loom::color_stats(*o.cl).colors_stolen, loom::steal_payoff(*o.cl).paid_share,
                (unsigned long long)loom::steal_payoff(*o.cl).looks_held);
  }
  ASSERT_TRUE(all) << "events lost or stuck";
}

}  // namespace
