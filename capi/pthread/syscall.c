/* capi/pthread/syscall.c — syscall(2) by its glibc name, for the preload and
 * link routes: futex waits on fibres and the descriptor calls loom must
 * follow are futex.cpp's (loom_pthread_syscall_loom), the rest the
 * kernel's as glibc makes them.
 *
 * Defined in C, not C++, as nothrow.c's functions and for the same reason:
 * glibc declares syscall nothrow (__THROW), which makes a C++ definition
 * noexcept, and a thread with asynchronous cancellation enabled is
 * cancelled inside the call (glibc's tst-cancel30: a raw SYS_pause). The
 * unwinding passes this frame: a noexcept one would end it in
 * std::terminate. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <unistd.h>

int loom_pthread_syscall_loom(long n, long a0, long a1, long a2, long a3, long a4, long a5, long* r);
int* loom_pthread_async_enter(const void* caller, int* own);
long loom_pthread_own_syscall(long n, long a0, long a1, long a2, long a3, long a4, long a5);
void loom_pthread_async_leave(int* word);
long loom_program_syscall(long n, long a0, long a1, long a2, long a3, long a4, long a5);

/* Six arguments are read, whatever the caller passed, as glibc's syscall
 * reads six registers. A call loom answers (futex waits on fibres, the
 * descriptor calls it follows) is futex.cpp's; any other is the kernel's,
 * made from this frame: the program's through loom_program_syscall (the
 * one instruction where a hurried handler may run, sigthread.cpp), inside
 * glibc's asynchronous cancellation window when the calling fibre asks for
 * it; loom's own (told by the caller's address) through another
 * (futex.cpp). */
long syscall(long number, ...) {
  va_list ap;
  va_start(ap, number);
  long a0 = va_arg(ap, long), a1 = va_arg(ap, long), a2 = va_arg(ap, long);
  long a3 = va_arg(ap, long), a4 = va_arg(ap, long), a5 = va_arg(ap, long);
  va_end(ap);
  long r;
  if (loom_pthread_syscall_loom(number, a0, a1, a2, a3, a4, a5, &r)) return r;
  int own = 0;
  int* w = loom_pthread_async_enter(__builtin_return_address(0), &own);
  if (own) {
    r = loom_pthread_own_syscall(number, a0, a1, a2, a3, a4, a5);
  } else {
    r = loom_program_syscall(number, a0, a1, a2, a3, a4, a5);
    if (w) loom_pthread_async_leave(w);
  }
  if (r < 0 && r > -4096) {
    errno = (int)-r;
    return -1;
  }
  return r;
}
