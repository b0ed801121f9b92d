// The parking lot (runtime/sync/parking_lot.hpp), white-box: FIFO per key,
// `more`, validate, the timed-out hook's was_last, and the invariant that
// matters — wake exactly once — with thousands of waiters whose deadlines
// equal the moment they are unparked, on fibres across processor counts and
// on kernel threads that are not processors.
#include "sync/parking_lot.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "base/futex.hpp"
#include "loom/loom.hpp"
#include "sync_test_util.hpp"
#include "test_util.hpp"

namespace {

namespace pl = loom::rt::parking_lot;
using loom::Cluster;
using loom::Fibre;
using loom::rt::ParkResult;
using loom::test::on;
using loom::test::run_in;
using loom::test::Watchdog;

TEST(ParkingLot, ValidateFalseDoesNotPark) {
  int word = 0;
  auto r = pl::park_if(
      &word, [] { return false; }, loom::kForever);
  EXPECT_EQ(r.result, ParkResult::Invalid);
  r = pl::park_if(
      &word, [] { return true; }, loom::deadline_after(std::chrono::milliseconds(2)));
  EXPECT_EQ(r.result, ParkResult::TimedOut);
  EXPECT_EQ(pl::queued_now(), 0u);
}

TEST(ParkingLot, FifoPerKeyWithMoreAndTokens) {
  Watchdog w;
  Cluster c(1);
  int key = 0, other_key = 0;
  std::vector<int> order;
  std::vector<loom::rt::ParkToken> tokens(3);
  std::vector<Fibre> fs;
  for (int i = 0; i < 3; ++i)
    fs.emplace_back(on(c), [&, i] {
      auto r = pl::park_if(
          i == 1 ? static_cast<void*>(&other_key) : &key, [] { return true; }, loom::kForever);
      EXPECT_EQ(r.result, ParkResult::Unparked);
      tokens[i] = r.token;
      order.push_back(i);
    });
  run_in(c, [&] {
    while (pl::queued_now() < 3) loom::this_fibre::yield();
    auto cb = [](void* ctx, loom::rt::UnparkResult r) -> loom::rt::ParkToken {
      *static_cast<int*>(ctx) = r.more;
      return 40 + r.unparked;
    };
    int more = -1;
    EXPECT_TRUE(pl::unpark_one(&key, cb, &more).unparked);
    EXPECT_EQ(more, 1);  // fibre 2 still waits on key (fibre 1 is on another key)
    EXPECT_TRUE(pl::unpark_one(&key, cb, &more).unparked);
    EXPECT_EQ(more, 0);
    auto none = pl::unpark_one(&key, cb, &more);
    EXPECT_FALSE(none.unparked);
    EXPECT_EQ(pl::unpark_all(&other_key, 7), 1u);
  });
  for (auto& f : fs) f.join();
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order, (std::vector<int>{0, 2, 1}));  // one processor: FIFO
  EXPECT_EQ(tokens[0], 41u);
  EXPECT_EQ(tokens[2], 41u);
  EXPECT_EQ(tokens[1], 7u);
  EXPECT_EQ(pl::queued_now(), 0u);
}

// The unparker learns when its waiter parked only if the waiter asked for
// the stamp (the hybrid mutex does); else since is 0 and no clock is read.
TEST(ParkingLot, SinceIsStampedOnlyWhenAsked) {
  Watchdog w;
  Cluster c(1);
  int key = 0;
  for (bool stamp : {false, true}) {
    std::int64_t before = loom::rt::now_ns(), since = -1;
    Fibre f(on(c), [&] {
      pl::ParkOps ops;
      ops.validate = [](void*) { return true; };
      ops.stamp = stamp;
      EXPECT_EQ(pl::park(&key, ops, loom::kForever).result, ParkResult::Unparked);
    });
    run_in(c, [&] {
      while (pl::queued_now() < 1) loom::this_fibre::yield();
      since = pl::unpark_one(&key).since;
    });
    f.join();
    if (stamp) {
      EXPECT_GE(since, before);
      EXPECT_LE(since, loom::rt::now_ns());
    } else {
      EXPECT_EQ(since, 0);
    }
  }
}

TEST(ParkingLot, TimedOutHookSaysWhoWasLast) {
  Watchdog w;
  Cluster c(2);
  int key = 0;
  std::atomic<int> lasts{0}, not_lasts{0};
  struct Ctx {
    std::atomic<int>* lasts;
    std::atomic<int>* not_lasts;
  } ctx{&lasts, &not_lasts};
  auto body = [&](int ms) {
    pl::ParkOps ops;
    ops.ctx = &ctx;
    ops.validate = [](void*) { return true; };
    ops.timed_out = [](void* p, bool was_last) {
      auto* x = static_cast<Ctx*>(p);
      (was_last ? x->lasts : x->not_lasts)->fetch_add(1);
    };
    EXPECT_EQ(pl::park(&key, ops, loom::deadline_after(std::chrono::milliseconds(ms))).result, ParkResult::TimedOut);
  };
  // The thread parks first and stays long; the fibre parks once the thread
  // is queued and times out first (not last), then the thread (last). With
  // both started at once, a slow start of the thread (CI under TSan) let the
  // fibre time out alone on the key, and both were "last".
  std::thread t([&] { body(2000); });  // a kernel thread, not a processor
  Fibre a(on(c), [&] {
    while (pl::queued_now() < 1) loom::this_fibre::sleep_for(std::chrono::milliseconds(1));
    body(5);
  });
  a.join();
  t.join();
  EXPECT_EQ(not_lasts.load(), 1);
  EXPECT_EQ(lasts.load(), 1);
}

