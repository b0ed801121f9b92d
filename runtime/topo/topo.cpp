// topo/topo.cpp — building a Topology from hwloc; PU assignment and pinning.
//
// The distance table is computed once from hwloc's tree and hwloc is then let
// go: a pair's rank is the position of its key among all pairs' distinct keys,
// the key being (depth of the pair's common ancestor, NUMA distance between
// their local NUMA nodes or 0). Deeper ancestors come first, then smaller
// NUMA distances. Ranking keys that actually occur, rather than numbering
// hwloc's levels, is what makes the ranks compact (L1 and L2 are private to a
// core on most machines and would otherwise be ranks no pair ever has), and
// lets a NUMA distance matrix split the "machine" rank into near and far
// nodes without a special case.
//
// Rejected: keeping the hwloc topology and asking hwloc_get_common_ancestor_obj
// on every steal — a table look-up is a few nanoseconds, the walk is not, and
// a value-type Topology needs no lifetime rules. Pinning uses
// pthread_setaffinity_np with the PU's OS index for the same reason.
#include "topo/topo.hpp"
#include "base/options.hpp"
#include "base/sys.hpp"

#include <hwloc.h>
// hwloc/plugins.h (not C++-ready: no extern "C") declares it; libhwloc exports it.
extern "C" int hwloc_hide_errors(void);
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>


namespace loom::rt::topo {

namespace {

struct Hwloc {
  hwloc_topology_t t = nullptr;
  ~Hwloc() {
    if (t) hwloc_topology_destroy(t);
  }
};

// What Topology::level_names() calls the smallest object two PUs share.
std::string type_name(hwloc_obj_t o) {
  switch (o->type) {
    case HWLOC_OBJ_MACHINE:
      return "machine";
    case HWLOC_OBJ_PACKAGE:
      return "package";
    case HWLOC_OBJ_DIE:
      return "die";
    case HWLOC_OBJ_CORE:
      return "core";
    case HWLOC_OBJ_GROUP:
      return "group";
    default:
      break;
  }
  char buf[64];
  hwloc_obj_type_snprintf(buf, sizeof buf, o, 0);  // "PU", "L1d", "L2", "L3"...
  return buf;
}

// The NUMA node local to `pu`: the first whose cpuset holds it (a PU with
// several local nodes, e.g. DRAM and HBM, counts with the first, which hwloc
// orders as the normal memory). -1 when there is none.
int numa_of(hwloc_topology_t t, hwloc_obj_t pu) {
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, nullptr); n;
       n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, n)) {
    if (n->cpuset && hwloc_bitmap_isset(n->cpuset, pu->os_index)) return int(n->logical_index);
  }
  return -1;
}

// The PU's cache domain: its outermost data or unified cache; without caches
// (synthetic topologies often have none), the nearest non-root group of cores
// above its core (package, die, group); else its NUMA node; else the machine.
// Returned as (object, -1) or, for a NUMA node, (nullptr, its index).
std::pair<const void*, int> cache_domain(hwloc_topology_t t, hwloc_obj_t pu, int numa) {
  hwloc_obj_t llc = nullptr;
  for (hwloc_obj_t o = pu->parent; o; o = o->parent) {
    if (hwloc_obj_type_is_dcache(o->type)) llc = o;
  }
  if (llc) return {llc, -1};
  hwloc_obj_t core = pu->parent && pu->parent->type == HWLOC_OBJ_CORE ? pu->parent : pu;
  if (core->parent && core->parent->parent) return {core->parent, -1};
  if (numa >= 0) return {nullptr, numa};
  return {hwloc_get_root_obj(t), -1};
}

unsigned count_in(hwloc_topology_t t, hwloc_obj_type_t type, hwloc_const_cpuset_t allowed) {
  unsigned n = 0;
  for (hwloc_obj_t o = hwloc_get_next_obj_by_type(t, type, nullptr); o; o = hwloc_get_next_obj_by_type(t, type, o)) {
    if (!o->cpuset || hwloc_bitmap_intersects(o->cpuset, allowed)) ++n;
  }
  return n;
}

