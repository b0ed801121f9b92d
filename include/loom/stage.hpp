// loom/stage.hpp — stages: a named group of related operations whose
// concurrency the stage decides, built on colors (loom/color.hpp).
//
//   loom::Stage cache("cache", loom::StagePolicy::partitioned, 64);
//   cache.post(file_id, [=] { lookup(file_id); });   // one file's work in order
//   loom::Stage log("log", loom::StagePolicy::exclusive);
//   log.post([=] { append(line); });                 // never two at once
//   cache.print(stderr);  loom::print_stages(stderr);
//
// Callers hand work to a stage and go on; the stage runs it later as colored
// events of its cluster, so operations of one stage run one after another
// on a processor's event runner (batches of one color: the cohort the stage
// exists for) and the stage's policy says which may run at the same time:
//
//   exclusive    one color: the stage's operations never overlap and start
//                in the order they were posted (a monitor without a lock:
//                the stage's data needs no synchronisation);
//   partitioned  N colors: post(key, f) runs f under the color of key's
//                partition, so work of one key (and of keys that share its
//                partition, partition_of()) is serialised and starts in
//                posting order, and different partitions run in parallel;
//                post(f) without a key spreads work over the partitions in
//                turn, with no order among it;
//   shared       one color, posted shared: operations may overlap each
//                other; post_exclusive(f) runs f with none of them (a
//                reader-writer lock the stage holds for its callers).
//   post_exclusive(f) on the other policies is post(f).
// Ordering is per poster: two fibres posting at once are ordered by whoever
// reached the color's queue first.
//
// Cluster. A stage's colors belong to one cluster, fixed at construction
// (the creating caller's cluster by default); posts from anywhere go there.
// Operations are events: they should run to completion without blocking.
// They may block (a loom mutex, loom I/O), but then hold their color and the
// processor's event runner until they return (color.hpp).
//
// Statistics. Each stage counts what a queueing model needs (StageStats):
// posts, starts and completions, the time from post to start (waiting) and
// from start to return (running) on the monotonic clock, their sums and
// maxima — a handful of relaxed atomic adds per operation, the clock read
// three times, no lock. The queue length is posted - started at the moment
// stats() reads them.
//
// Lifetime and thread safety. Every member may be called concurrently from
// any fibre or kernel thread. The destructor waits until every operation
// posted to the stage has returned (posting to a stage while it is being
// destroyed is a use after free); destroying a stage or calling drain() from
// one of its own operations is a deadlock, reported on stderr before the
// process aborts. From an operation of another color it blocks that
// processor's event runner, so it waits forever if the stage's work sits
// behind it on that runner and nobody steals it (policy "none"): drain and
// destroy stages from fibres. The colors of a destroyed stage are not
// reused.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>

#include "loom/cluster.hpp"
#include "loom/color.hpp"

namespace loom {

enum class StagePolicy : unsigned char { exclusive, partitioned, shared };
inline constexpr unsigned kStagePartitionsMax = 65536;  // = LOOM_STAGE_PARTITIONS_MAX

// A snapshot of a stage's counters; times in ns. Means are over the
// operations that have started (wait) or returned (run).
struct StageStats {
  std::uint64_t posted = 0;                         // operations handed to the stage
  std::uint64_t completed = 0;                      // operations that have returned
  std::uint64_t queued = 0;                         // posted, not yet started (now)
  std::uint64_t running = 0;                        // started, not yet returned (now)
  std::uint64_t queued_max = 0;                     // the most ever queued, as seen by a post
  std::uint64_t wait_mean_ns = 0, wait_max_ns = 0;  // post -> start
  std::uint64_t run_mean_ns = 0, run_max_ns = 0;    // start -> return
};

class Stage;

namespace detail {
// What every queued operation starts with: its stage and when it was posted.
struct StageOp {
  Stage* stage;
  std::int64_t posted_ns;
};
template <typename F>
struct StageOpOf : StageOp {
  template <typename G>
  explicit StageOpOf(G&& g) : StageOp{nullptr, 0}, fn(std::forward<G>(g)) {}
  F fn;
};
// A C-style operation: fn(arg).
struct StageCall {
  void (*fn)(void*);
  void* arg;
  void operator()() const { fn(arg); }
};
template <typename F>
void run_stage_op(void* p);
}  // namespace detail

class Stage {
 public:
  // partitions: the number of colors of a partitioned stage (1 ..
  // kStagePartitionsMax; others ignore it). cluster: where the operations
  // run; nullptr for the caller's cluster. Throws std::invalid_argument for
  // a partitioned stage with a partition count outside that range.
  explicit Stage(std::string name, StagePolicy policy = StagePolicy::exclusive, unsigned partitions = 64,
                 Cluster* cluster = nullptr);
  ~Stage();
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  template <typename F, typename = std::enable_if_t<std::is_invocable_v<std::decay_t<F>&>>>
  void post(F&& f) {
    submit_callable(next_color(), policy_ == StagePolicy::shared, std::forward<F>(f));
  }
  template <typename F, typename = std::enable_if_t<std::is_invocable_v<std::decay_t<F>&>>>
  void post(std::uint64_t key, F&& f) {
    submit_callable(color_of(key), policy_ == StagePolicy::shared, std::forward<F>(f));
  }
  template <typename F, typename = std::enable_if_t<std::is_invocable_v<std::decay_t<F>&>>>
  void post_exclusive(F&& f) {
    submit_callable(next_color(), false, std::forward<F>(f));
  }
  // C-style: fn(arg), measured by the color layer as handler fn.
  void post(void (*fn)(void*), void* arg) { submit_call(next_color(), policy_ == StagePolicy::shared, fn, arg); }
  void post(std::uint64_t key, void (*fn)(void*), void* arg) {
    submit_call(color_of(key), policy_ == StagePolicy::shared, fn, arg);
  }
  void post_exclusive(void (*fn)(void*), void* arg) { submit_call(next_color(), false, fn, arg); }

