// capi/pthread/io_syscall.hpp — between the library's syscall(2)
// (futex.cpp), its descriptor calls (fd.cpp) and its I/O wrappers (io.cpp).
//
// A program that closes or dups a number by syscall(2) (SYS_close, SYS_dup,
// SYS_dup2, SYS_dup3, SYS_close_range, SYS_fcntl's F_DUPFD) changes what the
// number refers to as surely as by close() or dup2(): loom's record of the
// number's former file (its kind, how its calls are made) must go with it,
// or the next file under the number is called the wrong way (issue 35: a
// write to /dev/full through a former pipe's number, EOPNOTSUPP for
// ENOSPC). So syscall hands these to the same wrappers as the named calls;
// SYS_fcntl goes to fcntl()'s wrapper whatever the command, as the program
// could have called fcntl() itself. The runtime's own calls of these never
// come here (base/sys.hpp, table_call).
#pragma once

#include <sys/syscall.h>

namespace loom::capi::pthread_io {

inline bool descriptor_call(long n) {
  switch (n) {
    case SYS_close:
    case SYS_dup:
#ifdef SYS_dup2
    case SYS_dup2:
#endif
    case SYS_dup3:
    case SYS_fcntl:
    case SYS_close_range:
      return true;
    default:
      return false;
  }
}

// The call n (descriptor_call) with its first three arguments, through
// loom's wrappers (fd.cpp): -1 and errno, as syscall(2).
long descriptor_syscall(long n, long a0, long a1, long a2);

// fd.cpp's, for io.cpp: whether the library's I/O calls are loom's at all
// (LOOM_HOOK_IO, read once), and whether loom's table of descriptors follows
// the program's (the hooks on, and not in a fork child).
bool hooks_on();
bool keep_table();

}  // namespace loom::capi::pthread_io
