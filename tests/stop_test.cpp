// Fibre::request_stop and loom's waits (fibre.hpp): every timed form, and
// the sleeps, end when a stop is requested while they wait, or at once when
// one is pending, and report it as their deadline would (a Channel with
// ChannelStatus::stopped); what they leave behind is as after a timeout (a
// semaphore's count, a barrier's arrivals, a joinable fibre). The untimed
// forms wait on. Clock::time_point::max() waits with no deadline, only
// until a stop (or success). Run under the chaos build too.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "loom/channel.hpp"
#include "loom/future.hpp"
#include "loom/loom.hpp"
#include "loom/task_group.hpp"
#include "sync_test_util.hpp"

namespace {

using namespace std::chrono_literals;
using loom::Barrier;
using loom::Channel;
using loom::ChannelStatus;
using loom::Clock;
using loom::Cluster;
using loom::CondVar;
using loom::Fibre;
using loom::Mutex;
using loom::Semaphore;
using loom::test::run_in;
using loom::test::Watchdog;

constexpr auto kFar = 30s;  // a deadline no stopped wait may reach (the watchdog is shorter)

// Runs `wait` in a fibre of c, asks it to stop once it has started (and had
// 20 ms to block; or before it starts when `pending`), and expects the
// fibre to end: `wait` returns whether its wait reported the stop.
void expect_stopped(const char* what, const std::function<bool()>& wait, bool pending) {
  // (No SCOPED_TRACE: gtest keeps traces per kernel thread, and this fibre
  // may resume on another after a wait.)
  const std::string how = std::string(what) + (pending ? ", stop pending" : ", stop while waiting");
  std::atomic<bool> started{false}, reported{false};
  Fibre f([&] {
    if (pending)
      while (!loom::this_fibre::stop_requested()) loom::this_fibre::yield();
    started = true;
    reported = wait();
  });
  if (pending) {
    f.request_stop();
  } else {
    while (!started) loom::this_fibre::sleep_for(1ms);
    loom::this_fibre::sleep_for(20ms);
    f.request_stop();
  }
  ASSERT_TRUE(f.join_for(10s)) << how << ": the stop did not end the wait";
  EXPECT_TRUE(reported.load()) << how << ": the wait did not report the stop";
}

// Each timed form, both ways.
TEST(StopPoints, EndEveryTimedForm) {
  Watchdog dog(std::chrono::seconds(120));
  Cluster c(2);
  run_in(c, [] {
    for (bool pending : {false, true}) {
      expect_stopped("sleep_for", [] { return !loom::this_fibre::sleep_for(kFar); }, pending);
      expect_stopped("sleep_until", [] { return !loom::this_fibre::sleep_until(Clock::now() + kFar); }, pending);

      Semaphore sem(0);
      expect_stopped("Semaphore::try_acquire_for", [&] { return !sem.try_acquire_for(kFar); }, pending);
      expect_stopped("Semaphore::try_acquire_until", [&] { return !sem.try_acquire_until(Clock::now() + kFar); },
                     pending);
      EXPECT_EQ(sem.value(), 0u);
      sem.release();  // the count is conserved: nobody took this one
      EXPECT_TRUE(sem.try_acquire());

      Mutex m;
      m.lock();
      expect_stopped("Mutex::try_lock_for", [&] { return !m.try_lock_for(kFar); }, pending);
      expect_stopped("Mutex::try_lock_until", [&] { return !m.try_lock_until(Clock::now() + kFar); }, pending);
      m.unlock();
      EXPECT_TRUE(m.try_lock()) << "a stopped locker left the mutex held";
      m.unlock();

      loom::RWLock rw;
      rw.lock();
      expect_stopped("RWLock::try_lock_until", [&] { return !rw.try_lock_until(Clock::now() + kFar); }, pending);
      expect_stopped("RWLock::try_lock_shared_until",
                     [&] { return !rw.try_lock_shared_until(Clock::now() + kFar); }, pending);
      rw.unlock();
      EXPECT_TRUE(rw.try_lock());
      rw.unlock();

      CondVar cv;
      bool never = false;
      expect_stopped("CondVar::wait_for with a predicate", [&] {
        std::lock_guard<Mutex> g(m);
        bool r = cv.wait_for(m, kFar, [&] { return never; });
        return !r && m.held_by_caller();  // the mutex is held again, as after a timeout
      }, pending);
      expect_stopped("CondVar::wait_until", [&] {
        std::lock_guard<Mutex> g(m);
        bool r = cv.wait_until(m, Clock::now() + kFar);
        return !r && m.held_by_caller();
      }, pending);

      // A barrier of two: the stopped arrival is withdrawn, so two others
      // still make a phase.
      Barrier b(2);
      expect_stopped("Barrier::arrive_and_wait_for", [&] { return !b.arrive_and_wait_for(kFar).has_value(); },
                     pending);
      std::atomic<int> through{0};
      {
        Fibre other([&] { through += b.arrive_and_wait_for(10s).has_value(); });
        through += b.arrive_and_wait_for(10s).has_value();
      }
      EXPECT_EQ(through.load(), 2) << "the stopped arrival was counted";

      // call_once_for while another caller runs the function.
      loom::OnceFlag once;
      Semaphore in_once(0), end_once(0);
      Fibre runner([&] { loom::call_once(once, [&] { in_once.release(); end_once.acquire(); }); });
      in_once.acquire();
      expect_stopped("call_once_for", [&] { return !loom::call_once_for(once, kFar, [] {}); }, pending);
      end_once.release();
      runner.join();
      EXPECT_TRUE(once.is_done());

      // A join: the stopped joiner leaves the fibre joinable.
      Semaphore end_target(0);
      Fibre target([&] { end_target.acquire(); });
      expect_stopped("Fibre::join_for", [&] { return !target.join_for(kFar) && target.joinable(); }, pending);
      expect_stopped("Fibre::join_until(max)", [&] { return !target.join_until(Clock::time_point::max()); }, pending);
      end_target.release();
      target.join();

      Channel<int> empty(1), full(1);
      ASSERT_EQ(full.try_push(1), ChannelStatus::success);
      expect_stopped("Channel::pop_for", [&] {
        int v;
        return empty.pop_for(v, kFar) == ChannelStatus::stopped;
      }, pending);
      expect_stopped("Channel::push_until", [&] { return full.push_until(2, Clock::now() + kFar) == ChannelStatus::stopped; },
                     pending);
      int v = 0;
      EXPECT_EQ(full.try_pop(v), ChannelStatus::success);
      EXPECT_EQ(v, 1);
      EXPECT_EQ(full.try_pop(v), ChannelStatus::empty) << "a stopped push left its value";

      loom::Promise<int> promise;
      loom::Future<int> future = promise.get_future();
      expect_stopped("Future::wait_for", [&] { return future.wait_for(kFar) == std::future_status::timeout; }, pending);
      promise.set_value(7);
      EXPECT_EQ(future.get(), 7);

      Semaphore end_group(0);
      loom::TaskGroup g;
      g.spawn([&] { end_group.acquire(); });
      expect_stopped("TaskGroup::join_for", [&] { return !g.join_for(kFar); }, pending);
      end_group.release();
      g.join();
    }
  });
}

// The untimed forms cannot say a stop ended them: they wait on, as before.
TEST(StopPoints, UntimedFormsWaitOn) {
  Watchdog dog(std::chrono::seconds(60));
  Cluster c(2);
  run_in(c, [] {
    Semaphore sem(0);
    Mutex m;
    CondVar cv;
    bool ready = false;
    std::atomic<bool> released{false}, notified{false}, acquired_early{false}, woke_early{false};
    Fibre f([&] {
      while (!loom::this_fibre::stop_requested()) loom::this_fibre::yield();
      sem.acquire();
      acquired_early = !released.load();
      std::lock_guard<Mutex> g(m);
      cv.wait(m, [&] { return ready; });
      woke_early = !notified.load();
    });
    f.request_stop();
    loom::this_fibre::sleep_for(30ms);
    released = true;
    sem.release();
    loom::this_fibre::sleep_for(30ms);
    {
      std::lock_guard<Mutex> g(m);
      ready = true;
      notified = true;
    }
    cv.notify_all();
    ASSERT_TRUE(f.join_for(10s));
    EXPECT_FALSE(acquired_early.load());
    EXPECT_FALSE(woke_early.load());
  });
}

// Clock::time_point::max() is no deadline: the join waits for the end (it
// returned false at once, from a fibre and from a kernel thread).
TEST(StopPoints, JoinUntilMaxWaitsForTheEnd) {
  Watchdog dog(std::chrono::seconds(60));
  Cluster c(2);
  for (bool from_fibre : {true, false}) {
    std::atomic<bool> ended{false};
    loom::FibreAttr attr;
    attr.cluster = &c;
    Fibre target(attr, [&] {
      loom::this_fibre::sleep_for(30ms);
      ended = true;
    });
    bool joined = false;
    if (from_fibre)
      run_in(c, [&] { joined = target.join_until(Clock::time_point::max()); });
    else
      joined = target.join_until(Clock::time_point::max());
    EXPECT_TRUE(joined) << (from_fibre ? "fibre" : "kernel thread");
    EXPECT_TRUE(ended.load());
  }
}

// Requests racing the waits' own ends (a release, a timer, an exit): the
// wait ends once, and the counts stay whole.
TEST(StopPoints, RequestsRaceWakeUps) {
  Watchdog dog(std::chrono::seconds(120));
  Cluster c(2);
  run_in(c, [] {
    const int rounds = int(loom::test::scaled_at_least(50, 300));
    Semaphore sem(0);
    int taken = 0, released = 0;
    for (int i = 0; i < rounds; ++i) {
      std::atomic<bool> got{false};
      Fibre waiter([&] { got = sem.try_acquire_for(std::chrono::microseconds(200 + (i % 7) * 50)); });
      Fibre joiner([&] {
        Fibre quick([] { loom::this_fibre::yield(); });
        quick.join_for(std::chrono::microseconds(100 + (i % 5) * 50)) || (quick.join(), true);
      });
      if (i % 2) {
        sem.release();
        ++released;
      }
      waiter.request_stop();
      joiner.request_stop();
      waiter.join();
      joiner.join();
      taken += got.load();
    }
    while (sem.try_acquire()) ++taken;
    EXPECT_EQ(taken, released) << "a release was lost or doubled by a stop";
  });
}

// Outside review: a request that reaches a waiter already woken, whose
// primitive the program then destroyed (std allows a condvar's destruction
// once every waiter is notified; a semaphore's after the release its
// waiter needed): the requester locked the dead primitive's lock (a hang
// on one processor, a write into freed memory on two). On one processor
// the woken waiter has not run again when the request comes.
TEST(StopPoints, ARequestAfterTheWakeTouchesNoDestroyedPrimitive) {
  Watchdog dog(std::chrono::seconds(60));
  Cluster c(1);
  run_in(c, [&] {
    for (int round = 0; round < 20; ++round) {
      Mutex m;
      auto* cv = new CondVar;
      auto* sem = new Semaphore(0);
      bool flag = false;
      std::atomic<int> waiting{0};
      Fibre a([&] {
        std::lock_guard<Mutex> g(m);
        ++waiting;
        cv->wait_for(m, kFar, [&] { return flag; });
      });
      Fibre b([&] {
        ++waiting;
        sem->try_acquire_for(kFar);
      });
      while (waiting < 2) loom::this_fibre::yield();
      loom::this_fibre::sleep_for(2ms);  // both blocked
      {
        std::lock_guard<Mutex> g(m);
        flag = true;
        cv->notify_all();
      }
      delete cv;
      sem->release();
      delete sem;
      a.request_stop();
      b.request_stop();
      ASSERT_TRUE(a.join_for(10s));
      ASSERT_TRUE(b.join_for(10s));
    }
  });
}

// Outside review: call_once_until waits again when a run it waited for
// threw and another caller's run began meanwhile; each of its waits is a
// stop point, not only the first.
TEST(StopPoints, CallOnceStopsInALaterWait) {
  Watchdog dog(std::chrono::seconds(60));
  Cluster c(1);
  int set_up = 0;
  for (int r = 0; r < 20; ++r) {
    run_in(c, [&] {
      loom::OnceFlag once;
      Semaphore go_throw(0), second_in(0), end_second(0);
      std::atomic<bool> waiter_started{false};
      Fibre runner([&] {
        try {
          loom::call_once(once, [&] {
            go_throw.acquire();
            throw std::runtime_error("first run fails");
          });
        } catch (const std::runtime_error&) {
        }
        loom::call_once(once, [&] {
          second_in.release();
          end_second.acquire();
        });
      });
      Fibre waiter([&] {
        waiter_started = true;
        loom::call_once_until(once, Clock::time_point::max(), [] {});
      });
      while (!waiter_started) loom::this_fibre::yield();
      loom::this_fibre::sleep_for(5ms);  // the waiter waits for the first run
      go_throw.release();
      if (second_in.try_acquire_for(1s)) {  // (else the waiter ran it itself: no second wait this round)
        ++set_up;
        loom::this_fibre::sleep_for(5ms);  // woken by the failure, it waits for the second run
        waiter.request_stop();
        EXPECT_TRUE(waiter.join_for(10s)) << "round " << r << ": the stop did not end the second wait";
      }
      end_second.release();
      if (waiter.joinable()) waiter.join();
      runner.join();
    });
  }
  EXPECT_GT(set_up, 0);
}

// Outside review: the mark covers a channel's wait only, not the item's
// move (an untimed acquire in a move constructor, with a stop pending,
// returned with nothing taken).
struct GatedItem {
  static inline Semaphore* gate = nullptr;
  static inline std::atomic<bool> opened{false}, early{false};
  bool armed = false;
  GatedItem() = default;
  explicit GatedItem(bool a) : armed(a) {}
  GatedItem(GatedItem&& o) noexcept : armed(o.armed) {
    if (armed && gate) {
      Semaphore* g = std::exchange(gate, nullptr);  // (once: the pop moves the item twice)
      g->acquire();  // untimed: waits for the release whatever the stop
      if (!opened) early = true;
    }
    o.armed = false;
  }
  GatedItem& operator=(GatedItem&& o) noexcept {
    armed = false;
    o.armed = false;
    return *this;
  }
};

TEST(StopPoints, AChannelsMarkIsNotTheItemsMove) {
  Watchdog dog(std::chrono::seconds(60));
  Cluster c(2);
  run_in(c, [] {
    Semaphore gate(0);
    Channel<GatedItem> ch(4);
    ASSERT_EQ(ch.try_push(GatedItem(true)), ChannelStatus::success);
    GatedItem::gate = &gate;
    std::atomic<bool> stopped{false};
    Fibre w([&] {
      while (!loom::this_fibre::stop_requested()) loom::this_fibre::yield();
      stopped = true;
      GatedItem out;
      ch.pop_for(out, kFar);
    });
    w.request_stop();
    while (!stopped) loom::this_fibre::yield();
    loom::this_fibre::sleep_for(20ms);
    GatedItem::opened = true;
    gate.release();
    ASSERT_TRUE(w.join_for(10s));
    EXPECT_FALSE(GatedItem::early.load()) << "the untimed acquire in the move was ended by the stop";
    EXPECT_EQ(gate.value(), 0u);
  });
}

// A fibre's sleep with no deadline lasts until a stop.
TEST(StopPoints, ASleepWithNoDeadlineEndsAtAStop) {
  Watchdog dog(std::chrono::seconds(60));
  Cluster c(2);
  run_in(c, [] {
    expect_stopped("sleep_until(max)", [] { return !loom::this_fibre::sleep_until(Clock::time_point::max()); }, false);
    expect_stopped("sleep_for(max)", [] { return !loom::this_fibre::sleep_for(std::chrono::nanoseconds::max()); },
                   true);
  });
}

}  // namespace
