// pthread_sync_bench — libloom-pthread's compact (40-byte, parking-lot)
// mutex against loom::Mutex (64 bytes, its own wait queue), both on fibres.
//
//   uncontended   one fibre, lock + unlock, ns per pair
//   contended     F fibres on P processors, each lock, a short critical
//                 section (a counter and argv[2] loop iterations, default
//                 20, ~50 ns), unlock, as many outside; ns per critical
//                 section, total
//   handoff       two fibres on one processor taking turns through the
//                 lock with a yield while holding it, so every lock waits:
//                 ns per hand-off (park + unpark + switch)
//
// Linked with libloom-pthread, so pthread_mutex_* are loom's. Prints one
// line per case; LOOM_MUTEX chooses the policy of both kinds alike.
// Not a ctest: run by hand (see the report in the commit message).
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "loom/loom.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct alignas(64) Compact {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  void lock() { pthread_mutex_lock(&m); }
  void unlock() { pthread_mutex_unlock(&m); }
};
struct alignas(64) Native {
  loom::Mutex m;
  void lock() { m.lock(); }
  void unlock() { m.unlock(); }
};

int g_work = 20;  // loop iterations inside and outside the lock (argv[2])

inline void work(int n) {
  for (volatile int i = 0; i < n; i = i + 1) {
  }
}

double ns_since(Clock::time_point t0, long ops) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / double(ops);
}

template <class M>
double uncontended(loom::Cluster& c, long n) {
  double r = 0;
  loom::FibreAttr a;
  a.cluster = &c;
  loom::Fibre(a, [&] {
    M m;
    for (long i = 0; i < n / 10; ++i) m.lock(), m.unlock();  // warm
    auto t0 = Clock::now();
    for (long i = 0; i < n; ++i) m.lock(), m.unlock();
    r = ns_since(t0, n);
  }).join();
  return r;
}

template <class M>
double contended(loom::Cluster& c, int fibres, long per_fibre) {
  M m;
  long counter = 0;
  loom::FibreAttr a;
  a.cluster = &c;
  std::vector<loom::Fibre> fs;
  auto t0 = Clock::now();
  for (int f = 0; f < fibres; ++f)
    fs.emplace_back(a, [&] {
      for (long i = 0; i < per_fibre; ++i) {
        m.lock();
        ++counter;
        work(g_work);
        m.unlock();
        work(g_work);
      }
    });
  for (auto& f : fs) f.join();
  double r = ns_since(t0, fibres * per_fibre);
  if (counter != fibres * per_fibre) std::fprintf(stderr, "pthread_sync_bench: lost updates!\n"), std::exit(1);
  return r;
}

template <class M>
double handoff(loom::Cluster& c, long n) {
  M m;
  loom::FibreAttr a;
  a.cluster = &c;
  std::atomic<long> turns{0};
  auto body = [&] {
    while (turns.load(std::memory_order_relaxed) < n) {
      m.lock();
      turns.fetch_add(1, std::memory_order_relaxed);
      loom::this_fibre::yield();  // the other fibre runs and waits for us
      m.unlock();
    }
  };
  auto t0 = Clock::now();
  loom::Fibre x(a, body), y(a, body);
  x.join();
  y.join();
  return ns_since(t0, turns.load());
}

}  // namespace

int main(int argc, char** argv) {
  long scale = argc > 1 ? std::atol(argv[1]) : 1;
  if (argc > 2) g_work = std::atoi(argv[2]);
  loom::Cluster one(1), two(2);
  const long n = 2'000'000 * scale;
  std::printf("%-28s %12s %12s\n", "case (ns per op)", "compact", "loom::Mutex");
  std::printf("%-28s %12.1f %12.1f\n", "uncontended lock+unlock", uncontended<Compact>(one, n),
              uncontended<Native>(one, n));
  for (auto [cl, p] : {std::pair<loom::Cluster*, int>{&one, 1}, {&two, 2}}) {
    for (int f : {2, 8, 64}) {
      char name[64];
      std::snprintf(name, sizeof name, "contended %d fibres, %d proc", f, p);
      long per = 200'000 * scale / f;
      const char* only = std::getenv("BENCH_ONLY");  // compact | native: one column (for perf)
      double a = only && *only == 'n' ? 0 : contended<Compact>(*cl, f, per);
      double b = only && *only == 'c' ? 0 : contended<Native>(*cl, f, per);
      std::printf("%-28s %12.1f %12.1f\n", name, a, b);
    }
  }
  std::printf("%-28s %12.1f %12.1f\n", "hand-off (1 proc)", handoff<Compact>(one, 200'000 * scale),
              handoff<Native>(one, 200'000 * scale));
  std::printf("sizeof: compact %zu, loom::Mutex %zu\n", sizeof(pthread_mutex_t), sizeof(loom::Mutex));
  return 0;
}
