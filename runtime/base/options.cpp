#include "base/options.hpp"
#include "base/spinlock.hpp"

#include <sched.h>
#include <strings.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace loom::rt {

namespace {
// In the README's order: scheduling, I/O, colors, diagnostics, the pthread
// library. `values` and `fallback` are what a user types and sees.
constexpr EnvVar kVars[] = {
    {"LOOM_PROCESSORS", EnvKind::count, "N (1-256)", "usable CPUs", "processors of the default cluster"},
    {"LOOM_QUEUE", EnvKind::choice, "nemesis|locked|shared", "nemesis", "ready queue kind"},
    {"LOOM_PLACEMENT", EnvKind::choice, "push|share", "push", "where a woken fibre is queued"},
    {"LOOM_STEAL", EnvKind::flag, "on|off", "on", "idle processors steal ready fibres"},
    {"LOOM_STEAL_POLICY", EnvKind::choice, "longest-busy|random", "longest-busy", "which victim a thief tries first"},
    {"LOOM_STICKY", EnvKind::count, "N", "8", "switches on one processor before a fibre counts as sticky"},
    {"LOOM_SPIN_US", EnvKind::count, "MICROSECONDS", "20", "an idle processor looks for work this long before it sleeps (2+ processors)"},
    {"LOOM_SPIN", EnvKind::text, "0", "unset", "before LOOM_SPIN_US: only its 0 (no spin) is still taken"},
    {"LOOM_STEAL_FENCE", EnvKind::choice, "lock|membarrier", "lock", "how thieves exclude a queue's owner"},
    {"LOOM_STACK_SIZE", EnvKind::size, "BYTES (16K-1G)", "64K", "default fibre stack size"},
    {"LOOM_PIN", EnvKind::flag, "on|off", "off", "pin processor threads to their PUs"},
    {"LOOM_TOPOLOGY", EnvKind::text, "hwloc synthetic", "the machine", "e.g. \"pack:2 l3:2 core:4 pu:1\" instead of this machine"},
    {"LOOM_MUTEX", EnvKind::choice, "blocking|spin|baton|hybrid", "blocking", "default loom::Mutex policy"},
    {"LOOM_POLLER", EnvKind::choice, "idle|fibre|loop|loop-sleep|opportunistic|opportunistic-timeout", "idle",
     "who waits for I/O readiness"},
    {"LOOM_POLLER_SLEEP", EnvKind::count, "MICROSECONDS", "1000", "the loop-sleep and opportunistic-timeout pollers' sleep"},
    {"LOOM_IO", EnvKind::choice, "epoll|uring", "epoll", "I/O back end (uring falls back to epoll with a notice)"},
    {"LOOM_IO_RING_READ", EnvKind::flag, "on|off", "on", "io_uring: a drained stream's read goes to the ring"},
    {"LOOM_LAZY_REGISTER", EnvKind::flag, "on|off", "on", "register a descriptor with the poller at its first EAGAIN"},
    {"LOOM_YIELD_BEFORE_READ", EnvKind::flag, "on|off", "on", "yield once before a read that would wait"},
    {"LOOM_WAIT_FIRST", EnvKind::flag, "on|off", "on", "a new connection's first read waits for its bytes"},
    {"LOOM_OFFLOAD_PROCESSORS", EnvKind::count, "N (1-64)", "2", "processors of the offload cluster"},
    {"LOOM_SIGPIPE", EnvKind::choice, "ignore|keep", "ignore", "keep: leave SIGPIPE's default action"},
    {"LOOM_SIGNALS", EnvKind::choice, "main|any", "main",
     "native API: a signal sent to the process is taken by main's kernel thread (main: block it there to wait for it), or by any processor"},
    {"LOOM_COLOR_STEAL", EnvKind::text, "none|libasync-smp|mely[:...]", "mely", "how idle processors steal colors"},
    {"LOOM_COLOR_BATCH", EnvKind::count, "N", "10", "events of one color before the next"},
    {"LOOM_COLOR_PLACEMENT", EnvKind::choice, "hash|local", "hash", "where a new color's events go"},
    {"LOOM_HANDOFF_US", EnvKind::count, "0, 100-10000000 (MICROSECONDS)", "1000",
     "a processor blocked this long in a call loom did not see, with fibres waiting, gets a thief or a spare kernel thread; 0: off"},
    {"LOOM_SLICE_US", EnvKind::count, "MICROSECONDS (1-10000000)", "100000",
     "... and one a fibre runs this long without a scheduling point (not below LOOM_HANDOFF_US)"},
    {"LOOM_STALL_MS", EnvKind::count, "MILLISECONDS", "0 (off)", "report a fibre holding a processor this long"},
    {"LOOM_STALL_SIGNAL", EnvKind::signal, "SIGNAL", "SIGRTMIN+6", "signal that takes a stalled processor's stack"},
    {"LOOM_DUMP_SIGNAL", EnvKind::signal, "SIGNAL", "none", "signal that prints every fibre"},
    {"LOOM_STATS", EnvKind::flag, "on|off", "off", "print the counters at exit"},
    {"LOOM_STATS_SIGNAL", EnvKind::signal, "SIGNAL", "none", "signal that prints the counters"},
    {"LOOM_STACK_WATERMARK", EnvKind::flag, "on|off", "off", "measure each fibre's deepest stack use"},
    {"LOOM_VERBOSE", EnvKind::flag, "on|off", "off", "say which fallbacks the runtime took (topology, ...)"},
    {"LOOM_PTHREAD_STATS", EnvKind::flag, "on|off", "off", "libloom-pthread: print how many threads ran as fibres"},
    {"LOOM_HOOK_IO", EnvKind::flag, "on|off", "on", "libloom-pthread: glibc's I/O calls block fibres"},
    {"LOOM_TLS", EnvKind::flag, "on|off", "on", "libloom-pthread: each thread its own thread-locals (glibc 2.36)"},
    {"LOOM_TLS_LIST", EnvKind::flag, "on|off", "on",
     "libloom-pthread: each thread's block on glibc's list of threads (a module's static TLS set up in every thread)"},
    {"LOOM_CHAOS", EnvKind::text, "SEED|off", "the clock", "chaos build: the perturbation seed (make chaos)"},
    {"LOOM_CHAOS_RATE", EnvKind::count, "N", "4", "chaos build: one pass in N at a point is perturbed"},
    {"LOOM_CHAOS_ONLY", EnvKind::text, "POINT,...", "all points", "chaos build: perturb only these points"},
    {"LOOM_CHECK_WAIT_MS", EnvKind::count, "MILLISECONDS", "2000", "check builds: report a ready fibre waiting this long"},
};

// Each variable is read once per cluster: say what is wrong with it once.
SpinLock told_lock;  // not std::mutex: see base/sys.hpp
std::set<std::string>* told;

std::string with_unit(std::size_t bytes) {
  static const char* const units[] = {"", "K", "M", "G"};
  int u = 0;
  while (u < 3 && bytes && bytes % 1024 == 0) bytes /= 1024, ++u;
  return std::to_string(bytes) + units[u];
}
}  // namespace

