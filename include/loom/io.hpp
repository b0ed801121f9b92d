// loom/io.hpp — blocking I/O for fibres: the calls block the fibre, never the
// processor.
//
//   int fd = loom::io::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
//   ssize_t n = loom::io::read(fd, buf, sizeof buf);   // fibre waits, CPU runs others
//
// Every function has the signature, return convention (-1 and errno) and
// errors of the system call it is named after, and the *blocking* semantics
// a program expects from a blocking descriptor. Underneath, the call is
// tried at once without waiting (the sockets and pipes loom::io makes are
// non-blocking in the kernel, and fcntl through loom hides it; on one it did
// not make, or on the pthread routes, which change no descriptor's flags,
// the attempt asks not to wait itself: MSG_DONTWAIT, RWF_NOWAIT — see
// docs/DESIGN.md, "The descriptor rule"); on EAGAIN the fd is registered
// with the cluster's epoll set (edge-triggered, in and out at once, only the
// first time it would block: lazy registration) and the fibre waits on the
// fd's readiness semaphore until the poller posts it, then retries.
//
// A descriptor the program itself made non-blocking (O_NONBLOCK through
// fcntl, SOCK_NONBLOCK, accept4's flag) keeps EAGAIN: the wrappers then never
// wait. Descriptors are known to loom by number: close them through
// loom::io::close (which deregisters them and fails any fibre still waiting
// on them with EBADF), or call loom::io::forget(fd) after closing them some
// other way.
//
// Timeouts. set_timeouts(fd, in, out), or SO_RCVTIMEO / SO_SNDTIMEO set
// through loom::io::setsockopt, bound each wait: an input or output call that
// waited that long fails with EAGAIN (the kernel's SO_RCVTIMEO behaviour),
// accept with EAGAIN, and connect with ETIMEDOUT. The *_until forms take an
// absolute deadline for one call and fail with ETIMEDOUT.
//
// errno. Each call sets errno on the kernel thread it returns on. A fibre
// may resume on another kernel thread after any call that waits, and glibc
// declares __errno_location() const, so a compiler may reuse errno's address
// from before such a call: read errno in a function that has not read it
// before the call, or through a non-inlined helper (loom's own code does the
// latter; loom/loom.h states the same rule for C).
//
// SIGPIPE. Loom sets SIGPIPE to SIG_IGN when the runtime starts unless the
// program has installed a handler of its own (LOOM_SIGPIPE=keep leaves it
// alone), and send/sendto/sendmsg add MSG_NOSIGNAL: a write to a closed peer
// fails with EPIPE rather than killing the server. Not in a process that
// loads libloom-pthread (the link and preload routes): there every
// disposition is the program's, and its send calls raise SIGPIPE as the
// kernel's would.
//
// Variants (per cluster, SchedConfig or LOOM_* variables, see config.hpp):
// the poller (LOOM_POLLER), lazy registration (LOOM_LAZY_REGISTER) and
// yield-before-read (LOOM_YIELD_BEFORE_READ).
//
// Blocking calls that have no non-blocking form (regular files, fsync,
// getaddrinfo) run on the offload cluster: the fibre migrates there, makes
// the call, and migrates back to its own cluster. loom::offload(fn) does the
// same for any blocking code.
//
// Called from a kernel thread that is not a loom processor, each function is
// the plain system call.
#pragma once

#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <type_traits>
#include <utility>

#include "loom/fibre.hpp"
#include "loom/sync.hpp"

