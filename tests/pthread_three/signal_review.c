// signal_review.c — signal cases an outside review found loom answering
// differently from glibc; three.sh compares each case's output with the
// plain glibc run's. One case per run (argv[1]); an alarm bounds each.
//   killexited  pthread_kill on a thread that has returned but is not yet
//               joined: nothing is sent, 0 (pthread_sigqueue: ESRCH)
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void* quick(void* a) { return a; }

static int killexited(void) {
  pthread_t t;
  pthread_create(&t, NULL, quick, NULL);
  usleep(100000);
  printf("pthread_kill(exited, 0) = %d\n", pthread_kill(t, 0));
  printf("pthread_kill(exited, SIGTERM) = %d\n", pthread_kill(t, SIGTERM));
  printf("pthread_kill(exited, SIGRTMIN) = %d\n", pthread_kill(t, SIGRTMIN));
  printf("pthread_sigqueue(exited) = %s\n", strerror(pthread_sigqueue(t, SIGUSR1, (union sigval){0})));
  printf("join = %d\n", pthread_join(t, NULL));
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  alarm(60);
  const char* c = argc > 1 ? argv[1] : "";
  if (strcmp(c, "killexited") == 0) return killexited();
  fprintf(stderr, "usage: signal_review killexited\n");
  return 2;
}
