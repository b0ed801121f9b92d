// io/uring.hpp — the io_uring back end (SchedConfig::io, LOOM_IO=uring).
//
// It keeps the poller contract (io/poller.hpp) and adds one thing epoll
// cannot do.
//
// Readiness. Registering a descriptor costs nothing: a wait that is about
// to park arms a one-shot IORING_OP_POLL_ADD for its side (uring_arm), and
// the completion is delivered like an epoll event (post_ready). The request
// is queued, not submitted: the SQEs of a processor's fibres go to the
// kernel together, in the io_uring_enter the processor makes anyway (its
// sleep, or the look of a busy processor every 128 picks). A poll looks at
// the level when it is armed, so nothing that arrived before is lost. Why
// one-shot and not multishot: a poll request holds a reference to the file,
// so a multishot poll per descriptor would keep a closed socket open (no
// FIN, a listener still accepting) until its removal was processed; a
// one-shot poll is on only while a fibre waits, and close removes it (and
// submits at once) only in that rare case. A completion carries the
// readiness of the kernel's wake-up, which may be gone when it is
// delivered: stale readiness, which every waiter tolerates (it tries its
// call again and arms again).
//
// Reads of a drained stream. When a short read has drained a stream (the
// case in which the epoll back end waits for the edge and then reads), a
// read through loom queues IORING_OP_RECV (poll first) or IORING_OP_READ
// with the caller's buffer, and the fibre parks on a completion record on
// its stack; the completion carries the bytes' count straight to it. That
// is one system call per request fewer than any epoll loop: the read is
// done by the kernel inside the processor's next io_uring_enter. A timeout
// cancels the request and waits for its completion (the buffer is the
// fibre's); a close of the descriptor cancels it too.
//
// Sharing. One ring per cluster, like the epoll set. Any thread may queue
// (under sq_lock); one thread at a time reaps (`reaping`): the idle poller's
// sleeper, a poller thread, or a busy processor's look when nobody sleeps.
// The ring is made with COOP_TASKRUN | TASKRUN_FLAG: a poll's or a
// receive's completion is finished by the thread that submitted the request
// when it next enters the kernel (a sleeping one is woken for it), without
// an inter-processor interrupt while it runs; a busy processor whose look
// finds the TASKRUN flag set enters to run its own. The price: a request
// submitted by a processor that then runs one fibre for long without a
// system call completes when that fibre yields or calls the kernel.
//
// Write sides whose peer shut down its writing. The kernel adds RDHUP (and
// HUP and ERR) to every ring poll, and RDHUP stays set once the peer's FIN
// is in: a writer waiting on a full socket whose peer does not read would
// have each poll end at once, find EAGAIN and arm again — 120,000 to
// 260,000 useless wake-ups per 0.5 s (issue 25, bug 2). The first such poll
// (RDHUP without OUT, HUP or ERR) moves the side to the ring's write-side
// epoll set (made on first use): there a wait is EPOLLOUT|EPOLLONESHOT, so
// only writability, a hang-up or an error ends it, and one ring poll on the
// set itself (always re-armed once made: it completes only when the set has
// something to report) delivers what the set sees. A close takes the
// descriptor out of the set.
//
// Where io_uring_setup fails (an old kernel, kernel.io_uring_disabled, a
// seccomp filter), the cluster falls back to epoll with a one-line notice.
#pragma once

#include <liburing.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "base/spinlock.hpp"
#include "io/ready_word.hpp"
#include "loom/sync.hpp"

namespace loom::rt {

struct IoState;
struct FdEntry;

struct Uring {
  io_uring ring{};
  SpinLock sq_lock;                  // queueing SQEs: any thread
  std::atomic<bool> pending{false};  // SQEs queued and not yet submitted
  std::atomic<bool> reaping{false};  // taking completions: one thread at a time
  std::atomic<unsigned long> removes_again{0};  // removals refused with EALREADY, queued again
  // The write-side epoll set (above): made with the ring, never closed.
  std::atomic<int> out_epfd{-1};
  std::atomic<bool> out_armed{false};  // its ring poll is on
};

// A fibre's read through the ring: the completion record on its stack.
struct UringWait {
  ReadyWord done;  // posted by the reaper with res set
  int res = 0;
  FdEntry* entry = nullptr;  // whose ring_requests counts the read
};

// Makes s's ring; false (errno set) where io_uring is unavailable.
bool uring_open(IoState& s);
// A wait on one side of fd is about to park: queues a one-shot poll for
// that side, unless the poll of an earlier wait is still on.
void uring_arm(IoState& s, int fd, FdEntry& e, bool out);
// fd is being closed: removes its polls and cancels its ring read, submits
// at once, and waits (bounded) until their completions are reaped. Each
// holds the file open, and the kernel completes a removed poll only in the
// task work of the thread that submitted it: without the wait, close(2)
// would not be the file's last reference, and its peer would not be hung
// up until that thread next entered the kernel.
void uring_disarm(IoState& s, int fd, FdEntry& e);
// Wakes whoever waits in the ring: a no-op request, submitted at once. It
// completes inside the submitting call, so no other thread has to run
// anything for the waiter to see it (an eventfd's poll would complete in
// the task work of whichever thread armed it).
void uring_wake(IoState& s);
// Queues a read of fd into buf (recv for a socket, read otherwise) that
// completes into w.
void uring_read(IoState& s, int fd, FdEntry& e, void* buf, unsigned n, int flags, bool socket, UringWait& w);
// Queues the cancellation of the request completing into w.
void uring_cancel(IoState& s, UringWait& w);
// Submits what is queued (a no-op when nothing is).
void uring_flush(IoState& s);
// The caller owns reaping: submits what is queued, waits until d (kNow:
// not at all, kForever: until a completion) for a completion if there is
// none, and delivers every completion there is. Returns how many.
int uring_reap(IoState& s, Deadline d);
// uring_reap(s, kNow) unless another thread is reaping; false if one was.
bool uring_try_reap(IoState& s);

}  // namespace loom::rt
