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
#include <linux/close_range.h>
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

#include "base/futex.hpp"
#include "base/options.hpp"
#include "base/spinlock.hpp"
#include "base/symbolize.hpp"
#include "base/sys.hpp"
#include "io/fd_table.hpp"
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
// monitor reads them at many of its looks). They must take no number from
// the program's descriptor table: an open takes the lowest free number, so
// one made at a look took for a moment the number a program's close then
// open expected to get back (issue 35's close_reuse), and a file kept at a
// number below the descriptor limit took one that a server at its limit
// counted on: memcached -c 100 counts its connections against its limit,
// and met EMFILE mid-burst (its listener then stops accepting). So they are
// opened and read by a thread of their own, `loom-proc`, whose descriptor
// table is its own, empty at its start (close_range with
// CLOSE_RANGE_UNSHARE: none of the program's files is copied into it); the
// monitor asks it and waits for the answer (ProcReader). (The monitor's
// table cannot be its own: the spares it starts share their creator's.)
// Where that thread cannot be had (it failed to start, or a fork child,
// which has no monitor of its own either), the monitor opens the files
// itself, kept at the runtime's floor (io/fd_table.hpp, move_to_floor) or
// above and closed rather than kept below it. Either way a file is opened again if its thread is
// gone (or the program closed it: closefrom). The runtime's own calls: raw
// system calls, never the preload's names.
constexpr std::size_t kProcFiles = 64;

struct ProcFiles {
  pid_t tid = 0;
  int stat = -1;
  int syscall = -1;
};

// The files in loom-proc's table, and (without it) the monitor's in the
// program's: numbers of two tables, never mixed.
ProcFiles proc_files_own[kProcFiles];
ProcFiles proc_files_shared[kProcFiles];
SpinLock proc_files_lock;

// own_table: the calling thread's table is its own (loom-proc's), where any
// number will do.
int open_kept(pid_t tid, const char* file, bool own_table) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/%s", int(tid), file);
  long fd = raw_syscall(SYS_openat, AT_FDCWD, long(path), O_RDONLY | O_CLOEXEC, 0, 0, 0);
  if (fd < 0 || own_table) return int(fd < 0 ? -1 : fd);
  int high = move_to_floor(int(fd));
  if (high < 0) sys::close(int(fd));  // (kept below the floor, it would hold a number the program may count on)
  return high;
}

// Reads the file from its start into buf; its length, or -1.
long read_kept(int& fd, pid_t tid, const char* file, char* buf, std::size_t size, bool own_table) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (fd < 0) fd = open_kept(tid, file, own_table);
    if (fd < 0) return -1;
    long n = raw_syscall(SYS_pread64, fd, long(buf), long(size - 1), 0, 0, 0);
    if (n >= 0) return n;
    sys::close(fd);  // the thread gone (ESRCH), or the number closed under us
    fd = -1;
  }
  return -1;
}

// What thread_state answers, read where the files are (under proc_files_lock).
char read_state(pid_t tid, long* syscall_nr, std::uintptr_t* pc, bool own_table) {
  char buf[512];
  *syscall_nr = -1;
  *pc = 0;
  ProcFiles* proc_files = own_table ? proc_files_own : proc_files_shared;
  ProcFiles* slot = nullptr;
  for (std::size_t i = 0; i < kProcFiles; ++i)
    if (ProcFiles& f = proc_files[i]; f.tid == tid || (!slot && f.tid == 0)) {
      slot = &f;
      if (f.tid == tid) break;
    }
  if (!slot) slot = &proc_files[std::size_t(tid) % kProcFiles];  // (more threads than slots: one is reopened)
  if (slot->tid != tid) {
    if (slot->stat >= 0) sys::close(slot->stat);
    if (slot->syscall >= 0) sys::close(slot->syscall);
    *slot = ProcFiles{tid, -1, -1};
  }
  long n = read_kept(slot->stat, tid, "stat", buf, sizeof buf, own_table);
  if (n < 0) return '?';
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');
  char state = close && close[1] == ' ' ? close[2] : '?';
  n = read_kept(slot->syscall, tid, "syscall", buf, sizeof buf, own_table);
  if (n > 0) {
    buf[n] = '\0';
    char* end = nullptr;
    long nr = std::strtol(buf, &end, 10);
    if (end != buf) *syscall_nr = nr;
    // "nr arg1 ... arg6 sp pc" (or "-1 sp pc" off a system call): the
    // last field is where the call was made from.
    if (const char* last = std::strrchr(buf, ' ')) *pc = std::uintptr_t(std::strtoull(last + 1, nullptr, 16));
  }
  return state;
}