std::string plural(unsigned n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// Builds the Topology from a loaded hwloc topology.
Topology build(hwloc_topology_t t, bool synthetic) {
  Topology topo;
  topo.synthetic = synthetic;
  hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(t);

  std::vector<hwloc_obj_t> pus;
  for (hwloc_obj_t pu = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, nullptr); pu;
       pu = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, pu)) {
    if (hwloc_bitmap_isset(allowed, pu->os_index)) pus.push_back(pu);
  }
  if (pus.empty()) throw std::invalid_argument("no usable PU");
  const std::size_t n = pus.size();
  for (hwloc_obj_t pu : pus) topo.pu_os.push_back(int(pu->os_index));

  std::vector<int> numa(n);
  for (std::size_t i = 0; i < n; ++i) numa[i] = numa_of(t, pus[i]);

  // The NUMA distance matrix, when hwloc has one (from the OS, or added by
  // from_synthetic's caller): latency-like values, one row per node.
  hwloc_distances_s* dist = nullptr;
  unsigned nr = 1;
  if (hwloc_distances_get_by_type(t, HWLOC_OBJ_NUMANODE, &nr, &dist, HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) != 0 ||
      nr == 0)
    dist = nullptr;
  std::vector<int> row(n, -1);  // each PU's node's index in the matrix
  if (dist) {
    for (std::size_t i = 0; i < n; ++i) {
      if (numa[i] < 0) continue;
      hwloc_obj_t node = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, unsigned(numa[i]));
      row[i] = node ? hwloc_distances_obj_index(dist, node) : -1;
    }
  }
  auto numa_distance = [&](std::size_t a, std::size_t b) -> std::uint64_t {
    if (!dist || numa[a] == numa[b] || row[a] < 0 || row[b] < 0) return 0;
    std::uint64_t ab = dist->values[std::size_t(row[a]) * dist->nbobjs + std::size_t(row[b])];
    std::uint64_t ba = dist->values[std::size_t(row[b]) * dist->nbobjs + std::size_t(row[a])];
    return (ab + ba + 1) / 2;  // symmetric even if the firmware's matrix is not
  };

  // Keys: (-depth of the common ancestor, NUMA distance); ranks by sorted key.
  using Key = std::pair<int, std::uint64_t>;
  std::vector<Key> keys(n * n);
  std::map<Key, hwloc_obj_t> seen;
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = a; b < n; ++b) {
      hwloc_obj_t common = hwloc_get_common_ancestor_obj(t, pus[a], pus[b]);
      Key k{-int(common->depth), numa_distance(a, b)};
      keys[a * n + b] = keys[b * n + a] = k;
      seen.emplace(k, common);
    }
  }
  if (dist) hwloc_distances_release(t, dist);
  std::map<Key, unsigned> rank;
  for (auto& [k, obj] : seen) {
    unsigned r = unsigned(rank.size());
    rank.emplace(k, std::min(r, 255u));
    std::string name = type_name(obj);
    if (k.second) name += " (NUMA distance " + std::to_string(k.second) + ")";
    topo.level_names_.push_back(name);
  }
  topo.rank_.resize(n * n);
  for (std::size_t i = 0; i < n * n; ++i) topo.rank_[i] = std::uint8_t(rank[keys[i]]);
  topo.max_rank_ = unsigned(std::min<std::size_t>(rank.size() - 1, 255));

  std::set<std::pair<const void*, int>> domains;
  for (std::size_t i = 0; i < n; ++i) domains.insert(cache_domain(t, pus[i], numa[i]));
  topo.cache_domains_ = unsigned(domains.size());

  // "2 packages, 4 L3, 16 cores, 16 PUs": packages, NUMA nodes if more than
  // one, the outermost cache level, cores, PUs.
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (unsigned p = count_in(t, HWLOC_OBJ_PACKAGE, allowed)) add(plural(p, "package", "packages"));
  if (unsigned m = count_in(t, HWLOC_OBJ_NUMANODE, allowed); m > 1) add(plural(m, "NUMA node", "NUMA nodes"));
  for (hwloc_obj_type_t c :
       {HWLOC_OBJ_L5CACHE, HWLOC_OBJ_L4CACHE, HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L1CACHE}) {
    if (unsigned k = count_in(t, c, allowed)) {
      char name[16];
      hwloc_obj_type_snprintf(name, sizeof name, hwloc_get_next_obj_by_type(t, c, nullptr), 0);
      add(std::to_string(k) + " " + name);
      break;
    }
  }
  if (unsigned c = count_in(t, HWLOC_OBJ_CORE, allowed)) add(plural(c, "core", "cores"));
  add(plural(unsigned(n), "PU", "PUs"));
  topo.summary_ = s;
  return topo;
}

