// Timeouts (loom/sync.hpp): the race between a signal and a timeout, timed
// waits that never end before their deadline, and timers that fire on idle
// and on busy processors.
//
// The machine running these is shared and noisy, so nothing here asserts
// that a wait is fast: only that it does not end before its deadline, and
// ends within kLate after it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "loom/loom.hpp"
#include "sync_test_util.hpp"

namespace {

using namespace std::chrono_literals;
using loom::Clock;
using loom::Cluster;
using loom::CondVar;
using loom::Fibre;
using loom::FibreAttr;
using loom::Mutex;
using loom::MutexPolicy;
using loom::RWLock;
using loom::Semaphore;
using loom::test::Watchdog;
using loom::test::kPolicies;
using loom::test::on;
using loom::test::scaled_at_least;
using std::chrono::nanoseconds;

// How late a wait may end on a shared 2-core machine before we call it a bug.
constexpr auto kLate = 200ms;

long long ns(nanoseconds d) { return static_cast<long long>(d.count()); }

// A wait meant to end at `deadline` ended at `after`: not early, not very late.
void expect_on_time(Clock::time_point deadline, Clock::time_point after, const std::string& what) {
  EXPECT_GE(ns(after - deadline), 0) << what << ": returned " << ns(deadline - after) << " ns before its deadline";
  EXPECT_LT(ns(after - deadline), ns(kLate)) << what << ": returned " << ns(after - deadline) / 1000
                                             << " us after its deadline";
}

// ---- the signal/timeout race ------------------------------------------------------

// Waiters block on a semaphore until deadline D while a releaser calls
// release() at D, so the timer and the signal arrive together. Whoever wins,
// each waiter must return exactly once, and a release that lost to a timeout
// must stay in the count: successes + value() == releases.
class SignalTimeoutRace : public testing::TestWithParam<std::size_t> {};

TEST_P(SignalTimeoutRace, EveryWaiterWakesOnceAndTheCountIsConserved) {
  Watchdog dog;
  Cluster c(GetParam());
  Cluster remote(1);
  const long fibres = scaled_at_least(6, 2000);
  const long per_bucket = std::clamp(fibres / 3, 1L, 20L);
  const long nbuckets = (fibres + per_bucket - 1) / per_bucket;
  struct Bucket {
    Semaphore sem;
    Clock::time_point deadline;
    long waiters = 0;
    long releases = 0;
    std::atomic<long> successes{0}, timeouts{0}, early{0};
  };
  std::vector<Bucket> buckets(static_cast<std::size_t>(nbuckets));
  // Late enough that every waiter is blocked first (one that is not just
  // times out at once, which is still a valid outcome).
  const auto start = Clock::now() + 100ms + std::chrono::microseconds(50 * fibres);
  for (long k = 0; k < nbuckets; ++k) {
    Bucket& b = buckets[std::size_t(k)];
    b.deadline = start + k * 500us;
    b.waiters = std::min(per_bucket, fibres - k * per_bucket);
    switch ((k / 3) % 3) {  // as many releases as waiters, fewer, more
      case 0: b.releases = b.waiters; break;
      case 1: b.releases = std::max(1L, b.waiters / 2); break;
      default: b.releases = b.waiters + 2; break;
    }
  }

  Semaphore gate, all_back;
  std::atomic<bool> gate_open{false};
  std::atomic<long> back{0}, strays{0};
  std::vector<Fibre> waiters;
  waiters.reserve(std::size_t(fibres));
  for (long k = 0; k < nbuckets; ++k)
    for (long i = 0; i < buckets[std::size_t(k)].waiters; ++i)
      waiters.emplace_back(on(c), [&, k] {
        Bucket& b = buckets[std::size_t(k)];
        bool got = b.sem.try_acquire_until(b.deadline);
        auto after = Clock::now();
        if (got) {
          b.successes.fetch_add(1);
        } else {
          b.timeouts.fetch_add(1);
          if (after < b.deadline) b.early.fetch_add(1);
        }
        if (back.fetch_add(1) + 1 == fibres) all_back.release();
        // A second wake-up for the first wait would end this one early.
        gate.acquire();
        if (!gate_open.load()) strays.fetch_add(1);
      });

  // Buckets k % 3 == 0, 1, 2 are released by a fibre of the same cluster, a
  // fibre of another cluster and a kernel thread that is not a processor.
  auto release_bucket = [&](long k) {
    Bucket& b = buckets[std::size_t(k)];
    for (long r = 0; r < b.releases; ++r) b.sem.release();
  };
  Fibre local(on(c), [&] {
    for (long k = 0; k < nbuckets; k += 3) {
      loom::this_fibre::sleep_until(buckets[std::size_t(k)].deadline);
      release_bucket(k);
    }
  });
  Fibre far(on(remote), [&] {
    for (long k = 1; k < nbuckets; k += 3) {
      loom::this_fibre::sleep_until(buckets[std::size_t(k)].deadline);
      release_bucket(k);
    }
  });
  std::thread kernel([&] {
    for (long k = 2; k < nbuckets; k += 3) {
      auto d = buckets[std::size_t(k)].deadline;
      std::this_thread::sleep_until(d - 100us);
      while (Clock::now() < d) {
      }
      release_bucket(k);
    }
  });

  all_back.acquire();
  gate_open.store(true);
  for (long i = 0; i < fibres; ++i) gate.release();
  waiters.clear();
  local.join();
  far.join();
  kernel.join();

  long successes = 0, timeouts = 0;
  for (long k = 0; k < nbuckets; ++k) {
    Bucket& b = buckets[std::size_t(k)];
    successes += b.successes.load();
    timeouts += b.timeouts.load();
    EXPECT_EQ(b.successes.load() + b.timeouts.load(), b.waiters) << "bucket " << k << ": waiters that returned";
    EXPECT_EQ(b.successes.load() + long(b.sem.value()), b.releases)
        << "bucket " << k << ": successes + value() != releases (a release was lost or counted twice)";
    EXPECT_EQ(b.early.load(), 0) << "bucket " << k << ": timeouts before the deadline";
  }
  EXPECT_EQ(successes + timeouts, fibres);
  EXPECT_EQ(strays.load(), 0) << "waiters woken a second time after their timed wait returned";
  RecordProperty("successes", std::to_string(successes));
  RecordProperty("timeouts", std::to_string(timeouts));
}

INSTANTIATE_TEST_SUITE_P(Processors, SignalTimeoutRace, testing::Values(1, 2, 4, 8),
                         [](const testing::TestParamInfo<std::size_t>& i) { return std::to_string(i.param) + "p"; });

// The same race for a mutex (unlock at the deadline of timed lockers: under
// the baton policy ownership is handed to a waiter that may be timing out)
// and for a condition variable (notify at the deadline of timed waiters).
class TimeoutRace : public testing::TestWithParam<loom::test::PolicyOnProcessors> {};

TEST_P(TimeoutRace, MutexUnlockedAtTheDeadlineIsNeitherLostNorShared) {
  Watchdog dog;
  Cluster c(GetParam().processors);
  const long rounds = scaled_at_least(3, 60);
  const int per_round = 6;
  struct Round {
    explicit Round(MutexPolicy p) : m(p) {}
    Mutex m;
    Clock::time_point deadline;
    std::atomic<bool> inside{false};
    std::atomic<long> successes{0}, timeouts{0}, early{0}, overlaps{0};
  };
  std::vector<std::unique_ptr<Round>> r;
  std::vector<Fibre> fibres;
  Semaphore locked;
  const auto start = Clock::now() + 50ms + std::chrono::microseconds(200 * rounds);
  for (long k = 0; k < rounds; ++k) {
    r.push_back(std::make_unique<Round>(GetParam().policy));
    r.back()->deadline = start + k * 1ms;
    fibres.emplace_back(on(c), [&locked, &rk = *r.back()] {
      rk.m.lock();
      locked.release();
      loom::this_fibre::sleep_until(rk.deadline);
      rk.m.unlock();
    });
  }
  for (long k = 0; k < rounds; ++k) locked.acquire();  // every holder holds its mutex
  for (long k = 0; k < rounds; ++k)
    for (int i = 0; i < per_round; ++i)
      fibres.emplace_back(on(c), [&rk = *r[std::size_t(k)]] {
        if (rk.m.try_lock_until(rk.deadline)) {
          if (rk.inside.exchange(true)) rk.overlaps.fetch_add(1);
          loom::this_fibre::yield();
          rk.inside.store(false);
          rk.m.unlock();
          rk.successes.fetch_add(1);
        } else {
          if (Clock::now() < rk.deadline) rk.early.fetch_add(1);
          rk.timeouts.fetch_add(1);
        }
      });
  fibres.clear();
  for (long k = 0; k < rounds; ++k) {
    Round& rk = *r[std::size_t(k)];
    EXPECT_EQ(rk.successes.load() + rk.timeouts.load(), per_round) << "round " << k;
    EXPECT_EQ(rk.overlaps.load(), 0) << "round " << k << ": two owners at once";
    EXPECT_EQ(rk.early.load(), 0) << "round " << k << ": timeouts before the deadline";
    // Ownership handed to a waiter that had timed out would be lost here.
    EXPECT_TRUE(rk.m.try_lock()) << "round " << k << ": the mutex stayed locked after every fibre left";
    if (rk.m.held_by_caller()) rk.m.unlock();
  }
}

TEST_P(TimeoutRace, CondVarNotifiedAtTheDeadlineReturnsOnceHoldingTheMutex) {
  Watchdog dog;
  Cluster c(GetParam().processors);
  const long rounds = scaled_at_least(3, 60);
  const int per_round = 6;
  struct Round {
    explicit Round(MutexPolicy p) : m(p) {}
    Mutex m;
    CondVar cv;
    Clock::time_point deadline;
    bool inside = false;  // guarded by m
    std::atomic<long> returned{0}, not_held{0}, early{0}, overlaps{0}, waiting{0};
  };
  std::vector<std::unique_ptr<Round>> r;
  std::vector<Fibre> fibres;
  const auto start = Clock::now() + 50ms + std::chrono::microseconds(200 * rounds);
  for (long k = 0; k < rounds; ++k) {
    r.push_back(std::make_unique<Round>(GetParam().policy));
    r.back()->deadline = start + k * 1ms;
  }
  for (long k = 0; k < rounds; ++k)
    for (int i = 0; i < per_round; ++i)
      fibres.emplace_back(on(c), [&rk = *r[std::size_t(k)]] {
        rk.m.lock();
        rk.waiting.fetch_add(1);
        bool signalled = rk.cv.wait_until(rk.m, rk.deadline);
        if (!rk.m.held_by_caller()) rk.not_held.fetch_add(1);
        if (!signalled && Clock::now() < rk.deadline) rk.early.fetch_add(1);
        if (rk.inside) rk.overlaps.fetch_add(1);
        rk.inside = true;
        loom::this_fibre::yield();
        rk.inside = false;
        rk.returned.fetch_add(1);
        rk.m.unlock();
      });
  for (long k = 0; k < rounds; ++k)
    fibres.emplace_back(on(c), [&rk = *r[std::size_t(k)], k] {
      loom::this_fibre::sleep_until(rk.deadline);
      if (k % 2) {
        std::lock_guard<Mutex> g(rk.m);
        rk.cv.notify_all();
      } else {  // without the mutex, one at a time
        for (int i = 0; i < per_round; ++i) rk.cv.notify_one();
      }
    });
  fibres.clear();
  for (long k = 0; k < rounds; ++k) {
    Round& rk = *r[std::size_t(k)];
    EXPECT_EQ(rk.returned.load(), per_round) << "round " << k;
    EXPECT_EQ(rk.not_held.load(), 0) << "round " << k << ": wait returned without the mutex";
    EXPECT_EQ(rk.overlaps.load(), 0) << "round " << k;
    EXPECT_EQ(rk.early.load(), 0) << "round " << k << ": timeouts before the deadline";
    EXPECT_TRUE(rk.m.try_lock()) << "round " << k;
    if (rk.m.held_by_caller()) rk.m.unlock();
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, TimeoutRace, testing::ValuesIn(loom::test::policies_on_1_2_4()),
                         loom::test::policy_on_processors_name);

// ---- timed waits never end early -------------------------------------------------

// One kind of timed wait that is bound to time out: the object it waits on
// is held by a fibre of the default cluster for the wait's whole life.
struct TimedWait {
  virtual ~TimedWait() = default;
  // true: it did not time out.
  virtual bool until(Clock::time_point t) = 0;
  virtual bool for_(nanoseconds d) = 0;
  // The errno form; ETIMEDOUT expected. has_errno false: there is none.
  virtual int with_errno(loom::Deadline) { return ETIMEDOUT; }
  bool has_errno = true;
  int now_code = 0;  // what the errno form returns for kNow (0: not checked)
};

// Holds something (acquire/release run on a fibre of the default cluster)
// from construction to destruction.
class Holder {
 public:
  Holder(std::function<void()> acquire, std::function<void()> release)
      : fibre_([this, acquire, release] {
          acquire();
          held_.release();
          done_.acquire();
          release();
        }) {
    held_.acquire();
  }
  ~Holder() {
    done_.release();
    fibre_.join();
  }

 private:
  Semaphore held_, done_;
  Fibre fibre_;
};

struct SemaphoreWait : TimedWait {
  SemaphoreWait() { now_code = EAGAIN; }
  Semaphore s;
  bool until(Clock::time_point t) override { return s.try_acquire_until(t); }
  bool for_(nanoseconds d) override { return s.try_acquire_for(d); }
  int with_errno(loom::Deadline d) override { return s.acquire_errno(d); }
};

struct MutexWait : TimedWait {
  explicit MutexWait(MutexPolicy p) : m(p), h([this] { m.lock(); }, [this] { m.unlock(); }) { now_code = EBUSY; }
  Mutex m;
  Holder h;
  bool until(Clock::time_point t) override { return m.try_lock_until(t) ? (m.unlock(), true) : false; }
  bool for_(nanoseconds d) override { return m.try_lock_for(d) ? (m.unlock(), true) : false; }
  int with_errno(loom::Deadline d) override {
    int e = m.lock_errno(d);
    if (e == 0) m.unlock();
    return e;
  }
};

struct CondVarWait : TimedWait {
  Mutex m;
  CondVar cv;
  // The wait must hand the mutex back also after a timeout.
  template <class W>
  bool locked(W w) {
    m.lock();
    bool r = w();
    EXPECT_TRUE(m.held_by_caller()) << "the condition variable's timed wait returned without the mutex";
    m.unlock();
    return r;
  }
  bool until(Clock::time_point t) override {
    return locked([&] { return cv.wait_until(m, t); });
  }
  bool for_(nanoseconds d) override {
    return locked([&] { return cv.wait_for(m, d); });
  }
  int with_errno(loom::Deadline d) override {
    int e = 0;
    locked([&] { return (e = cv.wait_errno(m, d)) == 0; });
    return e;
  }
};

// The write side held: a reader times out.
struct RWSharedWait : TimedWait {
  RWSharedWait() : h([this] { rw.lock(); }, [this] { rw.unlock(); }) { now_code = EBUSY; }
  RWLock rw;
  Holder h;
  bool until(Clock::time_point t) override { return rw.try_lock_shared_until(t) ? (rw.unlock_shared(), true) : false; }
  bool for_(nanoseconds d) override { return until(Clock::now() + d); }
  int with_errno(loom::Deadline d) override {
    int e = rw.lock_shared_errno(d);
    if (e == 0) rw.unlock_shared();
    return e;
  }
};

// A reader (or a writer) holds it: a writer times out.
struct RWWriteWait : TimedWait {
  explicit RWWriteWait(bool vs_writer)
      : h([this, vs_writer] { vs_writer ? rw.lock() : rw.lock_shared(); },
          [this, vs_writer] { vs_writer ? rw.unlock() : rw.unlock_shared(); }) {
    now_code = EBUSY;
  }
  RWLock rw;
  Holder h;
  bool until(Clock::time_point t) override { return rw.try_lock_until(t) ? (rw.unlock(), true) : false; }
  bool for_(nanoseconds d) override { return until(Clock::now() + d); }
  int with_errno(loom::Deadline d) override {
    int e = rw.lock_errno(d);
    if (e == 0) rw.unlock();
    return e;
  }
};

struct SleepWait : TimedWait {
  SleepWait() { has_errno = false; }
  bool until(Clock::time_point t) override {
    loom::this_fibre::sleep_until(t);
    return false;
  }
  bool for_(nanoseconds d) override {
    loom::this_fibre::sleep_for(d);
    return false;
  }
};

const char* const kWaits[] = {"semaphore",  "mutex_blocking",        "mutex_spin",
                              "mutex_baton", "mutex_hybrid",          "condvar",
                              "rwlock_shared", "rwlock_write_vs_reader", "rwlock_write_vs_writer",
                              "sleep"};

std::unique_ptr<TimedWait> make_wait(const std::string& name) {
  if (name == "semaphore") return std::make_unique<SemaphoreWait>();
  for (MutexPolicy p : kPolicies)
    if (name == std::string("mutex_") + loom::to_string(p)) return std::make_unique<MutexWait>(p);
  if (name == "condvar") return std::make_unique<CondVarWait>();
  if (name == "rwlock_shared") return std::make_unique<RWSharedWait>();
  if (name == "rwlock_write_vs_reader") return std::make_unique<RWWriteWait>(false);
  if (name == "rwlock_write_vs_writer") return std::make_unique<RWWriteWait>(true);
  if (name == "sleep") return std::make_unique<SleepWait>();
  ADD_FAILURE() << "no timed wait named " << name;
  return nullptr;
}

// Who waits: a fibre alone on a one-processor cluster, a fibre on a
// two-processor cluster, or a kernel thread that is not a processor.
enum class Caller { fibre_1p, fibre_2p, kernel_thread };

const char* to_string(Caller c) {
  switch (c) {
    case Caller::fibre_1p: return "fibre_1p";
    case Caller::fibre_2p: return "fibre_2p";
    default: return "kernel_thread";
  }
}

void run_as(Caller who, const std::function<void()>& fn) {
  if (who == Caller::kernel_thread) {
    std::thread(fn).join();
    return;
  }
  Cluster c(who == Caller::fibre_1p ? 1 : 2);
  Fibre(on(c), fn).join();
}

class NeverEarly : public testing::TestWithParam<std::tuple<Caller, const char*>> {};

TEST_P(NeverEarly, TimedWaitEndsAtOrAfterItsDeadline) {
  Watchdog dog;
  auto w = make_wait(std::get<1>(GetParam()));
  ASSERT_TRUE(w);
  run_as(std::get<0>(GetParam()), [&] {
    for (nanoseconds d : {nanoseconds(0), nanoseconds(1ms), nanoseconds(4ms), nanoseconds(15ms)}) {
      const std::string at = " (" + std::to_string(ns(d) / 1000) + " us)";
      auto t = Clock::now() + d;
      EXPECT_FALSE(w->until(t)) << "until" << at;
      expect_on_time(t, Clock::now(), "until" + at);

      auto t0 = Clock::now();
      EXPECT_FALSE(w->for_(d)) << "for" << at;
      expect_on_time(t0 + d, Clock::now(), "for" + at);

      if (w->has_errno) {
        t = Clock::now() + d;
        EXPECT_EQ(w->with_errno(loom::to_deadline(t)), ETIMEDOUT) << "errno" << at;
        expect_on_time(t, Clock::now(), "errno" + at);
      }
    }
    if (w->now_code) {
      EXPECT_EQ(w->with_errno(loom::kNow), w->now_code) << "kNow";
    }
    auto t0 = Clock::now();
    EXPECT_FALSE(w->until(t0 - 1s)) << "a deadline a second ago";
    EXPECT_LT(ns(Clock::now() - t0), ns(kLate)) << "a deadline a second ago: returned late";
  });
}

INSTANTIATE_TEST_SUITE_P(
    Waits, NeverEarly,
    testing::Combine(testing::Values(Caller::fibre_1p, Caller::fibre_2p, Caller::kernel_thread),
                     testing::ValuesIn(kWaits)),
    [](const testing::TestParamInfo<std::tuple<Caller, const char*>>& i) {
      return std::string(to_string(std::get<0>(i.param))) + "_" + std::get<1>(i.param);
    });

// ---- deadlines at the edges --------------------------------------------------------

// Any deadline before now has passed, however it is written; the far future
// must not wrap around into the past.
TEST(Deadline, PastDeadlinesTimeOutAtOnceAndFarOnesDoNotWrap) {
  Watchdog dog;
  Cluster c(1);
  Semaphore s;
  auto times_out = [&](std::function<bool()> wait, const char* what) {
    Semaphore done;
    bool got = true;
    Fibre f(on(c), [&] {
      got = wait();
      done.release();
    });
    if (!done.try_acquire_for(5s)) {
      ADD_FAILURE() << what << ": still waiting after 5 s";
      s.release();
      done.acquire();
    }
    f.join();
    EXPECT_FALSE(got) << what;
    EXPECT_EQ(s.value(), 0u) << what;
  };
  times_out([&] { return s.try_acquire_until(Clock::now() - 1s); }, "a second ago");
  times_out([&] { return s.try_acquire_until(Clock::time_point{}); }, "the clock's epoch");
  times_out([&] { return s.try_acquire_until(Clock::time_point(-1ns)); }, "1 ns before the clock's epoch");
  times_out([&] { return s.try_acquire_until(Clock::time_point::min()); }, "time_point::min()");
  times_out([&] { return s.try_acquire_for(-1s); }, "for -1 s");
  times_out([&] { return s.acquire_errno(loom::deadline_after(-1s)) == 0; }, "deadline_after(-1 s)");

  auto waits = [&](std::function<bool()> wait, const char* what) {
    bool got = false;
    Fibre f(on(c), [&] { got = wait(); });
    loom::this_fibre::sleep_for(20ms);
    s.release();
    f.join();
    EXPECT_TRUE(got) << what << ": timed out instead of waiting for the release";
    EXPECT_EQ(s.value(), 0u) << what;
  };
  waits([&] { return s.try_acquire_until(Clock::time_point::max()); }, "time_point::max()");
  waits([&] { return s.try_acquire_for(nanoseconds::max()); }, "for nanoseconds::max()");
  waits([&] { return s.try_acquire_for(std::chrono::hours(24 * 365 * 100)); }, "for a century");
  waits([&] { return s.acquire_errno(loom::kForever) == 0; }, "kForever");
}

TEST(Deadline, SleepsInThePastReturn) {
  Watchdog dog;
  Cluster c(1);
  Fibre(on(c), [] {
    loom::this_fibre::sleep_for(0ns);
    loom::this_fibre::sleep_for(-5ms);
    loom::this_fibre::sleep_until(Clock::now() - 1s);
    loom::this_fibre::sleep_until(Clock::time_point{});
  }).join();
  SUCCEED();
}

// ---- timers on idle and on busy processors -------------------------------------------

// Sleeps and timed waits of several lengths, each checked against its deadline.
void sleep_and_check(const std::string& where) {
  Semaphore never;
  for (nanoseconds d : {nanoseconds(1ms), nanoseconds(5ms), nanoseconds(20ms), nanoseconds(50ms)}) {
    const std::string at = where + " (" + std::to_string(ns(d) / 1000) + " us)";
    auto t0 = Clock::now();
    loom::this_fibre::sleep_for(d);
    expect_on_time(t0 + d, Clock::now(), "sleep_for" + at);
    auto t = Clock::now() + d;
    loom::this_fibre::sleep_until(t);
    expect_on_time(t, Clock::now(), "sleep_until" + at);
    t = Clock::now() + d;
    EXPECT_FALSE(never.try_acquire_until(t));
    expect_on_time(t, Clock::now(), "try_acquire_until" + at);
  }
}

class TimerLoad : public testing::TestWithParam<std::size_t> {};

// Every processor of the cluster sleeps in the kernel: the timer must wake one.
TEST_P(TimerLoad, SleeperOnAnIdleClusterWakesOnTime) {
  Watchdog dog;
  Cluster c(GetParam());
  loom::this_fibre::sleep_for(20ms);  // its processors find nothing to do and sleep
  Fibre(on(c), [] { sleep_and_check("idle cluster"); }).join();
}

// Every processor is busy with fibres that only yield: timers are checked at
// scheduling points, so the sleeper still wakes on time.
TEST_P(TimerLoad, SleeperAmongYieldingFibresWakesOnTime) {
  Watchdog dog;
  Cluster c(GetParam());
  std::atomic<bool> stop{false};
  std::atomic<long> yields{0};
  std::vector<Fibre> spinners;
  for (std::size_t i = 0; i < 2 * GetParam() + 1; ++i)
    spinners.emplace_back(on(c), [&] {
      while (!stop.load()) {
        loom::this_fibre::yield();
        yields.fetch_add(1, std::memory_order_relaxed);
      }
    });
  Fibre(on(c), [] { sleep_and_check("busy cluster"); }).join();
  stop.store(true);
  spinners.clear();
  EXPECT_GT(yields.load(), 0);
}

// Many sleepers with deadlines spread over 100 ms: none wakes early.
TEST_P(TimerLoad, ManySleepersNoneEarly) {
  Watchdog dog;
  Cluster c(GetParam());
  const long fibres = scaled_at_least(10, 1000);
  const auto start = Clock::now() + 20ms;
  std::atomic<long> early{0}, late{0}, done{0};
  long long worst_late_us = 0;
  std::mutex worst_m;
  {
    std::vector<Fibre> v;
    for (long i = 0; i < fibres; ++i)
      v.emplace_back(on(c), [&, i] {
        auto t = start + std::chrono::microseconds((i * 7919) % 100000);
        bool timed_out = true;
        if (i % 2) {
          loom::this_fibre::sleep_until(t);
        } else {
          Semaphore never;
          timed_out = !never.try_acquire_until(t);
        }
        auto after = Clock::now();
        if (!timed_out || after < t) early.fetch_add(1);
        if (after - t >= kLate) late.fetch_add(1);
        std::lock_guard<std::mutex> g(worst_m);
        worst_late_us = std::max(worst_late_us, ns(after - t) / 1000);
        done.fetch_add(1);
      });
  }
  EXPECT_EQ(done.load(), fibres);
  EXPECT_EQ(early.load(), 0);
  EXPECT_EQ(late.load(), 0) << "worst: " << worst_late_us << " us late";
}

INSTANTIATE_TEST_SUITE_P(Processors, TimerLoad, testing::Values(1, 2, 4),
                         [](const testing::TestParamInfo<std::size_t>& i) { return std::to_string(i.param) + "p"; });

// Regression: a fibre blocking on a primitive holds the primitive's spin
// lock until its switch is done (post_block), and Processor::suspend()
// picked its successor with next_ready(), which runs fire_timers() every
// 16th tick; a timer that had expired for another waiter on the same
// primitive then spun on that lock in timer_complete() — held by the very
// processor spinning. Many short timeouts on one semaphore, one processor.
TEST(TimerRegression, TimerFiredWhileSuspendingDoesNotSpinOnTheWaitersLock) {
  Watchdog dog(std::chrono::seconds(loom::test::sanitized() ? 120 : 20));
  Cluster c(1);
  Semaphore never;
  const long waits = scaled_at_least(200, 20000);
  std::atomic<long> timeouts{0};
  {
    std::vector<Fibre> v;
    for (int f = 0; f < 8; ++f)
      v.emplace_back(on(c), [&] {
        for (long i = 0; i < waits; ++i)
          if (!never.try_acquire_for(20us)) timeouts.fetch_add(1, std::memory_order_relaxed);
      });
  }
  EXPECT_EQ(timeouts.load(), 8 * waits);
}

// Four fibres on `c` passing a token round a condvar: they only block and
// wake each other (no yield, no idle moment) until stop(), or until `bound`
// has passed, which sets starved.
class TokenRing {
 public:
  TokenRing(Cluster& c, Clock::duration bound) : give_up_(Clock::now() + bound) {
    for (int i = 0; i < 4; ++i)
      fibres_.emplace_back(on(c), [this, i] {
        m_.lock();
        while (!stop_.load()) {
          while (turn_ != i && !stop_.load()) cv_.wait(m_);
          if (Clock::now() > give_up_) {
            starved_.store(true);
            stop_.store(true);
          }
          turn_ = (turn_ + 1) % 4;
          cv_.notify_all();
        }
        cv_.notify_all();
        m_.unlock();
      });
  }
  ~TokenRing() { stop(); }
  // Ends the ring and joins its fibres.
  void stop() {
    stop_.store(true);
    fibres_.clear();
  }
  bool starved() const { return starved_.load(); }

 private:
  const Clock::time_point give_up_;
  Mutex m_;
  CondVar cv_;
  int turn_ = 0;
  std::atomic<bool> stop_{false}, starved_{false};
  std::vector<Fibre> fibres_;
};

// Regression: on a busy processor timers were fired only at a yield's slow
// path and in the idle loop; fibres that only block and wake each other (a
// token passed round a condvar) never yield and leave the processor no idle
// moment, so a sleeper on the same processor never woke (found with a
// pthread program on LOOM_PROCESSORS=1). Processor::suspend now leaves the
// due timers to the fibre it switches to, which fires them once the blocking
// fibre's post action has released its lock.
TEST(TimerRegression, SleeperAmongFibresThatOnlyBlockWakes) {
  Watchdog dog(std::chrono::seconds(60));
  Cluster c(1);
  TokenRing ring(c, 20s);  // its bound: far past the sleep
  Fibre(on(c), [&] {
    loom::this_fibre::sleep_for(5ms);
    ring.stop();
  }).join();
  ring.stop();
  EXPECT_FALSE(ring.starved()) << "the sleeper never woke while the ring ran";
}

// Every kind of timed wait among fibres that only block and wake each other
// (a token passed round a condvar: no yield, no idle moment), on one
// processor: each ends, and not before its deadline (timers fired by the
// fibre a blocking pick switches to, after its post released the lock).
TEST(TimerRegression, TimedWaitsAmongFibresThatOnlyBlockWakeEndAfterTheirDeadlines) {
  Watchdog dog(std::chrono::seconds(loom::test::sanitized() ? 240 : 60));
  Cluster c(1);
  Mutex held;
  CondVar never_cv;
  Semaphore never, held_until_end, held_now;
  std::atomic<long> early{0}, timed_out{0};
  Fibre holder(on(c), [&] {  // holds `held` for the test's length, blocked
    held.lock();
    held_now.release();
    held_until_end.acquire();
    held.unlock();
  });
  TokenRing ring(c, 40s);
  const int rounds = loom::test::sanitized() ? 5 : 25;
  held_now.acquire();  // a try_lock_for before the holder's lock would take it
  {
    std::vector<Fibre> timed;
    for (int k = 0; k < 8; ++k)
      timed.emplace_back(on(c), [&, k] {
        for (int r = 0; r < rounds && !ring.starved(); ++r) {
          const auto d = std::chrono::microseconds(50 + 150 * ((k + r) % 7));
          const auto start = Clock::now();
          bool ended = false;
          switch ((k + r) % 4) {
            case 0:
              ended = !held.try_lock_for(d);
              break;
            case 1: {
              Mutex own;
              own.lock();
              ended = !never_cv.wait_for(own, d);
              own.unlock();
              break;
            }
            case 2:
              ended = !never.try_acquire_for(d);
              break;
            case 3:
              loom::this_fibre::sleep_for(d);
              ended = true;
              break;
          }
          if (ended) timed_out.fetch_add(1);
          if (Clock::now() - start < d) early.fetch_add(1);
        }
      });
  }
  ring.stop();
  held_until_end.release();
  holder.join();
  EXPECT_FALSE(ring.starved()) << "the timed waits never ended while the ring ran";
  EXPECT_EQ(timed_out.load(), 8L * rounds);
  EXPECT_EQ(early.load(), 0) << "a timed wait ended before its deadline";
}

// A wait that was signalled before its deadline leaves no timer behind: a
// stale timer firing later would end the next wait early.
TEST(Timer, SignalledWaitLeavesNoTimerBehind) {
  Watchdog dog;
  Cluster c(2);
  const int fibres = 50;
  Semaphore s, gate;
  std::atomic<bool> gate_open{false};
  std::atomic<int> signalled{0}, strays{0}, early_sleeps{0};
  std::vector<Fibre> v;
  for (int i = 0; i < fibres; ++i)
    v.emplace_back(on(c), [&] {
      if (s.try_acquire_for(30ms)) signalled.fetch_add(1);
      auto t0 = Clock::now();
      loom::this_fibre::sleep_for(60ms);  // spans the first wait's deadline
      if (Clock::now() - t0 < 60ms) early_sleeps.fetch_add(1);
      gate.acquire();
      if (!gate_open.load()) strays.fetch_add(1);
    });
  loom::this_fibre::sleep_for(2ms);
  for (int i = 0; i < fibres; ++i) s.release();
  loom::this_fibre::sleep_for(150ms);  // past every deadline of the first waits
  gate_open.store(true);
  for (int i = 0; i < fibres; ++i) gate.release();
  v.clear();
  EXPECT_EQ(signalled.load() + int(s.value()), fibres);
  EXPECT_EQ(early_sleeps.load(), 0);
  EXPECT_EQ(strays.load(), 0);
}

}  // namespace
