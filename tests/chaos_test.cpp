// Regressions for races found under adversarial schedules (issue 25). Each
// test is an ordinary stress test in every build; in the chaos build
// (cmake -DLOOM_CHAOS=ON, `make chaos`) its ctest twin narrows the
// perturbation to the race's window (LOOM_CHAOS_ONLY) and stalls there on
// every pass, so that it fails within a few seeds when the fix is missing,
// where a plain run found it about once in four TSan runs.
#include "base/chaos.hpp"
#include "sched/checks.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "loom/color.hpp"
#include "loom/loom.hpp"
#include "sched/cluster.hpp"
#include "sched/fibre.hpp"
#include "sched/processor.hpp"
#include "sync_test_util.hpp"
#include "test_util.hpp"

#if defined(LOOM_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace {

using loom::Cluster;
using loom::Color;
using loom::test::scaled;

struct Colors {
  Colors(unsigned colors, unsigned posters) : colors(colors), inflight(colors), next(colors * posters) {}
  unsigned colors;
  std::vector<std::atomic<int>> inflight;  // per color
  std::vector<std::atomic<long>> next;     // per poster and color: the sequence number expected
  std::atomic<long> done{0}, violations{0};
};

struct Ev {
  Colors* cs;
  unsigned color;
  long seq;
};

void run_event(void* p) {
  std::unique_ptr<Ev> e(static_cast<Ev*>(p));
  Colors& cs = *e->cs;
  std::atomic<int>& inflight = cs.inflight[e->color % cs.colors];  // the color's, whoever posted
  if (inflight.fetch_add(1) != 0) cs.violations.fetch_add(1);
  if (cs.next[e->color].load() != e->seq) cs.violations.fetch_add(1);
  cs.next[e->color].store(e->seq + 1);
  auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(3);
  while (std::chrono::steady_clock::now() < end) {
  }
  inflight.fetch_sub(1);
  cs.done.fetch_add(1);
}

bool wait_for(const std::atomic<long>& n, long want) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (n.load() < want) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return true;
}

// The color-transit race of 2026-11-27 (8a716ad): a thief unlinks a queue
// under its victim's lock and links it under its own; between the two, a
// post (or a colored fibre's release) found the queue owned by the thief and
// linked it on the thief's list, where a second thief stole it from under
// the first, and the two wrote it under different locks (then a use after
// free). Here the colors of one poster all start on one processor (local
// placement), so idle processors steal them, while kernel threads post to
// the same colors all the time: posts land while queues are in transit.
// The checking builds report the first link in transit at once
// (color.cpp: a queue is linked only by its owner, never in transit); a
// plain build sees a lost, doubled or overlapping event, or a crash.
TEST(ColorTransit, AQueueInTransitIsLinkedOnlyByItsThief) {
  Cluster cl(4, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, "libasync-smp"));
  loom::set_color_placement(cl, "local");
  const unsigned kColors = 8, kPosters = 3;
  Color base = loom::allocate_colors(kColors);
  const long per_poster = std::max(3000L, scaled(60000)) / kPosters;
  // Each poster has its own colors' sequence: colors are split between
  // posters by index, so that per-color order is defined.
  Colors cs(kColors, kPosters);
  auto poster = [&](unsigned p) {
    std::vector<long> seq(kColors, 0);
    for (long i = 0; i < per_poster; ++i) {
      unsigned c = unsigned(i % kColors);
      loom::post(base + c, &run_event, new Ev{&cs, p * kColors + c, seq[c]++}, &cl);
      if (i % 64 == 0) {
        if (p == 0)
          loom::this_fibre::yield();
        else
          std::this_thread::yield();
      }
    }
  };
  {
    loom::FibreAttr a;
    a.cluster = &cl;
    loom::Fibre local(a, poster, 0u);
    std::vector<std::thread> outside;
    for (unsigned p = 1; p < kPosters; ++p) outside.emplace_back(poster, p);
    for (auto& t : outside) t.join();
  }
  ASSERT_TRUE(wait_for(cs.done, per_poster * kPosters)) << cs.done.load() << " of " << per_poster * kPosters;
  EXPECT_EQ(cs.violations.load(), 0);
}

// ---- Destroy after use (issue 25) ---------------------------------------------
// POSIX lets the thread that an unlock, post or notify let through destroy
// the object at once (a mutex in a record it then frees, a semaphore on its
// stack), so the releasing thread must not touch the object after the
// operation that lets the other one in (docs/DESIGN.md, "Release is the last
// touch"). loom::Mutex::unlock used to store owner_ = null and then read
// waiting_ (and take lock_ when it was not zero): a locker that took the lock
// in between could unlock, destroy and free it first. Each round puts the
// object between guard bytes; the fibre it lets through destroys it and
// fills its memory with kDeadByte — which the destructor itself does in a
// checking build, where the runtime's next take of the object's lock reports
// the touch, naming the fibre — and under ASan poisons it. After both fibres
// are done, the block must read guard, dead, guard. A touch reads the dead
// bytes as state: a lock word that is held (a spin forever: the watchdog
// fails the test), a count that is not zero, a queue that points nowhere.
// The chaos twin (chaos_sync_release) stalls at every release
// (LOOM_CHAOS_POINT(sync_release)), between the release and whatever the
// operation does next, on the releasing processor while the other runs.
enum class SyncKind { mutex_blocking, mutex_spin, mutex_baton, mutex_hybrid, semaphore, rwlock, condvar, barrier };

