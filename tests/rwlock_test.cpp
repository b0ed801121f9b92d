// Reader-writer locks (loom/sync.hpp) with writer and reader preference.
//
// Tests that need a strict order run on one processor, where scheduling is
// deterministic: a fibre runs until it blocks or yields, and the ready queue
// is FIFO.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.hpp"
#include "sync_test_util.hpp"

namespace {

using namespace std::chrono_literals;
using loom::Clock;
using loom::Cluster;
using loom::Fibre;
using loom::RWLock;
using loom::RWPreference;
using loom::test::Watchdog;
using loom::test::on;
using loom::test::run_in;
using loom::test::scaled_at_least;

const char* to_string(RWPreference p) { return p == RWPreference::writer ? "writer" : "reader"; }

// ---- RWLock -------------------------------------------------------------------------------

class RWLockP : public testing::TestWithParam<RWPreference> {};

TEST_P(RWLockP, ReadersOverlap) {
  Watchdog dog;
  Cluster c(2);
  RWLock rw(GetParam());
  std::atomic<int> active{0}, max_active{0};
  {
    std::vector<Fibre> v;
    for (int i = 0; i < 4; ++i)
      v.emplace_back(on(c), [&] {
        rw.lock_shared();
        int now = active.fetch_add(1) + 1;
        int m = max_active.load();
        while (now > m && !max_active.compare_exchange_weak(m, now)) {
        }
        // Hold it until two readers have been in at once (or 5 s passed).
        auto give_up = Clock::now() + 5s;
        while (max_active.load() < 2 && Clock::now() < give_up) loom::this_fibre::yield();
        active.fetch_sub(1);
        rw.unlock_shared();
      });
  }
  EXPECT_GE(max_active.load(), 2);
}

TEST_P(RWLockP, WritersExcludeEveryone) {
  Watchdog dog;
  for (std::size_t procs : {1, 2, 4}) {
    Cluster c(procs);
    RWLock rw(GetParam());
    const long iters = scaled_at_least(10, 1000);
    long data = 0;  // written under the write lock only
    std::atomic<int> readers{0}, writers{0}, bad{0};
    {
      std::vector<Fibre> v;
      for (int w = 0; w < 2; ++w)
        v.emplace_back(on(c), [&] {
          for (long i = 0; i < iters; ++i) {
            if (i % 2) {
              rw.lock();
            } else {
              while (!rw.try_lock_until(Clock::now() + 1ms)) {
              }
            }
            if (writers.fetch_add(1) != 0 || readers.load() != 0) bad.fetch_add(1);
            long seen = data;
            loom::this_fibre::yield();
            data = seen + 1;
            writers.fetch_sub(1);
            rw.unlock();
          }
        });
      for (int r = 0; r < 6; ++r)
        v.emplace_back(on(c), [&] {
          for (long i = 0; i < iters; ++i) {
            if (i % 2) {
              rw.lock_shared();
            } else {
              while (!rw.try_lock_shared()) loom::this_fibre::yield();
            }
            readers.fetch_add(1);
            long seen = data;
            if (writers.load() != 0) bad.fetch_add(1);
            loom::this_fibre::yield();
            if (data != seen) bad.fetch_add(1);
            readers.fetch_sub(1);
            rw.unlock_shared();
          }
        });
    }
    EXPECT_EQ(data, 2 * iters) << procs << " processors";
    EXPECT_EQ(bad.load(), 0) << procs << " processors";
  }
}

// One processor: the reader that holds it is the driver; a writer queues;
// then a new reader comes. With writer preference it must wait (and its
// timed attempt time out, not early); with reader preference it joins the
// reader already in, while the writer still waits.
TEST_P(RWLockP, NewReaderAndAWaitingWriter) {
  Watchdog dog;
  const bool readers_first = GetParam() == RWPreference::reader;
  Cluster c(1);
  RWLock rw(GetParam());
  run_in(c, [&] {
    rw.lock_shared();
    bool writer_in = false;
    Fibre writer([&] {
      rw.lock();
      writer_in = true;
      rw.unlock();
    });
    loom::this_fibre::yield();  // the writer blocks
    EXPECT_FALSE(writer_in);
    run_in(c, [&] {
      EXPECT_EQ(rw.try_lock_shared(), readers_first) << "try_lock_shared";
      if (readers_first) rw.unlock_shared();
      auto t = Clock::now() + 5ms;
      bool got = rw.try_lock_shared_until(t);
      EXPECT_EQ(got, readers_first) << "try_lock_shared_until";
      if (got) {
        EXPECT_FALSE(writer_in) << "the writer got in while readers held it";
        rw.unlock_shared();
      } else {
        EXPECT_GE(Clock::now(), t) << "timed out early";
      }
    });
    EXPECT_FALSE(writer_in);
    rw.unlock_shared();
    writer.join();
    EXPECT_TRUE(writer_in);
  });
}

// Writer preference: a writer that gives up (times out) must let in the
// readers its waiting had held back, while the first reader still holds it.
TEST(RWLock, TimedOutWriterLetsHeldBackReadersIn) {
  Watchdog dog;
  Cluster c(1);
  RWLock rw(RWPreference::writer);
  run_in(c, [&] {
    rw.lock_shared();
    Fibre writer([&] { EXPECT_FALSE(rw.try_lock_until(Clock::now() + 10ms)); });
    loom::this_fibre::yield();  // the writer waits
    bool reader_got = false;
    Fibre reader([&] {
      reader_got = rw.try_lock_shared_until(Clock::now() + 10s);
      if (reader_got) rw.unlock_shared();
    });
    loom::this_fibre::yield();  // the reader waits behind the writer
    writer.join();
    reader.join();  // while this fibre still holds the lock shared
    EXPECT_TRUE(reader_got) << "readers stayed blocked after the waiting writer timed out";
    rw.unlock_shared();
  });
}

// Writer preference: while readers keep coming, each holding it for a
// while so that it is never free of readers, a writer still gets in.
TEST(RWLock, WriterIsNotStarvedByAStreamOfReaders) {
  Watchdog dog;
  Cluster c(2);
  RWLock rw(RWPreference::writer);
  std::atomic<bool> stop{false};
  std::atomic<long> reads{0};
  std::vector<Fibre> readers;
  for (int i = 0; i < 4; ++i)
    readers.emplace_back(on(c), [&] {
      while (!stop.load()) {
        rw.lock_shared();
        reads.fetch_add(1);
        loom::this_fibre::sleep_for(500us);
        rw.unlock_shared();
      }
    });
  loom::this_fibre::sleep_for(5ms);  // the stream is flowing
  const int writes = int(scaled_at_least(3, 20));
  int got = 0;
  for (int i = 0; i < writes; ++i) {
    if (rw.try_lock_until(Clock::now() + 5s)) {
      ++got;
      rw.unlock();
    }
    loom::this_fibre::sleep_for(1ms);
  }
  stop.store(true);
  readers.clear();
  EXPECT_EQ(got, writes) << "write locks that timed out (5 s each) behind a stream of readers";
  EXPECT_GT(reads.load(), writes);
}

INSTANTIATE_TEST_SUITE_P(Preferences, RWLockP, testing::Values(RWPreference::writer, RWPreference::reader),
                         [](const testing::TestParamInfo<RWPreference>& i) { return to_string(i.param); });

TEST(RWLock, ErrorCodes) {
  Cluster c(2);
  RWLock rw;
  run_in(c, [&] {
    EXPECT_EQ(rw.unlock_errno(), EPERM) << "not held";
    EXPECT_EQ(rw.lock_errno(loom::kForever), 0);
    EXPECT_EQ(rw.lock_errno(loom::deadline_after(50ms)), EDEADLK) << "write relock";
    EXPECT_EQ(rw.lock_shared_errno(loom::deadline_after(50ms)), EDEADLK) << "read lock by the writer";
    run_in(c, [&] {
      EXPECT_EQ(rw.lock_errno(loom::kNow), EBUSY);
      EXPECT_EQ(rw.lock_shared_errno(loom::kNow), EBUSY);
      EXPECT_FALSE(rw.try_lock());
      EXPECT_FALSE(rw.try_lock_shared());
      EXPECT_EQ(rw.unlock_errno(), EPERM) << "the write side knows its owner";
    });
    EXPECT_EQ(rw.unlock_errno(), 0);
    EXPECT_EQ(rw.lock_shared_errno(loom::kNow), 0);
    EXPECT_EQ(rw.lock_shared_errno(loom::kNow), 0);
    run_in(c, [&] {
      EXPECT_EQ(rw.lock_errno(loom::kNow), EBUSY);
      EXPECT_EQ(rw.lock_errno(loom::deadline_after(2ms)), ETIMEDOUT);
    });
    EXPECT_EQ(rw.unlock_errno(), 0);
    EXPECT_EQ(rw.unlock_errno(), 0);
    EXPECT_EQ(rw.unlock_errno(), EPERM);
  });
  EXPECT_TRUE(rw.try_lock());
  rw.unlock();
}

}  // namespace
