// capi/pthread/io.cpp — libloom-pthread's blocking I/O, sleeps and yields
// by glibc's names: read, write, readv, writev, recv, recvfrom, recvmsg,
// recvmmsg, send, sendto, sendmsg, sendmmsg, accept, accept4, connect,
// setsockopt, socket, socketpair, pipe, pipe2, poll, ppoll, select, pselect,
// epoll_wait, epoll_pwait, sendfile, nanosleep, usleep, sleep,
// clock_nanosleep, sched_yield and pthread_yield (and the aliases a glibc
// program may call instead: sendfile64, and _FORTIFY_SOURCE's __read_chk,
// __recv_chk, __recvfrom_chk, __poll_chk, __ppoll_chk). The calls that
// change what a number refers to (close, the dups, close_range, closefrom,
// fcntl), by name and by syscall(2), are fd.cpp's.
//
// Who gets what:
//   LOOM_HOOK_IO=0 in the environment   every call is the kernel's, as is
//                                        (read once, at the first call);
//   a fibre (a processor running a fibre, not its idle loop)
//                                        loom's: loom_read... — the fibre
//                                        waits, its processor runs others;
//   anyone else (a kernel thread that is not a processor, a call before the
//   runtime started, a fork child: thread.cpp marks it so)
//                                        the kernel's (loom changes no
//                                        descriptor's flags on these routes:
//                                        io/io.cpp, "The descriptor rule"),
//                                        but close/dup/fcntl, which always keep
//                                        loom's table right (but for close
//                                        and dup2/dup3 in a fork child:
//                                        fd.cpp).
// The kernel's calls here are raw system calls (syscall(2)), never the libc
// names, which would reach these very definitions — but for the calls that
// are cancellation points, which are glibc's own functions from libc.so.6
// (so that a kernel thread, a fork child's thread say, is cancelled in them
// as on glibc: cancel.cpp). A fibre's calls are cancellation points of
// loom's (capi/io.cpp, capi/poll.cpp, capi/sem_sleep.cpp: pthread_cancel
// wakes a fibre waiting in them).
//
// Signal handlers. A handler runs on whatever fibre its kernel thread was
// running; a fibre's call made there would switch fibres inside the
// handler. The library also defines sigaction and signal (signal.cpp,
// sigtable.cpp), which run every handler the program installs inside a trampoline that
// marks the kernel thread (sched/in_handler.hpp): a handler's calls are
// "anyone else"'s above — the kernel's, blocking the kernel thread as
// glibc's do, a sleep included; on a descriptor loom made non-blocking
// underneath, loom's emulation of the blocking call, which waits in poll(2)
// on the same kernel thread (io/io.cpp, io_processor). A handler installed
// beneath the library (glibc's own __sigaction, a raw rt_sigaction system
// call) is not marked, and its calls take the fibre's path.
//
// errno. loom's calls keep it per fibre (capi.hpp); the kernel's set it on
// the kernel thread, as glibc's do.
#undef _FORTIFY_SOURCE  // these definitions are the functions the fortified inlines call
#include "loom/io.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdlib>
#include <cstring>

#include "base/options.hpp"
#include "base/sys.hpp"
#include "capi.hpp"
#include "io/fd_table.hpp"
#include "io/poller.hpp"
#include "io_syscall.hpp"
#include "loom/loom.h"
#include "sched/in_handler.hpp"
#include "sched/processor.hpp"
#include "signals.hpp"

extern "C" [[noreturn]] void __chk_fail(void);

