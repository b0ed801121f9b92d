// A small program process_test runs as a child, to check what only a whole
// process can show: start-up, exit, environment, fatal diagnostics.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>
#include <sys/socket.h>
#include <unistd.h>
#include "loom/io.hpp"
#include <cstring>
#include <mutex>
#include <vector>

#include "loom/loom.hpp"

// The stall detector's subjects: each runs about 600 ms. A C++ name in a
// namespace, and the program exports no symbols: the report demangles it
// from the program's own symbol table.
namespace subjects {
__attribute__((noinline)) void spin_without_yielding(int) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
  while (std::chrono::steady_clock::now() < end) asm volatile("" ::: "memory");
}
}  // namespace subjects

namespace {
void recurse(int depth) {
  volatile char pad[512];
  pad[0] = char(depth);
  if (depth < 1 << 30) recurse(depth + 1);
  asm volatile("" ::"r"(pad) : "memory");
}
extern "C" __attribute__((noinline)) void block_in_named_function(loom::Mutex& m) {
  m.lock();
  m.unlock();
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
}

int stall_probe(const char* how) {
  loom::FibreAttr a;
  a.name = "subject";
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
  if (!std::strcmp(how, "spin")) {
    loom::Fibre(a, [] { subjects::spin_without_yielding(1); }).join();
  } else if (!std::strcmp(how, "yield")) {
    loom::Fibre(a, [&] {
      while (std::chrono::steady_clock::now() < end) loom::this_fibre::yield();
    }).join();
  } else if (!std::strcmp(how, "io") || !std::strcmp(how, "syscall")) {
    // A fibre waits for a byte a kernel thread writes 600 ms later: through
    // loom (the fibre blocks, its processor runs on) or with the system's
    // read(2) (the processor's thread sits in the kernel).
    int sv[2];
    bool through_loom = !std::strcmp(how, "io");
    if ((through_loom ? loom::io::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) : ::socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) != 0)
      return 1;
    std::thread writer([&] {
      std::this_thread::sleep_until(end);
      (void)!::write(sv[1], "x", 1);
    });
    char b = 0;
    loom::Fibre(a, [&] {
      if (through_loom)
        (void)!loom::io::read(sv[0], &b, 1);
      else
        (void)!::read(sv[0], &b, 1);
    }).join();
    writer.join();
    if (b != 'x') return 1;
  } else {
    return 2;
  }
  std::printf("stall probe done\n");
  return 0;
}

