// Fibre-local keys (loom/sync.hpp): values per fibre (per kernel thread for
// threads that are not processors), destructors at fibre exit as POSIX
// specifies for threads, and the limits.
//
// Keys are process-wide: every test deletes the keys it creates, so that
// KeysRunOutAtKeysMax can count all of them.
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "loom/loom.hpp"
#include "sched/fibre.hpp"
#include "sched/processor.hpp"
#include "sync_test_util.hpp"

namespace {

using loom::Cluster;
using loom::Fibre;
using loom::Key;
using loom::Semaphore;
using loom::test::on;
using loom::test::run_in;
using loom::test::Watchdog;

// What destructors saw. Tests run one at a time; the fibres of one test
// write these concurrently, hence the atomics.
constexpr int kSlots = 64;
int slots[kSlots];
std::atomic<int> hits[kSlots];
std::atomic<int> calls{0}, foreign{0}, value_still_set{0};
Key current_key = 0;
std::atomic<int> resets_left{0};

void reset_log() {
  for (auto& h : hits) h.store(0);
  calls.store(0);
  foreign.store(0);
  value_still_set.store(0);
}

// Counts a call per slot; POSIX clears the value before calling.
void count_dtor(void* v) {
  calls.fetch_add(1);
  if (loom::get_specific(current_key) != nullptr) value_still_set.fetch_add(1);
  auto* p = static_cast<int*>(v);
  if (p >= slots && p < slots + kSlots)
    hits[p - slots].fetch_add(1);
  else
    foreign.fetch_add(1);
}

// Sets the value again while resets_left lasts: another round.
void resetting_dtor(void* v) {
  calls.fetch_add(1);
  if (resets_left.fetch_sub(1) > 0) loom::set_specific(current_key, v);
}

Key second_key = 0;
std::atomic<int> second_calls{0};
void second_dtor(void*) { second_calls.fetch_add(1); }
// Sets a value of second_key: its destructor must still run.
void setting_other_dtor(void* v) {
  calls.fetch_add(1);
  loom::set_specific(second_key, v);
}

TEST(Key, DestructorsRunOncePerNonNullValueAtFibreExit) {
  reset_log();
  Cluster c(2);
  Key k, plain;
  ASSERT_EQ(loom::key_create(&k, count_dtor), 0);
  ASSERT_EQ(loom::key_create(&plain, nullptr), 0);  // no destructor: nothing to call
  current_key = k;
  {
    std::vector<Fibre> v;
    for (int i = 0; i < kSlots; ++i)
      v.emplace_back(on(c), [=] {
        EXPECT_EQ(loom::get_specific(k), nullptr) << "a new fibre starts with null";
        EXPECT_EQ(loom::set_specific(plain, &slots[i]), 0);
        switch (i % 3) {
          case 0: EXPECT_EQ(loom::set_specific(k, &slots[i]), 0); break;
          case 1:  // set, then cleared: no destructor call
            EXPECT_EQ(loom::set_specific(k, &slots[i]), 0);
            EXPECT_EQ(loom::set_specific(k, nullptr), 0);
            break;
          default: break;  // never set
        }
        loom::this_fibre::yield();
      });
  }
  for (int i = 0; i < kSlots; ++i) EXPECT_EQ(hits[i].load(), i % 3 == 0 ? 1 : 0) << "slot " << i;
  EXPECT_EQ(foreign.load(), 0);
  EXPECT_EQ(value_still_set.load(), 0) << "the value was not cleared before its destructor ran";
  EXPECT_EQ(loom::key_delete(k), 0);
  EXPECT_EQ(loom::key_delete(plain), 0);
}

// A destructor that sets a value again causes another round, up to
// kKeyDestructorRounds in all.
TEST(Key, DestructorThatSetsAValueRunsAgain) {
  Cluster c(1);
  Key k;
  ASSERT_EQ(loom::key_create(&k, resetting_dtor), 0);
  current_key = k;
  for (int resets : {0, 2, 1000}) {
    reset_log();
    resets_left.store(resets);
    run_in(c, [&] { loom::set_specific(k, &slots[0]); });
    const int expected = std::min(resets + 1, int(loom::kKeyDestructorRounds));
    EXPECT_EQ(calls.load(), expected) << resets << " resets";
  }
  EXPECT_EQ(loom::key_delete(k), 0);
}

TEST(Key, DestructorThatSetsAnotherKeyCausesItsDestructorToRun) {
  reset_log();
  second_calls.store(0);
  Cluster c(1);
  Key k;
  ASSERT_EQ(loom::key_create(&k, setting_other_dtor), 0);
  ASSERT_EQ(loom::key_create(&second_key, second_dtor), 0);
  run_in(c, [&] { loom::set_specific(k, &slots[0]); });
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(second_calls.load(), 1);
  EXPECT_EQ(loom::key_delete(k), 0);
  EXPECT_EQ(loom::key_delete(second_key), 0);
}

// A fibre's table holds up to the highest key it set (sync/keys.cpp): one
// low key takes a few slots, not kKeysMax (1.5 KiB: half of an idle
// loom-memcached connection, whose thread sets one key).
TEST(Key, AFibreThatSetsOneLowKeyHoldsASmallTable) {
  Cluster c(1);
  Key k;
  ASSERT_EQ(loom::key_create(&k, nullptr), 0);
  std::size_t bytes = 0;
  run_in(c, [&] {
    ASSERT_EQ(loom::set_specific(k, &slots[0]), 0);
    bytes = malloc_usable_size(loom::rt::this_fibre_or_null()->specific);
    EXPECT_EQ(loom::get_specific(k), &slots[0]);
  });
  EXPECT_LE(bytes, 256u) << "the table of a fibre that set key " << k;
  EXPECT_EQ(loom::key_delete(k), 0);
}

std::atomic<int> high_calls{0};
void high_dtor(void*) { high_calls.fetch_add(1); }

// Every key, set in an order that grows the table several times: each value
// is kept and each destructor runs once; a destructor that sets a value
// under a higher key (growing the table while the destructors run) has
// that value's destructor run too.
TEST(Key, TheTableGrowsAndKeepsEveryValue) {
  reset_log();
  second_calls.store(0);
  high_calls.store(0);
  Cluster c(1);
  std::vector<Key> ks;
  Key k;
  while (loom::key_create(&k, high_dtor) == 0) ks.push_back(k);
  ASSERT_EQ(ks.size(), std::size_t(loom::kKeysMax));
  std::sort(ks.begin(), ks.end());
  // The lowest key's destructor sets the highest key's value.
  Key low = ks.front(), high = ks.back();
  ASSERT_EQ(loom::key_delete(low), 0);
  ASSERT_EQ(loom::key_delete(high), 0);
  ASSERT_EQ(loom::key_create(&low, setting_other_dtor), 0);
  ASSERT_EQ(loom::key_create(&second_key, second_dtor), 0);
  ASSERT_LT(low, second_key);
  ASSERT_GE(second_key, 16u);
  // Values under the keys between, up to key 63: the table grows to 64
  // slots, and the destructor's set under key 127 grows it while they run.
  std::vector<Key> middle;
  for (Key x : ks)
    if (x != ks.front() && x != ks.back() && x < 64) middle.push_back(x);
  ASSERT_GE(middle.size(), 40u);
  run_in(c, [&] {
    ASSERT_EQ(loom::set_specific(low, &slots[0]), 0);
    for (std::size_t i = 0; i < middle.size(); i += 3) ASSERT_EQ(loom::set_specific(middle[i], &slots[1]), 0);
    for (std::size_t i = 1; i < middle.size(); i += 3) ASSERT_EQ(loom::set_specific(middle[i], &slots[2]), 0);
    EXPECT_EQ(loom::get_specific(low), &slots[0]);
    for (std::size_t i = 0; i < middle.size(); ++i)
      EXPECT_EQ(loom::get_specific(middle[i]), i % 3 == 0 ? &slots[1] : i % 3 == 1 ? &slots[2] : nullptr) << i;
    EXPECT_EQ(loom::get_specific(second_key), nullptr);
  });
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(second_calls.load(), 1) << "the value set by a destructor under a higher key";
  EXPECT_EQ(high_calls.load(), int((middle.size() + 2) / 3 + (middle.size() + 1) / 3));
  for (Key x : ks) {
    if (x != ks.front() && x != ks.back()) {
      EXPECT_EQ(loom::key_delete(x), 0);
    }
  }
  EXPECT_EQ(loom::key_delete(low), 0);
  EXPECT_EQ(loom::key_delete(second_key), 0);
}

TEST(Key, KeysNotInUseAreInvalid) {
  Key k;
  ASSERT_EQ(loom::key_create(&k, nullptr), 0);
  EXPECT_EQ(loom::key_delete(k), 0);
  EXPECT_EQ(loom::key_delete(k), EINVAL) << "deleted twice";
  EXPECT_EQ(loom::key_delete(loom::kKeysMax), EINVAL);
  EXPECT_EQ(loom::key_delete(loom::kKeysMax + 1000), EINVAL);
  EXPECT_EQ(loom::get_specific(loom::kKeysMax + 7), nullptr);
  EXPECT_EQ(loom::set_specific(loom::kKeysMax + 7, &slots[0]), EINVAL);
  EXPECT_EQ(loom::set_specific(k, &slots[0]), EINVAL) << "a deleted key";
  EXPECT_EQ(loom::get_specific(k), nullptr);
}

TEST(Key, KeysRunOutAtKeysMax) {
  std::vector<Key> keys;
  std::set<Key> distinct;
  Key k;
  int e = 0;
  while (keys.size() <= loom::kKeysMax && (e = loom::key_create(&k, nullptr)) == 0) {
    keys.push_back(k);
    distinct.insert(k);
  }
  EXPECT_EQ(e, EAGAIN);
  EXPECT_EQ(keys.size(), std::size_t(loom::kKeysMax));
  EXPECT_EQ(distinct.size(), keys.size());
  for (Key x : keys) EXPECT_EQ(loom::key_delete(x), 0);
  ASSERT_EQ(loom::key_create(&k, nullptr), 0) << "keys are reusable once deleted";
  EXPECT_EQ(loom::key_delete(k), 0);
}

// Each fibre sees its own value, also after moving to another processor or
// cluster; main's fibre and kernel threads have theirs.
TEST(Key, ValuesArePerFibreAndFollowTheFibre) {
  Watchdog dog;
  Cluster a(4), b(2);
  Key k;
  ASSERT_EQ(loom::key_create(&k, nullptr), 0);
  int mine = 0;
  EXPECT_EQ(loom::set_specific(k, &mine), 0);
  std::atomic<int> wrong{0};
  {
    std::vector<Fibre> v;
    for (int i = 0; i < 32; ++i)
      v.emplace_back(on(a), [&, i] {
        if (loom::get_specific(k) != nullptr) wrong.fetch_add(1);
        loom::set_specific(k, &slots[i]);
        for (int r = 0; r < 100; ++r) {
          if (r == 50) loom::this_fibre::migrate(b);
          loom::this_fibre::yield();
          if (loom::get_specific(k) != &slots[i]) wrong.fetch_add(1);
        }
      });
    std::thread t([&] {
      if (loom::get_specific(k) != nullptr) wrong.fetch_add(1);
      int theirs = 0;
      loom::set_specific(k, &theirs);
      run_in(a, [&] {
        if (loom::get_specific(k) != nullptr) wrong.fetch_add(1);
      });
      if (loom::get_specific(k) != &theirs) wrong.fetch_add(1);
      loom::set_specific(k, nullptr);
    });
    t.join();
  }
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(loom::get_specific(k), &mine);
  EXPECT_EQ(loom::set_specific(k, nullptr), 0);
  EXPECT_EQ(loom::key_delete(k), 0);
}

// After key_delete, a living fibre's value is gone: its destructor does not
// run at exit, and a new key (perhaps the same slot) starts null there.
TEST(Key, DeletedKeyLeavesNothingBehind) {
  reset_log();
  Watchdog dog;
  Cluster c(1);
  Key k;
  ASSERT_EQ(loom::key_create(&k, count_dtor), 0);
  current_key = k;
  Semaphore set, deleted;
  Key fresh = 0;
  Fibre f(on(c), [&] {
    loom::set_specific(k, &slots[1]);
    set.release();
    deleted.acquire();
    EXPECT_EQ(loom::get_specific(fresh), nullptr) << "a new key inherited a deleted key's value";
  });
  set.acquire();
  EXPECT_EQ(loom::key_delete(k), 0);
  ASSERT_EQ(loom::key_create(&fresh, count_dtor), 0);
  current_key = fresh;
  deleted.release();
  f.join();
  EXPECT_EQ(calls.load(), 0) << "a destructor ran for a deleted key's value";
  EXPECT_EQ(loom::key_delete(fresh), 0);
}

}  // namespace