namespace loom::capi::pthread_io {

namespace {

// ---- the kernel's calls -------------------------------------------------------------

// Before libloom-pthread's constructors ran (jemalloc reads files from its
// first malloc, inside dlopen): raw system calls, no lookup.
namespace raw {
long sc(long r) { return r; }
ssize_t read(int fd, void* b, size_t n) { return sc(::syscall(SYS_read, fd, b, n)); }
ssize_t write(int fd, const void* b, size_t n) { return sc(::syscall(SYS_write, fd, b, n)); }
ssize_t readv(int fd, const iovec* v, int n) { return sc(::syscall(SYS_readv, fd, v, n)); }
ssize_t writev(int fd, const iovec* v, int n) { return sc(::syscall(SYS_writev, fd, v, n)); }
ssize_t recvfrom(int fd, void* b, size_t n, int f, sockaddr* a, socklen_t* l) {
  return sc(::syscall(SYS_recvfrom, fd, b, n, f, a, l));
}
ssize_t sendto(int fd, const void* b, size_t n, int f, const sockaddr* a, socklen_t l) {
  return sc(::syscall(SYS_sendto, fd, b, n, f, a, l));
}
ssize_t recvmsg(int fd, msghdr* m, int f) { return sc(::syscall(SYS_recvmsg, fd, m, f)); }
ssize_t sendmsg(int fd, const msghdr* m, int f) { return sc(::syscall(SYS_sendmsg, fd, m, f)); }
int recvmmsg(int fd, mmsghdr* v, unsigned n, int f, timespec* t) {
  return int(::syscall(SYS_recvmmsg, fd, v, n, f, t));
}
int sendmmsg(int fd, mmsghdr* v, unsigned n, int f) { return int(::syscall(SYS_sendmmsg, fd, v, n, f)); }
int accept4(int fd, sockaddr* a, socklen_t* l, int f) { return int(::syscall(SYS_accept4, fd, a, l, f)); }
int connect(int fd, const sockaddr* a, socklen_t l) { return int(::syscall(SYS_connect, fd, a, l)); }
int ppoll(pollfd* f, nfds_t n, const timespec* t, const sigset_t* m) {
  // glibc's ppoll keeps the caller's timeout (the kernel writes what is left).
  timespec copy, *tp = nullptr;
  if (t) tp = &(copy = *t);
  return int(::syscall(SYS_ppoll, f, n, tp, m, _NSIG / 8));
}
int poll(pollfd* f, nfds_t n, int ms) {
  timespec t{ms / 1000, (ms % 1000) * 1000000L};
  return int(::syscall(SYS_ppoll, f, n, ms < 0 ? nullptr : &t, nullptr, _NSIG / 8));
}
// Linux's select: the time not slept is left in *t.
int select(int n, fd_set* r, fd_set* w, fd_set* e, timeval* t) { return int(::syscall(SYS_select, n, r, w, e, t)); }
int pselect(int n, fd_set* r, fd_set* w, fd_set* e, const timespec* t, const sigset_t* m) {
  timespec copy, *tp = nullptr;
  if (t) tp = &(copy = *t);
  struct {
    const sigset_t* set;
    std::size_t size;
  } sm{m, _NSIG / 8};
  return int(::syscall(SYS_pselect6, n, r, w, e, tp, m ? &sm : nullptr));
}
int epoll_pwait(int ep, epoll_event* ev, int n, int ms, const sigset_t* m) {
  return int(::syscall(SYS_epoll_pwait, ep, ev, n, ms, m, _NSIG / 8));
}
int nanosleep(const timespec* t, timespec* rem) { return int(::syscall(SYS_nanosleep, t, rem)); }
// 0 or the error number, as clock_nanosleep(3), with glibc's treatment of
// the CPU-time clocks.
int clock_nanosleep(clockid_t c, int f, const timespec* t, timespec* rem) {
  if (c == CLOCK_THREAD_CPUTIME_ID) return EINVAL;
  if (c == CLOCK_PROCESS_CPUTIME_ID) c = clockid_t((~0u << 3) | 2);  // MAKE_PROCESS_CPUCLOCK(0, CPUCLOCK_SCHED)
  int e = errno;
  long r = ::syscall(SYS_clock_nanosleep, c, f, t, rem);
  int err = r == 0 ? 0 : errno;
  errno = e;
  return err;
}
}  // namespace raw

namespace k {
long sc(long r) { return r; }  // syscall(2) already returns -1 and sets errno

// The calls that are cancellation points are glibc's own functions, found
// in libc.so.6 itself: a caller here is a kernel thread (glibc's threads in
// a fork child, threads made beneath the library), whose cancellation is
// glibc's (cancel.cpp), and glibc's functions are its cancellation points.
// They make the system call themselves (never through these names).
struct Glibc {
  ssize_t (*read)(int, void*, size_t);
  ssize_t (*write)(int, const void*, size_t);
  ssize_t (*readv)(int, const iovec*, int);
  ssize_t (*writev)(int, const iovec*, int);
  ssize_t (*recvfrom)(int, void*, size_t, int, sockaddr*, socklen_t*);
  ssize_t (*sendto)(int, const void*, size_t, int, const sockaddr*, socklen_t);
  ssize_t (*recvmsg)(int, msghdr*, int);
  ssize_t (*sendmsg)(int, const msghdr*, int);
  int (*recvmmsg)(int, mmsghdr*, unsigned, int, timespec*);
  int (*sendmmsg)(int, mmsghdr*, unsigned, int);
  int (*accept4)(int, sockaddr*, socklen_t*, int);
  int (*connect)(int, const sockaddr*, socklen_t);
  int (*ppoll)(pollfd*, nfds_t, const timespec*, const sigset_t*);
  int (*poll)(pollfd*, nfds_t, int);
  int (*select)(int, fd_set*, fd_set*, fd_set*, timeval*);
  int (*pselect)(int, fd_set*, fd_set*, fd_set*, const timespec*, const sigset_t*);
  int (*epoll_pwait)(int, epoll_event*, int, int, const sigset_t*);
  int (*nanosleep)(const timespec*, timespec*);
  int (*clock_nanosleep)(clockid_t, int, const timespec*, timespec*);
};
std::atomic<const Glibc*> glibc_calls{nullptr};  // set by a constructor: null before
__attribute__((constructor(102))) void find_glibc_calls() {
  static const Glibc g = [] {
    Glibc r{};
    using rt::sys::find_symbol;
    find_symbol(r.read, "libc.so.6", "read");
    find_symbol(r.write, "libc.so.6", "write");
    find_symbol(r.readv, "libc.so.6", "readv");
    find_symbol(r.writev, "libc.so.6", "writev");
    find_symbol(r.recvfrom, "libc.so.6", "recvfrom");
    find_symbol(r.sendto, "libc.so.6", "sendto");
    find_symbol(r.recvmsg, "libc.so.6", "recvmsg");
    find_symbol(r.sendmsg, "libc.so.6", "sendmsg");
    find_symbol(r.recvmmsg, "libc.so.6", "recvmmsg");
    find_symbol(r.sendmmsg, "libc.so.6", "sendmmsg");
    find_symbol(r.accept4, "libc.so.6", "accept4");
    find_symbol(r.connect, "libc.so.6", "connect");
    find_symbol(r.ppoll, "libc.so.6", "ppoll");
    find_symbol(r.poll, "libc.so.6", "poll");
    find_symbol(r.select, "libc.so.6", "select");
    find_symbol(r.pselect, "libc.so.6", "pselect");
    find_symbol(r.epoll_pwait, "libc.so.6", "epoll_pwait");
    find_symbol(r.nanosleep, "libc.so.6", "nanosleep");
    find_symbol(r.clock_nanosleep, "libc.so.6", "clock_nanosleep");
    return r;
  }();
  glibc_calls.store(&g, std::memory_order_release);
}
#define LOOM_GLIBC_OR_RAW(name, ...)                                               \
  do {                                                                            \
    if (const Glibc* g = glibc_calls.load(std::memory_order_acquire)) return g->name(__VA_ARGS__); \
    return raw::name(__VA_ARGS__);                                                \
  } while (0)

ssize_t read(int fd, void* b, size_t n) { LOOM_GLIBC_OR_RAW(read, fd, b, n); }
ssize_t write(int fd, const void* b, size_t n) { LOOM_GLIBC_OR_RAW(write, fd, b, n); }
ssize_t readv(int fd, const iovec* v, int n) { LOOM_GLIBC_OR_RAW(readv, fd, v, n); }
ssize_t writev(int fd, const iovec* v, int n) { LOOM_GLIBC_OR_RAW(writev, fd, v, n); }
ssize_t recvfrom(int fd, void* b, size_t n, int f, sockaddr* a, socklen_t* l) {
  LOOM_GLIBC_OR_RAW(recvfrom, fd, b, n, f, a, l);
}
ssize_t sendto(int fd, const void* b, size_t n, int f, const sockaddr* a, socklen_t l) {
  LOOM_GLIBC_OR_RAW(sendto, fd, b, n, f, a, l);
}
ssize_t recvmsg(int fd, msghdr* m, int f) { LOOM_GLIBC_OR_RAW(recvmsg, fd, m, f); }
ssize_t sendmsg(int fd, const msghdr* m, int f) { LOOM_GLIBC_OR_RAW(sendmsg, fd, m, f); }
int recvmmsg(int fd, mmsghdr* v, unsigned n, int f, timespec* t) { LOOM_GLIBC_OR_RAW(recvmmsg, fd, v, n, f, t); }
int sendmmsg(int fd, mmsghdr* v, unsigned n, int f) { LOOM_GLIBC_OR_RAW(sendmmsg, fd, v, n, f); }
int accept4(int fd, sockaddr* a, socklen_t* l, int f) { LOOM_GLIBC_OR_RAW(accept4, fd, a, l, f); }
int connect(int fd, const sockaddr* a, socklen_t l) { LOOM_GLIBC_OR_RAW(connect, fd, a, l); }
int socket(int d, int t, int p) { return int(::syscall(SYS_socket, d, t, p)); }
int socketpair(int d, int t, int p, int* sv) { return int(::syscall(SYS_socketpair, d, t, p, sv)); }
int pipe2(int* fds, int f) { return int(::syscall(SYS_pipe2, fds, f)); }
ssize_t sendfile(int out, int in, off_t* off, size_t n) { return sc(::syscall(SYS_sendfile, out, in, off, n)); }
// (glibc's ppoll and pselect keep the caller's timeout; its select leaves
// what was not slept in *t, as Linux's.)
int ppoll(pollfd* f, nfds_t n, const timespec* t, const sigset_t* m) { LOOM_GLIBC_OR_RAW(ppoll, f, n, t, m); }
int poll(pollfd* f, nfds_t n, int ms) { LOOM_GLIBC_OR_RAW(poll, f, n, ms); }
int select(int n, fd_set* r, fd_set* w, fd_set* e, timeval* t) { LOOM_GLIBC_OR_RAW(select, n, r, w, e, t); }
int pselect(int n, fd_set* r, fd_set* w, fd_set* e, const timespec* t, const sigset_t* m) {
  LOOM_GLIBC_OR_RAW(pselect, n, r, w, e, t, m);
}
int epoll_pwait(int ep, epoll_event* ev, int n, int ms, const sigset_t* m) {
  LOOM_GLIBC_OR_RAW(epoll_pwait, ep, ev, n, ms, m);
}
int nanosleep(const timespec* t, timespec* rem) { LOOM_GLIBC_OR_RAW(nanosleep, t, rem); }
// 0 or the error number, as clock_nanosleep(3) (glibc's: the CPU-time clocks too).
int clock_nanosleep(clockid_t c, int f, const timespec* t, timespec* rem) {
  LOOM_GLIBC_OR_RAW(clock_nanosleep, c, f, t, rem);
}
#undef LOOM_GLIBC_OR_RAW
}  // namespace k

// ---- who gets what -----------------------------------------------------------------------

// Descriptors keep the flags the program set (io/io.cpp, "The descriptor
// rule"): loom makes none non-blocking underneath on these routes, so a
// kernel thread's call, a fork child's and an exec'd program's are the
// kernel's on the file as the program left it.
__attribute__((constructor(101))) void keep_descriptor_flags() {
  rt::io_keep_flags();
  // With the hooks on, the default cluster's I/O descriptors now, while the
  // process is one thread (after libloom's boot: its constructors ran
  // first). Made at a fibre's first wait, they took for a moment a number
  // another thread had just closed and expected back (close_reuse's
  // socketpair got other numbers, and the waiting read registered its
  // descriptor with the new epoll set itself: EINVAL), and at a full table
  // the first wait died. With the hooks off the program's closes are the
  // kernel's and pass over nothing: loom makes them only if it must.
  if (hooks_on()) rt::io_state(loom::Cluster::default_cluster().impl());
}

// The caller is a fibre, not inside a signal handler, and the hooks are on.
bool fibre() {
  rt::Processor* p = rt::this_processor_at_entry();
  return p && p->current() != &p->idle_fibre() && hooks_on() && !rt::in_signal_handler();
}

bool by_loom(int) { return fibre(); }

// After a fibre's wait on many descriptors or a sleep: a delivery point of
// its signals (sigthread.cpp) — a handler another thread sent it with
// pthread_kill runs here, before the call returns (errno kept).
template <class R>
R delivered(R r) {
  pthread_signal::deliver_pending();
  return r;
}

// A fibre's sleep, between two delivery points: before it, a handler
// already due runs (and does not cut the sleep short); after it, one that
// came as it ended. One that comes during it ends it (EINTR: loom.h).
template <class F>
auto slept(F call) -> decltype(call()) {
  pthread_signal::deliver_pending();
  return delivered(call());
}

// loom's send family adds MSG_NOSIGNAL (loom/io.hpp); a program that did
// not ask for it gets what the kernel gives: EPIPE and a SIGPIPE to the
// calling thread (raise, sigthread.cpp: per-thread mask and disposition).
template <class R>
R piped(R r, int flags) {
  if (r < 0 && !(flags & MSG_NOSIGNAL) && *errno_slot() == EPIPE) {
    ::raise(SIGPIPE);
    *errno_slot() = EPIPE;
  }
  return r;
}

// A descriptor the kernel gave a caller off the fibre path: whatever loom
// knew of a former descriptor under that number is dropped.
int fresh(int fd) {
  if (fd >= 0 && keep_table()) {
    int e = *errno_slot();
    loom::io::forget(fd);
    *errno_slot() = e;
  }
  return fd;
}

// A call that failed as a call on another kind of file fails — ENOTSOCK (a
// socket's call), EOPNOTSUPP (RWF_NOWAIT, which a pipe takes), ESPIPE (a
// regular file's read at its offset), EPERM (epoll refused to wait on it)
// — may have been routed by a stale record: the number's file changed by a
// route no wrapper sees (rt::io_stale). If so, the call once more, which
// looks at the file afresh. A call that moved bytes or failed otherwise
// pays nothing; these errors, one fstat.
bool wrong_kind(int err) { return err == ENOTSOCK || err == EOPNOTSUPP || err == ESPIPE || err == EPERM; }
template <class F>
auto checked(int fd, F f) -> decltype(f()) {
  auto r = f();
  if (__builtin_expect(r < 0, 0) && wrong_kind(*errno_slot()) && rt::io_stale(fd)) r = f();
  return r;
}

// sendfile on a fibre. loom has no wrapper of its own: on a socket the
// program made non-blocking, the kernel's call, and on EAGAIN a wait for
// writability through loom. A descriptor loom does not know yet is
// classified first (a zero-length readv: loom's first use of a number looks
// at what it is; reading nothing consumes nothing); any other (a blocking
// socket, a pipe, a file) gets the kernel's call on the offload cluster.
ssize_t fibre_sendfile(int out, int in, off_t* off, size_t n) {
  rt::FdEntry* e = rt::FdTable::instance().get(out);
  if (!e) return k::sendfile(out, in, off, n);
  if (e->kind.load(std::memory_order_acquire) == rt::kFdUnknown) {
    int saved = *errno_slot();  // the readv may switch fibres: errno afresh (capi.hpp)
    loom_readv(out, nullptr, 0);
    *errno_slot() = saved;
  }
  ErrnoKeeper keep;
  ssize_t r;
  std::uint8_t kind = e->kind.load(std::memory_order_acquire);
  // sendfile(2) has no per-call form: on a blocking socket (the program's
  // flags, io/io.cpp's descriptor rule; the kernel is asked, as the
  // program may have changed them behind loom: FdEntry::program_nonblock)
  // it waits in the kernel.
  if (kind != rt::kFdPollable || (!e->loom_nb.load(std::memory_order_relaxed) && !e->program_nonblock(out))) {
    int err = 0;
    void* token = rt::offload_enter(rt::WaitKind::fd_out, rt::fd_object(out));
    r = k::sendfile(out, in, off, n);
    if (r < 0) err = *errno_slot();
    rt::offload_leave(token);
    keep.done(r < 0 ? err : 0);
    return r;
  }
  for (;;) {
    r = k::sendfile(out, in, off, n);
    int err = r < 0 ? *errno_slot() : 0;
    if (r >= 0 || err != EAGAIN || e->program_nonblock(out)) {
      keep.done(err);
      return r;
    }
    if (loom::io::poll_one(out, POLLOUT, -1) < 0) {
      keep.done(*errno_slot());
      return -1;
    }
  }
}

}  // namespace

}  // namespace loom::capi::pthread_io

