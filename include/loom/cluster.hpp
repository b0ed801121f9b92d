// loom/cluster.hpp — clusters: a scheduling domain of processors.
//
// A Cluster owns its processors (kernel threads), one ready queue per
// processor, a staging queue (new fibres under work sharing, arrivals by
// migration), a background queue (run only when nothing else is ready), an
// idle list and a busy list. The process starts with a default cluster whose
// first processor is the main thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/config.hpp"

namespace loom {

namespace rt {
class Cluster;
void boot_runtime();
}

// Counters a cluster keeps; cheap enough to be always on. Read with
// Cluster::stats(); values are sums over the cluster's processors.
struct ClusterStats {
  std::uint64_t steals = 0;        // fibres taken from another processor
  std::uint64_t sticky_steals = 0; // ... whose affinity moved to the thief
  std::uint64_t sleeps = 0;        // times a processor slept on its semaphore
  std::uint64_t wakes = 0;         // times a processor was woken
};

class Cluster {
 public:
  // A new cluster with `processors` kernel threads (at least 1). The
  // configuration is fixed for the cluster's life.
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

  rt::Cluster& impl() { return *impl_; }

 private:
  friend void rt::boot_runtime();
  explicit Cluster(rt::Cluster* adopted);
  rt::Cluster* impl_;
  bool owned_;
};

}  // namespace loom
