#include "sched/timer.hpp"

#include <utility>

#include "sched/stats.hpp"

namespace loom::rt {

void TimerHeap::sift_up(std::size_t i) {
  while (i > 0) {
    std::size_t parent = (i - 1) / 2;
    if (heap_[parent]->deadline <= heap_[i]->deadline) break;
    std::swap(heap_[parent], heap_[i]);
    heap_[parent]->index = parent;
    heap_[i]->index = i;
    i = parent;
  }
}

void TimerHeap::sift_down(std::size_t i) {
  const std::size_t n = heap_.size();
  for (;;) {
    std::size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && heap_[l]->deadline < heap_[m]->deadline) m = l;
    if (r < n && heap_[r]->deadline < heap_[m]->deadline) m = r;
    if (m == i) return;
    std::swap(heap_[m], heap_[i]);
    heap_[m]->index = m;
    heap_[i]->index = i;
    i = m;
  }
}

// Removes heap_[i]; the caller holds the lock.
void TimerHeap::take(std::size_t i) {
  TimerNode* n = heap_[i];
  TimerNode* last = heap_.back();
  heap_.pop_back();
  n->index = TimerNode::npos;
  if (last != n) {
    heap_[i] = last;
    last->index = i;
    sift_down(i);
    sift_up(last->index);
  }
  next_.store(heap_.empty() ? kNoDeadline : heap_[0]->deadline, std::memory_order_seq_cst);
}

bool TimerHeap::add(TimerNode* n) {
  SpinGuard g(lock_);
  n->index = heap_.size();
  heap_.push_back(n);
  sift_up(n->index);
  bool first = heap_[0] == n;
  if (first) next_.store(n->deadline, std::memory_order_seq_cst);
  return first;
}

bool TimerHeap::remove(TimerNode* n) {
  SpinGuard g(lock_);
  if (n->index == TimerNode::npos) return false;
  take(n->index);
  return true;
}

std::size_t TimerHeap::fire(std::int64_t now, Cluster& owner) {
  if (next() > now) return 0;
  TimerNode* winners = nullptr;
  std::size_t fired = 0;
  {
    SpinGuard g(lock_);
    while (!heap_.empty() && heap_[0]->deadline <= now) {
      TimerNode* n = heap_[0];
      take(0);
      if (n->expire(n)) {
        n->next_fired = winners;
        winners = n;
        ++fired;
      }
    }
  }
  // Counted before anyone is woken: a woken fibre may read the statistics.
  if (fired) count(owner, Stat::timer_fires, fired);
  while (winners) {
    TimerNode* n = winners;
    winners = n->next_fired;  // read before complete(): it may free n
    n->complete(n);
  }
  return fired;
}

}  // namespace loom::rt