using namespace loom::capi::pthread_io;

extern "C" {

// ---- data ---------------------------------------------------------------------------------

// (checked: a record gone stale behind loom's back is noticed by the error
// its wrong route gives, and the call made once more.)
ssize_t read(int fd, void* buf, size_t n) {
  return by_loom(fd) ? checked(fd, [&] { return loom_read(fd, buf, n); }) : k::read(fd, buf, n);
}
ssize_t write(int fd, const void* buf, size_t n) {
  return by_loom(fd) ? checked(fd, [&] { return loom_write(fd, buf, n); }) : k::write(fd, buf, n);
}
ssize_t readv(int fd, const struct iovec* iov, int iovcnt) {
  return by_loom(fd) ? checked(fd, [&] { return loom_readv(fd, iov, iovcnt); }) : k::readv(fd, iov, iovcnt);
}
ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  return by_loom(fd) ? checked(fd, [&] { return loom_writev(fd, iov, iovcnt); }) : k::writev(fd, iov, iovcnt);
}
ssize_t recv(int fd, void* buf, size_t n, int flags) {
  return by_loom(fd) ? checked(fd, [&] { return loom_recv(fd, buf, n, flags); })
                     : k::recvfrom(fd, buf, n, flags, nullptr, nullptr);
}
ssize_t recvfrom(int fd, void* __restrict buf, size_t n, int flags, struct sockaddr* __restrict from,
                 socklen_t* __restrict len) {
  return by_loom(fd) ? checked(fd, [&] { return loom_recvfrom(fd, buf, n, flags, from, len); })
                     : k::recvfrom(fd, buf, n, flags, from, len);
}
ssize_t recvmsg(int fd, struct msghdr* msg, int flags) {
  return by_loom(fd) ? checked(fd, [&] { return loom_recvmsg(fd, msg, flags); }) : k::recvmsg(fd, msg, flags);
}
ssize_t send(int fd, const void* buf, size_t n, int flags) {
  return by_loom(fd) ? piped(checked(fd, [&] { return loom_send(fd, buf, n, flags); }), flags)
                     : k::sendto(fd, buf, n, flags, nullptr, 0);
}
ssize_t sendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* to, socklen_t len) {
  return by_loom(fd) ? piped(checked(fd, [&] { return loom_sendto(fd, buf, n, flags, to, len); }), flags)
                     : k::sendto(fd, buf, n, flags, to, len);
}
ssize_t sendmsg(int fd, const struct msghdr* msg, int flags) {
  return by_loom(fd) ? piped(checked(fd, [&] { return loom_sendmsg(fd, msg, flags); }), flags)
                     : k::sendmsg(fd, msg, flags);
}
int recvmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags, struct timespec* timeout) {
  return by_loom(fd) ? checked(fd, [&] { return loom_recvmmsg(fd, vec, vlen, flags, timeout); })
                     : k::recvmmsg(fd, vec, vlen, flags, timeout);
}
int sendmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags) {
  return by_loom(fd) ? piped(checked(fd, [&] { return loom_sendmmsg(fd, vec, vlen, flags); }), flags)
                     : k::sendmmsg(fd, vec, vlen, flags);
}

ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) noexcept {
  return fibre() ? fibre_sendfile(out_fd, in_fd, offset, count) : k::sendfile(out_fd, in_fd, offset, count);
}
ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) noexcept {
  return sendfile(out_fd, in_fd, reinterpret_cast<off_t*>(offset), count);
}

