// sched/stats.cpp — the statistics tables, at exit and on a signal.
//
// LOOM_STATS=1 prints every live cluster's table when the process exits.
// LOOM_STATS_SIGNAL=SIGUSR2 (a name, with or without SIG, or a number)
// prints them whenever that signal arrives: the handler only writes a byte
// to a pipe (async-signal-safe); a reporter kernel thread of the runtime's,
// blocked on the pipe, prints. Counters are read while everyone runs: a
// table is a moment's approximation, every counter only ever grows.
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/options.hpp"
#include "base/symbolize.hpp"
#include "base/sys.hpp"
#include "loom/cluster.hpp"
#include "sched/cluster.hpp"
#include "sched/monitor.hpp"
#include "sched/stats.hpp"

namespace loom {

namespace {

struct Row {
  const char* field;
  const char* description;
  std::uint64_t ClusterStats::*member;
};

constexpr Row kRows[] = {
#define LOOM_STATS_ROW(field, description) {#field, description, &ClusterStats::field},
    LOOM_STATS_FIELDS(LOOM_STATS_ROW)
#undef LOOM_STATS_ROW
};

// Processor columns printed at most; the total covers them all.
constexpr std::size_t kMaxColumns = 16;

void print_cluster(std::FILE* out, const rt::Cluster& c) {
  std::size_t n = c.size(), shown = n < kMaxColumns ? n : kMaxColumns;
  ClusterStats total = c.stats();
  ClusterStats per[kMaxColumns];
  for (std::size_t i = 0; i < shown; ++i) per[i] = c.processor_stats(i);
  std::fprintf(out, "loom: cluster %u, %zu processor%s, %ld live fibre%s\n", c.id(), n, n == 1 ? "" : "s",
               c.fibres.load(std::memory_order_relaxed), c.fibres.load(std::memory_order_relaxed) == 1 ? "" : "s");
  std::fprintf(out, "  %-16s %14s", "counter", "total");
  for (std::size_t i = 0; i < shown; ++i) {
    char label[16];
    std::snprintf(label, sizeof label, "p%zu", i);
    std::fprintf(out, " %14s", label);
  }
  std::fprintf(out, "%s\n", shown < n ? "  (first 16 processors)" : "");
  for (const Row& r : kRows) {
    std::fprintf(out, "  %-16s %14llu", r.field, (unsigned long long)(total.*r.member));
    for (std::size_t i = 0; i < shown; ++i) std::fprintf(out, " %14llu", (unsigned long long)(per[i].*r.member));
    std::fprintf(out, "   %s\n", r.description);
  }
  double per_wake = total.poller_wakeups ? double(total.poller_events) / double(total.poller_wakeups) : 0.0;
  std::fprintf(out, "  events per poller wake-up %.2f; stack bytes mapped now %llu KiB (process)\n", per_wake,
               (unsigned long long)(total.stack_bytes / 1024));
}

}  // namespace

// The fibre listing. Each list is walked under its lock (a fibre cannot
// exit, and its stack be reused, while it is described) into rows; the
// holders of the mutexes fibres wait on are then named from the rows, with
// no two list locks ever held at once.
namespace {

struct FibreRow {
  const rt::Fibre* fibre;
  void* tcb;
  std::uint64_t id;
  char name[32];
  char state[96];
  unsigned cluster;
  int proc;
  char size[24], used[24], high[24];
  // The holder of the mutex it waits on, as the mutex records it: a fibre
  // (rt::identity()) or a thread control block (a pthread mutex of the
  // normal kind: the holder's thread pointer). Matched against the rows.
  const void* holder = nullptr;
  bool holder_is_tcb = false;
  // The object it waits on, named when printed if a variable holds it
  // (after the walk: naming may read the program's symbol table).
  const void* object = nullptr;
  rt::WaitKind kind = rt::WaitKind::none;
  std::uint64_t joins = 0;  // blocked in a join: the fibre it joins
  char due[40] = "";        // a timed wait: ", due in N ms" or ", overdue N ms", printed last
};

// What the waited-on object says of its holder (see FibreRow::holder). The
// object is read as memory that may be gone (sys::peek, in the hooks): the
// fibre may have been woken since it was seen blocked, and the mutex
// destroyed and unmapped.
// The loom::io call a fibre waits in, by its name where the call knew it
// ("accept4_until" is accept4 with a deadline; a lambda's "operator()"
// says nothing: then read or write).
const char* call_name(const rt::Fibre& f, bool out, char* buf, std::size_t n) {
  const char* call = f.wait_call.load(std::memory_order_relaxed);
  if (!call || !std::strcmp(call, "operator()")) return out ? "write" : "read";
  std::snprintf(buf, n, "%s", call);
  if (char* u = std::strstr(buf, "_until")) *u = '\0';
  return buf;
}

void find_holder(rt::WaitKind k, const void* o, FibreRow& r) {
  if (!o) return;
  if (k == rt::WaitKind::mutex) {
    r.holder = rt::MutexHolder::of(*static_cast<const Mutex*>(o));
  } else if (k == rt::WaitKind::pthread_mutex) {
    if (rt::pthread_mutex_holder) r.holder = rt::pthread_mutex_holder(o, &r.holder_is_tcb);
  }
}

void describe_fibres(std::vector<FibreRow>& rows, rt::LiveFibres& list) {
  rt::SpinGuard g(list.lock);
  for (rt::Fibre* f = list.head; f; f = f->live_next) {
    FibreRow r{};
    r.fibre = f;
    r.tcb = f->tcb;
    r.id = f->id;
    std::snprintf(r.name, sizeof r.name, "%s", f->name ? f->name : "");
    rt::Cluster* c = f->cluster;
    rt::WaitKind k = f->wait_kind.load(std::memory_order_relaxed);
    const void* o = f->wait_object.load(std::memory_order_relaxed);
    // In a call on the offload cluster: listed at home, blocked in that call.
    rt::Cluster* home = f->offload_home.load(std::memory_order_relaxed);
    // Running: some processor of its cluster runs it now.
    int running_on = -1;
    rt::Processor* runner = nullptr;
    if (!home) {
      for (std::size_t i = 0, n = c->size(); i < n && !runner; ++i)
        if (c->processor(i)->running_id.load(std::memory_order_relaxed) == f->id) runner = c->processor(i);
      for (std::size_t i = 0, n = c->spare_count(); i < n && !runner; ++i)
        if (c->spare(i)->running_id.load(std::memory_order_relaxed) == f->id) runner = c->spare(i);
      if (runner && !runner->spare()) running_on = int(runner->index());
    }
    const char* tail = home ? ", offloaded" : "";
    if (runner) {
      // A processor the monitor found lost (sched/monitor.cpp): in which
      // call, from the kernel's record, or held without a scheduling point.
      // (What the monitor read when it found it lost: the listing may run
      // in a handler on that very thread, which is on a CPU then.)
      const char* where = runner->spare() ? " on a spare" : "";
      const bool lost = runner->lost.load(std::memory_order_relaxed);
      const long nr = runner->lost_call.load(std::memory_order_relaxed);
      char number[64];
      if (lost && nr >= 0)
        std::snprintf(r.state, sizeof r.state, "running%s, blocked in the kernel: %s", where,
                      rt::syscall_name(nr, number, sizeof number));
      else if (lost)
        std::snprintf(r.state, sizeof r.state, "running%s, no scheduling point for long", where);
      else
        std::snprintf(r.state, sizeof r.state, "running%s", where);
    } else if (k == rt::WaitKind::none) {
      std::snprintf(r.state, sizeof r.state, home ? "blocked: a call, offloaded" : "ready");
    } else if (k == rt::WaitKind::fd_in || k == rt::WaitKind::fd_out) {
      char named[32];
      std::snprintf(r.state, sizeof r.state, "blocked: fd %ld (%s)%s", long(reinterpret_cast<std::intptr_t>(o)),
                    call_name(*f, k == rt::WaitKind::fd_out, named, sizeof named), tail);
    } else if (k == rt::WaitKind::rest) {
      std::snprintf(r.state, sizeof r.state, "resting: fd %ld (no stack)", long(reinterpret_cast<std::intptr_t>(o)));
    } else if (k == rt::WaitKind::join) {
      r.kind = k;
      r.joins = std::uint64_t(reinterpret_cast<std::uintptr_t>(o));
      std::snprintf(r.state, sizeof r.state, "blocked: join fibre %llu%s",
                    (unsigned long long)reinterpret_cast<std::uintptr_t>(o), tail);
    } else if (k == rt::WaitKind::offload) {
      std::snprintf(r.state, sizeof r.state, "blocked: %s%s", o ? static_cast<const char*>(o) : "a call", tail);
    } else if (o && k != rt::WaitKind::sleep && k != rt::WaitKind::poll) {  // (their objects: for cancellation)
      int fd;
      bool out;
      if (k == rt::WaitKind::mutex && rt::fd_turn_of && rt::fd_turn_of(o, &fd, &out)) {
        char named[32];
        std::snprintf(r.state, sizeof r.state, "blocked: fd %d (%s), waiting its turn%s", fd,
                      call_name(*f, out, named, sizeof named), tail);
      } else {
        std::snprintf(r.state, sizeof r.state, "blocked: %s %p%s", rt::to_string(k), o, tail);
      }
      r.object = o;
      r.kind = k;
      find_holder(k, o, r);
    } else {
      std::snprintf(r.state, sizeof r.state, "blocked: %s%s", rt::to_string(k), tail);
    }
    // A timed wait: how long is left, or, past its deadline, how long
    // overdue (its timer waits on a processor that has not run it).
    if (Deadline d = f->wait_deadline.load(std::memory_order_relaxed);
        d != kForever && !runner && k != rt::WaitKind::none && k != rt::WaitKind::rest) {
      std::int64_t left = d - rt::now_ns();
      if (left >= 0)
        std::snprintf(r.due, sizeof r.due, ", due in %lld ms", (long long)(left / 1000000));
      else
        std::snprintf(r.due, sizeof r.due, ", overdue %lld ms", (long long)(-left / 1000000));
    }
    // (A steal or pop may move it. Acquire, as every store of it is a
    // release: it may name a spare the monitor made since, whose cluster
    // and index are read below — TSan, io_rest_review_test.)
    rt::Processor* aff = __atomic_load_n(&f->affinity, __ATOMIC_ACQUIRE);
    if (home) {
      r.cluster = home->id();
      r.proc = f->offload_proc.load(std::memory_order_relaxed);
    } else {
      r.cluster = c->id();
      r.proc = running_on >= 0 ? running_on : aff && &aff->cluster() == c ? int(aff->index()) : -1;
    }
    std::snprintf(r.size, sizeof r.size, "-");
    std::snprintf(r.used, sizeof r.used, "-");
    std::snprintf(r.high, sizeof r.high, "-");
    // (A resting fibre has no stack, and is given one as it runs again:
    // the base is stored after the context, release.)
    if (rt::Stack s = f->stack.loaded()) {
      std::snprintf(r.size, sizeof r.size, "%zuK", s.size / 1024);
      auto sp = reinterpret_cast<const char*>(__atomic_load_n(&f->ctx.fctx, __ATOMIC_RELAXED));
      if (!runner && !home && sp > s.lo() && sp <= s.hi())
        std::snprintf(r.used, sizeof r.used, "%.1fK", double(s.hi() - sp) / 1024);
      if (std::size_t h = rt::stack_high_water(*f)) std::snprintf(r.high, sizeof r.high, "%.1fK", double(h) / 1024);
    }
    rows.push_back(r);
  }
}

}  // namespace

ClusterStats stats() { return Cluster::current().stats(); }

namespace {

void collect_rows(std::vector<FibreRow>& rows) {
  std::size_t expect = 64;  // room enough that the walk, under list locks, seldom allocates
  for (rt::Cluster* c = rt::Cluster::first(); c; c = c->next_made())
    if (long n = c->fibres.load(std::memory_order_relaxed); n > 0) expect += std::size_t(n);
  rows.reserve(expect);
  for (rt::Cluster* c = rt::Cluster::first(); c; c = c->next_made()) {
    describe_fibres(rows, c->live_foreign);
    for (std::size_t i = 0, n = c->size(); i < n; ++i) describe_fibres(rows, c->processor(i)->live);
    for (std::size_t i = 0, n = c->spare_count(); i < n; ++i) describe_fibres(rows, c->spare(i)->live);
  }
}

// The wait-for graph: for each row, the row of the fibre it waits for (a
// mutex's holder, a joined fibre), or -1. Each fibre waits for at most one,
// so a cycle is found by walking from each row until a row is seen again.
// (A rwlock's readers are not recorded, nor a condvar's signaller: waits
// on those are never part of a cycle found here.)
std::vector<std::vector<int>> wait_cycles(const std::vector<FibreRow>& rows) {
  std::unordered_map<const void*, int> by_fibre, by_tcb;
  std::unordered_map<std::uint64_t, int> by_id;
  for (int i = 0; i < int(rows.size()); ++i) {
    by_fibre[rows[std::size_t(i)].fibre] = i;
    if (rows[std::size_t(i)].tcb) by_tcb[rows[std::size_t(i)].tcb] = i;
    by_id[rows[std::size_t(i)].id] = i;
  }
  std::vector<int> next(rows.size(), -1);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const FibreRow& r = rows[i];
    if (r.holder) {
      auto& index = r.holder_is_tcb ? by_tcb : by_fibre;
      if (auto it = index.find(r.holder); it != index.end()) next[i] = it->second;
    } else if (r.joins) {
      if (auto it = by_id.find(r.joins); it != by_id.end()) next[i] = it->second;
    }
  }
  std::vector<std::vector<int>> cycles;
  std::vector<int> seen(rows.size(), 0);  // 0 not yet, else the walk (1-based) that saw it
  for (int start = 0; start < int(rows.size()); ++start) {
    int at = start;
    while (at >= 0 && !seen[std::size_t(at)]) {
      seen[std::size_t(at)] = start + 1;
      at = next[std::size_t(at)];
    }
    if (at < 0 || seen[std::size_t(at)] != start + 1) continue;  // ends, or joins an earlier walk
    std::vector<int> cycle{at};
    for (int k = next[std::size_t(at)]; k != at; k = next[std::size_t(k)]) cycle.push_back(k);
    cycles.push_back(std::move(cycle));
  }
  return cycles;
}

// "fibre 4 "left" waits for mutex 0x... (a) held by fibre 5 "right", which
// waits for ... held by fibre 4 "left"".
void print_cycle(std::FILE* out, const std::vector<FibreRow>& rows, const std::vector<int>& cycle) {
  std::fprintf(out, "loom: deadlock:");
  for (std::size_t j = 0; j < cycle.size(); ++j) {
    const FibreRow& r = rows[std::size_t(cycle[j])];
    const FibreRow& h = rows[std::size_t(cycle[(j + 1) % cycle.size()])];
    if (j)
      std::fprintf(out, ", which waits for ");
    else
      std::fprintf(out, " fibre %llu%s%s%s waits for ", (unsigned long long)r.id, *r.name ? " \"" : "", r.name,
                   *r.name ? "\"" : "");
    if (r.joins) {
      std::fprintf(out, "fibre %llu to end", (unsigned long long)h.id);
      continue;
    }
    char variable[96];
    bool named = r.object && rt::name_variable(r.object, variable, sizeof variable);
    std::fprintf(out, "%s %p%s%s%s held by fibre %llu%s%s%s", rt::to_string(r.kind), r.object, named ? " (" : "",
                 named ? variable : "", named ? ")" : "", (unsigned long long)h.id, *h.name ? " \"" : "", h.name,
                 *h.name ? "\"" : "");
  }
  std::fprintf(out, "\n");
}

}  // namespace

