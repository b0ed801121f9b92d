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
#include "signals.hpp"

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
  sigset_t saved_, fibre_old_;
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
  KernelMask m;
  return glibc_fn(g.execve, "execve")(path, argv, envp);
}

int execv(const char* path, char* const argv[]) noexcept {
  KernelMask m;
  return glibc_fn(g.execv, "execv")(path, argv);
}

int execvp(const char* file, char* const argv[]) noexcept {
  KernelMask m;
  return glibc_fn(g.execvp, "execvp")(file, argv);
}

int execvpe(const char* file, char* const argv[], char* const envp[]) noexcept {
  KernelMask m;
  return glibc_fn(g.execvpe, "execvpe")(file, argv, envp);
}

int fexecve(int fd, char* const argv[], char* const envp[]) noexcept {
  KernelMask m;
  return glibc_fn(g.fexecve, "fexecve")(fd, argv, envp);
}

int execveat(int dirfd, const char* path, char* const argv[], char* const envp[], int flags) noexcept {
  KernelMask m;
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
