// io/rest.hpp — a fibre at rest on a descriptor holds no stack
// (loom::io::rest, loom_rest; docs/DESIGN.md, "Rest").
//
// A fibre that waits at the top of its loop (nothing live on its stack)
// calls rest(fd, fn, arg): its stack goes back to its processor's cache and
// the fibre is continued at fn(arg), on a stack from the cache of the
// processor that sees fd readable, when it is. The fibre keeps its identity
// (id, name, cluster, affinity, priority, key values): its control block,
// which normally sits at the top of its stack, moves at its first rest into
// a RestBlock on the heap, where it stays for the rest of its life; each
// later rest and restart only swaps the stack under it. A restart makes the
// fibre runnable without a stack (no saved context, stack.base null, its
// size kept): the processor that switches to it gives it one from its own
// cache then (give_stack), the stack its last rest left there, still warm. Resting, it stays on
// its live-fibre list, listed as "resting: fd N (no stack)".
//
// Protocol. Rest is the readiness word's one-shot callback (ready_word.hpp)
// plus, with a deadline, a timer:
//   rest()         checks, then switches away for good (a dying switch);
//   post_rest      (on the next fibre, the old context saved) puts the
//                  stack in the cache, arms the callback on fd's input
//                  word (a pending edge or a hang-up: restart at once), adds
//                  the timer, and only then sets `published`;
//   on_ready       (the callback: a poster, or a close after close(2))
//                  removes the timer, makes it runnable (status 0);
//   timer expire   (under the heap lock) takes the callback back
//                  (ReadyWord::disarm): if it could, the timer owns the
//                  restart (status ETIMEDOUT); if a poster took it first,
//                  the timer does nothing.
// Rest waits for an edge, so it is safe where the last read proved the
// queue empty (a short read or EAGAIN: the descriptor's drained hint). Where
// it did not (a read that filled its buffer, none since the last restart),
// rest() looks first (one poll(2)) and a fibre whose input is already queued
// is continued at once, as a pending edge continues it; rest_start() looks
// the same way (a descriptor handed over after such a read).
// Exactly one of the callback and the timer takes the callback out of the
// word, so exactly one restarts. Both first wait for `published`: a restart
// that ran before post_rest had added the timer could rest again and add the
// same node twice. The callback's remove() takes the heap lock, so an
// expire that lost the race is over before the fibre can rest again.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "context/stack.hpp"
#include "loom/fibre.hpp"
#include "loom/sync.hpp"
#include "sched/fibre.hpp"
#include "sched/timer.hpp"

namespace loom::rt {

struct FdEntry;
struct RestBlock;

struct RestTimer : TimerNode {
  RestBlock* owner = nullptr;
};

// (Not over-aligned: an aligned allocation cost an idle loom-memcached
// connection 128 bytes more, for a block only its own fibre and one
// restarter touch at a time.)
struct RestBlock {
  Fibre fibre;  // first: a rest_block Fibre* is its RestBlock*
  RestTimer timer;
  void (*fn)(void*) = nullptr;  // where the next restart continues
  void* arg = nullptr;
  FdEntry* entry = nullptr;
  int fd = -1;
  std::uint32_t gen = 0;  // the descriptor's close count when it rested
  std::atomic<bool> published{false};  // post_rest is done with the block
  int status = 0;                      // why the last restart: 0, ETIMEDOUT
  bool input_now = false;              // rest() looked and found input queued: continue at once

  static RestBlock* of(Fibre* f) { return reinterpret_cast<RestBlock*>(f); }
};

// loom::io::rest_until's work: returns an error number, or does not return.
int rest(int fd, void (*fn)(void*), void* arg, Deadline d);
// loom::io::rest_start's: a new detached fibre, at rest on fd from the
// start (no stack until its first input). 0 or an error number.
int rest_start(int fd, void (*fn)(void*), void* arg, const FibreAttr& attr, Deadline d);
// Why the calling fibre was last restarted (0 or ETIMEDOUT; 0 if it never
// rested).
int rest_status() noexcept;

}  // namespace loom::rt
