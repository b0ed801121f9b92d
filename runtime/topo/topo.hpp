// topo/topo.hpp — the machine's shape, from hwloc: which PUs loom may use and
// how near two of them are.
//
// Contract.
// - A Topology is a plain value built once from hwloc and then read-only: it
//   keeps no hwloc handle, so any thread may read it without a lock.
// - PUs are numbered logically, 0..pu_os.size(), in hwloc's logical order
//   (nearby PUs have nearby numbers); pu_os[i] is the OS (kernel) CPU number
//   of logical PU i, the one sched_setaffinity takes.
// - distance(a, b) is a small rank, not a latency: 0 for the same PU, then
//   one rank per level of hwloc's tree at which two PUs can first meet, going
//   outwards — same core (SMT siblings), each shared cache level (L1, L2,
//   L3...), package, NUMA node — and past the NUMA node one rank per distinct
//   value of hwloc's NUMA distance matrix, when the machine reports one.
//   Levels at which no two distinct PUs meet are skipped, so the ranks are
//   compact: on a machine without SMT, 1 means "share the nearest shared
//   cache". Smaller is nearer; symmetric; distance(a, a) == 0.
// - machine() is built on first use (processor 0 is created by the library
//   constructor, which asks assign_pu(), so in practice at start-up, before
//   any kernel thread is pinned) and is never freed. If hwloc cannot load,
//   it is a flat topology of sysconf(_SC_NPROCESSORS_ONLN) PUs (every pair of
//   distinct PUs at rank 1, one cache domain), with a one-line notice.
// - Nothing here takes a lock on a hot path: assign_pu() is one atomic
//   increment; distance() is a table look-up; order_by_distance() does not
//   allocate for up to 256 victims.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::rt::topo {

struct Topology {
  // logical PUs (hwloc order) the process may use; os_index of each
  std::vector<int> pu_os;
  // distance rank between logical PUs a and b: 0 same PU, then 1 same core (SMT),
  // then one rank per shared cache level going outwards (L1, L2, L3...),
  // then same package, then same NUMA node, then farther NUMA nodes ordered by
  // hwloc's NUMA distance matrix when present. Smaller = nearer. Symmetric.
  // (Levels that separate no two PUs are skipped: see the contract above.)
  unsigned distance(unsigned a, unsigned b) const { return rank_[a * pu_os.size() + b]; }
  unsigned cache_domains() const { return cache_domains_; }  // distinct last-level-cache (or core-group) domains
  bool synthetic = false;
  std::string describe() const;  // one line, e.g. "2 packages, 4 L3, 16 cores, 16 PUs"

  unsigned pus() const { return static_cast<unsigned>(pu_os.size()); }
  unsigned max_distance() const { return max_rank_; }
  // What each rank means, nearest first, e.g. {"PU", "L3", "package", "machine"}:
  // level_names()[distance(a, b)] names the smallest object a and b share.
  const std::vector<std::string>& level_names() const { return level_names_; }
  // Reorders pus[0..n) nearest-first from logical PU `from`; stable.
  void order_by_distance(unsigned from, unsigned* pus, std::size_t n) const;
  // The same for any items, `pu_of(item)` giving each one's logical PU
  // (sched orders its processors with it).
  template <class T, class PuOf>
  void order_nearest_first(unsigned from, T* items, std::size_t n, PuOf pu_of) const;

  // Filled by the builders in topo.cpp.
  std::vector<std::uint8_t> rank_;  // pus() x pus(), row-major
  unsigned max_rank_ = 0;
  unsigned cache_domains_ = 1;
  std::vector<std::string> level_names_;
  std::string summary_;  // describe()'s text
};

// The topology loom uses: from LOOM_TOPOLOGY (an hwloc synthetic description,
// e.g. "pack:2 l3:2 core:4 pu:1") if set, else the real machine (restricted to
// the process's allowed cpuset). Built once, thread-safe, never freed. A
// LOOM_TOPOLOGY that hwloc refuses is reported once on stderr and the real
// machine is used.
const Topology& machine();
// For tests: a topology from a synthetic string; throws std::invalid_argument if hwloc refuses it.
Topology from_synthetic(const std::string& desc);
// The same with a NUMA distance matrix (row-major, one row per NUMA node in
// logical order) added through hwloc's distances API, since hwloc 2's
// synthetic syntax has none; throws std::invalid_argument if its size is wrong.
Topology from_synthetic(const std::string& desc, const std::vector<std::uint64_t>& numa_distances);
// The real machine (restricted to the allowed cpuset and the process's CPU
// binding), or the flat fallback; never throws. Not cached.
Topology from_machine();
// The flat fallback: `n` PUs numbered 0..n-1, all distinct pairs at rank 1.
Topology flat(unsigned n);

// The logical PU the next processor created in the process should use:
// a process-wide round robin over machine().pu_os (processor creation order).
unsigned assign_pu();
// Pins the calling kernel thread to logical PU `pu` of machine(); false (errno-like
// reason to stderr once) if the topology is synthetic or the kernel refuses.
bool pin_current_thread(unsigned pu);
// True when machine() has more than one cache domain (then locality ordering is worth doing).
bool multi_cache_domain();

// Stable nearest-first order of items[0..n) by distance from PU `from`. A
// counting sort over the ranks (there are few) into a stack buffer: no
// allocation on the steal path. More than 256 items: insertion sort, also
// stable.
template <class T, class PuOf>
void Topology::order_nearest_first(unsigned from, T* items, std::size_t n, PuOf pu_of) const {
  if (n < 2) return;
  constexpr std::size_t kMax = 256;
  if (n <= kMax) {
    std::uint8_t key[kMax];
    unsigned count[257] = {};
    for (std::size_t i = 0; i < n; ++i) {
      key[i] = std::uint8_t(distance(from, pu_of(items[i])));
      ++count[key[i] + 1];
    }
    for (unsigned r = 1; r <= max_distance() + 1; ++r) count[r] += count[r - 1];
    T sorted[kMax];
    for (std::size_t i = 0; i < n; ++i) sorted[count[key[i]]++] = items[i];
    std::copy(sorted, sorted + n, items);
    return;
  }
  for (std::size_t i = 1; i < n; ++i) {
    T x = items[i];
    unsigned d = distance(from, pu_of(x));
    std::size_t j = i;
    for (; j > 0 && distance(from, pu_of(items[j - 1])) > d; --j) items[j] = items[j - 1];
    items[j] = x;
  }
}

}  // namespace loom::rt::topo
