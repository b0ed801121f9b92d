#include "sched/steal_policy.hpp"

#include <atomic>
#include <utility>

#include "sched/processor.hpp"
#include "topo/topo.hpp"

namespace loom::rt {

namespace {

// Longest busy first; on a machine with more than one cache domain, nearest
// first (distance(), below), longest busy first among equally near victims:
// stolen fibres then find their data in a cache the thief shares.
class LongestBusy final : public StealPolicy {
 public:
  const char* name() const override { return "longest-busy"; }
  std::size_t order(Processor& thief, Processor** victims, std::size_t n) override {
    if (locality_) order_by_distance(thief, victims, n);
    return n;
  }

 private:
  const bool locality_ = topo::multi_cache_domain();
};

class RandomVictim final : public StealPolicy {
 public:
  const char* name() const override { return "random"; }
  std::size_t order(Processor&, Processor** victims, std::size_t n) override {
    // Fisher-Yates with a per-cluster xorshift state; a lost update between
    // two thieves only repeats a random number.
    for (std::size_t i = n; i > 1; --i) std::swap(victims[i - 1], victims[next() % i]);
    return n;
  }

 private:
  std::uint64_t next() {
    std::uint64_t x = state_.load(std::memory_order_relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    state_.store(x, std::memory_order_relaxed);
    return x;
  }
  std::atomic<std::uint64_t> state_{0x9E3779B97F4A7C15ull};
};

}  // namespace

std::unique_ptr<StealPolicy> make_steal_policy(const std::string& name) {
  if (name == "longest-busy") return std::make_unique<LongestBusy>();
  if (name == "random") return std::make_unique<RandomVictim>();
  return nullptr;
}

unsigned distance(const Processor& a, const Processor& b) { return topo::machine().distance(a.pu(), b.pu()); }

void order_by_distance(const Processor& thief, Processor** victims, std::size_t n) {
  topo::machine().order_nearest_first(thief.pu(), victims, n, [](const Processor* p) { return p->pu(); });
}

}  // namespace loom::rt
