// White-box tests of runtime/base and runtime/context.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "base/futex.hpp"
#include "base/nemesis.hpp"
#include "context/stack.hpp"
#include "test_util.hpp"

namespace {

struct Node {
  std::atomic<Node*> next{nullptr};
  int producer = 0;
  int seq = 0;
};

template <typename Q>
void mpsc_keeps_per_producer_order() {
  constexpr int kProducers = 4;
  const int per = int(loom::test::scaled(200000));
  std::vector<Node> nodes(std::size_t(kProducers) * per);
  Q q;
  std::atomic<bool> go{false};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      while (!go.load()) {
      }
      for (int i = 0; i < per; ++i) {
        Node& n = nodes[std::size_t(p) * per + i];
        n.producer = p;
        n.seq = i;
        q.push(&n);
      }
    });
  }
  go = true;
  std::vector<int> next(kProducers, 0);
  long got = 0;
  while (got < long(kProducers) * per) {
    if (Node* n = q.pop()) {
      ASSERT_EQ(n->seq, next[n->producer]) << "producer " << n->producer;
      ++next[n->producer];
      ++got;
    }
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_FALSE(q.maybe_nonempty());
}

TEST(Nemesis, MpscKeepsEveryNodeAndPerProducerOrder) { mpsc_keeps_per_producer_order<loom::rt::NemesisQueue<Node>>(); }
TEST(LockedQueue, MpscKeepsEveryNodeAndPerProducerOrder) { mpsc_keeps_per_producer_order<loom::rt::LockedQueue<Node>>(); }

TEST(Nemesis, WalkCountsUpToLimit) {
  loom::rt::NemesisQueue<Node> q;
  Node n[5];
  for (auto& x : n) q.push(&x);
  EXPECT_EQ(q.walk(3), 3u);
  EXPECT_EQ(q.walk(10), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(q.pop(), &n[i]);
  EXPECT_EQ(q.walk(10), 0u);
}

TEST(WakeFlag, PostBeforeWaitIsNotLost) {
  loom::rt::WakeFlag w;
  w.post();
  w.post();  // posts collapse
  EXPECT_TRUE(w.wait());
  EXPECT_FALSE(w.wait(loom::rt::now_ns() + 1000000));  // nothing pending: times out
}

TEST(WakeFlag, WakesASleeper) {
  loom::rt::WakeFlag w;
  for (int i = 0; i < 200; ++i) {
    std::thread t([&] { w.post(); });
    EXPECT_TRUE(w.wait(loom::rt::now_ns() + 5'000'000'000));
    t.join();
  }
}

TEST(Stack, GuardPageAndSize) {
  loom::rt::Stack s = loom::rt::stack_allocate(20000);
  EXPECT_EQ(s.size, 20480u);  // rounded to pages
  EXPECT_TRUE(s.in_guard(s.base));
  EXPECT_FALSE(s.in_guard(s.lo()));
  s.lo()[0] = 1;  // usable
  s.hi()[-1] = 1;
  loom::rt::stack_release(s);
  EXPECT_FALSE(s);
}

TEST(StackCache, ReusesWithoutMapping) {
  loom::rt::StackCache cache;
  loom::rt::Stack a = cache.get(65536);
  char* base = a.base;
  cache.put(a);
  long maps = loom::test::mappings();
  loom::rt::Stack b = cache.get(65536);
  EXPECT_EQ(b.base, base);
#if !defined(LOOM_ASAN) && !defined(LOOM_TSAN)  // the sanitizers map memory of their own
  EXPECT_EQ(loom::test::mappings(), maps);
#else
  (void)maps;
#endif
  loom::rt::Stack c = cache.get(32768);  // other size: a new mapping
  EXPECT_NE(c.base, base);
  cache.put(b);
  cache.put(c);
  EXPECT_EQ(cache.cached(), 2u);
}

TEST(StackCache, IsBounded) {
  loom::rt::StackCache cache;
  std::vector<loom::rt::Stack> v;
  for (std::size_t i = 0; i < loom::rt::StackCache::kCapacity + 20; ++i) v.push_back(cache.get(16384));
  for (auto& s : v) cache.put(s);
  EXPECT_EQ(cache.cached(), loom::rt::StackCache::kCapacity);
  long maps = loom::test::mappings();
  cache.trim(loom::rt::StackCache::kKeepIdle);
  EXPECT_EQ(cache.cached(), loom::rt::StackCache::kKeepIdle);
  EXPECT_LE(loom::test::mappings(), maps - 2 * long(loom::rt::StackCache::kCapacity - loom::rt::StackCache::kKeepIdle));
}

}  // namespace
