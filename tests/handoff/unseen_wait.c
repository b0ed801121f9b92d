/* unseen_wait.c MODE WAITERS [full] — WAITERS threads wait where loom
 * cannot see, and a thread created after them wakes them (issue 31):
 *
 *   futex  each waiter sleeps in FUTEX_WAIT on a word, the system call made
 *          with the instruction itself (libgomp's way); the waker stores the
 *          word and makes FUTEX_WAKE the same way;
 *   pipe   each waiter reads one byte of a pipe, the pipe made and read with
 *          the instruction itself; the waker writes one byte a waiter;
 *   spin   each waiter loads a flag until it is set, no call at all in the
 *          loop (OpenBLAS's way); the waker stores the flag.
 *
 * On glibc every thread is a kernel thread: done at once. Under loom a
 * waiter holds its processor's kernel thread for as long as it waits, and
 * the waker, queued behind it, can run only once loom takes the processor
 * back (a spare kernel thread for a blocked one, something for a spinner):
 * with fewer processors than waiters + 1 and no such mechanism, this hangs.
 *
 * The waker wakes them only once every waiter is in its wait: it has said so
 * (an atomic flag set just before the wait) and, for futex and pipe, the
 * kernel reports its kernel thread asleep (/proc/self/task/TID/stat) — so a
 * run on enough processors cannot pass by waking waiters that have not begun
 * to wait. It gives up after 10 s and says how many were waiting: a loom
 * that runs the waker but not all the waiters fails too. After its wait each
 * waiter takes a pthread mutex (a call loom sees) to count itself. The
 * output is the same every run; exit status 0 when all were woken.
 *
 * full: the descriptor table is filled first (RLIMIT_NOFILE lowered to 64,
 * every number but one taken), as a server at its limit has it. The one
 * left is the waker's to read /proc with, and must be free again at the
 * end: a runtime that takes a number of the program's while it looks after
 * lost processors (loom's monitor reading the same /proc files; a spare
 * named through its /proc file) makes the waker's reads fail, and the run
 * with them, or keeps the number. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "raw_syscall.h"

enum mode { FUTEX, PIPE, SPIN };
static const char* const mode_names[] = {"futex", "pipe", "spin"};

#define MAX_WAITERS 64
struct waiter {
  pthread_t thread;
  atomic_long tid; /* its kernel thread, 0 until it is about to wait */
  long result;     /* what its wait returned last */
};

static enum mode mode;
static int waiters;
static struct waiter w[MAX_WAITERS];
static atomic_int word; /* futex: 0 until the waker stores 1 */
static atomic_int flag; /* spin: likewise */
static int fds[2];      /* pipe */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int woken;   /* under lock */
static int in_wait; /* how many the waker found waiting */