void dump_fibres(std::FILE* out) {
  if (!out) out = stderr;
  std::vector<FibreRow> rows;
  collect_rows(rows);
  std::fprintf(out, "loom: live fibres\n  %-8s %-20s %-60s %7s %4s %7s %7s %7s\n", "id", "name", "state", "cluster",
               "proc", "stack", "used", "deepest");
  for (FibreRow& r : rows) {
    char state[192];
    std::snprintf(state, sizeof state, "%s", r.state);
    char variable[96];
    if (r.object && rt::name_variable(r.object, variable, sizeof variable)) {
      char at[32];
      std::snprintf(at, sizeof at, "%p", r.object);
      if (char* p = std::strstr(state, at)) {
        std::size_t off = std::size_t(p - state) + std::strlen(at);
        std::snprintf(state + off, sizeof state - off, " (%s)%s", variable, r.state + off);
      }
    }
    if (r.holder) {
      for (const FibreRow& h : rows) {
        if (r.holder_is_tcb ? h.tcb != r.holder : h.fibre != r.holder) continue;
        std::size_t n = std::strlen(state);
        std::snprintf(state + n, sizeof state - n, " held by fibre %llu%s%s%s", (unsigned long long)h.id,
                      *h.name ? " \"" : "", h.name, *h.name ? "\"" : "");
        break;
      }
    }
    if (*r.due) {
      std::size_t n = std::strlen(state);
      std::snprintf(state + n, sizeof state - n, "%s", r.due);
    }
    std::fprintf(out, "  %-8llu %-20.20s %-60s %7u %4d %7s %7s %7s\n", (unsigned long long)r.id, r.name, state,
                 r.cluster, r.proc, r.size, r.used, r.high);
  }
  std::size_t count = rows.size();
  std::fprintf(out, "loom: %zu live fibre%s%s\n", count, count == 1 ? "" : "s",
               rt::stack_watermark ? "" : " (deepest: with LOOM_STACK_WATERMARK=1)");
  for (const std::vector<int>& cycle : wait_cycles(rows)) print_cycle(out, rows, cycle);
  std::fflush(out);
}

