// capi/io.cpp — loom/io.hpp in C, and loom_offload.
//
// The C++ calls already have the system calls' convention (-1 and errno).
// What the wrapper adds is per-fibre errno (capi.hpp): the call may resume
// on another kernel thread, so errno is read back afresh after it, and a
// successful call leaves the caller's errno as it was.
#include "loom/io.hpp"

#include <fcntl.h>
#include <stdarg.h>

#include "capi.hpp"
#include "io/rest.hpp"

namespace loom::capi {

namespace {

// Runs one I/O call: keeps errno per fibre across it.
template <class R, class F>
R io_call(F&& f) {
  ErrnoKeeper k;
  R r = f();
  k.done(r < 0 ? *errno_slot() : 0);
  return r;
}

// io_call for a cancellation point (capi.hpp, cancel_point): a pending
// request acts before the call and after a call that failed (a wait it
// ended gives ECANCELED; one a close ended, EBADF: glibc's thread would have
// acted in that wait), never after one that succeeded (no data is lost).
template <class R, class F>
R point_call(F&& f) {
  cancel_point();
  ErrnoKeeper k;
  R r = f();
  int e = r < 0 ? *errno_slot() : 0;
  if (r < 0) cancel_point();
  k.done(e);
  return r;
}

Deadline deadline_or_forever(const timespec* t) {
  if (!t) return kForever;
  if (!valid(t)) return 1;  // expired: the call fails with ETIMEDOUT at once
  return deadline_of(CLOCK_MONOTONIC, *t);
}

// fcntl's third argument, if cmd takes one: int or pointer (fcntl(2)).
enum class ArgKind { none, integer, pointer };
ArgKind fcntl_arg(int cmd) {
  switch (cmd) {
    case F_GETFD:
    case F_GETFL:
    case F_GETOWN:
#ifdef F_GETSIG
    case F_GETSIG:
#endif
#ifdef F_GETLEASE
    case F_GETLEASE:
#endif
#ifdef F_GETPIPE_SZ
    case F_GETPIPE_SZ:
#endif
#ifdef F_GET_SEALS
    case F_GET_SEALS:
#endif
      return ArgKind::none;
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
    case F_SETFD:
    case F_SETFL:
    case F_SETOWN:
#ifdef F_SETSIG
    case F_SETSIG:
#endif
#ifdef F_SETLEASE
    case F_SETLEASE:
#endif
#ifdef F_NOTIFY
    case F_NOTIFY:
#endif
#ifdef F_SETPIPE_SZ
    case F_SETPIPE_SZ:
#endif
#ifdef F_ADD_SEALS
    case F_ADD_SEALS:
#endif
      return ArgKind::integer;
    default:
      return ArgKind::pointer;  // locks, owner_ex, hints...
  }
}

}  // namespace

}  // namespace loom::capi

using namespace loom;
using namespace loom::capi;

