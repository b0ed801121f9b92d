// fork_keys.c — fork while other threads create and delete pthread keys:
// the child's own pthread_key_create must not wait for ever on the key
// registry's lock, held at the fork by a thread the child does not have
// (under libloom-pthread it was a spin lock of loom's: the child spun).
// Each child is bounded by alarm(); the parent counts children that ended
// well. Deterministic output: glibc's run is the reference (three.sh).
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;

static void* churn(void* arg) {
  (void)arg;
  while (!stop) {
    pthread_key_t k;
    if (pthread_key_create(&k, free) == 0) {
      pthread_setspecific(k, NULL);
      pthread_key_delete(k);
    }
    sched_yield();  // fibres are not preempted: let the forking thread run
  }
  return NULL;
}

static int child(void) {
  alarm(3);  // a child stuck in key_create dies of SIGALRM
  pthread_key_t k;
  if (pthread_key_create(&k, NULL) != 0) return 2;
  if (pthread_setspecific(k, &k) != 0 || pthread_getspecific(k) != &k) return 3;
  if (pthread_key_delete(k) != 0) return 4;
  return 0;
}

int main(void) {
  enum { kChurners = 3, kForks = 200 };
  pthread_t t[kChurners];
  for (int i = 0; i < kChurners; ++i) pthread_create(&t[i], NULL, churn, NULL);
  int ok = 0;
  for (int i = 0; i < kForks; ++i) {
    pid_t p = fork();
    if (p == 0) _exit(child());
    int st = 0;
    if (p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0) ++ok;
    else if (p > 0) fprintf(stderr, "child %d: %s %d\n", i, WIFSIGNALED(st) ? "signal" : "exit",
                            WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  }
  stop = 1;
  for (int i = 0; i < kChurners; ++i) pthread_join(t[i], NULL);
  printf("forks %d, children that ended well %d\n", kForks, ok);
  return ok == kForks ? 0 : 1;
}
