/* stacks.c — thread attributes as glibc has them (issue 32): a caller's
 * stack (pthread_attr_setstack, setstackaddr) is where the thread runs
 * (its locals are there, getattr reports it, many threads in turn reuse
 * the same memory, deep frames fit), sizes below PTHREAD_STACK_MIN are
 * refused, affinity sets are kept and read back and a set without a usable
 * CPU makes pthread_create fail with EINVAL, a priority outside its
 * policy's range too, and pthread_setattr_default_np's detach state is what
 * a thread without an attribute gets. Each line is glibc's answer. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* setstackaddr: under test */
#pragma GCC diagnostic ignored "-Wnonnull"                 /* a null affinity set: under test */

#include "errname.h"

enum { kSize = 256 * 1024 };
static char* region;  // the caller's stack

static int depth(int n) {  // frames of about 1 KiB each
  volatile char pad[1000];
  pad[0] = (char)n;
  return n == 0 ? pad[0] : depth(n - 1) + pad[0];
}

static void* on_region(void* arg) {
  int local = 0;
  int inside = (char*)&local >= region && (char*)&local < region + kSize;
  pthread_attr_t a;
  void* lo = NULL;
  size_t size = 0;
  int e = pthread_getattr_np(pthread_self(), &a);
  if (e == 0) {
    pthread_attr_getstack(&a, &lo, &size);
    pthread_attr_destroy(&a);
  }
  int reported = e == 0 && (char*)lo >= region && (char*)lo + size <= region + kSize && size >= kSize / 2;
  depth(100);  // about 100 KiB deep: within the region
  return (void*)(intptr_t)(arg ? inside * 2 + reported : inside);
}

static void caller_stacks(void) {
  pthread_attr_t a;
  pthread_attr_init(&a);
  char small[64];
  printf("setstack size 1: %s\n", err(pthread_attr_setstack(&a, small, 1)));
  printf("setstack below PTHREAD_STACK_MIN: %s\n", err(pthread_attr_setstack(&a, region, PTHREAD_STACK_MIN - 1)));
  printf("setstacksize 1: %s\n", err(pthread_attr_setstacksize(&a, 1)));
  printf("setstack: %s\n", err(pthread_attr_setstack(&a, region, kSize)));
  void* got = NULL;
  size_t size = 0;
  pthread_attr_getstack(&a, &got, &size);
  printf("getstack gives it back: %d\n", got == region && size == kSize);
  int ok = 0;
  for (int i = 0; i < 200; ++i) {  // one after another on the same memory
    pthread_t t;
    void* r = NULL;
    if (pthread_create(&t, &a, on_region, (void*)1) != 0) break;
    pthread_join(t, &r);
    ok += (intptr_t)r == 3;
  }
  printf("200 threads in turn on the caller's stack: %d ran there and saw it\n", ok);
  pthread_attr_destroy(&a);

  pthread_attr_init(&a);
  pthread_attr_setstacksize(&a, kSize);
  printf("setstackaddr (its top): %s\n", err(pthread_attr_setstackaddr(&a, region + kSize)));
  pthread_t t;
  void* r = NULL;
  int e = pthread_create(&t, &a, on_region, NULL);
  if (e == 0) pthread_join(t, &r);
  printf("on setstackaddr's stack: %s, ran there %ld\n", err(e), (long)(intptr_t)r);
  pthread_attr_destroy(&a);
}

static void* nothing(void* arg) { return arg; }

