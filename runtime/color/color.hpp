// color/color.hpp — the color layer: color queues, runners, color stealing.
//
// Structures (Mely §4.1, on fibres):
//   ColorQueue  one per live color of a cluster: the color's pending work
//               (events, and colored fibres waiting to start) in FIFO order,
//               its holders (one exclusive, or any number shared), and its
//               queued work in cycles (raw, and divided by each handler's
//               penalty). Found through the cluster's color table: 64
//               shards, each a spin lock over an intrusive chained hash
//               table (ColorQueue::hash_next; no allocation per color).
//   ColorCore   one per processor: a spin lock and the list of its color
//               queues that can be dispatched now (the "core-queue"), the
//               sub-list of those worth a steal (the "stealing queue", kept
//               only for policies that weigh work), the counts a thief
//               decides from without the lock (queued items, listed and
//               worthy queues), the processor's runner fibre, and its pools
//               of spare queues and items.
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
// list, so nobody can dispatch it, nor steal it. The stealing queue is a
// subset of the list (a queue leaves it when it leaves the list).
//
// Lock order: a table shard, then a core; never two cores at once (a thief
// unlinks under the victim's lock, then links under its own). A poster
// holds the shard lock until it holds the queue's owner lock. A queue leaves the table (empty,
// unheld, unlinked, not in transit) only under its shard lock and its owner
// lock: the runner that releases it last try-locks the shard while it holds
// the owner lock (a try never waits, so the order is kept) and recycles it
// at once; when the shard is busy the queue goes to its owner's reap list,
// freed later in bulk by the runner, under shard then owner lock. So no
// poster holds a pointer to a queue that left the table.
//
// Pools: a queue or an item comes from the pool of the processor that makes
// it (the poster's, when it is one of the cluster's; the heap otherwise, and
// back to the heap it goes) and goes back to that pool ("home") when it
// dies: by a push on the home's
// own list when it dies there, else on the home's remote list (a lock-free
// stack that only the home empties, all at once). A pool is touched by its
// processor's kernel thread only, between two fibre switches (no lock). A
// pool not drawn from for kPoolIdleNs (seen when its processor goes to
// sleep) is trimmed to kPoolKeep, a pool never holds more than kPoolMax
// spares, and shutdown empties every pool of the cluster.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/spinlock.hpp"
#include "loom/color.hpp"
#include "sched/extension.hpp"
#include "sched/steal_policy.hpp"
#include "sched/timer.hpp"

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

// A pool of spare objects of one processor (see the header comment). T has
// `T* pool_next` and `ColorCore* home`.
template <typename T>
struct Pool {
  T* local = nullptr;  // the processor's own thread only
  std::uint64_t size = 0;
  std::uint64_t drawn = 0;                      // taken from the pool since the last trim check
  std::int64_t used_ns = 0;                     // when a trim check last saw it drawn from
  alignas(64) std::atomic<T*> remote{nullptr};  // pushed by other threads, emptied by the home
};

struct ColorItem {
  ColorItem* next = nullptr;
  void (*fn)(void*) = nullptr;  // event; null for a colored fibre
  void* arg = nullptr;
  Fibre* fibre = nullptr;  // colored fibre waiting for its color
  HandlerStats* handler = nullptr;
  std::uint64_t work = 0;      // estimated cycles, counted into the queue
  std::uint64_t apparent = 0;  // work / penalty
  bool shared = false;
  ColorHold hold;  // a colored fibre's hold (Fibre::held points here)
  ColorItem* pool_next = nullptr;
  ColorCore* home = nullptr;  // the pool it returns to (nullptr: the heap's until a processor adopts it)
};

