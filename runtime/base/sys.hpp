// base/sys.hpp — the system's own functions, never an interposer's.
//
// libloom-pthread (capi/pthread/) defines pthread_*, sem_*, the sleep family
// and the blocking I/O calls by their glibc names, so that an unmodified
// program linked with it — or run with it in LD_PRELOAD — runs its threads
// on fibres. Every reference to those names anywhere in the process then
// reaches loom's definitions, including the runtime's own. The runtime must
// therefore never call them by name: its kernel threads (processors,
// pollers, the master poller) are the system's threads, and its system
// calls must be the kernel's, not loom's fibre-blocking wrappers (which
// would recurse into themselves).
//
// So: I/O and sleeps here are raw system calls (syscall(2) sets errno like
// the libc wrappers; no cancellation points — loom has no cancellation), and
// the pthread functions the runtime needs are glibc's own, looked up in
// libc.so.6 itself (not with RTLD_NEXT: which object comes "next" depends
// on how the program was linked). Without an interposer these are the same
// functions a plain call would reach.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

#include "base/futex.hpp"  // raw_syscall

namespace loom::rt::sys {

// The calls that change what a number refers to (close, the dups,
// close_range) and fcntl, made by the instruction itself, not through
// syscall(2) by name: libloom-pthread's syscall keeps loom's descriptor
// table for the program's own raw calls of these (capi/pthread/io.cpp,
// descriptor_syscall), and the runtime's are that bookkeeping's own. -1 and
// errno, as syscall(2).
inline int table_call(long n, long a0, long a1 = 0, long a2 = 0) {
  long r = raw_syscall(n, a0, a1, a2, 0, 0, 0);
  if (r < 0 && r > -4096) {
    errno = int(-r);
    return -1;
  }
  return int(r);
}

#if defined(LOOM_ASAN) || defined(LOOM_TSAN)
inline ssize_t read(int fd, void* b, std::size_t n) { return ::read(fd, b, n); }
inline ssize_t write(int fd, const void* b, std::size_t n) { return ::write(fd, b, n); }
inline ssize_t readv(int fd, const iovec* v, int n) { return ::readv(fd, v, n); }
inline ssize_t writev(int fd, const iovec* v, int n) { return ::writev(fd, v, n); }
inline ssize_t preadv2(int fd, const iovec* v, int n, int f) { return ::preadv2(fd, v, n, -1, f); }
inline ssize_t preadv2_at(int fd, const iovec* v, int n, off_t o, int f) { return ::preadv2(fd, v, n, o, f); }
inline off_t lseek(int fd, off_t o, int w) { return ::lseek(fd, o, w); }
inline ssize_t pwritev2(int fd, const iovec* v, int n, int f) { return ::pwritev2(fd, v, n, -1, f); }
inline ssize_t pread(int fd, void* b, std::size_t n, off_t o) { return ::pread(fd, b, n, o); }
inline ssize_t pwrite(int fd, const void* b, std::size_t n, off_t o) { return ::pwrite(fd, b, n, o); }
inline ssize_t recvfrom(int fd, void* b, std::size_t n, int f, sockaddr* a, socklen_t* l) {
  return ::recvfrom(fd, b, n, f, a, l);
}
inline ssize_t recv(int fd, void* b, std::size_t n, int f) { return ::recv(fd, b, n, f); }
inline ssize_t sendto(int fd, const void* b, std::size_t n, int f, const sockaddr* a, socklen_t l) {
  return ::sendto(fd, b, n, f, a, l);
}
inline ssize_t send(int fd, const void* b, std::size_t n, int f) { return ::send(fd, b, n, f); }
inline ssize_t recvmsg(int fd, msghdr* m, int f) { return ::recvmsg(fd, m, f); }
inline ssize_t sendmsg(int fd, const msghdr* m, int f) { return ::sendmsg(fd, m, f); }
inline int recvmmsg(int fd, mmsghdr* v, unsigned n, int f, timespec* t) { return ::recvmmsg(fd, v, n, f, t); }
inline int sendmmsg(int fd, mmsghdr* v, unsigned n, int f) { return ::sendmmsg(fd, v, n, f); }
inline int accept4(int fd, sockaddr* a, socklen_t* l, int f) { return ::accept4(fd, a, l, f); }
inline int accept(int fd, sockaddr* a, socklen_t* l) { return ::accept(fd, a, l); }
inline int connect(int fd, const sockaddr* a, socklen_t l) { return ::connect(fd, a, l); }
inline int close(int fd) { return ::close(fd); }
inline int dup(int fd) { return ::dup(fd); }
inline int dup3(int a, int b, int f) { return ::dup3(a, b, f); }
inline int dup2(int a, int b) { return ::dup2(a, b); }
inline int fcntl(int fd, int cmd, long arg = 0) { return ::fcntl(fd, cmd, arg); }
inline int close_range(unsigned first, unsigned last, int flags) { return ::close_range(first, last, flags); }
inline int socket(int d, int t, int p) { return ::socket(d, t, p); }
inline int socketpair(int d, int t, int p, int sv[2]) { return ::socketpair(d, t, p, sv); }
inline int pipe2(int fds[2], int f) { return ::pipe2(fds, f); }
inline int poll(pollfd* f, nfds_t n, int ms) { return ::poll(f, n, ms); }
inline int epoll_wait(int ep, epoll_event* e, int n, int ms) { return ::epoll_wait(ep, e, n, ms); }
inline int nanosleep(const timespec* t, timespec* rem) { return ::nanosleep(t, rem); }
inline int sched_yield() { return ::sched_yield(); }
inline int clock_nanosleep(clockid_t c, int f, const timespec* t, timespec* r) { return ::clock_nanosleep(c, f, t, r); }
#else
inline ssize_t read(int fd, void* b, std::size_t n) { return ::syscall(SYS_read, fd, b, n); }
inline ssize_t write(int fd, const void* b, std::size_t n) { return ::syscall(SYS_write, fd, b, n); }
inline ssize_t readv(int fd, const iovec* v, int n) { return ::syscall(SYS_readv, fd, v, n); }
inline ssize_t writev(int fd, const iovec* v, int n) { return ::syscall(SYS_writev, fd, v, n); }
// At the file's position (offset -1), with RWF_ flags (RWF_NOWAIT: one
// attempt that does not wait, whatever the open file's O_NONBLOCK).
inline ssize_t preadv2(int fd, const iovec* v, int n, int f) { return ::syscall(SYS_preadv2, fd, v, n, -1L, 0L, f); }
// At offset o, which the file's position does not follow.
inline ssize_t preadv2_at(int fd, const iovec* v, int n, off_t o, int f) {
  return ::syscall(SYS_preadv2, fd, v, n, long(o), 0L, f);
}
inline off_t lseek(int fd, off_t o, int w) { return ::syscall(SYS_lseek, fd, o, w); }
inline ssize_t pwritev2(int fd, const iovec* v, int n, int f) { return ::syscall(SYS_pwritev2, fd, v, n, -1L, 0L, f); }
inline ssize_t pread(int fd, void* b, std::size_t n, off_t o) { return ::syscall(SYS_pread64, fd, b, n, o); }
inline ssize_t pwrite(int fd, const void* b, std::size_t n, off_t o) { return ::syscall(SYS_pwrite64, fd, b, n, o); }
inline ssize_t recvfrom(int fd, void* b, std::size_t n, int f, sockaddr* a, socklen_t* l) {
  return ::syscall(SYS_recvfrom, fd, b, n, f, a, l);
}
inline ssize_t recv(int fd, void* b, std::size_t n, int f) { return sys::recvfrom(fd, b, n, f, nullptr, nullptr); }
inline ssize_t sendto(int fd, const void* b, std::size_t n, int f, const sockaddr* a, socklen_t l) {
  return ::syscall(SYS_sendto, fd, b, n, f, a, l);
}
inline ssize_t send(int fd, const void* b, std::size_t n, int f) { return sys::sendto(fd, b, n, f, nullptr, 0); }
inline ssize_t recvmsg(int fd, msghdr* m, int f) { return ::syscall(SYS_recvmsg, fd, m, f); }
inline ssize_t sendmsg(int fd, const msghdr* m, int f) { return ::syscall(SYS_sendmsg, fd, m, f); }
inline int recvmmsg(int fd, mmsghdr* v, unsigned n, int f, timespec* t) {
  return int(::syscall(SYS_recvmmsg, fd, v, n, f, t));
}
inline int sendmmsg(int fd, mmsghdr* v, unsigned n, int f) { return int(::syscall(SYS_sendmmsg, fd, v, n, f)); }
inline int accept4(int fd, sockaddr* a, socklen_t* l, int f) { return int(::syscall(SYS_accept4, fd, a, l, f)); }
inline int accept(int fd, sockaddr* a, socklen_t* l) { return sys::accept4(fd, a, l, 0); }
inline int connect(int fd, const sockaddr* a, socklen_t l) { return int(::syscall(SYS_connect, fd, a, l)); }
inline int close(int fd) { return table_call(SYS_close, fd); }
inline int dup(int fd) { return table_call(SYS_dup, fd); }
inline int dup3(int a, int b, int f) { return table_call(SYS_dup3, a, b, f); }
inline int dup2(int a, int b) {
  // dup3 refuses a == b; dup2 returns b if it is open.
  if (a == b) return table_call(SYS_fcntl, a, F_GETFD) < 0 ? -1 : b;
  return sys::dup3(a, b, 0);
}
inline int fcntl(int fd, int cmd, long arg = 0) { return table_call(SYS_fcntl, fd, cmd, arg); }
inline int close_range(unsigned first, unsigned last, int flags) {
  return table_call(SYS_close_range, long(first), long(last), flags);
}
inline int socket(int d, int t, int p) { return int(::syscall(SYS_socket, d, t, p)); }
inline int socketpair(int d, int t, int p, int sv[2]) { return int(::syscall(SYS_socketpair, d, t, p, sv)); }
inline int pipe2(int fds[2], int f) { return int(::syscall(SYS_pipe2, fds, f)); }
inline int poll(pollfd* f, nfds_t n, int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  return int(::syscall(SYS_ppoll, f, n, ms < 0 ? nullptr : &ts, nullptr, 8));
}
inline int epoll_wait(int ep, epoll_event* e, int n, int ms) {
  return int(::syscall(SYS_epoll_pwait, ep, e, n, ms, nullptr, 8));
}
inline int nanosleep(const timespec* t, timespec* rem) { return int(::syscall(SYS_nanosleep, t, rem)); }
inline int sched_yield() { return int(::syscall(SYS_sched_yield)); }
// Returns 0 or the error number, as clock_nanosleep(3) does.
inline int clock_nanosleep(clockid_t c, int f, const timespec* t, timespec* r) {
  return ::syscall(SYS_clock_nanosleep, c, f, t, r) == 0 ? 0 : errno;
}

#endif

// glibc's own pthread functions (from libc.so.6), for the runtime's kernel
// threads.
struct Pthread {
  int (*create)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  int (*join)(pthread_t, void**);
  int (*detach)(pthread_t);
  pthread_t (*self)();
  int (*setname_np)(pthread_t, const char*);
  int (*setaffinity_np)(pthread_t, std::size_t, const cpu_set_t*);
  int (*getaffinity_np)(pthread_t, std::size_t, cpu_set_t*);
  int (*getattr_np)(pthread_t, pthread_attr_t*);
  int (*attr_getstack)(const pthread_attr_t*, void**, std::size_t*);
  int (*attr_destroy)(pthread_attr_t*);
  int (*sigmask)(int, const sigset_t*, sigset_t*);
  int (*once)(pthread_once_t*, void (*)());
  int (*mutex_lock)(pthread_mutex_t*);
  int (*mutex_unlock)(pthread_mutex_t*);
  [[noreturn]] void (*exit)(void*);
  int (*key_create)(pthread_key_t*, void (*)(void*));
  int (*setspecific)(pthread_key_t, const void*);
  int (*attr_init)(pthread_attr_t*);
  int (*attr_setstacksize)(pthread_attr_t*, std::size_t);
};
// Looked up on first use (from the library's constructor at the latest).
const Pthread& pthread() noexcept;

// Starts one of the runtime's kernel threads (processors, spares, pollers,
// the monitor) with glibc's create and a stack of kRuntimeThreadStack: what
// runs there is the scheduler, system calls and signal handlers, never a
// fibre. Not RLIMIT_STACK's 8 MiB, because a fork child's glibc keeps the
// parent's other threads' stacks in its cache and gives one to a thread the
// child makes whose size it covers: a child asking for 2 MiB got 8 MiB
// (glibc's nptl/tst-default-attr in its driver's fork). Returns 0 or an
// error number, as pthread_create.
#if defined(LOOM_ASAN) || defined(LOOM_TSAN)
inline constexpr std::size_t kRuntimeThreadStack = 0;  // (glibc's default: the sanitizers' frames are larger)
#else
inline constexpr std::size_t kRuntimeThreadStack = std::size_t(1) << 20;
#endif
int create_thread(pthread_t* t, void* (*fn)(void*), void* arg) noexcept;

// `name` as defined by the already loaded library `lib` ("libc.so.6") itself,
// never an interposer's; a missing library or symbol is reported and aborts.
void* library_symbol(const char* lib, const char* name) noexcept;
template <class F>
void find_symbol(F& slot, const char* lib, const char* name) noexcept {
  slot = reinterpret_cast<F>(library_symbol(lib, name));
}

// Copies n bytes of this process's memory at `from` into `to`, or returns
// false (errno kept) when they are not all mapped or the call is refused:
// for diagnostics that read an object another thread may free and unmap
// meanwhile (the fibre listing's mutex holder, sched/stats.cpp). The bytes
// of freed, still mapped memory are garbage, never to be dereferenced.
inline bool peek(const void* from, void* to, std::size_t n) noexcept {
  int saved = errno;
  iovec local{to, n}, remote{const_cast<void*>(from), n};
  bool ok = ::syscall(SYS_process_vm_readv, long(::syscall(SYS_getpid)), &local, 1L, &remote, 1L, 0L) == long(n);
  errno = saved;
  return ok;
}

}  // namespace loom::rt::sys
