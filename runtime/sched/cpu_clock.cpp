#include "sched/cpu_clock.hpp"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sched/cluster.hpp"
#include "sched/fibre.hpp"
#include "sched/processor.hpp"

namespace loom::rt {

namespace {

std::uint64_t ns_of(const timespec& ts) { return std::uint64_t(ts.tv_sec) * 1000000000u + std::uint64_t(ts.tv_nsec); }

// The calling kernel thread's CPU time, by the system call itself (the
// preload interposes clock_gettime for fibres' clocks).
std::uint64_t kernel_thread_cpu_ns() noexcept {
  timespec ts{};
  ::syscall(SYS_clock_gettime, CLOCK_THREAD_CPUTIME_ID, &ts);
  return ns_of(ts);
}

// Another kernel thread's of this process (the kernel's per-thread clock
// id: ~tid << 3 | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED); 0 if it is gone.
std::uint64_t kernel_thread_cpu_ns(int tid) noexcept {
  timespec ts{};
  if (::syscall(SYS_clock_gettime, clockid_t((~tid) * 8 | 6), &ts) != 0) return 0;
  return ns_of(ts);
}

}  // namespace

void cpu_clock_start(Fibre* f) noexcept {
  if (f->cpu_timed.load(std::memory_order_relaxed)) return;
  // The mark first: a switch out that sees the flag finds a mark of this
  // kernel thread (or none, for another fibre, until its next switch in).
  if (f == this_fibre_or_null()) {
    f->cpu_tid.store(int(::syscall(SYS_gettid)), std::memory_order_relaxed);
    f->cpu_mark.store(kernel_thread_cpu_ns(), std::memory_order_relaxed);
    f->cpu_timed.store(true, std::memory_order_release);
    return;
  }
  f->cpu_timed.store(true, std::memory_order_seq_cst);
  // Another fibre, running now (a spinner may never switch again): marked
  // from its kernel thread's clock now. A switch out before the mark saw
  // none and counted nothing; then the fibre no longer runs there and the
  // mark is taken back (a reader meanwhile may count a moment too much).
  if (Processor* p = f->cluster ? f->cluster->runner_of(f) : nullptr) {
    const int tid = p->tid.load(std::memory_order_relaxed);
    const std::uint64_t at = tid ? kernel_thread_cpu_ns(tid) : 0;
    std::uint64_t none = 0;
    if (at) {
      f->cpu_tid.store(tid, std::memory_order_release);
      if (f->cpu_mark.compare_exchange_strong(none, at, std::memory_order_acq_rel) &&
          p->running_id.load(std::memory_order_seq_cst) != f->id) {
        std::uint64_t mine = at;
        f->cpu_mark.compare_exchange_strong(mine, 0, std::memory_order_acq_rel);
      }
    }
  }
}

std::uint64_t cpu_clock_ns(Fibre* f) noexcept {
  if (!f->cpu_timed.load(std::memory_order_acquire)) return 0;
  if (f == this_fibre_or_null()) {
    std::uint64_t ns = f->cpu_ns.load(std::memory_order_relaxed), mark = f->cpu_mark.load(std::memory_order_relaxed);
    return mark ? ns + (kernel_thread_cpu_ns() - mark) : ns;
  }
  // Another fibre: what it had at its last switch out, and, if it is
  // running, the stretch since it came in by its kernel thread's clock. A
  // switch meanwhile changes ns or the mark: read again (a few times; then
  // what it had).
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::uint64_t ns = f->cpu_ns.load(std::memory_order_acquire);
    std::uint64_t mark = f->cpu_mark.load(std::memory_order_acquire);
    int tid = f->cpu_tid.load(std::memory_order_acquire);
    if (!mark || !tid) return ns;
    std::uint64_t there = kernel_thread_cpu_ns(tid);
    if (f->cpu_ns.load(std::memory_order_acquire) != ns || f->cpu_mark.load(std::memory_order_acquire) != mark) continue;
    return there > mark ? ns + (there - mark) : ns;
  }
  return f->cpu_ns.load(std::memory_order_acquire);
}

void cpu_clock_switch(Fibre* prev, Fibre* next, int tid) noexcept {
  const std::uint64_t now = kernel_thread_cpu_ns();
  if (prev->cpu_timed.load(std::memory_order_relaxed))
    if (std::uint64_t mark = prev->cpu_mark.load(std::memory_order_relaxed)) {
      prev->cpu_ns.store(prev->cpu_ns.load(std::memory_order_relaxed) + (now - mark), std::memory_order_release);
      prev->cpu_mark.store(0, std::memory_order_release);
    }
  if (next->cpu_timed.load(std::memory_order_relaxed)) {
    next->cpu_tid.store(tid, std::memory_order_relaxed);
    next->cpu_mark.store(now, std::memory_order_release);
  }
}

}  // namespace loom::rt
