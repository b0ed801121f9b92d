// io_rest_review2_test — outside review of rest's "look before resting",
// loom_rest_start_until, detached loom_create and the growing key table
// (h/rev-rest). Real sockets and socketpairs on this host only; every wait
// is bounded (a lost continuation is a failure, not a hang).
// Three cases fail on the merged main (967ea3b), each pinning a bug:
//   RestStartLook       rest_start did not look where rest does — fixed
//                       (rest.cpp, look()); the test is io_rest_test's,
//                       beside RestLook, whose set-up it shares
//   RestAfterWhenReady  when_ready(POLLIN) took the edge without clearing
//                       the drained hint: a rest after it rested for ever
//                       with bytes queued (epoll) — fixed on h/rev-rest
//   DetachedCpp         loom::Fibre(attr, fn).detach(), then the C++ API's
//                       only way to a detached fibre, raced a rest at the
//                       fibre's start: EINVAL about half the time from
//                       outside a 2-processor cluster (the race ff9e365
//                       closed for loom_create) — FibreAttr::detached now
//                       makes one born detached
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>

#include "loom/loom.h"
#include "loom/loom.hpp"
#include "sched/cluster.hpp"
#include "test_util.hpp"

namespace io = loom::io;
using namespace std::chrono_literals;
using loom::test::listing;

