// capi/pthread/sigexec.cpp — the calling thread's signal mask reaches the
// programs it starts, as on glibc: execve, execv, execvp, execvpe, execl,
// execle, execlp, fexecve, execveat, posix_spawn, posix_spawnp, system and
// popen, by glibc's names, each glibc's own (looked up in libc.so.6) with
// the calling fibre's mask made its kernel thread's for the call. The same
// for thrd_create: a C11 thread is glibc's kernel thread, and glibc gives it
// the mask of the kernel thread that makes it (or the default attribute's,
// which pthread_setattr_default_np gives glibc too: thread.cpp).
//
// A fibre's mask lives in libloom-pthread (sigthread.cpp), never in its
// processor's kernel mask; the kernel gives a new image the mask of the
// kernel thread that execs, and glibc's posix_spawn (which system and popen
// use) gives its child the mask it found on entry. So for the call the
// kernel thread's mask is set to the fibre's, and put back when the call
// returns (a failed exec, a spawn, system's end). None of these calls
// switches fibres meanwhile: glibc's system waits for its child in the
// kernel, blocking the processor as it did before. While the kernel mask is
// the fibre's, a signal the fibre blocks that the kernel directs at that
// kernel thread stays pending there until the mask is put back, then is
// routed as usual; posix_spawnattr_setsigmask still wins (glibc applies it
// in the child). system() also blocks SIGCHLD in the fibre's mask while it
// waits, as glibc's does on its thread (SIGINT and SIGQUIT ignored: glibc's
// own, process-wide, unchanged).
//
// Off a fibre (kernel threads that are not processors, a fork child, inside
// a handler) the kernel thread's mask is the caller's: glibc's calls as they
// are. What it does not do: wordexp's and other glibc-internal forks.
//
// The exec family (not a spawn: its child starts with nothing pending, as
// a fork child does) also keeps what is pending, as the kernel keeps it for
// the new image. The signals loom holds pending for the calling fibre and
// for the process are loom's, never the kernel's: exec would drop them. So
// the exec is first a delivery point (what the fibre does not block runs
// now, as it would have before the call on glibc), then, with the kernel
// mask the fibre's, each signal still pending for the fibre or the process
// that this mask blocks is taken out of loom's sets (sigroute.hpp's take,
// take_process) and sent to the calling kernel thread (rt_tgsigqueueinfo,
// with the siginfo loom kept: to_siginfo), where the mask holds it pending
// across the exec: a standard signal once (pending for the thread and for
// the process too, it is one instance in the kernel, the thread's), each
// realtime instance in order, the thread's first. The new image takes them
// from the kernel (under libloom-pthread: sigthread.cpp's look_up_early,
// "one already pending at exec"). A failed exec (the process goes on):
// each is taken back from the kernel (rt_sigtimedwait, zero timeout, still
// blocked) and goes back where it was — the fibre's pending set (post), or
// the process's (hand_back: one routed to the fibre from the process goes
// back there too, as at a thread's end) — once, before the kernel mask is
// put back. What it leaves: a signal that comes for the process or the
// fibre after the hand-over and before the exec ends (another thread
// still runs) is loom's, lost if the exec succeeds; one pending for both
// the thread and the process reaches the new image once, not twice; a
// realtime one that goes back to the process after a failed exec queues
// behind any that came meanwhile. Only a fibre on its own processor's
// kernel thread hands anything over: not a vfork child (on the parent's
// memory, whose pending sets are the parent's), not a handler (the kernel
// mask is the caller's there, not the fibre's), not a thread that is no
// fibre.
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <threads.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstring>

#include "base/sys.hpp"
#include "capi.hpp"
#include "sched/processor.hpp"
#include "signals.hpp"
#include "sigroute.hpp"