namespace loom {

namespace io {

int socket(int domain, int type, int protocol);
int socketpair(int domain, int type, int protocol, int sv[2]);
int pipe2(int fds[2], int flags);
int bind(int fd, const sockaddr* addr, socklen_t len);
int listen(int fd, int backlog);
int accept(int fd, sockaddr* addr, socklen_t* len);
int accept4(int fd, sockaddr* addr, socklen_t* len, int flags);
// Waits for a non-blocking connect to finish (EINPROGRESS, then SO_ERROR).
int connect(int fd, const sockaddr* addr, socklen_t len);

ssize_t read(int fd, void* buf, size_t n);
ssize_t write(int fd, const void* buf, size_t n);
ssize_t readv(int fd, const iovec* iov, int iovcnt);
ssize_t writev(int fd, const iovec* iov, int iovcnt);
ssize_t recv(int fd, void* buf, size_t n, int flags);
ssize_t send(int fd, const void* buf, size_t n, int flags);
ssize_t recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* from, socklen_t* len);
ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* to, socklen_t len);
ssize_t recvmsg(int fd, msghdr* msg, int flags);
ssize_t sendmsg(int fd, const msghdr* msg, int flags);
// Several datagrams in one call, as the kernel's recvmmsg(2) on a blocking
// socket: the fibre waits for the first; then, unless MSG_WAITFORONE, for
// more until vlen have come, the timeout (if any) being looked at only after
// each datagram — so, as in the kernel (recvmmsg(2), BUGS), a call that got
// fewer than vlen may wait past it for the next; what is left of it is
// written back. An error after the first datagram ends the call with those
// received (the kernel also keeps it for the next call; loom does not).
// MSG_DONTWAIT: the system call as is. vlen is capped at UIO_MAXIOV (1024).
int recvmmsg(int fd, mmsghdr* vec, unsigned vlen, int flags, timespec* timeout);
// Waits, as a blocking socket does, until every message is sent or one
// fails (then: those sent, or -1 if none). MSG_NOSIGNAL as send.
int sendmmsg(int fd, mmsghdr* vec, unsigned vlen, int flags);

// One call with an absolute deadline (CLOCK_MONOTONIC, see sync.hpp):
// ETIMEDOUT when it passes.
ssize_t read_until(int fd, void* buf, size_t n, Deadline d);
ssize_t write_until(int fd, const void* buf, size_t n, Deadline d);
int accept4_until(int fd, sockaddr* addr, socklen_t* len, int flags, Deadline d);
int connect_until(int fd, const sockaddr* addr, socklen_t len, Deadline d);

// Signals: waits, blocking only the calling fibre, for one of the signals
// in `set` and takes it (its number; *info filled if given), or -1 with
// errno: ETIMEDOUT past d, EINVAL for an empty set. The signals must be
// blocked, or the kernel delivers them (a handler, or the default action)
// instead: under the native API a signal sent to the process goes to
// main's kernel thread (LOOM_SIGNALS=main), so main blocks them with
// pthread_sigmask before it starts anything — the idiom of kernel threads,
// whichever processor the signal reaches. A signal sent to one thread
// (tgkill) is taken only by a wait that runs on that thread.
int wait_signal(const sigset_t& set, siginfo_t* info = nullptr, Deadline d = kForever);

// Regular files: through the offload cluster.
ssize_t pread(int fd, void* buf, size_t n, off_t off);
ssize_t pwrite(int fd, const void* buf, size_t n, off_t off);
int fsync(int fd);
int getaddrinfo(const char* node, const char* service, const addrinfo* hints, addrinfo** res);

// Deregisters fd, fails its waiters with EBADF, then closes it (and then
// invokes a callback armed by when_ready, see there).
int close(int fd);
// The new descriptor shares the open file; it gets its own FdTable entry
// (dup2/dup3 first close `newfd` as close() above does).
int dup(int fd);
int dup2(int fd, int newfd);
int dup3(int fd, int newfd, int flags);
// close_range(2): every number of the range closed as close() above closes
// one. A fibre's descriptors are the process's: CLOSE_RANGE_UNSHARE, which
// would give the calling kernel thread (a processor) a table of its own, is
// dropped on a processor; CLOSE_RANGE_CLOEXEC closes nothing and is the
// system call as is.
int close_range(unsigned first, unsigned last, int flags);
// fcntl through loom keeps loom's view of O_NONBLOCK right.
int fcntl(int fd, int cmd, long arg = 0);
int setsockopt(int fd, int level, int name, const void* val, socklen_t len);
int getsockopt(int fd, int level, int name, void* val, socklen_t* len);

// poll(2) on one descriptor: `events` of POLLIN/POLLOUT; returns the ready
// revents (> 0), 0 at the timeout (ms; -1 = none), -1 on error.
int poll_one(int fd, short events, int timeout_ms);

