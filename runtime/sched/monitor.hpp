// sched/monitor.hpp — the monitor: one kernel thread of the runtime's that
// finds processors lost to what loom cannot see (sched/monitor.cpp) and runs
// the stall detector's looks (sched/stall.cpp).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace loom::rt {

// Starts the monitor's thread, once (a cluster that asks for hand-offs or
// stall reports).
void monitor_start();

// The monitor sleeps on this word: kMonitorAsleep while every processor of
// the clusters it watches sleeps, until a processor leaves its sleep
// (Cluster::go_busy: monitor_busy); kMonitorNapping between looks that found
// no fibre waiting, until the nap's end or a fibre queued behind a running
// one, or where no processor wakes for it (Cluster::announce_queued:
// monitor_queued) — the one event that may need a look soon. A load on
// each path, a wake-up only at the first such event of a sleep or nap.
inline constexpr int kMonitorAsleep = 1;
inline constexpr int kMonitorNapping = 2;
extern std::atomic<int> monitor_sleeping;
void monitor_wake() noexcept;
inline void monitor_busy() noexcept {
  if (__builtin_expect(monitor_sleeping.load(std::memory_order_relaxed) == kMonitorAsleep, 0)) monitor_wake();
}
inline void monitor_queued() noexcept {
  if (__builtin_expect(monitor_sleeping.load(std::memory_order_relaxed) != 0, 0)) monitor_wake();
}

// The stall detector's look (sched/stall.cpp): the period it wants, in ns,
// or 0 when no cluster asks for it.
std::int64_t stall_tick(std::int64_t now);

// A kernel thread's scheduler state from /proc ('R' on a CPU, 'S' or 'D'
// in the kernel, '?' unknown) and, when in a system call, its number (-1
// when not, or unknown) and, if pc is given, the address it was made from
// (0 when unknown).
char thread_state(pid_t tid, long* syscall_nr, std::uintptr_t* pc = nullptr);
// Readies thread_state's files for the calling thread, the monitor's, at
// its start (sched/stall.cpp: they hold no number of the program's).
void proc_files_start();
// A system call's name, with a word on what it waits for where the name
// alone does not say; buf holds a number the table lacks.
const char* syscall_name(long nr, char* buf, std::size_t size);

}  // namespace loom::rt
