// sched/timer.hpp — a cluster's timer queue.
//
// A binary min-heap of TimerNode pointers by deadline (CLOCK_MONOTONIC ns),
// behind a spin lock; nodes live in their owners (a waiter on a fibre's
// stack) and know their heap index, so removal is O(log n).
//
// Firing is two-phase, which is what makes "wake exactly once" work:
//   expire(node)   runs with the heap lock held, right after the node left
//                  the heap; it decides the race with a signal (a CAS on
//                  the waiter's state) and returns true if the timeout won;
//   complete(node) runs after the heap lock is released, only for winners,
//                  and makes the owner runnable.
// An owner that was signalled removes its node with remove(), which takes
// the heap lock: so by the time remove() returns, any expire() of that node
// has finished, and nothing of the timer touches the node again.
//
// Who fires: any processor of the cluster at a scheduling point (every 16th
// pick, only while timers are pending) and in its idle loop; one idle
// processor, the keeper, sleeps only until the earliest deadline while the
// others sleep without one. add() of a new earliest deadline wakes the
// keeper to re-arm, or an idle processor if there is no keeper.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/spinlock.hpp"

namespace loom::rt {

class Cluster;

inline constexpr std::int64_t kNoDeadline = std::numeric_limits<std::int64_t>::max();

struct TimerNode {
  std::int64_t deadline = kNoDeadline;
  std::size_t index = npos;  // position in the heap, npos when not in it
  bool (*expire)(TimerNode*) = nullptr;
  void (*complete)(TimerNode*) = nullptr;
  TimerNode* next_fired = nullptr;
  static constexpr std::size_t npos = ~std::size_t(0);
};

class TimerHeap {
 public:
  // Returns true when n became the earliest deadline.
  bool add(TimerNode* n);
  // Returns true if n was still in the heap (and is now out of it).
  bool remove(TimerNode* n);
  // Fires every node due at `now` (counted as `owner`'s); returns how many
  // fired.
  std::size_t fire(std::int64_t now, Cluster& owner);
  std::int64_t next() const { return next_.load(std::memory_order_seq_cst); }
  bool pending() const { return next() != kNoDeadline; }

 private:
  void sift_up(std::size_t i);
  void sift_down(std::size_t i);
  void take(std::size_t i);
  SpinLock lock_;
  std::vector<TimerNode*> heap_;
  std::atomic<std::int64_t> next_{kNoDeadline};
};

}  // namespace loom::rt
