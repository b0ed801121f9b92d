// sched/cluster.hpp — a cluster: processors that share staging and
// background queues, an idle list and a busy list, and one StealPolicy.
//
// All scheduler state is per cluster: nothing here is process-wide, so two
// clusters with different configurations never interfere (FIELD.md: a
// peer's stealing kept statics and allowed one pool per process).
#pragma once

#include "sched/monitor.hpp"

#include <signal.h>

#include <atomic>
#include <cstddef>
#include <memory>

#include "base/spinlock.hpp"
#include "loom/cluster.hpp"
#include "sched/extension.hpp"
#include "sched/processor.hpp"
#include "sched/ready_queue.hpp"
#include "sched/steal_policy.hpp"
#include "sched/timer.hpp"

namespace loom::rt {

struct IoState;
class ColorLayer;

class Cluster {
 public:
  static constexpr std::size_t kMaxProcessors = 256;

  Cluster(const SchedConfig& config, unsigned id);
  // Stops the processors, joins their threads and frees their stacks. The
  // Cluster and Processor objects themselves are never freed (about 1 KiB
  // per processor): a thread that has just published work for one of them
  // may still be waking it — push, then wake, is the protocol — when the
  // last fibre finishes and the owner destroys the cluster. Type-stable
  // memory turns that late wake into a harmless spurious one.
  void shutdown();

  const SchedConfig& config() const { return config_; }
  // Work queued that a processor may not see soon: if the monitor naps,
  // it looks (only for a cluster it watches; sched/monitor.hpp).
  void announce_queued() const {
    if (handoff_on_) monitor_queued();
  }
  unsigned id() const { return id_; }

  // Its processors' kernel threads are named prefix + index, for top, ps
  // and gdb: "loom/P0" in the default cluster, "loom/c2/P0" in cluster 2,
  // "loom/off0" in the offload cluster (which sets its prefix when made).
  // The adopted main thread keeps the program's name.
  const char* thread_prefix() const { return thread_prefix_.load(std::memory_order_seq_cst); }
  // `prefix` must outlive the cluster; renames the running threads too.
  void set_thread_prefix(const char* prefix);

  // Starts n processors; the first one adopts the calling thread if `adopt`.
  std::size_t add_processors(std::size_t n, bool adopt = false);
  std::size_t size() const { return nprocs_.load(std::memory_order_acquire); }
  Processor* processor(std::size_t i) const { return procs_[i].load(std::memory_order_acquire); }

  // Spare processors (sched/monitor.cpp; DESIGN.md, "Lost processors"):
  // kernel threads beside the cluster's processors, started by the monitor
  // when a processor is lost to a call or a fibre loom cannot see while
  // fibres wait for it, and parked when none has been lost for a while.
  // Not counted in size(), never placed on: they take work by stealing
  // (from a lost processor also with stealing off) and from the shared
  // queues. Index kMaxProcessors + k; at most kMaxSpares (then a notice).
  static constexpr std::size_t kMaxSpares = 256;
  std::size_t spare_count() const { return nspares_.load(std::memory_order_acquire); }
  Processor* spare(std::size_t i) const { return spares_[i].load(std::memory_order_acquire); }
  // The processor (or spare) whose kernel thread runs f now, by its
  // running_id; nullptr if none: a moment's answer (cpu_clock.cpp; the C
  // layer's interruption of a glibc call, capi/pthread/cancel.cpp).
  Processor* runner_of(const Fibre* f) const noexcept;
  // The same, by the fibre's id (a fibre that may have ended: never read).
  Processor* runner_of_id(std::uint64_t id) const noexcept;
  // Wakes a parked spare or starts a new one; false at the cap.
  bool activate_spare();
  // Every active spare parks at its next idle moment.
  void retire_spares();
  void spare_parks() { active_spares_.fetch_sub(1, std::memory_order_relaxed); }
  void spare_unparks() { active_spares_.fetch_add(1, std::memory_order_relaxed); }
  unsigned active_spares() const { return active_spares_.load(std::memory_order_relaxed); }
  // More than one processor may run its fibres (a spare counts): the rules
  // that wake a thief for work queued behind a running fibre apply.
  bool several() const { return size() > 1 || active_spares_.load(std::memory_order_relaxed) > 0; }
  // Processors the monitor found lost (a hint, set at each of its looks).
  void set_lost(int n) { lost_.store(n, std::memory_order_relaxed); }
  int lost_relaxed() const { return lost_.load(std::memory_order_relaxed); }
  // Work outside the queues that only a processor's look would collect
  // (readiness on the epoll set), looked at without taking it: any thread.
  bool outside_ready();

