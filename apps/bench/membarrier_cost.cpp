// membarrier_cost — what one membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)
// costs its caller, alone and while another thread of the process keeps
// another CPU busy (the case of a thief stealing from a busy processor under
// LOOM_STEAL_FENCE=membarrier). Needs 2 CPUs: the spinner runs on CPU 0,
// the caller on CPU 1. Prints µs per call; exit 77 where membarrier(2) is
// missing. For docs/BENCHMARKS.md ("The lock benchmark's slow rounds").
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

namespace {

void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

double us_per_call(int n) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
}

}  // namespace

int main() {
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0) {
    std::puts("membarrier_cost: MEMBARRIER_CMD_PRIVATE_EXPEDITED unavailable");
    return 77;
  }
  pin(1);
  std::printf("alone: %.2f µs per call\n", us_per_call(20000));
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    pin(0);
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  usleep(10000);
  for (int r = 0; r < 3; ++r) std::printf("another CPU busy in this process: %.2f µs per call\n", us_per_call(5000));
  stop = true;
  spinner.join();
  return 0;
}