void notice_once(std::atomic<bool>& said, const std::string& text) {
  if (!said.exchange(true, std::memory_order_relaxed)) std::fprintf(stderr, "loom: %s\n", text.c_str());
}

}  // namespace

std::string Topology::describe() const { return summary_ + (synthetic ? " (synthetic)" : ""); }

void Topology::order_by_distance(unsigned from, unsigned* pus, std::size_t n) const {
  order_nearest_first(from, pus, n, [](unsigned pu) { return pu; });
}

Topology flat(unsigned n) {
  if (n == 0) n = 1;
  Topology topo;
  for (unsigned i = 0; i < n; ++i) topo.pu_os.push_back(int(i));
  topo.rank_.assign(std::size_t(n) * n, 1);
  for (unsigned i = 0; i < n; ++i) topo.rank_[std::size_t(i) * n + i] = 0;
  topo.max_rank_ = n > 1 ? 1 : 0;
  topo.level_names_ = {"PU"};
  if (n > 1) topo.level_names_.push_back("machine");
  topo.summary_ = plural(n, "PU", "PUs") + " (flat: hwloc could not load the machine)";
  return topo;
}

Topology from_synthetic(const std::string& desc) { return from_synthetic(desc, {}); }

Topology from_synthetic(const std::string& desc, const std::vector<std::uint64_t>& numa_distances) {
  Hwloc h;
  if (hwloc_topology_init(&h.t) != 0) throw std::runtime_error("loom: hwloc_topology_init failed");
  if (hwloc_topology_set_synthetic(h.t, desc.c_str()) != 0 || hwloc_topology_load(h.t) != 0)
    throw std::invalid_argument("loom: hwloc refuses the synthetic topology \"" + desc + "\"");
  if (!numa_distances.empty()) {
    unsigned nodes = unsigned(hwloc_get_nbobjs_by_type(h.t, HWLOC_OBJ_NUMANODE));
    if (std::size_t(nodes) * nodes != numa_distances.size())
      throw std::invalid_argument("loom: a NUMA distance matrix of " + std::to_string(numa_distances.size()) +
                                  " values for " + std::to_string(nodes) + " NUMA nodes");
    std::vector<hwloc_obj_t> objs(nodes);
    for (unsigned i = 0; i < nodes; ++i) objs[i] = hwloc_get_obj_by_type(h.t, HWLOC_OBJ_NUMANODE, i);
    std::vector<hwloc_uint64_t> values(numa_distances.begin(), numa_distances.end());
    hwloc_distances_add_handle_t d =
        hwloc_distances_add_create(h.t, "loom", HWLOC_DISTANCES_KIND_FROM_USER | HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0);
    if (!d || hwloc_distances_add_values(h.t, d, nodes, objs.data(), values.data(), 0) != 0 ||
        hwloc_distances_add_commit(h.t, d, 0) != 0)
      throw std::invalid_argument("loom: hwloc refuses the NUMA distance matrix");
  }
  return build(h.t, true);
}

namespace {
// hwloc reports what it cannot read on the program's stderr ("[hwloc/linux]
// failed to find sysfs cpu topology directory", in containers without
// /sys): loom says it instead, its way (from_machine). hwloc_hide_errors()
// reads HWLOC_HIDE_ERRORS once, at its first call, and keeps the answer; so
// unless the user chose a level, the variable is set around that first call
// (at start-up: the runtime's constructor builds machine() before the
// program runs a thread) and removed again.
void quiet_hwloc() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  if (std::getenv("HWLOC_HIDE_ERRORS")) return;
  setenv("HWLOC_HIDE_ERRORS", "2", 0);
  (void)hwloc_hide_errors();
  unsetenv("HWLOC_HIDE_ERRORS");
}