  // Placement of a new fibre (work pushing or sharing, per the config).
  void place_new(Fibre* f);
  // Where work pushing sends a new fibre: round-robin per creating
  // processor (from its own index), so that a processor making fibres
  // writes no shared line; kernel threads and other clusters share rr_.
  Processor* next_home();
  // Queues shared by the cluster's processors. Pushing wakes an idle one.
  void push_staging(Fibre* f);
  void push_background(Fibre* f);
  Fibre* pop_staging(Processor& p);
  bool staging_nonempty() const { return staging_.maybe_nonempty(); }
  bool background_nonempty() const { return background_.maybe_nonempty(); }
  Fibre* pop_background(Processor& p);
  ReadyQueue* shared_queue() { return config_.queue == QueueKind::shared ? &shared_ : nullptr; }
  bool stealing() const { return config_.stealing && config_.queue != QueueKind::shared; }
  // Takes half a victim's queue (up to kStealBatch): returns one fibre and
  // queues the others on the thief. wait: take each victim's consumer lock
  // even if another consumer holds it, instead of moving on (for the last
  // look before sleeping).
  Fibre* steal(Processor& thief, bool wait = false);
  static constexpr std::size_t kStealBatch = 32;

  // Idle and busy lists (thesis §3.2.3).
  void go_idle(Processor& p);
  void go_busy(Processor& p);
  // A stopping processor leaves both lists.
  void leave(Processor& p);
  // Call after publishing work on p's queue: wakes p if it is idle, or, if
  // p is busy, one idle processor to steal from it (not when the work is a
  // pinned fibre, which no thief may take: `stealable` false).
  void wake(Processor& p, bool stealable = true);
  int idle_processors() const { return idle_count_.load(std::memory_order_seq_cst); }
  // The same as a hint, without ordering (a pusher's cheap first look).
  int idle_processors_relaxed() const { return idle_count_.load(std::memory_order_relaxed); }
  // Wakes the processor at the front of the idle list, if any.
  bool wake_one();
  // After publishing work behind a busy processor: wakes a sleeper to steal.
  void wake_thief();
  // A processor woken to steal has looked for work: another may be woken.
  void thief_done() { thief_waking_.store(false, std::memory_order_relaxed); }
  // An idle processor spinning before it sleeps (Processor::spin_for_work)
  // is awake and steals: while one spins, wake_thief wakes no sleeper.
  void spin_enter() { spinning_.fetch_add(1, std::memory_order_relaxed); }
  // found: it leaves with work, not to sleep. The last spinner to leave so
  // hands the look-out to a sleeper when some sleep (Go's rule: work a
  // pusher left to it may still be queued behind a busy processor).
  void spin_leave(bool found);
  int spinning_relaxed() const { return spinning_.load(std::memory_order_relaxed); }

  // Timers (see sched/timer.hpp). add_timer wakes whoever must re-arm.
  void add_timer(TimerNode* n);
  void fire_timers();
  alignas(64) TimerHeap timers;
  bool claim_keeper(Processor& p);
  void release_keeper(Processor& p);
  // Whether a sleeper holds the timers' keeping now (the monitor's look: a
  // due timer nobody keeps while processors sleep, monitor.cpp).
  bool timers_kept() const { return keeper_.load(std::memory_order_seq_cst) != nullptr; }