const char* to_string(SyncKind k) {
  static const char* const names[] = {"MutexBlocking", "MutexSpin", "MutexBaton", "MutexHybrid",
                                      "Semaphore",     "RWLock",    "CondVar",    "Barrier"};
  return names[unsigned(k)];
}

class Slot {
 public:
  static constexpr std::size_t kPad = 64, kObj = 128;
  static constexpr unsigned char kGuard = 0x5A;
  Slot() { std::memset(bytes_, kGuard, sizeof bytes_); }
  template <class T, class... A>
  T* make(A&&... a) {
    static_assert(sizeof(T) <= kObj);
    return new (bytes_ + kPad) T(std::forward<A>(a)...);
  }
  template <class T>
  void destroy(T* t) {
    t->~T();
    // The destructor of a checking build has filled the object itself.
    if constexpr (loom::rt::kChecks)
      std::memset(bytes_ + kPad + sizeof(T), loom::rt::kDeadByte, kObj - sizeof(T));
    else
      std::memset(bytes_ + kPad, loom::rt::kDeadByte, kObj);
#if defined(LOOM_ASAN)
    ASAN_POISON_MEMORY_REGION(bytes_ + kPad, kObj);
#endif
  }
  // -1 when intact, else the first byte (from the object's start) that is not.
  long first_touched() {
#if defined(LOOM_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(bytes_ + kPad, kObj);
#endif
    for (std::size_t i = 0; i < sizeof bytes_; ++i) {
      bool obj = i >= kPad && i < kPad + kObj;
      if (bytes_[i] != (obj ? loom::rt::kDeadByte : kGuard)) return long(i) - long(kPad);
    }
    return -1;
  }

 private:
  alignas(64) unsigned char bytes_[kPad + kObj + kPad];
};

void wait_until(const std::atomic<int>& flag) {
  while (!flag.load()) loom::this_fibre::yield();
}

void pause_a_little(int round) {
  for (int i = 0; i < round % 3; ++i) loom::this_fibre::yield();
}

// One round: `letter` is let through by `releaser`'s operation, then
// destroys the object. Both are fibres, one on each processor as a rule.
void one_round(SyncKind kind, int round, Slot& slot, Cluster& cl) {
  std::atomic<int> held{0}, trying{0};
  std::function<void()> releaser, letter;
  switch (kind) {
    case SyncKind::mutex_blocking:
    case SyncKind::mutex_spin:
    case SyncKind::mutex_baton:
    case SyncKind::mutex_hybrid: {
      static const loom::MutexPolicy policies[] = {loom::MutexPolicy::blocking, loom::MutexPolicy::spin,
                                                   loom::MutexPolicy::baton, loom::MutexPolicy::hybrid};
      auto* m = slot.make<loom::Mutex>(policies[unsigned(kind)]);
      releaser = [&, m] {
        m->lock();
        held = 1;
        wait_until(trying);
        pause_a_little(round);
        m->unlock();
      };
      letter = [&, m] {
        wait_until(held);
        trying = 1;
        if (round % 2)  // takes it without queueing: the release does not wake it
          while (!m->try_lock()) loom::this_fibre::yield();
        else
          m->lock();
        m->unlock();
        slot.destroy(m);
      };
      break;
    }
    case SyncKind::semaphore: {
      auto* s = slot.make<loom::Semaphore>(0u);
      releaser = [&, s] {
        wait_until(trying);
        pause_a_little(round);
        s->release();
      };
      letter = [&, s] {
        trying = 1;
        if (round % 2)
          while (!s->try_acquire()) loom::this_fibre::yield();
        else
          s->acquire();
        slot.destroy(s);
      };
      break;
    }
    case SyncKind::rwlock: {
      auto* l = slot.make<loom::RWLock>();
      releaser = [&, l] {
        l->lock();
        held = 1;
        wait_until(trying);
        pause_a_little(round);
        l->unlock();
      };
      letter = [&, l] {
        wait_until(held);
        trying = 1;
        switch (round % 4) {
          case 0:
            while (!l->try_lock_shared()) loom::this_fibre::yield();
            break;
          case 1:
            l->lock_shared();
            break;
          case 2:
            while (!l->try_lock()) loom::this_fibre::yield();
            break;
          default:
            l->lock();
            break;
        }
        l->unlock();
        slot.destroy(l);
      };
      break;
    }
    case SyncKind::condvar: {
      // The notifier holds the mutex (outside the slot); the waiter returns
      // once it has it back, and destroys the condition variable.
      static loom::Mutex m;
      static bool ready;
      ready = false;
      auto* cv = slot.make<loom::CondVar>();
      releaser = [&, cv] {
        wait_until(trying);
        pause_a_little(round);
        m.lock();
        ready = true;
        if (round % 2)
          cv->notify_one();
        else
          cv->notify_all();
        m.unlock();
      };
      letter = [&, cv] {
        m.lock();
        trying = 1;
        cv->wait(m, [] { return ready; });
        m.unlock();
        slot.destroy(cv);
      };
      break;
    }
    case SyncKind::barrier: {
      auto* b = slot.make<loom::Barrier>(2u);
      releaser = [&, b] {
        wait_until(trying);
        pause_a_little(round);
        b->arrive_and_wait();
      };
      letter = [&, b] {
        trying = 1;
        b->arrive_and_wait();  // back from it, the other has arrived: it may be destroyed
        slot.destroy(b);
      };
      break;
    }
  }
  loom::FibreAttr la = loom::test::on(cl), ra = loom::test::on(cl);
  la.name = "let through";
  ra.name = "releaser";
  loom::Fibre a(la, letter);
  loom::Fibre b(ra, releaser);
  a.join();
  b.join();
}