namespace loom::capi::pthread_signal {
namespace {

template <class F>
F* glibc_fn(F*& slot, const char* name) {
  if (!slot) rt::sys::find_symbol(slot, "libc.so.6", name);
  return slot;
}

// The fibre's mask as its kernel thread's, for one call (and `extra`, also
// the fibre's meanwhile: system's SIGCHLD).
class KernelMask {
 public:
  explicit KernelMask(std::uint64_t extra = 0) noexcept {
    std::uint64_t m;
    if (!fibre_mask(&m)) return;
    set_ = true;
    mask_ = m;
    int e = errno;
    if (extra) {
      sigset_t x;
      sigemptyset(&x);
      std::memcpy(&x, &extra, sizeof extra);
      sigprocmask(SIG_BLOCK, &x, &fibre_old_);  // the fibre's (sigthread.cpp)
      extra_ = true;
      fibre_mask(&m);
    }
    sigset_t k;
    sigemptyset(&k);
    std::memcpy(&k, &m, sizeof m);
    ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &k, &saved_, _NSIG / 8);
    errno = e;
  }
  // Whether the kernel mask is the fibre's, and that mask.
  bool set() const noexcept { return set_; }
  std::uint64_t mask() const noexcept { return mask_; }
  ~KernelMask() {
    if (!set_) return;
    int e = errno;
    ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &saved_, nullptr, _NSIG / 8);
    if (extra_) sigprocmask(SIG_SETMASK, &fibre_old_, nullptr);
    errno = e;
  }
  KernelMask(const KernelMask&) = delete;
  KernelMask& operator=(const KernelMask&) = delete;

 private:
  bool set_ = false, extra_ = false;
  std::uint64_t mask_ = 0;
  sigset_t saved_, fibre_old_;
};

// On a fibre, on its processor's own kernel thread: not in a vfork child,
// which runs on the parent's memory (the parent's TLS: the same processor,
// the same fibre) on a kernel thread of its own.
bool own_kernel_thread() noexcept {
  rt::Processor* p = rt::this_processor_at_entry();
  return p && p->tid.load(std::memory_order_relaxed) == rt::raw_syscall(SYS_gettid, 0, 0, 0, 0, 0, 0);
}

// An exec: a delivery point, then the fibre's mask as the kernel thread's
// (KernelMask) and what it blocks of the signals pending for the fibre and
// the process handed to the kernel thread, pending there across the exec;
// taken back if the exec fails (the header). Async-signal-safe from here on
// (a vfork child, a handler: neither hands anything over).
class ExecScope {
 public:
  ExecScope() noexcept : mask_(deliver_first()) {
    if (!mask_.set() || !own_kernel_thread()) return;
    s_ = signal_state();
    if (s_) hand_over();
  }
  ~ExecScope() {
    if (s_ && handed_) take_back();
  }
  ExecScope(const ExecScope&) = delete;
  ExecScope& operator=(const ExecScope&) = delete;

 private:
  // What the fibre does not block runs before the exec, as it would have
  // run before the call on glibc (KernelMask's extra: none).
  static std::uint64_t deliver_first() noexcept {
    if (own_kernel_thread()) deliver_pending();
    return 0;
  }

  bool send(int sig, const SignalInfo& i) noexcept {
    siginfo_t si;
    to_siginfo(sig, i, &si);
    return rt::raw_syscall(SYS_rt_tgsigqueueinfo, pid_, tid_, sig, reinterpret_cast<long>(&si), 0, 0) == 0;
  }

  // sig's instance taken back from the kernel thread (blocked there: no
  // handler ran it), its siginfo in *out.
  bool take_kernel(int sig, SignalInfo* out) noexcept {
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    siginfo_t si;
    timespec zero{0, 0};
    if (rt::raw_syscall(SYS_rt_sigtimedwait, reinterpret_cast<long>(&one), reinterpret_cast<long>(&si),
                        reinterpret_cast<long>(&zero), _NSIG / 8, 0, 0) != sig)
      return false;
    *out = info_of(&si);
    return true;
  }

  // Back where it was: the fibre's own, or the process's (one routed to
  // the fibre from the process, too).
  void put_back(int sig, bool own, const SignalInfo& i) noexcept {
    if (own)
      post(*s_, sig, i);
    else
      hand_back(sig, i);
  }