const EnvVar* env_vars(std::size_t* count) {
  *count = sizeof kVars / sizeof kVars[0];
  return kVars;
}

const EnvVar* env_var(const char* name) {
  for (const EnvVar& v : kVars)
    if (!std::strcmp(v.name, name)) return &v;
  return nullptr;
}

std::string env_readme_row(const EnvVar& v) {
  auto cell = [](const char* s) {
    std::string out;
    for (; *s; ++s) out += *s == '|' ? std::string("\\|") : std::string(1, *s);
    return out;
  };
  return std::string("| `") + v.name + "` | " + cell(v.values) + " | " + cell(v.fallback) + " | " + cell(v.meaning) + " |";
}

void env_complain(const char* name, const char* value, const char* expected, const std::string& using_) {
  {
    SpinGuard g(told_lock);
    if (!told) told = new std::set<std::string>;  // never freed: read from exit handlers too
    if (!told->insert(name).second) return;
  }
  std::fprintf(stderr, "loom: %s=%s: expected %s; using %s\n", name, value, expected, using_.c_str());
}

bool parse_flag(const char* s, bool* out) {
  for (const char* t : {"1", "on", "yes", "true"})
    if (!strcasecmp(s, t)) return *out = true, true;
  for (const char* f : {"0", "off", "no", "false"})
    if (!strcasecmp(s, f)) return *out = false, true;
  return false;
}

