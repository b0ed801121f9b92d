// In a fork child, another thread signals and then cancels the forking
// thread (main here), which is blocked in read on a pipe inside glibc's
// own cancellation point; the child is forked twice over, as glibc's
// test driver forks each test (glibc's tst-cancel21). Each line is
// glibc's: the handler runs, the read goes on (SA_RESTART), the
// cancellation ends it and runs main's cleanup handler, the thread joining
// main gets PTHREAD_CANCELED, and the child ends with status 0.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_hup(int sig) {
  (void)sig;
  static const char m[] = "  handler ran in main\n";
  if (write(1, m, sizeof m - 1) < 0) _exit(3);
}

static void cleanup(void* arg) {
  (void)arg;
  static const char m[] = "  main's cleanup handler\n";
  if (write(1, m, sizeof m - 1) < 0) _exit(3);
}

static void* other(void* arg) {
  pthread_t m = (pthread_t)arg;
  usleep(200 * 1000);  // main is in read by now
  int k = pthread_kill(m, SIGHUP);
  usleep(200 * 1000);
  int c = pthread_cancel(m);
  void* r;
  int e = pthread_join(m, &r);
  // (Said after the join: main's handlers write meanwhile.)
  printf("  kill main: %s, cancel main: %s\n", strerror(k), strerror(c));
  printf("  join main: %s, %s\n", strerror(e), r == PTHREAD_CANCELED ? "PTHREAD_CANCELED" : "a value");
  fflush(stdout);
  exit(0);
}

static int child(void) {
  int fd[2];
  if (pipe(fd) != 0) return 1;
  pthread_t t;
  if (pthread_create(&t, NULL, other, (void*)pthread_self()) != 0) return 1;
  pthread_cleanup_push(cleanup, NULL);
  char c;
  if (read(fd[0], &c, 1) == 1) puts("  read returned");
  pthread_cleanup_pop(0);
  return 1;
}

static int fork_and_wait(int depth) {
  pid_t p = fork();
  if (p < 0) return 1;
  if (p == 0) _exit(depth > 1 ? fork_and_wait(depth - 1) : child());
  int st;
  if (waitpid(p, &st, 0) != p) return 1;
  printf("child (depth %d): exit status %d\n", depth, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  fflush(stdout);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

static void* nothing(void* arg) { return arg; }

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct sigaction a;
  memset(&a, 0, sizeof a);
  a.sa_handler = on_hup;
  a.sa_flags = SA_RESTART;
  sigemptyset(&a.sa_mask);
  sigaction(SIGHUP, &a, NULL);
  pthread_t t0;  // a thread of the parent's, so that loom runs the program on fibres
  pthread_create(&t0, NULL, nothing, NULL);
  pthread_join(t0, NULL);
  printf("a child of the process\n");
  fflush(stdout);
  if (fork_and_wait(1) != 0) return 1;
  printf("a child of a child\n");
  fflush(stdout);
  return fork_and_wait(2);
}
