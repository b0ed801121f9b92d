/* fork_exec.c — fork and exec from a program whose threads are fibres.
 * Run preloaded into its glibc build and linked with -lloom-pthread (the
 * header route refuses pthread_atfork); the output is glibc's.
 *  - fork + execve of /bin/true from a thread (a fibre): the parent sees
 *    the child's exit status; pthread_atfork handlers run in POSIX's order
 *    (prepare in reverse order of registration, parent and child in order);
 *  - posix_spawn of /bin/sh -c 'exit 3' from main;
 *  - a bare fork: the child is one kernel thread, which loom treats as a
 *    thread that is not one of its processors: a mutex, a sleep and a write
 *    work as glibc's, and pthread_create gives 0 (a kernel thread of
 *    glibc's; fork_child.c does more there);
 *  - a fork child that returns from its thread, or calls pthread_exit, ends
 *    with status 0 (the last thread ended). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

static char seq[64];
static size_t nseq;
static void note(const char* s) {
  size_t n = strlen(s);
  if (nseq + n < sizeof seq) {
    memcpy(seq + nseq, s, n);
    nseq += n;
    seq[nseq] = 0;
  }
}
static void prepare1(void) { note("p1 "); }
static void prepare2(void) { note("p2 "); }
static void parent1(void) { note("a1 "); }
static void parent2(void) { note("a2 "); }
static void child1(void) { note("c1 "); }
static void child2(void) { note("c2 "); }

static void die(const char* what) {
  printf("FAILED: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void* nothing(void* a) { return a; }

static void* fork_exec(void* arg) {
  (void)arg;
  int p[2];
  if (pipe(p) != 0) die("pipe");
  nseq = 0;
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    /* the child: report its handlers' order, then exec */
    ssize_t w = write(p[1], seq, nseq);
    (void)w;
    close(p[1]);
    char* argv[] = {"/bin/true", NULL};
    execve("/bin/true", argv, environ);
    _exit(127);
  }
  char parent_seq[64];
  memcpy(parent_seq, seq, sizeof parent_seq);
  close(p[1]);
  char child_seq[64] = {0};
  ssize_t n = read(p[0], child_seq, sizeof child_seq - 1);
  if (n < 0) die("read");
  close(p[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) die("waitpid");
  printf("fork+execve of /bin/true from a thread: exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  printf("atfork in the parent: %s\n", parent_seq);
  printf("atfork in the child: %s\n", child_seq);
  return NULL;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void* bare_fork(void* arg) {
  (void)arg;
  int p[2];
  if (pipe(p) != 0) die("pipe");
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    pthread_t t;
    int e = pthread_create(&t, NULL, nothing, NULL);
    pthread_mutex_lock(&lock);
    pthread_mutex_unlock(&lock);
    usleep(1000);
    ssize_t w = write(p[1], &e, sizeof e);
    _exit(w == sizeof e ? 0 : 1);
  }
  close(p[1]);
  int e = -1;
  ssize_t n = read(p[0], &e, sizeof e);
  close(p[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) die("waitpid");
  printf("bare fork: the child ran (exit %d); its pthread_create gave %s\n",
         WIFEXITED(status) ? WEXITSTATUS(status) : -1,
         n != sizeof e ? "nothing"
         : e == EAGAIN ? "EAGAIN"
         : e == 0      ? "0"
                       : "another error");
  return NULL;
}

/* The child of a fork made by a thread returns from the thread's start
 * routine, or calls pthread_exit: it was the last thread, so the child
 * ends with status 0. */
static void* fork_and_leave(void* how) {
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    if (how) pthread_exit(NULL);
    return NULL;
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) die("waitpid");
  printf("a fork child that %s: exit %d\n", how ? "calls pthread_exit" : "returns from the thread",
         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return NULL;
}

int main(void) {
  if (pthread_atfork(prepare1, parent1, child1) != 0 || pthread_atfork(prepare2, parent2, child2) != 0)
    die("pthread_atfork");
  pthread_t t;
  if (pthread_create(&t, NULL, fork_exec, NULL) != 0) die("pthread_create");
  pthread_join(t, NULL);

  pid_t pid;
  char* argv[] = {"/bin/sh", "-c", "exit 3", NULL};
  if (posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ) != 0) die("posix_spawn");
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) die("waitpid");
  printf("posix_spawn of sh -c 'exit 3' from main: exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);

  if (pthread_create(&t, NULL, bare_fork, NULL) != 0) die("pthread_create");
  pthread_join(t, NULL);
  for (long how = 0; how < 2; ++how) {
    fflush(stdout); /* the child exits through exit(): nothing buffered twice */
    if (pthread_create(&t, NULL, fork_and_leave, (void*)how) != 0) die("pthread_create");
    pthread_join(t, NULL);
  }
  return 0;
}
