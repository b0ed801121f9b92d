/* raw_syscall.h — a system call made with the instruction itself, as
 * libgomp's futex waits and liburing's io_uring_enter make theirs: no call
 * to glibc's syscall(2) or any other function that a preloaded library could
 * define by name, so loom sees nothing of it. Returns the kernel's answer
 * (-errno on failure). One definition per architecture; what the kernel
 * clobbers besides the return register is listed in each. */
#ifndef LOOM_TESTS_HANDOFF_RAW_SYSCALL_H
#define LOOM_TESTS_HANDOFF_RAW_SYSCALL_H

#if defined(__x86_64__)
/* x86-64: number in rax, arguments in rdi, rsi, rdx, r10; the instruction
 * overwrites rcx (return address) and r11 (flags). */
static inline long raw_syscall4(long n, long a0, long a1, long a2, long a3) {
  register long r10 __asm__("r10") = a3;
  long ret;
  __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a0), "S"(a1), "d"(a2), "r"(r10) : "rcx", "r11", "memory");
  return ret;
}
#elif defined(__aarch64__)
/* AArch64: number in x8, arguments and result in x0..x3. */
static inline long raw_syscall4(long n, long a0, long a1, long a2, long a3) {
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a0;
  register long x1 __asm__("x1") = a1;
  register long x2 __asm__("x2") = a2;
  register long x3 __asm__("x3") = a3;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
  return x0;
}
#else
#error "raw_syscall.h: no inline system call for this architecture"
#endif

#endif
