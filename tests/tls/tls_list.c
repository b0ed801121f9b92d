/* tls_list — threads made and ended while glibc's own code holds its lock
 * of the lists of threads, which each fibre's block joins and leaves
 * (runtime/sched/tls.cpp, "On glibc's list"): a SIGEV_THREAD timer (glibc
 * makes a kernel thread for each expiry) every 0.2 ms, and a thread that
 * calls setresuid and setresgid in a loop (glibc's setxid walks its lists
 * under that lock), while 3 threads create and join. An outside review's
 * programs: with the lock's futex waits in loom's parking lot, which
 * glibc's unlock never wakes, creation stopped for good (here the churners
 * never join and the alarm ends the run). Output: what ran, then "ok";
 * three.sh compares it with glibc's. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;
static atomic_long made, ticks, setxids;

static void* leaf(void* a) { return a; }
static void* churner(void* a) {
  (void)a;
  while (!atomic_load(&stop)) {
    pthread_t t;
    if (pthread_create(&t, NULL, leaf, NULL) == 0) {
      pthread_join(t, NULL);
      atomic_fetch_add(&made, 1);
    }
  }
  return NULL;
}
static void* setxid(void* a) {
  (void)a;
  while (!atomic_load(&stop)) {
    if (setresuid(-1, -1, -1) == 0 && setresgid(-1, -1, -1) == 0) atomic_fetch_add(&setxids, 1);
    usleep(100);
  }
  return NULL;
}
static void tick(union sigval v) {
  (void)v;
  atomic_fetch_add(&ticks, 1);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  alarm(60);
  timer_t tm;
  struct sigevent se = {0};
  se.sigev_notify = SIGEV_THREAD;
  se.sigev_notify_function = tick;
  if (timer_create(CLOCK_MONOTONIC, &se, &tm)) {
    perror("timer_create");
    return 2;
  }
  struct itimerspec its = {{0, 200000}, {0, 200000}};
  timer_settime(tm, 0, &its, NULL);
  pthread_t t[4];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, churner, NULL);
  pthread_create(&t[3], NULL, setxid, NULL);
  usleep(2000000);
  atomic_store(&stop, 1);  // a churner stuck for good never joins: the alarm ends the run
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  timer_delete(tm);
  printf("threads made %s, timer ticked %s, setxid calls %s\nok\n", atomic_load(&made) ? "yes" : "NO",
         atomic_load(&ticks) ? "yes" : "NO", atomic_load(&setxids) ? "yes" : "NO");
  return 0;
}
