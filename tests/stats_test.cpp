// The runtime's counters (sched/stats.hpp): each counts what it says, they
// add up across processors, and the tables come out at exit and on a signal.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "loom/io.hpp"
#include "loom/loom.h"
#include "loom/loom.hpp"
#include "sched/fibre.hpp"
#include "test_util.hpp"

namespace {

using loom::ClusterStats;

#define LOOM_STATS_FIELD_LIST(field, description) &ClusterStats::field,
constexpr std::uint64_t ClusterStats::*kFields[] = {LOOM_STATS_FIELDS(LOOM_STATS_FIELD_LIST)};
#undef LOOM_STATS_FIELD_LIST

ClusterStats sum_of_processors(const loom::Cluster& c) {
  ClusterStats s;
  for (std::size_t i = 0; i < c.processors(); ++i) {
    ClusterStats p = c.processor_stats(i);
    for (auto f : kFields) s.*f += p.*f;
  }
  return s;
}

// Fibres of a 2-processor cluster: yields, a contended mutex, stacks
// reused, a sleep.
TEST(Stats, CountersCountWhatTheySay) {
  loom::Cluster c(2);
  ClusterStats before = c.stats();
  const int kFibres = 40, kRounds = 50;
  loom::Mutex m;
  long n = 0;
  std::vector<loom::Fibre> v;
  loom::FibreAttr a;
  a.cluster = &c;
  for (int i = 0; i < kFibres; ++i)
    v.emplace_back(a, [&] {
      for (int r = 0; r < kRounds; ++r) {
        std::lock_guard<loom::Mutex> g(m);
        ++n;
        loom::this_fibre::yield();  // holding it: the others block
      }
    });
  for (auto& f : v) f.join();
  v.clear();
  ASSERT_EQ(n, long(kFibres) * kRounds);
  // One fibre at a time, from a fibre of the cluster: stacks come back.
  // Then a mutex held across a sleep (a timer) that another fibre wants:
  // it tries, fails, and must block.
  loom::Fibre outer(a, [&] {
    for (int i = 0; i < 20; ++i) loom::Fibre([] {}).join();
    std::atomic<bool> tried{false};
    m.lock();
    loom::Fibre contender([&] {
      tried = !m.try_lock();
      m.lock();
      m.unlock();
    });
    while (!tried) loom::this_fibre::yield();
    loom::this_fibre::sleep_for(std::chrono::milliseconds(20));
    m.unlock();
    contender.join();
  });
  outer.join();

  ClusterStats s = c.stats();
  EXPECT_EQ(s.fibres_created - before.fibres_created, std::uint64_t(kFibres + 22));
  EXPECT_EQ(s.fibres_finished - before.fibres_finished, std::uint64_t(kFibres + 22));
  EXPECT_GE(s.yields - before.yields, std::uint64_t(kFibres) * kRounds);
  EXPECT_GE(s.switches - before.switches, s.fibres_finished - before.fibres_finished);
  EXPECT_GT(s.mutex_blocks, before.mutex_blocks);
  EXPECT_GT(s.stack_hits, before.stack_hits);
  EXPECT_GE(s.stack_misses, 1u);
  EXPECT_GE(s.timer_fires - before.timer_fires, 1u);
  EXPECT_GT(s.stack_bytes, 0u);
  // Steals: each success was an attempt, and took at least one fibre.
  EXPECT_LE(s.steal_hits, s.steal_tries);
  EXPECT_LE(s.steal_hits, s.steals);
  EXPECT_LE(s.sticky_steals, s.steals);
}

TEST(Stats, ProcessorsAddUpToTheCluster) {
  loom::Cluster c(2);
  loom::FibreAttr a;
  a.cluster = &c;
  std::vector<loom::Fibre> v;
  for (int i = 0; i < 20; ++i)
    v.emplace_back(a, [] {
      for (int r = 0; r < 100; ++r) loom::this_fibre::yield();
    });
  v.clear();
  // Read the processors first: every counter only grows, so their sum can
  // only be at most the cluster's total read after it. What is counted only
  // on processors adds up exactly once the cluster's fibres are done (an
  // idle processor may still count sleeps and wake-ups).
  ClusterStats per = sum_of_processors(c);
  ClusterStats all = c.stats();
  for (auto f : kFields) EXPECT_LE(per.*f, all.*f);
  EXPECT_EQ(per.switches, all.switches);
  EXPECT_EQ(per.yields, all.yields);
  EXPECT_EQ(per.fibres_finished, all.fibres_finished);
  EXPECT_EQ(per.steals, all.steals);
  EXPECT_EQ(per.stack_hits, all.stack_hits);
  // Made from main, a fibre of the default cluster: not on c's processors.
  EXPECT_EQ(all.fibres_created, 20u);
}

TEST(Stats, IoCounters) {
  int sv[2];
  ASSERT_EQ(loom::io::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ClusterStats before = loom::stats();
  loom::Fibre reader([&] {
    char b;
    EXPECT_EQ(loom::io::read(sv[0], &b, 1), 1);  // waits: nothing written yet
  });
  loom::this_fibre::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(loom::io::write(sv[1], "x", 1), 1);
  reader.join();
  ClusterStats s = loom::stats();
  EXPECT_GE(s.io_blocks - before.io_blocks, 1u);
  EXPECT_GE(s.registrations - before.registrations, 1u);
  EXPECT_GE(s.poller_events - before.poller_events, 1u);
  EXPECT_GE(s.poller_wakeups - before.poller_wakeups, 1u);
  EXPECT_LE(s.poller_wakeups - before.poller_wakeups, s.poller_events - before.poller_events);
  loom::io::close(sv[0]);
  loom::io::close(sv[1]);
}

TEST(Stats, CApi) {
  loom_stats_t all, p0;
  EXPECT_EQ(loom_stats_get(nullptr, -1, nullptr), EINVAL);
  EXPECT_EQ(loom_stats_get(nullptr, -2, &all), EINVAL);
  loom_cluster_t* def = loom_cluster_default();
  EXPECT_EQ(loom_stats_get(def, int(loom_cluster_processors(def)), &all), EINVAL);
  ASSERT_EQ(loom_stats_get(def, 0, &p0), 0);
  ASSERT_EQ(loom_stats_get(nullptr, -1, &all), 0);
  EXPECT_LE(p0.switches, all.switches);
  EXPECT_GT(all.fibres_created, 0u);
  EXPECT_EQ(all.stack_bytes, loom::stats().stack_bytes);
}

using loom::test::Result;
using loom::test::run;

const std::string probe = LOOM_PROBE;

TEST(Stats, TablesAtExitAndOnASignal) {
  Result r = run("LOOM_PROCESSORS=2 LOOM_STATS=1 " + probe + " stats");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("stats done\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("loom: cluster 0, 2 processors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  yields "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  fibres_finished"), std::string::npos) << r.out;

  r = run(probe + " stats");
  EXPECT_EQ(r.out, "stats done\n") << "no table unless asked for";

  r = run("LOOM_STATS_SIGNAL=SIGUSR2 " + probe + " stats signal");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("loom: cluster 0"), std::string::npos) << r.out;
  EXPECT_LT(r.out.find("loom: cluster 0"), r.out.find("stats done")) << "printed while running: " << r.out;

