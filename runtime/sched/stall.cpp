// sched/stall.cpp — the stall detector (SchedConfig::stall_ms, LOOM_STALL_MS).
//
// A fibre that runs on without a scheduling point holds its processor: the
// other fibres queued there wait, silently. The monitor's kernel thread
// (sched/monitor.cpp) looks at every processor of the clusters that ask for
// it, four times per threshold: a processor whose switch and yield counters have not
// moved for the threshold while a fibre (not the idle loop) runs is stalled. Once per
// stall, it reports on stderr the fibre's id and name, the processor, how
// long, and either
//   - the fibre's backtrace, when the thread is on a CPU: taken on the
//     processor itself, by a signal (SIGRTMIN+6 by default,
//     LOOM_STALL_SIGNAL) whose handler only unwinds (backtrace(3), loaded
//     before the first signal) into the processor's probe; or
//   - the system call it sits in, when the thread is blocked in the kernel
//     (/proc/self/task/TID/syscall): a plain blocking call that loom's I/O
//     did not see. Such a thread is never signalled (the call could fail
//     with EINTR).
// At most 10 reports per second; the rest are counted and the count is
// printed with the next report. Every quarter threshold it also walks the
// live fibres for a wait-for cycle (mutex holders, joins: stats.cpp's
// report_deadlocks) and prints each cycle that has lasted the threshold,
// once.
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "base/options.hpp"
#include "base/spinlock.hpp"
#include "base/symbolize.hpp"
#include "base/sys.hpp"
#include "sched/cluster.hpp"
#include "sched/monitor.hpp"
#include "sched/processor.hpp"
#include "sched/stats.hpp"

namespace loom::rt {

struct StallProbe {
  static constexpr int kFrames = 48;
  std::atomic<int> state{0};  // 0 nothing asked, 1 asked, 2 answered
  std::uint64_t id = 0;       // the fibre the handler found running
  int frames = 0;
  void* frame[kFrames];
};

namespace {

int stall_signal = 0;

void on_stall_signal(int) {
  int saved = errno;
  Processor* p = this_processor_at_entry();
  StallProbe* s = p ? p->stall_probe.load(std::memory_order_acquire) : nullptr;
  if (s && s->state.load(std::memory_order_acquire) == 1) {
    s->id = p->running_id.load(std::memory_order_relaxed);
    s->frames = backtrace(s->frame, StallProbe::kFrames);
    s->state.store(2, std::memory_order_release);
  }
  errno = saved;
}

struct Watch {
  std::uint64_t switches = ~0ull;
  std::uint64_t id = 0;
  std::int64_t since = 0;
  bool reported = false;
};

}  // namespace

namespace {

// A processor's kernel thread's /proc files, opened once and kept (the
// monitor reads them at many of its looks). An open takes the lowest free
// number: opened at each look, they took for a moment the number a
// program's close then open (or socketpair) expected to get back (issue
// 35's close_reuse saw it). Kept, and moved up to half the descriptor
// limit, out of the program's way; opened again if the thread is gone or
// the program closed them (closefrom). The runtime's own calls: raw system
// calls, never the preload's names.
struct ProcFiles {
  pid_t tid = 0;
  int stat = -1;
  int syscall = -1;
};
constexpr std::size_t kProcFiles = 64;
ProcFiles proc_files[kProcFiles];
SpinLock proc_files_lock;

int open_kept(pid_t tid, const char* file) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/%s", int(tid), file);
  long fd = raw_syscall(SYS_openat, AT_FDCWD, long(path), O_RDONLY | O_CLOEXEC, 0, 0, 0);
  if (fd < 0) return -1;
  rlimit rl{};
  long floor = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? long(rl.rlim_cur / 2) : 512;
  if (fd < floor) {
    long high = sys::fcntl(int(fd), F_DUPFD_CLOEXEC, std::max(floor, 64L));
    if (high >= 0) {
      sys::close(int(fd));
      fd = high;
    }
  }
  return int(fd);
}

// Reads the file from its start into buf; its length, or -1.
long read_kept(int& fd, pid_t tid, const char* file, char* buf, std::size_t size) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (fd < 0) fd = open_kept(tid, file);
    if (fd < 0) return -1;
    long n = raw_syscall(SYS_pread64, fd, long(buf), long(size - 1), 0, 0, 0);
    if (n >= 0) return n;
    sys::close(fd);  // the thread gone (ESRCH), or the number closed under us
    fd = -1;
  }
  return -1;
}

}  // namespace

