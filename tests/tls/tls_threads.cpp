// tls_threads — thread-locals as glibc gives them, checked by a plain
// g++ -pthread program that knows nothing of loom. Its output is the same on
// glibc and on libloom-pthread (preload and link) only if every thread has
// thread-locals of its own that stay with it across switches and moves
// between kernel threads. Each section prints what it found; a wrong answer
// changes the output (tests/tls/CMakeLists.txt compares it with glibc's).
//
//   fresh      each new thread sees the initial values of __thread,
//              thread_local and _Thread_local-style data, never what a
//              finished thread left (Rust's std asserts exactly this)
//   moves      a thread's data and its address survive blocking and yielding
//              while 8 threads contend on 2 processors
//   errno      errno set by a failing libc call survives the thread blocking
//              while others set other values
//   dtors      thread_local destructors run at exit, before POSIX key
//              destructors, on the exiting thread's own data
//   locale     uselocale in one thread changes nothing in the others
//   dlopen     a module with dynamic TLS loaded after threads exist: each
//              thread its own copy, initialised from the module's image
//   many N     N threads alive at once, each with its own thread_local
//              (and the process's resident memory per thread on stderr)
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

__thread int plain_tls = 7;
thread_local std::string named_tls = "initial";
thread_local std::vector<int> grown;

std::mutex out_lock;
std::vector<std::string> log_lines;

void note(const std::string& s) {
  std::lock_guard<std::mutex> g(out_lock);
  log_lines.push_back(s);
}

void flush(const char* section) {
  std::sort(log_lines.begin(), log_lines.end());
  printf("%s:", section);
  for (auto& s : log_lines) printf(" %s", s.c_str());
  printf("\n");
  log_lines.clear();
}

// ---- fresh ------------------------------------------------------------------------

void fresh() {
  int bad = 0;
  for (int i = 0; i < 50; ++i) {
    std::thread t([&bad] {
      if (plain_tls != 7 || named_tls != "initial" || !grown.empty()) ++bad;
      plain_tls = 99;
      named_tls = "dirty";
      grown.assign(100, 1);
    });
    t.join();
  }
  printf("fresh: %d of 50 threads saw a finished thread's data\n", bad);
}

// ---- moves and errno ----------------------------------------------------------------

std::mutex contended;

void moves() {
  std::vector<std::thread> ts;
  std::atomic<int> bad_value{0}, bad_address{0}, bad_errno{0};
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] {
      plain_tls = 1000 + i;
      named_tls = "thread " + std::to_string(i);
      int* where = &plain_tls;
      for (int round = 0; round < 200; ++round) {
        // A failing call whose errno differs by thread, then a switch.
        if (i % 2 == 0)
          close(-1);  // EBADF
        else
          open("/nonexistent/loom", O_RDONLY);  // ENOENT
        int want = i % 2 == 0 ? EBADF : ENOENT;
        {
          std::lock_guard<std::mutex> g(contended);
          if (round % 7 == 0) usleep(50);
        }
        sched_yield();
        if (errno != want) ++bad_errno;
        if (plain_tls != 1000 + i || named_tls != "thread " + std::to_string(i)) ++bad_value;
        if (&plain_tls != where) ++bad_address;
      }
    });
  for (auto& t : ts) t.join();
  printf("moves: %d wrong values, %d moved addresses\n", bad_value.load(), bad_address.load());
  printf("errno: %d wrong after a switch\n", bad_errno.load());
}

// ---- destructors --------------------------------------------------------------------

pthread_key_t key;

struct Tracked {
  int id = -1;
  ~Tracked() {
    if (id >= 0) note("tls_dtor" + std::to_string(id) + (pthread_getspecific(key) ? "+key" : "-key"));
  }
};
thread_local Tracked tracked;

void key_dtor(void* v) { note("key_dtor" + std::to_string(reinterpret_cast<std::intptr_t>(v) - 1)); }

void dtors() {
  pthread_key_create(&key, key_dtor);
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([i] {
      tracked.id = i;
      pthread_setspecific(key, reinterpret_cast<void*>(std::intptr_t(i) + 1));
      sched_yield();
    });
  for (auto& t : ts) t.join();
  // glibc: the thread_local destructor first (the key's value still set),
  // then the key's destructor.
  flush("dtors");
  pthread_key_delete(key);
}

// ---- locale ----------------------------------------------------------------------

void locale() {
  locale_t c = newlocale(LC_ALL_MASK, "C", nullptr);
  std::atomic<int> seen_other{0};
  std::thread a([&] {
    uselocale(c);
    for (int i = 0; i < 100; ++i) {
      sched_yield();
      if (uselocale(nullptr) != c) ++seen_other;
    }
  });
  std::thread b([&] {
    for (int i = 0; i < 100; ++i) {
      sched_yield();
      if (uselocale(nullptr) != LC_GLOBAL_LOCALE) ++seen_other;
    }
  });
  a.join();
  b.join();
  freelocale(c);
  printf("locale: %d threads saw another's locale\n", seen_other.load());
}

// ---- dlopen -------------------------------------------------------------------------

void dlopen_module(const char* path) {
  std::mutex m;
  std::condition_variable cv;
  bool loaded = false;
  int (*get)() = nullptr;
  void (*set)(int) = nullptr;
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 6; ++i)
    ts.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> l(m);
        cv.wait(l, [&] { return loaded; });
      }
      if (get() != 42) ++bad;  // the module's image
      set(i);
      for (int r = 0; r < 50; ++r) {
        sched_yield();
        if (get() != i) ++bad;
      }
    });
  void* h = dlopen(path, RTLD_NOW);
  if (!h) {
    printf("dlopen: %s\n", dlerror());
    exit(1);
  }
  get = reinterpret_cast<int (*)()>(dlsym(h, "tls_module_get"));
  set = reinterpret_cast<void (*)(int)>(dlsym(h, "tls_module_set"));
  {
    std::lock_guard<std::mutex> g(m);
    loaded = true;
  }
  cv.notify_all();
  for (auto& t : ts) t.join();
  printf("dlopen: %d wrong values of a module's thread-local\n", bad.load());
}

// ---- many -------------------------------------------------------------------------

long resident_kib() {
  FILE* f = fopen("/proc/self/statm", "r");
  long size = 0, res = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &size, &res) != 2) res = 0;
    fclose(f);
  }
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

thread_local int many_id = -1;

void many(int n) {
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  bool go = false;
  std::atomic<int> bad{0};
  long before = resident_kib();
  std::vector<std::thread> ts;
  ts.reserve(n);
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&, i] {
      many_id = i;
      std::unique_lock<std::mutex> l(m);
      ++arrived;
      cv.notify_all();
      cv.wait(l, [&] { return go; });
      if (many_id != i) ++bad;
    });
  {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return arrived == n; });
    long during = resident_kib();
    fprintf(stderr, "tls_threads: %d threads alive: %.1f KiB resident per thread\n", n,
            double(during - before) / n);
    go = true;
  }
  cv.notify_all();
  for (auto& t : ts) t.join();
  printf("many: %d threads, %d saw another's thread_local\n", n, bad.load());
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string what = argc > 1 ? argv[1] : "all";
  if (what == "all" || what == "fresh") fresh();
  if (what == "all" || what == "moves") moves();
  if (what == "all" || what == "dtors") dtors();
  if (what == "all" || what == "locale") locale();
  if ((what == "all" || what == "dlopen") && argc > 2) dlopen_module(argv[2]);
  if (what == "many") many(argc > 2 ? atoi(argv[2]) : 10000);
  return 0;
}
