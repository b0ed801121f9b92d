// cxx_threads.cpp — plain C++ threads (no loom in the source, built with
// g++ -pthread). Under libloom-pthread every std::thread is a fibre, and
// std::mutex, std::condition_variable and std::shared_mutex block fibres,
// not processors. Run with LOOM_PROCESSORS=2; argv[1] is how many threads
// are alive at once in the first check (10,000 on fibres: glibc's 8 MiB
// stacks would take 80 GiB of address space).
//
// Each check prints one fixed line, so that the glibc run and the loom runs
// compare equal; three.sh counts the fibres (LOOM_PTHREAD_STATS).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>
#include <vector>

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what);
    std::exit(1);
  }
}

// All n threads alive at once: each arrives, then waits until main lets
// them all go. Blocking here holds a processor on glibc's terms; on loom the
// 2 processors run all n.
void all_alive(int n) {
  std::mutex m;
  std::condition_variable arrived_cv, go_cv;
  int arrived = 0;
  bool go = false;
  std::vector<std::thread> ts;
  ts.reserve(n);
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&] {
      std::unique_lock<std::mutex> l(m);
      if (++arrived == n) arrived_cv.notify_one();
      go_cv.wait(l, [&] { return go; });
    });
  {
    std::unique_lock<std::mutex> l(m);
    arrived_cv.wait(l, [&] { return arrived == n; });
    go = true;
  }
  go_cv.notify_all();
  for (auto& t : ts) t.join();
  std::printf("all threads alive at once, then joined\n");
}

// 100 threads blocked on a condition variable do not stop another thread:
// with 2 processors, a condvar that blocked its processor would starve it.
void progress_while_blocked() {
  constexpr int kWaiters = 100;
  std::mutex m;
  std::condition_variable cv;
  int waiting = 0;
  bool release = false;
  std::vector<std::thread> ts;
  for (int i = 0; i < kWaiters; ++i)
    ts.emplace_back([&] {
      std::unique_lock<std::mutex> l(m);
      ++waiting;
      cv.wait(l, [&] { return release; });
    });
  for (;;) {  // until every waiter is blocked in cv.wait (fibres are not preempted: yield)
    {
      std::lock_guard<std::mutex> l(m);
      if (waiting == kWaiters) break;
    }
    std::this_thread::yield();
  }
  std::atomic<long> work{0};
  std::thread worker([&] {
    for (int i = 0; i < 100000; ++i) work.fetch_add(1, std::memory_order_relaxed);
  });
  worker.join();
  check(work.load() == 100000, "the worker finished while 100 threads waited");
  {
    std::lock_guard<std::mutex> l(m);
    release = true;
  }
  cv.notify_all();
  for (auto& t : ts) t.join();
  std::printf("progress while 100 threads wait on a condition variable\n");
}

// Readers of a std::shared_mutex overlap (all 4 inside at once), a writer
// excludes them.
void shared_mutex_readers() {
  constexpr int kReaders = 4;
  std::shared_mutex rw;
  std::mutex m;
  std::condition_variable cv;
  int inside = 0;
  bool writer_saw_reader = false;
  std::vector<std::thread> ts;
  for (int i = 0; i < kReaders; ++i)
    ts.emplace_back([&] {
      std::shared_lock<std::shared_mutex> r(rw);
      std::unique_lock<std::mutex> l(m);
      ++inside;
      cv.notify_all();
      cv.wait(l, [&] { return inside >= kReaders; });  // all readers hold rw together
    });
  for (auto& t : ts) t.join();
  std::thread w([&] {
    std::unique_lock<std::shared_mutex> x(rw);
    std::lock_guard<std::mutex> l(m);
    writer_saw_reader = inside != kReaders;
  });
  w.join();
  check(!writer_saw_reader, "writer alone");
  std::printf("shared_mutex: %d readers together, then a writer alone\n", kReaders);
}

// std::async(launch::async) starts a thread; get() waits for it.
void async_sum() {
  std::vector<std::future<long>> fs;
  for (int i = 1; i <= 10; ++i)
    fs.push_back(std::async(std::launch::async, [i] {
      long s = 0;
      for (int k = 1; k <= i * 1000; ++k) s += k;
      return s;
    }));
  long total = 0;
  for (auto& f : fs) total += f.get();
  std::printf("async: %ld\n", total);
}

// 100 threads blocked in a std::shared_future's get() (libstdc++ waits on a
// futex there, not through pthreads; libloom-pthread defines the waiting
// member so that it parks the fibre) while another thread progresses and a
// promise set by a thread wakes them all; a timed wait on another future
// times out.
void futures() {
  constexpr int kWaiters = 100;
  std::promise<int> p;
  std::shared_future<int> f = p.get_future().share();
  std::atomic<int> started{0}, sum{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < kWaiters; ++i)
    ts.emplace_back([&] {
      started.fetch_add(1);
      sum.fetch_add(f.get());
    });
  while (started.load() < kWaiters) std::this_thread::yield();
  for (int i = 0; i < 1000; ++i) std::this_thread::yield();  // let them block in get()
  std::atomic<long> work{0};
  std::thread worker([&] {
    for (int i = 0; i < 100000; ++i) work.fetch_add(1, std::memory_order_relaxed);
  });
  worker.join();
  check(work.load() == 100000, "the worker finished while 100 threads waited on a future");
  std::thread setter([&] { p.set_value(2); });
  setter.join();
  for (auto& t : ts) t.join();
  check(sum.load() == 2 * kWaiters, "every waiter got the value");
  std::promise<int> never;
  std::future<int> g = never.get_future();
  auto t0 = std::chrono::steady_clock::now();
  check(g.wait_for(std::chrono::milliseconds(20)) == std::future_status::timeout, "wait_for times out");
  check(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(20), "not early");
  std::printf("futures: %d threads woken by one promise, a timed wait timed out\n", kWaiters);
}

// Ids: each thread's std::this_thread::get_id() is its std::thread's id,
// and no two threads alive together share one.
void ids() {
  constexpr int kThreads = 50;
  std::mutex m;
  std::set<std::thread::id> seen;
  std::vector<std::thread> ts;
  std::vector<std::thread::id> own(kThreads);
  std::condition_variable cv;
  int started = 0;
  for (int i = 0; i < kThreads; ++i)
    ts.emplace_back([&, i] {
      std::unique_lock<std::mutex> l(m);
      own[i] = std::this_thread::get_id();
      seen.insert(own[i]);
      ++started;
      cv.notify_all();
      cv.wait(l, [&] { return started == kThreads; });  // alive together
    });
  {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return started == kThreads; });
  }
  for (int i = 0; i < kThreads; ++i) {
    check(ts[i].get_id() == own[i], "get_id matches");
    ts[i].join();
  }
  for (int i = 0; i < kThreads; ++i) check(seen.count(own[i]) == 1, "own id seen");
  check(int(seen.size()) == kThreads, "ids distinct");
  check(seen.count(std::this_thread::get_id()) == 0, "main's id is its own");
  std::printf("%d distinct thread ids\n", kThreads);
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 1000;
  all_alive(n);
  progress_while_blocked();
  shared_mutex_readers();
  async_sum();
  futures();
  ids();
  return 0;
}
