// color/policy.cpp — color steal policies (libasync-smp's, Mely's).
//
// A policy is the scheduler's StealPolicy (it orders the victims) plus the
// choice of one color queue on a victim's list (under the victim's lock).
//
//   none          order() returns no victim: colors never move.
//   libasync-smp  victims: the one with most queued items first, then those
//                 after it by processor index (construct_core_set); color:
//                 the first on the victim's list that nobody holds and that
//                 has fewer than half the victim's items (Zeldovich et al.),
//                 or that runs shared work and has more of it queued (a
//                 queue on a list is never held exclusively: loom's shared
//                 colors overlap by being taken so).
//   mely:base     the same algorithm on Mely's color queues (so the same
//                 choices here: loom had color queues from the start).
//   mely:...      heuristics, any combination:
//     locality    victims nearest first by the machine's caches (topo), the
//                 load order kept among equally near ones;
//     time-left   only colors whose queued work exceeds the measured cost of
//                 a steal are worth taking; the one with most work is taken;
//     penalty     a color's work counts divided by its handlers' penalties
//                 (each item's share was divided when it was queued).
//   mely          all three.
// A thief decides from the victim's published counts (stealable(): queues
// on its list, or on its stealing queue for time-left) and locks only a
// victim that has something the policy would take. Under the lock, a
// victim's list is looked at, at most kScan queues from its head by the
// base rule (libasync-smp's order); the heuristics look at its tail: at most
// kTailScan queues of the list (penalty alone), or of the stealing queue
// (time-left: only queues worth a steal are on it, so the first looked at
// is usually taken; one that stopped being worth it is dropped from it
// there). The time a thief holds a victim's lock must stay small (Mely's
// lesson about libasync-smp scanning whole event queues under the lock).
#include <algorithm>
#include <sstream>

#include "color/color.hpp"
#include "sched/processor.hpp"
#include "topo/topo.hpp"

namespace loom::rt {

namespace {

constexpr unsigned kScan = 64;
constexpr unsigned kTailScan = 8;

struct Heuristics {
  bool locality = false, time_left = false, penalty = false;
};

enum class Kind { none, libasync, mely };

bool parse(const std::string& name, Kind& kind, Heuristics& h) {
  h = Heuristics{};
  if (name == "none") return kind = Kind::none, true;
  if (name == "libasync-smp") return kind = Kind::libasync, true;
  if (name == "mely") {
    kind = Kind::mely;
    h.locality = h.time_left = h.penalty = true;
    return true;
  }
  if (name.rfind("mely:", 0) != 0) return false;
  kind = Kind::mely;
  std::string rest = name.substr(5);
  if (rest == "base") return true;
  std::stringstream in(rest);
  std::string part;
  bool any = false;
  while (std::getline(in, part, ',')) {
    if (part == "locality")
      h.locality = true;
    else if (part == "time-left")
      h.time_left = true;
    else if (part == "penalty")
      h.penalty = true;
    else
      return false;
    any = true;
  }
  return any;
}

class ColorPolicy final : public ColorStealPolicy {
 public:
  ColorPolicy(Kind k, Heuristics h, std::string name, ColorLayer& layer)
      : kind_(k), h_(h), name_(std::move(name)), layer_(layer) {
    steals = k != Kind::none;
    keeps_worthy = k != Kind::none && h.time_left;
    // Without time-left a thief cannot tell a 100-cycle color from a long
    // one: it takes up to 16 at a visit (each by the policy's rule, never
    // half the victim's items), so that one lock of the victim and one wake
    // of its runner pay for several. One at a time, stealing one-event
    // colors made both processors slower than one alone (issue 22:
    // unbalanced, 0.65x none). time-left takes the one color worth it.
    max_colors = keeps_worthy ? 1 : kMaxStealColors;
  }

  const char* name() const override { return name_.c_str(); }

  bool stealable(const ColorCore& v) const override {
    if (kind_ == Kind::none) return false;
    if (keeps_worthy) return v.worthy.load(std::memory_order_relaxed) > 0;
    std::uint32_t listed = v.listed.load(std::memory_order_relaxed);
    if (h_.penalty) return listed > 0;
    // The base rule takes a queue with under half the victim's items: one
    // listed queue holding them all is not such a queue.
    return listed > 1 || (listed == 1 && v.items.load(std::memory_order_relaxed) > 1);
  }

  std::size_t order(Processor& thief, Processor** v, std::size_t n) override {
    if (kind_ == Kind::none || n == 0) return 0;
    std::sort(v, v + n, [](Processor* a, Processor* b) { return a->index() < b->index(); });
    std::size_t most = 0;
    std::uint64_t most_items = 0;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t items = load(*v[i]);
      if (items > most_items) most_items = items, most = i;
    }
    std::rotate(v, v + most, v + n);
    if (h_.locality) order_by_distance(thief, v, n);
    return n;
  }

  bool worth(const ColorQueue& q, std::uint64_t steal_cost) const override {
    if (kind_ == Kind::none) return false;
    if (!h_.time_left) return true;
    return (h_.penalty ? q.apparent : q.work) > steal_cost;
  }

  ColorQueue* pick(ColorCore& victim, std::uint64_t steal_cost) override {
    if (!h_.time_left && !h_.penalty) {
      std::uint64_t total = victim.items.load(std::memory_order_relaxed);
      unsigned seen = 0;
      // A color running shared work elsewhere with more shared work queued
      // is always worth helping: its shared work may overlap.
      for (ColorQueue* q = victim.head; q && seen < kScan; q = q->next, ++seen)
        if (q->shared ? q->count > 0 : 2 * q->count < total) return q;
      return nullptr;
    }
    ColorQueue* best = nullptr;
    std::uint64_t best_work = 0;
    unsigned seen = 0;
    if (keeps_worthy) {
      // The stealing queue from its tail: the worthy colors that would wait
      // longest on the victim (and the one whose post woke this thief).
      for (ColorQueue* q = victim.wtail; q && seen < kTailScan; ++seen) {
        ColorQueue* prev = q->wprev;
        std::uint64_t w = h_.penalty ? q->apparent : q->work;
        if (w <= steal_cost)
          victim.drop_worthy(q);  // the steal cost rose, or its work ran
        else if (!best || w > best_work)
          best = q, best_work = w;
        q = prev;
      }
      return best;
    }
    // From the list's tail, the most apparent work (penalty alone).
    for (ColorQueue* q = victim.tail; q && seen < kTailScan; q = q->prev, ++seen) {
      std::uint64_t w = q->apparent;
      if (!best || w > best_work) best = q, best_work = w;
    }
    return best;
  }

 private:
  std::uint64_t load(Processor& p) const {
    ColorCore* c = layer_.core_if_made(p.index());
    return c ? c->items.load(std::memory_order_relaxed) : 0;
  }

  Kind kind_;
  Heuristics h_;
  std::string name_;
  ColorLayer& layer_;
};

}  // namespace

bool color_policy_valid(const std::string& name) {
  Kind k;
  Heuristics h;
  return parse(name, k, h);
}

std::unique_ptr<ColorStealPolicy> make_color_policy(const std::string& name, ColorLayer& layer) {
  Kind k;
  Heuristics h;
  if (!parse(name, k, h)) return nullptr;
  return std::make_unique<ColorPolicy>(k, h, name, layer);
}

}  // namespace loom::rt
