// apps/bench/loom_variant.hpp — the `variant` a loom row is filed under.
//
// BENCHMARKS.md: the default configuration is variant "", anything else
// names what differs. Built from SchedConfig's public fields, compared with
// a default-constructed SchedConfig, so a LOOM_* variable left set in the
// shell shows up in the results instead of silently changing them.
#pragma once

#include <string>

#include "loom/config.hpp"

namespace bench {

inline std::string loom_variant(const loom::SchedConfig& c) {
  const loom::SchedConfig d;
  std::string v;
  auto add = [&v](const std::string& kv) { v += (v.empty() ? "" : " ") + kv; };
  if (c.queue != d.queue) add(std::string("queue=") + loom::to_string(c.queue));
  if (c.placement != d.placement) add(std::string("placement=") + loom::to_string(c.placement));
  if (c.stealing != d.stealing) add(std::string("steal=") + (c.stealing ? "on" : "off"));
  if (c.steal_policy != d.steal_policy) add("steal_policy=" + c.steal_policy);
  if (c.sticky_threshold != d.sticky_threshold) add("sticky=" + std::to_string(c.sticky_threshold));
  if (c.spin_us != d.spin_us) add("spin=" + std::to_string(c.spin_us) + "us");
  if (c.steal_fence != d.steal_fence) add(std::string("fence=") + loom::to_string(c.steal_fence));
  if (c.stack_size != d.stack_size) add("stack_size=" + std::to_string(c.stack_size));
  return v;
}

// A --steal-fence value: true, with *out set, if `v` names a StealFence.
inline bool parse_steal_fence(const std::string& v, loom::StealFence* out) {
  for (loom::StealFence f : {loom::StealFence::lock, loom::StealFence::membarrier})
    if (v == loom::to_string(f)) {
      *out = f;
      return true;
    }
  return false;
}

}  // namespace bench
