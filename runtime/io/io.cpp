// io/io.cpp — the generic I/O wrapper and the calls built on it.
//
//   call(fd, side, op):            (op: one attempt that does not wait —
//                                     the descriptor rule, below)
//     kernel thread (no processor)  → op, and if it would block where the
//                                     program's call would wait, poll(2)
//                                     and retry
//     file or foreign descriptor    → op on the offload cluster
//     program's own O_NONBLOCK      → op
//     input and yield-before-read   → yield first
//     op succeeds or fails otherwise than EAGAIN → done (the fast path)
//     slow path: take the side's turn, register the fd if it is not yet
//     (lazy registration), wait on the side's readiness semaphore, retry.
//
// errno. Every system call here runs inside sys(), a non-inlined function
// that returns -errno, so errno is read on the kernel thread that made the
// call; the wrapper sets errno (again out of line) after its last switch.
// A compiler may keep errno's address (a thread-local) across a call that
// switches fibres, and the fibre may resume on another kernel thread.
#include <fcntl.h>
#include <linux/magic.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <type_traits>
#include <vector>

#include "io/fd_table.hpp"
#include "base/chaos.hpp"
#include "base/sys.hpp"
#include "io/poller.hpp"
#include "io/rest.hpp"
#include "io/uring.hpp"
#include "loom/cluster.hpp"
#include "loom/io.hpp"
#include "sched/cancel.hpp"
#include "sched/cluster.hpp"
#include "sched/in_handler.hpp"
#include "sched/processor.hpp"
#include "sync/parking_lot.hpp"

