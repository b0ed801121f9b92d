#include "io/uring.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>

#if defined(LOOM_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

#include "base/chaos.hpp"
#include "base/sys.hpp"
#include "io/fd_table.hpp"
#include "io/poller.hpp"
#include "loom/fibre.hpp"
#include "sched/cancel.hpp"
#include "sched/cluster.hpp"
#include "sched/in_handler.hpp"
#include "sched/processor.hpp"

namespace loom::rt {

namespace {

// The kernel orders a request's submission before its completion;
// ThreadSanitizer cannot see that edge, so it is told (the completion
// record is written by the fibre before it submits and by the reaper after).
inline void tsan_release(void* a) {
#if defined(LOOM_TSAN)
  __tsan_release(a);
#else
  (void)a;
#endif
}
inline void tsan_acquire(void* a) {
#if defined(LOOM_TSAN)
  __tsan_acquire(a);
#else
  (void)a;
#endif
}

constexpr unsigned kSqEntries = 1024;
constexpr unsigned kCqEntries = 16384;

// user_data: a UringWait* (8-byte aligned: tag 0), or a tag in the low two
// bits with what it is about above them.
enum : std::uint64_t { kTagWait = 0, kTagReg = 1, kTagRemove = 2, kTagIgnore = 3, kTagMask = 3 };
constexpr std::uint32_t kGenMask = 0x1fffffff;

// The ring poll on the write-side epoll set (kTagIgnore's tag, told apart
// by the bits above it).
constexpr std::uint64_t kEpollPoll = (1u << 2) | kTagIgnore;

// What a side's poll asks for (hang-ups and errors come with either).
constexpr unsigned kInEvents = EPOLLIN | EPOLLPRI | EPOLLRDHUP;
constexpr unsigned kOutEvents = EPOLLOUT;

// A side's poll: generation (29 bits), descriptor, side, tag.
std::uint64_t poll_key(int fd, std::uint32_t gen, bool out) {
  return (std::uint64_t(gen & kGenMask) << 35) | (std::uint64_t(std::uint32_t(fd)) << 3) | (std::uint64_t(out) << 2) |
         kTagReg;
}

// FdSide::ring_armed's value for a poll of generation gen (never 0).
std::uint32_t armed_tag(std::uint32_t gen) { return (gen & kGenMask) + 1; }

[[noreturn]] void die(const char* what, int err) {
  std::fprintf(stderr, "loom: %s failed: errno %d\n", what, err);
  std::abort();
}

int enter(Uring& u, unsigned to_submit, unsigned min_complete, unsigned flags, Deadline d) {
  io_uring_getevents_arg arg{};
  __kernel_timespec ts{};
  void* argp = nullptr;
  std::size_t argsz = 0;
  if (d != kForever && min_complete) {
    std::int64_t left = std::max<std::int64_t>(0, d - now_ns());
    ts.tv_sec = left / 1'000'000'000;
    ts.tv_nsec = left % 1'000'000'000;
    arg.ts = std::uint64_t(reinterpret_cast<std::uintptr_t>(&ts));
    argp = &arg;
    argsz = sizeof arg;
    flags |= IORING_ENTER_EXT_ARG;
  }
  long r = ::syscall(__NR_io_uring_enter, u.ring.ring_fd, to_submit, min_complete, flags, argp, argsz);
  return r < 0 ? -errno : int(r);
}

// Publishes the queued SQEs to the kernel (sq_lock held); true if any.
bool publish(Uring& u) {
  io_uring_sq& sq = u.ring.sq;
  if (sq.sqe_head == sq.sqe_tail) return false;
  sq.sqe_head = sq.sqe_tail;
  io_uring_smp_store_release(sq.ktail, sq.sqe_tail);
  return true;
}

// An SQE to fill (sq_lock held): a full queue is submitted first.
io_uring_sqe* get_sqe(Uring& u) {
  for (;;) {
    if (io_uring_sqe* sqe = io_uring_get_sqe(&u.ring)) return sqe;
    publish(u);
    int r = enter(u, kSqEntries, 0, 0, kForever);
    if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) die("io_uring_enter (submit)", -r);
  }
}

// Queues one request: `prep` fills the SQE. A thread that is not a
// processor has no io_uring_enter of its own coming: it submits at once.
template <typename Prep>
void queue(IoState& s, Prep&& prep) {
  Uring& u = *s.uring;
  {
    SpinGuard g(u.sq_lock);
    prep(get_sqe(u));
    u.pending.store(true, std::memory_order_release);
  }
  if (!this_processor()) uring_flush(s);
}

// Removes a side's poll by its key (the completion says how: kTagRemove).
void queue_remove(IoState& s, std::uint64_t key) {
  queue(s, [&](io_uring_sqe* sqe) {
    io_uring_prep_poll_remove(sqe, key);
    io_uring_sqe_set_data64(sqe, (key & ~kTagMask) | kTagRemove);
  });
}

// ---- the write-side epoll set (uring.hpp) ----------------------------------------

int out_epoll(Uring& u) { return u.out_epfd.load(std::memory_order_acquire); }

void arm_out_epoll_poll(IoState& s, int ep) {
  queue(s, [&](io_uring_sqe* sqe) {
    io_uring_prep_poll_add(sqe, ep, POLLIN);
    io_uring_sqe_set_data64(sqe, kEpollPoll);
  });
}

// A write wait on fd (its side moved to the set) is about to park.
void arm_out_epoll(IoState& s, int fd, FdEntry& e) {
  Uring& u = *s.uring;
  int ep = out_epoll(u);
  epoll_event ev{};
  ev.events = EPOLLOUT | EPOLLONESHOT;
  ev.data.u64 = (std::uint64_t(e.gen.load(std::memory_order_acquire)) << 32) | std::uint32_t(fd);
  int r = ::epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
  if (r < 0 && errno == ENOENT) {
    r = ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    if (r < 0 && errno == EEXIST) r = ::epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
  }
  if (r < 0) {
    post_ready(e, EPOLLOUT | EPOLLERR);  // (EBADF: closed meanwhile) the waiter retries and sees it
    return;
  }
  if (!u.out_armed.load(std::memory_order_acquire) && !u.out_armed.exchange(true, std::memory_order_acq_rel))
    arm_out_epoll_poll(s, ep);
}

// The ring poll on the set completed: deliver what the set has, and arm the
// poll again. Its one-shot entries report once per wait, so a set with
// nothing new does not complete the next poll; a wait registered while
// this runs is seen by the new poll, which looks at the level when armed.
void deliver_out_epoll(IoState& s, int res, unsigned& events) {
  Uring& u = *s.uring;
  int ep = u.out_epfd.load(std::memory_order_acquire);
  if (res < 0 || ep < 0) {  // cancelled (the ring goes away), or refused: the next wait arms it again
    u.out_armed.store(false, std::memory_order_release);
    return;
  }
  FdTable& table = FdTable::instance();
  epoll_event ev[64];
  int n;
  do {
    n = sys::epoll_wait(ep, ev, 64, 0);
    for (int i = 0; i < n; ++i) {
      FdEntry* e = table.get(int(std::uint32_t(ev[i].data.u64)));
      if (!e || e->gen.load(std::memory_order_acquire) != std::uint32_t(ev[i].data.u64 >> 32))
        continue;  // closed since
      post_ready(*e, ev[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR));
      ++events;
    }
  } while (n == 64);
  arm_out_epoll_poll(s, ep);
}

void deliver_one(IoState& s, const io_uring_cqe& c, unsigned& events) {
  LOOM_CHAOS_POINT(uring_complete);
  std::uint64_t ud = c.user_data;
  switch (ud & kTagMask) {
    case kTagWait: {
      auto* w = reinterpret_cast<UringWait*>(ud);
      tsan_acquire(w);
      w->res = c.res;
      w->entry->ring_requests.fetch_sub(1, std::memory_order_release);  // (w is the fibre's once posted)
      w->done.post();
      ++events;
      return;
    }
    case kTagReg: {
      int fd = int(std::uint32_t(ud >> 3));
      bool out = (ud >> 2) & 1;
      std::uint32_t gen = std::uint32_t(ud >> 35);
      FdEntry* e = FdTable::instance().get(fd);
      if (!e) return;
      e->ring_requests.fetch_sub(1, std::memory_order_release);
      // The poll is over: the next wait arms another (before the post, so
      // that the fibre it wakes can) — if the side's mark is still this
      // poll's. A closed file's too: a wait that began before a close may
      // arm after it, and its poll, keyed with a count the reuse of the
      // number has moved on from, must not leave the mark standing for the
      // new file (which then never got a poll: issue 35, item 5).
      std::uint32_t mine = armed_tag(gen);
      (out ? e->out : e->in).ring_armed.compare_exchange_strong(mine, 0, std::memory_order_acq_rel);
      if ((e->gen.load(std::memory_order_acquire) & kGenMask) != gen) return;  // a closed file's
      if (c.res == -ECANCELED) return;
      std::uint32_t m = c.res > 0 ? std::uint32_t(c.res) : std::uint32_t(EPOLLERR);  // an error: waiters retry and see it
      // The kernel adds RDHUP to every poll: a write side's poll ends when
      // the peer shuts down its writing, writable or not. Its waiter must
      // still hear of it (it retries, and arms again if it must wait); it
      // was left waiting with no poll on (capi_echo_loom_uring hung when
      // the client's shutdown came while the echo's write waited). Its next
      // waits go through the write-side epoll set: a ring poll would end at
      // once again, for as long as the peer does not read (uring.hpp).
      if (out && !(m & (EPOLLOUT | EPOLLHUP | EPOLLERR))) e->out.ring_epoll.store(true, std::memory_order_relaxed);
      if (out) m |= EPOLLOUT;
      post_ready(*e, m);
      ++events;
      return;
    }
    case kTagRemove:
      // EALREADY: the poll was delivering an event just then, and goes on
      // (it would hold the file open for good): remove it again.
      if (c.res == -EALREADY) {
        s.uring->removes_again.fetch_add(1, std::memory_order_relaxed);
        queue_remove(s, (ud & ~kTagMask) | kTagReg);
      }
      return;
    default:
      if (ud == kEpollPoll) deliver_out_epoll(s, c.res, events);
      return;
  }
}

// Waits until e's requests in the ring have completed and been reaped, or
// for at most kCloseWaitNs (a submitter that runs one fibre for long
// without entering the kernel must not hold a close for good). The waiter
// reaps itself when nobody else does; between looks it yields, then sleeps.
//
// Only where the caller may switch fibres (issue 25, bug 7). A close made
// inside a delivery — a when_ready callback that closes its descriptor —
// holds the reaper's flag, so only it could reap what it would wait for,
// and it runs on the idle loop, inside a busy processor's look for work or
// on a poller thread; a close in a signal handler has the interrupted code
// below it; the idle loop is no fibre to park. There close does not wait:
// it takes one look at the ring (unless it is the reaper), and what is
// left is reaped with the next look; the peer then sees the hang-up when
// the kernel completes the removal, soon after close returns.
constexpr std::int64_t kCloseWaitNs = 200'000'000;

// The thread is delivering a ring's completions (uring_reap), callbacks
// included.
thread_local int tls_delivering __attribute__((tls_model("initial-exec"))) = 0;

bool may_switch() {
  if (tls_delivering || in_signal_handler()) return false;
  Processor* p = this_processor();
  return !p || p->current() != &p->idle_fibre();  // (a kernel thread waits blocking)
}

void await_requests(IoState& s, FdEntry& e) {
  if (e.ring_requests.load(std::memory_order_acquire) == 0) return;
  if (!may_switch()) {
    if (!tls_delivering) uring_try_reap(s);
    return;
  }
  Deadline until = now_ns() + kCloseWaitNs;
  for (unsigned i = 0;; ++i) {
    uring_try_reap(s);
    if (e.ring_requests.load(std::memory_order_acquire) == 0 || now_ns() >= until) return;
    if (i < 16)
      loom::this_fibre::yield();
    else
      sleep_until_ns(now_ns() + 100'000);
  }
}

}  // namespace

bool uring_open(IoState& s) {
  io_uring_params p{};
  p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
  p.cq_entries = kCqEntries;
  auto* u = new Uring;
  int r = io_uring_queue_init_params(kSqEntries, &u->ring, &p);
  if (r == -EINVAL) {  // a kernel before 5.19: no cooperative task running
    p = io_uring_params{};
    p.flags = IORING_SETUP_CQSIZE;
    p.cq_entries = kCqEntries;
    r = io_uring_queue_init_params(kSqEntries, &u->ring, &p);
  }
  if (r == 0 && !(p.features & IORING_FEAT_EXT_ARG)) {  // before 5.11: no timed wait
    io_uring_queue_exit(&u->ring);
    r = -ENOSYS;
  }
  if (r == 0) {
    // Multishot polls (5.13) and poll-first receives (5.19): ask the kernel.
    io_uring_probe* probe = io_uring_get_probe_ring(&u->ring);
    bool ok = probe && io_uring_opcode_supported(probe, IORING_OP_POLL_ADD) &&
              io_uring_opcode_supported(probe, IORING_OP_RECV) && io_uring_opcode_supported(probe, IORING_OP_READ) &&
              io_uring_opcode_supported(probe, IORING_OP_ASYNC_CANCEL) &&
              io_uring_opcode_supported(probe, IORING_OP_SOCKET);  // 5.19, like poll-first
    if (probe) io_uring_free_probe(probe);
    if (!ok) {
      io_uring_queue_exit(&u->ring);
      r = -ENOSYS;
    }
  }
  // The write-side set, made with the ring: made at a first write wait, it
  // took a number in the middle of a program's run (one a server at its
  // descriptor limit counted on), and at the limit it could not be made.
  int ep = r == 0 ? ::epoll_create1(EPOLL_CLOEXEC) : -1;
  if (r == 0 && ep < 0) {
    r = -errno;
    io_uring_queue_exit(&u->ring);
  }
  if (r != 0) {
    delete u;
    errno = -r;
    return false;
  }
  // Both kept from the program's closes (fd_table.hpp, "the runtime's own
  // descriptors"); the ring's mappings stay with the moved descriptor.
  u->ring.ring_fd = u->ring.enter_ring_fd = keep_own(u->ring.ring_fd);
  u->out_epfd.store(keep_own(ep), std::memory_order_relaxed);
  for (unsigned i = 0; i < u->ring.sq.ring_entries; ++i) u->ring.sq.array[i] = i;
  s.uring = u;
  return true;
}

void uring_arm(IoState& s, int fd, FdEntry& e, bool out) {
  FdSide& side = out ? e.out : e.in;
  if (out && side.ring_epoll.load(std::memory_order_relaxed)) return arm_out_epoll(s, fd, e);
  const std::uint32_t gen = e.gen.load(std::memory_order_acquire);
  const std::uint32_t want = armed_tag(gen);
  std::uint32_t cur = side.ring_armed.load(std::memory_order_acquire);
  do {
    if (cur == want) return;  // the poll of an earlier wait on this file is still on
  } while (!side.ring_armed.compare_exchange_weak(cur, want, std::memory_order_acq_rel));
  // A poll of a former file under the number (armed by a wait that began
  // before its close, after the close's removal): it may hold that file
  // open, or sit on this one with a key whose completion is ignored.
  if (cur != 0) queue_remove(s, poll_key(fd, cur - 1, out));
  std::uint64_t key = poll_key(fd, gen, out);
  e.ring_requests.fetch_add(1, std::memory_order_relaxed);
  LOOM_CHAOS_POINT(uring_arm);
  queue(s, [&](io_uring_sqe* sqe) {
    io_uring_prep_poll_add(sqe, fd, out ? kOutEvents : kInEvents);
    io_uring_sqe_set_data64(sqe, key);
  });
}

void uring_disarm(IoState& s, int fd, FdEntry& e) {
  if (e.out.ring_epoll.exchange(false, std::memory_order_relaxed)) {
    epoll_event ev{};  // (close(2) would also remove it, unless a dup keeps the file open)
    ::epoll_ctl(s.uring->out_epfd.load(std::memory_order_acquire), EPOLL_CTL_DEL, fd, &ev);
  }
  bool any = false;
  for (bool out : {false, true}) {
    // (the armed poll's own key: it may be of an earlier count than now)
    std::uint32_t armed = (out ? e.out : e.in).ring_armed.exchange(0, std::memory_order_acq_rel);
    if (!armed) continue;
    queue_remove(s, poll_key(fd, armed - 1, out));
    any = true;
  }
  if (UringWait* w = e.in.ring_read.load(std::memory_order_acquire)) {
    uring_cancel(s, *w);  // (flushes)
  } else if (any) {
    uring_flush(s);  // the poll holds the file: its close must not wait for the next enter
  }
  await_requests(s, e);
}

void uring_wake(IoState& s) {
  queue(s, [&](io_uring_sqe* sqe) {
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, kTagIgnore);
  });
  uring_flush(s);
}