char thread_state(pid_t tid, long* syscall_nr) {
  char buf[512];
  *syscall_nr = -1;
  if (tid <= 0) return '?';
  SpinGuard g(proc_files_lock);
  ProcFiles* slot = nullptr;
  for (ProcFiles& f : proc_files)
    if (f.tid == tid || (!slot && f.tid == 0)) {
      slot = &f;
      if (f.tid == tid) break;
    }
  if (!slot) slot = &proc_files[std::size_t(tid) % kProcFiles];  // (more threads than slots: one is reopened)
  if (slot->tid != tid) {
    if (slot->stat >= 0) sys::close(slot->stat);
    if (slot->syscall >= 0) sys::close(slot->syscall);
    *slot = ProcFiles{tid, -1, -1};
  }
  long n = read_kept(slot->stat, tid, "stat", buf, sizeof buf);
  if (n < 0) return '?';
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');
  char state = close && close[1] == ' ' ? close[2] : '?';
  n = read_kept(slot->syscall, tid, "syscall", buf, sizeof buf);
  if (n > 0) {
    buf[n] = '\0';
    char* end = nullptr;
    long nr = std::strtol(buf, &end, 10);
    if (end != buf) *syscall_nr = nr;
  }
  return state;
}

#if defined(__x86_64__)
#include "sched/syscall_names_x86_64.inc"
#endif

const char* syscall_name(long nr, char* buf, std::size_t size) {
#if defined(__x86_64__)
  switch (nr) {
    case SYS_futex: return "futex (a kernel-level lock or condition variable)";
    case SYS_fcntl: return "fcntl (a record lock)";
    case SYS_rt_sigsuspend: return "rt_sigsuspend (sigsuspend: waiting for a signal)";
    case SYS_rt_sigtimedwait: return "rt_sigtimedwait (sigwait)";
    case SYS_wait4: return "wait4 (waitpid: waiting for a child)";
    case SYS_waitid: return "waitid (waiting for a child)";
    default: break;
  }
  if (nr >= 0 && std::size_t(nr) < sizeof kSyscallNames / sizeof kSyscallNames[0] && kSyscallNames[nr])
    return kSyscallNames[nr];
#endif
  std::snprintf(buf, size, "system call %ld (not in loom's table of names)", nr);
  return buf;
}

namespace {

// Calls that wait for another process or a signal (a shell or `timeout`
// waiting for its child): a processor's thread in one holds up only the
// fibres queued behind it, so it is a stall only when some are.
bool waits_for_others(long nr) {
#if defined(__x86_64__)
  return nr == SYS_wait4 || nr == SYS_waitid || nr == SYS_rt_sigsuspend || nr == SYS_pause;
#else
  (void)nr;
  return false;
#endif
}

class Watchdog {
 public:
  // One look at the clusters that ask for it; the period it wants (ns), or
  // 0 when none asks.
  std::int64_t tick(std::int64_t now) {
    unsigned period_ms = 0, threshold_ms = 0;
    for (Cluster* c = Cluster::first(); c; c = c->next_made()) {
      unsigned ms = c->alive() ? c->config().stall_ms : 0;
      if (!ms) continue;
      if (!period_ms || ms / 4 < period_ms) period_ms = ms / 4 ? ms / 4 : 1;
      if (!threshold_ms || ms < threshold_ms) threshold_ms = ms;
      for (std::size_t i = 0, n = c->size(); i < n; ++i) look(*c, *c->processor(i), ms, now);
      for (std::size_t i = 0, n = c->spare_count(); i < n; ++i) look(*c, *c->spare(i), ms, now);
    }
    // Deadlocks: a cycle of blocked fibres is reported once it has lasted
    // the threshold (every fibre of every cluster is walked: every quarter
    // threshold, and only while some cluster asks for the detector).
    if (threshold_ms && now - last_cycle_look_ >= std::int64_t(threshold_ms) * 250000) {
      last_cycle_look_ = now;
      report_deadlocks(now, std::int64_t(threshold_ms) * 1000000);
    }
    return std::int64_t(period_ms) * 1000000;
  }

 private:
  void look(Cluster& c, Processor& p, unsigned ms, std::int64_t now) {
    Watch& w = watch_[&p];
    // Scheduling points: switches, and yields (one that finds nobody else
    // ready returns without a switch).
    std::uint64_t sw = p.counters.get(Stat::switches) + p.counters.get(Stat::yields);
    std::uint64_t id = p.running_id.load(std::memory_order_relaxed);
    if (sw != w.switches || id != w.id || id == 0) {
      w = Watch{sw, id, now, false};
      return;
    }
    if (w.reported) return;
    if (waiting_alone(p)) {
      // Not counted, and looked at again next period (someone may queue
      // behind it): the time it waited is no fibre's hold, also when it
      // runs on after the wait without a scheduling point.
      w.since = now;
      return;
    }
    std::int64_t held_ms = (now - w.since) / 1000000;
    if (held_ms < std::int64_t(ms)) return;
    w.reported = true;
    if (!allow(now)) return;
    report(c, p, id, held_ms);
  }