namespace loom::rt {

// ---- The descriptor rule -------------------------------------------------------------
//
// O_NONBLOCK belongs to the open file, not to the number: a program shares
// it with every number it dups and every process it forks, and a child that
// knows nothing of loom (exec'd, preloaded or not) reads and writes through
// it. So loom changes no status flag on a descriptor it did not make, and on
// the pthread routes (libloom-pthread, keep_flags below) not on the ones it
// makes for the program either: a blocking descriptor stays blocking in the
// kernel, and each attempt asks the kernel itself not to wait — MSG_DONTWAIT
// on a socket, preadv2/pwritev2 with RWF_NOWAIT on a pipe (Linux 5.9's
// pipes; probed once, pipes_nowait) — while readiness comes from the poller
// as for any descriptor. What cannot be tried without waiting goes to the
// offload cluster: named FIFOs and terminals (no RWF_NOWAIT), regular
// files, connect(2) on a blocking socket. accept(2) has no per-call flag:
// on a blocking listener loom looks (poll, zero timeout) and accepts when a
// connection is queued — another process that takes it first leaves the
// accept waiting in the kernel, on the processor, for the next one.
// The native API (loom::io) keeps making its own sockets and pipes
// non-blocking underneath (loom_nb), which saves the per-call forms and the
// look before accept; fcntl(F_GETFL) through loom hides it.
// Whether the program sees a descriptor blocking is the kernel's answer,
// asked where it decides something (FdEntry::program_nonblock): before a
// wait, after a short write, before accept's look, connect and a call with
// no per-call form. loom's record is only a hint: ioctl(FIONBIO), a fcntl
// through a dup or in a child change the flag where loom cannot see it.
namespace {
bool keep_flags = false;  // the pthread routes: loom never sets O_NONBLOCK
}  // namespace

void io_keep_flags() { keep_flags = true; }

// RWF_NOWAIT works on pipes (Linux >= 5.9): an empty pipe answers EAGAIN.
bool pipes_nowait() {
  static const bool ok = [] {
    int p[2];
    if (sys::pipe2(p, O_CLOEXEC) != 0) return false;
    char c;
    iovec v{&c, 1};
    bool r = sys::preadv2(p[0], &v, 1, RWF_NOWAIT) < 0 && errno == EAGAIN;
    sys::close(p[0]);
    sys::close(p[1]);
    return r;
  }();
  return ok;
}

// The character devices whose calls are made in place: offloading them
// would only move the fibre to another kernel thread and back (dd
// of=/dev/null). An explicit list of the kernel's memory devices
// (drivers/char/mem.c, major 1) that never wait: mem 1, kmem 2, null 3,
// port 4, zero 5, full 7, random 8, urandom 9 (random waits only until the
// pool is first seeded, at boot). Not the rest of major 1: kmsg (11) waits
// for the next kernel record (dmesg --follow), and a number the kernel adds
// later may wait too. Not a zero-timeout poll per call either: a readable
// kmsg still waits once its records are read, and the poll would cost as
// much as the read. Every other device goes to the offload cluster.
static bool never_blocks(dev_t dev) {
  if (major(dev) != 1) return false;
  unsigned m = minor(dev);
  return (m >= 1 && m <= 5) || (m >= 7 && m <= 9);
}

// First use of a descriptor loom did not create: sockets, and pipes where
// RWF_NOWAIT works, are waited on through the poller (their flags as they
// are: the program's); named FIFOs, terminals and anonymous descriptors
// (eventfd, timerfd, signalfd, epoll) the program made non-blocking itself
// are too; anything else (a regular file, a blocking terminal or FIFO, a
// blocking anonymous descriptor) is left as it is and its calls are
// offloaded. A descriptor that is not open (closed, perhaps by another
// fibre a moment ago) stays unknown and is not described: kFdUnknown back,
// which callers answer with EBADF.
std::uint8_t classify(int fd, FdEntry& e) {
  // Not made by loom: another number or process may share the file.
  struct stat st {};
  if (fstat(fd, &st) != 0) return kFdUnknown;
  int fl = rt::sys::fcntl(fd, F_GETFL);
  bool nb = fl >= 0 && (fl & O_NONBLOCK);
  e.loom_nb.store(false, std::memory_order_relaxed);
  if (fl >= 0 && S_ISSOCK(st.st_mode)) {
    int type = 0;
    socklen_t len = sizeof type;
    bool stream = getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
    e.describe(kFdPollable, nb, stream, /*shared=*/true, Nowait::sock);
    return kFdPollable;
  }
  if (fl >= 0 && (S_ISFIFO(st.st_mode) || (st.st_mode & S_IFMT) == 0)) {
    struct statfs fs {};
    bool pipe = S_ISFIFO(st.st_mode) && fstatfs(fd, &fs) == 0 && fs.f_type == PIPEFS_MAGIC && pipes_nowait();
    if (nb || pipe) {
      e.describe(kFdPollable, nb, S_ISFIFO(st.st_mode), /*shared=*/true, pipe ? Nowait::pipe : Nowait::none);
      return kFdPollable;
    }
  }
  // Regular files: reads are tried in the page cache first (read_in_place).
  std::uint8_t kind = kFdFile;
  if (fl >= 0 && S_ISREG(st.st_mode))
    kind = kFdRegular;
  else if (fl >= 0 && S_ISCHR(st.st_mode) && never_blocks(st.st_rdev))
    kind = kFdInPlace;
  e.describe(kind, false, false, /*shared=*/true);
  return kind;
}

// The check behind a call that failed as a call on another kind of file
// fails (poller.hpp, io_stale). One fstat, on that error path only: the
// record holds if what it says of the file — a socket, a regular file, a
// device read in place, a pipe tried with RWF_NOWAIT — is what the number
// refers to now. (It cannot tell one pipe or socket from another: a number
// reused by a file of the same kind keeps its record, and its calls take
// the same route as the new file's would.)
bool io_stale(int fd) {
  FdEntry* e = FdTable::instance().find(fd);
  if (!e) return false;
  std::uint8_t kind = e->kind.load(std::memory_order_acquire);
  if (kind == kFdUnknown) return false;
  int saved = errno;
  struct stat st {};
  bool open = fstat(fd, &st) == 0;
  errno = saved;
  if (!open) return false;  // not open: the error is the call's
  bool sock = S_ISSOCK(st.st_mode);
  bool holds =
      e->sock() == sock && (kind == kFdRegular) == S_ISREG(st.st_mode) &&
      (kind == kFdInPlace) == (S_ISCHR(st.st_mode) && never_blocks(st.st_rdev)) &&
      !(kind == kFdPollable && e->nowait.load(std::memory_order_relaxed) == Nowait::pipe && !S_ISFIFO(st.st_mode));
  if (holds) return false;
  loom::io::forget(fd);
  errno = saved;
  return true;
}

namespace {

enum Side { kIn, kOut };

// The processor whose fibre makes the call; none for a kernel thread that
// is not a processor, and none inside a program's signal handler
// (sched/in_handler.hpp): there the calls block the kernel thread.
Processor* io_processor() noexcept {
  Processor* p = this_processor_at_entry();
  return p && in_signal_handler() ? nullptr : p;
}

template <typename Op>
__attribute__((noinline)) long syscall_op(Op&& op) {
  long r = long(op());
  return r < 0 ? -errno : r;
}

__attribute__((noinline)) long finish(long r) {
  if (r < 0) {
    errno = int(-r);
    return -1;
  }
  return r;
}

FdTable& table() {
  static FdTable& t = FdTable::instance();
  return t;
}


// A new descriptor under the number (one loom made or copied): a fibre
// still on its way to wait for the number's former file must not sleep on
// it. That file's close posted a token, but describe() is about to clear
// it, and the fibre may have registered the old file between the close's
// count and close(2), which took the registration away. So this is a close
// for such fibres too: the count moves (ReadyWord::wait's gate stops one
// not yet parked) and a parked one is woken; both return EBADF. No fibre
// can be waiting for the new file yet: its number was only now returned.
// (A post only where one waits: the token it would leave otherwise is what
// describe clears, and this runs for every accepted connection.)
void renumbered(FdEntry& e) {
  e.gen.fetch_add(1, std::memory_order_seq_cst);
  if (e.in.ready.has_waiter()) e.in.ready.post();
  if (e.out.ready.has_waiter()) e.out.ready.post();
}

// Sets up the entry of a descriptor loom just created: non-blocking
// underneath unless keep_flags, `user_nonblock` as the program asked.
// Returns the entry (nullptr: a number beyond the table).
FdEntry* adopt(int fd, bool user_nonblock, bool eager_register, bool stream, bool sock = true) {
  FdEntry* e = table().get(fd);
  if (!e) return nullptr;
  // The number's former file was closed behind loom's back (without
  // io::close or forget): an io_uring registration still holds it open.
  if (IoState* old = e->registered.load(std::memory_order_acquire); old && old->uring) {
    io_deregister(fd, *e);
    e->gen.fetch_add(1, std::memory_order_acq_rel);
  }
  renumbered(*e);
  e->clear_timeouts();
  e->loom_nb.store(!keep_flags, std::memory_order_release);
  Nowait form = Nowait::sock;
  if (!sock) form = pipes_nowait() ? Nowait::pipe : Nowait::none;
  e->describe(kFdPollable, user_nonblock, stream, /*shared=*/false, form);
  if (eager_register)
    if (Processor* p = this_processor()) io_register(io_state(p->cluster()), fd, *e);
  return e;
}

// The single attempts (the descriptor rule): on a descriptor whose open
// file is blocking, the form that does not wait; otherwise the plain call
// (which is also what the offload cluster and a file get). The form is the
// call's, fixed when it began (call()), never looked up again per attempt.
long read_op(Nowait f, int fd, void* b, std::size_t n) {
  if (f == Nowait::none) return sys::read(fd, b, n);
  if (f == Nowait::sock) return sys::recv(fd, b, n, MSG_DONTWAIT);
  iovec v{b, n};
  return sys::preadv2(fd, &v, 1, RWF_NOWAIT);
}
long write_op(Nowait f, int fd, const void* b, std::size_t n) {
  if (f == Nowait::none) return sys::write(fd, b, n);
  if (f == Nowait::sock) return sys::send(fd, b, n, MSG_DONTWAIT);  // (write(2)'s SIGPIPE as well)
  iovec v{const_cast<void*>(b), n};
  return sys::pwritev2(fd, &v, 1, RWF_NOWAIT);
}
long readv_op(Nowait f, int fd, const iovec* iov, int cnt) {
  if (f == Nowait::none) return sys::readv(fd, iov, cnt);
  if (f == Nowait::sock) {
    msghdr m{};
    m.msg_iov = const_cast<iovec*>(iov);
    m.msg_iovlen = std::size_t(cnt);
    return sys::recvmsg(fd, &m, MSG_DONTWAIT);
  }
  return sys::preadv2(fd, iov, cnt, RWF_NOWAIT);
}
long writev_op(Nowait f, int fd, const iovec* iov, int cnt) {
  if (f == Nowait::none) return sys::writev(fd, iov, cnt);
  if (f == Nowait::sock) {
    msghdr m{};
    m.msg_iov = const_cast<iovec*>(iov);
    m.msg_iovlen = std::size_t(cnt);
    return sys::sendmsg(fd, &m, MSG_DONTWAIT);
  }
  return sys::pwritev2(fd, iov, cnt, RWF_NOWAIT);
}
// accept(2) has no per-call form: on a blocking listener, accept only when
// a connection is queued (the descriptor rule says what that leaves open).
long accept_op(Nowait f, int fd, sockaddr* addr, socklen_t* len, int flags) {
  if (f != Nowait::none && !table().get(fd)->program_nonblock(fd)) {
    pollfd q{fd, POLLIN, 0};
    int n = sys::poll(&q, 1, 0);
    if (n <= 0) {
      if (n == 0) errno = EAGAIN;
      return -1;
    }
  }
  return sys::accept4(fd, addr, len, flags);
}

// A blocking descriptor's write is whole (POSIX, for pipes; Linux, for
// stream sockets): where loom tries per call on one the program sees
// blocking (the kernel says so: asked after a short write only), a short
// write goes on with the rest, as the kernel's would.
// `next(done)` writes from byte `done`; an error after some bytes leaves
// their count, as the kernel's does.
template <typename Next>
long whole(int fd, std::size_t n, long r, Next next) {
  FdEntry* e = r > 0 && std::size_t(r) < n ? table().get(fd) : nullptr;
  while (e && r > 0 && std::size_t(r) < n && e->per_call() && e->stream.load(std::memory_order_relaxed) &&
         !e->program_nonblock(fd)) {
    long more = next(std::size_t(r));
    if (more <= 0) break;
    r += more;
  }
  return r;
}

bool lazy_here() {
  Processor* p = io_processor();
  return !p || p->cluster().config().lazy_register;
}


// The call made on the offload cluster; meanwhile the fibre is listed as
// blocked on `fd` in direction `kind` (fd_in, fd_out), offloaded.
template <typename Op>
long offloaded(Op& op, WaitKind kind, int fd) {
  void* token = offload_enter(kind, fd_object(fd));
  long r = syscall_op(op);
  offload_leave(token);
  return r;
}


// Blocking emulation for a kernel thread on a descriptor loom made
// non-blocking.
template <typename Op>
long thread_call(int fd, FdEntry& e, Side side, Op& op, Deadline d, int timeout_err) {
  for (;;) {
    long r = syscall_op(op);
    if (r != -EAGAIN || e.program_nonblock(fd)) return r;
    FdSide& s = side == kIn ? e.in : e.out;
    if (d == kForever)
      if (std::int64_t t = s.timeout_ns.load(std::memory_order_relaxed)) d = now_ns() + t;
    int ms = -1;
    if (d != kForever) {
      std::int64_t left = d - now_ns();
      if (left <= 0) return -timeout_err;
      ms = int((left + 999'999) / 1'000'000);
    }
    pollfd p{fd, short(side == kIn ? POLLIN : POLLOUT), 0};
    if (rt::sys::poll(&p, 1, ms) < 0 && errno != EINTR) return -errno;
  }
}

// The slow path: the fd would block. Returns the final result (or -errno).
// `program_flag`: a call the program sees blocking only while the kernel
// says so (the descriptor rule: loom's record may be stale). Before each
// park with no token to end it, the kernel is asked; a file non-blocking
// now gets one attempt, whose answer (EAGAIN, likely) is the call's. (Not
// when a token is there: the wait ends at once, and a streaming reader's
// drained reads would each pay the fcntl.)
// `gen`: the close count the caller read when its call began, before its
// first attempt: a close since then (and the number's reuse) is EBADF, never
// a wait on whatever the number refers to now.
template <typename Op>
long wait_once(int fd, FdEntry& e, std::uint32_t gen, Side side, Op& op, Deadline d, int timeout_err,
               bool contended_retry, bool program_flag, bool* handler_due);

// A handler due on the waiting fibre (parking_lot::SignalHooks::io_waiting)
// ends one wait: it runs outside the descriptor's turn, and then the call
// waits again (every handler had SA_RESTART) or fails with EINTR. A call
// the kernel never restarts (`restartable` false: poll) fails with EINTR at
// once; its caller's delivery point runs the handler.
template <typename Op>
long wait_and_retry(int fd, FdEntry& e, std::uint32_t gen, Side side, Op& op, Deadline d, int timeout_err,
                    bool contended_retry, bool program_flag = false, bool restartable = true) {
  for (;;) {
    bool handler_due = false;
    long r = wait_once(fd, e, gen, side, op, d, timeout_err, contended_retry, program_flag, &handler_due);
    if (!handler_due) return r;
    if (!restartable) return -EINTR;
    auto interrupted = parking_lot::signal_hooks.interrupted.load(std::memory_order_acquire);
    if (!interrupted || interrupted() == parking_lot::Handled::interrupt) return -EINTR;
    // signal(7): a socket call with a timeout (SO_RCVTIMEO, SO_SNDTIMEO)
    // is never restarted.
    if ((side == kIn ? e.in : e.out).timeout_ns.load(std::memory_order_relaxed) != 0) return -EINTR;
    contended_retry = true;  // look before waiting again
  }
}

// Tells the signal side where the calling fibre is about to sleep (or, with
// WaitKind::none, that it woke): true if a handler is due on it already.
bool io_waiting(WaitKind kind, const void* object) {
  auto h = parking_lot::signal_hooks.io_waiting.load(std::memory_order_acquire);
  return h && h(kind, object);
}

template <typename Op>
long wait_once(int fd, FdEntry& e, std::uint32_t gen, Side side, Op& op, Deadline d, int timeout_err,
               bool contended_retry, bool program_flag, bool* handler_due) {
  FdSide& s = side == kIn ? e.in : e.out;
  if (d == kForever) {
    if (std::int64_t t = s.timeout_ns.load(std::memory_order_relaxed)) d = now_ns() + t;
  } else {
    timeout_err = ETIMEDOUT;
  }
  long r = -EAGAIN;
  if (!s.turn.try_lock()) {
    // Waiting for another fibre's call to end is part of this call, a
    // cancellation point: a request ends it (sched/cancel.hpp, through the
    // mutex's wait_on) with ECANCELED.
    Fibre* self = this_processor()->current();
    self->cancel_wait = true;
    int rc = s.turn.lock_errno(d);
    self->cancel_wait = false;
    if (rc == ECANCELED) return -ECANCELED;
    if (rc != 0) return -timeout_err;
    contended_retry = true;  // another fibre had the turn: look again first
  }
  if (contended_retry) {
    r = e.gen.load(std::memory_order_acquire) != gen ? -EBADF : syscall_op(op);
    if (r != -EAGAIN) {
      s.turn.unlock();
      return r;
    }
  }
  IoState& io = io_state(this_processor()->cluster());
  if (!e.registered.load(std::memory_order_acquire) && !io_register(io, fd, e)) {
    // (closed meanwhile, the number maybe another's: EBADF, as after a wait)
    r = e.gen.load(std::memory_order_acquire) != gen ? -EBADF : -errno;
  } else {
    for (;;) {
      if (program_flag && !s.ready.has_token() && e.program_nonblock(fd)) {
        r = e.gen.load(std::memory_order_acquire) != gen ? -EBADF : syscall_op(op);
        break;
      }
      this_processor()->counters.add(Stat::io_blocks);
      const WaitKind kind = side == kIn ? WaitKind::fd_in : WaitKind::fd_out;
      const void* object = reinterpret_cast<const void*>(std::intptr_t(fd));
      note_wait(kind, object);
      if (cancel_pending_here()) {  // a cancellation point (sched/cancel.hpp): its request posts the word
        r = -ECANCELED;
        break;
      }
      if (io_waiting(kind, object)) {
        *handler_due = true;
        break;
      }
      io_arm(fd, e, side == kOut);
      LOOM_CHAOS_POINT(io_park);
      int rc = s.ready.wait(d, &e.gen, gen);  // a close since `gen` was read: no sleep (issue 25, bug 4)
      io_waiting(WaitKind::none, nullptr);
      if (e.gen.load(std::memory_order_acquire) != gen) {
        r = -EBADF;
        break;
      }
      if (rc != 0) {
        r = -timeout_err;
        break;
      }
      r = syscall_op(op);
      if (r != -EAGAIN) break;
      this_processor()->counters.add(Stat::spurious);
    }
  }
  s.turn.unlock();
  return r;
}

// A plain read's arguments, for the io_uring back end to do it itself.
struct ReadSpec {
  void* buf;
  std::size_t n;
  int flags;
  bool recv;  // recv(2) (flags apply), else read(2) (a recv with no flags on a socket)
};

// A plain read of a regular file. On Linux it is atomic with respect to the
// file's offset (threads, or a parent and its child, sharing the open file
// each get a contiguous range) and returns all it asked for unless it
// reaches the end of the file: so it is made as one system call, in place
// or on the offload cluster, never as a part from the cache and the rest
// from the disk (issue 35, item 1: two calls, each moving the shared
// offset, tore other readers' buffers).
//
// Which of the two is decided without moving the offset:
//   probing (a descriptor's first reads, and after a miss): lseek(SEEK_CUR)
//     for the offset, preadv2 there with RWF_NOWAIT (the offset stays put);
//     if the cache holds the whole read, or all of it up to the end of the
//     file (a second probe at the end of what came back says 0, not EAGAIN),
//     read(2) in place commits it; otherwise read(2) on the offload
//     cluster. The probe is a hint only: if another thread moves the offset
//     between it and the commit, the commit is still one read, which may
//     then wait for the disk on this processor.
//   trusted (kCachedRun probes in a row found the cache held it all): the
//     read itself is preadv2 at the offset with RWF_NOWAIT, one call that
//     moves the offset by what it returns. All of it, or 0 (the end): that
//     is the answer. EAGAIN (nothing was cached, nothing moved): read(2) on
//     the offload cluster, and probing again. Short: bytes were consumed and
//     the offset moved, so nothing may follow — the short count is the
//     answer (the end of the file, or a page missing mid-read, where a
//     kernel read would have been longer), and probing again.
// So a dd of a cached file pays one system call per read (after 8 probed
// ones), and the one divergence left is a short read when a trusted
// descriptor's read meets a missing page past its first.
// A kernel or file system without RWF_NOWAIT for the file (EOPNOTSUPP,
// EINVAL) takes the offload every time.
constexpr std::uint8_t kCachedRun = 8;

// An RWF_NOWAIT answer that leaves the read to the offload cluster: not
// cached (EAGAIN), or no RWF_NOWAIT for this file (EOPNOTSUPP, EINVAL). Any
// other error is the read's own (EBADF, EISDIR, EIO...).
bool offload_answer(long r) { return r == -EAGAIN || r == -EOPNOTSUPP || r == -EINVAL; }

template <typename Op>
long read_in_place(int fd, FdEntry& e, const ReadSpec& rs, Op& op) {
  if (rs.n == 0) return offloaded(op, WaitKind::fd_in, fd);
  iovec v{rs.buf, rs.n};
  std::uint8_t run = e.cached_run.load(std::memory_order_relaxed);
  if (run >= kCachedRun) {
    long r = syscall_op([&] { return sys::preadv2(fd, &v, 1, RWF_NOWAIT); });
    if (r == long(rs.n) || r == 0) return r;
    e.cached_run.store(0, std::memory_order_relaxed);
    if (r > 0) return r;
    return offload_answer(r) ? offloaded(op, WaitKind::fd_in, fd) : r;
  }
  off_t at = sys::lseek(fd, 0, SEEK_CUR);
  if (at < 0) return offloaded(op, WaitKind::fd_in, fd);
  long r = syscall_op([&] { return sys::preadv2_at(fd, &v, 1, at, RWF_NOWAIT); });
  bool cached = r == long(rs.n) || r == 0;
  if (r > 0 && !cached) {
    // The end of the file, or of what the cache holds.
    char c;
    iovec one{&c, 1};
    cached = syscall_op([&] { return sys::preadv2_at(fd, &one, 1, at + r, RWF_NOWAIT); }) == 0;
  }
  if (!cached) {
    if (r < 0 && !offload_answer(r)) return r;
    e.cached_run.store(0, std::memory_order_relaxed);
    return offloaded(op, WaitKind::fd_in, fd);
  }
  if (r == long(rs.n) && run < kCachedRun) e.cached_run.store(std::uint8_t(run + 1), std::memory_order_relaxed);
  return syscall_op(op);
}

// A drained stream's read on the io_uring back end: the ring does the read
// when bytes arrive, and the completion brings the count (io/uring.hpp).
// Falls back to the readiness wait when another fibre has the turn.
template <typename Op>
long ring_read(int fd, FdEntry& e, std::uint32_t gen, IoState& io, const ReadSpec& rs, Op& op, Deadline d,
               int timeout_err) {
  FdSide& s = e.in;
  // A ring read waits: not for a file the program has made non-blocking
  // behind loom (the descriptor rule), which gets one attempt.
  if (e.program_nonblock(fd)) return syscall_op(op);
  if (!s.turn.try_lock()) return wait_and_retry(fd, e, gen, kIn, op, d, timeout_err, false, true);
  Deadline until = d;
  if (until == kForever) {
    if (std::int64_t t = s.timeout_ns.load(std::memory_order_relaxed)) until = now_ns() + t;
  } else {
    timeout_err = ETIMEDOUT;
  }
  long r;
  for (;;) {
    UringWait w;
    s.ring_read.store(&w, std::memory_order_release);
    uring_read(io, fd, e, rs.buf, unsigned(std::min<std::size_t>(rs.n, 1u << 30)), rs.flags, rs.recv || e.sock(), w);
    this_processor()->counters.add(Stat::io_blocks);
    note_wait(WaitKind::fd_in, reinterpret_cast<const void*>(std::intptr_t(fd)));
    bool timed_out = w.done.wait(until) != 0;
    if (timed_out) {
      // The request writes into the caller's buffer: it must be over
      // before the call returns (done, or cancelled).
      uring_cancel(io, w);
      w.done.wait(kForever);
    }
    s.ring_read.store(nullptr, std::memory_order_relaxed);
    r = w.res;
    if (e.gen.load(std::memory_order_acquire) != gen) {
      if (r < 0) r = -EBADF;  // (bytes read before the close are the caller's)
      break;
    }
    if (r == -ECANCELED && timed_out) {
      r = -timeout_err;
      break;
    }
    // Cancelled by a close of a former request at the same address, or
    // refused: wait as the epoll back end does.
    if (r == -ECANCELED || r == -EAGAIN) {
      s.turn.unlock();
      return wait_and_retry(fd, e, gen, kIn, op, d, timeout_err, /*look first=*/true, true);
    }
    break;
  }
  s.turn.unlock();
  return r;
}

// Any input call that may have consumed an edge decides the hints anew: r
// is its result, `want` the bytes a plain read asked for (0 otherwise).
void note_input(FdEntry& e, long r, std::size_t want) {
  bool drained = want && r > 0 && std::size_t(r) < want && e.stream.load(std::memory_order_relaxed) &&
                 e.registered.load(std::memory_order_relaxed);
  if (drained != e.in_drained.load(std::memory_order_relaxed)) e.in_drained.store(drained, std::memory_order_relaxed);
  bool full = want && r > 0 && std::size_t(r) == want;
  if (full != e.in_full.load(std::memory_order_relaxed)) e.in_full.store(full, std::memory_order_relaxed);
}

// ---- A connection's first read ---------------------------------------------------
//
// A client connects, then sends: a server that accepts at once and reads
// finds nothing, pays read(2) for its EAGAIN and then waits. The epoll loop
// never tries: it adds the socket and waits for the edge. So each listener
// keeps a score of its connections' first reads: one that found nothing
// raises it, one that found bytes lowers it four times as fast (the
// accept found the request already in: TCP_DEFER_ACCEPT, a backlog). At
// kWaitFirst and above, a new connection's first read waits for the edge
// without trying, except one connection in 16 that still tries and reports
// (the probe that lets the score come down). Waiting on a socket that has
// bytes costs a registration and a round through the poller, which is why
// the score must come down fast.
constexpr std::int8_t kWaitFirst = 4, kScoreMax = 8, kScoreMin = -8;

void first_read_policy(int listener, FdEntry& l, FdEntry& e) {
  std::uint8_t n = std::uint8_t(l.accepts.load(std::memory_order_relaxed) + 1);
  l.accepts.store(n, std::memory_order_relaxed);
  if (l.first_read_score.load(std::memory_order_relaxed) >= kWaitFirst && (n & 15) != 0)
    e.in_drained.store(true, std::memory_order_relaxed);
  else
    e.probe_for.store(listener, std::memory_order_relaxed);
}

void first_read_seen(FdEntry& e, bool empty) {
  int listener = e.probe_for.load(std::memory_order_relaxed);
  e.probe_for.store(-1, std::memory_order_relaxed);
  FdEntry* l = table().get(listener);
  if (!l) return;
  int s = l->first_read_score.load(std::memory_order_relaxed) + (empty ? 1 : -4);
  l->first_read_score.store(std::int8_t(s > kScoreMax ? kScoreMax : s < kScoreMin ? kScoreMin : s),
                            std::memory_order_relaxed);
}

// One attempt in the call's form: the ops whose system call depends on it
// take it (read_op...), the others (recv with MSG_DONTWAIT, a poll) do not.
template <typename Op>
long in_form(Op& op, Nowait form) {
  if constexpr (std::is_invocable_v<Op&, Nowait>)
    return op(form);
  else
    return op();
}

// The generic wrapper; returns the result or -errno. `want`: bytes asked of
// a plain read (0 for other calls), for the drained-queue shortcut.
//
// A call is bound to the file its number referred to when it began, as the
// kernel's is (it holds that file for the whole call), as far as loom can
// tell files apart: by the number's close count. The count is read first;
// then what the entry says of the file (kind, the attempts' form), checked
// against the count again, so that all of it is that file's; and every
// attempt of the call is made in that form. So another thread's close (and
// a reuse of the number: socketpair, accept, dup2) never turns an attempt
// into the plain call, which on a blocking socket waits in the kernel, on
// the processor, for the old file or the new one (issue 35, item 5: read
// afresh per attempt, the form was gone once close had marked the number
// unknown); an attempt that fails after such a close reports EBADF (a newer
// file may refuse the old one's form); and the wait is for the count read
// here, not one read after the attempt, which a close and reuse between
// the two made a wait on the new file.
template <typename Op>
long call(int fd, Side side, Op&& user_op, Deadline d = kForever, int timeout_err = EAGAIN, bool input = false,
          std::size_t want = 0, const ReadSpec* rs = nullptr, const char* what = __builtin_FUNCTION()) {
  Processor* p = io_processor();
  // The call's name for the listing ("blocked: fd 7 (accept4)"): the
  // loom::io function that called this one; one store, read only if the
  // fibre blocks on the descriptor.
  if (p) p->current()->wait_call.store(what, std::memory_order_relaxed);
  FdEntry* e = table().get(fd);
  if (!e) return syscall_op([&] { return in_form(user_op, Nowait::none); });
  const std::uint32_t gen = e->gen.load(std::memory_order_acquire);
  std::uint8_t kind = e->kind.load(std::memory_order_acquire);
  if (__builtin_expect(kind == kFdUnknown, 0)) {
    kind = classify(fd, *e);
    if (kind == kFdUnknown) return -EBADF;  // not open (fstat said so)
  }
  const Nowait form = e->per_call(kind) ? e->nowait.load(std::memory_order_acquire) : Nowait::none;
  if (e->gen.load(std::memory_order_acquire) != gen) return -EBADF;  // closed since: kind and form may be another's
  auto op = [&]() -> long {
    long r = in_form(user_op, form);
    if (r < 0 && e->gen.load(std::memory_order_acquire) != gen) errno = EBADF;
    return r;
  };
  if (!p) return kind == kFdPollable ? thread_call(fd, *e, side, op, d, timeout_err) : syscall_op(op);
  // A pollable descriptor with no per-call form (a FIFO, terminal, eventfd
  // the program made non-blocking) is tried in place only while its file
  // is non-blocking: one the program has made blocking since would hold
  // the processor. Its call goes to the offload cluster instead.
  if (kind == kFdPollable && form == Nowait::none && !e->loom_nb.load(std::memory_order_relaxed) &&
      !e->program_nonblock(fd))
    kind = kFdFile;
  if (kind != kFdPollable) {
    if (kind == kFdInPlace) return syscall_op(op);
    if (kind == kFdRegular && rs) return read_in_place(fd, *e, *rs, op);
    return offloaded(op, side == kIn ? WaitKind::fd_in : WaitKind::fd_out, fd);
  }
  if (e->user_nonblock.load(std::memory_order_relaxed)) {
    // The program waits itself (poll, epoll_wait): the hints are for it.
    // The flag is the kernel's (the hint may be stale): asked on EAGAIN.
    long r = syscall_op(op);
    if (r == -EAGAIN && !e->program_nonblock(fd)) r = wait_and_retry(fd, *e, gen, side, op, d, timeout_err, false);
    if (input) note_input(*e, r, want);
    return r;
  }
  long r;
  IoState* io = e->registered.load(std::memory_order_relaxed);
  bool ring = rs && io && io->ring_reads && io == p->cluster().io.load(std::memory_order_relaxed);
  if (want && e->in_drained.load(std::memory_order_relaxed) && !e->hup.load(std::memory_order_relaxed)) {
    // Nothing has arrived unless the poller saw an edge: wait for it (or,
    // on io_uring, have the ring read when it arrives). An unregistered
    // descriptor (a connection's first read) is registered by the wait,
    // and a registration reports what is there already.
    e->in_drained.store(false, std::memory_order_relaxed);
    if (ring)
      r = ring_read(fd, *e, gen, *io, *rs, op, d, timeout_err);
    else
      r = wait_and_retry(fd, *e, gen, side, op, d, timeout_err, false, /*program's flag=*/true);
  } else {
    if (input && p->cluster().config().yield_before_read && !(want && e->in_full.load(std::memory_order_relaxed)))
      p->yield();
    r = syscall_op(op);
    if (want && !io && e->probe_for.load(std::memory_order_relaxed) >= 0) first_read_seen(*e, r == -EAGAIN);
    if (r == -EAGAIN) {
      // Found empty: on io_uring the ring reads when bytes arrive.
      if (ring && e->registered.load(std::memory_order_relaxed) == io)
        r = ring_read(fd, *e, gen, *io, *rs, op, d, timeout_err);
      else
        r = wait_and_retry(fd, *e, gen, side, op, d, timeout_err, false, /*program's flag=*/true);
    }
  }
  if (input) note_input(*e, r, want);
  return r;
}

// Callbacks a close took out of the descriptor's readiness words: invoked
// once the number is closed (when_ready's contract, loom/io.hpp).
struct Disarmed {
  ReadyWord::Callback fn[2] = {};
  void* arg[2] = {};
  void fire() {
    for (int i = 0; i < 2; ++i)
      if (fn[i]) fn[i](arg[i]);
  }
};

// After a close (by loom or not) of fd: waiters fail with EBADF, armed
// callbacks move to `d`, the number is unknown again.
void retire(int fd, Disarmed& d) {
  FdEntry* e = table().get(fd);
  if (!e || e->kind.load(std::memory_order_acquire) == kFdUnknown) return;
  IoState* reg = e->registered.load(std::memory_order_acquire);
  bool ring = reg && reg->uring;
  // An io_uring poll or read holds the file: only epoll's close(2)
  // deregisters (io_deregister removes and cancels them at once).
  if (ring || e->shared.load(std::memory_order_relaxed))
    io_deregister(fd, *e);
  else
    e->registered.store(nullptr, std::memory_order_relaxed);  // close(2) deregisters
  // seq_cst, before the posts: a waiter that published itself after this
  // sees the new count (ReadyWord::wait's gate), one published before is
  // woken by the post — the post's token alone is not enough, since a new
  // descriptor under the number clears it (describe).
  e->gen.fetch_add(1, std::memory_order_seq_cst);
  LOOM_CHAOS_POINT(close_retire);
  e->kind.store(kFdUnknown, std::memory_order_release);
  e->in.ready.take_or_post(d.fn[0], d.arg[0]);
  e->out.ready.take_or_post(d.fn[1], d.arg[1]);
}

// A new number that refers to the same open file as `from`.
void copy_view(int from, int to) {
  FdEntry* a = table().get(from);
  FdEntry* b = table().get(to);
  if (!a || !b) return;
  renumbered(*b);
  std::uint8_t kind = a->kind.load(std::memory_order_acquire);
  if (kind == kFdUnknown) return;  // classified on first use
  a->shared.store(true, std::memory_order_relaxed);
  b->clear_timeouts();
  b->loom_nb.store(a->loom_nb.load(std::memory_order_relaxed), std::memory_order_release);
  b->describe(kind, a->user_nonblock.load(std::memory_order_relaxed), a->stream.load(std::memory_order_relaxed),
              /*shared=*/true, a->nowait.load(std::memory_order_relaxed));
}

long connect_wait(int fd, const sockaddr* addr, socklen_t len, Deadline d, int timeout_err) {
  FdEntry* e = table().get(fd);
  Processor* p = io_processor();
  auto op = [&] { return rt::sys::connect(fd, addr, len); };
  const std::uint32_t gen = e ? e->gen.load(std::memory_order_acquire) : 0;  // (call's)
  if (e && p) {
    std::uint8_t kind = e->kind.load(std::memory_order_acquire);
    if (kind == kFdUnknown) classify(fd, *e);
    // A blocking socket (the descriptor rule): connect(2) waits in the kernel.
    if (e->per_call() && !e->program_nonblock(fd)) return offloaded(op, WaitKind::fd_out, fd);
  }
  long r = syscall_op(op);
  if (r != -EINPROGRESS) return r;
  if (!e || e->kind.load(std::memory_order_acquire) != kFdPollable || e->program_nonblock(fd)) return r;
  // Done when writable; SO_ERROR then says how it ended.
  auto done = [fd]() -> long {
    pollfd pfd{fd, POLLOUT, 0};
    int n = rt::sys::poll(&pfd, 1, 0);
    if (n < 0) return -1;
    if (n == 0) {
      errno = EAGAIN;
      return -1;
    }
    int err = 0;
    socklen_t l = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0) return -1;
    if (err) {
      errno = err;
      return -1;
    }
    return 0;
  };
  if (!p) return thread_call(fd, *e, kOut, done, d, timeout_err);
  return wait_and_retry(fd, *e, gen, kOut, done, d, timeout_err, /*look first=*/true);
}

// poll_one_until's wait on a drained stream (the last read came up short
// while registered): an edge posted after the read means input arrived, so
// when the wait parks with no token left from before and an edge wakes it,
// the input revents need no look. -EAGAIN when that cannot be told (a token
// was there already, another fibre has the turn, the peer hung up): the
// caller looks and waits as for any descriptor. Rarely, a poller that took
// the edge from epoll before the read and posts it after makes this report
// input the read already took: a spurious readiness, which Linux's poll
// allows too (select(2), BUGS); a read through loom then simply waits.
long wait_fresh_input(int fd, FdEntry& e, short events, Deadline d) {
  std::uint32_t gen = e.gen.load(std::memory_order_acquire);
  if (!e.in.turn.try_lock()) return -EAGAIN;
  int rc = EAGAIN;
  if (!e.in.ready.has_token()) {
    this_processor()->counters.add(Stat::io_blocks);
    const void* object = reinterpret_cast<const void*>(std::intptr_t(fd));
    note_wait(WaitKind::fd_in, object);
    if (cancel_pending_here()) {
      e.in.turn.unlock();
      return -ECANCELED;
    }
    if (io_waiting(WaitKind::fd_in, object)) {  // a handler due: poll fails with EINTR
      e.in.turn.unlock();
      return -EINTR;
    }
    io_arm(fd, e, false);
    rc = e.in.ready.wait(d, &e.gen, gen);
    io_waiting(WaitKind::none, nullptr);
  }
  e.in.turn.unlock();
  if (e.gen.load(std::memory_order_acquire) != gen) return -EBADF;
  if (rc == ETIMEDOUT) return 0;
  if (rc != 0 || e.hup.load(std::memory_order_relaxed)) return -EAGAIN;
  return events & (POLLIN | POLLRDNORM);
}

}  // namespace

long poll_one_until(int fd, short events, Deadline d) {
  if (!(events & (POLLIN | POLLOUT))) return -EINVAL;
  // Ready (> 0) or error: the result; nothing yet: EAGAIN, which waits.
  auto op = [&]() -> long {
    pollfd q{fd, events, 0};
    int n = sys::poll(&q, 1, 0);
    if (n < 0) return -1;
    if (n == 0) {
      errno = EAGAIN;
      return -1;
    }
    return q.revents;
  };
  FdEntry* e = table().get(fd);
  Processor* p = io_processor();
  long r;
  const std::uint32_t gen = e ? e->gen.load(std::memory_order_acquire) : 0;  // (call's)
  IoState* reg = e ? e->registered.load(std::memory_order_relaxed) : nullptr;
  // (Not on io_uring: a poll's completion carries the readiness of its
  // wake-up and may be delivered after the read that took those bytes, so
  // an edge there is no proof of fresh input.)
  if (p && e && (events & POLLIN) && !(events & POLLOUT) && e->in_drained.load(std::memory_order_relaxed) &&
      !e->hup.load(std::memory_order_relaxed) && reg && !reg->uring) {
    // The last read came up short while registered: anything that arrives
    // now raises an edge, so wait for it without looking first, and trust
    // it after (an event server's short read, then wait: no system call).
    e->in_drained.store(false, std::memory_order_relaxed);
    r = wait_fresh_input(fd, *e, events, d);
    if (r != -EAGAIN) return r;
  }
  r = syscall_op(op);
  if (r != -EAGAIN) return r;
  if (d != kForever && now_ns() >= d) return 0;
  std::uint8_t kind = e ? e->kind.load(std::memory_order_acquire) : std::uint8_t(kFdFile);
  if (e && kind == kFdUnknown) kind = classify(fd, *e);
  if (!p || kind != kFdPollable) {
    auto blocking = [&]() -> long {
      pollfd q{fd, events, 0};
      int n = sys::poll(&q, 1, ms_until(d));
      return n <= 0 ? n : q.revents;
    };
    return p ? offloaded(blocking, (events & POLLIN) ? WaitKind::fd_in : WaitKind::fd_out, fd) : syscall_op(blocking);
  }
  // A wait here may consume the edge a drained read would wait for.
  if (events & POLLIN) e->in_drained.store(false, std::memory_order_relaxed);
  // Both directions: wait on input in slices, looking at output between.
  bool both = (events & POLLIN) && (events & POLLOUT);
  for (;;) {
    Deadline slice = both ? now_ns() + 1'000'000 : d;
    if (both && d != kForever && d < slice) slice = d;
    r = wait_and_retry(fd, *e, gen, (events & POLLIN) ? kIn : kOut, op, slice, ETIMEDOUT, false, false,
                       /*restartable=*/false);
    if (r != -ETIMEDOUT) return r;  // (-ECANCELED, -EINTR too)
    if (d != kForever && now_ns() >= d) return 0;
  }
}

// sched/cancel.hpp: a cancellation request for a fibre noted as waiting on
// a descriptor or a poll set posts that side's word. A stale note (the
// fibre has moved on) posts a spurious readiness, which every waiter
// tolerates (it looks again).
void wake_io_wait(WaitKind kind, const void* object) noexcept {
  if (!object) return;
  if (kind == WaitKind::poll) {
    static_cast<FdEntry*>(const_cast<void*>(object))->in.ready.post();  // the set's entry: never freed
    return;
  }
  FdTable* t = FdTable::existing();
  FdEntry* e = t ? t->find(int(reinterpret_cast<std::intptr_t>(object))) : nullptr;
  if (e) (kind == WaitKind::fd_in ? e->in : e->out).ready.post();
}

}  // namespace loom::rt

namespace loom::io {

using rt::call;
using rt::finish;
using rt::kIn;
using rt::kOut;
using rt::syscall_op;

int socket(int domain, int type, int protocol) {
  int nb = rt::keep_flags ? 0 : SOCK_NONBLOCK;
  long fd = syscall_op([&] { return rt::sys::socket(domain, type | nb, protocol); });
  if (fd >= 0) rt::adopt(int(fd), (type & SOCK_NONBLOCK) != 0, !rt::lazy_here(), (type & 0xf) == SOCK_STREAM);
  return int(finish(fd));
}

int socketpair(int domain, int type, int protocol, int sv[2]) {
  int nb = rt::keep_flags ? 0 : SOCK_NONBLOCK;
  long r = syscall_op([&] { return rt::sys::socketpair(domain, type | nb, protocol, sv); });
  if (r == 0)
    for (int i = 0; i < 2; ++i) rt::adopt(sv[i], (type & SOCK_NONBLOCK) != 0, !rt::lazy_here(), (type & 0xf) == SOCK_STREAM);
  return int(finish(r));
}

int pipe2(int fds[2], int flags) {
  int nb = rt::keep_flags ? 0 : O_NONBLOCK;
  long r = syscall_op([&] { return rt::sys::pipe2(fds, flags | nb); });
  if (r == 0)
    for (int i = 0; i < 2; ++i) {
      // A blocking pipe where RWF_NOWAIT does not work: its calls are offloaded.
      bool file = !((flags | nb) & O_NONBLOCK) && !rt::pipes_nowait();
      rt::FdEntry* e = rt::adopt(fds[i], (flags & O_NONBLOCK) != 0, !file && !rt::lazy_here(), true, /*sock=*/false);
      if (e && file) e->describe(rt::kFdFile, false, false, /*shared=*/false);
    }
  return int(finish(r));
}

int bind(int fd, const sockaddr* addr, socklen_t len) { return ::bind(fd, addr, len); }
int listen(int fd, int backlog) { return ::listen(fd, backlog); }

int accept4_until(int fd, sockaddr* addr, socklen_t* len, int flags, Deadline d) {
  int nb = rt::keep_flags ? 0 : SOCK_NONBLOCK;
  long r = call(
      fd, kIn, [&](rt::Nowait f) { return rt::accept_op(f, fd, addr, len, flags | nb); }, d,
      d == kForever ? EAGAIN : ETIMEDOUT);
  if (r >= 0) {
    rt::FdEntry* l = rt::table().get(fd);
    bool stream = l && l->stream.load(std::memory_order_relaxed);
    rt::FdEntry* e = rt::adopt(int(r), (flags & SOCK_NONBLOCK) != 0, !rt::lazy_here(), stream);
    // A connection the program reads blocking, on a processor: see "A
    // connection's first read".
    rt::Processor* p = rt::io_processor();
    if (e && stream && !(flags & SOCK_NONBLOCK) && p && p->cluster().config().wait_first)
      rt::first_read_policy(fd, *l, *e);
  }
  return int(finish(r));
}
int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) { return accept4_until(fd, addr, len, flags, kForever); }
int accept(int fd, sockaddr* addr, socklen_t* len) { return accept4_until(fd, addr, len, 0, kForever); }

int connect(int fd, const sockaddr* addr, socklen_t len) {
  return int(finish(rt::connect_wait(fd, addr, len, kForever, ETIMEDOUT)));
}
int connect_until(int fd, const sockaddr* addr, socklen_t len, Deadline d) {
  return int(finish(rt::connect_wait(fd, addr, len, d, ETIMEDOUT)));
}

ssize_t read(int fd, void* buf, size_t n) {
  rt::ReadSpec rs{buf, n, 0, false};
  return finish(call(
      fd, kIn, [&](rt::Nowait f) { return rt::read_op(f, fd, buf, n); }, kForever, EAGAIN, true, n, &rs));
}
ssize_t read_until(int fd, void* buf, size_t n, Deadline d) {
  return finish(call(
      fd, kIn, [&](rt::Nowait f) { return rt::read_op(f, fd, buf, n); }, d, ETIMEDOUT, true));
}
ssize_t write(int fd, const void* buf, size_t n) {
  auto from = [&](std::size_t done) {
    return call(fd, kOut,
                [&](rt::Nowait f) { return rt::write_op(f, fd, static_cast<const char*>(buf) + done, n - done); });
  };
  return finish(rt::whole(fd, n, from(0), from));
}
ssize_t write_until(int fd, const void* buf, size_t n, Deadline d) {
  return finish(call(
      fd, kOut, [&](rt::Nowait f) { return rt::write_op(f, fd, buf, n); }, d, ETIMEDOUT));
}
ssize_t readv(int fd, const iovec* iov, int iovcnt) {
  return finish(call(
      fd, kIn, [&](rt::Nowait f) { return rt::readv_op(f, fd, iov, iovcnt); }, kForever, EAGAIN, true));
}
ssize_t writev(int fd, const iovec* iov, int iovcnt) {
  return finish(call(fd, kOut, [&](rt::Nowait f) { return rt::writev_op(f, fd, iov, iovcnt); }));
}

// MSG_DONTWAIT asks for this one call not to wait: the system call as is.
// (loom's own attempts add it too: the descriptor rule.)
ssize_t recv(int fd, void* buf, size_t n, int flags) {
  if (flags & MSG_DONTWAIT) return rt::sys::recv(fd, buf, n, flags);
  rt::ReadSpec rs{buf, n, flags, true};
  return finish(call(
      fd, kIn, [&] { return rt::sys::recv(fd, buf, n, flags | MSG_DONTWAIT); }, kForever, EAGAIN, true, flags ? 0 : n,
      &rs));
}
ssize_t send(int fd, const void* buf, size_t n, int flags) {
  flags |= MSG_NOSIGNAL;
  if (flags & MSG_DONTWAIT) return rt::sys::send(fd, buf, n, flags);
  auto from = [&](std::size_t done) {
    return call(fd, kOut, [&] {
      return rt::sys::send(fd, static_cast<const char*>(buf) + done, n - done, flags | MSG_DONTWAIT);
    });
  };
  return finish(rt::whole(fd, n, from(0), from));
}
ssize_t recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* from, socklen_t* len) {
  if (flags & MSG_DONTWAIT) return rt::sys::recvfrom(fd, buf, n, flags, from, len);
  return finish(call(
      fd, kIn, [&] { return rt::sys::recvfrom(fd, buf, n, flags | MSG_DONTWAIT, from, len); }, kForever, EAGAIN, true));
}
ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* to, socklen_t len) {
  flags |= MSG_NOSIGNAL;
  if (flags & MSG_DONTWAIT) return rt::sys::sendto(fd, buf, n, flags, to, len);
  return finish(call(fd, kOut, [&] { return rt::sys::sendto(fd, buf, n, flags | MSG_DONTWAIT, to, len); }));
}
ssize_t recvmsg(int fd, msghdr* msg, int flags) {
  if (flags & MSG_DONTWAIT) return rt::sys::recvmsg(fd, msg, flags);
  return finish(call(
      fd, kIn, [&] { return rt::sys::recvmsg(fd, msg, flags | MSG_DONTWAIT); }, kForever, EAGAIN, true));
}
ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  flags |= MSG_NOSIGNAL;
  if (flags & MSG_DONTWAIT) return rt::sys::sendmsg(fd, msg, flags);
  return finish(call(fd, kOut, [&] { return rt::sys::sendmsg(fd, msg, flags | MSG_DONTWAIT); }));
}