struct ColorQueue {
  Color color = 0;
  std::atomic<ColorCore*> owner{nullptr};
  ColorQueue* hash_next = nullptr;  // its shard's bucket chain (under the shard lock)
  ColorQueue** hash_pprev = nullptr;
  // Under the owner's lock:
  ColorItem* head = nullptr;
  ColorItem* tail = nullptr;
  std::uint64_t count = 0;
  std::uint64_t work = 0;
  std::uint64_t apparent = 0;
  ColorQueue* prev = nullptr;  // owner's dispatch list
  ColorQueue* next = nullptr;
  ColorQueue* wprev = nullptr;  // owner's stealing queue (a subset of the list)
  ColorQueue* wnext = nullptr;
  bool linked = false;
  bool worthy = false;          // on the stealing queue
  bool exclusive = false;       // held exclusively
  unsigned shared = 0;          // shared holders
  bool moved = false;           // stolen since its last dispatch: the next run is cold
  std::uint64_t stolen_at = 0;  // TSC when its thief began to look (moved queues)
  bool reaping = false;         // on its owner's reap list
  bool transit = false;         // being stolen: between the victim's lock and the thief's, alive
  ColorQueue* reap_next = nullptr;
  ColorQueue* pool_next = nullptr;
  ColorCore* home = nullptr;  // its pool

  bool dispatchable() const noexcept { return head && !exclusive && (head->shared || shared == 0); }
  bool idle() const noexcept { return !head && !exclusive && shared == 0; }
};

struct alignas(64) ColorCore {
  SpinLock lock;
  // Under lock:
  ColorQueue* head = nullptr;  // dispatchable queues, next to run first
  ColorQueue* tail = nullptr;
  ColorQueue* whead = nullptr;  // the stealing queue, in list order
  ColorQueue* wtail = nullptr;
  ColorQueue* reap = nullptr;  // empty queues to free
  bool stopping = false;
  // Written under lock, read without it by thieves (and by find_work on the
  // processor itself): what a thief decides from before it locks.
  std::atomic<bool> parked{true};        // the runner waits for work (or never ran)
  std::atomic<std::uint64_t> items{0};   // queued items of the queues it owns
  std::atomic<std::uint32_t> listed{0};  // queues on the list
  std::atomic<std::uint32_t> worthy{0};  // queues on the stealing queue
  std::atomic<unsigned> reap_count{0};
  std::atomic<std::uint64_t> made{0}, freed{0};  // queues made (owner at birth) and freed here
  std::atomic<std::uint64_t> posted{0};          // items ever queued here (shutdown's drain count)

  Processor* proc = nullptr;
  Fibre* runner = nullptr;
  ColorLayer* layer = nullptr;
  ColorHold hold;     // the runner's current color
  unsigned tick = 0;  // the runner's events, for sampling warm run times
  // The thief's account of its last steal (its own thread only: steal()
  // and the runner are both on its processor): colors whose first batch has
  // not run yet, the work the steal moved (the colors' queued work, warm
  // estimates), and what their first batches took here in all and in run
  // time. A new steal drops an unfinished account (a color stolen again).
  unsigned steal_left = 0;
  std::uint64_t steal_moved = 0, steal_spent = 0, steal_ran = 0;

  // Written by the owner processor only (events_run and fibres_started with
  // release: what an event posted is seen by whoever sees it counted).
  std::atomic<std::uint64_t> events_run{0}, fibres_started{0}, steal_attempts{0}, colors_stolen{0}, events_stolen{0};
  std::atomic<std::uint64_t> steals_held{0};  // looks skipped while steals were paused (did not pay)

  // The processor's own thread only (see Pool).
  Pool<ColorQueue> queues;
  Pool<ColorItem> item_pool;

  void link(ColorQueue* q, bool worthy, bool front = false) noexcept;
  void unlink(ColorQueue* q) noexcept;
  void add_worthy(ColorQueue* q) noexcept;
  void drop_worthy(ColorQueue* q) noexcept;
};

constexpr unsigned kMaxStealColors = 16;

// The timer that ends a pause of the thieves (ColorLayer::account_steal).
struct PauseTimer : TimerNode {
  ColorLayer* layer = nullptr;
};

