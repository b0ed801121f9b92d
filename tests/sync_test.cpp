// Semaphores, barriers and call_once (loom/sync.hpp), used by fibres across
// processor counts, and every primitive used by kernel threads that are not
// loom processors together with fibres. Mutexes and condition variables are
// in mutex_test.cpp, reader-writer locks in rwlock_test.cpp, fibre-local keys
// in key_test.cpp, timeouts in timer_test.cpp.
//
// Tests that need a strict order run on one processor, where scheduling is
// deterministic: a fibre runs until it blocks or yields, and the ready queue
// is FIFO.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.hpp"
#include "sync_test_util.hpp"

namespace {

using namespace std::chrono_literals;
using loom::Barrier;
using loom::BinarySemaphore;
using loom::Clock;
using loom::Cluster;
using loom::CondVar;
using loom::Fibre;
using loom::Mutex;
using loom::OnceFlag;
using loom::RWLock;
using loom::Semaphore;
using loom::test::Watchdog;
using loom::test::on;
using loom::test::run_in;
using loom::test::scaled_at_least;

// ---- Semaphore ----------------------------------------------------------------------

TEST(Semaphore, CountsAndTryForms) {
  Semaphore s(2);
  EXPECT_EQ(s.value(), 2u);
  EXPECT_TRUE(s.try_acquire());
  EXPECT_TRUE(s.try_acquire_for(1ms));
  EXPECT_FALSE(s.try_acquire());
  EXPECT_EQ(s.acquire_errno(loom::kNow), EAGAIN);
  EXPECT_EQ(s.acquire_errno(loom::deadline_after(1ms)), ETIMEDOUT);
  s.release();
  EXPECT_EQ(s.value(), 1u);
  EXPECT_EQ(s.acquire_errno(loom::kForever), 0);
  EXPECT_EQ(s.value(), 0u);
}

TEST(Semaphore, ReleasePastTheMaximum) {
  Semaphore full(Semaphore::kMax);
  EXPECT_EQ(full.release_errno(), EOVERFLOW);
  EXPECT_EQ(full.value(), Semaphore::kMax);
  Semaphore two(2, 2);
  EXPECT_EQ(two.release_errno(), EOVERFLOW);
  EXPECT_EQ(two.value(), 2u);
  BinarySemaphore b;
  EXPECT_EQ(b.value(), 0u);
  EXPECT_EQ(b.release_errno(), 0);
  EXPECT_EQ(b.release_errno(), 0);  // releases collapse
  EXPECT_EQ(b.value(), 1u);
  EXPECT_TRUE(b.try_acquire());
  EXPECT_FALSE(b.try_acquire());
  EXPECT_EQ(BinarySemaphore(true).value(), 1u);
}

// A release with a waiter hands it the unit: the count does not rise.
TEST(Semaphore, ReleaseHandsTheUnitToAWaiter) {
  Cluster c(1);
  run_in(c, [] {
    Semaphore s;
    bool got = false;
    Fibre waiter([&] {
      s.acquire();
      got = true;
    });
    loom::this_fibre::yield();  // the waiter runs and blocks
    EXPECT_FALSE(got);
    s.release();
    EXPECT_EQ(s.value(), 0u);
    waiter.join();
    EXPECT_TRUE(got);
    EXPECT_EQ(s.value(), 0u);
  });
}

// A waiter that timed out is gone: a later release raises the count, or
// wakes the waiter still queued, instead of vanishing with the departed one.
TEST(Semaphore, TimedOutWaiterLeavesNoTrace) {
  Watchdog dog;
  Cluster c(1);
  run_in(c, [] {
    Semaphore s;
    EXPECT_FALSE(s.try_acquire_for(2ms));
    s.release();
    EXPECT_EQ(s.value(), 1u);
    EXPECT_TRUE(s.try_acquire());

    bool got = false;
    Fibre patient([&] { got = s.try_acquire_for(10s); });
    Fibre hasty([&] { EXPECT_FALSE(s.try_acquire_for(5ms)); });
    loom::this_fibre::yield();  // both queue, the patient one first
    hasty.join();
    s.release();
    patient.join();
    EXPECT_TRUE(got) << "the release went to the waiter that had timed out";
    EXPECT_EQ(s.value(), 0u);
  });
}

TEST(Semaphore, PingPongAcrossClusters) {
  Cluster a(1), b(1);
  Semaphore ping, pong;
  const long rounds = scaled_at_least(10, 10000);
  Fibre fa(on(a), [&] {
    for (long i = 0; i < rounds; ++i) {
      ping.release();
      pong.acquire();
    }
  });
  Fibre fb(on(b), [&] {
    for (long i = 0; i < rounds; ++i) {
      ping.acquire();
      pong.release();
    }
  });
  fa.join();
  fb.join();
  EXPECT_EQ(ping.value(), 0u);
  EXPECT_EQ(pong.value(), 0u);
}

class SemaphoreP : public testing::TestWithParam<std::size_t> {};

TEST_P(SemaphoreP, ManyProducersAndConsumersConserveTheCount) {
  Watchdog dog;
  Cluster c(GetParam());
  const long per = scaled_at_least(10, 5000);
  const int producers = 3, consumers = 5;
  Semaphore s;
  std::atomic<long> taken{0};
  {
    std::vector<Fibre> v;
    for (int i = 0; i < consumers; ++i)
      v.emplace_back(on(c), [&] {
        for (long k = 0; k < per * producers / consumers; ++k) {
          s.acquire();
          taken.fetch_add(1);
        }
      });
    for (int i = 0; i < producers; ++i)
      v.emplace_back(on(c), [&] {
        for (long k = 0; k < per; ++k) {
          s.release();
          if (k % 16 == 0) loom::this_fibre::yield();
        }
      });
  }
  EXPECT_EQ(taken.load() + long(s.value()), per * producers);
}

INSTANTIATE_TEST_SUITE_P(Processors, SemaphoreP, testing::Values(1, 2, 4),
                         [](const testing::TestParamInfo<std::size_t>& i) { return std::to_string(i.param) + "p"; });

// ---- Barrier ------------------------------------------------------------------------------

class BarrierP : public testing::TestWithParam<std::size_t> {};

TEST_P(BarrierP, OneSerialReturnPerPhase) {
  Watchdog dog;
  Cluster c(GetParam());
  const int n = int(3 * GetParam() + 2);
  const long phases = scaled_at_least(5, 300);
  Barrier b{unsigned(n)};
  const auto np = static_cast<std::size_t>(phases);
  std::vector<std::atomic<int>> arrived(np), serial(np);
  std::atomic<int> left_early{0};
  {
    std::vector<Fibre> v;
    for (int f = 0; f < n; ++f)
      v.emplace_back(on(c), [&, f] {
        for (long p = 0; p < phases; ++p) {
          if ((p + f) % 3 == 0) loom::this_fibre::yield();
          arrived[std::size_t(p)].fetch_add(1);
          bool s = b.arrive_and_wait();
          if (arrived[std::size_t(p)].load() != n) left_early.fetch_add(1);
          if (s) serial[std::size_t(p)].fetch_add(1);
        }
      });
  }
  EXPECT_EQ(left_early.load(), 0) << "returns before the whole phase arrived";
  long wrong = 0;
  for (auto& s : serial) wrong += s.load() != 1;
  EXPECT_EQ(wrong, 0) << "phases without exactly one serial return";
}

INSTANTIATE_TEST_SUITE_P(Processors, BarrierP, testing::Values(1, 2, 4),
                         [](const testing::TestParamInfo<std::size_t>& i) { return std::to_string(i.param) + "p"; });

TEST(Barrier, CountMustBePositive) {
  EXPECT_THROW(Barrier(0), std::invalid_argument);
  Barrier one(1);
  EXPECT_TRUE(one.arrive_and_wait());
  EXPECT_TRUE(one.arrive_and_wait());
}

// ---- call_once ----------------------------------------------------------------------------

TEST(Once, ManyFibresRunItOnceAndWaitForIt) {
  Watchdog dog;
  Cluster c(4);
  OnceFlag flag;
  std::atomic<int> runs{0}, returned_before_done{0};
  std::atomic<bool> done{false};
  {
    std::vector<Fibre> v;
    for (int i = 0; i < 64; ++i)
      v.emplace_back(on(c), [&] {
        loom::call_once(flag, [&] {
          runs.fetch_add(1);
          loom::this_fibre::sleep_for(5ms);
          done.store(true);
        });
        if (!done.load()) returned_before_done.fetch_add(1);
      });
  }
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(returned_before_done.load(), 0);
  loom::call_once(flag, [&] { runs.fetch_add(1); });
  EXPECT_EQ(runs.load(), 1);
}

TEST(Once, AnExceptionLetsALaterCallRunIt) {
  OnceFlag flag;
  int runs = 0;
  EXPECT_THROW(loom::call_once(flag, [] { throw std::runtime_error("first try fails"); }), std::runtime_error);
  loom::call_once(flag, [&] { ++runs; });
  loom::call_once(flag, [&] { ++runs; });
  EXPECT_EQ(runs, 1);
}

// Callers waiting while the first one's function throws: one of them runs it.
TEST(Once, WaitersRetryAfterTheRunnerThrows) {
  Watchdog dog;
  Cluster c(2);
  OnceFlag flag;
  Semaphore running;
  std::atomic<int> runs{0}, threw{0};
  Fibre first(on(c), [&] {
    try {
      loom::call_once(flag, [&] {
        running.release();
        loom::this_fibre::sleep_for(10ms);
        throw std::runtime_error("fails");
      });
    } catch (const std::runtime_error&) {
      threw.fetch_add(1);
    }
  });
  running.acquire();
  {
    std::vector<Fibre> v;
    for (int i = 0; i < 8; ++i) v.emplace_back(on(c), [&] { loom::call_once(flag, [&] { runs.fetch_add(1); }); });
  }
  first.join();
  EXPECT_EQ(threw.load(), 1);
  EXPECT_EQ(runs.load(), 1);
}

// ---- kernel threads that are not loom processors, with fibres -----------------------------

TEST(KernelThread, BlocksOnASemaphoreAFibreReleases) {
  Watchdog dog;
  Cluster c(1);
  Semaphore s;
  std::atomic<bool> released{false};
  std::thread t([&] {
    EXPECT_EQ(loom::this_fibre::processor_index(), -1);
    s.acquire();
    EXPECT_TRUE(released.load()) << "acquired before the release";
  });
  run_in(c, [&] {
    loom::this_fibre::sleep_for(20ms);
    released.store(true);
    s.release();
  });
  t.join();
  EXPECT_EQ(s.value(), 0u);
}

TEST(KernelThread, ReleasesASemaphoreAFibreBlocksOn) {
  Watchdog dog;
  Cluster c(1);
  Semaphore s;
  std::atomic<bool> released{false};
  Fibre f(on(c), [&] {
    s.acquire();
    EXPECT_TRUE(released.load()) << "acquired before the release";
  });
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    released.store(true);
    s.release();
  });
  f.join();
  t.join();
  EXPECT_EQ(s.value(), 0u);
}