// _FORTIFY_SOURCE's checked forms.
ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  if (n > buflen) __chk_fail();
  return read(fd, buf, n);
}
ssize_t __recv_chk(int fd, void* buf, size_t n, size_t buflen, int flags) {
  if (n > buflen) __chk_fail();
  return recv(fd, buf, n, flags);
}
ssize_t __recvfrom_chk(int fd, void* __restrict buf, size_t n, size_t buflen, int flags,
                       struct sockaddr* __restrict from, socklen_t* __restrict len) {
  if (n > buflen) __chk_fail();
  return recvfrom(fd, buf, n, flags, from, len);
}

// ---- connections ------------------------------------------------------------------------

int accept(int fd, struct sockaddr* __restrict addr, socklen_t* __restrict len) {
  return by_loom(fd) ? loom_accept(fd, addr, len) : fresh(k::accept4(fd, addr, len, 0));
}
int accept4(int fd, struct sockaddr* __restrict addr, socklen_t* __restrict len, int flags) {
  return by_loom(fd) ? loom_accept4(fd, addr, len, flags) : fresh(k::accept4(fd, addr, len, flags));
}
int connect(int fd, const struct sockaddr* addr, socklen_t len) {
  return by_loom(fd) ? loom_connect(fd, addr, len) : k::connect(fd, addr, len);
}

