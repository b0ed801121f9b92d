// io/ready_word.hpp — one direction's readiness: a binary semaphore for at
// most one waiting fibre, or one armed callback, in one word.
//
// The word is kEmpty, kToken (an edge arrived and nobody took it: edges
// collapse into one), the one waiting Fibre, or kCallback (a one-shot
// callback is armed: loom::io::when_ready) and kFiring (a poster took it and
// is reading it; transient). Fibres are at least 8-byte aligned, so the
// values 1..3 are never a Fibre*. One
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
//
// Callbacks (loom::io::when_ready; the word knows nothing of what they do):
//   arm      kToken -> kEmpty, and the caller invokes the callback itself;
//            kEmpty -> kCallback after writing fn_/arg_ (release);
//   post     kCallback -> kFiring, read fn_/arg_, store kEmpty, invoke:
//            exactly one poster wins the CAS, so an armed callback runs
//            exactly once. A post that finds kFiring returns: its edge
//            collapses into the callback being invoked, which is sound
//            because the callback's owner reacts (reads or writes) only
//            after the invocation, so after that edge's bytes or room.
//   take     close: like post, but hands the callback to the caller (which
//            invokes it after close(2)) and waits out a kFiring poster, so
//            that fn_/arg_ are read before the number can be reused and
//            armed again.
// Mixing the two in one direction at once (a fibre waiting while a
// callback is armed) is not supported: the arm fails with EBUSY when a
// fibre waits; a fibre's wait must not start while a callback is armed.
// The fibre's post stays a load and a CAS: the callback case is one test
// of a bit on the loaded value, out of line when set.
#pragma once

#include <atomic>
#include <cstdint>

#include "loom/sync.hpp"

namespace loom::rt {

class ReadyWord {
 public:
  using Callback = void (*)(void*);

  // Makes the waiter runnable, invokes the armed callback, or leaves the
  // token for the next wait.
  void post() noexcept;
  // The calling fibre waits for the token: 0, or ETIMEDOUT at `d`
  // (EAGAIN for kNow). Only on a processor, one waiter at a time.
  // gen/seen: the descriptor's close count and the value the caller read
  // before it registered. Once the fibre is published, the wait checks it
  // again and, if a close came between, does not sleep (returns 0; the
  // caller sees the count changed): that close's token may have been
  // cleared by a new descriptor under the number (FdEntry::describe), and
  // a close after the publication finds the fibre and wakes it.
  int wait(Deadline d, const std::atomic<std::uint32_t>* gen = nullptr, std::uint32_t seen = 0) noexcept;

  // Arms a one-shot callback: 0 (armed), 1 (the token was there: taken,
  // and fn not stored — the caller invokes it), EBUSY (a fibre waits or a
  // callback is armed already).
  int arm(Callback fn, void* arg) noexcept;

  // An edge arrived that nobody took yet.
  bool has_token() const noexcept { return word_.load(std::memory_order_relaxed) == kToken; }
  // A fibre waits, or a callback is armed (a post would wake or invoke it).
  bool has_waiter() const noexcept { return word_.load(std::memory_order_seq_cst) > kToken; }
  // A new descriptor under the number: a token left by the close of the
  // previous one (retire posts) would only cause a spurious wake-up.
  void clear_token() noexcept {
    std::uintptr_t t = kToken;  // a load first: a failed CAS still locks the line
    if (word_.load(std::memory_order_relaxed) == kToken)
      word_.compare_exchange_strong(t, kEmpty, std::memory_order_relaxed);
  }

  // For a close: an armed callback is disarmed and returned in fn/arg (the
  // caller invokes it); otherwise (fn = nullptr) as post().
  void take_or_post(Callback& fn, void*& arg) noexcept;
  // Takes an armed callback back without invoking it: true if it was armed
  // (it will not run), false if a poster or a close took it first (it runs,
  // or has run). Waits out a kFiring poster, as take_or_post (a rest's
  // deadline: io/rest.cpp).
  bool disarm() noexcept;

  static constexpr std::uintptr_t kEmpty = 0;
  static constexpr std::uintptr_t kToken = 1;
  static constexpr std::uintptr_t kCallback = 2;
  static constexpr std::uintptr_t kFiring = 3;
  static constexpr std::uintptr_t kCallbackBit = 2;  // set in kCallback and kFiring, never in a Fibre*

 private:
  bool post_callback(std::uintptr_t cur) noexcept;

  std::atomic<std::uintptr_t> word_{kEmpty};
  // The armed callback: written by the arming thread before the word says
  // kCallback, read by the poster that CASed kCallback -> kFiring.
  Callback fn_ = nullptr;
  void* arg_ = nullptr;
};

}  // namespace loom::rt