// recvmmsg(2) on a blocking socket, datagram by datagram as the kernel's
// do_recvmmsg: each batch is one system call on the non-blocking socket (it
// takes what has arrived, up to what is left of vlen, and is given what is
// left of the timeout, so the kernel itself stops a batch when it runs
// out); a batch that finds nothing waits through call().
int recvmmsg(int fd, mmsghdr* vec, unsigned vlen, int flags, timespec* timeout) {
  if (flags & MSG_DONTWAIT) return rt::sys::recvmmsg(fd, vec, vlen, flags, timeout);
  if (timeout && (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1'000'000'000)) {
    errno = EINVAL;
    return -1;
  }
  vlen = std::min(vlen, unsigned(UIO_MAXIOV));
  Deadline end = timeout ? rt::now_ns() + timeout->tv_sec * 1'000'000'000 + timeout->tv_nsec : kForever;
  auto left = [&](timespec& t) {
    std::int64_t ns = std::max<std::int64_t>(end - rt::now_ns(), 0);
    t = timespec{time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)};
  };
  unsigned got = 0;
  long r = 0;
  while (got < vlen) {
    // MSG_WAITFORONE: after the first datagram, nothing more is waited for.
    int f = flags & ~MSG_WAITFORONE;
    bool wait = got == 0 || !(flags & MSG_WAITFORONE);
    auto op = [&] {
      timespec t, *tp = nullptr;
      if (timeout) left(*(tp = &t));
      return rt::sys::recvmmsg(fd, vec + got, vlen - got, f | MSG_DONTWAIT, tp);
    };
    r = wait ? call(fd, kIn, op, kForever, EAGAIN, true) : syscall_op(op);
    if (r <= 0) break;
    got += unsigned(r);
    if (timeout && rt::now_ns() >= end) break;  // the kernel's check, after a datagram
    if (vec[got - 1].msg_hdr.msg_flags & MSG_OOB) break;  // as the kernel: out of band data ends it
  }
  if (got == 0) return int(finish(r));
  if (timeout) left(*timeout);
  return int(got);
}

