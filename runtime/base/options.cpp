#include "base/options.hpp"
#include "base/spinlock.hpp"

#include <sched.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace loom::rt {

namespace {
// Each variable is read once per cluster: say what is wrong with it once.
void complain(const char* name, const char* value, const char* expected, const std::string& using_) {
  static SpinLock lock;  // not std::mutex: see base/sys.hpp
  static std::set<std::string> told;
  SpinGuard g(lock);
  if (!told.insert(name).second) return;
  std::fprintf(stderr, "loom: %s=%s: expected %s; using %s\n", name, value, expected, using_.c_str());
}
}  // namespace

std::size_t env_size(const char* name, std::size_t fallback, std::size_t min, std::size_t max) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  errno = 0;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (errno || *end || v[0] == '-' || x < min || x > max) {
    std::string expected = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    complain(name, v, expected.c_str(), std::to_string(fallback));
    return fallback;
  }
  return std::size_t(x);
}

bool env_bool(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  for (const char* t : {"1", "on", "yes", "true"})
    if (!strcasecmp(v, t)) return true;
  for (const char* f : {"0", "off", "no", "false"})
    if (!strcasecmp(v, f)) return false;
  complain(name, v, "on or off", fallback ? "on" : "off");
  return fallback;
}

int env_choice(const char* name, std::initializer_list<const char*> choices, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  int i = 0;
  std::string list;
  for (const char* c : choices) {
    if (!std::strcmp(v, c)) return i;
    list += (i ? "|" : "");
    list += c;
    ++i;
  }
  complain(name, v, list.c_str(), choices.begin()[fallback]);
  return fallback;
}

namespace {
// cgroup v2: "max 100000" or "150000 100000"; v1: separate quota and period.
double cgroup_cpu_limit() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string quota, period;
  if (v2 >> quota >> period) {
    if (quota == "max") return 0;
    double q = std::atof(quota.c_str()), p = std::atof(period.c_str());
    return (q > 0 && p > 0) ? q / p : 0;
  }
  std::ifstream q1("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p1("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  long q = -1, p = 0;
  if (q1 >> q && p1 >> p && q > 0 && p > 0) return double(q) / double(p);
  return 0;
}
}  // namespace

std::size_t usable_cpus() {
  cpu_set_t set;
  std::size_t n = 1;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = std::size_t(CPU_COUNT(&set));
  double limit = cgroup_cpu_limit();
  if (limit > 0) {
    std::size_t l = std::size_t(limit + 0.999);  // a partial CPU still needs a thread
    if (l < n) n = l;
  }
  return n < 1 ? 1 : n;
}

}  // namespace loom::rt