class DestroyAfterUse : public testing::TestWithParam<SyncKind> {};

TEST_P(DestroyAfterUse, TheReleaserDoesNotTouchTheObjectAgain) {
  loom::test::Watchdog wd;
  Cluster cl(2, loom::SchedConfig{});
  const int rounds = int(loom::test::scaled_at_least(100, 3000));
  for (int r = 0; r < rounds; ++r) {
    auto slot = std::make_unique<Slot>();
    one_round(GetParam(), r, *slot, cl);
    long at = slot->first_touched();
    ASSERT_EQ(at, -1) << to_string(GetParam()) << ", round " << r << ": byte " << at
                      << " of the block changed after the destroy";
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, DestroyAfterUse,
                         testing::Values(SyncKind::mutex_blocking, SyncKind::mutex_spin, SyncKind::mutex_baton,
                                         SyncKind::mutex_hybrid, SyncKind::semaphore, SyncKind::rwlock,
                                         SyncKind::condvar, SyncKind::barrier),
                         [](const testing::TestParamInfo<SyncKind>& i) { return to_string(i.param); });

#if defined(LOOM_CHECKS_ON)
// The checking builds' invariants report the breach, naming who, and abort.
// (White-box: the runtime's own calls never break them on purpose.)
TEST(Checks, PushLocalFromAnotherThreadIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Cluster cl(1, loom::SchedConfig{});
  loom::rt::Processor* p = cl.impl().processor(0);
  // main runs on the default cluster's processor, not on cl's.
  EXPECT_DEATH(p->push_local(nullptr),
               "invariant broken: push_local on processor 0 of cluster [0-9]+ from processor 0");
}

TEST(Checks, APinnedFibreSwitchedToElsewhereIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  loom::rt::Fibre f;
  f.id = 77;
  f.name = "runner";
  f.pinned = true;
  f.affinity = nullptr;  // pinned elsewhere
  loom::rt::Processor* here = loom::rt::this_processor();
  ASSERT_NE(here, nullptr);
  EXPECT_DEATH(LOOM_CHECK_SWITCH(&f, *here), "pinned fibre 77 \"runner\" switched to on processor");
}

// A destroyed object is filled with kDeadByte, and the runtime's next take
// of its lock says so (sync/wait.hpp, lock_object): each kind, through a
// call that takes its lock first. (A dead mutex's unlock reads a type that
// is no longer one and refuses with EPERM; its lock reaches the check.)
TEST(Checks, ASyncObjectUsedAfterItsDestructorIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  alignas(64) unsigned char mem[Slot::kObj];
  auto dead = [&](auto* obj) {
    using T = std::remove_pointer_t<decltype(obj)>;
    obj->~T();
    for (std::size_t i = 0; i < sizeof(T); ++i) EXPECT_EQ(mem[i], loom::rt::kDeadByte) << "byte " << i;
    return obj;
  };
  const char* by = " touched after its destructor ran, by fibre [0-9]+ \"[^\"]*\" on processor [0-9]+ of cluster";
  EXPECT_DEATH(dead(new (mem) loom::Mutex)->lock(), std::string("loom::Mutex 0x[0-9a-f]+") + by);
  EXPECT_DEATH(dead(new (mem) loom::Semaphore)->release(), std::string("loom::Semaphore 0x[0-9a-f]+") + by);
  EXPECT_DEATH(dead(new (mem) loom::CondVar)->notify_one(), std::string("loom::CondVar 0x[0-9a-f]+") + by);
  EXPECT_DEATH(dead(new (mem) loom::RWLock)->unlock(), std::string("loom::RWLock 0x[0-9a-f]+") + by);
  EXPECT_DEATH(dead(new (mem) loom::Barrier(2))->arrive_and_wait(), std::string("loom::Barrier 0x[0-9a-f]+") + by);
}
#endif

}  // namespace
