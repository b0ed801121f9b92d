/* exec_signal.c — OP_SIGNAL: raise, pthread_kill and kill to threads in
 * sigwait, sigwaitinfo, sigsuspend and ppoll, queued real-time signals,
 * signalfd, SIGCHLD, sigtimedwait; the handlers installed at start. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec.h"

/* ---- signals ------------------------------------------------------------------------------ */

static atomic_int handled[65];
static pthread_t handled_on[65];
static atomic_int handled_value;

static void handler(int sig, siginfo_t* si, void* uc) {
  (void)uc;
  handled_on[sig] = pthread_self();
  atomic_store(&handled_value, si ? si->si_value.sival_int : 0);
  atomic_fetch_add(&handled[sig], 1);
}

void install_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGUSR2, &sa, NULL);
  sigaction(SIGRTMIN + 1, &sa, NULL);
}

static void mask(int how, int sig) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, sig);
  pthread_sigmask(how, &s, NULL);
}

struct sigthread {
  int kind, sig, fd;
  long r;
  int err, got, code, value, on_self, values[3];
  pthread_t self;
  atomic_int ready;
};

static void* sig_thread(void* p) {
  struct sigthread* s = p;
  s->self = pthread_self();
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, s->sig);
  siginfo_t si;
  atomic_store(&s->ready, 1);
  switch (s->kind) {
    case 1: /* sigwait */
      s->r = sigwait(&set, &s->got);
      break;
    case 2: /* sigwaitinfo */
      s->r = sigwaitinfo(&set, &si);
      s->err = errno;
      s->got = si.si_signo;
      s->code = si.si_code;
      s->value = si.si_pid == getpid();
      break;
    case 3:
    case 9: { /* sigsuspend with the signal open */
      sigset_t open;
      pthread_sigmask(SIG_BLOCK, NULL, &open);
      sigdelset(&open, s->sig);
      s->r = sigsuspend(&open);
      s->err = errno;
      s->on_self = pthread_equal(handled_on[s->sig], pthread_self());
      break;
    }
    case 8: /* three queued real-time signals, in order */
      for (int i = 0; i < 3; ++i) {
        s->r = sigwaitinfo(&set, &si);
        s->values[i] = si.si_value.sival_int;
      }
      break;
    case 10: { /* ppoll on a pipe nobody writes, the signal open during it */
      sigset_t open;
      pthread_sigmask(SIG_BLOCK, NULL, &open);
      sigdelset(&open, s->sig);
      struct pollfd f = {s->fd, POLLIN, 0};
      s->r = ppoll(&f, 1, NULL, &open);
      s->err = errno;
      s->on_self = pthread_equal(handled_on[s->sig], pthread_self());
      break;
    }
  }
  return NULL;
}

static volatile sig_atomic_t chld;
static void on_chld(int sig) {
  (void)sig;
  chld++;
}