  r = run("LOOM_STATS_SIGNAL=12 " + probe + " stats signal");
  EXPECT_NE(r.out.find("loom: cluster 0"), std::string::npos) << r.out;

  // Bad input: a clear message, and the program runs on.
  r = run("LOOM_STATS_SIGNAL=SIGFOO " + probe + " stats");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("loom: LOOM_STATS_SIGNAL=SIGFOO: expected a signal loom can catch (e.g. SIGUSR2); using none"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stats done\n"), std::string::npos) << r.out;
  r = run("LOOM_STATS_SIGNAL=SIGKILL " + probe + " stats");
  EXPECT_NE(r.out.find("LOOM_STATS_SIGNAL=SIGKILL: expected a signal loom can catch"), std::string::npos) << r.out;
}

}  // namespace

namespace {

// The stall detector (LOOM_STALL_MS): a spinning fibre is reported with its
// stack; one that yields, or waits in loom's I/O, is not; one that sits in
// a plain blocking read(2) is reported with the call.
TEST(Stall, ReportsASpinningFibreWithItsStack) {
  Result r = run("LOOM_PROCESSORS=2 LOOM_STALL_MS=100 " + probe + " stall spin");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("loom: stall: fibre "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"subject\" has held processor"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("without a scheduling point"), std::string::npos) << r.out;
  // Named and demangled from the program's symbol table (it exports none),
  // and loom's own frames, hidden from dladdr, named too.
  EXPECT_NE(r.out.find(" subjects::spin_without_yielding(int)+0x"), std::string::npos) << "backtrace: " << r.out;
  EXPECT_NE(r.out.find("loom::rt::"), std::string::npos) << "loom's frames: " << r.out;
  EXPECT_EQ(r.out.find("_ZN"), std::string::npos) << "nothing mangled: " << r.out;
  // Rate-limited: one report for one stall.
  std::size_t first = r.out.find("loom: stall:");
  EXPECT_EQ(r.out.find("loom: stall:", first + 1), std::string::npos) << r.out;
}

// A ring of fibres each waiting for a mutex the next holds is reported by
// the watchdog once, each fibre and mutex named (the mutexes are a
// variable of the probe's); mutexes always taken in one order, under
// contention, never are.
TEST(Stall, ReportsADeadlockOnceNamingEachFibre) {
  Result r = run("LOOM_PROCESSORS=2 LOOM_STALL_MS=100 " + probe + " deadlock 2");
  EXPECT_EQ(r.status, 0) << r.out;
  std::size_t at = r.out.find("loom: deadlock: fibre ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("loom: deadlock:", at + 1), std::string::npos) << "once: " << r.out;
  std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_NE(line.find("\"first\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"second\""), std::string::npos) << line;
  EXPECT_NE(line.find("waits for mutex 0x"), std::string::npos) << line;
  EXPECT_NE(line.find("(main::ring"), std::string::npos) << line;
  EXPECT_NE(line.find(", which waits for mutex "), std::string::npos) << line;

  r = run("LOOM_PROCESSORS=2 LOOM_STALL_MS=100 " + probe + " deadlock 3");
  at = r.out.find("loom: deadlock: fibre ");
  ASSERT_NE(at, std::string::npos) << r.out;
  line = r.out.substr(at, r.out.find('\n', at) - at);
  for (const char* name : {"\"first\"", "\"second\"", "\"third\""})
    EXPECT_NE(line.find(name), std::string::npos) << line;

  r = run("LOOM_PROCESSORS=2 LOOM_STALL_MS=20 " + probe + " deadlock 16 none");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("deadlock probe done"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("loom: deadlock"), std::string::npos) << "no false cycle: " << r.out;
}

TEST(Stall, SilentForYieldingAndForLoomIo) {
  Result r = run("LOOM_PROCESSORS=2 LOOM_STALL_MS=100 " + probe + " stall yield");
  EXPECT_EQ(r.out, "stall probe done\n");
  r = run("LOOM_PROCESSORS=2 LOOM_STALL_MS=100 " + probe + " stall io");
  EXPECT_EQ(r.out, "stall probe done\n");
}

TEST(Stall, ReportsAPlainBlockingSystemCall) {
  Result r = run("LOOM_PROCESSORS=2 LOOM_STALL_MS=100 " + probe + " stall syscall");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"subject\" has blocked processor"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("in the kernel"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": read,"), std::string::npos) << r.out;
}

TEST(Stall, OffByDefaultAndBadSettings) {
  Result r = run("LOOM_PROCESSORS=2 " + probe + " stall spin");
  EXPECT_EQ(r.out, "stall probe done\n");
  r = run("LOOM_STALL_MS=soon " + probe + " stall yield");
  EXPECT_NE(r.out.find("loom: LOOM_STALL_MS=soon"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stall probe done\n"), std::string::npos) << r.out;
  r = run("LOOM_STALL_MS=100 LOOM_STALL_SIGNAL=SIGNOPE " + probe + " stall spin");
  EXPECT_NE(r.out.find("loom: LOOM_STALL_SIGNAL=SIGNOPE: expected a signal loom can catch (e.g. SIGUSR2); using SIGRTMIN+6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("spin_without_yielding"), std::string::npos) << "the default signal serves: " << r.out;
}

}  // namespace

namespace {

using loom::test::listing;

std::string line_of(const std::string& text, const std::string& name) {
  std::size_t at = text.find(" " + name + " ");
  if (at == std::string::npos) return "";
  std::size_t b = text.rfind('\n', at), e = text.find('\n', at);
  return text.substr(b + 1, e - b - 1);
}

std::string address(const void* p) {
  char s[32];
  std::snprintf(s, sizeof s, "%p", p);
  return s;
}

// The listing reads the holder of the mutex a fibre was seen blocked on; by
// then the fibre may have been woken, and the mutex destroyed and its memory
// unmapped (the listing faulted so under load, with the woken waiter
// freeing its mutex). The read is of memory that may be gone: it answers
// "nobody", never faults.
TEST(Fibres, ListingReadsAGoneMutexWithoutFaulting) {
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  auto* m = new (page) loom::Mutex;
  m->lock();
  EXPECT_NE(loom::rt::MutexHolder::of(*m), nullptr);
  m->unlock();
  m->~Mutex();
  ASSERT_EQ(munmap(page, 4096), 0);
  EXPECT_EQ(loom::rt::MutexHolder::of(*m), nullptr);
}

// A mutex that is a variable is listed by its name, read from the test's
// own symbol table (it exports nothing).
loom::Mutex listed_by_name;

TEST(Fibres, ListingNamesAMutexThatIsAVariable) {
  loom::Cluster c(1);
  std::unique_lock<loom::Mutex> held(listed_by_name);
  loom::FibreAttr a;
  a.cluster = &c;
  a.name = "waiter";
  loom::Fibre waiter(a, [] { std::lock_guard<loom::Mutex> g(listed_by_name); });
  std::string text, w;
  for (int i = 0; i < 2000 && w.find("blocked") == std::string::npos; ++i) {
    loom::this_fibre::sleep_for(std::chrono::milliseconds(1));
    text = listing();
    w = line_of(text, "waiter");
  }
  EXPECT_NE(w.find("blocked: mutex " + address(&listed_by_name) + " ((anonymous namespace)::listed_by_name)"),
            std::string::npos)
      << text;
  held.unlock();
  waiter.join();
}

// Two fibres that deadlock on two mutexes (with timeouts, so the test ends):
// the listing names each one's mutex.
TEST(Fibres, ListingShowsADeadlock) {
  loom::Cluster c(2);
  loom::Mutex a, b;
  std::atomic<int> holding{0};
  auto cross = [&](loom::Mutex& first, loom::Mutex& second) {
    std::lock_guard<loom::Mutex> g(first);
    holding.fetch_add(1);
    while (holding.load() < 2) loom::this_fibre::yield();
    if (second.try_lock_for(std::chrono::seconds(3))) second.unlock();
  };
  loom::FibreAttr la, ra;
  la.cluster = ra.cluster = &c;
  la.name = "left";
  ra.name = "right";
  loom::Fibre left(la, [&] { cross(a, b); });
  loom::Fibre right(ra, [&] { cross(b, a); });
  std::string text, l, r;
  for (int i = 0; i < 2000; ++i) {  // until both are seen blocked
    text = listing();
    l = line_of(text, "left");
    r = line_of(text, "right");
    if (l.find("blocked") != std::string::npos && r.find("blocked") != std::string::npos) break;
    loom::this_fibre::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_NE(l.find("blocked: mutex " + address(&b)), std::string::npos) << text;
  EXPECT_NE(r.find("blocked: mutex " + address(&a)), std::string::npos) << text;
  // And who holds it: the cycle, without gdb, and said after the table.
  EXPECT_NE(l.find(" held by fibre " + std::to_string(right.id()) + " \"right\""), std::string::npos) << text;
  EXPECT_NE(r.find(" held by fibre " + std::to_string(left.id()) + " \"left\""), std::string::npos) << text;
  EXPECT_NE(text.find("loom: deadlock: fibre "), std::string::npos) << text;
  // The main fibre lists too, as running (it is making the listing).
  EXPECT_NE(line_of(text, "main").find("running"), std::string::npos) << text;
  EXPECT_NE(l.find("64K"), std::string::npos) << "stack size: " << l;
  left.join();
  right.join();
  text = listing();
  EXPECT_EQ(line_of(text, "left"), "") << "finished fibres leave the listing: " << text;
}

TEST(Fibres, ListingNamesJoinSleepAndDescriptors) {
  int sv[2];
  ASSERT_EQ(loom::io::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  loom::FibreAttr ra, sa, ja;
  ra.name = "reader";
  sa.name = "sleeper";
  ja.name = "joiner";
  loom::Fibre reader(ra, [&] {
    char x;
    (void)!loom::io::read(sv[0], &x, 1);
  });
  // A second reader of the same descriptor waits for the first's turn to
  // end: named as that read, not as a mutex's address.
  loom::FibreAttr ta;
  ta.name = "second";
  loom::Fibre second(ta, [&] {
    char x;
    (void)!loom::io::read(sv[0], &x, 1);
  });
  loom::Fibre sleeper(sa, [] { loom::this_fibre::sleep_for(std::chrono::milliseconds(1000)); });
  loom::Fibre joiner(ja, [&] { sleeper.join(); });
  // A listener's accept is named as the call it is, not as a read.
  int l = loom::io::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(l, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(l, 4), 0);
  loom::FibreAttr aa;
  aa.name = "acceptor";
  loom::Fibre acceptor(aa, [l] { (void)loom::io::accept4(l, nullptr, nullptr, 0); });
  std::string text;
  for (int i = 0; i < 1000; ++i) {
    text = listing();
    if (line_of(text, "reader").find("blocked") != std::string::npos &&
        line_of(text, "second").find("blocked") != std::string::npos &&
        line_of(text, "acceptor").find("blocked") != std::string::npos &&
        line_of(text, "sleeper").find("blocked") != std::string::npos &&
        line_of(text, "joiner").find("blocked") != std::string::npos)
      break;
    loom::this_fibre::sleep_for(std::chrono::milliseconds(1));
  }
  // (Which of the two holds the turn is the scheduler's choice.)
  const std::string r1 = line_of(text, "reader"), r2 = line_of(text, "second");
  const std::string fd = "blocked: fd " + std::to_string(sv[0]) + " (read)";
  EXPECT_NE(r1.find(fd), std::string::npos) << text;
  EXPECT_NE(r2.find(fd), std::string::npos) << text;
  EXPECT_NE((r1 + r2).find(fd + ", waiting its turn"), std::string::npos) << text;
  EXPECT_EQ((r1 + r2).find("mutex"), std::string::npos) << text;
  EXPECT_NE(line_of(text, "sleeper").find("blocked: sleep, "), std::string::npos) << text;
  EXPECT_NE(line_of(text, "sleeper").find(", due in "), std::string::npos) << text;
  EXPECT_NE(line_of(text, "joiner").find("blocked: join fibre"), std::string::npos) << text;
  EXPECT_NE(line_of(text, "acceptor").find("blocked: fd " + std::to_string(l) + " (accept4)"), std::string::npos)
      << text;
  ASSERT_EQ(loom::io::write(sv[1], "xy", 2), 2);
  reader.join();
  second.join();
  joiner.join();
  ::shutdown(l, SHUT_RDWR);  // (ends the accept: EINVAL)
  acceptor.join();
  loom::io::close(l);
  loom::io::close(sv[0]);
  loom::io::close(sv[1]);
}

// A sleep whose timer waits behind a fibre that holds the processor (the
// monitor off for that cluster: nothing takes the processor back) is
// listed overdue, not as a sleep that goes on.
TEST(Fibres, ListingSaysASleepIsOverdue) {
  loom::SchedConfig config = loom::SchedConfig::from_env();
  config.handoff_us = 0;
  loom::Cluster c(1, config);
  std::atomic<bool> stop{false}, sleeping{false};
  loom::FibreAttr ha, sa;
  ha.cluster = sa.cluster = &c;
  ha.name = "hog";
  sa.name = "late";
  loom::Fibre sleeper(sa, [&] {
    sleeping = true;
    loom::this_fibre::sleep_for(std::chrono::milliseconds(10));
  });
  while (!sleeping) loom::this_fibre::sleep_for(std::chrono::milliseconds(1));
  loom::Fibre hog(ha, [&] {
    while (!stop.load()) asm volatile("" ::: "memory");
  });
  loom::this_fibre::sleep_for(std::chrono::milliseconds(80));
  std::string text = listing();
  stop = true;
  hog.join();
  sleeper.join();
  EXPECT_NE(line_of(text, "late").find("blocked: sleep, overdue "), std::string::npos) << text;
}

TEST(Fibres, WatermarksGrowWithDepthAndDumpOnASignal) {
  Result r = run("LOOM_STACK_WATERMARK=1 " + probe + " watermark");
  EXPECT_EQ(r.status, 0) << r.out;
  auto used = [&](const std::string& name) {
    std::size_t at = r.out.find("\"" + name + "\" used ");
    return at == std::string::npos ? -1.0 : std::atof(r.out.c_str() + at + name.size() + 8);
  };
  double shallow = used("shallow"), deep = used("deep");
  EXPECT_GT(shallow, 0.0) << r.out;
  EXPECT_GT(deep, shallow + 20) << "60 frames of 512 bytes deeper: " << r.out;
  EXPECT_NE(r.out.find("of its 64 KiB stack"), std::string::npos) << r.out;
  r = run(probe + " watermark");
  EXPECT_EQ(r.out, "") << "off by default";

  r = run("LOOM_DUMP_SIGNAL=SIGUSR1 " + probe + " dump-signal");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(line_of(r.out, "napper").find("blocked: sleep"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dump done"), std::string::npos) << r.out;
}

}  // namespace
