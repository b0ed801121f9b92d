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
#include <grp.h>
#include <unistd.h>

#include "base/sys.hpp"
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
