// futex_waits.cpp — C++20's waits compiled into a plain g++ -pthread
// program (std::latch, atomic::wait, std::barrier, std::counting_semaphore:
// libstdc++'s inline syscall(SYS_futex, ...)). 1,000 threads wait on a latch
// and then on an atomic while main looks at how many kernel threads the
// process has (/proc/self/task); then a barrier's phases and a semaphore's
// ping-pong, and timed waits that time out. stdout is the same on glibc and
// preloaded; stderr says the largest task count seen, which futex.sh bounds
// under loom (a fibre's wait that blocked its processor would stop the
// test on two processors: the timeout fails it).
#include <dirent.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <latch>
#include <semaphore>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

static int tasks() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

int main() {
  constexpr int kWaiters = 1000;
  int most = 0;
  {
    std::latch start(1);
    std::atomic<int> in{0}, out{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < kWaiters; ++i)
      ts.emplace_back([&] {
        in.fetch_add(1);
        start.wait();
        out.fetch_add(1);
      });
    while (in.load() < kWaiters) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(100ms);  // all of them waiting now
    most = std::max(most, tasks());
    std::printf("latch: %d waiting, %d passed before the count down\n", in.load(), out.load());
    start.count_down();
    for (auto& t : ts) t.join();
    std::printf("latch: %d passed\n", out.load());
  }
  {
    std::atomic<int> flag{0}, in{0}, out{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < kWaiters; ++i)
      ts.emplace_back([&] {
        in.fetch_add(1);
        flag.wait(0);
        out.fetch_add(1);
      });
    while (in.load() < kWaiters) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(100ms);
    most = std::max(most, tasks());
    std::printf("atomic::wait: %d passed before the notify\n", out.load());
    flag.store(1);
    flag.notify_all();
    for (auto& t : ts) t.join();
    std::printf("atomic::wait: %d passed\n", out.load());
  }
  {
    constexpr int kThreads = 8, kPhases = 200;
    std::atomic<long> sum{0};
    long phases = 0;
    std::barrier b(kThreads, [&]() noexcept { ++phases; });
    std::vector<std::thread> ts;
    for (int i = 0; i < kThreads; ++i)
      ts.emplace_back([&, i] {
        for (int p = 0; p < kPhases; ++p) {
          sum.fetch_add(i);
          b.arrive_and_wait();
        }
      });
    for (auto& t : ts) t.join();
    std::printf("barrier: %ld phases, sum %ld\n", phases, sum.load());
  }
  {
    std::counting_semaphore<> ping(0), pong(0);
    constexpr int kRounds = 20000;
    std::thread t([&] {
      for (int i = 0; i < kRounds; ++i) {
        ping.acquire();
        pong.release();
      }
    });
    for (int i = 0; i < kRounds; ++i) {
      ping.release();
      pong.acquire();
    }
    t.join();
    std::printf("semaphore: %d rounds\n", kRounds);
    bool got = ping.try_acquire_for(30ms);
    bool got_until = ping.try_acquire_until(std::chrono::system_clock::now() + 30ms);
    std::printf("semaphore: timed waits on an empty semaphore: %d %d\n", got, got_until);
  }
  {
    std::atomic<int> a{5};
    std::thread t([&] {
      std::this_thread::sleep_for(20ms);
      a.store(6);
      a.notify_one();
    });
    a.wait(5);
    t.join();
    std::printf("atomic::wait: woke on %d\n", a.load());
  }
  std::fprintf(stderr, "futex_waits: at most %d tasks\n", most);
  return 0;
}
