// color/color.hpp — the color layer: color queues, runners, color stealing.
//
// Structures (Mely §4.1, on fibres):
//   ColorQueue  one per live color of a cluster: the color's pending work
//               (events, and colored fibres waiting to start) in FIFO order,
//               its holders (one exclusive, or any number shared), and its
//               queued work in cycles (raw, and divided by each handler's
//               penalty). Found through the cluster's color table.
//   ColorCore   one per processor: a spin lock and the list of its color
//               queues that can be dispatched now (the "core-queue"), its
//               count of queued items, and the processor's runner fibre.
//   Runner      a pinned fibre per processor that takes the first color of
//               its core, runs up to `batch` of its items, then moves the
//               color to the back of the list and goes on; parks when the
//               list is empty, after its context is saved (invariant 1).
//
// The color→processor map is ColorQueue::owner, changed only under the old
// owner's lock by a thief (so "lock the owner, then check it is still the
// owner" gives a stable view). A queue is on its owner's list exactly when
// it is dispatchable: it has items, nobody holds it exclusively, and its head
// is shared or nobody holds it at all (and no thief has it in transit
// between the victim's lock and its own). Mutual exclusion is therefore a
// property of the queue, not of the processor: a queue that is held is on no
// list, so nobody can dispatch it, nor steal it.
//
// Lock order: a table shard, then a core; never two cores at once (a thief
// unlinks under the victim's lock, then links under its own). A poster
// holds the shard lock for the whole post, and a queue is freed (empty,
// unheld, unlinked) only under its shard lock and owner lock, so no poster
// holds a pointer to a freed queue.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/spinlock.hpp"
#include "loom/color.hpp"
#include "sched/extension.hpp"
#include "sched/steal_policy.hpp"

namespace loom::rt {

class Cluster;
class Fibre;
class Processor;
struct ColorQueue;
struct ColorCore;
class ColorLayer;

// A handler's measured costs, process-wide (a handler is code: its cost does
// not depend on the cluster). Smoothed means in TSC cycles; "cold" runs are
// the first of a color after it moved to another processor.
struct HandlerStats {
  std::atomic<HandlerKey> key{nullptr};
  std::atomic<std::uint64_t> warm{0};  // 0: no sample yet
  std::atomic<std::uint64_t> cold{0};
  std::atomic<double> penalty_override{0};  // 0: measured
  std::uint64_t estimate() const noexcept;  // cycles one run is expected to take
  double penalty() const noexcept;          // >= 1
  void record(std::uint64_t cycles, bool cold_run) noexcept;
};
HandlerStats* handler_stats(HandlerKey key) noexcept;  // never null (a shared slot when the table is full)

// What a fibre holds (Fibre::held): a colored fibre's color, or a runner's
// current one.
struct ColorHold {
  Color color = 0;
  bool shared = false;
  bool runner = false;
  ColorQueue* queue = nullptr;  // held queue (colored fibre, once started)
  ColorLayer* layer = nullptr;
};

struct ColorItem {
  ColorItem* next = nullptr;
  void (*fn)(void*) = nullptr;  // event; null for a colored fibre
  void* arg = nullptr;
  Fibre* fibre = nullptr;       // colored fibre waiting for its color
  HandlerStats* handler = nullptr;
  std::uint64_t work = 0;       // estimated cycles, counted into the queue
  std::uint64_t apparent = 0;   // work / penalty
  bool shared = false;
  ColorHold hold;               // a colored fibre's hold (Fibre::held points here)
};

struct ColorQueue {
  Color color = 0;
  std::atomic<ColorCore*> owner{nullptr};
  // Under the owner's lock:
  ColorItem* head = nullptr;
  ColorItem* tail = nullptr;
  std::uint64_t count = 0;
  std::uint64_t work = 0;
  std::uint64_t apparent = 0;
  ColorQueue* prev = nullptr;  // owner's dispatch list
  ColorQueue* next = nullptr;
  bool linked = false;
  bool exclusive = false;      // held exclusively
  unsigned shared = 0;         // shared holders
  bool moved = false;          // stolen since its last dispatch: the next run is cold
  bool reaping = false;        // on its owner's reap list
  bool transit = false;        // being stolen: between the victim's lock and the thief's, alive
  ColorQueue* reap_next = nullptr;

  bool dispatchable() const noexcept { return head && !exclusive && (head->shared || shared == 0); }
  bool idle() const noexcept { return !head && !exclusive && shared == 0; }
};

struct alignas(64) ColorCore {
  SpinLock lock;
  // Under lock:
  ColorQueue* head = nullptr;  // dispatchable queues, next to run first
  ColorQueue* tail = nullptr;
  std::uint64_t listed = 0;    // queues on the list
  std::atomic<std::uint64_t> items{0};  // queued items of the queues it owns (racy reads by thieves)
  bool parked = true;          // the runner waits for work (or never ran)
  bool stopping = false;
  ColorQueue* reap = nullptr;  // empty queues to free
  std::atomic<unsigned> reap_count{0};  // written under lock, read as a hint

