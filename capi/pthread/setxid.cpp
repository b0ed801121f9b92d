// capi/pthread/setxid.cpp — glibc's setuid family with main() on any processor.
//
// setuid, setgid, seteuid, setegid, setreuid, setregid, setresuid,
// setresgid and setgroups change the credentials of every kernel thread of
// the process, as glibc does them (its SIGSETXID broadcast), but glibc skips
// the kernel thread named by the caller's block. main()'s block names the
// initial kernel thread, so when main() made the call from another processor
// the initial kernel thread kept the old credentials. Each call here runs
// glibc's under tls::KernelIdentity, which installs the calling kernel
// thread's own block for the call's duration (sched/tls.hpp). glibc's calls
// make only inline system calls, so the fibre cannot switch in between.
//
// Left alone: initgroups, whose setgroups is libc's internal one and which
// may read /etc/group (a switch) first — it is glibc's own, unwrapped.
//
// ptrace: the kernel ties a tracee to the tracing kernel thread, and every
// request after PTRACE_ATTACH or PTRACE_SEIZE must come from it (ESRCH
// otherwise). A fibre that makes a request is pinned to the processor it
// runs on (rt::pin_this_fibre): never stolen, its requests all come from
// that kernel thread (gdb under the preload lost its tracee when its main
// fibre moved: glibc's tst-pthread-gdb-attach). Waiting for the tracee
// (waitpid) may come from any thread of the process, as on glibc.
#include <grp.h>
#include <sys/ptrace.h>
#include <unistd.h>

#include <cstdarg>

#include "base/sys.hpp"
#include "sched/processor.hpp"
#include "sched/tls.hpp"

namespace {

using loom::rt::tls::KernelIdentity;

template <class F>
F real(const char* name) {
  F f = nullptr;
  loom::rt::sys::find_symbol(f, "libc.so.6", name);
  return f;
}

}  // namespace

extern "C" {

int setuid(uid_t u) {
  static auto f = real<int (*)(uid_t)>("setuid");
  KernelIdentity id;
  return f(u);
}
int setgid(gid_t g) {
  static auto f = real<int (*)(gid_t)>("setgid");
  KernelIdentity id;
  return f(g);
}
int seteuid(uid_t u) {
  static auto f = real<int (*)(uid_t)>("seteuid");
  KernelIdentity id;
  return f(u);
}
int setegid(gid_t g) {
  static auto f = real<int (*)(gid_t)>("setegid");
  KernelIdentity id;
  return f(g);
}
int setreuid(uid_t r, uid_t e) {
  static auto f = real<int (*)(uid_t, uid_t)>("setreuid");
  KernelIdentity id;
  return f(r, e);
}
int setregid(gid_t r, gid_t e) {
  static auto f = real<int (*)(gid_t, gid_t)>("setregid");
  KernelIdentity id;
  return f(r, e);
}
int setresuid(uid_t r, uid_t e, uid_t s) {
  static auto f = real<int (*)(uid_t, uid_t, uid_t)>("setresuid");
  KernelIdentity id;
  return f(r, e, s);
}
int setresgid(gid_t r, gid_t e, gid_t s) {
  static auto f = real<int (*)(gid_t, gid_t, gid_t)>("setresgid");
  KernelIdentity id;
  return f(r, e, s);
}
int setgroups(size_t n, const gid_t* list) {
  static auto f = real<int (*)(size_t, const gid_t*)>("setgroups");
  KernelIdentity id;
  return f(n, list);
}

}  // extern "C"

extern "C" long ptrace(enum __ptrace_request request, ...) noexcept {
  va_list ap;
  va_start(ap, request);
  pid_t pid = va_arg(ap, pid_t);
  void* addr = va_arg(ap, void*);
  void* data = va_arg(ap, void*);
  va_end(ap);
  loom::rt::pin_this_fibre();
  static const auto glibc = real<long (*)(enum __ptrace_request, ...)>("ptrace");
  return glibc(request, pid, addr, data);
}
