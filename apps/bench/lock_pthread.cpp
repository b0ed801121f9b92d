// lock_pthread — the lock benchmark (lock_harness.hpp) on kernel threads:
// T pthreads with default attributes, L pthread_mutex_t (default type, i.e.
// glibc's PTHREAD_MUTEX_NORMAL: a futex, no spinning), each on its own
// cache line.
//
// "C processors" for kernel threads means C CPUs: the process keeps the
// first C CPUs of the affinity mask it was started with (scripts/bench pins
// it with taskset) and fails (exit 2) if the mask has fewer.
#include <pthread.h>
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "lock_harness.hpp"

namespace {

struct alignas(64) PMutex {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  void lock() { pthread_mutex_lock(&m); }
  void unlock() { pthread_mutex_unlock(&m); }
};

struct Args {
  lockbench::Shared* s;
  PMutex* locks;
  unsigned index;
};

void* run_worker(void* p) {
  Args* a = static_cast<Args*>(p);
  lockbench::worker(*a->s, a->locks, a->index);
  return nullptr;
}

void check(int err, const char* what) {
  if (err != 0) {
    std::fprintf(stderr, "lock_pthread: %s: %s\n", what, std::strerror(err));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  lockbench::Config c = lockbench::parse("lock_pthread", "pthreads (pthread_mutex_t)", argc, argv);
  const double rate = lockbench::loop_rate(c);

  cpu_set_t allowed, use;
  CPU_ZERO(&allowed);
  CPU_ZERO(&use);
  check(sched_getaffinity(0, sizeof allowed, &allowed) ? errno : 0, "sched_getaffinity");
  unsigned got = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && got < c.processors; ++cpu)
    if (CPU_ISSET(cpu, &allowed)) {
      CPU_SET(cpu, &use);
      ++got;
    }
  if (got < c.processors) {
    std::fprintf(stderr, "lock_pthread: --processors %u but this process may only run on CPUs %s (taskset)\n",
                 c.processors, bench::allowed_cpus().c_str());
    return 2;
  }
  check(sched_setaffinity(0, sizeof use, &use) ? errno : 0, "sched_setaffinity");

  lockbench::Shared s(c, rate);
  std::unique_ptr<PMutex[]> locks(new PMutex[c.locks]);
  std::vector<Args> args(c.threads);
  std::vector<pthread_t> threads(c.threads);
  for (unsigned i = 0; i < c.threads; ++i) {
    args[i] = Args{&s, locks.get(), i};
    check(pthread_create(&threads[i], nullptr, run_worker, &args[i]), "pthread_create");
  }
  lockbench::Window w = lockbench::control(s);
  for (pthread_t t : threads) check(pthread_join(t, nullptr), "pthread_join");
  bench::Json j = lockbench::row("pthread", "", s, rate, w);
  j.add("mutex", "pthread_mutex_t (PTHREAD_MUTEX_NORMAL)");
  if (c.idle_s > 0) j.add("idle_cpu_ms_per_s", lockbench::idle_cpu_ms_per_s(c.idle_s));
  j.print();
  return 0;
}