  // The processor's thread waits in the kernel for a child or a signal and
  // no fibre is queued behind it: a process whose main() waits for what it
  // started (a shell, `timeout`), not a stall.
  bool waiting_alone(Processor& p) {
    long nr;
    char state = thread_state(p.tid.load(std::memory_order_relaxed), &nr);
    return state != 'R' && waits_for_others(nr) && !p.ready_queue().maybe_nonempty();
  }

  // At most 10 reports in any second.
  bool allow(std::int64_t now) {
    if (now - window_start_ >= 1000000000) {
      window_start_ = now;
      in_window_ = 0;
    }
    if (in_window_ >= 10) {
      ++suppressed_;
      return false;
    }
    ++in_window_;
    return true;
  }

  void report(Cluster& c, Processor& p, std::uint64_t id, std::int64_t held_ms) {
    const char* name = p.running_name.load(std::memory_order_relaxed);
    if (name && !*name) name = nullptr;  // a C thread not (yet) named
    long nr;
    char state = thread_state(p.tid.load(std::memory_order_relaxed), &nr);
    bool others = p.ready_queue().maybe_nonempty();
    char who[160];
    std::snprintf(who, sizeof who, "fibre %llu%s%s%s", (unsigned long long)id, name ? " \"" : "", name ? name : "",
                  name ? "\"" : "");
    if (suppressed_) {
      std::fprintf(stderr, "loom: stall: (%llu more reports were suppressed)\n", (unsigned long long)suppressed_);
      suppressed_ = 0;
    }
    if (state != 'R' && nr >= 0) {
      char number[64];
      const char* call = syscall_name(nr, number, sizeof number);
      std::fprintf(stderr,
                   "loom: stall: %s has blocked processor %u of cluster %u in the kernel for %lld ms: %s, a call "
                   "loom's I/O did not see%s\n",
                   who, p.index(), c.id(), (long long)held_ms, call,
                   others ? "; other fibres are ready on that processor" : "");
      return;
    }
    StallProbe* s = probe(p);
    s->state.store(1, std::memory_order_release);
    bool answered = false;
    if (::syscall(SYS_tgkill, getpid(), p.tid.load(std::memory_order_relaxed), stall_signal) == 0) {
      for (int i = 0; i < 500 && !answered; ++i) {
        answered = s->state.load(std::memory_order_acquire) == 2;
        if (!answered) {
          timespec ts{0, 1000000};
          sys::nanosleep(&ts, nullptr);
        }
      }
    }
    s->state.store(0, std::memory_order_release);
    if (answered && s->id != id) return;  // it moved on meanwhile
    std::fprintf(stderr,
                 "loom: stall: %s has held processor %u of cluster %u for %lld ms without a scheduling point%s%s\n",
                 who, p.index(), c.id(), (long long)held_ms, others ? "; other fibres are ready on that processor" : "",
                 answered ? "; its stack:" : " (no backtrace: the processor did not answer the signal)");
    std::fflush(stderr);
    // frame[0] is the handler, frame[1] the kernel's signal trampoline,
    // frame[2] where the fibre was interrupted.
    if (answered) print_frames(s->frame, std::min(2, s->frames), s->frames, true, STDERR_FILENO);
  }

  StallProbe* probe(Processor& p) {
    StallProbe* s = p.stall_probe.load(std::memory_order_acquire);
    if (!s) {
      s = new StallProbe;  // one per processor, for the process's life
      p.stall_probe.store(s, std::memory_order_release);
    }
    return s;
  }

  std::unordered_map<Processor*, Watch> watch_;
  std::int64_t window_start_ = 0;
  std::int64_t last_cycle_look_ = 0;
  unsigned in_window_ = 0;
  std::uint64_t suppressed_ = 0;
};

std::atomic<Watchdog*> watchdog{nullptr};  // made once, by stall_watch

}  // namespace

std::int64_t stall_tick(std::int64_t now) {
  Watchdog* w = watchdog.load(std::memory_order_acquire);
  return w ? w->tick(now) : 0;
}

void stall_watch() {
  static std::atomic<bool> started{false};
  if (started.exchange(true)) return;
  stall_signal = env_signal("LOOM_STALL_SIGNAL", "SIGRTMIN+6");
  if (!stall_signal) stall_signal = SIGRTMIN + 6;
  struct sigaction sa {};
  sa.sa_handler = &on_stall_signal;
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(stall_signal, &sa, nullptr);
  void* warm[2];
  backtrace(warm, 2);  // loads the unwinder now, not in the handler
  watchdog.store(new Watchdog, std::memory_order_release);
  monitor_start();
}

}  // namespace loom::rt