int sendmmsg(int fd, mmsghdr* vec, unsigned vlen, int flags) {
  flags |= MSG_NOSIGNAL;
  if ((flags & MSG_DONTWAIT) || vlen == 0) return rt::sys::sendmmsg(fd, vec, vlen, flags);
  vlen = std::min(vlen, unsigned(UIO_MAXIOV));
  unsigned sent = 0;
  long r = 0;
  while (sent < vlen) {
    r = call(fd, kOut, [&] { return rt::sys::sendmmsg(fd, vec + sent, vlen - sent, flags | MSG_DONTWAIT); });
    if (r <= 0) break;
    sent += unsigned(r);
  }
  return sent ? int(sent) : int(finish(r));
}

ssize_t pread(int fd, void* buf, size_t n, off_t off) {
  auto op = [&] { return rt::sys::pread(fd, buf, n, off); };
  return finish(rt::offloaded(op, rt::WaitKind::fd_in, fd));
}
ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  auto op = [&] { return rt::sys::pwrite(fd, buf, n, off); };
  return finish(rt::offloaded(op, rt::WaitKind::fd_out, fd));
}
int fsync(int fd) {
  auto op = [&] { return ::fsync(fd); };
  return int(finish(rt::offloaded(op, rt::WaitKind::fd_out, fd)));
}
int getaddrinfo(const char* node, const char* service, const addrinfo* hints, addrinfo** res) {
  void* token = rt::offload_enter(rt::WaitKind::offload, "getaddrinfo");
  int r = ::getaddrinfo(node, service, hints, res);
  rt::offload_leave(token);
  return r;
}