// Waiters parked on `key` until `deadline`, in `fibres` fibres and
// `threads` kernel threads, while `driver(tally)` runs in a fibre and in a
// kernel thread at once; then every waiter ended exactly once (unparked and
// counted by a driver, or timed out: never both, never neither) and none is
// left queued.
struct Tally {
  std::atomic<int> unparked_seen{0}, timed_out_seen{0}, unparked_given{0};
  int waiters = 0;
  bool all_ended() const { return unparked_seen.load() + timed_out_seen.load() >= waiters; }
};

template <typename Driver>
void crowd(unsigned processors, int* key, std::int64_t deadline, int fibres, int threads, Driver driver) {
  Cluster c(processors);
  Tally t;
  t.waiters = fibres + threads;
  auto body = [&] {
    auto r = pl::park_if(
        key, [] { return true; }, deadline);
    (r.result == ParkResult::Unparked ? t.unparked_seen : t.timed_out_seen).fetch_add(1);
  };
  std::vector<Fibre> fs;
  for (int i = 0; i < fibres; ++i) fs.emplace_back(on(c), body);
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i) ts.emplace_back(body);
  Fibre d(on(c), [&] { driver(t); });
  std::thread dt([&] { driver(t); });
  d.join();
  dt.join();
  for (auto& f : fs) f.join();
  for (auto& th : ts) th.join();
  EXPECT_EQ(t.unparked_seen.load() + t.timed_out_seen.load(), t.waiters) << processors << " processors";
  EXPECT_EQ(t.unparked_seen.load(), t.unparked_given.load()) << processors << " processors";
  EXPECT_EQ(pl::queued_now(), 0u) << processors << " processors";
}

// Unparked one at a time from a fibre and a kernel thread, right across the
// deadline.
void exactly_once(unsigned processors, int fibres, int threads) {
  int key = 0;
  const auto deadline = loom::deadline_after(std::chrono::milliseconds(30));
  crowd(processors, &key, deadline, fibres, threads, [&](Tally& t) {
    while (loom::rt::now_ns() < deadline - 200'000) std::this_thread::yield();
    while (!t.all_ended()) {
      if (pl::unpark_one(&key).unparked) t.unparked_given.fetch_add(1);
      if (loom::rt::now_ns() > deadline + 50'000'000) break;
    }
  });
}

TEST(ParkingLot, ExactlyOnceAcrossTheDeadline) {
  // No SCOPED_TRACE: gtest keeps its trace stack per kernel thread, and
  // main's fibre may resume on another processor after it blocks (a pop on
  // the wrong thread crashed). exactly_once names the processor count in
  // its messages.
  for (unsigned p : {1u, 2u, 4u, 8u}) exactly_once(p, int(loom::test::scaled_at_least(50, 2000)), 16);
}

// requeue (futex(2)'s CMP_REQUEUE): waiters moved back and forth between
// two keys (two buckets) and woken by the moves, right across their
// deadline: each ends exactly once, a timeout that fires after a move
// unqueues its waiter from the bucket it was moved to, and none is left.
void requeue_exactly_once(unsigned processors, int fibres, int threads) {
  Watchdog w;
  int a = 0, b = 0;
  const auto deadline = loom::deadline_after(std::chrono::milliseconds(30));
  crowd(processors, &a, deadline, fibres, threads, [&](Tally& t) {
    for (unsigned n = 0; !t.all_ended(); ++n) {
      bool wake = loom::rt::now_ns() > deadline - 1'000'000 && n % 8 == 0;
      auto r =
          n % 2 ? pl::requeue(&a, &b, wake, ~0u, nullptr, nullptr) : pl::requeue(&b, &a, wake, ~0u, nullptr, nullptr);
      EXPECT_TRUE(r.valid);
      t.unparked_given.fetch_add(int(r.woken));
      if (loom::rt::now_ns() > deadline + 50'000'000) break;
      loom::this_fibre::yield();  // (the waiters' fibres must run to park)
    }
  });
  int x = 7;
  auto no = pl::requeue(
      &a, &b, 1, 1, [](void* p) { return *static_cast<int*>(p) == 8; }, &x);
  EXPECT_TRUE(no.valid);  // nobody waits on a: validate is not called
}

TEST(ParkingLot, RequeueExactlyOnceAcrossTheDeadline) {
  for (unsigned p : {1u, 2u, 4u}) requeue_exactly_once(p, int(loom::test::scaled_at_least(50, 500)), 8);
}

}  // namespace
