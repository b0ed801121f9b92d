// capi/poll.cpp — loom/io.hpp's waits on many descriptors in C (loom.h):
// loom_poll, loom_ppoll, loom_select, loom_pselect, loom_epoll_wait and
// loom_epoll_pwait. As the rest of capi/io.cpp: -1 and errno, and errno kept
// per fibre across the wait (capi.hpp). Each is a cancellation point.
#include "capi.hpp"
#include "loom/io.hpp"

namespace {

using loom::capi::errno_slot;
using loom::capi::ErrnoKeeper;

// Each is a cancellation point (capi.hpp, cancel_point): a pending request
// acts before the wait and after a wait that failed (ECANCELED: it ended it).
template <class F>
int io_call(F&& f) {
  loom::capi::cancel_point();
  ErrnoKeeper k;
  int r = f();
  int e = r < 0 ? *errno_slot() : 0;
  if (r < 0) loom::capi::cancel_point();  // (ECANCELED, or a failure that came with the request)
  k.done(e);
  return r;
}

}  // namespace

extern "C" {

int loom_poll(struct pollfd* fds, nfds_t n, int timeout_ms) {
  return io_call([&] { return loom::io::poll(fds, n, timeout_ms); });
}
int loom_ppoll(struct pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* sigmask) {
  return io_call([&] { return loom::io::ppoll(fds, n, timeout, sigmask); });
}
int loom_select(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, struct timeval* timeout) {
  return io_call([&] { return loom::io::select(nfds, readfds, writefds, exceptfds, timeout); });
}
int loom_pselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, const struct timespec* timeout,
                 const sigset_t* sigmask) {
  return io_call([&] { return loom::io::pselect(nfds, readfds, writefds, exceptfds, timeout, sigmask); });
}
int loom_epoll_wait(int epfd, struct epoll_event* events, int maxevents, int timeout_ms) {
  return io_call([&] { return loom::io::epoll_wait(epfd, events, maxevents, timeout_ms); });
}
int loom_epoll_pwait(int epfd, struct epoll_event* events, int maxevents, int timeout_ms, const sigset_t* sigmask) {
  return io_call([&] { return loom::io::epoll_pwait(epfd, events, maxevents, timeout_ms, sigmask); });
}

}  // extern "C"