extern "C" {

int loom_socket(int domain, int type, int protocol) {
  return io_call<int>([&] { return io::socket(domain, type, protocol); });
}
int loom_socketpair(int domain, int type, int protocol, int sv[2]) {
  return io_call<int>([&] { return io::socketpair(domain, type, protocol, sv); });
}
int loom_pipe(int fds[2]) {
  return io_call<int>([&] { return io::pipe2(fds, 0); });
}
int loom_pipe2(int fds[2], int flags) {
  return io_call<int>([&] { return io::pipe2(fds, flags); });
}
int loom_bind(int fd, const struct sockaddr* addr, socklen_t len) {
  return io_call<int>([&] { return io::bind(fd, addr, len); });
}
int loom_listen(int fd, int backlog) {
  return io_call<int>([&] { return io::listen(fd, backlog); });
}
int loom_accept(int fd, struct sockaddr* addr, socklen_t* len) {
  return point_call<int>([&] { return io::accept(fd, addr, len); });
}
int loom_accept4(int fd, struct sockaddr* addr, socklen_t* len, int flags) {
  return point_call<int>([&] { return io::accept4(fd, addr, len, flags); });
}
int loom_connect(int fd, const struct sockaddr* addr, socklen_t len) {
  return point_call<int>([&] { return io::connect(fd, addr, len); });
}

ssize_t loom_read(int fd, void* buf, size_t n) {
  return point_call<ssize_t>([&] { return io::read(fd, buf, n); });
}
ssize_t loom_write(int fd, const void* buf, size_t n) {
  return point_call<ssize_t>([&] { return io::write(fd, buf, n); });
}
ssize_t loom_readv(int fd, const struct iovec* iov, int iovcnt) {
  return point_call<ssize_t>([&] { return io::readv(fd, iov, iovcnt); });
}
ssize_t loom_writev(int fd, const struct iovec* iov, int iovcnt) {
  return point_call<ssize_t>([&] { return io::writev(fd, iov, iovcnt); });
}
ssize_t loom_recv(int fd, void* buf, size_t n, int flags) {
  return point_call<ssize_t>([&] { return io::recv(fd, buf, n, flags); });
}
ssize_t loom_send(int fd, const void* buf, size_t n, int flags) {
  return point_call<ssize_t>([&] { return io::send(fd, buf, n, flags); });
}
ssize_t loom_recvfrom(int fd, void* buf, size_t n, int flags, struct sockaddr* from, socklen_t* len) {
  return point_call<ssize_t>([&] { return io::recvfrom(fd, buf, n, flags, from, len); });
}
ssize_t loom_sendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* to, socklen_t len) {
  return point_call<ssize_t>([&] { return io::sendto(fd, buf, n, flags, to, len); });
}
ssize_t loom_recvmsg(int fd, struct msghdr* msg, int flags) {
  return point_call<ssize_t>([&] { return io::recvmsg(fd, msg, flags); });
}
ssize_t loom_sendmsg(int fd, const struct msghdr* msg, int flags) {
  return point_call<ssize_t>([&] { return io::sendmsg(fd, msg, flags); });
}
int loom_recvmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags, struct timespec* timeout) {
  return point_call<int>([&] { return io::recvmmsg(fd, vec, vlen, flags, timeout); });
}
int loom_sendmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags) {
  return point_call<int>([&] { return io::sendmmsg(fd, vec, vlen, flags); });
}

ssize_t loom_read_until(int fd, void* buf, size_t n, const struct timespec* deadline) {
  return point_call<ssize_t>([&] { return io::read_until(fd, buf, n, deadline_or_forever(deadline)); });
}
ssize_t loom_write_until(int fd, const void* buf, size_t n, const struct timespec* deadline) {
  return point_call<ssize_t>([&] { return io::write_until(fd, buf, n, deadline_or_forever(deadline)); });
}
int loom_accept4_until(int fd, struct sockaddr* addr, socklen_t* len, int flags, const struct timespec* deadline) {
  return point_call<int>([&] { return io::accept4_until(fd, addr, len, flags, deadline_or_forever(deadline)); });
}
int loom_connect_until(int fd, const struct sockaddr* addr, socklen_t len, const struct timespec* deadline) {
  return point_call<int>([&] { return io::connect_until(fd, addr, len, deadline_or_forever(deadline)); });
}

ssize_t loom_pread(int fd, void* buf, size_t n, off_t off) {
  return point_call<ssize_t>([&] { return io::pread(fd, buf, n, off); });
}
ssize_t loom_pwrite(int fd, const void* buf, size_t n, off_t off) {
  return point_call<ssize_t>([&] { return io::pwrite(fd, buf, n, off); });
}
int loom_fsync(int fd) {
  return point_call<int>([&] { return io::fsync(fd); });
}

int loom_getaddrinfo(const char* node, const char* service, const struct addrinfo* hints, struct addrinfo** res) {
  // Returns an EAI_* code, not -1: errno matters only for EAI_SYSTEM.
  ErrnoKeeper k;
  int r = io::getaddrinfo(node, service, hints, res);
  k.done(r != 0 ? *errno_slot() : 0);
  return r;
}