int close(int fd) {
  if (rt::is_own(fd)) {  // the runtime's (fd_table.hpp): not the program's to close
    errno = EBADF;
    return -1;
  }
  rt::Disarmed d;
  rt::retire(fd, d);
  LOOM_CHAOS_POINT(close_syscall);
  long r = syscall_op([&] { return rt::sys::close(fd); });
  d.fire();  // after close(2): the owner's next call on fd fails with EBADF
  return int(finish(r));
}

// Each number of the range that loom knows is retired as close() retires
// one, then the one system call; callbacks armed on them run after it. A
// number in a chunk of the table never made is one loom never looked at.
// CLOSE_RANGE_CLOEXEC closes nothing yet (an exec will): the call as is.
// CLOSE_RANGE_UNSHARE gives the calling kernel thread a table of its own
// before it closes: on a processor that would part it from the other
// processors, the poller and the offload threads, with which every fibre's
// descriptors must stay shared, so there the flag is dropped — a fibre's
// descriptors are the process's, and the range is closed for all its
// threads, as a loop of close() would. Off a processor the call is as is,
// and loom's table, which describes the process's, stays as it was.
int close_range(unsigned first, unsigned last, int flags) {
  if ((flags & CLOSE_RANGE_UNSHARE) && rt::this_processor_at_entry()) flags &= ~CLOSE_RANGE_UNSHARE;
  auto op = [&] { return rt::sys::close_range(first, last, flags); };
  if (flags != 0 || first > last) return int(finish(syscall_op(op)));  // nothing closes, or the kernel's EINVAL
  rt::FdTable& t = rt::table();
  unsigned end = std::min(last, t.limit() - 1);
  std::vector<rt::Disarmed> armed;  // (when_ready's: rare)
  for (unsigned fd = first; fd <= end; ++fd) {
    rt::FdEntry* e = t.find(int(fd));
    if (!e) {
      fd |= rt::FdTable::kChunk - 1;  // the rest of a chunk never made
      continue;
    }
    if (e->kind.load(std::memory_order_acquire) == rt::kFdUnknown) continue;
    rt::Disarmed d;
    rt::retire(int(fd), d);
    if (d.fn[0] || d.fn[1]) armed.push_back(d);
  }
  // The runtime's own numbers in the range stay open: the range is closed
  // around them, a call per piece.
  int own[rt::kMaxOwnFds];
  int n_own = rt::own_in(first, last, own, rt::kMaxOwnFds);
  long r = 0;
  unsigned from = first;  // the next number to close
  for (int i = 0; i <= n_own && r == 0; ++i) {
    if (i < n_own) {
      unsigned o = unsigned(own[i]);  // (ascending, within [first, last])
      if (o > from) r = syscall_op([&] { return rt::sys::close_range(from, o - 1, 0); });
      from = o + 1;
    } else if (from <= last) {
      r = syscall_op([&] { return rt::sys::close_range(from, last, 0); });
    }
  }
  for (rt::Disarmed& d : armed) d.fire();
  return int(finish(r));
}

