// capi/pthread/fd.cpp — the calls that change what a descriptor number refers
// to, by glibc's names: close, dup, dup2, dup3, close_range, closefrom, fcntl
// (and fcntl64); and, from the library's syscall(2) (futex.cpp), the raw
// system calls of close, the dups, close_range and fcntl (io_syscall.hpp).
//
// Each keeps loom's table of descriptors right, from any caller: the
// number's waiters fail with EBADF, its state is dropped, a copy shares the
// view (loom_close, loom_dup...; io/io.cpp) — on a fibre, on a kernel thread
// that is not a processor, before the runtime started — as glibc's calls
// change the kernel's table for every thread. Not in a fork child, whose
// epoll sets are its parent's (below), nor with LOOM_HOOK_IO=0 (every call
// the kernel's). The kernel's calls here are made by the instruction
// (rt::sys::table_call), never through syscall(2) by name, which would come
// back here; fcntl's lock waits (F_SETLKW, F_OFD_SETLKW) are glibc's own
// fcntl64, a cancellation point.
//
// What it does not do: see a number closed or dup'ed by a route no wrapper
// sees (stdio's fclose of an fdopen'ed descriptor, another library's own
// system call instruction); the read and write families notice that later,
// by the error a stale record's route gives (io.cpp, checked; docs/DESIGN.md,
// "A number's file is the kernel's"). The blocking calls on the numbers are
// io.cpp's, above this file.
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>

#include "base/options.hpp"
#include "base/sys.hpp"
#include "capi.hpp"
#include "io/fd_table.hpp"
#include "io_syscall.hpp"
#include "loom/io.hpp"
#include "loom/loom.h"
#include "sched/processor.hpp"

extern "C" int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void), void* dso);
extern "C" void* __dso_handle;

