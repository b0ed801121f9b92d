// sched/ready_queue.hpp — a processor's (or a cluster's) ready queue.
//
// Contract, for every queue kind:
//   push(f)        any thread; f goes to the FIFO of its priority level;
//   pop(level)     the highest-priority fibre at a level <= `level` (0 is
//                  the highest), FIFO within a level; consumers are
//                  serialised internally (spin lock), so the owner, a thief
//                  and — for shared queues — every processor may call it;
//   steal(...)     like pop, but takes half the queue, gives up at once
//                  when another consumer holds it (unless told to wait: a
//                  processor's last look before it sleeps must not miss
//                  work), and reports the queue's length (capped) so the
//                  thief can decide whether the fibres stick;
//   maybe_nonempty() a racy hint for thieves and idle checks.
//
// The Nemesis kind keeps producers lock-free. Its consumers are serialised
// asymmetrically (see consumer_enter): the owner, which pops on every
// switch, pays a plain store; a thief pays a membarrier(2). A profile of
// yield with an atomic consumer flag had 19% of it in that exchange. The locked kind puts each level behind a spin
// lock (the thesis's comparison variant).
#pragma once

#include <cstddef>

#include "base/membarrier.hpp"
#include "base/nemesis.hpp"
#include "base/spinlock.hpp"
#include "loom/config.hpp"
#include "sched/fibre.hpp"

namespace loom::rt {

class ReadyQueue {
 public:
  // owned: one processor is the only regular consumer (it calls pop and the
  // owner_* members); others only steal. Not owned (staging, background):
  // every consumer takes the consumer lock.
  explicit ReadyQueue(QueueKind kind = QueueKind::nemesis, bool owned = false)
      : nemesis_(kind == QueueKind::nemesis), asymmetric_(owned && nemesis_ && asymmetric_fences()) {}

  bool is_nemesis() const { return nemesis_; }

  void push(Fibre* f) noexcept {
    if (nemesis_)
      nq_[f->priority].push(f);
    else
      lq_[f->priority].push(f);
  }

  Fibre* pop(unsigned max_level = kPriorities - 1) noexcept {
    if (!nemesis_) return pop_locked(max_level);
    if (!maybe_nonempty()) return nullptr;
    consumer_enter();
    Fibre* f = pop_nemesis(max_level);
    consumer_leave();
    return f;
  }

  // The consumer side, for the owner (or anyone, on a queue not owned).
  // Asymmetric mode: the owner marks itself busy with a plain store and a
  // compiler fence; a thief takes thief_ and then heavy_fence()s, so either
  // it sees the owner's mark (and waits it out) or the owner sees thief_
  // held (and queues behind it on the lock). Otherwise both take thief_.
  void consumer_enter() noexcept {
    if (!asymmetric_) return thief_.lock();
    owner_busy_.store(true, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (thief_.is_locked()) {
      owner_busy_.store(false, std::memory_order_release);
      thief_.lock();
      owner_locked_ = true;
    }
  }
  void consumer_leave() noexcept {
    if (!asymmetric_ || owner_locked_) {
      owner_locked_ = false;
      return thief_.unlock();
    }
    owner_busy_.store(false, std::memory_order_release);
  }
  // Inside consumer_enter/leave only.
  Fibre* pop_nemesis(unsigned max_level) noexcept {
    for (unsigned i = 0; i <= max_level; ++i)
      if (Fibre* f = nq_[i].pop()) return f;
    return nullptr;
  }

  // Takes half the queue (at least one, at most `max`) into out[], highest
  // priority first; returns how many. One steal, one heavy fence: taking a
  // single fibre per fence made a 2-processor web server spend ~15 % of its
  // CPU on membarrier IPIs and on owners waiting them out.
  std::size_t steal(Fibre** out, std::size_t max, std::size_t* length, bool wait) noexcept {
    if (!maybe_nonempty()) return 0;
    std::size_t k = 0;
    if (!nemesis_) {
      *length = 0;
      for (auto& q : lq_) *length += q.walk(~std::size_t(0));
      for (std::size_t want = half(*length, max); k < want; ++k)
        if (!(out[k] = pop_locked(kPriorities - 1))) break;
      return k;
    }
    if (wait)
      thief_.lock();
    else if (!thief_.try_lock())
      return 0;
    if (asymmetric_) {
      heavy_fence();
      while (owner_busy_.load(std::memory_order_acquire)) cpu_relax();
    }
    *length = 0;
    for (auto& q : nq_) *length += q.walk(2 * max);
    for (std::size_t want = half(*length, max); k < want; ++k)
      if (!(out[k] = pop_nemesis(kPriorities - 1))) break;
    thief_.unlock();
    return k;
  }

  bool maybe_nonempty() const noexcept {
    for (unsigned i = 0; i < kPriorities; ++i)
      if (nemesis_ ? nq_[i].maybe_nonempty() : lq_[i].maybe_nonempty()) return true;
    return false;
  }

 private:
  static std::size_t half(std::size_t length, std::size_t max) noexcept {
    std::size_t h = (length + 1) / 2;
    return h < 1 ? 1 : h > max ? max : h;
  }
  Fibre* pop_locked(unsigned max_level) noexcept {
    for (unsigned i = 0; i <= max_level; ++i)
      if (Fibre* f = lq_[i].pop()) return f;
    return nullptr;
  }

  const bool nemesis_;
  const bool asymmetric_;
  bool owner_locked_ = false;  // the owner fell back to thief_ (owner only)
  SpinLock thief_;
  std::atomic<bool> owner_busy_{false};
  NemesisQueue<Fibre> nq_[kPriorities];
  LockedQueue<Fibre> lq_[kPriorities];
};

}  // namespace loom::rt