int dup(int fd) {
  long r = syscall_op([&] { return rt::sys::dup(fd); });
  if (r >= 0) rt::copy_view(fd, int(r));
  return int(finish(r));
}
int dup3(int fd, int newfd, int flags) {
  if (fd != newfd && rt::is_own(newfd)) {  // the runtime's (fd_table.hpp): Linux's answer to a number it holds
    errno = EBUSY;
    return -1;
  }
  rt::Disarmed d;
  if (fd != newfd) rt::retire(newfd, d);
  long r = syscall_op([&] { return rt::sys::dup3(fd, newfd, flags); });
  if (r >= 0) rt::copy_view(fd, int(r));
  d.fire();
  return int(finish(r));
}
int dup2(int fd, int newfd) {
  if (fd == newfd) return rt::sys::fcntl(fd, F_GETFD) < 0 ? -1 : fd;
  return dup3(fd, newfd, 0);
}

int fcntl(int fd, int cmd, long arg) {
  rt::FdEntry* e = rt::table().get(fd);
  std::uint8_t kind = e ? e->kind.load(std::memory_order_acquire) : std::uint8_t(rt::kFdUnknown);
  bool ours = kind == rt::kFdPollable;
  // O_NONBLOCK set underneath by loom (a native descriptor): hidden, kept.
  bool loom_nb = ours && e->loom_nb.load(std::memory_order_relaxed);
  switch (cmd) {
    case F_GETFL: {
      long r = syscall_op([&] { return rt::sys::fcntl(fd, cmd); });
      if (r >= 0 && loom_nb && !e->user_nonblock.load(std::memory_order_relaxed)) r &= ~long(O_NONBLOCK);
      return int(finish(r));
    }
    case F_SETFL: {
      long r = syscall_op([&] { return rt::sys::fcntl(fd, cmd, loom_nb ? arg | O_NONBLOCK : arg); });
      if (r >= 0 && ours) e->user_nonblock.store((arg & O_NONBLOCK) != 0, std::memory_order_relaxed);
      // An offloaded descriptor (a blocking FIFO, eventfd...) made
      // non-blocking may be pollable now: looked at again on next use.
      if (r >= 0 && kind == rt::kFdFile) e->kind.store(rt::kFdUnknown, std::memory_order_release);
      return int(finish(r));
    }
    case F_DUPFD:
    case F_DUPFD_CLOEXEC: {
      long r = syscall_op([&] { return rt::sys::fcntl(fd, cmd, arg); });
      if (r >= 0) rt::copy_view(fd, int(r));
      return int(finish(r));
    }
    default:
      return rt::sys::fcntl(fd, cmd, arg);
  }
}