void uring_read(IoState& s, int fd, FdEntry& e, void* buf, unsigned n, int flags, bool socket, UringWait& w) {
  w.entry = &e;
  e.ring_requests.fetch_add(1, std::memory_order_relaxed);
  tsan_release(&w);
  queue(s, [&](io_uring_sqe* sqe) {
    if (socket) {
      io_uring_prep_recv(sqe, fd, buf, n, flags);
      sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;  // the stream is drained: wait first
    } else {
      io_uring_prep_read(sqe, fd, buf, n, std::uint64_t(-1));  // the file position, like read(2)
    }
    io_uring_sqe_set_data(sqe, &w);
  });
}

void uring_cancel(IoState& s, UringWait& w) {
  queue(s, [&](io_uring_sqe* sqe) {
    io_uring_prep_cancel(sqe, &w, 0);
    io_uring_sqe_set_data64(sqe, kTagIgnore);
  });
  uring_flush(s);
}

void uring_flush(IoState& s) {
  Uring& u = *s.uring;
  if (!u.pending.load(std::memory_order_acquire)) return;
  SpinGuard g(u.sq_lock);
  u.pending.store(false, std::memory_order_relaxed);
  if (!publish(u)) return;
  int r = enter(u, kSqEntries, 0, 0, kForever);
  if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) die("io_uring_enter (submit)", -r);
}

