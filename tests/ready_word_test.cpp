// The readiness word under every I/O wait (io/ready_word.hpp): posts that
// collapse, timed waits, and posts racing with parking and with timeouts.
// Posters run on kernel threads that are not processors, as the poller
// threads do, and on fibres of another processor, as the idle poller does.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <random>
#include <thread>

#include "io/ready_word.hpp"
#include "loom/loom.hpp"
#include "base/futex.hpp"
#include "test_util.hpp"

namespace {

using loom::rt::ReadyWord;
using loom::rt::now_ns;
using std::chrono::steady_clock;

// Runs fn on a fibre of `c` and joins it.
template <class F>
void on_fibre(loom::Cluster& c, F fn) {
  loom::FibreAttr attr;
  attr.cluster = &c;
  loom::Fibre f(attr, fn);
  f.join();
}

TEST(ReadyWord, PostsBeforeTheWaitCollapseIntoOne) {
  loom::Cluster c(1);
  on_fibre(c, [] {
    ReadyWord w;
    EXPECT_EQ(w.wait(loom::kNow), EAGAIN);
    w.post();
    w.post();
    w.post();
    EXPECT_EQ(w.wait(loom::kForever), 0);
    EXPECT_EQ(w.wait(loom::kNow), EAGAIN) << "three posts with nobody waiting are one";
  });
}

TEST(ReadyWord, TimedWaitEndsAtItsDeadlineNeverBefore) {
  loom::Cluster c(1);
  on_fibre(c, [] {
    ReadyWord w;
    for (int i = 0; i < 5; ++i) {
      std::int64_t d = now_ns() + 3'000'000;
      EXPECT_EQ(w.wait(d), ETIMEDOUT);
      EXPECT_GE(now_ns(), d);
    }
    // A post after a timeout is kept for the next wait.
    w.post();
    EXPECT_EQ(w.wait(now_ns() + 1'000'000'000), 0);
  });
}

// The waiter parks and is posted over and over, the poster waiting each
// time until the waiter took it: a lost post hangs the handshake, which the
// watchdog reports.
void handshake(loom::Cluster& c, long rounds, bool timed, bool poster_is_fibre) {
  ReadyWord w;
  std::atomic<long> taken{0};
  std::atomic<bool> done{false};
  auto waiter = [&] {
    while (taken.load() < rounds) {
      int r = w.wait(timed ? now_ns() + 50'000'000 : loom::kForever);
      if (r == 0) {
        taken.fetch_add(1);
      } else {
        EXPECT_EQ(r, ETIMEDOUT);
      }
    }
    done.store(true);
  };
  long lost = 0;
  auto poster = [&] {
    for (long i = 0; i < rounds && !lost; ++i) {
      w.post();
      auto since = steady_clock::now();
      while (taken.load() == i) {
        if (steady_clock::now() - since > std::chrono::seconds(10)) {
          lost = i + 1;  // reported below; the loop below unsticks the waiter
          break;
        }
        if (poster_is_fibre)
          loom::this_fibre::yield();
        else
          std::this_thread::yield();
      }
    }
  };
  loom::FibreAttr attr;
  attr.cluster = &c;
  loom::Fibre wf(attr, waiter);
  if (poster_is_fibre) {
    loom::Fibre pf(attr, poster);
    pf.join();
  } else {
    std::thread t(poster);
    t.join();
  }
  while (!done.load()) {
    w.post();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  wf.join();
  EXPECT_EQ(lost, 0) << "post " << lost << " was never seen by the waiter";
}

TEST(ReadyWord, NoPostIsLostFromAKernelThread) {
  loom::Cluster c(2);
  handshake(c, loom::test::scaled(20000), false, false);
}

TEST(ReadyWord, NoPostIsLostFromAnotherProcessor) {
  loom::Cluster c(2);
  handshake(c, loom::test::scaled(100000), false, true);
}

TEST(ReadyWord, NoPostIsLostByATimedWait) {
  loom::Cluster c(2);
  handshake(c, loom::test::scaled(20000), true, false);
}

// Deadlines of 0–100 µs against posts every 0–100 µs: each wait returns 0
// or times out no earlier than its deadline, no more waits succeed than
// posts were made, and the record of a wait is never touched after it
// returned (the sanitizer builds run this too).
TEST(ReadyWord, PostsRacingWithTimeouts) {
  loom::Cluster c(2);
  ReadyWord w;
  std::atomic<bool> stop{false};
  std::atomic<long> posts{0};
  // A floor under the sanitizers' scaling: with a handful of waits, all of
  // them may find a token (or none), and the race below is not exercised.
  const long waits = std::max(2000L, loom::test::scaled(10000));
  long ok = 0, timed_out = 0, early = 0;
  std::thread poster([&] {
    std::mt19937 rng(7);
    while (!stop.load()) {
      std::int64_t until = now_ns() + std::int64_t(rng() % 100'000);
      while (now_ns() < until) {
      }
      posts.fetch_add(1);
      w.post();
    }
  });
  on_fibre(c, [&] {
    std::mt19937 rng(11);
    for (long i = 0; i < waits; ++i) {
      std::int64_t d = now_ns() + std::int64_t(rng() % 100'000);
      int r = w.wait(d);
      if (r == 0) {
        ++ok;
      } else {
        ++timed_out;
        early += now_ns() < d;
      }
    }
  });
  stop.store(true);
  poster.join();
  EXPECT_EQ(early, 0);
  EXPECT_LE(ok, posts.load());
  EXPECT_EQ(ok + timed_out, waits);
  EXPECT_GT(ok, 0);
  EXPECT_GT(timed_out, 0);
}

// ---- callbacks (loom::io::when_ready) ---------------------------------------------

void bump(void* p) { static_cast<std::atomic<long>*>(p)->fetch_add(1); }

TEST(ReadyWord, ArmTakesAPendingTokenAndIsOneShot) {
  ReadyWord w;
  std::atomic<long> n{0};
  EXPECT_EQ(w.arm(&bump, &n), 0);
  EXPECT_EQ(w.arm(&bump, &n), EBUSY) << "armed twice";
  w.post();
  EXPECT_EQ(n.load(), 1);
  w.post();  // nothing armed: a token
  w.post();
  EXPECT_EQ(n.load(), 1);
  EXPECT_EQ(w.arm(&bump, &n), 1) << "the token: ready now, for the caller to invoke";
  EXPECT_EQ(w.arm(&bump, &n), 0) << "two posts with nothing armed are one token";
  ReadyWord::Callback fn;
  void* arg;
  w.take_or_post(fn, arg);
  EXPECT_EQ(fn, &bump);
  EXPECT_EQ(arg, &n);
  w.post();
  EXPECT_EQ(n.load(), 1) << "a taken callback is the taker's";
}

// One armer and one poster (or closer) on kernel threads, as the poller
// threads are, every round on a fresh word: the callback runs exactly once
// per round whoever wins, never zero times, never twice.
void arm_race(bool close_too) {
  const long rounds = std::max(2000L, loom::test::scaled(50000));
  std::atomic<ReadyWord*> word{nullptr};
  std::atomic<long> round{0}, n{0}, posted{0}, closed{0};
  auto racer = [&](bool closer) {
    for (long r = 1; r <= rounds; ++r) {
      while (round.load() != r) std::this_thread::yield();  // 3 spinning threads, 2 CPUs
      ReadyWord* w = word.load();
      if (closer) {
        ReadyWord::Callback fn;
        void* arg;
        w->take_or_post(fn, arg);
        if (fn) fn(arg);
        closed.store(r);
      } else {
        w->post();
        posted.store(r);
      }
    }
  };
  std::thread poster(racer, false);
  std::thread closer;
  if (close_too) closer = std::thread(racer, true);
  long wrong = 0;
  for (long r = 1; r <= rounds; ++r) {
    auto* w = new ReadyWord;
    long before = n.load();
    word.store(w);
    round.store(r);
    if (w->arm(&bump, &n) == 1) bump(&n);
    while (posted.load() < r || (close_too && closed.load() < r)) std::this_thread::yield();
    wrong += n.load() != before + 1;
    delete w;
  }
  poster.join();
  if (close_too) closer.join();
  EXPECT_EQ(wrong, 0) << "rounds where the callback did not run exactly once";
}

TEST(ReadyWord, ArmingRacingWithAPostRunsTheCallbackOnce) { arm_race(false); }
TEST(ReadyWord, ArmingRacingWithAPostAndACloseRunsTheCallbackOnce) { arm_race(true); }

}  // namespace