int setsockopt(int fd, int level, int name, const void* val, socklen_t len) {
  // The system call itself: libloom-pthread's setsockopt comes here.
  long k = rt::raw_syscall(SYS_setsockopt, fd, level, name, reinterpret_cast<long>(val), long(len), 0);
  if (k < 0) errno = int(-k);
  int r = k < 0 ? -1 : 0;
  if (r == 0 && level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO) && len >= sizeof(timeval)) {
    auto* tv = static_cast<const timeval*>(val);
    std::int64_t ns = std::int64_t(tv->tv_sec) * 1'000'000'000 + std::int64_t(tv->tv_usec) * 1000;
    if (rt::FdEntry* e = rt::table().get(fd)) (name == SO_RCVTIMEO ? e->in : e->out).timeout_ns.store(ns, std::memory_order_relaxed);
  }
  return r;
}
int getsockopt(int fd, int level, int name, void* val, socklen_t* len) { return ::getsockopt(fd, level, name, val, len); }

int set_timeouts(int fd, std::chrono::nanoseconds in, std::chrono::nanoseconds out) {
  rt::FdEntry* e = rt::table().get(fd);
  if (!e || in.count() < 0 || out.count() < 0) {
    errno = e ? EINVAL : EBADF;
    return -1;
  }
  e->in.timeout_ns.store(in.count(), std::memory_order_relaxed);
  e->out.timeout_ns.store(out.count(), std::memory_order_relaxed);
  return 0;
}