static void affinity(void) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  sched_getaffinity(0, sizeof mine, &mine);
  pthread_attr_t a;
  pthread_attr_init(&a);
  cpu_set_t back;
  memset(&back, 0, sizeof back);
  printf("attr setaffinity: %s\n", err(pthread_attr_setaffinity_np(&a, sizeof mine, &mine)));
  printf("attr getaffinity: %s, same set %d\n", err(pthread_attr_getaffinity_np(&a, sizeof back, &back)),
         CPU_EQUAL(&mine, &back));
  pthread_t t;
  int e = pthread_create(&t, &a, nothing, NULL);
  if (e == 0) pthread_join(t, NULL);
  printf("create with the process's CPUs: %s\n", err(e));
  int beyond = (int)sysconf(_SC_NPROCESSORS_CONF) + 1;
  cpu_set_t* bad = CPU_ALLOC(beyond + 1);
  size_t n = CPU_ALLOC_SIZE(beyond + 1);
  CPU_ZERO_S(n, bad);
  CPU_SET_S(beyond, n, bad);
  pthread_attr_setaffinity_np(&a, n, bad);
  e = pthread_create(&t, &a, nothing, NULL);
  if (e == 0) pthread_join(t, NULL);
  printf("create with only a CPU beyond the machine's: %s\n", err(e));
  printf("thread setaffinity, only a CPU beyond: %s\n", err(pthread_setaffinity_np(pthread_self(), n, bad)));
  printf("thread setaffinity, its own CPUs: %s\n", err(pthread_setaffinity_np(pthread_self(), sizeof mine, &mine)));
  CPU_FREE(bad);
  cpu_set_t* none = NULL;
  printf("attr setaffinity cleared: %s\n", err(pthread_attr_setaffinity_np(&a, 0, none)));
  pthread_attr_destroy(&a);
  cpu_set_t cur;
  printf("thread getaffinity: %s\n", err(pthread_getaffinity_np(pthread_self(), sizeof cur, &cur)));
}

static void sched_attr(void) {
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setinheritsched(&a, PTHREAD_EXPLICIT_SCHED);
  pthread_attr_setschedpolicy(&a, SCHED_FIFO);
  struct sched_param p = {.sched_priority = sched_get_priority_max(SCHED_OTHER) + 1};
  printf("FIFO priority: %s\n", err(pthread_attr_setschedparam(&a, &p)));
  pthread_attr_setschedpolicy(&a, SCHED_OTHER);
  pthread_t t;
  int e = pthread_create(&t, &a, nothing, NULL);
  if (e == 0) pthread_join(t, NULL);
  printf("create with a priority its policy refuses: %s\n", err(e));
  pthread_attr_destroy(&a);
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int detached_seen = -1;

static void* report_detach(void* arg) {
  (void)arg;
  pthread_attr_t a;
  int state = -1;
  pthread_getattr_np(pthread_self(), &a);
  pthread_attr_getdetachstate(&a, &state);
  pthread_attr_destroy(&a);
  pthread_mutex_lock(&lock);
  detached_seen = state == PTHREAD_CREATE_DETACHED;
  pthread_cond_signal(&cond);
  pthread_mutex_unlock(&lock);
  return NULL;
}

static void defaults(void) {
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  printf("setattr_default detached: %s\n", err(pthread_setattr_default_np(&a)));
  pthread_attr_destroy(&a);
  int state = -1;
  pthread_getattr_default_np(&a);
  pthread_attr_getdetachstate(&a, &state);
  pthread_attr_destroy(&a);
  printf("getattr_default detached: %d\n", state == PTHREAD_CREATE_DETACHED);
  pthread_t t;
  pthread_create(&t, NULL, report_detach, NULL);
  pthread_mutex_lock(&lock);
  while (detached_seen == -1) pthread_cond_wait(&cond, &lock);
  pthread_mutex_unlock(&lock);
  printf("a thread without an attribute is detached: %d\n", detached_seen);
  pthread_attr_init(&a);
  pthread_attr_setstack(&a, region, kSize);
  printf("setattr_default with a stack: %s\n", err(pthread_setattr_default_np(&a)));
  pthread_attr_destroy(&a);
}

int main(void) {
  region = aligned_alloc(4096, kSize);
  caller_stacks();
  affinity();
  sched_attr();
  defaults();
  usleep(10000);  // the detached thread's end
  free(region);
  return 0;
}