namespace loom::capi::pthread_io {

// LOOM_HOOK_IO=0 in the environment: every call is the kernel's, as is
// (read once, at the first call).
bool hooks_on() {
  static std::atomic<int> on{-1};
  int v = on.load(std::memory_order_relaxed);
  if (__builtin_expect(v < 0, 0)) {
    v = rt::env_bool("LOOM_HOOK_IO", true);
    on.store(v, std::memory_order_relaxed);
  }
  return v != 0;
}

namespace {

// ---- the kernel's calls -------------------------------------------------------------

namespace k {
// (By the instruction, not through syscall(2) by name: the library's own
// syscall sends these to the wrappers below — descriptor_syscall.)
int close(int fd) { return rt::sys::table_call(SYS_close, fd); }
int dup(int fd) { return rt::sys::table_call(SYS_dup, fd); }
int dup2(int a, int b) {
  if (a == b) return rt::sys::table_call(SYS_fcntl, a, F_GETFD) < 0 ? -1 : b;  // dup3 refuses a == b
  return rt::sys::table_call(SYS_dup3, a, b, 0);
}
int dup3(int a, int b, int f) { return rt::sys::table_call(SYS_dup3, a, b, f); }
int fcntl(int fd, int cmd, long arg) { return rt::sys::table_call(SYS_fcntl, fd, cmd, arg); }
int close_range(unsigned first, unsigned last, int f) {
  return rt::sys::table_call(SYS_close_range, long(first), long(last), f);
}
}  // namespace k

// The child of a fork. Its epoll sets are its parent's (the same open
// files), so the bookkeeping of a close — taking a descriptor the program
// shares with loom out of the cluster's set — would take it out of the
// parent's: close and dup2/dup3 there are the kernel's, and loom's table is
// left as it is (the child execs, or runs plain code on one kernel thread).
std::atomic<bool> in_child{false};
void after_fork_in_child() { in_child.store(true, std::memory_order_relaxed); }
__attribute__((constructor)) void register_fork_handler() {
  __register_atfork(nullptr, nullptr, &after_fork_in_child, &__dso_handle);
}

}  // namespace

// Not in a fork child (above), nor with the hooks off.
bool keep_table() { return hooks_on() && !in_child.load(std::memory_order_relaxed); }

namespace {

// fcntl's third argument per command (fcntl(2)): none, an int, or a pointer.
long fcntl_arg(int cmd, va_list ap) {
  switch (cmd) {
    case F_GETFD:
    case F_GETFL:
    case F_GETOWN:
    case F_GETSIG:
    case F_GETLEASE:
    case F_GETPIPE_SZ:
    case F_GET_SEALS:
      return 0;
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
    case F_SETFD:
    case F_SETFL:
    case F_SETOWN:
    case F_SETSIG:
    case F_SETLEASE:
    case F_NOTIFY:
    case F_SETPIPE_SZ:
    case F_ADD_SEALS:
      return va_arg(ap, int);
    default:
      return reinterpret_cast<long>(va_arg(ap, void*));  // locks, owner_ex, hints...
  }
}

int do_fcntl(int fd, int cmd, long arg) {
  if (!hooks_on()) return k::fcntl(fd, cmd, arg);
  switch (cmd) {
    case F_GETFL:
    case F_SETFL:
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
      return loom_fcntl(fd, cmd, arg);  // keeps loom's view (O_NONBLOCK, dups)
    case F_SETLKW:
    case F_OFD_SETLKW: {
      // A wait for a lock, and a cancellation point: glibc's own call,
      // whose check a request acts on, also once it waits in the kernel
      // (cancel.cpp).
      static const auto glibc = [] {
        int (*f)(int, int, ...) = nullptr;
        rt::sys::find_symbol(f, "libc.so.6", "fcntl64");
        return f;
      }();
      if (glibc) return glibc(fd, cmd, arg);
      return k::fcntl(fd, cmd, arg);
    }
    default:
      return k::fcntl(fd, cmd, arg);
  }
}

// close and the dups keep loom's table right from any caller: the number's
// waiters fail with EBADF, its state is dropped, the copy shares the view.
// close is a cancellation point (POSIX; glibc's acts before the call): a
// fibre's request acts here, a kernel thread's is glibc's (tst-cancel4).
int do_close(int fd) {
  if (rt::this_fibre_or_null() || in_child.load(std::memory_order_relaxed)) cancel_point();
  return keep_table() ? loom_close(fd) : k::close(fd);
}
int do_dup(int fd) { return hooks_on() ? loom_dup(fd) : k::dup(fd); }
int do_dup2(int fd, int newfd) { return keep_table() ? loom_dup2(fd, newfd) : k::dup2(fd, newfd); }
int do_dup3(int fd, int newfd, int flags) {
  return keep_table() ? loom_dup3(fd, newfd, flags) : k::dup3(fd, newfd, flags);
}
// close_range(2), and closefrom(3) on it: each number of the range as
// close() (loom::io::close_range says what becomes of its flags).
int do_close_range(unsigned first, unsigned last, int flags) {
  if (!keep_table()) return k::close_range(first, last, flags);
  ErrnoKeeper keep;  // (a close on io_uring may switch fibres: capi.hpp)
  int r = loom::io::close_range(first, last, flags);
  keep.done(r < 0 ? *errno_slot() : 0);
  return r;
}

}  // namespace

long descriptor_syscall(long n, long a0, long a1, long a2) {
  // Before loom's first look at any descriptor there is nothing to keep
  // (and jemalloc's first malloc closes files this way: no table made here).
  if (!rt::FdTable::existing()) return rt::sys::table_call(n, a0, a1, a2);
  switch (n) {
    case SYS_close:
      return do_close(int(a0));
    case SYS_dup:
      return do_dup(int(a0));
#ifdef SYS_dup2
    case SYS_dup2:
      return do_dup2(int(a0), int(a1));
#endif
    case SYS_dup3:
      return do_dup3(int(a0), int(a1), int(a2));
    case SYS_fcntl:
      return do_fcntl(int(a0), int(a1), a2);
    case SYS_close_range:
      return do_close_range(unsigned(a0), unsigned(a1), int(a2));
    default:
      return rt::sys::table_call(n, a0, a1, a2);
  }
}

}  // namespace loom::capi::pthread_io

using namespace loom::capi::pthread_io;

extern "C" {

// close, the dups and close_range keep loom's table right from any caller
// (do_close...); so do their raw system calls (descriptor_syscall).
int close(int fd) { return do_close(fd); }

int dup(int fd) noexcept { return do_dup(fd); }
int dup2(int fd, int newfd) noexcept { return do_dup2(fd, newfd); }
int dup3(int fd, int newfd, int flags) noexcept { return do_dup3(fd, newfd, flags); }
int close_range(unsigned int first, unsigned int last, int flags) noexcept {
  return do_close_range(first, last, flags);
}
// glibc's closefrom is close_range(lowfd, ~0U, 0) made inside libc, which
// loom would not see. Where the kernel has no close_range (before 5.9),
// glibc's own, which walks /proc/self/fd (the numbers are retired already).
void closefrom(int lowfd) noexcept {
  unsigned first = lowfd < 0 ? 0u : unsigned(lowfd);
  if (do_close_range(first, ~0u, 0) == 0) return;
  static auto* glibc_closefrom =
      reinterpret_cast<void (*)(int)>(loom::rt::sys::library_symbol("libc.so.6", "closefrom"));
  glibc_closefrom(lowfd);
}

int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  long arg = fcntl_arg(cmd, ap);
  va_end(ap);
  return do_fcntl(fd, cmd, arg);
}
// The same call by glibc's other name (a 64-bit off_t build's).
int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

}  // extern "C"
