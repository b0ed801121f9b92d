// Work stealing, driven from inside: fibres are pushed straight onto one
// processor's queue to build the imbalance stealing exists for.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "loom/loom.hpp"
#include "sched/cluster.hpp"
#include "sched/processor.hpp"
#include "test_util.hpp"

namespace {

using loom::Cluster;
using loom::SchedConfig;
namespace rt = loom::rt;

struct Record {
  std::atomic<int> runs{0};
  std::atomic<int> running{0};  // 1 while some processor runs it
  int ran_on = -1;
  int affinity = -1;
  int iterations = 0;
};

void spin_for(std::chrono::microseconds d) {
  auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

struct Job {
  Record* rec;
  int yields;
  std::atomic<int>* finished;
};

void job_body(void* arg) {
  auto* j = static_cast<Job*>(arg);
  Record& r = *j->rec;
  r.runs.fetch_add(1);
  for (int i = 0; i <= j->yields; ++i) {
    // Never on two processors at once: a fibre run twice would overlap.
    if (r.running.exchange(1) != 0) std::abort();
    rt::Fibre* self = rt::this_fibre_or_null();
    r.ran_on = loom::this_fibre::processor_index();
    r.affinity = int(self->affinity->index());
    spin_for(std::chrono::microseconds(150));  // 200 of them: 30 ms on the victim alone
    ++r.iterations;
    r.running.store(0);
    if (i < j->yields) loom::this_fibre::yield();
  }
  j->finished->fetch_add(1);
}

// Starts n fibres, all queued on processor 0 of `c`, and waits for them.
std::vector<std::unique_ptr<Record>> run_on_first(Cluster& c, int n, int yields) {
  std::vector<std::unique_ptr<Record>> recs;
  std::vector<Job> jobs(static_cast<std::size_t>(n));
  std::vector<rt::Fibre*> fibres;
  std::atomic<int> finished{0};
  rt::Processor* p0 = c.impl().processor(0);
  loom::FibreAttr attr;
  attr.cluster = &c;
  for (int i = 0; i < n; ++i) {
    recs.push_back(std::make_unique<Record>());
    jobs[std::size_t(i)] = Job{recs.back().get(), yields, &finished};
    rt::Fibre* f = rt::create_fibre(attr, 0, 1, nullptr);
    f->fn = &job_body;
    f->arg = &jobs[std::size_t(i)];
    f->affinity = p0;
    c.impl().fibres.fetch_add(1);
    fibres.push_back(f);
  }
  for (rt::Fibre* f : fibres) p0->push(f);
  for (rt::Fibre* f : fibres) rt::join_fibre(f);
  EXPECT_EQ(finished.load(), n);
  return recs;
}

SchedConfig with_stealing(bool on, std::size_t sticky, const char* policy = "longest-busy") {
  SchedConfig c;
  c.stealing = on;
  c.sticky_threshold = sticky;
  c.steal_policy = policy;
  return c;
}

class Steal : public testing::TestWithParam<const char*> {};

TEST_P(Steal, ImbalanceIsStolenTransientlyAndNothingRunsTwice) {
  Cluster c(2, with_stealing(true, 0, GetParam()));
  auto recs = run_on_first(c, 200, 0);
  int on_thief = 0;
  for (auto& r : recs) {
    EXPECT_EQ(r->runs.load(), 1);
    EXPECT_EQ(r->iterations, 1);
    on_thief += r->ran_on == 1;
    EXPECT_EQ(r->affinity, 0) << "transient stealing keeps the victim's affinity";
  }
  EXPECT_GT(c.stats().steals, 0u);
  EXPECT_GT(on_thief, 0) << "sleeps " << c.stats().sleeps << " wakes " << c.stats().wakes;
}

TEST_P(Steal, PastTheThresholdStolenFibresStick) {
  Cluster c(2, with_stealing(true, 2, GetParam()));
  auto recs = run_on_first(c, 200, 0);
  int sticky = 0;
  for (auto& r : recs) {
    EXPECT_EQ(r->runs.load(), 1);
    sticky += r->ran_on == 1 && r->affinity == 1;
  }
  EXPECT_GT(c.stats().sticky_steals, 0u);
  EXPECT_GT(sticky, 0);
}

TEST_P(Steal, YieldingFibresUnderStealingRunEveryIterationOnce) {
  Cluster c(4, with_stealing(true, 8, GetParam()));
  const int yields = int(loom::test::scaled(50));
  auto recs = run_on_first(c, 64, yields);
  for (auto& r : recs) {
    EXPECT_EQ(r->runs.load(), 1);
    EXPECT_EQ(r->iterations, yields + 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, Steal, testing::Values("longest-busy", "random"),
                         [](const testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param) == "random" ? "random" : "longest_busy";
                         });

TEST(StealOff, NothingIsStolen) {
  // Stealing off is the scheduler's policy; the monitor's rescue of a lost
  // processor (a sleeper woken to steal) is another mechanism, with tests
  // of its own: off here (a TSan run once saw a processor held in TSan's
  // own waits taken for lost, and 32 steals).
  SchedConfig cfg = with_stealing(false, 0);
  cfg.handoff_us = 0;
  Cluster c(2, cfg);
  auto recs = run_on_first(c, 100, 0);
  for (auto& r : recs) {
    EXPECT_EQ(r->runs.load(), 1);
    EXPECT_EQ(r->ran_on, 0);
  }
  EXPECT_EQ(c.stats().steals, 0u);
}

TEST(StealOff, SharedQueueNeedsNoStealing) {
  SchedConfig cfg;
  cfg.queue = loom::QueueKind::shared;
  Cluster c(2, cfg);
  auto recs = run_on_first(c, 100, 0);
  int on_second = 0;
  for (auto& r : recs) {
    EXPECT_EQ(r->runs.load(), 1);
    on_second += r->ran_on == 1;
  }
  EXPECT_EQ(c.stats().steals, 0u);
  EXPECT_GT(on_second, 0) << "both processors serve the one shared queue";
}

// Issue 25, bug 3 (and issue 24 item 5, redis --io-threads 2 under the
// preload): a mutex unlock makes the waiter ready on the unlocker's own
// processor (its affinity), and the unlocker then busy-waits on an atomic
// for the waiter's work. The waiter must not wait behind the spinner while
// the other processor sleeps: that processor is woken to steal it. Without
// the wake it was a livelock (here bounded: the spinner gives up after 5 s).
TEST(StealWake, AWaiterWokenBehindASpinnerRunsWhileAProcessorSleeps) {
  Cluster c(1, with_stealing(true, 0));  // one processor: both fibres' affinity is processor 0
  loom::FibreAttr attr;
  attr.cluster = &c;
  const int rounds = int(loom::test::scaled(20)) + 1;
  int stuck = 0;  // the first round whose waiter stayed behind the spinner, from 1
  loom::Fibre(attr, [&] {
    for (int round = 0; round < rounds; ++round) {
      loom::Mutex m;
      std::atomic<int> started{0}, done{0};
      m.lock();
      loom::Fibre waiter(attr, [&] {
        started = 1;
        m.lock();  // parks: the spinner holds it
        done = 1;
        m.unlock();
      });
      while (!started.load()) loom::this_fibre::yield();  // the waiter ran and parked on m
      if (round == 0) c.add_processors(1);
      // Until the second processor sleeps (bounded).
      for (int i = 0; i < 5000 && c.impl().idle_processors() == 0; ++i) ::usleep(200);
      EXPECT_EQ(c.impl().idle_processors(), 1) << "round " << round;
      m.unlock();  // the waiter is ready on this processor, behind this fibre
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!done.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
      }
      waiter.join();
      if (!done.load()) {
        stuck = round + 1;
        break;
      }
    }
  }).join();
  EXPECT_EQ(stuck, 0) << "in that round (from 1), the woken waiter stayed behind the spinner for 5 s";
}

// Issue 34: with a sibling spinning before it sleeps (SchedConfig::spin_us),
// a waiter an unlock makes ready behind the unlocker is handed to the
// spinner's own queue: it runs there while the unlocker keeps running,
// with no steal and no wake-up. Without a spin (spin_us = 0, the old
// behaviour, kept as a variant) a sleeping sibling is woken to steal it.
// Either way the unlocker busy-waits for the waiter's work (bounded, 5 s).
class SpinHandOver : public testing::TestWithParam<unsigned> {};

TEST_P(SpinHandOver, AWaiterWokenBehindABusyFibreRunsOnTheSibling) {
  SchedConfig cfg = with_stealing(true, 0);
  cfg.spin_us = GetParam();
  Cluster c(2, cfg);
  loom::FibreAttr attr;
  attr.cluster = &c;
  const int rounds = int(loom::test::scaled(20)) + 1;
  int stuck = 0, elsewhere = 0;
  int spun = 0;              // rounds whose sibling was seen spinning before the unlock
  std::uint64_t stolen = 0;  // steals while the waiter was on its way, in those rounds
  loom::Fibre(attr, [&] {
    for (int round = 0; round < rounds; ++round) {
      loom::Mutex m;
      std::atomic<int> started{0}, done{0};
      std::atomic<rt::Processor*> ran_on{nullptr};
      m.lock();
      loom::FibreAttr wa = attr;
      loom::Fibre waiter(wa, [&] {
        started = 1;
        m.lock();  // parks: this fibre holds it
        ran_on = rt::this_processor();
        done = 1;
        m.unlock();
      });
      while (!started.load()) loom::this_fibre::yield();  // it ran and parked on m
      // From here this fibre has no scheduling point until the waiter is done.
      rt::Processor* here = rt::this_processor();
      rt::Processor* other = c.impl().processor(here->index() == 0 ? 1 : 0);
      // Until the sibling sleeps (no spin) or spins (1 s of it): bounded.
      // With the default 20 µs, whatever it does.
      auto settle = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      bool spinning = false;
      while (GetParam() != 20 && std::chrono::steady_clock::now() < settle) {
        if (GetParam() ? (spinning = other->spinning.load()) : other->idle.load()) break;
        if (GetParam() == 0) ::usleep(100);
      }
      if (spinning) ++spun;
      const auto steals_before = c.stats().steals;
      m.unlock();  // the waiter is ready behind this fibre
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!done.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
      }
      if (spinning || GetParam() != 1000000) stolen += c.stats().steals - steals_before;
      waiter.join();
      if (!done.load()) {
        stuck = round + 1;
        break;
      }
      if (ran_on.load() != here) ++elsewhere;
    }
  }).join();
  EXPECT_EQ(stuck, 0) << "in that round (from 1), the woken waiter stayed behind the busy fibre for 5 s";
  EXPECT_EQ(elsewhere, rounds) << "every waiter ran on the sibling, not behind its unlocker";
  auto st = c.stats();
  if (GetParam() >= 1000000) {
    // (With the default 20 µs the sibling may have stopped spinning, its
    // budget spent, before the unlock: then a thief is woken, as without a
    // spin. Only the contract above is checked there.)
    // The hand-over is judged over the rounds whose sibling was seen
    // spinning. A sibling asleep since the waiter ran on this processor
    // (no thief came for it) never spins: the chaos build, seed 2, once,
    // in its one round. Elsewhere it spins in most rounds.
#if !defined(LOOM_CHAOS)
    EXPECT_GT(spun * 2, rounds) << "rounds whose sibling spun before the unlock";
#endif
    if (spun == 0) return;
    EXPECT_GT(st.spin_hits, 0u) << "spins " << st.spins;
    // A spinner surely spinning is handed the waiter: it takes it from its
    // own queue, no steal. (A waiter whose affinity is the sibling, about
    // half of them, goes there anyway; one queued here would be stolen
    // without the hand-over: about half the rounds. A stray steal of
    // something else is allowed for.)
    EXPECT_LT(stolen * 4, std::uint64_t(spun)) << "of " << spun;
  } else if (GetParam() == 0) {
    EXPECT_EQ(st.spins, 0u);
    EXPECT_GT(stolen, 0u) << "without a spin the sleeper is woken to steal the waiters queued here";
  }
}

// 0: no spin; 1,000,000 (1 s): the sibling is surely spinning when the
// waiter is woken; 20: the default.
INSTANTIATE_TEST_SUITE_P(SpinUs, SpinHandOver, testing::Values(0u, 20u, 1000000u));

// The only fibre of its cluster, woken from outside (a kernel thread's
// post: how an offloaded read comes back), runs on the processor it left,
// not on a sibling that spins: a cluster of one fibre does not spin, and a
// program that never creates a thread stays on its kernel thread (under
// the preload: perl's thread-locals in tls_real_programs). With a spin of
// up to 1 s, a spinning sibling would be looking at the queues whenever
// the post comes (it took the fibre in about 1 wake-up in 20 before).
TEST(StealSpin, AFibreWokenOntoItsIdleProcessorIsNotStolen) {
  SchedConfig cfg = with_stealing(true, 0);
  cfg.spin_us = 1000000;
  Cluster c(2, cfg);
  loom::FibreAttr attr;
  attr.cluster = &c;
  const int rounds = int(loom::test::scaled(2000));
  loom::Semaphore go;
  std::atomic<int> answered{0};
  std::atomic<bool> quit{false};
  int moved = 0;
  // Both processors asleep first: a processor's first look as it starts
  // steals from any busy sibling, idle loop or not.
  for (std::size_t i = 0; i < c.processors(); ++i)
    while (c.processor_stats(i).sleeps == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  loom::Fibre f(attr, [&] {
    for (int i = 0; i < rounds; ++i) {
      // (Compared with where it waited, not where it first ran: made from
      // outside, it may first run on a processor other than its home.)
      rt::Processor* left = rt::this_processor();
      go.acquire();  // the only fibre: its processor goes idle (and spins)
      if (rt::this_processor() != left) ++moved;
      answered.store(i + 1, std::memory_order_release);
    }
  });
  std::thread poster([&] {  // a kernel thread, not a processor
    for (int i = 0; i < rounds && !quit.load(); ++i) {
      spin_for(std::chrono::microseconds(i % 50));
      go.release();
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (answered.load(std::memory_order_acquire) <= i && std::chrono::steady_clock::now() < until) {
      }
    }
  });
  poster.join();
  if (answered.load() < rounds) {
    quit = true;
    for (int i = answered.load(); i < rounds; ++i) go.release();
  }
  f.join();
  EXPECT_EQ(answered.load(), rounds);
  EXPECT_EQ(moved, 0) << "of " << rounds << " wake-ups, run on the spinning sibling";
}

TEST(StealPolicy, UnknownNameFallsBackToTheDefault) {
  Cluster c(1, with_stealing(true, 0, "no-such-policy"));
  EXPECT_EQ(c.config().steal_policy, "longest-busy");
}

}  // namespace
