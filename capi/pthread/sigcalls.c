/* capi/pthread/sigcalls.c — raise, kill, killpg and sigqueue by their glibc names,
 * for the preload and link routes: what they do is sigthread.cpp's
 * (loom_pthread_raise, loom_pthread_kill_pid, loom_pthread_sigqueue_pid).
 *
 * Defined in C, not C++, as nothrow.c's mutex calls and for the same
 * reason: glibc declares them nothrow (__THROW), which makes a C++
 * definition noexcept, and a handler the call runs in the calling thread
 * may end that thread (pthread_exit from the handler: an outside review's
 * program aborted in std::terminate 5 runs in 5 with raise). The unwinding
 * passes these frames: a noexcept one ends it in std::terminate, a C one
 * lets it pass. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <sys/types.h>

int loom_pthread_raise(int sig);
int loom_pthread_kill_pid(pid_t pid, int sig);
int loom_pthread_sigqueue_pid(pid_t pid, int sig, const union sigval value);

int raise(int sig) { return loom_pthread_raise(sig); }

int kill(pid_t pid, int sig) { return loom_pthread_kill_pid(pid, sig); }

/* glibc's killpg calls its own kill inside libc, past the preload. */
int killpg(pid_t pgrp, int sig) {
  if (pgrp < 0) {
    errno = EINVAL;
    return -1;
  }
  return loom_pthread_kill_pid(-pgrp, sig);
}

int sigqueue(pid_t pid, int sig, const union sigval value) { return loom_pthread_sigqueue_pid(pid, sig, value); }
