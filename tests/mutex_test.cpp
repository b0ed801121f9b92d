// Mutexes of every policy x type, and condition variables over each policy
// (loom/sync.hpp), across processor counts and with kernel threads.
//
// Tests that need a strict order run on one processor, where scheduling is
// deterministic: a fibre runs until it blocks or yields, and the ready queue
// is FIFO.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <deque>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "loom/loom.hpp"
#include "sync_test_util.hpp"

namespace {

using namespace std::chrono_literals;
using loom::Clock;
using loom::Cluster;
using loom::CondVar;
using loom::Fibre;
using loom::Mutex;
using loom::MutexPolicy;
using loom::MutexType;
using loom::Semaphore;
using loom::test::Watchdog;
using loom::test::kPolicies;
using loom::test::kTypes;
using loom::test::on;
using loom::test::run_in;
using loom::test::scaled_at_least;
using loom::test::to_string;

template <class F>
int error_of(F f) {
  try {
    f();
  } catch (const std::system_error& e) {
    return e.code().value();
  }
  return 0;
}


// ---- Mutex: every policy x type ---------------------------------------------------------

struct MutexVariant {
  MutexPolicy policy;
  MutexType type;
  std::size_t processors;
};

class MutexP : public testing::TestWithParam<MutexVariant> {};

// More fibres than processors; a yield inside the critical section makes
// others contend while it is held; every way of locking takes part.
TEST_P(MutexP, NoLostUpdatesUnderContention) {
  Watchdog dog;
  const MutexVariant v = GetParam();
  Cluster c(v.processors);
  Mutex m(v.type, v.policy);
  EXPECT_EQ(m.type(), v.type);
  EXPECT_EQ(m.policy(), v.policy);
  const int fibres = int(3 * v.processors + 2);
  const long iters = scaled_at_least(20, 1000);
  long counter = 0;  // guarded by m
  std::atomic<int> inside{0}, overlaps{0};
  {
    std::vector<Fibre> fs;
    for (int f = 0; f < fibres; ++f)
      fs.emplace_back(on(c), [&, f] {
        for (long i = 0; i < iters; ++i) {
          switch ((i + f) % 4) {
            case 0: m.lock(); break;
            case 1:
              while (!m.try_lock()) loom::this_fibre::yield();
              break;
            case 2:
              while (!m.try_lock_for(1ms)) {
              }
              break;
            default: EXPECT_EQ(m.lock_errno(loom::kForever), 0); break;
          }
          const bool nest = v.type == MutexType::recursive && i % 3 == 0;
          if (nest) m.lock();
          if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
          long seen = counter;
          if (i % 4 == 0) loom::this_fibre::yield();
          counter = seen + 1;
          inside.fetch_sub(1);
          if (nest) m.unlock();
          m.unlock();
        }
      });
  }
  EXPECT_EQ(counter, fibres * iters);
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

std::vector<MutexVariant> mutex_variants() {
  std::vector<MutexVariant> v;
  for (MutexPolicy p : kPolicies)
    for (MutexType t : kTypes)
      for (std::size_t n : {1, 2, 4}) v.push_back({p, t, n});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Variants, MutexP, testing::ValuesIn(mutex_variants()),
                         [](const testing::TestParamInfo<MutexVariant>& i) {
                           return std::string(loom::to_string(i.param.policy)) + "_" + to_string(i.param.type) + "_" +
                                  std::to_string(i.param.processors) + "p";
                         });

class MutexPolicyP : public testing::TestWithParam<MutexPolicy> {};

TEST_P(MutexPolicyP, ErrorCheckingMutexReportsMisuse) {
  Cluster c(2);
  Mutex m(MutexType::errorcheck, GetParam());
  run_in(c, [&] {
    EXPECT_EQ(m.unlock_errno(), EPERM) << "unlocked while free";
    m.lock();
    EXPECT_TRUE(m.held_by_caller());
    EXPECT_EQ(m.lock_errno(loom::kForever), EDEADLK);
    EXPECT_EQ(m.lock_errno(loom::deadline_after(1ms)), EDEADLK);
    EXPECT_EQ(error_of([&] { m.lock(); }), EDEADLK);
    run_in(c, [&] {
      EXPECT_FALSE(m.held_by_caller());
      EXPECT_EQ(m.unlock_errno(), EPERM);
      EXPECT_EQ(error_of([&] { m.unlock(); }), EPERM);
      EXPECT_FALSE(m.try_lock());
      EXPECT_EQ(m.lock_errno(loom::kNow), EBUSY);
    });
    EXPECT_TRUE(m.held_by_caller()) << "a non-owner's unlock released it";
    EXPECT_EQ(m.unlock_errno(), 0);
    EXPECT_EQ(m.unlock_errno(), EPERM);
  });
  EXPECT_TRUE(m.try_lock());  // free for anyone, here main's fibre
  m.unlock();
}

TEST_P(MutexPolicyP, RecursiveMutexNests) {
  Cluster c(2);
  Mutex m(MutexType::recursive, GetParam());
  auto other_cannot_take_it = [&] {
    run_in(c, [&] {
      EXPECT_FALSE(m.try_lock());
      EXPECT_EQ(m.lock_errno(loom::kNow), EBUSY);
      EXPECT_EQ(m.unlock_errno(), EPERM);
    });
  };
  run_in(c, [&] {
    m.lock();
    EXPECT_TRUE(m.try_lock());
    EXPECT_TRUE(m.try_lock_until(Clock::now() + 1ms));
    for (int level = 3; level > 0; --level) {
      other_cannot_take_it();
      EXPECT_TRUE(m.held_by_caller()) << "at level " << level;
      m.unlock();
    }
    EXPECT_FALSE(m.held_by_caller());
    EXPECT_EQ(m.unlock_errno(), EPERM);
  });
  run_in(c, [&] {
    EXPECT_TRUE(m.try_lock()) << "still held after three unlocks of three locks";
    m.unlock();
  });
}

TEST_P(MutexPolicyP, HeldNormalMutexRefusesTryForms) {
  Cluster c(2);
  Mutex m(GetParam());
  EXPECT_EQ(m.type(), MutexType::normal);
  run_in(c, [&] {
    m.lock();
    EXPECT_TRUE(m.held_by_caller());
    // Relocked by its owner with a deadline, a normal mutex can only time out.
    EXPECT_EQ(m.lock_errno(loom::deadline_after(2ms)), ETIMEDOUT);
    run_in(c, [&] {
      EXPECT_FALSE(m.held_by_caller());
      EXPECT_FALSE(m.try_lock());
      EXPECT_EQ(m.lock_errno(loom::kNow), EBUSY);
      EXPECT_EQ(m.lock_errno(loom::deadline_after(2ms)), ETIMEDOUT);
      EXPECT_FALSE(m.try_lock_for(2ms));
    });
    m.unlock();
  });
}

// A blocked locker gets the mutex once its holder unlocks, not before.
TEST_P(MutexPolicyP, LockWaitsForUnlock) {
  Watchdog dog;
  Cluster c(2);
  Mutex m(GetParam());
  std::atomic<bool> released{false}, acquired_early{false};
  Semaphore held;
  Fibre holder(on(c), [&] {
    m.lock();
    held.release();
    loom::this_fibre::sleep_for(10ms);
    released.store(true);
    m.unlock();
  });
  held.acquire();
  Fibre locker(on(c), [&] {
    m.lock();
    if (!released.load()) acquired_early.store(true);
    m.unlock();
  });
  holder.join();
  locker.join();
  EXPECT_FALSE(acquired_early.load());
}

// A locker that timed out is off the queue: the unlock goes to one still
// waiting (under baton, a handover to the departed one would lose the lock).
TEST_P(MutexPolicyP, TimedOutLockerDoesNotKeepTheMutex) {
  Watchdog dog;
  Cluster c(1);
  Mutex m(GetParam());
  run_in(c, [&] {
    m.lock();
    bool patient_got = false;
    Fibre patient([&] { patient_got = m.try_lock_for(10s) && (m.unlock(), true); });
    Fibre hasty([&] { EXPECT_FALSE(m.try_lock_for(5ms)); });
    loom::this_fibre::yield();  // both queue
    hasty.join();
    m.unlock();
    patient.join();
    EXPECT_TRUE(patient_got);
    Fibre late([&] { EXPECT_FALSE(m.try_lock_for(2ms)) << "still held"; });
    m.lock();
    late.join();
    m.unlock();
  });
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

// A Mutex shared by kernel threads (which block on a futex) and fibres.
TEST_P(MutexPolicyP, SharedWithKernelThreadsKeepsMutualExclusion) {
  Watchdog dog;
  Cluster c(2);
  Mutex m(GetParam());
  const long iters = scaled_at_least(20, 2000);
  long counter = 0;
  std::atomic<int> inside{0}, overlaps{0};
  auto work = [&] {
    for (long i = 0; i < iters; ++i) {
      std::lock_guard<Mutex> g(m);
      if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
      long seen = counter;
      if (i % 8 == 0) loom::this_fibre::yield();  // sched_yield on a kernel thread
      counter = seen + 1;
      inside.fetch_sub(1);
    }
  };
  {
    std::vector<std::thread> threads;
    std::vector<Fibre> fibres;
    for (int i = 0; i < 2; ++i) threads.emplace_back(work);
    for (int i = 0; i < 6; ++i) fibres.emplace_back(on(c), work);
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(counter, 8 * iters);
  EXPECT_EQ(overlaps.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Policies, MutexPolicyP, testing::ValuesIn(kPolicies),
                         [](const testing::TestParamInfo<MutexPolicy>& i) { return loom::to_string(i.param); });

TEST(Mutex, PolicyNames) {
  EXPECT_STREQ(loom::to_string(MutexPolicy::blocking), "blocking");
  EXPECT_STREQ(loom::to_string(MutexPolicy::spin), "spin");
  EXPECT_STREQ(loom::to_string(MutexPolicy::baton), "baton");
  EXPECT_STREQ(loom::to_string(MutexPolicy::hybrid), "hybrid");
  EXPECT_EQ(Mutex().policy(), loom::default_mutex_policy());
}

// Baton passing: unlock hands the mutex to the first waiter, so with one
// processor fibres acquire it in exactly the order they queued, and the
// unlocker cannot barge back in ahead of them.
TEST(MutexBaton, WaitersAcquireInQueueOrder) {
  Watchdog dog;
  loom::SchedConfig strict;
  strict.handoff_us = 0;  // no spare beside the one processor: strict order
  Cluster c(1, strict);
  Mutex m(MutexPolicy::baton);
  const int n = 8, rounds = 3;
  std::vector<int> order;  // one processor: no data race
  run_in(c, [&] {
    m.lock();
    std::vector<Fibre> v;
    for (int i = 0; i < n; ++i)
      v.emplace_back([&, i] {
        for (int r = 0; r < rounds; ++r) {
          m.lock();
          order.push_back(i);
          m.unlock();  // and relock at once: back of the queue
        }
      });
    loom::this_fibre::yield();  // each runs until it blocks in lock()
    m.unlock();                 // to fibre 0, which is not running yet
    m.lock();                   // queues behind 1 .. n-1
    order.push_back(-1);
    m.unlock();
  });
  std::vector<int> expected;
  for (int i = 0; i < n; ++i) expected.push_back(i);
  expected.push_back(-1);
  for (int r = 1; r < rounds; ++r)
    for (int i = 0; i < n; ++i) expected.push_back(i);
  EXPECT_EQ(order, expected);
}

// Hybrid: unlock hands the mutex to a waiter queued for 100 us or more, and
// lets the unlocker barge past a newer one. A waiter's queueing time is read
// only for this policy, so both halves check that it is read.
TEST(MutexHybrid, HandsOverOnlyToALongWaiter) {
  Watchdog dog;
  Cluster c(1);
  Mutex m(MutexPolicy::hybrid);
  // One attempt: the waiter queues, the unlocker waits `hold`, unlocks and
  // tries to take the mutex straight back.
  auto barged = [&](std::chrono::microseconds hold) {
    bool took = false;
    run_in(c, [&] {
      m.lock();
      Fibre waiter([&] {
        m.lock();
        m.unlock();
      });
      loom::this_fibre::yield();  // the waiter runs until it queues in lock()
      if (hold.count()) loom::this_fibre::sleep_for(hold);
      m.unlock();
      took = m.try_lock();
      if (took) m.unlock();
      waiter.join();
    });
    return took;
  };
  EXPECT_FALSE(barged(2ms)) << "a waiter queued for 2 ms was not handed the mutex";
  // A fresh waiter is passed by; a preempted attempt may take over 100 us,
  // so one barge in 20 is enough.
  bool any = false;
  for (int i = 0; i < 20 && !any; ++i) any = barged(0us);
  EXPECT_TRUE(any) << "the unlocker never barged past a waiter queued for microseconds";
}

// ---- CondVar ------------------------------------------------------------------------------

class CondVarP : public testing::TestWithParam<loom::test::PolicyOnProcessors> {};

// Several producers and consumers through a buffer of 4, signalled with
// notify_one only: a lost wake-up stalls it (the watchdog names it), a
// double hand-out shows in the counts.
TEST_P(CondVarP, BoundedBufferLosesNoWakeups) {
  Watchdog dog;
  Cluster c(GetParam().processors);
  Mutex m(GetParam().policy);
  CondVar not_full, not_empty;
  std::deque<long> buf;  // guarded by m
  const std::size_t cap = 4;
  const int producers = 3, consumers = 3;
  const long per = scaled_at_least(20, 5000);
  const long total = per * producers;
  long taken = 0;  // guarded by m
  std::vector<std::atomic<int>> seen(static_cast<std::size_t>(total));
  {
    std::vector<Fibre> v;
    for (int p = 0; p < producers; ++p)
      v.emplace_back(on(c), [&, p] {
        for (long k = 0; k < per; ++k) {
          std::lock_guard<Mutex> g(m);
          not_full.wait(m, [&] { return buf.size() < cap; });
          buf.push_back(p * per + k);
          not_empty.notify_one();
        }
      });
    for (int q = 0; q < consumers; ++q)
      v.emplace_back(on(c), [&] {
        for (;;) {
          std::lock_guard<Mutex> g(m);
          not_empty.wait(m, [&] { return !buf.empty() || taken == total; });
          if (buf.empty()) return;
          long item = buf.front();
          buf.pop_front();
          seen[std::size_t(item)].fetch_add(1);
          if (++taken == total) not_empty.notify_all();  // the others leave
          not_full.notify_one();
        }
      });
  }
  EXPECT_EQ(taken, total);
  long wrong = 0;
  for (auto& s : seen) wrong += s.load() != 1;
  EXPECT_EQ(wrong, 0) << "items consumed other than exactly once";
}

// After a timeout the caller holds the mutex again, whatever its type.
TEST_P(CondVarP, WaitUntilTimesOutHoldingTheMutex) {
  Cluster c(GetParam().processors);
  for (MutexType type : kTypes) {
    Mutex m(type, GetParam().policy);
    CondVar cv;
    run_in(c, [&] {
      m.lock();
      auto t = Clock::now() + 5ms;
      EXPECT_FALSE(cv.wait_until(m, t)) << to_string(type);
      EXPECT_GE(Clock::now(), t) << to_string(type) << ": returned early";
      EXPECT_TRUE(m.held_by_caller()) << to_string(type);
      run_in(c, [&] { EXPECT_FALSE(m.try_lock()) << to_string(type) << ": free after the timeout"; });
      EXPECT_FALSE(cv.wait_for(m, 1ms));
      EXPECT_EQ(cv.wait_errno(m, loom::deadline_after(1ms)), ETIMEDOUT);
      EXPECT_TRUE(m.held_by_caller());
      EXPECT_EQ(m.unlock_errno(), 0) << to_string(type);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, CondVarP, testing::ValuesIn(loom::test::policies_on_1_2_4()),
                         loom::test::policy_on_processors_name);

TEST(CondVar, NotifyAllWakesEveryWaiter) {
  Watchdog dog;
  Cluster c(2);
  Mutex m;
  CondVar cv;
  const int n = 20;
  int entered = 0;     // guarded by m
  bool notified = false;  // guarded by m
  std::atomic<int> woken{0}, timed_out{0}, before_notify{0};
  std::vector<Fibre> v;
  for (int i = 0; i < n; ++i)
    v.emplace_back(on(c), [&] {
      std::lock_guard<Mutex> g(m);
      ++entered;
      // No predicate loop: one notify_all must be enough for everyone.
      if (!cv.wait_until(m, Clock::now() + 10s)) timed_out.fetch_add(1);
      if (!notified) before_notify.fetch_add(1);
      woken.fetch_add(1);
    });
  for (bool all_in = false; !all_in;) {  // until every waiter released m inside wait_until
    {
      std::lock_guard<Mutex> g(m);
      if ((all_in = entered == n)) {
        notified = true;
        cv.notify_all();
      }
    }
    if (!all_in) loom::this_fibre::sleep_for(1ms);
  }
  v.clear();
  EXPECT_EQ(woken.load(), n);
  EXPECT_EQ(timed_out.load(), 0) << "waiters that notify_all left asleep";
  EXPECT_EQ(before_notify.load(), 0) << "spurious wake-ups";
}

// A notify with nobody waiting is not remembered.
TEST(CondVar, NotifyWithoutWaitersIsNotKept) {
  Cluster c(1);
  Mutex m;
  CondVar cv;
  cv.notify_one();
  cv.notify_all();
  run_in(c, [&] {
    std::lock_guard<Mutex> g(m);
    EXPECT_FALSE(cv.wait_for(m, 2ms));
  });
}

// A waiter that timed out does not swallow a later notify_one meant for one
// still waiting.
TEST(CondVar, TimedOutWaiterDoesNotSwallowANotify) {
  Watchdog dog;
  Cluster c(1);
  Mutex m;
  CondVar cv;
  run_in(c, [&] {
    bool patient = false;
    Fibre p([&] {
      std::lock_guard<Mutex> g(m);
      patient = cv.wait_for(m, 10s);
    });
    Fibre h([&] {
      std::lock_guard<Mutex> g(m);
      EXPECT_FALSE(cv.wait_for(m, 5ms));
    });
    loom::this_fibre::yield();  // both wait
    h.join();
    cv.notify_one();
    p.join();
    EXPECT_TRUE(patient) << "the notify went to the waiter that had timed out";
  });
}

TEST(CondVar, WaitingWithoutTheMutexIsRefused) {
  for (MutexType type : {MutexType::errorcheck, MutexType::recursive}) {
    Mutex m(type);
    CondVar cv;
    EXPECT_EQ(cv.wait_errno(m, loom::deadline_after(1ms)), EPERM) << to_string(type);
  }
}

}  // namespace