namespace rt {

// The watchdog's look for deadlocks (sched/stall.cpp, with LOOM_STALL_MS):
// a cycle is reported once it has been seen, the same fibres waiting on the
// same objects, in every look for `hold_ns` (the walk is no atomic snapshot:
// a holder read just as it let go could close a cycle for one look), and
// not again while it lasts.
void report_deadlocks(std::int64_t now, std::int64_t hold_ns) {
  static std::unordered_map<std::uint64_t, std::int64_t>* seen = new std::unordered_map<std::uint64_t, std::int64_t>;
  static std::unordered_set<std::uint64_t>* told = new std::unordered_set<std::uint64_t>;
  std::vector<FibreRow> rows;
  collect_rows(rows);
  std::unordered_map<std::uint64_t, std::int64_t> still;
  std::unordered_set<std::uint64_t> still_told;
  for (std::vector<int>& cycle : wait_cycles(rows)) {
    std::vector<std::pair<std::uint64_t, std::uintptr_t>> parts;
    for (int i : cycle)
      parts.emplace_back(rows[std::size_t(i)].id, reinterpret_cast<std::uintptr_t>(rows[std::size_t(i)].object) ^
                                                      rows[std::size_t(i)].joins);
    std::sort(parts.begin(), parts.end());
    std::uint64_t sig = 1469598103934665603ull;
    for (auto& [id, o] : parts) sig = (sig ^ id) * 1099511628211ull, sig = (sig ^ o) * 1099511628211ull;
    auto it = seen->find(sig);
    std::int64_t since = it == seen->end() ? now : it->second;
    still[sig] = since;
    if (told->count(sig)) {
      still_told.insert(sig);
    } else if (now - since >= hold_ns) {
      print_cycle(stderr, rows, cycle);
      std::fflush(stderr);
      still_told.insert(sig);
    }
  }
  seen->swap(still);
  told->swap(still_told);
}

}  // namespace rt