// On Linux hwloc reads the machine from /sys; when it could not, another
// back end (x86's cpuid, or none) filled in a machine that ignores the
// process's cpuset and cgroup: loom uses the flat topology instead.
bool read_by_os(hwloc_topology_t t) {
#ifdef __linux__
  const char* backend = hwloc_obj_get_info_by_name(hwloc_get_root_obj(t), "Backend");
  return backend && std::strcmp(backend, "Linux") == 0;
#else
  (void)t;
  return true;
#endif
}
}  // namespace

Topology from_machine() {
  quiet_hwloc();
  Hwloc h;
  // The process's binding and cgroup restrict the PUs (hwloc drops
  // disallowed PUs by default); never let hwloc rebind threads while it
  // looks (the x86 backend would, behind the runtime's back).
  unsigned long flags = HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM | HWLOC_TOPOLOGY_FLAG_RESTRICT_TO_CPUBINDING |
                        HWLOC_TOPOLOGY_FLAG_DONT_CHANGE_BINDING;
  if (hwloc_topology_init(&h.t) == 0 && hwloc_topology_set_flags(h.t, flags) == 0 &&
      hwloc_topology_set_io_types_filter(h.t, HWLOC_TYPE_FILTER_KEEP_NONE) == 0 && hwloc_topology_load(h.t) == 0 &&
      read_by_os(h.t)) {
    try {
      return build(h.t, false);
    } catch (const std::exception&) {
    }
  }
  // hwloc failed (a stripped container without /sys, say): every PU the OS
  // reports, all equally far apart.
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned n = cpus > 0 ? unsigned(cpus) : 1;
  static std::atomic<bool> said{false};
  if (env_bool("LOOM_VERBOSE", false) && !said.exchange(true))
    std::fprintf(stderr, "loom: hwloc could not read this machine's topology; using %u PUs without locality\n", n);
  return flat(n);
}

const Topology& machine() {
  // Built on first use, never freed (processors of destroyed clusters, and
  // threads running at exit, may still ask).
  static const Topology* const topo = [] {
    quiet_hwloc();
    const char* desc = std::getenv("LOOM_TOPOLOGY");
    if (desc && *desc) {
      try {
        return new Topology(from_synthetic(desc));
      } catch (const std::exception&) {
        env_complain("LOOM_TOPOLOGY", desc, "an hwloc synthetic topology (e.g. \"pack:2 core:4 pu:1\")", "the machine's");
      }
    }
    return new Topology(from_machine());
  }();
  return *topo;
}

unsigned assign_pu() {
  static std::atomic<unsigned> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) % machine().pus();
}

bool pin_current_thread(unsigned pu) {
  static std::atomic<bool> said{false};
  const Topology& t = machine();
  if (t.synthetic) {
    notice_once(said, "not pinning processors: LOOM_TOPOLOGY describes a synthetic machine");
    return false;
  }
  if (pu >= t.pus()) {
    notice_once(said, "cannot pin to PU " + std::to_string(pu) + ": the machine has " + std::to_string(t.pus()));
    return false;
  }
  int cpu = t.pu_os[pu];
  std::size_t size = CPU_ALLOC_SIZE(cpu + 1);
  cpu_set_t* set = CPU_ALLOC(cpu + 1);
  if (!set) return false;
  CPU_ZERO_S(size, set);
  CPU_SET_S(cpu, size, set);
  int err = sys::pthread().setaffinity_np(sys::pthread().self(), size, set);
  CPU_FREE(set);
  if (err != 0) {
    notice_once(said, "pinning a processor to CPU " + std::to_string(cpu) + " failed: " + std::strerror(err));
    return false;
  }
  return true;
}

bool multi_cache_domain() { return machine().cache_domains() > 1; }

}  // namespace loom::rt::topo