// One-shot readiness callback, for event-driven code (loom::post handlers,
// state machines) that must not block: cb(arg) runs once, when fd's
// direction `events` (POLLIN or POLLOUT, not both) is ready — an edge of the
// cluster's epoll set, so "ready" means "something changed since you last
// found it empty": call it after a read or write returned EAGAIN (or a short
// read drained a stream socket), never instead of trying. An invocation may
// be stale (the edge came with bytes an earlier read already took; on the
// io_uring back end also a readiness the kernel's wake-up reported that is
// gone by the time it is delivered): the owner's next call then finds
// EAGAIN, and it arms again.
//
//   - An edge already pending (it arrived while nothing waited), or, for
//     POLLIN, a peer that has hung up: cb runs at once, on the calling thread,
//     before when_ready returns. (On the io_uring back end no edge is kept
//     while nothing waits: the arming's poll finds the descriptor ready and
//     the delivery invokes cb, as below.)
//   - Otherwise cb is stored, and the delivery of the next edge invokes it in
//     the delivering context: a poller thread, the poller fibre, or a
//     processor between two fibres (LOOM_POLLER). cb must be short and must
//     not block or switch fibres — post an event (loom::post) or wake a fibre.
//   - The first call on fd registers it with the calling fibre's cluster's
//     epoll set (the default cluster's from a kernel thread), as a blocking
//     call's first EAGAIN does.
//   - Every call that returns 0 leads to exactly one invocation; arm the
//     next only after it ran. 0, or -1 with errno: EINVAL (events), EBADF,
//     EPERM (not pollable: a regular file), EBUSY (a callback is armed
//     already, or a fibre waits on that direction), or epoll_ctl's error.
//   - loom::io::close(fd) (also forget, and dup2/dup3 over it) invokes an
//     armed callback once, on the closing thread, after close(2): the owner
//     learns that no edge will follow and may free what `arg` points to (its
//     next call on the number fails with EBADF — unless another thread has
//     opened a new descriptor under that number meanwhile: an owner that
//     closed fd itself must not use the number again).
// The descriptor may be the program's own non-blocking socket (SOCK_NONBLOCK
// through loom::io::socket or accept4: the calls return EAGAIN instead of
// waiting) or a blocking-view one; a direction is used either by fibres
// blocking on it or by callbacks, not by both at once.
int when_ready(int fd, short events, void (*cb)(void*), void* arg);

// Rest: a fibre waiting at the top of its loop gives its stack back.
//
//   void serve(void* c) {            // (a connection's state on the heap)
//     ... read, answer, until a read comes up short ...
//     loom::io::rest(conn->fd, &serve, conn);   // returns only on error
//   }
//
// The calling fibre ends where it stands, its stack goes back to its
// processor's cache, and, when fd has input (an edge of the cluster's epoll
// set or io_uring poll: call it after a read found EAGAIN or came up short,
// never instead of trying), the same fibre is continued at fn(arg) on a
// stack from the cache of the processor that saw it. Nothing on the stack
// survives and no destructor runs there (as with longjmp): what the fibre
// needs afterwards must be in `arg`. It keeps its identity: id, name,
// cluster, affinity, priority and key values (the listing shows it as
// "resting: fd N (no stack)"); only its stack changes.
//   - fd closed through loom::io::close (or forget, dup2 over it) while the
//     fibre rests: fn runs, and its next call on fd fails with EBADF; the
//     peer hanging up: fn runs, and its read finds the end (0).
//   - rest_until(fd, fn, arg, d): also continued at d (rest_status() then
//     says ETIMEDOUT, else 0): a keep-alive idle timeout without a timer
//     per request.
//   - Only a detached fibre (its handle would point into the old stack),
//     with no thread control block of its own nor a color hold (those live
//     at its stack's top): otherwise EINVAL or ENOTSUP. fd must be a socket
//     or pipe (EPERM otherwise, EBADF for a bad one), with no fibre waiting
//     on its input and no when_ready callback armed there (EBUSY); fn not
//     null (EINVAL); on a processor (EPERM from a plain kernel thread).
// Returns only on failure: the error number (errno is set to it as well).
// The fibre's stack size stays what it was created with.
int rest(int fd, void (*fn)(void*), void* arg);
int rest_until(int fd, void (*fn)(void*), void* arg, Deadline d);
// A new detached fibre that starts at rest on fd: it holds no stack until
// fd first has input (or its deadline, a close, a hang-up), and then runs
// fn(arg) as a fibre of attr's cluster (attr: cluster, name, priority,
// stack size, background; a color gives ENOTSUP). For a server's new
// connections: a burst of accepted connections that have not sent yet takes
// no stacks. 0, or an error number as rest (EBADF, EPERM, EBUSY, EINVAL).
int rest_start(int fd, void (*fn)(void*), void* arg, const FibreAttr& attr = {}, Deadline d = kForever);
// Why the calling fibre was last continued by a rest: 0 (input, a hang-up,
// a close) or ETIMEDOUT (rest_until's deadline); 0 if it never rested.
int rest_status();

