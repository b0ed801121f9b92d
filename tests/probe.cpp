// A small program process_test runs as a child, to check what only a whole
// process can show: start-up, exit, environment, fatal diagnostics.
#include <cstdio>
#include <cstring>
#include <vector>

#include "loom/loom.hpp"

namespace {
void recurse(int depth) {
  volatile char pad[512];
  pad[0] = char(depth);
  if (depth < 1 << 30) recurse(depth + 1);
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