void forget(int fd) {
  rt::Disarmed d;
  rt::retire(fd, d);
  d.fire();
}

int when_ready(int fd, short events, void (*cb)(void*), void* arg) {
  rt::FdEntry* e = rt::table().get(fd);
  if ((events != POLLIN && events != POLLOUT) || !cb || !e) {
    errno = e ? EINVAL : EBADF;
    return -1;
  }
  std::uint8_t kind = e->kind.load(std::memory_order_acquire);
  if (kind == rt::kFdUnknown) kind = rt::classify(fd, *e);
  if (kind != rt::kFdPollable) {
    errno = kind == rt::kFdUnknown ? EBADF : EPERM;  // EPERM: what epoll says of a regular file
    return -1;
  }
  if (!e->registered.load(std::memory_order_acquire)) {
    rt::Processor* p = rt::this_processor();
    rt::Cluster& c = p ? p->cluster() : loom::Cluster::default_cluster().impl();
    if (!rt::io_register(rt::io_state(c), fd, *e)) return -1;  // errno from epoll_ctl
  }
  // The poller saw the peer hang up: the end of the stream needs no new
  // edge (a read that drained the data before it would wait forever).
  if (events == POLLIN && e->hup.load(std::memory_order_relaxed)) {
    cb(arg);
    return 0;
  }
  // The edge the callback takes (pending now, or posted later) is the one a
  // drained read, or a rest, would wait for: the hint no longer holds (as
  // poll_one's wait; outside review, RestAfterWhenReady).
  if (events == POLLIN && e->in_drained.load(std::memory_order_relaxed))
    e->in_drained.store(false, std::memory_order_relaxed);
  int r = (events == POLLIN ? e->in : e->out).ready.arm(cb, arg);
  if (r == 0) rt::io_arm(fd, *e, events == POLLOUT);
  if (r == EBUSY) {
    errno = EBUSY;
    return -1;
  }
  if (r == 1) cb(arg);  // an edge was pending: ready now
  return 0;
}

int rest_until(int fd, void (*fn)(void*), void* arg, Deadline d) {
  // A stop requested before the fibre detached (the only time a handle
  // could ask): fail at once, as Fibre::request_stop says of rest. (Nothing
  // wakes a rest for a request, nor could a C++ handle ask one that rests;
  // and the heap block a first rest moves to starts with no request.)
  // loom_rest is the C API's cancellation, which acts through the thread's
  // record instead (capi/thread.cpp).
  if (rt::cancel_pending_here()) {
    errno = ECANCELED;
    return ECANCELED;
  }
  int e = rt::rest(fd, fn, arg, d);
  errno = e;
  return e;
}
int rest(int fd, void (*fn)(void*), void* arg) { return rest_until(fd, fn, arg, kForever); }
int rest_status() { return rt::rest_status(); }
int rest_start(int fd, void (*fn)(void*), void* arg, const FibreAttr& attr, Deadline d) {
  return rt::rest_start(fd, fn, arg, attr, d);
}

int poll_one(int fd, short events, int timeout_ms) {
  Deadline d = timeout_ms < 0 ? kForever : rt::now_ns() + std::int64_t(timeout_ms) * 1'000'000;
  return int(finish(rt::poll_one_until(fd, events, d)));
}

const char* backend() {
  rt::Processor* p = rt::this_processor();
  rt::Cluster& c = p ? p->cluster() : loom::Cluster::default_cluster().impl();
  return to_string(rt::io_state(c).backend);
}

Stats stats() {
  Stats s;
  rt::Processor* p = rt::this_processor();
  if (!p) return s;
  rt::Cluster& c = p->cluster();
  rt::IoState* io = c.io.load(std::memory_order_acquire);
  if (!io) return s;
  loom::ClusterStats all = c.stats();
  s.registrations = all.registrations;
  s.blocks = all.io_blocks;
  s.polls = all.poller_wakeups;
  s.events = all.poller_events;
  return s;
}

}  // namespace loom::io