// A color steal policy: the scheduler's StealPolicy (victim order) plus the
// choice of the color to take from a victim. stealable() runs without any
// lock, on the victim's published counts: a thief locks a victim only when
// it says yes. pick() runs under the victim's lock and returns a queue on
// its list (or nullptr).
class ColorStealPolicy : public StealPolicy {
 public:
  // Set by the constructor, read on every post (no virtual call there).
  bool steals = true;
  bool keeps_worthy = false;  // maintain the cores' stealing queues (worth() says who is on them)
  unsigned max_colors = 1;    // colors one steal may take (<= kMaxStealColors)
  virtual bool stealable(const ColorCore& victim) const = 0;
  virtual ColorQueue* pick(ColorCore& victim, std::uint64_t steal_cost) = 0;
  // Whether queue q (under its owner's lock) is one pick() could take: a
  // post that makes work behind a busy runner wakes a thief only then, or a
  // policy that finds nothing worth stealing would be woken for nothing.
  virtual bool worth(const ColorQueue& q, std::uint64_t steal_cost) const = 0;
};
// nullptr for an unknown or malformed name. `layer` gives queue lengths.
std::unique_ptr<ColorStealPolicy> make_color_policy(const std::string& name, ColorLayer& layer);
bool color_policy_valid(const std::string& name);

