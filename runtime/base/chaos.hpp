// base/chaos.hpp — schedule perturbation and invariant checks (issue 25).
//
// Two build modes, both off in the default build, where every macro below
// expands to nothing (no call, no load, no branch: the default library's
// code is the same with or without them; docs/DESIGN.md "Perturbation").
//
// LOOM_CHAOS (cmake -DLOOM_CHAOS=ON): at each named point of the runtime,
// LOOM_CHAOS_POINT(name) may stall the calling kernel thread for a moment —
// a sched_yield, a spin of up to a few thousand pauses, or a sleep of a few
// microseconds — or do nothing. The decision is a pure function of the
// seed, the calling thread (a processor's cluster and index), the point and
// how many times that thread has passed that point: LOOM_CHAOS=SEED replays
// the same decisions at every point; with LOOM_PROCESSORS=1 (one kernel
// thread does all the work) that is the same run. On more processors the
// decisions replay but the kernel's interleaving of the threads does not.
// Unset, the seed comes from the clock; either way it is printed on stderr
// at start ("loom: chaos seed N"). LOOM_CHAOS=off disables the points.
// LOOM_CHAOS_RATE=N perturbs one pass in N on average (default 4).
//
// Points are the windows where a race was found or is plausible; each is a
// single line at its place, so that edits around it merge trivially. A new
// point is one entry in LOOM_CHAOS_POINTS and one line where it applies.
//
// The invariant checks that name fibres and processors (LOOM_CHECKS) are
// the scheduler's: sched/checks.hpp. This file knows no fibres (the base
// layer's rule): a processor names its kernel thread for the decisions
// (LOOM_CHAOS_NAME_THREAD, as it starts); any other thread is named by the
// order in which it first passes a point.
#pragma once

#include <cstdint>

namespace loom::rt {

// name, and what happens there (the window the point widens)
#define LOOM_CHAOS_POINTS(X)                                                                    \
  X(color_transit)  /* color steal: a queue between the victim's unlock and the thief's lock */ \
  X(color_enqueue)  /* color post: before the shard and owner locks */                          \
  X(color_release)  /* a colored fibre's exit: before it gives its color back */                \
  X(steal_locked)   /* ready-queue steal: between the thief's lock and the take */              \
  X(idle_announce)  /* idle loop: nothing found, before announcing idle */                      \
  X(idle_last_look) /* idle loop: announced idle, before the last look */                       \
  X(idle_sleep)     /* idle loop: the last look found nothing, before sleeping */               \
  X(push_wake)      /* a push onto another processor: between the push and the wake */          \
  X(exit_handover)  /* fibre_exit: before switching to the joiner or the next fibre */          \
  X(post_exit)      /* post_exit: the context is saved, before join state is published */       \
  X(uring_arm)      /* io_uring: a poll armed, before it is queued */                           \
  X(uring_complete) /* io_uring: a completion read, before it is delivered */                   \
  X(io_park)        /* a descriptor wait: armed, before parking */                              \
  X(close_retire)   /* close: the generation bumped, before waiters are woken */                \
  X(close_syscall)  /* close: loom's state retired, before close(2) */                         \
  X(rest_arm)       /* a rest: the stack cached, before the callback is armed */                \
  X(rest_restart)   /* a rest's restart: a stack given, before the fibre is scheduled */        \
  X(sync_release)   /* a sync object released (another thread may destroy it), before return */

#if defined(LOOM_CHAOS)
namespace chaos {
#define LOOM_CHAOS_ENUM(name) name,
enum class Point : unsigned { LOOM_CHAOS_POINTS(LOOM_CHAOS_ENUM) count };
#undef LOOM_CHAOS_ENUM
void point(Point p) noexcept;
unsigned long long seed() noexcept;
void name_thread(std::uint64_t key) noexcept;
}  // namespace chaos
#define LOOM_CHAOS_POINT(name) ::loom::rt::chaos::point(::loom::rt::chaos::Point::name)
#define LOOM_CHAOS_NAME_THREAD(key) ::loom::rt::chaos::name_thread(key)
#else
#define LOOM_CHAOS_POINT(name) ((void)0)
#define LOOM_CHAOS_NAME_THREAD(key) ((void)0)
#endif

}  // namespace loom::rt
