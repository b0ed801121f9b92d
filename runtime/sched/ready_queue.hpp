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
// The Nemesis kind keeps producers lock-free. Its consumers (the owner, and
// thieves) are serialised by a spin lock, thief_ (StealFence::lock, the
// default), or asymmetrically (StealFence::membarrier, see consumer_enter):
// the owner, which pops on every switch, pays a plain store and a thief a
// membarrier(2). A profile of yield with an atomic consumer flag had 19% of
// it in that exchange. But a membarrier interrupts every CPU that runs the
// process: on this 2-CPU VM it takes ~40 µs when the other CPU is busy,
// which is when there is something to steal, and the stolen fibre waits
// that long (the lock benchmark's slow rounds). The locked kind puts each
// level behind a spin lock (the thesis's comparison variant).
//
// An owned Nemesis queue also has an owner-local FIFO per level: fibres the
// owner makes ready itself (a yield, a wake-up, a new fibre) are linked
// there with plain stores inside a consumer section (push_owned), since
// only a consumer — the owner, or a thief past the fence — ever touches
// it. The Nemesis push's atomic exchange was half of a yield's cycles in
// its profile. A pop first moves what other threads pushed onto the
// local tail, so the two keep one FIFO order as the owner sees it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/chaos.hpp"
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
  // fence: how thieves and the owner exclude each other (StealFence);
  // membarrier only where the kernel has it.
  explicit ReadyQueue(QueueKind kind = QueueKind::nemesis, bool owned = false,
                      StealFence fence = StealFence::lock)
      : nemesis_(kind == QueueKind::nemesis),
        owned_(owned && nemesis_),
        asymmetric_(owned && nemesis_ && fence == StealFence::membarrier && asymmetric_fences()) {}

  bool is_nemesis() const { return nemesis_; }
  // An owned Nemesis queue: it has the owner-local FIFO (push_by_owner).
  bool has_local() const { return owned_; }

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
    // Acquire: seeing thief_ free, the owner goes on to use the local FIFO
    // and the Nemesis links a thief may just have written under it; the
    // thief's unlock (release) must happen before that use. A relaxed load
    // is the same instruction on x86, but a data race in the C++ model (and
    // one TSan cannot see: the membarrier is the thief's half of the fence).
    if (thief_.is_locked(std::memory_order_acquire)) {
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

  // The owner pushes f: onto its local FIFO when a section opens without
  // waiting, else onto the Nemesis queue, lock-free as before — when a
  // thief is in (the owner never waits behind a thief that may have been
  // preempted) and when a signal handler interrupted the owner's own
  // section (the local FIFO may be half-linked then; a handler runs to its
  // end before the code it interrupted goes on, so what it sees of
  // owner_busy_ and thief_ tells it which).
  void push_by_owner(Fibre* f) noexcept {
    if (asymmetric_) {
      if (!owner_busy_.load(std::memory_order_relaxed)) {
        owner_busy_.store(true, std::memory_order_relaxed);
        std::atomic_signal_fence(std::memory_order_seq_cst);
        bool in = !thief_.is_locked(std::memory_order_acquire);  // as in consumer_enter
        if (in) push_owned(f);
        owner_busy_.store(false, std::memory_order_release);
        if (in) return;
      }
    } else if (thief_.try_lock()) {
      push_owned(f);
      thief_.unlock();
      return;
    }
    nq_[f->priority].push(f);
  }

  // The owner, inside a consumer section: f joins the local FIFO of its
  // level. No atomic read-modify-write.
  void push_owned(Fibre* f) noexcept {
    Local& l = local_[f->priority];
    f->next.store(nullptr, std::memory_order_relaxed);
    if (l.tail)
      l.tail->next.store(f, std::memory_order_relaxed);
    else
      l.head = f;
    l.tail = f;
    local_n_.store(local_n_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  // Inside consumer_enter/leave only.
  Fibre* pop_nemesis(unsigned max_level) noexcept {
    for (unsigned i = 0; i <= max_level; ++i) {
      if (!owned_) {
        if (Fibre* f = nq_[i].pop()) return f;
        continue;
      }
      // What other threads pushed joins the local tail first: one FIFO.
      while (nq_[i].maybe_nonempty()) {
        Fibre* f = nq_[i].pop();
        if (!f) break;  // a producer between its exchange and its link: next time
        push_owned(f);
      }
      Local& l = local_[i];
      if (Fibre* f = l.head) {
        l.head = f->next.load(std::memory_order_relaxed);
        if (!l.head) l.tail = nullptr;
        local_n_.store(local_n_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
        return f;
      }
    }
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
    LOOM_CHAOS_POINT(steal_locked);
    *length = local_n_.load(std::memory_order_relaxed);
    for (auto& q : nq_) *length += q.walk(2 * max);
    for (std::size_t want = half(*length, max); k < want; ++k)
      if (!(out[k] = pop_nemesis(kPriorities - 1))) break;
    thief_.unlock();
    return k;
  }

  bool maybe_nonempty() const noexcept {
    if (local_n_.load(std::memory_order_relaxed)) return true;
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

  struct Local {
    Fibre* head = nullptr;
    Fibre* tail = nullptr;
  };

  const bool nemesis_;
  const bool owned_;
  const bool asymmetric_;
  bool owner_locked_ = false;  // the owner fell back to thief_ (owner only)
  SpinLock thief_;
  std::atomic<bool> owner_busy_{false};
  // The owner-local FIFOs (consumers only) and their length, a hint for
  // anyone (written inside sections only).
  Local local_[kPriorities];
  std::atomic<std::uint32_t> local_n_{0};
  NemesisQueue<Fibre> nq_[kPriorities];
  LockedQueue<Fibre> lq_[kPriorities];
};

}  // namespace loom::rt