// ---- descriptors ------------------------------------------------------------------------

int socket(int domain, int type, int protocol) noexcept {
  return fibre() ? loom_socket(domain, type, protocol) : fresh(k::socket(domain, type, protocol));
}
int socketpair(int domain, int type, int protocol, int sv[2]) noexcept {
  if (fibre()) return loom_socketpair(domain, type, protocol, sv);
  int r = k::socketpair(domain, type, protocol, sv);
  if (r == 0) fresh(sv[0]), fresh(sv[1]);
  return r;
}
int pipe2(int fds[2], int flags) noexcept {
  if (fibre()) return loom_pipe2(fds, flags);
  int r = k::pipe2(fds, flags);
  if (r == 0) fresh(fds[0]), fresh(fds[1]);
  return r;
}
int pipe(int fds[2]) noexcept { return pipe2(fds, 0); }

// A socket's SO_RCVTIMEO and SO_SNDTIMEO bound a fibre's wait on it, as the
// kernel bounds a blocking call (EAGAIN at the timeout): loom's table is
// told (loom::io::setsockopt). Without it a read with SO_RCVTIMEO waited
// for ever (an outside review).
int setsockopt(int fd, int level, int name, const void* val, socklen_t len) noexcept {
  return loom_setsockopt(fd, level, name, val, len);
}