namespace {

template <class P>
bool eventually(P pred, std::chrono::milliseconds limit = 10s) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

void drained(loom::Cluster& c) {
  ASSERT_TRUE(eventually([&] { return c.impl().fibres.load() == 0; })) << c.impl().fibres.load() << " fibres left";
}

// ---- loom_rest_start_until: bad arguments return an error number ------------------
struct Started {
  std::atomic<int> runs{0};
  std::atomic<int> status{-1};
  int fd = -1;
};

void started_run(void* p) {
  auto* s = static_cast<Started*>(p);
  s->status.store(loom_rest_status());
  s->runs.fetch_add(1);
}

TEST(RestStartUntil, BadArgumentsAreRefusedWithAnErrorNumber) {
  loom::Cluster c(1);
  loom::FibreAttr a;
  a.cluster = &c;
  int sv[2];
  loom::Fibre(a, [&] { ASSERT_EQ(io::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0); }).join();
  Started s;
  loom_attr_t attr;
  ASSERT_EQ(loom_attr_init(&attr), 0);
  ASSERT_EQ(loom_attr_setcluster(&attr, reinterpret_cast<loom_cluster_t*>(&c)), 0);
  EXPECT_EQ(loom_rest_start_until(sv[0], nullptr, &s, &attr, nullptr), EINVAL);
  loom_attr_t junk;
  std::memset(&junk, 0x5a, sizeof junk);
  EXPECT_EQ(loom_rest_start_until(sv[0], &started_run, &s, &junk, nullptr), EINVAL);
  loom_attr_t destroyed;
  loom_attr_init(&destroyed);
  loom_attr_destroy(&destroyed);
  EXPECT_EQ(loom_rest_start_until(sv[0], &started_run, &s, &destroyed, nullptr), EINVAL);
  EXPECT_EQ(loom_rest_start_until(-1, &started_run, &s, &attr, nullptr), EBADF);
  EXPECT_EQ(loom_rest_start_until(1 << 20, &started_run, &s, &attr, nullptr), EBADF);
  int spare = ::dup(sv[1]);
  ::close(spare);  // a number not open at its first use: EBADF (b6fc576)
  EXPECT_EQ(loom_rest_start_until(spare, &started_run, &s, &attr, nullptr), EBADF);
  int file = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(file, 0);
  EXPECT_EQ(loom_rest_start_until(file, &started_run, &s, &attr, nullptr), EPERM);
  ::close(file);
  loom_attr_t colored;
  loom_attr_init(&colored);
  loom_attr_setcluster(&colored, reinterpret_cast<loom_cluster_t*>(&c));
  if (loom_attr_setcolor(&colored, 3, 0) == 0) {
    EXPECT_EQ(loom_rest_start_until(sv[0], &started_run, &s, &colored, nullptr), ENOTSUP);
  }
  EXPECT_EQ(s.runs.load(), 0);

  // A deadline in the past, one with tv_nsec out of range: continued at
  // once with ETIMEDOUT, never a crash.
  timespec past{0, 0};
  ASSERT_EQ(loom_rest_start_until(sv[0], &started_run, &s, &attr, &past), 0);
  ASSERT_TRUE(eventually([&] { return s.runs.load() == 1; }, 3s));
  EXPECT_EQ(s.status.load(), ETIMEDOUT);
  timespec bad{1, 2'000'000'000};
  ASSERT_EQ(loom_rest_start_until(sv[0], &started_run, &s, &attr, &bad), 0);
  ASSERT_TRUE(eventually([&] { return s.runs.load() == 2; }, 3s));
  EXPECT_EQ(s.status.load(), ETIMEDOUT);
  timespec neg{-5, 0};
  ASSERT_EQ(loom_rest_start_until(sv[0], &started_run, &s, &attr, &neg), 0);
  ASSERT_TRUE(eventually([&] { return s.runs.load() == 3; }, 3s));
  EXPECT_EQ(s.status.load(), ETIMEDOUT);

  // The far future: not continued by its deadline (no overflow into the
  // past), but by input, status 0.
  timespec far{LLONG_MAX, 999'999'999};
  ASSERT_EQ(loom_rest_start_until(sv[0], &started_run, &s, &attr, &far), 0);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(s.runs.load(), 3) << "a deadline of LLONG_MAX s continued it at once";
  ASSERT_TRUE(eventually([&] { return s.runs.load() >= 3; }));
  ASSERT_EQ(::write(sv[1], "x", 1), 1);
  ASSERT_TRUE(eventually([&] { return s.runs.load() == 4; }, 3s)) << listing();
  EXPECT_EQ(s.status.load(), 0);

  // Two at once on one descriptor: the second is refused (EBUSY).
  char drain[16];
  loom::Fibre(a, [&] { (void)io::read(sv[0], drain, sizeof drain); }).join();
  ASSERT_EQ(loom_rest_start_until(sv[0], &started_run, &s, &attr, nullptr), 0);
  EXPECT_EQ(loom_rest_start_until(sv[0], &started_run, &s, &attr, nullptr), EBUSY);
  // A null attr: the caller's cluster (here, a kernel thread: the default).
  loom::Fibre(a, [&] {
    io::close(sv[0]);
    io::close(sv[1]);
  }).join();
  ASSERT_TRUE(eventually([&] { return s.runs.load() == 5; }, 3s)) << listing();
  loom_attr_destroy(&attr);
  loom_attr_destroy(&colored);
  drained(c);
}

// ---- loom_create detached: join and detach say EINVAL, as glibc ------------------
struct Gate {
  std::atomic<int> go{0};
  std::atomic<int> done{0};
};

void* gated(void* p) {
  auto* g = static_cast<Gate*>(p);
  while (!g->go.load()) loom_usleep(1000);
  g->done.fetch_add(1);
  return nullptr;
}

TEST(DetachedCreate, JoinAndDetachOfALiveDetachedThreadSayEinval) {
  for (int round = 0; round < 50; ++round) {
    Gate g;
    loom_attr_t attr;
    loom_attr_init(&attr);
    loom_attr_setdetachstate(&attr, LOOM_CREATE_DETACHED);
    loom_t t;
    ASSERT_EQ(loom_create(&t, &attr, &gated, &g), 0);
    EXPECT_EQ(loom_join(t, nullptr), EINVAL) << "round " << round;
    EXPECT_EQ(loom_detach(t), EINVAL) << "round " << round;
    EXPECT_EQ(loom_tryjoin_np(t, nullptr), EINVAL) << "round " << round;
    g.go.store(1);
    ASSERT_TRUE(eventually([&] { return g.done.load() == 1; }));
    loom_attr_destroy(&attr);
  }
}

// ---- keys across table growth ------------------------------------------------------
loom_key_t keys_all[LOOM_KEYS_MAX];
int keys_made = 0;
std::atomic<int> high_destroyed{0}, low_destroyed{0}, chain_left{0};

void high_dtor(void* v) {
  if (v == reinterpret_cast<void*>(0x1234)) high_destroyed.fetch_add(1);
}
// Sets a value under the highest key made: the table grows from inside its
// own destructor run.
void low_dtor(void* v) {
  if (v == reinterpret_cast<void*>(0x42)) low_destroyed.fetch_add(1);
  loom_setspecific(keys_all[keys_made - 1], reinterpret_cast<void*>(0x1234));
}
// Each key's destructor sets the next key (a chain across the whole table).
void chain_dtor(void* v) {
  auto k = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(v)) - 1;
  chain_left.fetch_sub(1);
  // Within glibc's rounds (PTHREAD_DESTRUCTOR_ITERATIONS = 4): three more.
  if (k + 1 < static_cast<unsigned>(keys_made) && k < 3)
    loom_setspecific(keys_all[k + 1], reinterpret_cast<void*>(std::uintptr_t(k + 2)));
}

TEST(KeyGrowth, DestructorsThatSetHigherKeysGrowTheTableAndRun) {
  loom_key_t low;
  ASSERT_EQ(loom_key_create(&low, &low_dtor), 0);
  keys_made = 0;
  for (; keys_made < LOOM_KEYS_MAX - 1; ++keys_made)
    if (loom_key_create(&keys_all[keys_made], &high_dtor) != 0) break;
  ASSERT_GT(keys_made, 60);
  ASSERT_GT(keys_all[keys_made - 1], 40u);
  loom::Cluster c(2);
  loom::FibreAttr a;
  a.cluster = &c;
  for (int i = 0; i < 200; ++i) {
    loom::Fibre(a, [&] {
      ASSERT_EQ(loom_setspecific(low, reinterpret_cast<void*>(0x42)), 0);
      ASSERT_EQ(loom_getspecific(keys_all[keys_made - 1]), nullptr);  // beyond the table: none
    }).join();
  }
  EXPECT_EQ(low_destroyed.load(), 200);
  EXPECT_EQ(high_destroyed.load(), 200);
  // Every key set, values read back after each growth, then deleted keys
  // re-made: a stale value under a re-made key is not seen.
  loom::Fibre(a, [&] {
    for (int k = 0; k < keys_made; ++k) {
      ASSERT_EQ(loom_setspecific(keys_all[k], reinterpret_cast<void*>(std::uintptr_t(k + 1))), 0);
      for (int j = 0; j <= k; ++j)
        ASSERT_EQ(loom_getspecific(keys_all[j]), reinterpret_cast<void*>(std::uintptr_t(j + 1))) << k << " " << j;
    }
    for (int k = 0; k < keys_made; ++k) loom_setspecific(keys_all[k], nullptr);
    loom_key_t last = keys_all[keys_made - 1];
    ASSERT_EQ(loom_setspecific(last, reinterpret_cast<void*>(0x77)), 0);
    ASSERT_EQ(loom_key_delete(last), 0);
    loom_key_t again;
    ASSERT_EQ(loom_key_create(&again, nullptr), 0);
    EXPECT_EQ(loom_getspecific(again), nullptr) << "a re-made key (" << again << ") sees the deleted key's value";
    keys_all[keys_made - 1] = again;
  }).join();
  high_destroyed.store(0);
  // The chain: key k's destructor sets key k+1 (values 1.., three links).
  for (int k = 0; k < keys_made; ++k) loom_key_delete(keys_all[k]);
  keys_made = 0;
  for (; keys_made < 8; ++keys_made) ASSERT_EQ(loom_key_create(&keys_all[keys_made], &chain_dtor), 0);
  chain_left.store(4);
  loom::Fibre(a, [&] { loom_setspecific(keys_all[0], reinterpret_cast<void*>(std::uintptr_t(1))); }).join();
  EXPECT_EQ(chain_left.load(), 0);
  for (int k = 0; k < keys_made; ++k) loom_key_delete(keys_all[k]);
  loom_key_delete(low);
  drained(c);
}

// A fibre that rests between setting a low key and a high one: its table
// grows on the heap block, and both destructors run when it ends.
struct Rester {
  int fd;
  loom_key_t lo, hi;
  std::atomic<int> phase{0};
};
std::atomic<int> rest_dtors{0};
void count_dtor(void*) { rest_dtors.fetch_add(1); }

void rester_after(void* p) {
  auto* r = static_cast<Rester*>(p);
  char b[8];
  (void)io::read(r->fd, b, sizeof b);
  if (loom_getspecific(r->lo) != reinterpret_cast<void*>(1)) {
    r->phase.store(-1);
    return;
  }
  loom_setspecific(r->hi, reinterpret_cast<void*>(2));  // grows the table after the move
  r->phase.store(loom_getspecific(r->hi) == reinterpret_cast<void*>(2) ? 2 : -1);
}

TEST(KeyGrowth, ATableGrownAfterARestKeepsItsValuesAndDestructors) {
  Rester r;
  ASSERT_EQ(loom_key_create(&r.lo, &count_dtor), 0);
  loom_key_t pad[70];
  for (auto& k : pad) ASSERT_EQ(loom_key_create(&k, nullptr), 0);
  ASSERT_EQ(loom_key_create(&r.hi, &count_dtor), 0);
  ASSERT_GT(r.hi, r.lo + 8);
  loom::Cluster c(2);
  loom::FibreAttr a;
  a.cluster = &c;
  int sv[2];
  loom::Fibre(a, [&] { ASSERT_EQ(io::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0); }).join();
  r.fd = sv[0];
  rest_dtors.store(0);
  std::atomic<bool> detached{false};
  loom::Fibre(a, [&r, &detached] {
    while (!detached.load()) loom::this_fibre::sleep_for(1ms);  // (see DetachedCpp below)
    loom_setspecific(r.lo, reinterpret_cast<void*>(1));
    r.phase.store(1);
    int e = io::rest(r.fd, &rester_after, &r);
    r.phase.store(-100 - e);
  }).detach();
  detached.store(true);
  ASSERT_TRUE(eventually([&] { return listing().find("resting: fd " + std::to_string(sv[0])) != std::string::npos; }))
      << r.phase.load() << "\n"
      << listing();
  ASSERT_EQ(::write(sv[1], "x", 1), 1);
  ASSERT_TRUE(eventually([&] { return r.phase.load() == 2 || r.phase.load() < 0; }));
  EXPECT_EQ(r.phase.load(), 2);
  drained(c);
  EXPECT_EQ(rest_dtors.load(), 2);
  loom::Fibre(a, [&] {
    io::close(sv[0]);
    io::close(sv[1]);
  }).join();
  for (auto k : pad) loom_key_delete(k);
  loom_key_delete(r.lo);
  loom_key_delete(r.hi);
}

// ---- the C++ API: made, then detached ------------------------------------------
// loom_create now detaches a detached thread before it can run (ff9e365):
// made and then detached, one that ran at once on another processor and
// rested found itself joinable (EINVAL). The C++ API has only that way:
// loom::Fibre(attr, fn).detach(). A fibre of a two-processor cluster made
// from outside it runs at once on the other processor, and its rest races
// the detach: EINVAL, though the caller detached it. FibreAttr::detached
// makes it detached before it can run.
struct Racer {
  int fd;
  std::atomic<int> einval{0}, other{0}, continued{0};
};
void racer_cont(void* p) { static_cast<Racer*>(p)->continued.fetch_add(1); }

TEST(DetachedCpp, AFibreBornDetachedThatRestsAtOnceIsNotRefused) {
  loom::Cluster c(2);
  loom::FibreAttr a;
  a.cluster = &c;
  loom::FibreAttr da = a;
  da.detached = true;
  int sv[2];
  loom::Fibre(a, [&] { ASSERT_EQ(io::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0); }).join();
  Racer r;
  r.fd = sv[0];
  constexpr int kRounds = 300;
  int started = 0;
  for (int i = 0; i < kRounds; ++i) {
    std::atomic<int> done{0};
    loom::Fibre h(da, [&r, &done] {
      int e = io::rest(r.fd, &racer_cont, &r);  // returns only if refused
      (e == EINVAL ? r.einval : r.other).fetch_add(1);
      done.store(1);
    });
    ASSERT_FALSE(h.joinable()) << "a fibre born detached has no joinable handle";
    ++started;
    // Resting (then a byte continues it) or refused.
    ASSERT_TRUE(eventually(
        [&] { return done.load() || listing().find("resting: fd " + std::to_string(sv[0])) != std::string::npos; }));
    if (!done.load()) {
      ASSERT_EQ(::write(sv[1], "x", 1), 1);
      ASSERT_TRUE(eventually([&] { return r.continued.load() + r.einval.load() + r.other.load() == started; }));
      char b;
      loom::Fibre(a, [&] { (void)io::read(sv[0], &b, 1); }).join();
    }
  }
  EXPECT_EQ(r.einval.load(), 0) << r.einval.load() << " of " << kRounds
                                << " fibres born detached were refused their rest (EINVAL)";
  EXPECT_EQ(r.other.load(), 0);
  loom::Fibre(a, [&] {
    io::close(sv[0]);
    io::close(sv[1]);
  }).join();
  drained(c);
}

// ---- the drained hint after when_ready took the edge --------------------------------
// A short read sets the drained hint (rest will not look). Bytes then
// arrive and loom_when_ready(POLLIN) takes their edge (its callback runs)
// without clearing the hint; a rest then neither looks nor finds an edge,
// with the bytes queued: it rests for ever (epoll, before the fix).
struct Hinted {
  int fd;
  std::atomic<int> phase{0};  // 2: resting; 3: continued and read the bytes; -1
  std::atomic<int> told{0};
};
void hinted_cb(void* p) { static_cast<Hinted*>(p)->told.fetch_add(1); }
void hinted_continue(void* p) {
  auto* h = static_cast<Hinted*>(p);
  char b[64];
  h->phase.store(io::read(h->fd, b, sizeof b) == 5 ? 3 : -1);
}

// Both ways when_ready takes the edge: a pending one at once (edge first),
// or armed first and taken by the poster when the bytes come.
class RestAfterWhenReady : public ::testing::TestWithParam<bool> {};

TEST_P(RestAfterWhenReady, IsContinuedByTheBytesQueued) {
  const bool armed_first = GetParam();
  loom::Cluster c(1);
  int sv[2];
  Hinted h;
  loom::FibreAttr a;
  a.cluster = &c;
  loom::Fibre(a, [&] { ASSERT_EQ(io::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0); }).join();
  h.fd = sv[0];
  std::atomic<bool> detached{false}, written{false};
  loom::Fibre f(a, [&] {
    while (!detached.load()) loom::this_fibre::sleep_for(1ms);
    char b[64];
    if (io::read(h.fd, b, sizeof b) != 3) {  // waits, then a short read: drained
      h.phase.store(-1);
      return;
    }
    if (armed_first && loom_when_ready(h.fd, POLLIN, &hinted_cb, &h) != 0) {
      h.phase.store(-2);
      return;
    }
    h.phase.store(1);
    while (!written.load()) loom::this_fibre::sleep_for(1ms);
    loom::this_fibre::sleep_for(20ms);  // the edge of the 5 bytes is in the word (or taken)
    if (!armed_first && loom_when_ready(h.fd, POLLIN, &hinted_cb, &h) != 0) {
      h.phase.store(-2);
      return;
    }
    // At once on epoll (the pending edge); on io_uring once its poll completes.
    for (int i = 0; i < 1000 && h.told.load() != 1; ++i) loom::this_fibre::sleep_for(1ms);
    h.phase.store(2);
    int e = io::rest(h.fd, &hinted_continue, &h);
    h.phase.store(-100 - e);
  });
  f.detach();
  detached.store(true);
  ASSERT_TRUE(eventually(
      [&] { return listing().find("blocked: fd " + std::to_string(sv[0]) + " (read)") != std::string::npos; }));
  ASSERT_EQ(::write(sv[1], "abc", 3), 3);
  ASSERT_TRUE(eventually([&] { return h.phase.load() == 1 || h.phase.load() < 0; }));
  ASSERT_EQ(::write(sv[1], "defgh", 5), 5);
  written.store(true);
  EXPECT_TRUE(eventually([&] { return h.phase.load() == 3 || h.phase.load() < 0; }, 3s));
  EXPECT_EQ(h.phase.load(), 3) << "told " << h.told.load() << "\n" << listing();
  loom::Fibre(a, [&] {
    io::close(sv[0]);
    io::close(sv[1]);
  }).join();
  drained(c);
}

INSTANTIATE_TEST_SUITE_P(EdgeFirstOrArmedFirst, RestAfterWhenReady, ::testing::Bool());

}  // namespace
