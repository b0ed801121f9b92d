// loom/cluster.hpp — clusters: a scheduling domain of processors.
//
// A Cluster owns its processors (kernel threads), one ready queue per
// processor, a staging queue (new fibres under work sharing, arrivals by
// migration), a background queue (run only when nothing else is ready), an
// idle list and a busy list. The process starts with a default cluster whose
// first processor is the main thread.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdint>

#include "loom/config.hpp"
#include "loom/detail/stats_fields.h"

namespace loom {

namespace rt {
class Cluster;
void boot_runtime();
}

// Counters a cluster keeps, always on and cheap: each processor counts on
// a cache line of its own (the list, with what each counts, is
// loom/detail/stats_fields.h). Read with Cluster::stats() (sums over the
// cluster's processors, and what was counted off them) or
// Cluster::processor_stats(i); loom::print_stats (loom/loom.hpp) prints the
// tables, and so do LOOM_STATS=1 at exit and LOOM_STATS_SIGNAL=SIGUSR2 on
// that signal. Values are read without stopping anyone: a table taken while
// the program runs is a moment's approximation.
struct ClusterStats {
#define LOOM_STATS_MEMBER(field, description) std::uint64_t field = 0;
  LOOM_STATS_FIELDS(LOOM_STATS_MEMBER)
#undef LOOM_STATS_MEMBER
  std::uint64_t stack_bytes = 0;  // bytes of fibre stacks mapped now, process-wide
};

class Cluster {
 public:
  // A new cluster with `processors` kernel threads, 1 to 256; otherwise, or
  // with a config.stack_size outside [kStackMin, kStackMax] (0 is the
  // default), std::invalid_argument, where C's loom_cluster_create gives
  // EINVAL. The configuration is fixed for the cluster's life.
  explicit Cluster(std::size_t processors, const SchedConfig& config = SchedConfig::from_env());
  // Stops the cluster's processors and waits for them. Every fibre must have
  // left the cluster (finished or migrated) first; a cluster that still holds
  // fibres is reported on stderr and the process aborts.
  ~Cluster();

  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // The cluster main() runs in.
  static Cluster& default_cluster();
  // The cluster of the calling fibre (the default cluster for a kernel
  // thread that is not a loom processor).
  static Cluster& current();

  // Adds processors at run time; returns the new processor count.
  std::size_t add_processors(std::size_t n);
  std::size_t processors() const;
  unsigned id() const;
  const SchedConfig& config() const;
  ClusterStats stats() const;
  // Processor i's own counters (i < processors()).
  ClusterStats processor_stats(std::size_t i) const;

  rt::Cluster& impl() { return *impl_; }

 private:
  friend void rt::boot_runtime();
  // The default cluster's facade. Tagged: an untagged Cluster(rt::Cluster*)
  // made the user's Cluster(0) ambiguous (0 is also a null pointer).
  struct Adopt {};
  Cluster(Adopt, rt::Cluster* adopted);
  rt::Cluster* impl_;
  bool owned_;
};

// The calling fibre's cluster's counters (the default cluster's on a kernel
// thread that is not a processor).
ClusterStats stats();
// Every live cluster's table to `out`: each counter's total and its value
// per processor (the first 16), with what it counts.
void print_stats(std::FILE* out = stderr);
// Every live fibre, one line each: id, name, state (running, ready, or
// blocked on what: mutex, condvar, semaphore, rwlock, barrier, join, fd and
// direction, sleep...), cluster, processor, stack size, stack in use (a
// fibre not running), and its deepest use with LOOM_STACK_WATERMARK=1.
// LOOM_DUMP_SIGNAL=SIGUSR1 prints it on that signal.
void dump_fibres(std::FILE* out = stderr);

}  // namespace loom