void print_stats(std::FILE* out) {
  if (!out) out = stderr;
  for (rt::Cluster* c = rt::Cluster::first(); c; c = c->next_made())
    if (c->facade) print_cluster(out, *c);  // destroyed ones have no facade
  std::fflush(out);
}

}  // namespace loom

namespace loom::rt {

namespace {

int report_pipe[2] = {-1, -1};
int stats_signal = 0, dump_signal = 0;

void on_report_signal(int sig) {
  int saved = errno;
  char b = sig == stats_signal ? 's' : 'd';
  (void)!sys::write(report_pipe[1], &b, 1);
  errno = saved;
}

void* reporter_main(void*) {
  for (;;) {
    char buf[64];
    ssize_t r = sys::read(report_pipe[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return nullptr;
    for (ssize_t i = 0; i < r; ++i) {
      // A program out of memory (RLIMIT_AS) is one a listing is asked of:
      // it says so, and the program goes on (it was killed by bad_alloc).
      try {
        if (buf[i] == 's') print_stats(stderr);
        if (buf[i] == 'd') dump_fibres(stderr);
      } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "loom: no memory for the %s; try again later\n", buf[i] == 's' ? "stats" : "listing");
      }
    }
  }
}

void print_at_exit() { print_stats(stderr); }

}  // namespace

bool start_runtime_thread(const char* name, void* (*fn)(void*)) {
  // Started with every signal blocked (a thread inherits its creator's
  // mask): the program's signals go to the program's threads.
  sigset_t all, old;
  sigfillset(&all);
  (sys::pthread().sigmask)(SIG_SETMASK, &all, &old);
  pthread_t t;
  bool ok = sys::create_thread(&t, fn, nullptr) == 0;
  (sys::pthread().sigmask)(SIG_SETMASK, &old, nullptr);
  if (!ok) return false;
  sys::pthread().setname_np(t, name);
  sys::pthread().detach(t);
  return true;
}

bool stack_watermark = false;

void stats_boot() {
  stack_watermark = env_bool("LOOM_STACK_WATERMARK", false);
  if (env_bool("LOOM_STATS", false)) std::atexit(&print_at_exit);
  stats_signal = env_signal("LOOM_STATS_SIGNAL", "none");
  dump_signal = env_signal("LOOM_DUMP_SIGNAL", "none");
  if (!stats_signal && !dump_signal) return;
  // Blocking at both ends: the reporter drains it at once, and a handler
  // would block only behind 64 KiB of undelivered signals.
  if (sys::pipe2(report_pipe, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "loom: LOOM_STATS_SIGNAL/LOOM_DUMP_SIGNAL: pipe2 failed (errno %d); ignored\n", errno);
    return;
  }
  if (!start_runtime_thread("loom-report", &reporter_main)) {
    std::fprintf(stderr, "loom: LOOM_STATS_SIGNAL/LOOM_DUMP_SIGNAL: cannot start the reporter thread; ignored\n");
    return;
  }
  struct sigaction sa {};
  sa.sa_handler = &on_report_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (stats_signal) sigaction(stats_signal, &sa, nullptr);
  if (dump_signal) sigaction(dump_signal, &sa, nullptr);
}

// ---- live fibres and stack watermarks ---------------------------------------------

const char* to_string(WaitKind k) noexcept {
  switch (k) {
    case WaitKind::none: return "nothing";
    case WaitKind::mutex: return "mutex";
    case WaitKind::condvar: return "condvar";
    case WaitKind::semaphore: return "semaphore";
    case WaitKind::rwlock_read: return "rwlock (read)";
    case WaitKind::rwlock_write: return "rwlock (write)";
    case WaitKind::barrier: return "barrier";
    case WaitKind::sleep: return "sleep";
    case WaitKind::join: return "join";
    case WaitKind::fd_in: return "fd (read)";
    case WaitKind::fd_out: return "fd (write)";
    case WaitKind::poll: return "poll";
    case WaitKind::pthread: return "pthread object";
    case WaitKind::pthread_mutex: return "mutex";
    case WaitKind::futex: return "futex word";
    case WaitKind::offload: return "offloaded call";
    case WaitKind::color: return "its color";
    case WaitKind::runtime: return "runtime work";
    case WaitKind::rest: return "resting";
    case WaitKind::channel: return "channel";
  }
  return "?";
}

void live_add(Fibre* f) noexcept {
  Processor* p = this_processor();
  LiveFibres* l = p ? &p->live : &f->cluster->live_foreign;
  SpinGuard g(l->lock);
  f->live_in = l;
  f->live_prev = nullptr;
  f->live_next = l->head;
  if (l->head) l->head->live_prev = f;
  l->head = f;
}

void live_remove(Fibre* f) noexcept {
  LiveFibres* l = f->live_in;
  if (!l) return;
  SpinGuard g(l->lock);
  if (f->live_prev)
    f->live_prev->live_next = f->live_next;
  else
    l->head = f->live_next;
  if (f->live_next) f->live_next->live_prev = f->live_prev;
  f->live_in = nullptr;
}

namespace {
constexpr unsigned char kPaint = 0xa5;
}  // namespace

// From the stack's low end up to the fibre's first frame (the control block
// and payload at the top are not stack).
void stack_paint(Fibre& f) noexcept {
  if (!f.stack) return;
  auto top = reinterpret_cast<char*>(f.ctx.fctx);
  if (top <= f.stack.lo() || top > f.stack.hi()) return;
  std::memset(f.stack.lo(), kPaint, std::size_t(top - f.stack.lo()) - 256);
}

std::size_t stack_high_water(const Fibre& f) noexcept {
  if (!stack_watermark || !f.stack) return 0;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(f.stack.lo());
  const unsigned char* hi = reinterpret_cast<const unsigned char*>(f.stack.hi());
  while (p < hi && *p == kPaint) ++p;
  return std::size_t(hi - p);
}

void report_high_water(const Fibre& f) noexcept {
  std::size_t h = stack_high_water(f);
  if (!h) return;
  std::fprintf(stderr, "loom: fibre %llu%s%s%s used %.1f KiB of its %zu KiB stack (deepest point)\n",
               (unsigned long long)f.id, f.name ? " \"" : "", f.name ? f.name : "", f.name ? "\"" : "",
               double(h) / 1024, f.stack.size / 1024);
}

}  // namespace loom::rt