TEST(KernelThread, PingPongWithAFibre) {
  Watchdog dog;
  Cluster c(1);
  Semaphore ping, pong;
  const long rounds = scaled_at_least(10, 5000);
  std::thread t([&] {
    for (long i = 0; i < rounds; ++i) {
      ping.acquire();
      pong.release();
    }
  });
  run_in(c, [&] {
    for (long i = 0; i < rounds; ++i) {
      ping.release();
      pong.acquire();
    }
  });
  t.join();
  EXPECT_EQ(ping.value() + pong.value(), 0u);
}

TEST(KernelThread, CondVarBarrierAndRWLockWithFibres) {
  Watchdog dog;
  Cluster c(2);
  Mutex m;
  CondVar cv;
  long turn = 0;  // guarded by m: even = a thread's turn, odd = a fibre's
  const long rounds = scaled_at_least(10, 2000);
  Barrier b(4);
  RWLock rw;
  long data = 0;
  std::atomic<int> serial{0}, bad{0};
  auto body = [&](long parity) {
    for (long i = 0; i < rounds; ++i) {
      std::lock_guard<Mutex> g(m);
      cv.wait(m, [&] { return turn % 2 == parity; });
      ++turn;
      cv.notify_all();
    }
    if (b.arrive_and_wait()) serial.fetch_add(1);
    for (long i = 0; i < rounds; ++i) {
      if (i % 3 == 0) {
        std::lock_guard<RWLock> g(rw);
        ++data;
      } else {
        rw.lock_shared();
        long seen = data;
        loom::this_fibre::yield();
        if (seen != data) bad.fetch_add(1);
        rw.unlock_shared();
      }
    }
  };
  {
    std::thread t1(body, 0), t2(body, 0);
    Fibre f1(on(c), body, 1), f2(on(c), body, 1);
    t1.join();
    t2.join();
  }
  EXPECT_EQ(turn, 4 * rounds);
  EXPECT_EQ(serial.load(), 1);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(data, 4 * ((rounds + 2) / 3));
}

}  // namespace