// Timeouts of every later wait on fd (0 = none); see above.
int set_timeouts(int fd, std::chrono::nanoseconds in, std::chrono::nanoseconds out);
// fd was closed without loom::io::close: drop loom's state for that number.
void forget(int fd);

// The I/O back end the calling fibre's cluster runs on ("epoll" or
// "uring"; from a kernel thread, the default cluster's): what
// SchedConfig::io / LOOM_IO asked for, or "epoll" where io_uring was
// unavailable and the cluster fell back (with a notice on stderr).
const char* backend();

// Counters of the calling fibre's cluster's I/O (cheap; always on).
struct Stats {
  unsigned long long registrations = 0;  // epoll_ctl ADD
  unsigned long long blocks = 0;         // waits on a readiness semaphore
  unsigned long long polls = 0;          // epoll_wait calls that returned events
  unsigned long long events = 0;         // readiness events delivered
};
Stats stats();

// ---- waiting on many descriptors -------------------------------------------------
//
// poll(2), ppoll(2), select(2), pselect(2), epoll_wait(2) and epoll_pwait(2)
// over any number of descriptors — the program's own included (pipes from a
// parent, a terminal, its own epoll sets: loom never changes their flags) —
// with the system calls' signatures, results and errors: level-triggered
// revents (POLLHUP, POLLERR, POLLNVAL included), fd_set bits, EBADF, EINVAL;
// a timeout of 0 does not wait, a negative one (or null) waits forever; the
// wait ends at the first ready descriptor or when the timeout has fully
// passed (never early), and is never interrupted (no EINTR but the one a
// look below may give). select, as Linux's, leaves the time not slept in
// *timeout; the others do not change theirs.
//
// The answer always comes from the system call itself, made with a zero
// timeout; a fibre that finds nothing ready waits, its processor running
// other fibres, on a temporary epoll set of the descriptors (one epoll_ctl
// each) which the cluster's poller watches; each wake-up looks again.
// Called from a kernel thread that is not a loom processor, each is the
// system call as it is.
//
// Signal masks: a fibre has none of its own (signals go to whichever
// processor's thread does not block them). The mask of ppoll, pselect and
// epoll_pwait is applied to each zero-timeout look (a signal it unblocks
// that is pending then is delivered, and the call fails with EINTR, as the
// system's would), not to the waits between: a signal arriving during the
// wait does not end it. Wake a waiting fibre through a descriptor in the set
// (a self-pipe, a signalfd) instead.
int poll(pollfd* fds, nfds_t n, int timeout_ms);
int ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* sigmask);
int select(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, timeval* timeout);
int pselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, const timespec* timeout,
            const sigset_t* sigmask);
// On the program's own epoll set `epfd` (its events, its flags: loom never
// adds to it); the fibre waits until the set has something to report. loom
// waits on the set itself as on a socket (registered with the cluster's
// epoll set on first wait): close it through loom::io::close, or call
// forget(epfd) after closing it otherwise.
int epoll_wait(int epfd, epoll_event* events, int maxevents, int timeout_ms);
int epoll_pwait(int epfd, epoll_event* events, int maxevents, int timeout_ms, const sigset_t* sigmask);

}  // namespace io

namespace rt {
// Migrates the calling fibre to the offload cluster; returns a token for
// offload_leave, which migrates it back.
void* offload_enter();
void offload_leave(void* token) noexcept;
}  // namespace rt

// Runs fn() on the offload cluster (its own processors, LOOM_OFFLOAD_PROCESSORS,
// default 2) and returns its result; other fibres keep running meanwhile.
// From a kernel thread that is not a loom processor, fn() runs in place.
template <typename F>
auto offload(F&& fn) -> decltype(std::forward<F>(fn)()) {
  struct Back {
    void* token;
    ~Back() { rt::offload_leave(token); }
  } back{rt::offload_enter()};
  return std::forward<F>(fn)();
}

}  // namespace loom
