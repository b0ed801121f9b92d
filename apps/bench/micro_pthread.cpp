// micro_pthread — the kernel-thread peer of loom's micro rows.
//
//   yield        two threads pinned to the same CPU (the first CPU this
//                process may use — CPU 1 under scripts/bench) each call
//                sched_yield() n times; ns per yield = time / 2n.
//   create_join  pthread_create of an empty function, then pthread_join;
//                default attributes (glibc's 8 MiB stacks, which glibc
//                caches and reuses).
#include <pthread.h>
#include <sched.h>

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

void* yield_loop(void* arg) {
  std::uint64_t n = *static_cast<std::uint64_t*>(arg);
  for (std::uint64_t i = 0; i < n; ++i) sched_yield();
  return nullptr;
}

void* empty(void*) { return nullptr; }

double yield_pair(std::uint64_t n) {
  pthread_attr_t attr;
  check(pthread_attr_init(&attr), "pthread_attr_init");
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(g_cpu, &set);
  check(pthread_attr_setaffinity_np(&attr, sizeof set, &set), "pthread_attr_setaffinity_np");
  pthread_t a, b;
  std::uint64_t t0 = bench::now_ns();
  check(pthread_create(&a, &attr, yield_loop, &n), "pthread_create");
  check(pthread_create(&b, &attr, yield_loop, &n), "pthread_create");
  check(pthread_join(a, nullptr), "pthread_join");
  check(pthread_join(b, nullptr), "pthread_join");
  double t = double(bench::now_ns() - t0);
  pthread_attr_destroy(&attr);
  return t / 2;  // harness divides by n: report per yield, 2n yields
}

double create_join(std::uint64_t n) {
  std::uint64_t t0 = bench::now_ns();
  for (std::uint64_t i = 0; i < n; ++i) {
    pthread_t t;
    check(pthread_create(&t, nullptr, empty, nullptr), "pthread_create");
    check(pthread_join(t, nullptr), "pthread_join");
  }
  return double(bench::now_ns() - t0);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<bench::RowInfo> rows = {
      {"yield", "two threads pinned to one CPU calling sched_yield(); ns per yield"},
      {"create_join", "pthread_create of an empty function + pthread_join; ns per pair"},
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
  return 0;
}