bool uring_try_reap(IoState& s) {
  Uring& u = *s.uring;
  if (u.reaping.exchange(true, std::memory_order_acquire)) return false;
  uring_reap(s, kNow);
  u.reaping.store(false, std::memory_order_release);
  return true;
}

int uring_reap(IoState& s, Deadline d) {
  Uring& u = *s.uring;
  bool submit = false;
  if (u.pending.load(std::memory_order_acquire)) {
    SpinGuard g(u.sq_lock);
    u.pending.store(false, std::memory_order_relaxed);
    submit = publish(u);
  }
  unsigned flags = IO_URING_READ_ONCE(*u.ring.sq.kflags);
  bool wait = d != kNow && io_uring_cq_ready(&u.ring) == 0;
  if (submit || wait || (flags & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW))) {
    unsigned enter_flags = (wait || (flags & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW))) ? IORING_ENTER_GETEVENTS : 0;
    int r = enter(u, submit ? kSqEntries : 0, wait ? 1 : 0, enter_flags, d);
    if (r < 0 && r != -EINTR && r != -ETIME && r != -EAGAIN && r != -EBUSY) die("io_uring_enter", -r);
  }
  WakeDefer defer;
  unsigned events = 0, seen = 0, head;
  io_uring_cqe* cqe;
  ++tls_delivering;
  io_uring_for_each_cqe(&u.ring, head, cqe) {
    io_uring_cqe c = *cqe;
    ++seen;
    deliver_one(s, c, events);
  }
  --tls_delivering;
  io_uring_cq_advance(&u.ring, seen);
  if (events) {
    count(*s.cluster, Stat::poller_wakeups);
    count(*s.cluster, Stat::poller_events, events);
  }
  return int(seen);
}

}  // namespace loom::rt