  Processor* proc = nullptr;
  Fibre* runner = nullptr;
  ColorLayer* layer = nullptr;
  ColorHold hold;  // the runner's current color

  // Written by the owner processor only.
  std::atomic<std::uint64_t> events_run{0}, fibres_started{0}, steal_attempts{0}, colors_stolen{0}, events_stolen{0};

  void link(ColorQueue* q, bool front = false) noexcept;
  void unlink(ColorQueue* q) noexcept;
};

// A color steal policy: the scheduler's StealPolicy (victim order) plus the
// choice of the color to take from a victim. pick() runs under the victim's
// lock and returns a queue on its list (or nullptr).
class ColorStealPolicy : public StealPolicy {
 public:
  virtual bool steals() const { return true; }
  virtual ColorQueue* pick(ColorCore& victim, std::uint64_t steal_cost) = 0;
  // Whether queue q (under its owner's lock) is one pick() could take: a
  // post that makes work behind a busy runner wakes a thief only then, or a
  // policy that finds nothing worth stealing would be woken for nothing.
  virtual bool worth(const ColorQueue& q, std::uint64_t steal_cost) const = 0;
};
// nullptr for an unknown or malformed name. `layer` gives queue lengths.
std::unique_ptr<ColorStealPolicy> make_color_policy(const std::string& name, ColorLayer& layer);
bool color_policy_valid(const std::string& name);

class ColorLayer final : public Extension {
 public:
  ColorLayer(Cluster& c, const ColorConfig& config);
  Cluster& cluster() const { return *cluster_; }

  ColorCore* core(unsigned index);  // made on first use, with its runner
  ColorCore* core_if_made(unsigned index) const { return cores_[index].load(std::memory_order_acquire); }

  void post(Color c, bool shared, void (*fn)(void*), void* arg, HandlerKey key);
  void start_fibre(Fibre* f);         // a colored fibre: queue it on its color
  void release(ColorHold& h);         // a colored fibre exits
  bool set_policy(const std::string& name);
  std::string policy_name();
  void set_batch(unsigned b) { batch_.store(b < 1 ? 1 : b, std::memory_order_relaxed); }
  void set_local_placement(bool local) { local_placement_.store(local, std::memory_order_relaxed); }
  ColorStats stats() const;
  std::uint64_t steal_cost() const { return steal_cost_.load(std::memory_order_relaxed); }

  // Extension: idle processors steal colors; shutdown stops the runners.
  Fibre* find_work(Processor& p, bool last_look) override;
  void shutdown() override;

  void run(ColorCore& me);  // the runner's loop

 private:
  static constexpr unsigned kShards = 64;
  struct Shard {
    SpinLock lock;
    std::unordered_map<Color, ColorQueue*> map;
  };
  Shard& shard(Color c) { return shards_[(c * 0x9E3779B1u) >> 26]; }
  ColorCore* place(Color c);
  void enqueue(Color c, ColorItem* it);
  bool steal(Processor& p, ColorCore& me, bool wait);
  void reap(ColorCore& me);
  void wake_thief();
  void release_queue(ColorQueue* q, bool shared, ColorCore* mine);
  bool requeue(ColorCore* o, ColorQueue* q, ColorCore* mine);

  Cluster* cluster_;
  std::atomic<ColorCore*> cores_[256] = {};
  SpinLock create_lock_;  // makes cores; closing_ under it
  bool closing_ = false;  // shutdown began: no new cores (nor runners)
  Shard shards_[kShards];
  std::atomic<ColorStealPolicy*> policy_{nullptr};
  SpinLock policy_lock_;
  // Every policy this layer had: a thief may still be using a replaced one,
  // so none is freed (a few bytes each; programs change policy rarely).
  std::vector<std::unique_ptr<ColorStealPolicy>> policies_;
  std::atomic<unsigned> batch_;
  std::atomic<bool> local_placement_{false};
  alignas(64) std::atomic<std::uint64_t> steal_cost_{2000};
  std::atomic<std::uint64_t> stolen_work_{0};
  std::atomic<std::uint64_t> live_{0};
  std::atomic<bool> thief_waking_{false};
};

// The cluster's color layer, made (and plugged into its scheduler) on first use.
ColorLayer& color_layer(Cluster& c);
// For loom::FibreAttr::color: attaches a hold to a created, unstarted fibre.
void color_attach(Fibre* f, Color c, bool shared);

}  // namespace loom::rt
