/* loom/detail/stats_fields.h — the runtime's counters, one list for C and C++.
 *
 * X(field, description) for every counter of loom_stats / loom::ClusterStats,
 * in the order the tables print them. Included by loom/loom.h and
 * loom/cluster.hpp; not meant to be included directly. */
#ifndef LOOM_DETAIL_STATS_FIELDS_H
#define LOOM_DETAIL_STATS_FIELDS_H

#define LOOM_STATS_FIELDS(X)                                                        \
  X(fibres_created, "fibres created")                                               \
  X(fibres_finished, "fibres finished")                                             \
  X(switches, "context switches")                                                   \
  X(yields, "yields")                                                               \
  X(steal_tries, "steal attempts (a victim looked non-empty)")                      \
  X(steal_hits, "steal attempts that took work")                                    \
  X(steals, "fibres stolen")                                                        \
  X(sticky_steals, "... whose affinity moved to the thief (the rest: transient)")   \
  X(sleeps, "idle sleeps")                                                          \
  X(wakes, "wake-ups of a sleeping processor")                                      \
  X(io_blocks, "fibre waits for descriptor readiness")                              \
  X(poller_wakeups, "poller returns that delivered readiness")                      \
  X(poller_events, "readiness events delivered")                                    \
  X(spurious, "readiness notifications that found nothing to do")                   \
  X(registrations, "lazy registrations (epoll_ctl ADD)")                            \
  X(offloads, "calls offloaded to a kernel thread")                                 \
  X(timer_fires, "timers fired")                                                    \
  X(mutex_blocks, "mutex acquires that blocked")                                    \
  X(mutex_handoffs, "mutex unlocks that handed over to a waiter")                   \
  X(stack_hits, "fibre stacks from the cache")                                      \
  X(stack_misses, "fibre stacks newly mapped")                                      \
  X(rests, "rests on a descriptor (loom::io::rest: the stack given back)")          \
  X(spins, "idle spins before sleeping (LOOM_SPIN_US)")                             \
  X(spin_hits, "... that found work")                                              \
  X(lost_blocked, "processors found lost in a system call loom did not see")       \
  X(lost_running, "processors found held past a slice by a fibre (a spinner)")    \
  X(handoffs, "... whose waiting fibres the monitor sent a thief or a spare")     \
  X(spares_started, "spare kernel threads started (LOOM_HANDOFF_US)")             \
  X(spare_activations, "times a spare took up work beside the processors")        \
  X(spare_us, "microseconds spares were active")

#endif