// ---- waiting on many ---------------------------------------------------------------------

int poll(struct pollfd* fds, nfds_t n, int timeout) {
  return fibre() ? delivered(loom_poll(fds, n, timeout)) : k::poll(fds, n, timeout);
}
int ppoll(struct pollfd* fds, nfds_t n, const struct timespec* timeout, const __sigset_t* ss) {
  return fibre() ? delivered(loom_ppoll(fds, n, timeout, ss)) : k::ppoll(fds, n, timeout, ss);
}
int __poll_chk(struct pollfd* fds, nfds_t n, int timeout, size_t fdslen) {
  if (fdslen / sizeof(*fds) < n) __chk_fail();
  return poll(fds, n, timeout);
}
int __ppoll_chk(struct pollfd* fds, nfds_t n, const struct timespec* timeout, const __sigset_t* ss, size_t fdslen) {
  if (fdslen / sizeof(*fds) < n) __chk_fail();
  return ppoll(fds, n, timeout, ss);
}
int select(int nfds, fd_set* __restrict r, fd_set* __restrict w, fd_set* __restrict e, struct timeval* __restrict t) {
  return fibre() ? delivered(loom_select(nfds, r, w, e, t)) : k::select(nfds, r, w, e, t);
}
int pselect(int nfds, fd_set* __restrict r, fd_set* __restrict w, fd_set* __restrict e,
            const struct timespec* __restrict t, const __sigset_t* __restrict ss) {
  return fibre() ? delivered(loom_pselect(nfds, r, w, e, t, ss)) : k::pselect(nfds, r, w, e, t, ss);
}
int epoll_wait(int epfd, struct epoll_event* events, int maxevents, int timeout) {
  return fibre() ? delivered(loom_epoll_wait(epfd, events, maxevents, timeout))
                 : k::epoll_pwait(epfd, events, maxevents, timeout, nullptr);
}
int epoll_pwait(int epfd, struct epoll_event* events, int maxevents, int timeout, const __sigset_t* ss) {
  return fibre() ? delivered(loom_epoll_pwait(epfd, events, maxevents, timeout, ss))
                 : k::epoll_pwait(epfd, events, maxevents, timeout, ss);
}

