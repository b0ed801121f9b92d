// The monitor (sched/monitor.cpp; issue 31): a processor lost to a system
// call loom does not see, or to a fibre that busy-waits, does not keep the
// fibres queued behind it from running. Each test makes a cluster of one
// processor (or two, all lost), blocks its kernel thread where loom cannot
// see — a plain read(2) of a pipe, through the system call itself, or a
// spin on a flag — with the fibre that would end the wait queued behind
// it. Without the monitor that is a hang (the read is bounded here by a
// poll with a time limit, so that the test can tell).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom/io.hpp"
#include "loom/loom.hpp"
#include "sched/cluster.hpp"
#include "test_util.hpp"

namespace {

using loom::Cluster;
using loom::SchedConfig;
using Clock = std::chrono::steady_clock;

SchedConfig config(unsigned handoff_us, bool stealing = true) {
  SchedConfig c;
  c.handoff_us = handoff_us;
  c.stealing = stealing;
  return c;
}

struct Pipe {
  int fd[2];
  Pipe() { EXPECT_EQ(::pipe(fd), 0); }
  ~Pipe() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
  // Blocks the kernel thread, as a call loom does not intercept does: a
  // poll for up to `limit` (the system call, not loom's), then the read.
  // True when the byte came in time.
  bool wait_unseen(std::chrono::milliseconds limit) {
    pollfd p{fd[0], POLLIN, 0};
    if (::syscall(SYS_poll, &p, 1, int(limit.count())) != 1) return false;
    char c;
    return ::syscall(SYS_read, fd[0], &c, 1) == 1;
  }
  void post() {
    char c = 1;
    EXPECT_EQ(::syscall(SYS_write, fd[1], &c, 1), 1);
  }
};

// The waiter blocks its processor's kernel thread; the poster, queued
// behind it on the one processor, ends the wait. Returns whether it did
// within `limit`.
bool blocked_waiter_is_posted(Cluster& c, std::chrono::milliseconds limit) {
  Pipe p;
  loom::FibreAttr attr;
  attr.cluster = &c;
  bool came = false;
  loom::Fibre waiter(attr, [&] {
    loom::Fibre poster(attr, [&] { p.post(); });  // queued here, behind this fibre
    came = p.wait_unseen(limit);
    poster.join();
  });
  waiter.join();
  return came;
}

// The monitor counts a hand-off after the spare it woke has started: the
// spare may run the poster, and the test read the stats, before the count
// lands (TSan on CI: handoffs 0 with lost_blocked 1). Read them again until
// `done` holds, for up to 2 s.
template <class Done>
loom::ClusterStats settled_stats(Cluster& c, Done done) {
  auto until = Clock::now() + std::chrono::seconds(2);
  auto st = c.stats();
  while (!done(st) && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    st = c.stats();
  }
  return st;
}

TEST(Monitor, AFibreQueuedBehindABlockedKernelThreadRuns) {
  Cluster c(1, config(1000));
  const int rounds = int(loom::test::scaled(20)) + 1;
  for (int i = 0; i < rounds; ++i)
    ASSERT_TRUE(blocked_waiter_is_posted(c, std::chrono::seconds(10))) << "round " << i;
  auto st = settled_stats(c, [](const loom::ClusterStats& s) { return s.lost_blocked > 0 && s.handoffs > 0; });
  // (Once under TSan on CI every round came with no hand-off counted: the
  // figures, to tell how.)
  const std::string seen = "lost_blocked " + std::to_string(st.lost_blocked) + ", lost_running " +
                           std::to_string(st.lost_running) + ", handoffs " + std::to_string(st.handoffs) +
                           ", spares_started " + std::to_string(st.spares_started) + ", spare_activations " +
                           std::to_string(st.spare_activations) + ", steals " + std::to_string(st.steals) +
                           ", switches " + std::to_string(st.switches);
  EXPECT_GT(st.lost_blocked, 0u) << seen;
  EXPECT_GT(st.handoffs, 0u) << seen;
  EXPECT_GE(st.spares_started, 1u) << seen;
  // One spare serves every round: it lingers between them, or is woken.
  EXPECT_LE(st.spares_started, 2u) << "a spare per hand-off";
}

// The variant without the monitor (LOOM_HANDOFF_US=0): the poster waits
// behind the blocked kernel thread, as before issue 31 — the wait runs out.
TEST(Monitor, OffTheQueuedFibreWaits) {
  Cluster c(1, config(0));
  EXPECT_FALSE(blocked_waiter_is_posted(c, std::chrono::milliseconds(300)));
  EXPECT_EQ(c.stats().spares_started, 0u);
}

// A fibre that busy-waits for a flag set by a fibre queued behind it on
// the one processor (OpenBLAS's workers): the setter runs once the spinner
// has held the processor a slice.
TEST(Monitor, ASpinnerDoesNotStarveTheFibreItWaitsFor) {
  SchedConfig cfg = config(1000);
  cfg.slice_us = 5000;
  Cluster c(1, cfg);
  loom::FibreAttr attr;
  attr.cluster = &c;
  std::atomic<bool> flag{false}, gave_up{false};
  loom::Fibre spinner(attr, [&] {
    loom::Fibre setter(attr, [&] { flag.store(true); });
    auto until = Clock::now() + std::chrono::seconds(10);
    while (!flag.load() && !(gave_up = Clock::now() > until)) {
    }
    setter.join();
  });
  spinner.join();
  EXPECT_FALSE(gave_up.load()) << "the setter never ran beside the spinner";
  EXPECT_GT(c.stats().lost_running, 0u);
}

// With stealing off no idle processor takes queued work — but a spare may
// take it from a processor found lost.
TEST(Monitor, StealingOffStillRescuesALostProcessor) {
  Cluster c(1, config(1000, /*stealing=*/false));
  ASSERT_TRUE(blocked_waiter_is_posted(c, std::chrono::seconds(10)));
  // Rescued as blocked in the kernel (a hand-off), or — when the host
  // preempted the waiter's kernel thread before its call, and the monitor
  // found it running — as a spinner; either way a spare ran the poster (a
  // fresh clone's check at load 55 on 2 CPUs: handoffs 0, and the poster
  // ran all the same; the counters say how next time). The count may land
  // after the poster ran.
  auto st = settled_stats(
      c, [](const loom::ClusterStats& s) { return s.handoffs + s.lost_running + s.spare_activations > 0; });
  EXPECT_GT(st.handoffs + st.lost_running + st.spare_activations, 0u)
      << "handoffs " << st.handoffs << ", lost_blocked " << st.lost_blocked << ", lost_running " << st.lost_running
      << ", spare_activations " << st.spare_activations << ", steals " << st.steals;
}

// The fibre that ends the wait is in no queue but asleep on a timer: with
// every processor lost, a due timer is work a spare must fire.
TEST(Monitor, ADueTimerFiresWhileEveryProcessorIsLost) {
  Cluster c(1, config(1000));
  Pipe p;
  loom::FibreAttr attr;
  attr.cluster = &c;
  bool came = false;
  loom::Fibre sleeper(attr, [&] {
    loom::this_fibre::sleep_for(std::chrono::milliseconds(20));
    p.post();
  });
  loom::Fibre waiter(attr, [&] { came = p.wait_unseen(std::chrono::seconds(10)); });
  waiter.join();
  sleeper.join();
  EXPECT_TRUE(came);
}

// ... or waiting for a socket's bytes, which a kernel thread outside the
// cluster sends once the processor is lost: readiness on the epoll set is
// work a spare must collect.
TEST(Monitor, ReadinessIsCollectedWhileEveryProcessorIsLost) {
  Cluster c(1, config(1000));
  Pipe p;
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);  // blocking: loom::io::read waits
  loom::FibreAttr attr;
  attr.cluster = &c;
  bool came = false;
  std::atomic<bool> reading{false}, blocked{false};
  loom::Fibre reader(attr, [&] {
    char b;
    reading = true;
    if (loom::io::read(sv[0], &b, 1) == 1) p.post();
  });
  // The reader waits on the epoll set, in no queue, before the processor
  // is lost.
  while (!reading.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  loom::Fibre waiter(attr, [&] {
    blocked = true;
    came = p.wait_unseen(std::chrono::seconds(10));
  });
  std::thread sender([&] {
    while (!blocked.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    char b = 'x';
    EXPECT_EQ(::write(sv[1], &b, 1), 1);
  });
  waiter.join();
  reader.join();
  sender.join();
  ::close(sv[0]);
  ::close(sv[1]);
  auto st = c.stats();
  EXPECT_TRUE(came) << "handoffs " << st.handoffs << ", io_blocks " << st.io_blocks;
}

// Spares park once no processor has been lost for a while (the linger,
// 100 ms), and the next hand-off wakes a parked one instead of starting
// another thread.
TEST(Monitor, SparesParkWhenNothingIsLostAndAreReused) {
  Cluster c(1, config(1000));
  ASSERT_TRUE(blocked_waiter_is_posted(c, std::chrono::seconds(10)));
  auto until = Clock::now() + std::chrono::seconds(10);
  while (c.impl().active_spares() > 0 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(c.impl().active_spares(), 0u) << "the spare still active 10 s after the last hand-off";
  const auto started = c.stats().spares_started;
  ASSERT_TRUE(blocked_waiter_is_posted(c, std::chrono::seconds(10)));
  EXPECT_EQ(c.stats().spares_started, started) << "a parked spare is woken, not a new one started";
  EXPECT_GT(c.stats().spare_activations, 0u);
  EXPECT_GT(c.stats().spare_us, 0u);
}

// More blocked kernel threads than processors: four waiters, each blocked
// where loom cannot see, on two processors; the poster is queued last.
TEST(Monitor, MoreBlockedThreadsThanProcessors) {
  Cluster c(2, config(1000));
  Pipe p;
  loom::FibreAttr attr;
  attr.cluster = &c;
  std::atomic<int> came{0};
  {
    std::vector<std::unique_ptr<loom::Fibre>> waiters;
    for (int i = 0; i < 4; ++i)
      waiters.push_back(std::make_unique<loom::Fibre>(attr, [&] { came += p.wait_unseen(std::chrono::seconds(10)); }));
    loom::Fibre poster(attr, [&] {
      for (int i = 0; i < 4; ++i) p.post();
    });
    poster.join();
    for (auto& w : waiters) w->join();
  }
  EXPECT_EQ(came.load(), 4);
}

}  // namespace
