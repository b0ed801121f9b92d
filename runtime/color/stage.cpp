// color/stage.cpp — loom::Stage (loom/stage.hpp): colors, counters, the
// process-wide list of live stages and their table.
//
// A stage adds nothing to the color layer's queues: its policy is only the
// choice of color and of shared or exclusive for each post. What it adds is
// the accounting, kept to atomics written once per operation by whoever
// does that step (the poster, then the runner at start and at return), so
// a stage costs a heap node and three clock reads per operation over a bare
// colored post.
//
// The list of live stages is the one process-wide thing here, and on
// purpose: stages of every cluster appear in one table, the way a program's
// operator wants to read them. Its lock is a spin lock (not std::mutex:
// base/sys.hpp), taken to add or remove a stage and to format the rows,
// never to post; the rows are written out after it is released.
#include "loom/stage.hpp"

#include <time.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>

#include "base/spinlock.hpp"
#include "loom/fibre.hpp"
#include "loom/sync.hpp"
#include "sched/cancel.hpp"

namespace loom {

namespace {

std::int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void raise_max(std::atomic<std::uint64_t>& max, std::uint64_t v) noexcept {
  std::uint64_t m = max.load(std::memory_order_relaxed);
  while (v > m && !max.compare_exchange_weak(m, v, std::memory_order_relaxed)) {
  }
}

// The live stages. Leaked on purpose: a stage with static storage duration
// may be destroyed after any static of this file would be.
struct Registry {
  rt::SpinLock lock;
  Stage* head = nullptr;
};
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

const char* policy_name(StagePolicy p) {
  switch (p) {
    case StagePolicy::exclusive:
      return "exclusive";
    case StagePolicy::partitioned:
      return "partitioned";
    case StagePolicy::shared:
      return "shared";
  }
  return "?";
}

// ns in a unit that keeps 3-4 significant digits: "850ns", "12.3us",
// "4.56ms", "1.23s".
void format_ns(char* buf, std::size_t n, std::uint64_t ns) {
  if (ns < 1000)
    std::snprintf(buf, n, "%lluns", static_cast<unsigned long long>(ns));
  else if (ns < 1000000)
    std::snprintf(buf, n, "%.1fus", double(ns) / 1e3);
  else if (ns < 1000000000)
    std::snprintf(buf, n, "%.2fms", double(ns) / 1e6);
  else
    std::snprintf(buf, n, "%.2fs", double(ns) / 1e9);
}

unsigned colors_for(StagePolicy p, unsigned partitions) {
  if (p != StagePolicy::partitioned) return 1;
  if (partitions == 0 || partitions > kStagePartitionsMax)
    throw std::invalid_argument("loom: a partitioned stage takes 1 to 65536 partitions");
  return partitions;
}

}  // namespace

Stage::Stage(std::string name, StagePolicy policy, unsigned partitions, Cluster* cluster)
    : name_(std::move(name)),
      policy_(policy),
      partitions_(colors_for(policy, partitions)),
      // Pinned now: colors are per cluster, so a stage whose posts followed
      // each poster's cluster would be several unrelated domains.
      cluster_(cluster ? cluster : &Cluster::current()),
      first_(allocate_colors(partitions_)) {
  Registry& r = registry();
  rt::SpinGuard g(r.lock);
  next_ = r.head;
  if (next_) next_->prev_ = this;
  r.head = this;
}

Stage::~Stage() {
  if (own_color(current_color())) {
    std::fprintf(stderr, "loom: stage \"%s\" destroyed by one of its own operations (it would wait for itself)\n",
                 name_.c_str());
    std::abort();
  }
  // Nobody may post now (stage.hpp): once completed reaches posted, no
  // operation will touch the stage again.
  drain();
  Registry& r = registry();
  rt::SpinGuard g(r.lock);
  if (prev_)
    prev_->next_ = next_;
  else
    r.head = next_;
  if (next_) next_->prev_ = prev_;
}

void Stage::submit(Color c, bool shared, void (*run)(void*), detail::StageOp* op, HandlerKey key) noexcept {
  op->stage = this;
  op->posted_ns = now_ns();
  const std::uint64_t posted = post_.posted.fetch_add(1, std::memory_order_relaxed) + 1;
  const std::uint64_t started = run_.started.load(std::memory_order_relaxed);
  if (posted > started) raise_max(post_.queued_max, posted - started);
  // The color layer's queue publishes op (and the counts above) to the runner.
  detail::post_event(cluster_, c, shared, run, op, key);
}

std::int64_t Stage::started(const detail::StageOp& op) noexcept {
  const std::int64_t t = now_ns();
  const std::uint64_t wait = t > op.posted_ns ? std::uint64_t(t - op.posted_ns) : 0;
  run_.wait_sum.fetch_add(wait, std::memory_order_relaxed);
  raise_max(run_.wait_max, wait);
  run_.started.fetch_add(1, std::memory_order_relaxed);
  return t;
}

void Stage::finished(std::int64_t start_ns) noexcept {
  const std::int64_t t = now_ns();
  const std::uint64_t ran = t > start_ns ? std::uint64_t(t - start_ns) : 0;
  run_.run_sum.fetch_add(ran, std::memory_order_relaxed);
  raise_max(run_.run_max, ran);
  // Last: a drainer that sees this count may free the stage.
  run_.completed.fetch_add(1, std::memory_order_release);
}

void Stage::drain() const {
  if (own_color(current_color())) {
    std::fprintf(stderr, "loom: stage \"%s\" drained by one of its own operations (it would wait for itself)\n",
                 name_.c_str());
    std::abort();
  }
  const std::uint64_t target = post_.posted.load(std::memory_order_acquire);
  // Short operations finish within a few yields; long ones are waited for
  // in 100 us sleeps rather than by a processor spinning through yields.
  for (unsigned i = 0; run_.completed.load(std::memory_order_acquire) < target; ++i) {
    if (i < 64)
      this_fibre::yield();
    else
      rt::sleep_until_ns(now_ns() + 100'000);
  }
}

StageStats Stage::stats() const {
  StageStats s;
  // completed, then started, then posted: each read is at most the one
  // after it, so the differences below are not negative.
  s.completed = run_.completed.load(std::memory_order_acquire);
  const std::uint64_t started = run_.started.load(std::memory_order_acquire);
  s.posted = post_.posted.load(std::memory_order_acquire);
  s.queued = s.posted > started ? s.posted - started : 0;
  s.running = started > s.completed ? started - s.completed : 0;
  s.queued_max = post_.queued_max.load(std::memory_order_relaxed);
  s.wait_max_ns = run_.wait_max.load(std::memory_order_relaxed);
  s.run_max_ns = run_.run_max.load(std::memory_order_relaxed);
  if (started) s.wait_mean_ns = run_.wait_sum.load(std::memory_order_relaxed) / started;
  if (s.completed) s.run_mean_ns = run_.run_sum.load(std::memory_order_relaxed) / s.completed;
  // A sum read a moment after its count may hold one more operation.
  if (s.wait_mean_ns > s.wait_max_ns) s.wait_mean_ns = s.wait_max_ns;
  if (s.run_mean_ns > s.run_max_ns) s.run_mean_ns = s.run_max_ns;
  return s;
}

std::string Stage::header() {
  char line[192];
  std::snprintf(line, sizeof line, "%-20s %-15s %3s %10s %10s %7s %7s %7s %9s %9s %9s %9s\n", "stage", "policy", "cl",
                "posted", "completed", "queued", "max-q", "running", "wait-mean", "wait-max", "run-mean", "run-max");
  return line;
}

std::string Stage::row() const {
  const StageStats s = stats();
  char policy[32], wm[16], wx[16], rm[16], rx[16];
  if (policy_ == StagePolicy::partitioned)
    std::snprintf(policy, sizeof policy, "%s/%u", policy_name(policy_), partitions_);
  else
    std::snprintf(policy, sizeof policy, "%s", policy_name(policy_));
  format_ns(wm, sizeof wm, s.wait_mean_ns);
  format_ns(wx, sizeof wx, s.wait_max_ns);
  format_ns(rm, sizeof rm, s.run_mean_ns);
  format_ns(rx, sizeof rx, s.run_max_ns);
  using ull = unsigned long long;
  char nums[160];
  std::snprintf(nums, sizeof nums, " %-15s %3u %10llu %10llu %7llu %7llu %7llu %9s %9s %9s %9s\n", policy,
                cluster_->id(), ull(s.posted), ull(s.completed), ull(s.queued), ull(s.queued_max), ull(s.running), wm,
                wx, rm, rx);
  std::string line = name_;
  if (line.size() < 20) line.resize(20, ' ');
  return line + nums;
}

void Stage::print(std::FILE* out) const {
  const std::string text = header() + row();
  std::fwrite(text.data(), 1, text.size(), out);
}

void print_stages(std::FILE* out) {
  std::string text = Stage::header();
  {
    Registry& r = registry();
    rt::SpinGuard g(r.lock);
    // Newest first is the list's order; oldest first reads better.
    Stage* last = r.head;
    while (last && last->next_) last = last->next_;
    for (Stage* s = last; s; s = s->prev_) text += s->row();
  }
  std::fwrite(text.data(), 1, text.size(), out);
}

}  // namespace loom
