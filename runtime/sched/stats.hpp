// sched/stats.hpp — the runtime's counters, always on.
//
// The list is loom/detail/stats_fields.h (shared with the C API). Each
// processor owns one Counters block, written only by its own kernel thread:
// an increment is a load and a store to a cache line nobody else writes, no
// locked instruction. Events counted on a kernel thread that is not a
// processor (a poller thread, a fibre created from a plain thread) go to
// their cluster's shared block, with an atomic add; they are rare or already
// on a path that pays a system call.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstddef>

#include "base/spinlock.hpp"
#include "loom/detail/stats_fields.h"

namespace loom::rt {

class Cluster;

enum class Stat : unsigned {
#define LOOM_STAT_ENUM(field, description) field,
  LOOM_STATS_FIELDS(LOOM_STAT_ENUM)
#undef LOOM_STAT_ENUM
      count_
};
constexpr unsigned kStats = unsigned(Stat::count_);

struct Counters {
  std::atomic<std::uint64_t> v[kStats] = {};

  // By the block's single writer.
  void add(Stat s, std::uint64_t n = 1) noexcept {
    std::atomic<std::uint64_t>& c = v[unsigned(s)];
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  // By anyone.
  void add_shared(Stat s, std::uint64_t n = 1) noexcept { v[unsigned(s)].fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t get(Stat s) const noexcept { return v[unsigned(s)].load(std::memory_order_relaxed); }
};

// Counts an event: on the calling processor's own block when it belongs to
// `cluster`, else on the cluster's shared block.
void count(Cluster& cluster, Stat s, std::uint64_t n = 1) noexcept;
// The same for the cluster of the calling processor (or of the running
// fibre); on a kernel thread that is not a processor, the default cluster's.
void count(Stat s, std::uint64_t n = 1) noexcept;

// LOOM_STATS=1 (tables at exit) and LOOM_STATS_SIGNAL=SIG (tables on that
// signal, printed by a reporter thread): read at boot.
void stats_boot();

// A detached kernel thread of the runtime's own (the system's
// pthread_create), named `name`, with every signal blocked.
bool start_runtime_thread(const char* name, void* (*fn)(void*));

// Starts the stall detector's watchdog thread (sched/stall.cpp), once: called
// by every cluster whose SchedConfig::stall_ms is set.
void stall_watch();

// The watchdog's look for wait-for cycles among blocked fibres (mutex
// holders, joins): each cycle seen for hold_ns is printed once, on stderr.
void report_deadlocks(std::int64_t now, std::int64_t hold_ns);

}  // namespace loom::rt

namespace loom::rt {

class Fibre;
class Processor;

// The fibres that have started and not yet exited, in lists kept per
// processor (the one that started them) and per cluster (those started from
// kernel threads that are not its processors): adding and removing takes an
// uncontended lock on a cache line the starting processor owns. The listing
// walks every list under its lock, so a fibre cannot exit (and its stack be
// reused) while it is being described.
struct alignas(64) LiveFibres {
  SpinLock lock;
  Fibre* head = nullptr;
};
void live_add(Fibre* f) noexcept;
void live_remove(Fibre* f) noexcept;

// LOOM_STACK_WATERMARK=1: stacks are painted when a fibre starts, and each
// fibre's deepest use is reported when it exits (and in the listing).
extern bool stack_watermark;
// Bytes of f's stack ever used (painted stacks only), or 0.
std::size_t stack_high_water(const Fibre& f) noexcept;
void stack_paint(Fibre& f) noexcept;
// Prints f's high-water mark on stderr (at its exit).
void report_high_water(const Fibre& f) noexcept;

}  // namespace loom::rt
