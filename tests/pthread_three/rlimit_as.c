/* rlimit_as.c — thread creation under an address-space limit (glibc's
 * tst-create-detached, smaller): two threads create 2,000 detached
 * threads with 16 MiB stacks (as glibc's) under RLIMIT_AS, retrying while
 * pthread_create gives EAGAIN (no room for another stack until finished
 * threads give theirs back). On glibc the creators are preempted and the
 * finished threads' stacks come back; under loom a failed create lets the
 * threads whose end frees memory run (a creator that only retries would
 * hold its processor), and a spare kernel thread loom cannot start under
 * the limit is done without, not an abort. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

enum { kThreads = 2000, kCreators = 2 };

static unsigned created;
static unsigned refused;
static pthread_attr_t detached;
static pthread_barrier_t start;

static void* nothing(void* arg) { return arg; }

static void* creator(void* arg) {
  (void)arg;
  pthread_barrier_wait(&start);
  for (;;) {
    pthread_t t;
    int e = pthread_create(&t, &detached, nothing, NULL);
    if (e == EAGAIN) __atomic_add_fetch(&refused, 1, __ATOMIC_RELAXED);
    if (e == 0 && __atomic_add_fetch(&created, 1, __ATOMIC_SEQ_CST) >= kThreads) break;
    if (e != 0 && e != EAGAIN) {
      printf("pthread_create: error %d\n", e);
      exit(1);
    }
  }
  return NULL;
}

int main(void) {
  struct rlimit l;
  getrlimit(RLIMIT_AS, &l);
  l.rlim_cur = 800u << 20;  /* 800 MiB: about 90 default stacks */
  if (setrlimit(RLIMIT_AS, &l) != 0) {
    perror("setrlimit");
    return 1;
  }
  pthread_attr_init(&detached);
  pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&detached, 16u << 20); /* glibc's test: 16 MiB, about 45 fit */
  pthread_barrier_init(&start, NULL, kCreators);
  pthread_t c[kCreators];
  for (int i = 0; i < kCreators; ++i)
    if (pthread_create(&c[i], NULL, creator, NULL) != 0) {
      puts("cannot create a creator");
      return 1;
    }
  for (int i = 0; i < kCreators; ++i) pthread_join(c[i], NULL);
  printf("created at least %d detached threads under RLIMIT_AS\n", kThreads);
  return 0;
}
