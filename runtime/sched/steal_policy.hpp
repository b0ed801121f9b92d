// sched/steal_policy.hpp — which processors a thief tries, in which order.
//
// Mechanism apart from policy: the cluster does the stealing (locks, queue
// lengths, sticky affinity); a StealPolicy only orders the candidates. It is
// given the cluster's busy processors, longest busy first, without the thief,
// and rewrites `victims[0..n)` in the order to try, returning how many to try.
// It is called by the thief's kernel thread with no lock held; a policy keeps
// per-cluster state only (never statics), and must be safe to call from all
// of a cluster's processors at once.
//
// Policies: "longest-busy" (the thesis's default: the processor that has been
// busy longest has most likely built up a backlog) and "random" (randomised
// work stealing, the classic baseline). The color layer adds Mely's.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace loom::rt {

class Processor;

class StealPolicy {
 public:
  virtual ~StealPolicy() = default;
  virtual const char* name() const = 0;
  virtual std::size_t order(Processor& thief, Processor** victims, std::size_t n) = 0;
};

// nullptr for an unknown name.
std::unique_ptr<StealPolicy> make_steal_policy(const std::string& name);

// Locality between processors, from the PUs they were assigned
// (Processor::pu()) in topo::machine(): topo sits below sched and knows no
// Processor, so these two live here.
// Distance rank between two processors' PUs (topo::Topology::distance).
unsigned distance(const Processor& a, const Processor& b);
// Reorders victims[0..n) nearest-first from `thief` (stable: equal distances keep their order).
void order_by_distance(const Processor& thief, Processor** victims, std::size_t n);

}  // namespace loom::rt