static void do_signal(const Step* st) {
  int kind = st->a % 11;
  for (int i = 0; i < 65; ++i) atomic_store(&handled[i], 0);
  sigset_t none;
  sigemptyset(&none);
  switch (kind) {
    case 0: {
      raise(SIGUSR1);
      out("signal raise(SIGUSR1): handler ran %d time(s) before raise returned", atomic_load(&handled[SIGUSR1]));
      break;
    }
    case 1:
    case 2:
    case 3:
    case 8:
    case 9:
    case 10: {
      static const char* names[] = {"",
                                    "pthread_kill to a thread in sigwait",
                                    "kill to the process, a thread in sigwaitinfo",
                                    "pthread_kill to a thread in sigsuspend",
                                    "",
                                    "",
                                    "",
                                    "",
                                    "three pthread_sigqueue to a thread in sigwaitinfo",
                                    "kill to the process, a thread in sigsuspend",
                                    "pthread_kill to a thread in ppoll"};
      struct sigthread s;
      memset(&s, 0, sizeof s);
      s.kind = kind;
      s.sig = kind == 8 ? SIGRTMIN + 1 : kind == 1 || kind == 2 ? SIGUSR2 : SIGUSR1;
      int p[2] = {-1, -1};
      if (kind == 10 && pipe(p) == 0) s.fd = p[0];
      mask(SIG_BLOCK, s.sig); /* main never takes it; the thread inherits it blocked */
      pthread_t t;
      pthread_create(&t, NULL, sig_thread, &s);
      while (!atomic_load(&s.ready)) usleep(100);
      usleep(1000);
      if (kind == 2 || kind == 9) {
        kill(getpid(), s.sig);
      } else if (kind == 8) {
        for (int i = 0; i < 3; ++i) pthread_sigqueue(t, s.sig, (union sigval){.sival_int = 10 + i});
      } else {
        pthread_kill(t, s.sig);
      }
      pthread_join(t, NULL);
      mask(SIG_UNBLOCK, s.sig);
      if (p[0] >= 0) {
        close(p[0]);
        close(p[1]);
      }
      if (kind == 1)
        out("signal %s -> %ld, got %s", names[kind], s.r, s.got == SIGUSR2 ? "SIGUSR2" : "WRONG");
      else if (kind == 2)
        out("signal %s -> %s, got %s, SI_USER %s, from this process %s", names[kind], s.r > 0 ? "ok" : res(s.r, s.err),
            s.got == SIGUSR2 ? "SIGUSR2" : "WRONG", s.code == SI_USER ? "yes" : "no", s.value ? "yes" : "no");
      else if (kind == 8)
        out("signal %s -> values %d %d %d", names[kind], s.values[0], s.values[1], s.values[2]);
      else
        out("signal %s -> %s, handler ran %d time(s), on that thread %s", names[kind], res(s.r, s.err),
            atomic_load(&handled[s.sig]), s.on_self ? "yes" : "no");
      break;
    }
    case 4: {
      mask(SIG_BLOCK, SIGUSR1);
      raise(SIGUSR1);
      sigset_t pend;
      sigpending(&pend);
      int was = sigismember(&pend, SIGUSR1), before = atomic_load(&handled[SIGUSR1]);
      mask(SIG_UNBLOCK, SIGUSR1);
      out("signal blocked raise: pending %s, handler before unblock %d, after %d", was ? "yes" : "no", before,
          atomic_load(&handled[SIGUSR1]));
      break;
    }
    case 5: {
      mask(SIG_BLOCK, SIGUSR1);
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGUSR1);
      int fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
      struct signalfd_siginfo si;
      errno = 0;
      long r0 = read(fd, &si, sizeof si);
      int e0 = errno;
      int how = st->d % 3;
      if (how == 0)
        kill(getpid(), SIGUSR1);
      else if (how == 1)
        raise(SIGUSR1);
      else
        pthread_kill(pthread_self(), SIGUSR1);
      errno = 0;
      long r1 = read(fd, &si, sizeof si);
      int e1 = errno;
      close(fd);
      sigset_t pend;
      sigpending(&pend);
      int left = sigismember(&pend, SIGUSR1);
      if (left) { /* take it, so that the unblock does not run the handler later */
        int got;
        sigwait(&set, &got);
      }
      mask(SIG_UNBLOCK, SIGUSR1);
      out("signal signalfd, empty read %s, after %s: %s%s, still pending %s", res(r0, e0),
          how == 0   ? "kill"
          : how == 1 ? "raise"
                     : "pthread_kill",
          res(r1, e1), r1 == (long)sizeof si ? (si.ssi_signo == SIGUSR1 ? " SIGUSR1" : " WRONG") : "",
          left ? "yes" : "no");
      break;
    }
    case 6: {
      struct sigaction sa, old;
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = on_chld;
      sa.sa_flags = SA_RESTART;
      sigaction(SIGCHLD, &sa, &old);
      chld = 0;
      pid_t pid = fork();
      if (pid == 0) _exit(3);
      int status = 0;
      pid_t w = waitpid(pid, &status, 0);
      for (long t0 = now_ms(); !chld && now_ms() - t0 < 2000;) usleep(200);
      sigaction(SIGCHLD, &old, NULL);
      out("signal SIGCHLD: waitpid %s, exit %d, handler ran %s", w == pid ? "ok" : "WRONG",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1, chld ? "yes" : "no");
      break;
    }
    case 7: {
      mask(SIG_BLOCK, SIGUSR2);
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGUSR2);
      struct timespec zero = {0, 0};
      siginfo_t si;
      errno = 0;
      int r0 = sigtimedwait(&set, &si, &zero), e0 = errno;
      sigqueue(getpid(), SIGUSR2, (union sigval){.sival_int = 42});
      int r1 = sigtimedwait(&set, &si, &zero);
      mask(SIG_UNBLOCK, SIGUSR2);
      out("signal sigtimedwait nothing -> %s; after sigqueue -> %s value %d SI_QUEUE %s", res(r0, e0),
          r1 == SIGUSR2 ? "SIGUSR2" : res(r1, errno), r1 == SIGUSR2 ? si.si_value.sival_int : 0,
          r1 == SIGUSR2 && si.si_code == SI_QUEUE ? "yes" : "no");
      break;
    }
  }
  pthread_sigmask(SIG_SETMASK, &none, NULL);
}

void exec_signal(const Step* st) { do_signal(st); }
