/* signal_handler.c — a signal handler's calls, in plain C against glibc.
 * Built once; signal_handler.sh runs it as is, under LD_PRELOAD and linked
 * with -lloom-pthread, on one processor (LOOM_PROCESSORS=1): stdout must be
 * the same.
 *
 *   sigaction's oldact gives back the handler the program installed (with
 *   its SA_SIGINFO or without), signal() returns it, SA_RESETHAND leaves
 *   SIG_DFL after one delivery;
 *   a SIGUSR1 raised by main runs a handler that calls nanosleep, usleep
 *   and write() to a full pipe (a forked child drains it 150 ms later):
 *   each blocks, and returns;
 *   a SIGALRM (setitimer) whose handler writes a byte to a pipe wakes main,
 *   blocked in read() on it.
 *
 * On stderr only, when libloom is in the process (dlsym): how many times a
 * ticker thread ran while the SIGUSR1 handler's calls waited. On one
 * processor that is 0 if they blocked the kernel thread as glibc's calls do,
 * more if they took the fibre's path (the handler's fibre waited and the
 * processor ran the ticker, under the interrupted code). glibc's own
 * threads tick meanwhile, so the line is not part of stdout. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

enum { EXTRA = 512 };

static int full[2], wake[2];
static long during[3] = {-1, -1, -1};
static int handler_ok, alarms, resets;

static void on_usr1(int sig) {
  int saved = errno;
  (void)sig;
  long t0 = atomic_load(&ticks);
  struct timespec t = {0, 30000000};
  int a = nanosleep(&t, NULL);
  long t1 = atomic_load(&ticks);
  int b = usleep(30000);
  long t2 = atomic_load(&ticks);
  static char buf[EXTRA];
  memset(buf, 'x', sizeof buf);
  ssize_t c = write(full[1], buf, sizeof buf);
  long t3 = atomic_load(&ticks);
  during[0] = t1 - t0;
  during[1] = t2 - t1;
  during[2] = t3 - t2;
  handler_ok = a == 0 && b == 0 && c == EXTRA;
  errno = saved;
}

static void on_usr1_info(int sig, siginfo_t* si, void* uc) {
  (void)si, (void)uc;
  on_usr1(sig);
}

static void on_alarm(int sig) {
  int saved = errno;
  (void)sig;
  ++alarms;
  char b = 'a';
  if (write(wake[1], &b, 1) != 1) _exit(3);
  errno = saved;
}

static void on_usr2(int sig) {
  (void)sig;
  ++resets;
}

static const char* name(void* h) {
  if (h == (void*)on_usr1) return "on_usr1";
  if (h == (void*)on_usr1_info) return "on_usr1_info";
  if (h == (void*)SIG_DFL) return "SIG_DFL";
  if (h == (void*)SIG_IGN) return "SIG_IGN";
  return "another handler";
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* a run that hangs shows how far it got */
  pthread_t tk;
  if (pthread_create(&tk, NULL, ticker, (void*)500)) fail("pthread_create");
  while (atomic_load(&ticks) == 0) usleep(1000);

  /* 1. What sigaction and signal give back. */
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_sigaction = on_usr1_info;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  if (sigaction(SIGUSR1, &sa, &old) != 0) fail("sigaction");
  printf("SIGUSR1 at first: %s\n", name((void*)old.sa_handler));
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGUSR1, &sa, &old) != 0) fail("sigaction");
  printf("oldact: %s, SA_SIGINFO %d, SA_RESTART %d\n", name((void*)old.sa_sigaction), !!(old.sa_flags & SA_SIGINFO),
         !!(old.sa_flags & SA_RESTART));
  if (sigaction(SIGUSR1, NULL, &old) != 0) fail("sigaction");
  printf("now: %s, SA_SIGINFO %d\n", name((void*)old.sa_handler), !!(old.sa_flags & SA_SIGINFO));
  printf("signal() gives back: %s\n", name((void*)signal(SIGUSR1, on_usr1)));
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr2;
  sa.sa_flags = SA_RESETHAND;
  if (sigaction(SIGUSR2, &sa, NULL) != 0) fail("sigaction");
  raise(SIGUSR2);
  if (sigaction(SIGUSR2, NULL, &old) != 0) fail("sigaction");
  printf("SA_RESETHAND: handler ran %d time(s), then %s, SA_SIGINFO %d\n", resets, name((void*)old.sa_handler),
         !!(old.sa_flags & SA_SIGINFO));
  printf("sigaction on SIGKILL: %d\n", sigaction(SIGKILL, &sa, NULL));

  /* 2. A handler that sleeps and writes to a full pipe. */
  if (pipe(full) != 0) fail("pipe");
  int cap = fcntl(full[1], F_GETPIPE_SZ);
  char* fill = malloc((size_t)cap);
  memset(fill, 'f', (size_t)cap);
  if (write(full[1], fill, (size_t)cap) != cap) fail("write");
  pid_t child = fork();
  if (child < 0) fail("fork");
  if (child == 0) {
    close(full[1]);
    usleep(150000);
    long left = (long)cap + EXTRA;
    while (left > 0) {
      ssize_t r = read(full[0], fill, (size_t)cap);
      if (r <= 0) _exit(2);
      left -= r;
    }
    _exit(0);
  }
  close(full[0]);
  raise(SIGUSR1);
  int status;
  waitpid(child, &status, 0);
  printf("handler: nanosleep, usleep and a write to a full pipe %s; the child %s\n", handler_ok ? "returned" : "FAILED",
         WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "read it all" : "FAILED");

  /* 3. A handler's write wakes main, blocked in read. */
  if (pipe(wake) != 0) fail("pipe");
  if (signal(SIGALRM, on_alarm) == SIG_ERR) fail("signal");
  struct itimerval it = {{0, 0}, {0, 50000}};
  setitimer(ITIMER_REAL, &it, NULL);
  char b = 0;
  ssize_t r = read(wake[0], &b, 1);
  printf("read after SIGALRM: %zd '%c', %d alarm(s)\n", r, b, alarms);

  atomic_store(&ticker_stop, 1);
  pthread_join(tk, NULL);
  if (dlsym(RTLD_DEFAULT, "loom_io_stats"))
    fprintf(stderr, "probe: ticks while the handler waited: nanosleep %ld, usleep %ld, write %ld\n", during[0],
            during[1], during[2]);
  return 0;
}