// loom-proc and the one request it answers at a time (the monitor's: the
// only caller; proc_files_lock orders any other).
struct ProcReader {
  std::atomic<int> phase{0};  // kIdle, kAsked, kAnswered; kGone: none
  pid_t tid = 0;              // asked for
  long nr = -1;               // answered
  std::uintptr_t pc = 0;
  char state = '?';
  pid_t pid = 0;              // the process it serves (a fork child has none)
};
constexpr int kIdle = 0, kAsked = 1, kAnswered = 2, kStarting = 3, kGone = 4;
ProcReader reader;
std::atomic<bool> reader_up{false};

void* reader_main(void*) {
  // A table of its own, holding none of the program's files.
  bool own = raw_syscall(SYS_close_range, 0, long(~0U), CLOSE_RANGE_UNSHARE, 0, 0, 0) == 0;
  if (own) {
    reader.pid = ::getpid();
    reader_up.store(true, std::memory_order_release);
  }
  reader.phase.store(own ? kIdle : kGone, std::memory_order_release);
  futex_wake(&reader.phase, 1);
  if (!own) return nullptr;
  for (;;) {
    for (int v; (v = reader.phase.load(std::memory_order_acquire)) != kAsked;) futex_wait(&reader.phase, v);
    reader.state = read_state(reader.tid, &reader.nr, &reader.pc, true);
    reader.phase.store(kAnswered, std::memory_order_release);
    futex_wake(&reader.phase, 1);
  }
}

// Nobody waits for loom-proc's start: a thread that boots the runtime may
// hold a lock its creation needs (a malloc wrapper's, around the program's
// first allocation: an outside review found monitor_start waiting for it
// there, and the monitor for the lock). Until it is up the monitor reads
// no state ('?'); if it is not up after kReaderStartNs (dead at its start:
// a seccomp filter that kills a thread calling close_range), the monitor
// keeps the files itself.
constexpr std::int64_t kReaderStartNs = 1'000'000'000;
std::int64_t reader_started_at = 0;  // (the monitor's: set before the thread starts)

}  // namespace

void proc_files_start() {
  static std::atomic<bool> started{false};
  if (started.exchange(true)) return;
  reader_started_at = now_ns();
  reader.phase.store(kStarting, std::memory_order_release);
  if (!start_runtime_thread("loom-proc", &reader_main)) reader.phase.store(kGone, std::memory_order_release);
}

char thread_state(pid_t tid, long* syscall_nr, std::uintptr_t* pc) {
  std::uintptr_t ignored;
  if (!pc) pc = &ignored;
  *syscall_nr = -1;
  *pc = 0;
  if (tid <= 0) return '?';
  SpinGuard g(proc_files_lock);
  if (!reader_up.load(std::memory_order_acquire) || reader.pid != ::getpid()) {  // (a fork child: none)
    if (reader.phase.load(std::memory_order_acquire) == kStarting && now_ns() - reader_started_at < kReaderStartNs)
      return '?';
    return read_state(tid, syscall_nr, pc, false);
  }
  reader.tid = tid;
  reader.phase.store(kAsked, std::memory_order_release);
  futex_wake(&reader.phase, 1);
  while (reader.phase.load(std::memory_order_acquire) != kAnswered) futex_wait(&reader.phase, kAsked);
  *syscall_nr = reader.nr;
  *pc = reader.pc;
  char state = reader.state;
  reader.phase.store(kIdle, std::memory_order_relaxed);
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
    if (state == '?') {
      // Its state unknown (no /proc file could be read): it may sit in the
      // kernel, and a signal would end its call with EINTR. No backtrace.
      std::fprintf(stderr,
                   "loom: stall: %s has held processor %u of cluster %u for %lld ms%s (its kernel thread's state "
                   "could not be read)\n",
                   who, p.index(), c.id(), (long long)held_ms, others ? "; other fibres are ready on that processor" : "");
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
