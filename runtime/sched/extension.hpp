// sched/extension.hpp — the scheduler's extension contract.
//
// The scheduler knows no I/O and no colors (DESIGN.md: sched includes
// neither). Layers above it that must take part in a processor's life — the
// I/O layer's pollers, the color layer's runners and color stealing — plug
// in as an Extension that the cluster holds. The scheduler calls them at
// four points and nowhere else:
//
//   busy_pick(p)        every 128th pick of a busy processor, between two
//                       fibres (no lock held): look outside for work without
//                       blocking (the idle poller's non-blocking epoll_wait).
//                       May make fibres ready.
//   find_work(p, last)  p found nothing in its queue, staging, nor by
//                       stealing fibres: the extension's own work, as a
//                       fibre to run now (nullptr: none). Called before the
//                       background queue. `last` is the look after p
//                       announced itself idle (invariant 3): an extension
//                       that keeps work of its own must not miss work
//                       published before that announcement.
//   before_sleep(p)     p is about to sleep (its last look found nothing).
//   sleep(p, deadline)  p may sleep inside the extension instead of on its
//                       futex (the idle poller sleeps in epoll_wait): true
//                       when it did (or chose to return at once), false to
//                       leave the sleep to the next extension or the futex.
//                       While inside, p.sleeping_in names the extension;
//                       a sleep must return when p.wake_flag is posted
//                       (look at it after publishing sleeping_in) or when
//                       interrupt(p) is called. deadline: ns on now_ns()'s
//                       clock, kNoDeadline to sleep until woken.
//   before_park(p)      p, a spare, is about to park on its futex until the
//                       monitor wants it again: what its fibres left for
//                       a sleep to finish (requests queued for the ring)
//                       must go now (a parked spare is woken by nothing else).
//   interrupt(p)        breaks p's sleep inside this extension; any thread.
//   outside_ready()     work of the extension's waits ready for a look
//                       (events on the epoll set), without taking it; any
//                       thread (the monitor, when every processor is lost).
//   shutdown()          the cluster is being destroyed (its fibres must
//                       still be able to run: called before the check that
//                       none is left).
//
// Extensions are added once per cluster (add_extension), never removed, and
// live as long as the cluster (type-stable, like the cluster itself). Every
// hook may be called by all of the cluster's processors at once.
#pragma once

#include <cstdint>

namespace loom::rt {

class Fibre;
class Processor;

class Extension {
 public:
  virtual ~Extension() = default;
  virtual void busy_pick(Processor&) {}
  virtual Fibre* find_work(Processor&, bool /*last_look*/) { return nullptr; }
  virtual void before_sleep(Processor&) {}
  virtual bool sleep(Processor&, std::int64_t /*deadline*/) { return false; }
  virtual void before_park(Processor&) {}
  virtual void interrupt(Processor&) {}
  virtual bool outside_ready() { return false; }
  virtual void shutdown() {}
};

}  // namespace loom::rt