  void hand_over() noexcept {
    int e = errno;
    pid_ = rt::raw_syscall(SYS_getpid, 0, 0, 0, 0, 0, 0);
    tid_ = rt::raw_syscall(SYS_gettid, 0, 0, 0, 0, 0, 0);
    const int rtmin = SIGRTMIN;
    for (std::uint64_t b = pending_for(*s_) & mask_.mask(); b; b &= b - 1) {
      const int sig = lowest(b);
      const std::uint64_t one = bit(sig);
      // Pending for the fibre; its own (sent to it, not routed to it from
      // the process, where it goes back after a failed exec).
      const bool for_fibre = s_->pending.load(std::memory_order_acquire) & one;
      const bool own = for_fibre && !(s_->routed.load(std::memory_order_acquire) & one);
      SignalInfo i;
      const bool mine = for_fibre && take(*s_, sig, &i);
      if (sig < rtmin) {
        SignalInfo p;
        const bool process = take_process(sig, &p);
        if (!mine && !process) continue;
        if (!send(sig, mine ? i : p)) {  // (EAGAIN: the kernel's RLIMIT_SIGPENDING)
          if (mine) put_back(sig, own, i);
          if (process) hand_back(sig, p);
          continue;
        }
        handed_ |= one;
        if (mine && own) {
          std_own_ |= one;
          std_info_[sig - 1] = i;
        }
        if (mine && !own) std_process_[sig - 1][std_n_[sig - 1]++] = i;
        if (process) std_process_[sig - 1][std_n_[sig - 1]++] = p;
        continue;
      }
      // Realtime: each instance, the fibre's first, then the process's in
      // the order they came.
      if (mine) {
        if (!send(sig, i)) {
          put_back(sig, own, i);
          continue;
        }
        handed_ |= one;
        if (own) rt_own_ |= one;
        ++rt_n_[sig - 1];
      }
      while (take_process(sig, &i)) {
        if (!send(sig, i)) {
          hand_back(sig, i);
          break;
        }
        handed_ |= one;
        ++rt_n_[sig - 1];
      }
    }
    errno = e;
  }

  // The exec failed: each handed signal from the kernel back to where it
  // was, before KernelMask puts the kernel mask back (which would deliver
  // them to the trampoline, to be routed afresh).
  void take_back() noexcept {
    int e = errno;
    const int rtmin = SIGRTMIN;
    for (std::uint64_t b = handed_; b; b &= b - 1) {
      const int sig = lowest(b);
      SignalInfo k;
      if (sig < rtmin) {
        if (!take_kernel(sig, &k)) continue;  // (cannot happen: blocked, this kernel thread's)
        if (std_own_ & bit(sig)) post(*s_, sig, std_info_[sig - 1]);
        for (int n = 0; n < std_n_[sig - 1]; ++n) hand_back(sig, std_process_[sig - 1][n]);
        continue;
      }
      for (unsigned n = 0; n < rt_n_[sig - 1] && take_kernel(sig, &k); ++n)
        put_back(sig, n == 0 && (rt_own_ & bit(sig)), k);
    }
    errno = e;
  }

  KernelMask mask_;
  SignalState* s_ = nullptr;
  long pid_ = 0, tid_ = 0;
  std::uint64_t handed_ = 0;
  // Standard signals: the fibre's own instance, and those of the process
  // (its own, and one routed to the fibre): at most two, one in the kernel.
  std::uint64_t std_own_ = 0;
  SignalInfo std_info_[32];
  SignalInfo std_process_[32][2];
  unsigned char std_n_[32] = {};
  // Realtime signals: how many instances went to the kernel, and whether
  // the first was the fibre's own.
  std::uint64_t rt_own_ = 0;
  unsigned rt_n_[64] = {};
};

struct Glibc {
  int (*execve)(const char*, char* const[], char* const[]);
  int (*execv)(const char*, char* const[]);
  int (*execvp)(const char*, char* const[]);
  int (*execvpe)(const char*, char* const[], char* const[]);
  int (*fexecve)(int, char* const[], char* const[]);
  int (*execveat)(int, const char*, char* const[], char* const[], int);
  int (*spawn)(pid_t*, const char*, const posix_spawn_file_actions_t*, const posix_spawnattr_t*, char* const[],
               char* const[]);
  int (*spawnp)(pid_t*, const char*, const posix_spawn_file_actions_t*, const posix_spawnattr_t*, char* const[],
                char* const[]);
  int (*system)(const char*);
  FILE* (*popen)(const char*, const char*);
  int (*thrd_create)(thrd_t*, thrd_start_t, void*);
};
Glibc g{};

