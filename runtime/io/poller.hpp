// io/poller.hpp — a cluster's epoll set and whoever polls it.
//
// Contract of a back end (SchedConfig::io: epoll, or io_uring in
// io/uring.hpp): `io_register(fd)` makes a descriptor one it can wait on
// (epoll: edge-triggered for input and output at once; io_uring: nothing
// yet); a wait about to park calls `io_arm` for its side (epoll: nothing;
// io_uring: a one-shot poll); `io_deregister(fd)` before a close; the back
// end delivers readiness by posting the entry's in and/or out readiness
// word (post_ready: makes the waiting fibre runnable, or invokes the
// callback armed by loom::io::when_ready right there, in the delivering
// context). A delivery may be stale (the readiness gone by then): every
// waiter tries its call again. Deliveries of one poll are batched: the
// fibres they make ready go to their processors' queues first, then each
// processor concerned is woken once.
//
// Who polls (SchedConfig::poller, LOOM_POLLER):
//   idle                   nobody of its own: the last processor to go
//                          idle sleeps in epoll_wait (until the next timer)
//                          rather than on its futex, and is woken through an
//                          eventfd in the set; busy processors poll without
//                          blocking every 128th pick. No thread, no fibre,
//                          and an idle-to-busy transition costs one wake-up;
//   fibre                  a poller fibre in the cluster's background queue:
//                          it runs when a processor finds nothing else,
//                          polls without blocking, and when the poll finds
//                          nothing it parks; the process-wide master poller
//                          thread blocks on every parked cluster's epoll fd
//                          (one-shot) and reschedules the poller fibre;
//   loop                   a poller thread per cluster blocking in epoll_wait;
//   loop-sleep             the same, sleeping poller_sleep_us after each
//                          delivery so events accumulate into bigger batches;
//   opportunistic          a poller thread that polls only when a processor
//                          of the cluster has gone idle;
//   opportunistic-timeout  ... or when poller_sleep_us passed since its last
//                          poll, whichever comes first.
#pragma once

#include <pthread.h>

#include <sys/epoll.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>

#include "base/futex.hpp"
#include "loom/config.hpp"
#include "loom/sync.hpp"
#include "sched/extension.hpp"

namespace loom {
class Fibre;
}

namespace loom::rt {

enum class WaitKind : unsigned char;  // sched/fibre.hpp

class Cluster;
class Fibre;
class Processor;
struct FdEntry;
struct Uring;

// A cluster's I/O state; it plugs into the scheduler as its I/O extension
// (sched/extension.hpp): busy_pick polls without blocking (idle poller),
// before_sleep signals the opportunistic pollers, sleep is the idle
// poller's epoll_wait, interrupt breaks it, shutdown stops the poller.
struct IoState final : Extension {
  void busy_pick(Processor& p) override;
  void before_sleep(Processor& p) override;
  void before_park(Processor& p) override;
  bool sleep(Processor& p, std::int64_t deadline) override;
  void interrupt(Processor& p) override;
  bool outside_ready() override;
  void shutdown() override;