  // Waits (blocking the fibre; yielding, then sleeping in short steps) until
  // as many operations have returned as had been posted when it was called:
  // at rest, until the stage is idle.
  void drain() const;

  StageStats stats() const;
  // One table row under a header line: name, policy, the counters and the
  // times in readable units.
  void print(std::FILE* out) const;

  const std::string& name() const noexcept { return name_; }
  StagePolicy policy() const noexcept { return policy_; }
  unsigned partitions() const noexcept { return partitions_; }
  Cluster& cluster() const noexcept { return *cluster_; }
  // The stage's colors are first_color() .. first_color() + partitions() - 1.
  Color first_color() const noexcept { return first_; }
  // The partition a key maps to (0 for the other policies): Fibonacci
  // hashing, so keys that differ only in high bits or by a stride (aligned
  // pointers) still spread.
  unsigned partition_of(std::uint64_t key) const noexcept {
    std::uint64_t h = (key * 0x9E3779B97F4A7C15ull) >> 32;
    return unsigned((h * partitions_) >> 32);
  }

 private:
  template <typename F>
  friend void detail::run_stage_op(void* p);
  friend void print_stages(std::FILE* out);

  Color color_of(std::uint64_t key) const noexcept { return first_ + partition_of(key); }
  Color next_color() noexcept {
    if (partitions_ == 1) return first_;
    return first_ + post_.next.fetch_add(1, std::memory_order_relaxed) % partitions_;
  }
  template <typename F>
  void submit_callable(Color c, bool shared, F&& f) {
    using D = std::decay_t<F>;
    submit(c, shared, &detail::run_stage_op<D>, new detail::StageOpOf<D>(std::forward<F>(f)), handler_key<D>());
  }
  void submit_call(Color c, bool shared, void (*fn)(void*), void* arg) {
    submit(c, shared, &detail::run_stage_op<detail::StageCall>,
           new detail::StageOpOf<detail::StageCall>(detail::StageCall{fn, arg}), reinterpret_cast<HandlerKey>(fn));
  }
  // Stamps and counts op, then posts it; op may have run and been freed by
  // the time this returns.
  void submit(Color c, bool shared, void (*run)(void*), detail::StageOp* op, HandlerKey key) noexcept;
  // Around one operation: started() returns the start time; finished() is
  // the operation's last touch of the stage (a drainer may free it after).
  std::int64_t started(const detail::StageOp& op) noexcept;
  void finished(std::int64_t start_ns) noexcept;
  std::string row() const;  // a table line of print() and print_stages()
  static std::string header();
  bool own_color(Color c) const noexcept { return c >= first_ && c - first_ < partitions_; }

  const std::string name_;
  const StagePolicy policy_;
  const unsigned partitions_;  // colors: 1 unless partitioned
  Cluster* const cluster_;
  const Color first_;
  Stage* prev_ = nullptr;  // the list of live stages (print_stages)
  Stage* next_ = nullptr;

  // Written by posters, and by runners: on separate lines.
  struct alignas(64) PostSide {
    std::atomic<std::uint64_t> posted{0};
    std::atomic<std::uint64_t> queued_max{0};
    std::atomic<std::uint32_t> next{0};  // post() without a key, partitioned
  } post_;
  struct alignas(64) RunSide {
    std::atomic<std::uint64_t> started{0};
    std::atomic<std::uint64_t> wait_sum{0}, wait_max{0};
    std::atomic<std::uint64_t> run_sum{0}, run_max{0};
    std::atomic<std::uint64_t> completed{0};
  } run_;
};

// Every live stage of the process, one row each under one header line.
void print_stages(std::FILE* out);

namespace detail {
template <typename F>
void run_stage_op(void* p) {
  auto* op = static_cast<StageOpOf<F>*>(p);
  Stage* s = op->stage;
  const std::int64_t t0 = s->started(*op);
  op->fn();
  delete op;
  s->finished(t0);
}
}  // namespace detail

}  // namespace loom