static void* wait_unseen(void* arg) {
  struct waiter* me = arg;
  atomic_store(&me->tid, raw_syscall4(SYS_gettid, 0, 0, 0, 0));
  switch (mode) {
    case FUTEX:
      while (atomic_load(&word) == 0) me->result = raw_syscall4(SYS_futex, (long)&word, FUTEX_WAIT_PRIVATE, 0, 0);
      break;
    case PIPE: {
      char c;
      do me->result = raw_syscall4(SYS_read, fds[0], (long)&c, 1, 0);
      while (me->result == -EINTR);
      if (me->result != 1) return NULL; /* not counted: the output says so */
      break;
    }
    case SPIN:
      while (!atomic_load_explicit(&flag, memory_order_acquire)) {
      }
      break;
  }
  pthread_mutex_lock(&lock);
  woken++;
  pthread_mutex_unlock(&lock);
  return NULL;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The kernel's state letter for one of this process's kernel threads, or 0. */
static char kernel_state(long tid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char* p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
  return p && p[1] == ' ' ? p[2] : 0;
}

static int waiting(const struct waiter* x) {
  long tid = atomic_load(&x->tid);
  if (tid == 0) return 0;
  return mode == SPIN || kernel_state(tid) == 'S';
}

static void* wake(void* arg) {
  (void)arg;
  double give_up = now() + 10;
  struct timespec ms = {0, 1000000};
  in_wait = 0;
  while (in_wait < waiters && now() < give_up) {
    if (waiting(&w[in_wait]))
      in_wait++;
    else
      nanosleep(&ms, NULL);
  }
  if (in_wait < waiters)
    fprintf(stderr, "unseen_wait: waiter %d of %d not in its wait after 10 s\n", in_wait + 1, waiters);
  switch (mode) {
    case FUTEX:
      atomic_store(&word, 1);
      raw_syscall4(SYS_futex, (long)&word, FUTEX_WAKE_PRIVATE, INT_MAX, 0);
      break;
    case PIPE:
      for (int i = 0; i < waiters; i++)
        if (raw_syscall4(SYS_write, fds[1], (long)"x", 1, 0) != 1) fprintf(stderr, "unseen_wait: write failed\n");
      break;
    case SPIN:
      atomic_store_explicit(&flag, 1, memory_order_release);
      break;
  }
  return NULL;
}

/* Fills the descriptor table under a limit of 64 but for one number, which
 * it returns (-1: could not). */
static int fill_table(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
  rl.rlim_cur = 64;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
  int last = -1;
  for (;;) {
    int fd = dup(0);
    if (fd < 0) break;
    last = fd;
  }
  if (errno != EMFILE || last < 0) return -1;
  close(last);
  return last;
}

int main(int argc, char** argv) {
  int m = -1;
  int args_ok = argc == 3 || (argc == 4 && strcmp(argv[3], "full") == 0);
  for (int i = 0; args_ok && i < 3; i++)
    if (strcmp(argv[1], mode_names[i]) == 0) m = i;
  waiters = args_ok ? atoi(argv[2]) : 0;
  if (m < 0 || waiters < 1 || waiters > MAX_WAITERS) {
    fprintf(stderr, "usage: unseen_wait futex|pipe|spin WAITERS (1..%d) [full]\n", MAX_WAITERS);
    return 2;
  }
  mode = (enum mode)m;
  if (mode == PIPE) {
    long r = raw_syscall4(SYS_pipe2, (long)fds, O_CLOEXEC, 0, 0);
    if (r != 0) {
      fprintf(stderr, "unseen_wait: pipe2: %s\n", strerror((int)-r));
      return 1;
    }
  }
  int spare_fd = -1; /* full: the one number left free */
  if (argc == 4 && (spare_fd = fill_table()) < 0) {
    fprintf(stderr, "unseen_wait: cannot fill the descriptor table: %s\n", strerror(errno));
    return 1;
  }
  for (int i = 0; i < waiters; i++)
    if (pthread_create(&w[i].thread, NULL, wait_unseen, &w[i]) != 0) return 1;
  pthread_t waker; /* created after the waiters */
  if (pthread_create(&waker, NULL, wake, NULL) != 0) return 1;
  pthread_join(waker, NULL);
  for (int i = 0; i < waiters; i++) pthread_join(w[i].thread, NULL);

  const char* name = mode_names[mode];
  printf("%s: in their wait when the waker (created after them) woke them: %d of %d\n", name, in_wait, waiters);
  printf("%s: woken: %d of %d\n", name, woken, waiters);
  for (int i = 0; i < waiters; i++)
    if (mode == PIPE && w[i].result != 1) printf("%s: waiter %d's read returned %ld\n", name, i, w[i].result);
  int spare_ok = 1;
  if (spare_fd >= 0) {
    int fd = dup(0);
    spare_ok = fd == spare_fd;
    printf("%s: the one free descriptor number is free at the end: %s\n", name, spare_ok ? "yes" : "no");
    if (!spare_ok) fprintf(stderr, "unseen_wait: dup gave %d (%s), not %d\n", fd, fd < 0 ? strerror(errno) : "", spare_fd);
  }
  return in_wait == waiters && woken == waiters && spare_ok ? 0 : 1;
}
