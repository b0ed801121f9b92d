// micro_pthread — the kernel-thread peer of loom's micro rows.
//
//   yield        two threads pinned to the same CPU (the first CPU this
//                process may use — CPU 1 under scripts/bench) each call
//                sched_yield() n times; ns per yield = time / 2n.
//   create_join  pthread_create of an empty function, then pthread_join;
//                default attributes (glibc's 8 MiB stacks, which glibc
//                caches and reuses).
//   mutex_handoff  two threads pinned to that CPU pass a turn back and forth
//                through a pthread_mutex_t + pthread_cond_t; ns per handoff,
//                time / 2n.
//   sem_pingpong two threads pinned to that CPU ping-pong through two POSIX
//                semaphores (sem_post / sem_wait); ns per pass, time / 2n.
//
// The same binary, unmodified, under LD_PRELOAD=libloom-pthread.so with
// LOOM_PROCESSORS=1 is scripts/bench micro's `preload` row (and, with
// LOOM_TLS=off, `preload-notls`): the pthread route's switch, with and
// without installing each thread's own thread control block.
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "harness.hpp"

namespace {

int g_cpu = -1;  // where both yield threads are pinned

void check(int err, const char* what) {
  if (err != 0) {
    std::fprintf(stderr, "micro_pthread: %s: %s\n", what, std::strerror(err));
    std::exit(1);
  }
}

void* empty(void*) { return nullptr; }

double create_join(std::uint64_t n) {
  std::uint64_t t0 = bench::now_ns();
  for (std::uint64_t i = 0; i < n; ++i) {
    pthread_t t;
    check(pthread_create(&t, nullptr, empty, nullptr), "pthread_create");
    check(pthread_join(t, nullptr), "pthread_join");
  }
  return double(bench::now_ns() - t0);
}

// Runs fn(0) and fn(1) on two threads pinned to g_cpu; returns the ns from
// before the first create to after the second join.
template <typename F>
double pinned_pair(F& fn) {
  struct Arg {
    F* fn;
    int me;
  };
  auto body = [](void* p) -> void* {
    Arg* a = static_cast<Arg*>(p);
    (*a->fn)(a->me);
    return nullptr;
  };
  pthread_attr_t attr;
  check(pthread_attr_init(&attr), "pthread_attr_init");
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(g_cpu, &set);
  // Under libloom-pthread (scripts/bench's preload rows) threads are fibres
  // and have no affinity (ENOSYS): they share the processor taskset gave it.
  if (int e = pthread_attr_setaffinity_np(&attr, sizeof set, &set); e != ENOSYS)
    check(e, "pthread_attr_setaffinity_np");
  Arg a0{&fn, 0}, a1{&fn, 1};
  pthread_t a, b;
  std::uint64_t t0 = bench::now_ns();
  check(pthread_create(&a, &attr, body, &a0), "pthread_create");
  check(pthread_create(&b, &attr, body, &a1), "pthread_create");
  check(pthread_join(a, nullptr), "pthread_join");
  check(pthread_join(b, nullptr), "pthread_join");
  double t = double(bench::now_ns() - t0);
  pthread_attr_destroy(&attr);
  return t;
}

double yield_pair(std::uint64_t n) {
  auto loop = [n](int) {
    for (std::uint64_t i = 0; i < n; ++i) sched_yield();
  };
  return pinned_pair(loop) / 2;  // harness divides by n: report per yield, 2n yields
}

double mutex_handoff(std::uint64_t n) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
  int turn = 0;
  auto player = [&, n](int me) {
    for (std::uint64_t i = 0; i < n; ++i) {
      pthread_mutex_lock(&m);
      while (turn != me) pthread_cond_wait(&cv, &m);
      turn = 1 - me;
      pthread_cond_signal(&cv);
      pthread_mutex_unlock(&m);
    }
  };
  double t = pinned_pair(player);
  pthread_cond_destroy(&cv);
  pthread_mutex_destroy(&m);
  return t / 2;  // per handoff: 2n handoffs
}

double sem_pingpong(std::uint64_t n) {
  sem_t ping, pong;
  if (sem_init(&ping, 0, 0) != 0 || sem_init(&pong, 0, 0) != 0) check(errno, "sem_init");
  auto player = [&, n](int me) {
    for (std::uint64_t i = 0; i < n; ++i) {
      if (me == 0) {
        sem_post(&ping);
        while (sem_wait(&pong) != 0) continue;  // EINTR only
      } else {
        while (sem_wait(&ping) != 0) continue;
        sem_post(&pong);
      }
    }
  };
  double t = pinned_pair(player);
  sem_destroy(&ping);
  sem_destroy(&pong);
  return t / 2;  // per one-way pass: 2n passes
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<bench::RowInfo> rows = {
      {"yield", "two threads pinned to one CPU calling sched_yield(); ns per yield"},
      {"create_join", "pthread_create of an empty function + pthread_join; ns per pair"},
      {"mutex_handoff", "two threads pinned to one CPU passing a turn through a mutex + condvar; ns per handoff"},
      {"sem_pingpong", "two threads pinned to one CPU ping-ponging through two sem_t; ns per pass"},
  };
  bench::Options o = bench::parse_micro("micro_pthread", "pthreads (kernel threads)", argc, argv, rows);
  g_cpu = bench::first_allowed_cpu();
  if (g_cpu < 0) {
    std::fprintf(stderr, "micro_pthread: cannot read this process's CPU affinity\n");
    return 1;
  }
  if (o.wants("yield")) {
    bench::Measurement m = bench::measure(o, yield_pair);
    bench::micro_row("yield", "pthread", "", m, "sched_yield").add("pinned_cpu", g_cpu).print();
  }
  if (o.wants("create_join")) {
    bench::Measurement m = bench::measure(o, create_join);
    bench::micro_row("create_join", "pthread", "", m, "pthread_create+pthread_join").print();
  }
  if (o.wants("mutex_handoff")) {
    bench::Measurement m = bench::measure(o, mutex_handoff);
    bench::micro_row("mutex_handoff", "pthread", "", m, "pthread_mutex+pthread_cond handoff")
        .add("pinned_cpu", g_cpu)
        .print();
  }
  if (o.wants("sem_pingpong")) {
    bench::Measurement m = bench::measure(o, sem_pingpong);
    bench::micro_row("sem_pingpong", "pthread", "", m, "sem_post+sem_wait pass").add("pinned_cpu", g_cpu).print();
  }
  return 0;
}