int loom_close(int fd) {
  return point_call<int>([&] { return io::close(fd); });
}
int loom_dup(int fd) {
  return io_call<int>([&] { return io::dup(fd); });
}
int loom_dup2(int fd, int newfd) {
  return io_call<int>([&] { return io::dup2(fd, newfd); });
}
int loom_dup3(int fd, int newfd, int flags) {
  return io_call<int>([&] { return io::dup3(fd, newfd, flags); });
}

int loom_fcntl(int fd, int cmd, ...) {
  long arg = 0;
  va_list ap;
  va_start(ap, cmd);
  switch (fcntl_arg(cmd)) {
    case ArgKind::none:
      break;
    case ArgKind::integer:
      arg = va_arg(ap, int);
      break;
    case ArgKind::pointer:
      arg = reinterpret_cast<long>(va_arg(ap, void*));
      break;
  }
  va_end(ap);
  return io_call<int>([&] { return io::fcntl(fd, cmd, arg); });
}

int loom_setsockopt(int fd, int level, int name, const void* val, socklen_t len) {
  return io_call<int>([&] { return io::setsockopt(fd, level, name, val, len); });
}
int loom_getsockopt(int fd, int level, int name, void* val, socklen_t* len) {
  return io_call<int>([&] { return io::getsockopt(fd, level, name, val, len); });
}

int loom_poll_one(int fd, short events, int timeout_ms) {
  return point_call<int>([&] { return io::poll_one(fd, events, timeout_ms); });
}

int loom_when_ready(int fd, short events, void (*fn)(void*), void* arg) {
  return io_call<int>([&] { return io::when_ready(fd, events, fn, arg); });
}

int loom_rest(int fd, void (*fn)(void*), void* arg) { return loom_rest_until(fd, fn, arg, nullptr); }
int loom_rest_until(int fd, void (*fn)(void*), void* arg, const struct timespec* deadline) {
  rest_as_thread(fn, arg);
  int e = rt::rest(fd, fn, arg, deadline_or_forever(deadline));
  *errno_slot() = e;
  return e;
}
int loom_rest_status(void) { return io::rest_status(); }
int loom_rest_start(int fd, void (*fn)(void*), void* arg) { return rt::rest_start(fd, fn, arg, FibreAttr{}, kForever); }
int loom_rest_start_until(int fd, void (*fn)(void*), void* arg, const loom_attr_t* attr,
                          const struct timespec* deadline) {
  FibreAttr fa;
  if (attr)
    if (int e = fibre_attr_of(attr, &fa)) return e;
  return rt::rest_start(fd, fn, arg, fa, deadline_or_forever(deadline));
}

const char* loom_io_backend(void) { return io::backend(); }

int loom_set_timeouts(int fd, int64_t in_ns, int64_t out_ns) {
  if (in_ns < 0 || out_ns < 0) {
    *errno_slot() = EINVAL;
    return -1;
  }
  return io::set_timeouts(fd, std::chrono::nanoseconds(in_ns), std::chrono::nanoseconds(out_ns));
}

void loom_forget(int fd) { io::forget(fd); }

void loom_io_stats(struct loom_io_stats* out) {
  if (!out) return;
  io::Stats s = io::stats();
  out->registrations = s.registrations;
  out->blocks = s.blocks;
  out->polls = s.polls;
  out->events = s.events;
}

void* loom_offload(void* (*fn)(void*), void* arg) {
  // fn sees the caller's errno and the caller sees fn's, as if called
  // directly, though fn ran on another kernel thread.
  int e = *errno_slot();
  void* r = offload([&] {
    *errno_slot() = e;
    void* v = fn(arg);
    e = *errno_slot();
    return v;
  });
  *errno_slot() = e;
  return r;
}

}  // extern "C"