// ---- yielding ------------------------------------------------------------------------------
// A fibre yields its processor to the others (loom_yield), then takes what
// signals are pending for it (a delivery point, as the sleeps below);
// anyone else, a handler included, yields its kernel thread.

int sched_yield(void) {
  using namespace loom;
  if (rt::this_fibre_or_null() && !rt::in_signal_handler()) {  // a handler's yield is the kernel's
    int r = loom_yield();
    capi::pthread_signal::deliver_pending();  // a delivery point (sigthread.cpp)
    return r;
  }
  return rt::sys::sched_yield();
}

// <pthread.h> renames pthread_yield to sched_yield (glibc >= 2.34); binaries
// built before that still call pthread_yield by name.
int loom_pthread_yield_by_name(void) __asm__("pthread_yield");
int loom_pthread_yield_by_name(void) { return sched_yield(); }

// ---- sleeping ------------------------------------------------------------------------------
// A fibre sleeps, its processor runs others; a handler that runs on it
// meanwhile (sigthread.cpp's interrupts) ends the sleep with EINTR, as the
// kernel's (loom.h; capi/sem_sleep.cpp). A delivery point before the sleep
// too: a handler already due (posted while the fibre computed, with no
// delivery point) runs first, where the kernel would have run it, and
// leaves the sleep whole; only one that comes during it cuts it short
// (slept, above). Anyone else sleeps in the kernel, as glibc.