  Cluster* cluster = nullptr;
  PollerKind kind = PollerKind::fibre;
  IoBackend backend = IoBackend::epoll;  // what runs: SchedConfig::io, or epoll after a fallback
  Uring* uring = nullptr;                // the ring (backend uring)
  bool ring_reads = false;               // uring: drained reads through the ring (LOOM_IO_RING_READ)
  int epfd = -1;
  pid_t owner_pid = 0;  // the process that made epfd (a fork child shares it)
  int stop_fd = -1;  // eventfd: stops a poller thread blocked in epoll_wait
  int wake_fd = -1;  // eventfd: wakes the processor sleeping in epoll_wait
  std::atomic<Processor*> sleeper{nullptr};  // idle poller: who sleeps in epoll_wait
  std::unique_ptr<epoll_event[]> sleeper_events;  // ... and the events it takes
  unsigned sleep_us = 0;
  bool lazy = true;
  bool yield_before_read = true;
  pthread_t thread{};
  bool has_thread = false;
  std::atomic<bool> stopping{false};
  WakeFlag idle_signal;  // opportunistic: a processor went idle
  std::atomic<Fibre*> parked{nullptr};  // fibre poller: parked, awaiting the master
  loom::Fibre* poller_handle = nullptr;  // fibre poller: joined at shutdown
};

// The cluster's I/O state, created with its poller on first use.
IoState& io_state(Cluster& c);
// Registers fd with s's epoll set (EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET) if it is
// not registered yet; false with errno set if epoll refuses it (EPERM for a
// regular file, for instance).
bool io_register(IoState& s, int fd, FdEntry& e);
// A wait on fd's input (out: output) is about to park: the io_uring back
// end arms a one-shot poll for it (epoll's registration covers every wait).
void io_arm(int fd, FdEntry& e, bool out);
// Posts e's readiness words for the epoll events m (either back end).
void post_ready(FdEntry& e, std::uint32_t m);
// Deregisters fd if registered (before it is closed).
void io_deregister(int fd, FdEntry& e);
// Called by a processor of c about to sleep (opportunistic pollers).
void io_processor_idle(IoState& s);
// The idle poller: p sleeps in epoll_wait (until `deadline`, ns; kNoDeadline
// or -1: until woken)
// instead of on its futex, if no other processor does; delivers what it
// sees. False if p must sleep on its futex.
bool io_idle_sleep(IoState& s, Processor& p, std::int64_t deadline);
// Breaks a processor's epoll_wait (io_idle_sleep).
void io_interrupt(IoState& s);
// The idle poller, from a busy processor: a poll that does not block.
void io_busy_poll(IoState& s);
// Process start-up: SIGPIPE (see loom/io.hpp).
void io_boot();
// Stops the cluster's poller (cluster shutdown).
void io_shutdown(Cluster& c);

// offload_enter (loom/io.hpp) for a call loom makes on the offload cluster:
// until offload_leave the fibre is listed as blocked on `kind` and
// `object` (fd_in/fd_out with the descriptor, poll, offload with the
// call's name: a string literal), on the cluster it left.
void* offload_enter(WaitKind kind, const void* object);
inline const void* fd_object(int fd) { return reinterpret_cast<const void*>(std::intptr_t(fd)); }

// poll(2) on one descriptor until d (ns; kForever): the revents (> 0), 0 at
// d, or -errno. Waits on the descriptor's own readiness words, so it costs
// no epoll set of its own (loom::io::poll_one, and poll/ppoll of one).
long poll_one_until(int fd, short events, Deadline d);

// A deadline as a poll(2) or epoll_wait(2) timeout: the milliseconds left,
// rounded up (never early); -1 for kForever.
inline int ms_until(Deadline d) {
  if (d == kForever) return -1;
  std::int64_t left = std::max<std::int64_t>(0, d - now_ns());
  return int(std::min<std::int64_t>(INT_MAX, (left + 999'999) / 1'000'000));
}

// What a descriptor loom did not make is (FdKind), decided on its first
// use and recorded in e (io.cpp says what each kind means); kFdUnknown,
// nothing recorded, if fd is not open.
std::uint8_t classify(int fd, FdEntry& e);

// A loom call on fd failed as a call on another kind of file fails
// (ENOTSOCK, EOPNOTSUPP...): was loom's record of fd stale? The number's
// file can change by routes no wrapper sees — stdio's fclose of an
// fdopen'd descriptor, closedir, freopen, an io_uring close, another
// library's own system call instruction. If the record disagrees with what
// the number refers to now (fstat), the number is retired, as
// loom::io::forget, and true returned: the caller makes its call once
// more, and that call looks at the file afresh. errno is kept.
bool io_stale(int fd);

// libloom-pthread, at load: loom makes no descriptor non-blocking
// underneath, not even its own (io.cpp, "The descriptor rule").
void io_keep_flags();
// preadv2/pwritev2 with RWF_NOWAIT work on pipes (probed once).
bool pipes_nowait();

}  // namespace loom::rt