// Frames of 512 bytes, `depth` deep.
__attribute__((noinline)) void recurse_to(int depth) {
  volatile char pad[512];
  pad[0] = char(depth);
  if (depth > 0) recurse_to(depth - 1);
  asm volatile("" ::"r"(pad) : "memory");
}

}  // namespace

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "";
  if (!std::strcmp(what, "processors")) {
    std::printf("%zu\n", loom::Cluster::default_cluster().processors());
    return 0;
  }
  if (!std::strcmp(what, "config")) {
    std::printf("%s mutex=%s\n", loom::Cluster::default_cluster().config().describe().c_str(),
                loom::to_string(loom::default_mutex_policy()));
    return 0;
  }
  if (!std::strcmp(what, "main-returns")) {
    // Fibres that never finish must not keep the process alive.
    for (int i = 0; i < 4; ++i)
      loom::Fibre([] {
        for (;;) loom::this_fibre::yield();
      }).detach();
    loom::this_fibre::yield();
    std::printf("main returns\n");
    return 7;
  }
  if (!std::strcmp(what, "work")) {
    // A little of everything, for valgrind: creation, yields, migration.
    loom::Cluster other(1);
    std::vector<loom::Fibre> v;
    for (int i = 0; i < 50; ++i)
      v.emplace_back([&other, i] {
        for (int r = 0; r < 10; ++r) loom::this_fibre::yield();
        if (i % 5 == 0) {
          loom::this_fibre::migrate(other);
          loom::this_fibre::migrate(loom::Cluster::default_cluster());
        }
      });
    v.clear();
    std::printf("work done\n");
    return 0;
  }
  if (!std::strcmp(what, "stall")) return stall_probe(argc > 2 ? argv[2] : "");
  if (!std::strcmp(what, "deadlock")) {
    // n fibres (2 or 3) in a ring: each holds its own mutex, then waits
    // (1.5 s at most) for the next one's. With "none", that many fibres
    // take two mutexes in one order for a second: contention, no cycle.
    bool ordered = argc > 3 && !std::strcmp(argv[3], "none");
    int n = std::max(2, std::min(argc > 2 ? std::atoi(argv[2]) : 2, ordered ? 16 : 3));
    static loom::Mutex ring[3];
    std::atomic<int> holding{0};
    std::vector<loom::Fibre> v;
    for (int i = 0; i < n; ++i) {
      loom::FibreAttr a;
      a.name = i == 0 ? "first" : i == 1 ? "second" : i == 2 ? "third" : "other";
      v.emplace_back(a, [&, i] {
        loom::Mutex& mine = ring[ordered ? 0 : i];
        loom::Mutex& next = ring[ordered ? 1 : (i + 1) % n];
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        for (int round = 0; round < 1 || (ordered && std::chrono::steady_clock::now() < end); ++round) {
          std::unique_lock<loom::Mutex> g(mine);
          if (ordered) loom::this_fibre::yield();
          if (!ordered) {
            holding.fetch_add(1);
            while (holding.load() < n) loom::this_fibre::yield();
          }
          if (next.try_lock_for(std::chrono::milliseconds(1500))) next.unlock();
        }
      });
    }
    v.clear();
    std::printf("deadlock probe done\n");
    return 0;
  }
  if (!std::strcmp(what, "gdb-subject")) {
    // For the gdb extension's test: a fibre blocked on a mutex that main
    // holds, inside a function with a known name; runs until killed (at
    // most 60 s).
    static loom::Mutex m;
    m.lock();
    loom::FibreAttr a;
    a.name = "blocker";
    loom::Fibre f(a, [] { block_in_named_function(m); });
    // And one in a call made on the offload cluster (listed at home).
    loom::FibreAttr o;
    o.name = "offloader";
    loom::Fibre off(o, [] { loom::offload([] { return ::sleep(60); }); });
    loom::this_fibre::sleep_for(std::chrono::milliseconds(50));
    std::printf("ready %d\n", int(getpid()));
    std::fflush(stdout);
    loom::this_fibre::sleep_for(std::chrono::seconds(60));
    m.unlock();
    f.join();
    off.join();
    return 0;
  }
  if (!std::strcmp(what, "watermark")) {
    // LOOM_STACK_WATERMARK=1: each reports its deepest use at exit.
    loom::FibreAttr a;
    a.name = "shallow";
    loom::Fibre([] { recurse_to(2); }).join();
    loom::Fibre(a, [] { recurse_to(2); }).join();
    a.name = "deep";
    loom::Fibre(a, [] { recurse_to(60); }).join();
    return 0;
  }
  if (!std::strcmp(what, "dump-signal")) {
    // LOOM_DUMP_SIGNAL=SIGUSR1: the listing, printed while a fibre sleeps.
    loom::FibreAttr a;
    a.name = "napper";
    loom::Fibre f(a, [] { loom::this_fibre::sleep_for(std::chrono::milliseconds(800)); });
    loom::this_fibre::sleep_for(std::chrono::milliseconds(50));
    std::raise(SIGUSR1);
    f.join();
    std::printf("dump done\n");
    return 0;
  }
  if (!std::strcmp(what, "stats")) {
    // Some switching to count; with "signal", the statistics signal raised
    // while running (LOOM_STATS_SIGNAL), then time for the reporter to print.
    std::vector<loom::Fibre> v;
    for (int i = 0; i < 20; ++i)
      v.emplace_back([] {
        for (int r = 0; r < 10; ++r) loom::this_fibre::yield();
      });
    v.clear();
    if (argc > 2 && !std::strcmp(argv[2], "signal")) {
      std::raise(SIGUSR2);
      loom::this_fibre::sleep_for(std::chrono::seconds(1));
    }
    std::printf("stats done\n");
    return 0;
  }
  if (!std::strcmp(what, "overflow")) {
    loom::FibreAttr a;
    a.name = "deep";
    a.stack_size = 16 * 1024;
    loom::Fibre f(a, [] { recurse(0); });
    f.join();
    return 0;
  }
  std::fprintf(stderr, "usage: loom_probe processors|config|work|main-returns|overflow\n");
  return 2;
}