int nanosleep(const struct timespec* req, struct timespec* rem) {
  return fibre() ? slept([&] { return loom_nanosleep(req, rem); }) : k::nanosleep(req, rem);
}
int clock_nanosleep(clockid_t clock, int flags, const struct timespec* req, struct timespec* rem) {
  // loom sleeps on the realtime and monotonic clocks; other clocks (boot
  // time, CPU time) sleep in the kernel even on a fibre.
  // The kernel reads TIMER_ABSTIME of the flags and ignores the rest (loom's
  // C API refuses them).
  if (fibre() && (clock == CLOCK_REALTIME || clock == CLOCK_MONOTONIC))
    return slept([&] { return loom_clock_nanosleep(clock, flags & TIMER_ABSTIME, req, rem); });
  return k::clock_nanosleep(clock, flags, req, rem);
}
int usleep(useconds_t usec) {
  if (fibre()) return slept([&] { return loom_usleep(usec); });
  timespec t{time_t(usec / 1000000), long(usec % 1000000) * 1000};
  return k::nanosleep(&t, nullptr);
}
unsigned int sleep(unsigned int seconds) {
  if (fibre()) return slept([&] { return loom_sleep(seconds); });
  int e = errno;
  timespec t{time_t(seconds), 0};
  if (k::nanosleep(&t, &t) < 0) return unsigned(t.tv_sec);  // interrupted: what is left, as glibc
  errno = e;
  return 0;
}

}  // extern "C"
