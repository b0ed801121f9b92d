// base/nemesis.hpp — intrusive FIFO queues of nodes that carry a `next` link.
//
// NemesisQueue is the lock-free multi-producer single-consumer queue of the
// MPICH Nemesis channel (Buntinas et al.), which the thesis uses for ready
// queues. Contract:
//   push()  any thread, any time, wait-free (one atomic exchange);
//   pop()   one consumer at a time — callers serialise consumers with a lock
//           of their own (the ready queue's consumer lock);
//   walk()  the consumer may look at up to n queued nodes without removing.
// A node may be in at most one queue at a time.
//
// The one subtle state: a producer has swapped itself into `tail_` but not
// yet linked `prev->next` (or `head_`). pop() sees the queue as empty in that
// window when the node would be the first one — which is correct for a
// linearisable MPSC queue because that push has not completed — and, when the
// node is behind the one being popped, waits the few instructions until the
// link is written.
//
// LockedQueue is the comparison variant: the same interface behind a spin lock.
#pragma once

#include <atomic>
#include <cstddef>

#include "base/spinlock.hpp"

namespace loom::rt {

template <typename Node>
class NemesisQueue {
 public:
  void push(Node* n) noexcept {
    n->next.store(nullptr, std::memory_order_relaxed);
    Node* prev = tail_.exchange(n, std::memory_order_seq_cst);
    if (prev)
      prev->next.store(n, std::memory_order_release);
    else
      head_.store(n, std::memory_order_release);
  }

  Node* pop() noexcept {
    Node* n = head_.load(std::memory_order_acquire);
    if (!n) return nullptr;
    Node* next = n->next.load(std::memory_order_acquire);
    if (next) {
      head_.store(next, std::memory_order_relaxed);
      return n;
    }
    head_.store(nullptr, std::memory_order_relaxed);
    Node* expected = n;
    if (tail_.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) return n;
    // A producer is between its exchange and its link: wait for the link.
    while (!(next = n->next.load(std::memory_order_acquire))) cpu_relax();
    head_.store(next, std::memory_order_relaxed);
    return n;
  }

  // Counts queued nodes, stopping at `limit`. Consumer only.
  std::size_t walk(std::size_t limit) const noexcept {
    std::size_t k = 0;
    for (Node* n = head_.load(std::memory_order_acquire); n && k < limit; n = n->next.load(std::memory_order_acquire)) ++k;
    return k;
  }

  // May be called by anyone; a hint only (true while a push is completing).
  bool maybe_nonempty() const noexcept { return tail_.load(std::memory_order_relaxed) != nullptr; }

 private:
  alignas(64) std::atomic<Node*> head_{nullptr};  // consumer side
  alignas(64) std::atomic<Node*> tail_{nullptr};  // producer side
};

template <typename Node>
class LockedQueue {
 public:
  void push(Node* n) noexcept {
    n->next.store(nullptr, std::memory_order_relaxed);
    SpinGuard g(lock_);
    if (tail_)
      tail_->next.store(n, std::memory_order_relaxed);
    else
      head_ = n;
    tail_ = n;
    count_.store(count_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  Node* pop() noexcept {
    if (count_.load(std::memory_order_relaxed) == 0) return nullptr;
    SpinGuard g(lock_);
    Node* n = head_;
    if (!n) return nullptr;
    head_ = n->next.load(std::memory_order_relaxed);
    if (!head_) tail_ = nullptr;
    count_.store(count_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    return n;
  }
  std::size_t walk(std::size_t limit) const noexcept {
    std::size_t c = count_.load(std::memory_order_relaxed);
    return c < limit ? c : limit;
  }
  bool maybe_nonempty() const noexcept { return count_.load(std::memory_order_relaxed) != 0; }

 private:
  SpinLock lock_;
  Node* head_ = nullptr;
  Node* tail_ = nullptr;
  std::atomic<std::size_t> count_{0};
};

}  // namespace loom::rt