  // Extensions (sched/extension.hpp): at most kMaxExtensions, added once
  // each, never removed. The scheduler calls them only through the contract.
  static constexpr unsigned kMaxExtensions = 4;
  void add_extension(Extension* e);
  unsigned extension_count() const { return next_ext_.load(std::memory_order_acquire); }
  Extension* extension(unsigned i) const { return ext_[i].load(std::memory_order_acquire); }
  void shutdown_extensions();

  // The layers' per-cluster state, opaque here: each layer makes its own on
  // first use and plugs into the scheduler as an Extension.
  alignas(64) std::atomic<IoState*> io{nullptr};        // epoll set and poller
  std::atomic<ColorLayer*> color{nullptr};              // color queues and runners
  alignas(64) std::atomic<long> fibres{0};  // live fibres that belong to this cluster
  loom::Cluster* facade = nullptr;  // the public object for this cluster
  // Has a public object (not destroyed), for threads outside the cluster
  // (the monitor): facade is stored with __atomic_store_n.
  bool alive() const { return __atomic_load_n(&facade, __ATOMIC_ACQUIRE) != nullptr; }
  // The signal mask of the thread that added the first processors: a spare
  // (started by the monitor, which blocks every signal) takes it.
  sigset_t processor_mask() const { return processor_mask_; }
  // Counted off the cluster's processors (sched/stats.hpp).
  alignas(64) Counters shared_counters;
  LiveFibres live_foreign;  // fibres started off its processors
  // Sums over the processors and the shared block; one processor's own.
  ClusterStats stats() const;
  ClusterStats processor_stats(std::size_t i) const;
  // Every cluster ever made, newest first (a destroyed one stays, with no
  // facade): for the statistics tables.
  static Cluster* first();
  Cluster* next_made() const { return next_made_; }

 private:
  Cluster* next_made_ = nullptr;
  void list_remove(Processor& p);
  void list_append(Processor& p, ListState s);

  // Layout: what every scheduling decision reads (config_, procs_, io,
  // policy_) stays apart from what processors write as they come and go
  // (the queues, the idle/busy lists, the timer heap, the fibre count), each
  // group on cache lines of its own: with one cluster of several
  // processors, a shared line written at every idle/busy transition was
  // re-read by every yield and I/O call.
  SchedConfig config_;
  bool handoff_on_ = false;  // config_.handoff_us != 0, read on push paths
  unsigned id_;
  std::string own_prefix_;
  std::atomic<const char*> thread_prefix_{nullptr};
  std::atomic<Processor*> procs_[kMaxProcessors] = {};
  std::atomic<std::size_t> nprocs_{0};
  SpinLock grow_lock_;
  std::unique_ptr<StealPolicy> policy_;
  std::atomic<Extension*> ext_[kMaxExtensions] = {};
  std::atomic<unsigned> next_ext_{0};
  alignas(64) std::atomic<unsigned> rr_{0};
  alignas(64) ReadyQueue staging_;
  alignas(64) ReadyQueue background_;
  alignas(64) ReadyQueue shared_;

  alignas(64) SpinLock list_lock_;
  Processor* busy_head_ = nullptr;  // longest busy first
  Processor* busy_tail_ = nullptr;
  Processor* idle_head_ = nullptr;
  Processor* idle_tail_ = nullptr;
  std::atomic<int> idle_count_{0};
  std::atomic<bool> thief_waking_{false};
  std::atomic<int> spinning_{0};
  std::atomic<Processor*> keeper_{nullptr};
  Cluster* next_retired_ = nullptr;

  alignas(64) std::atomic<Processor*> spares_[kMaxSpares] = {};
  std::atomic<std::size_t> nspares_{0};
  std::atomic<unsigned> active_spares_{0};
  std::atomic<int> lost_{0};
  sigset_t processor_mask_;  // set by add_processors, before any spare exists
};

}  // namespace loom::rt
