// sched/ready_queue.hpp — a processor's (or a cluster's) ready queue.
//
// Contract, for every queue kind:
//   push(f)        any thread; f goes to the FIFO of its priority level;
//   pop(level)     the highest-priority fibre at a level <= `level` (0 is
//                  the highest), FIFO within a level; consumers are
//                  serialised internally (spin lock), so the owner, a thief
//                  and — for shared queues — every processor may call it;
//   steal(...)     like pop, but gives up at once when another consumer
//                  holds the queue, and reports the queue's length (capped)
//                  so the thief can decide whether the fibre sticks;
//   maybe_nonempty() a racy hint for thieves and idle checks.
//
// The Nemesis kind keeps producers lock-free; its consumer lock is an
// atomic flag the owner almost never finds taken (DESIGN.md: never a kernel
// mutex on the yield path). The locked kind puts each level behind a spin
// lock (the thesis's comparison variant).
#pragma once

#include <cstddef>

#include "base/nemesis.hpp"
#include "base/spinlock.hpp"
#include "loom/config.hpp"
#include "sched/fibre.hpp"

namespace loom::rt {

class ReadyQueue {
 public:
  explicit ReadyQueue(QueueKind kind = QueueKind::nemesis) : nemesis_(kind == QueueKind::nemesis) {}

  void push(Fibre* f) noexcept {
    if (nemesis_)
      nq_[f->priority].push(f);
    else
      lq_[f->priority].push(f);
  }

  Fibre* pop(unsigned max_level = kPriorities - 1) noexcept {
    if (!nemesis_) return pop_locked(max_level);
    if (!maybe_nonempty()) return nullptr;
    consumer_.lock();
    Fibre* f = pop_nemesis(max_level);
    consumer_.unlock();
    return f;
  }

  Fibre* steal(std::size_t* length) noexcept {
    if (!maybe_nonempty()) return nullptr;
    if (!nemesis_) {
      *length = 0;
      for (auto& q : lq_) *length += q.walk(~std::size_t(0));
      return pop_locked(kPriorities - 1);
    }
    if (!consumer_.try_lock()) return nullptr;
    *length = 0;
    for (auto& q : nq_) *length += q.walk(64);
    Fibre* f = pop_nemesis(kPriorities - 1);
    consumer_.unlock();
    return f;
  }

  bool maybe_nonempty() const noexcept {
    for (unsigned i = 0; i < kPriorities; ++i)
      if (nemesis_ ? nq_[i].maybe_nonempty() : lq_[i].maybe_nonempty()) return true;
    return false;
  }

 private:
  Fibre* pop_nemesis(unsigned max_level) noexcept {
    for (unsigned i = 0; i <= max_level; ++i)
      if (Fibre* f = nq_[i].pop()) return f;
    return nullptr;
  }
  Fibre* pop_locked(unsigned max_level) noexcept {
    for (unsigned i = 0; i <= max_level; ++i)
      if (Fibre* f = lq_[i].pop()) return f;
    return nullptr;
  }

  bool nemesis_;
  SpinLock consumer_;
  NemesisQueue<Fibre> nq_[kPriorities];
  LockedQueue<Fibre> lq_[kPriorities];
};

}  // namespace loom::rt