bool parse_bytes(const char* s, std::size_t* out) {
  if (!std::isdigit(static_cast<unsigned char>(*s))) return false;  // no sign, no blank
  errno = 0;
  char* end = nullptr;
  unsigned long long x = std::strtoull(s, &end, 10);
  if (errno) return false;
  unsigned shift = 0;
  switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    default: return false;
  }
  if (*end && end[1] != '\0') return false;  // "64KB", "1M2"
  if (shift && x > (~0ull >> shift)) return false;
  *out = std::size_t(x << shift);
  return true;
}

// "SIGUSR2", "usr2", "12" or "SIGRTMIN+6"; 0 when it names no signal.
int parse_signal(const char* s) {
  if (!strncasecmp(s, "SIG", 3)) s += 3;
  if (!strncasecmp(s, "RTMIN+", 6)) {
    char* end = nullptr;
    long k = std::strtol(s + 6, &end, 10);
    return end != s + 6 && *end == '\0' && k >= 0 && SIGRTMIN + k <= SIGRTMAX ? int(SIGRTMIN + k) : 0;
  }
  char* end = nullptr;
  long n = std::strtol(s, &end, 10);
  if (*s && end && *end == '\0') return n > 0 && n < NSIG ? int(n) : 0;
  for (int i = 1; i < NSIG; ++i)
    if (const char* abbrev = sigabbrev_np(i); abbrev && !strcasecmp(abbrev, s)) return i;
  return 0;
}

std::size_t env_size(const char* name, std::size_t fallback, std::size_t min, std::size_t max) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  errno = 0;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (errno || *end || !std::isdigit(static_cast<unsigned char>(v[0])) || x < min || x > max) {
    std::string expected = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    env_complain(name, v, expected.c_str(), std::to_string(fallback));
    return fallback;
  }
  return std::size_t(x);
}

std::size_t env_bytes(const char* name, std::size_t fallback, std::size_t min, std::size_t max) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  std::size_t x = 0;
  if (!parse_bytes(v, &x) || x < min || x > max) {
    std::string expected = "a size in bytes from " + with_unit(min) + " to " + with_unit(max) + " (K, M, G: powers of 1024)";
    env_complain(name, v, expected.c_str(), with_unit(fallback));
    return fallback;
  }
  return x;
}

bool env_bool(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  bool b = fallback;
  if (parse_flag(v, &b)) return b;
  env_complain(name, v, "on or off (1/0, true/false, yes/no)", fallback ? "on" : "off");
  return fallback;
}

int env_choice(const char* name, std::initializer_list<const char*> choices, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  int i = 0;
  std::string list;
  for (const char* c : choices) {
    if (!strcasecmp(v, c)) return i;
    list += (i ? "|" : "");
    list += c;
    ++i;
  }
  env_complain(name, v, list.c_str(), choices.begin()[fallback]);
  return fallback;
}

int env_signal(const char* name, const char* otherwise) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  int sig = parse_signal(v);
  if (sig == 0 || sig == SIGKILL || sig == SIGSTOP || sig == SIGSEGV || sig == SIGBUS) {
    env_complain(name, v, "a signal loom can catch (e.g. SIGUSR2)", otherwise);
    return 0;
  }
  return sig;
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
