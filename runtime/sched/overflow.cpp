#include "sched/overflow.hpp"
#include "base/sys.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "sched/processor.hpp"

namespace loom::rt {

namespace {

// Also where the program's SA_ONSTACK handlers run (a thread's own
// alternate stack is kept per thread, never given to the kernel thread:
// capi/pthread/sigthread.cpp): room for a handler that needs more than a
// small coroutine stack holds. Only the pages touched are memory.
constexpr std::size_t kAltStackSize = 256 * 1024;
struct sigaction previous_segv;

void on_segv(int sig, siginfo_t* info, void* uctx) {
  Fibre* f = this_fibre_or_null();
  if (f && f->stack.in_guard(info->si_addr)) {
    char msg[256];
    const char* name = f->name && *f->name ? f->name : nullptr;  // a C thread may have none yet
    int n = std::snprintf(msg, sizeof msg, "loom: fibre %llu%s%s%s overflowed its %zu KiB stack (guard page hit at %p)\n",
                          (unsigned long long)f->id, name ? " \"" : "", name ? name : "", name ? "\"" : "",
                          f->stack.size / 1024, info->si_addr);
    if (n > 0) (void)!sys::write(STDERR_FILENO, msg, std::size_t(n) < sizeof msg ? std::size_t(n) : sizeof msg - 1);
    signal(SIGSEGV, SIG_DFL);
    return;  // the faulting instruction runs again and kills the process
  }
  if (previous_segv.sa_flags & SA_SIGINFO) {
    if (previous_segv.sa_sigaction) return previous_segv.sa_sigaction(sig, info, uctx);
  } else if (previous_segv.sa_handler != SIG_DFL && previous_segv.sa_handler != SIG_IGN) {
    return previous_segv.sa_handler(sig);
  }
  signal(SIGSEGV, SIG_DFL);
}

}  // namespace

void install_overflow_handler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = &on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &previous_segv);
}

void* enter_signal_stack() {
  stack_t old;
  // The system call itself: libloom-pthread's sigaltstack keeps a thread's
  // stack for the thread (a fibre), never on the kernel thread.
  if (::syscall(SYS_sigaltstack, nullptr, &old) == 0 && !(old.ss_flags & SS_DISABLE)) return nullptr;  // keep the host's
  void* p = mmap(nullptr, kAltStackSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  stack_t ss;
  ss.ss_sp = p;
  ss.ss_size = kAltStackSize;
  ss.ss_flags = 0;
  if (::syscall(SYS_sigaltstack, &ss, nullptr) != 0) {
    munmap(p, kAltStackSize);
    return nullptr;
  }
  return p;
}

void leave_signal_stack(void* stack) {
  if (!stack) return;
  // Only the owning thread may disable its alternate stack; a processor
  // that has exited no longer uses it, so unmapping is enough.
  munmap(stack, kAltStackSize);
}

}  // namespace loom::rt