// The color table: 64 shards, each a spin lock over a chained hash table
// whose chains run through the queues (ColorQueue::hash_next, hash_pprev:
// doubly linked, so a queue leaves in O(1)). Grows by
// doubling at one queue per two buckets (a new color's lookup walks its
// whole chain, each queue a likely cache miss: 12 % of the unbalanced
// benchmark at two per bucket); never shrinks (8 bytes a bucket).
struct alignas(64) ColorShard {
  SpinLock lock;
  // Under lock:
  ColorQueue** buckets = nullptr;
  std::uint32_t mask = 0;
  std::uint32_t count = 0;
  ColorQueue* find(Color c, std::uint32_t h) const noexcept;
  void insert(ColorQueue* q, std::uint32_t h);
  void erase(ColorQueue* q, std::uint32_t h) noexcept;
};
// A color's hash (murmur3's finaliser): the top 6 bits choose the shard,
// the low bits the bucket.
inline std::uint32_t color_hash(Color c) noexcept {
  std::uint32_t h = c;
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

class ColorLayer final : public Extension {
 public:
  ColorLayer(Cluster& c, const ColorConfig& config);
  Cluster& cluster() const { return *cluster_; }

  ColorCore* core(unsigned index);  // made on first use, with its runner
  ColorCore* core_if_made(unsigned index) const { return cores_[index].load(std::memory_order_acquire); }

  void post(Color c, bool shared, void (*fn)(void*), void* arg, HandlerKey key);
  void start_fibre(Fibre* f);  // a colored fibre: queue it on its color
  void release(ColorHold& h);  // a colored fibre exits
  bool set_policy(const std::string& name);
  std::string policy_name();
  void set_batch(unsigned b) { batch_.store(b < 1 ? 1 : b, std::memory_order_relaxed); }
  void set_local_placement(bool local) { local_placement_.store(local, std::memory_order_relaxed); }
  ColorStats stats() const;
  std::uint64_t steal_cost() const { return steal_cost_.load(std::memory_order_relaxed); }
  // The smoothed payoff of a steal (work moved less what moving it cost),
  // and whether thieves are held back now because it is negative.
  std::int64_t steal_payoff() const { return steal_payoff_.load(std::memory_order_relaxed); }
  double steals_paid() const { return double(steals_paid_.load(std::memory_order_relaxed)) / kShareOne; }
  bool steals_paused() const noexcept;
  // The core of the calling kernel thread's processor when it is one of
  // this cluster's and its core exists (its pools may be used), else nullptr.
  ColorCore* my_core() const noexcept;

  // Extension: idle processors steal colors; shutdown stops the runners;
  // a processor going to sleep trims its pools.
  Fibre* find_work(Processor& p, bool last_look) override;
  void before_sleep(Processor& p) override;
  // At shutdown, once c's runner is gone: its spares back to the heap.
  static void empty_pools(ColorCore& c);
  void shutdown() override;
  // Every item ever posted has run (a colored fibre: started); the counts
  // it compared, if asked.
  bool drained(std::uint64_t* ran = nullptr, std::uint64_t* posted = nullptr);

  void run(ColorCore& me);  // the runner's loop

  // Pools (see the header comment); `mine` is my_core() (or nullptr).
  static ColorItem* new_item(ColorCore* mine);
  static void free_item(ColorItem* it, ColorCore* mine);
  static ColorQueue* new_queue(ColorCore* mine);
  static void free_queue(ColorQueue* q, ColorCore* mine);

 private:
  static constexpr unsigned kShards = 64;
  ColorShard& shard(std::uint32_t h) { return shards_[h >> 26]; }
  ColorCore* place(Color c);
  void enqueue(Color c, ColorItem* it);
  void link(ColorCore& o, ColorQueue* q, ColorStealPolicy* pol, bool front = false);
  bool steal(Processor& p, ColorCore& me, bool wait);
  void account_steal(ColorCore& me, std::uint64_t spent, std::uint64_t ran);
  void arm_pause_timer(std::int64_t until);
  friend void pause_timer_complete(TimerNode* n);
  void pause_timer_fired();
  void reap(ColorCore& me, ColorCore* mine, bool wait = false);
  void wake_thief();
  void schedule_runner(ColorCore& o);  // o's runner was parked
  void release_queue(ColorQueue* q, bool shared, ColorCore* mine);
  enum class Wake { none, runner, thief };  // whom a requeue wakes
  Wake requeue(ColorCore* o, ColorQueue* q, ColorCore* mine, ColorQueue*& dead);
  void wake_after_requeue(ColorCore& o, Wake w);

  Cluster* cluster_;
  std::atomic<ColorCore*> cores_[256] = {};
  SpinLock create_lock_;  // makes cores; closing_ under it
  bool closing_ = false;  // shutdown drained: no new cores (nor runners)
  ColorShard shards_[kShards];
  std::atomic<ColorStealPolicy*> policy_{nullptr};
  SpinLock policy_lock_;
  // Every policy this layer had: a thief may still be using a replaced one,
  // so none is freed (a few bytes each; programs change policy rarely).
  std::vector<std::unique_ptr<ColorStealPolicy>> policies_;
  std::atomic<unsigned> batch_;
  std::atomic<bool> local_placement_{false};
  alignas(64) std::atomic<std::uint64_t> steal_cost_{2000};
  std::atomic<std::uint64_t> stolen_work_{0};
  // Steals that must pay (see account_steal): the smoothed payoff of a
  // steal, and the pause it set (TSC deadline, length).
  static constexpr std::uint32_t kShareOne = 1024;
  std::atomic<std::int64_t> steal_payoff_{0};                // mean payoff of a steal (cycles, 1/8 a steal)
  std::atomic<std::uint32_t> steals_paid_{kShareOne};        // share of steals that paid, in 1/kShareOne
  std::atomic<std::int64_t> pause_until_{0}, pause_len_{0};  // now_ns(), ns
  std::atomic<bool> paused_{false};                          // until the pause's timer fires
  PauseTimer pause_timer_;                                   // wakes a thief when a pause ends
  std::atomic<bool> pause_timer_armed_{false};               // in the heap, or firing
  std::atomic<bool> thief_waking_{false};
};

// The cluster's color layer, made (and plugged into its scheduler) on first use.
ColorLayer& color_layer(Cluster& c);
// For loom::FibreAttr::color: attaches a hold to a created, unstarted fibre.
void color_attach(Fibre* f, Color c, bool shared);

}  // namespace loom::rt
