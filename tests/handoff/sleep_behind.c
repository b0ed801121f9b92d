/* sleep_behind.c sleep THREADS — a sleep queued behind threads that never
 * switch (issue 31, and an outside review of 2026-12-07): 40 rounds, each
 * of THREADS threads that loop on a 20 µs nanosleep made with the
 * instruction itself (loom sees nothing: each holds its kernel thread,
 * waking every 20 µs) until a flag is set; main sleeps 0-300 µs with
 * glibc's nanosleep (a timer of loom's under the preload), sets the flag
 * and joins them.
 *
 * Under loom the spinners hold every processor and the spares standing in;
 * main's timer must still fire. Its keeping passes from sleeper to sleeper
 * by wakes, and a processor woken so may run a spinner instead and be held
 * for good, while the one left asleep keeps no deadline: before the
 * monitor's look for a due timer that no sleeper keeps, main slept for
 * ever in 3 runs of 5 (two processors, four threads). On glibc: done at
 * once. Prints "ok ROUNDS"; exit status 0. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>

#include "raw_syscall.h"

enum { kRounds = 40, kMaxThreads = 16 };
static atomic_int stop;

static void* spin(void* arg) {
  (void)arg;
  struct timespec t = {0, 20000};
  while (!atomic_load(&stop)) raw_syscall4(SYS_nanosleep, (long)&t, 0, 0, 0);
  return NULL;
}

int main(int argc, char** argv) {
  int n = argc == 3 && strcmp(argv[1], "sleep") == 0 ? atoi(argv[2]) : 0;
  if (n < 1 || n > kMaxThreads) {
    fprintf(stderr, "usage: sleep_behind sleep THREADS (1..%d)\n", kMaxThreads);
    return 2;
  }
  srand(1);
  for (int r = 0; r < kRounds; r++) {
    pthread_t t[kMaxThreads];
    atomic_store(&stop, 0);
    for (int i = 0; i < n; i++)
      if (pthread_create(&t[i], NULL, spin, NULL) != 0) {
        fprintf(stderr, "sleep_behind: pthread_create failed\n");
        return 1;
      }
    struct timespec d = {0, (rand() % 300) * 1000L};
    nanosleep(&d, NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  }
  printf("ok %d\n", kRounds);
  return 0;
}
