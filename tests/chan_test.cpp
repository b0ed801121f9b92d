// loom::Channel<T> (loom/channel.hpp): buffered, unbounded and unbuffered
// channels, close, the try_ and timed forms and their error paths, move-only
// values, fibres and kernel threads that are not processors on one channel,
// and many producers and consumers across processor counts (also run under
// the chaos build, scripts/chaos.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.hpp"
#include "sync_test_util.hpp"

namespace {

using namespace std::chrono_literals;
using loom::Channel;
using loom::ChannelStatus;
using loom::Cluster;
using loom::Fibre;
using loom::kUnbounded;
using loom::test::on;
using loom::test::run_in;
using loom::test::scaled_at_least;
using loom::test::Watchdog;

TEST(Channel, BufferedTryFormsAndClose) {
  Channel<int> ch(2);
  EXPECT_EQ(ch.capacity(), 2u);
  int v = -1;
  EXPECT_EQ(ch.try_pop(v), ChannelStatus::empty);
  EXPECT_EQ(ch.try_push(1), ChannelStatus::success);
  EXPECT_EQ(ch.push(2), ChannelStatus::success);
  EXPECT_EQ(ch.try_push(3), ChannelStatus::full);
  EXPECT_EQ(ch.push_for(3, 2ms), ChannelStatus::timeout);
  EXPECT_EQ(ch.push_until(3, loom::Clock::now() + 1ms), ChannelStatus::timeout);
  EXPECT_EQ(ch.size(), 2u);
  ch.close();
  EXPECT_TRUE(ch.is_closed());
  EXPECT_EQ(ch.try_push(4), ChannelStatus::closed);
  EXPECT_EQ(ch.push(4), ChannelStatus::closed);
  // Pops drain what is queued, then report closed.
  EXPECT_EQ(ch.pop(v), ChannelStatus::success);
  EXPECT_EQ(v, 1);
  EXPECT_EQ(ch.pop_for(v, 1ms), ChannelStatus::success);
  EXPECT_EQ(v, 2);
  EXPECT_EQ(ch.pop(v), ChannelStatus::closed);
  EXPECT_EQ(ch.try_pop(v), ChannelStatus::closed);
  EXPECT_EQ(ch.pop_for(v, 1ms), ChannelStatus::closed);
  EXPECT_FALSE(ch.pop().has_value());
  ch.close();  // idempotent
  EXPECT_STREQ(loom::to_string(ChannelStatus::timeout), "timeout");
}

TEST(Channel, PopTimesOutWhenEmpty) {
  Watchdog dog;
  Cluster c(1);
  run_in(c, [] {
    Channel<int> ch(4);
    int v = 0;
    auto t0 = loom::Clock::now();
    EXPECT_EQ(ch.pop_for(v, 5ms), ChannelStatus::timeout);
    EXPECT_GE(loom::Clock::now() - t0, 5ms);  // never before the deadline
    EXPECT_EQ(ch.pop_until(v, loom::Clock::now() - 1s), ChannelStatus::timeout);
  });
}

TEST(Channel, FailedPushLeavesTheValue) {
  Channel<std::unique_ptr<int>> ch(1);
  EXPECT_EQ(ch.push(std::make_unique<int>(1)), ChannelStatus::success);
  auto p = std::make_unique<int>(2);
  EXPECT_EQ(ch.try_push(std::move(p)), ChannelStatus::full);
  ASSERT_TRUE(p) << "a push that failed moved from its value";
  EXPECT_EQ(ch.push_for(std::move(p), 1ms), ChannelStatus::timeout);
  ASSERT_TRUE(p);
  ch.close();
  EXPECT_EQ(ch.push(std::move(p)), ChannelStatus::closed);
  ASSERT_TRUE(p);
  auto q = ch.pop();  // move-only values come out whole
  ASSERT_TRUE(q && *q);
  EXPECT_EQ(**q, 1);
}

TEST(Channel, UnboundedGrowsAndKeepsOrder) {
  Channel<std::string> ch(kUnbounded);
  const int n = 10000;
  for (int i = 0; i < n; ++i) ASSERT_EQ(ch.try_push(std::to_string(i)), ChannelStatus::success);
  EXPECT_EQ(ch.size(), std::size_t(n));
  for (int i = 0; i < n / 2; ++i) ASSERT_EQ(*ch.pop(), std::to_string(i));
  for (int i = n; i < n + 100; ++i) ASSERT_EQ(ch.push(std::to_string(i)), ChannelStatus::success);
  ch.close();
  int expect = n / 2;
  for (auto& s : ch) ASSERT_EQ(s, std::to_string(expect++));
  EXPECT_EQ(expect, n + 100);
}

TEST(Channel, QueuedValuesDestroyedWithTheChannel) {
  auto shared = std::make_shared<int>(7);
  {
    Channel<std::shared_ptr<int>> ch(100);
    for (int i = 0; i < 50; ++i) ch.push(shared);
    EXPECT_EQ(shared.use_count(), 51);
  }
  EXPECT_EQ(shared.use_count(), 1);
}

TEST(Channel, UnbufferedIsARendezvous) {
  Watchdog dog;
  Cluster c(1);
  run_in(c, [] {
    Channel<int> ch(0);
    EXPECT_EQ(ch.try_push(1), ChannelStatus::full);  // nobody waits to pop
    int v = 0;
    EXPECT_EQ(ch.try_pop(v), ChannelStatus::empty);
    std::atomic<int> stage{0};
    Fibre pusher([&] {
      stage = 1;
      EXPECT_EQ(ch.push(42), ChannelStatus::success);
      stage = 2;  // only once the pop took it
    });
    loom::this_fibre::yield();  // the pusher waits
    EXPECT_EQ(stage.load(), 1);
    EXPECT_EQ(ch.size(), 0u);
    EXPECT_EQ(ch.try_pop(v), ChannelStatus::success);  // takes it from the waiting pusher
    EXPECT_EQ(v, 42);
    pusher.join();
    EXPECT_EQ(stage.load(), 2);
    // A waiting popper takes a try_push.
    Fibre popper([&] { EXPECT_EQ(*ch.pop(), 43); });
    loom::this_fibre::yield();
    EXPECT_EQ(ch.try_push(43), ChannelStatus::success);
    popper.join();
  });
}

TEST(Channel, CloseWakesEveryWaiter) {
  Watchdog dog;
  Cluster c(2);
  Channel<int> empty(1), full(1);
  full.push(0);
  std::vector<Fibre> fs;
  std::atomic<int> closed{0};
  for (int i = 0; i < 4; ++i) {
    fs.emplace_back(on(c), [&] {
      int v;
      if (empty.pop(v) == ChannelStatus::closed) ++closed;
    });
    fs.emplace_back(on(c), [&] {
      if (full.push(1) == ChannelStatus::closed) ++closed;
    });
  }
  std::thread t([&] {  // a kernel thread waits too
    int v;
    if (empty.pop_for(v, 10s) == ChannelStatus::closed) ++closed;
  });
  std::this_thread::sleep_for(20ms);
  empty.close();
  full.close();
  for (auto& f : fs) f.join();
  t.join();
  EXPECT_EQ(closed.load(), 9);
  EXPECT_EQ(*full.pop(), 0);  // drained after close
}

TEST(Channel, TimedOutWaiterKeepsItsPlaceOutOfTheQueue) {
  Watchdog dog;
  Cluster c(1);
  run_in(c, [] {
    Channel<int> ch(0);
    int got = -1;
    Fibre patient([&] { EXPECT_EQ(ch.pop_for(got, 10s), ChannelStatus::success); });
    Fibre hasty([&] {
      int v = -1;
      EXPECT_EQ(ch.pop_for(v, 5ms), ChannelStatus::timeout);
      EXPECT_EQ(v, -1);
    });
    loom::this_fibre::yield();  // both wait, the patient one first
    hasty.join();
    EXPECT_EQ(ch.push(5), ChannelStatus::success);
    patient.join();
    EXPECT_EQ(got, 5);
  });
}

TEST(Channel, KernelThreadsAndFibresShareOne) {
  Watchdog dog;
  Cluster c(2);
  Channel<long> ch(3);
  const long n = scaled_at_least(200, 20000);
  std::atomic<long> sum{0};
  std::thread producer([&] {
    for (long i = 1; i <= n; ++i) ASSERT_EQ(ch.push(i), ChannelStatus::success);
  });
  Fibre fproducer(on(c), [&] {
    for (long i = 1; i <= n; ++i) ASSERT_EQ(ch.push(i), ChannelStatus::success);
  });
  std::thread consumer([&] {
    long v;
    while (ch.pop(v) == ChannelStatus::success) sum += v;
  });
  Fibre fconsumer(on(c), [&] {
    while (auto v = ch.pop()) sum += *v;
  });
  producer.join();
  fproducer.join();
  ch.close();
  consumer.join();
  fconsumer.join();
  EXPECT_EQ(sum.load(), n * (n + 1));
}

// Many producers and consumers, every capacity kind, every processor count:
// each value arrives exactly once, and per producer in order.
struct Shape {
  std::size_t capacity;
  std::size_t processors;
};
class ChannelP : public testing::TestWithParam<Shape> {};

TEST_P(ChannelP, ManyToManyExactlyOnceInOrder) {
  Watchdog dog;
  const Shape s = GetParam();
  Cluster c(s.processors);
  Channel<std::pair<int, long>> ch(s.capacity);
  const int producers = 4, consumers = 3;
  const long per = scaled_at_least(100, 5000);
  std::vector<std::vector<long>> last(consumers, std::vector<long>(producers, -1));
  std::atomic<long> count{0};
  std::vector<Fibre> ps, cs;
  for (int k = 0; k < consumers; ++k)
    cs.emplace_back(on(c), [&, k] {
      std::pair<int, long> v;
      ChannelStatus st;
      while ((st = (k == 0 ? ch.pop_for(v, 10s) : ch.pop(v))) == ChannelStatus::success) {
        EXPECT_GT(v.second, last[k][v.first]) << "out of order from producer " << v.first;
        last[k][v.first] = v.second;
        ++count;
      }
      EXPECT_EQ(st, ChannelStatus::closed);
    });
  for (int p = 0; p < producers; ++p)
    ps.emplace_back(on(c), [&, p] {
      for (long i = 0; i < per; ++i) {
        std::pair<int, long> v{p, i};
        if (i % 3 == 0) {
          while (ch.try_push(v) == ChannelStatus::full) loom::this_fibre::yield();
        } else {
          ASSERT_EQ(ch.push_for(v, 10s), ChannelStatus::success);
        }
      }
    });
  for (auto& f : ps) f.join();
  ch.close();
  for (auto& f : cs) f.join();
  EXPECT_EQ(count.load(), producers * per);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ChannelP,
                         testing::Values(Shape{0, 1}, Shape{0, 2}, Shape{0, 4}, Shape{1, 2}, Shape{16, 1}, Shape{16, 2},
                                         Shape{16, 4}, Shape{kUnbounded, 2}),
                         [](const testing::TestParamInfo<Shape>& i) {
                           std::string cap =
                               i.param.capacity == kUnbounded ? "unbounded" : "cap" + std::to_string(i.param.capacity);
                           return cap + "_" + std::to_string(i.param.processors) + "p";
                         });

// Timed pushes and pops racing their deadlines against close and each other:
// a value is never lost nor duplicated (each side counts what it moved).
TEST(Channel, TimeoutsRaceHandOffs) {
  Watchdog dog;
  Cluster c(4);
  Channel<long> ch(0);
  std::atomic<long> sent{0}, received{0};
  std::atomic<bool> stop{false};
  std::vector<Fibre> fs;
  for (int i = 0; i < 3; ++i) {
    fs.emplace_back(on(c), [&] {
      long k = 0;
      while (!stop.load()) {
        if (ch.push_for(1L, std::chrono::microseconds(k++ % 50)) == ChannelStatus::success) ++sent;
      }
    });
    fs.emplace_back(on(c), [&] {
      long k = 0, v;
      while (!stop.load()) {
        if (ch.pop_for(v, std::chrono::microseconds(k++ % 70)) == ChannelStatus::success) received += v;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(loom::test::sanitized() ? 400 : 150));
  stop = true;
  for (auto& f : fs) f.join();
  EXPECT_EQ(sent.load(), received.load());
}

}  // namespace
