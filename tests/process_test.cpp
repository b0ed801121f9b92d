// Whole-process behaviour: start-up sizing, exit, idle CPU, stack overflow.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <time.h>

#include <array>
#include <atomic>
#include <vector>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "loom/loom.hpp"
#include "test_util.hpp"

namespace {

using loom::test::Result;
using loom::test::run;

const std::string probe = LOOM_PROBE;

TEST(Process, ProcessorsFollowTheEnvironment) {
  EXPECT_EQ(run("LOOM_PROCESSORS=3 " + probe + " processors").out, "3\n");
  EXPECT_EQ(run("LOOM_PROCESSORS=1 " + probe + " processors").out, "1\n");
}

TEST(Process, ProcessorsFollowTheAffinityMask) {
  Result r = run("taskset -c 0 " + probe + " processors");
  EXPECT_EQ(r.out, "1\n");
}

TEST(Process, MalformedSettingIsReportedAndIgnored) {
  Result r = run("LOOM_PROCESSORS=lots taskset -c 0 " + probe + " processors");
  EXPECT_NE(r.out.find("loom: LOOM_PROCESSORS=lots: expected an integer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n1\n"), std::string::npos) << r.out;
  r = run("LOOM_QUEUE=fast " + probe + " processors");
  EXPECT_NE(r.out.find("loom: LOOM_QUEUE=fast: expected nemesis|locked|shared; using nemesis"), std::string::npos)
      << r.out;
}

TEST(Process, EveryVariableSelectsItsVariant) {
  // The expected summaries are the defaults': not the back end this run of
  // the test was asked to use (the _uring twin sets LOOM_IO).
  ::unsetenv("LOOM_IO");
  EXPECT_EQ(run(probe + " config").out,
            "queue=nemesis placement=push steal=longest-busy sticky=8 spin=20us stack=64KiB poller=idle lazy=on ybr=on "
            "mutex=blocking\n");
  Result r = run("LOOM_QUEUE=shared LOOM_PLACEMENT=share LOOM_STEAL_POLICY=random LOOM_STICKY=3 LOOM_SPIN_US=500 "
                 "LOOM_STACK_SIZE=131072 LOOM_MUTEX=hybrid LOOM_POLLER=loop-sleep LOOM_POLLER_SLEEP=250 "
                 "LOOM_LAZY_REGISTER=off LOOM_YIELD_BEFORE_READ=off " + probe + " config");
  EXPECT_EQ(r.out, "queue=shared placement=share steal=random sticky=3 spin=500us stack=128KiB poller=loop-sleep/250us "
                   "lazy=off ybr=off mutex=hybrid\n");
  r = run("LOOM_STEAL=off LOOM_MUTEX=baton LOOM_POLLER=opportunistic-timeout " + probe + " config");
  EXPECT_EQ(r.out, "queue=nemesis placement=push steal=off sticky=8 spin=20us stack=64KiB "
                   "poller=opportunistic-timeout/1000us lazy=on ybr=on mutex=baton\n");
  // LOOM_SPIN (a count, before issue 34): its 0 still means no spin.
  r = run("LOOM_SPIN=0 " + probe + " config");
  EXPECT_NE(r.out.find(" spin=0us "), std::string::npos) << r.out;
  r = run("LOOM_WAIT_FIRST=off " + probe + " config");
  EXPECT_EQ(r.out, "queue=nemesis placement=push steal=longest-busy sticky=8 spin=20us stack=64KiB poller=idle lazy=on ybr=on "
                   "wait_first=off mutex=blocking\n");
  r = run("LOOM_STEAL_FENCE=membarrier " + probe + " config");
  EXPECT_EQ(r.out, "queue=nemesis placement=push steal=longest-busy sticky=8 spin=20us stack=64KiB poller=idle lazy=on ybr=on "
                   "fence=membarrier mutex=blocking\n");
  r = run("LOOM_STEAL_FENCE=ipi " + probe + " config");
  EXPECT_NE(r.out.find("loom: LOOM_STEAL_FENCE=ipi: expected lock|membarrier; using lock"), std::string::npos)
      << r.out;
  r = run("LOOM_IO=uring " + probe + " config");
  EXPECT_NE(r.out.find(" io=uring "), std::string::npos) << r.out;
  r = run("LOOM_IO=kqueue " + probe + " config");
  EXPECT_NE(r.out.find("loom: LOOM_IO=kqueue: expected epoll|uring; using epoll"), std::string::npos) << r.out;
  r = run("LOOM_POLLER=epoll " + probe + " config");
  EXPECT_NE(r.out.find("loom: LOOM_POLLER=epoll: expected idle|fibre|loop|loop-sleep|opportunistic|opportunistic-timeout; "
                       "using idle"), std::string::npos) << r.out;
  r = run("LOOM_MUTEX=fastest LOOM_SPIN_US=-1 " + probe + " config");
  EXPECT_NE(r.out.find("loom: LOOM_MUTEX=fastest: expected blocking|spin|baton|hybrid; using blocking"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("loom: LOOM_SPIN_US=-1: expected an integer"), std::string::npos) << r.out;
}

TEST(Process, SpinBeforeBlockStillSleepsWhenIdle) {
  // The spin variant runs real work, then its processors must still sleep.
  loom::SchedConfig cfg;
  cfg.spin_us = 2000;
  loom::Cluster c(2, cfg);
  std::atomic<int> n{0};
  {
    loom::FibreAttr a;
    a.cluster = &c;
    std::vector<loom::Fibre> v;
    for (int i = 0; i < 200; ++i)
      v.emplace_back(a, [&] {
        loom::this_fibre::yield();
        n.fetch_add(1);
      });
  }
  EXPECT_EQ(n.load(), 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto before = c.stats().sleeps;
  timespec t0;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  timespec t1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
  double used = double(t1.tv_sec - t0.tv_sec) + double(t1.tv_nsec - t0.tv_nsec) / 1e9;
  EXPECT_LT(used, 0.01) << "seconds of CPU in half an idle second with spin-before-block";
  EXPECT_EQ(c.stats().sleeps, before) << "idle processors kept waking";
}

TEST(Process, ReturningFromMainEndsTheProcess) {
  Result r = run("timeout 20 " + probe + " main-returns");
  EXPECT_EQ(r.status, 7) << r.out;
  EXPECT_NE(r.out.find("main returns"), std::string::npos);
}

TEST(Process, StackOverflowNamesTheFibre) {
  Result r = run("timeout 20 " + probe + " overflow");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("loom: fibre "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"deep\" overflowed its 16 KiB stack (guard page hit at 0x"), std::string::npos) << r.out;
}

TEST(Process, ValgrindFollowsFibreSwitches) {
  if (run("command -v valgrind").status != 0) GTEST_SKIP() << "valgrind not installed";
  Result r = run("timeout 300 valgrind --error-exitcode=9 --quiet " + probe + " work");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("work done"), std::string::npos) << r.out;
}

TEST(ProcessDeathTest, StackOverflowKillsWithSegv) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto deep = [] {
    loom::FibreAttr a;
    a.name = "deep";
    a.stack_size = 16 * 1024;
    loom::Fibre f(a, [] {
      std::function<void(int)> rec = [&](int d) {
        volatile char pad[256];
        pad[0] = char(d);
        rec(d + 1);
        asm volatile("" ::"r"(pad) : "memory");
      };
      rec(0);
    });
    f.join();
  };
  EXPECT_EXIT(deep(), testing::KilledBySignal(SIGSEGV), "\"deep\" overflowed its 16 KiB stack");
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

TEST(Process, AnIdleRuntimeUsesNoCpu) {
  loom::Cluster c(2);
  {
    // Work first, so that the processors have been busy and gone idle.
    loom::FibreAttr a;
    a.cluster = &c;
    std::vector<loom::Fibre> v;
    for (int i = 0; i < 1000; ++i) v.emplace_back(a, [] { loom::this_fibre::yield(); });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  double t0 = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  double used = process_cpu_seconds() - t0;
  // Every processor of both clusters is idle: under 2% of one core.
  EXPECT_LT(used, 0.02) << "seconds of CPU burnt in one idle second";
}

}  // namespace
