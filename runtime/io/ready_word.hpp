// io/ready_word.hpp — one direction's readiness: a binary semaphore for at
// most one waiting fibre, in one word.
//
// The word is kEmpty, kToken (an edge arrived and nobody took it: edges
// collapse into one) or the one waiting Fibre. One
// waiter at a time is what the descriptor's turn mutex guarantees (FdSide),
// so there is no queue and no lock: post() is a load and a CAS, and a wait
// that finds the token takes it with one CAS. (It replaced a general
// Semaphore — spin lock, wait list, waiter record touched by the poster — in
// the wait for every edge; see docs/DESIGN.md.)
//
// Blocking, in the post-switch action (the fibre's context is saved, so
// whoever takes the record may resume it at once):
//   CAS kEmpty -> fibre     published: a post or the timer will resume it;
//   CAS kToken -> kEmpty    an edge arrived meanwhile: resume itself.
// Whoever CASes fibre -> kEmpty owns the wake-up: post() (the wait
// succeeds) or the timer's expire (which first marks the wait record timed
// out), so exactly one of them resumes the fibre. No ABA: the fibre waits
// here again only after its wait returned, and a returning timed wait has
// removed its timer under the heap lock. A timed wait arms its timer after
// publishing; the fibre, once resumed, waits for the action to have
// finished with the record (`settled`) and then removes its timer (under
// the heap lock, so an expire that lost the CAS is done with the record).
#pragma once

#include <atomic>
#include <cstdint>

#include "loom/sync.hpp"

namespace loom::rt {

class ReadyWord {
 public:
  // Makes the waiter runnable, or leaves the token for the next wait.
  void post() noexcept;
  // The calling fibre waits for the token: 0, or ETIMEDOUT at `d`
  // (EAGAIN for kNow). Only on a processor, one waiter at a time.
  int wait(Deadline d) noexcept;

  static constexpr std::uintptr_t kEmpty = 0;
  static constexpr std::uintptr_t kToken = 1;

 private:
  std::atomic<std::uintptr_t> word_{kEmpty};
};

}  // namespace loom::rt