// Looked up before main (a vfork child then writes nothing).
__attribute__((constructor)) void look_up_early() {
  glibc_fn(g.execve, "execve");
  glibc_fn(g.execv, "execv");
  glibc_fn(g.execvp, "execvp");
  glibc_fn(g.execvpe, "execvpe");
  glibc_fn(g.fexecve, "fexecve");
  glibc_fn(g.execveat, "execveat");
  glibc_fn(g.spawn, "posix_spawn");
  glibc_fn(g.spawnp, "posix_spawnp");
  glibc_fn(g.system, "system");
  glibc_fn(g.popen, "popen");
  glibc_fn(g.thrd_create, "thrd_create");
}

// execl's family: the variadic arguments, up to the terminating null, as
// an argv on the stack (an exec never returns to free one), then envp for
// execle.
#define LOOM_COLLECT_ARGS(first, ap, argv, n)        \
  std::size_t n = 1;                                 \
  {                                                  \
    va_list count;                                   \
    va_copy(count, ap);                              \
    while (va_arg(count, const char*)) ++n;          \
    va_end(count);                                   \
  }                                                  \
  char** argv = static_cast<char**>(__builtin_alloca((n + 1) * sizeof(char*))); \
  argv[0] = const_cast<char*>(first);                \
  for (std::size_t i = 1; i <= n; ++i) argv[i] = va_arg(ap, char*);

}  // namespace
}  // namespace loom::capi::pthread_signal

using namespace loom::capi::pthread_signal;

extern "C" {

int execve(const char* path, char* const argv[], char* const envp[]) noexcept {
  ExecScope x;
  return glibc_fn(g.execve, "execve")(path, argv, envp);
}

int execv(const char* path, char* const argv[]) noexcept {
  ExecScope x;
  return glibc_fn(g.execv, "execv")(path, argv);
}

int execvp(const char* file, char* const argv[]) noexcept {
  ExecScope x;
  return glibc_fn(g.execvp, "execvp")(file, argv);
}

int execvpe(const char* file, char* const argv[], char* const envp[]) noexcept {
  ExecScope x;
  return glibc_fn(g.execvpe, "execvpe")(file, argv, envp);
}

int fexecve(int fd, char* const argv[], char* const envp[]) noexcept {
  ExecScope x;
  return glibc_fn(g.fexecve, "fexecve")(fd, argv, envp);
}

int execveat(int dirfd, const char* path, char* const argv[], char* const envp[], int flags) noexcept {
  ExecScope x;
  return glibc_fn(g.execveat, "execveat")(dirfd, path, argv, envp, flags);
}

int execl(const char* path, const char* arg, ...) noexcept {
  va_list ap;
  va_start(ap, arg);
  LOOM_COLLECT_ARGS(arg, ap, argv, n)
  va_end(ap);
  return execv(path, argv);
}

int execlp(const char* file, const char* arg, ...) noexcept {
  va_list ap;
  va_start(ap, arg);
  LOOM_COLLECT_ARGS(arg, ap, argv, n)
  va_end(ap);
  return execvp(file, argv);
}

int execle(const char* path, const char* arg, ...) noexcept {
  va_list ap;
  va_start(ap, arg);
  LOOM_COLLECT_ARGS(arg, ap, argv, n)
  char* const* envp = va_arg(ap, char* const*);
  va_end(ap);
  return execve(path, argv, envp);
}

int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
                const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) noexcept {
  KernelMask m;
  return glibc_fn(g.spawn, "posix_spawn")(pid, path, actions, attr, argv, envp);
}

int posix_spawnp(pid_t* pid, const char* file, const posix_spawn_file_actions_t* actions,
                 const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) noexcept {
  KernelMask m;
  return glibc_fn(g.spawnp, "posix_spawnp")(pid, file, actions, attr, argv, envp);
}

int system(const char* command) {
  if (!command) return glibc_fn(g.system, "system")(command);  // is there a shell: no child
  KernelMask m(bit(SIGCHLD));
  return glibc_fn(g.system, "system")(command);
}

FILE* popen(const char* command, const char* mode) {
  KernelMask m;
  return glibc_fn(g.popen, "popen")(command, mode);
}

// glibc's pthread_create starts the thread with the creator's kernel mask
// (unless the default attribute has one): the fibre's, for the call.
int thrd_create(thrd_t* thr, thrd_start_t func, void* arg) noexcept {
  KernelMask m;
  return glibc_fn(g.thrd_create, "thrd_create")(thr, func, arg);
}

}  // extern "C"
