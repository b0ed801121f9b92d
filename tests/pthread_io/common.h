/* tests/pthread_io/common.h — what the pthread_io programs share. They are
 * plain pthread programs (built once against glibc, run natively, linked
 * and preloaded), so this is C with no loom header. */
#pragma once

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void fail(const char* what) {
  perror(what);
  exit(1);
}

/* A ticker thread (pthread_create(&t, NULL, ticker, (void*)PERIOD_US)):
 * counts `ticks` every PERIOD_US microseconds until `ticker_stop` is set. A
 * test proves that a call waited as a fibre, not on its processor, by
 * seeing it tick meanwhile. */
static atomic_long ticks;
static atomic_int ticker_stop;

static void* ticker(void* period_us) {
  while (!atomic_load(&ticker_stop)) {
    atomic_fetch_add(&ticks, 1);
    usleep((useconds_t)(uintptr_t)period_us);
  }
  return NULL;
}

/* The probe on stderr: loom's count of waits that blocked a fibre, when
 * libloom is in the process (dlsym, so the glibc build needs no loom). */
static void print_loom_probe(void) {
  void (*stats)(uint64_t*) = (void (*)(uint64_t*))dlsym(RTLD_DEFAULT, "loom_io_stats");
  if (stats) {
    uint64_t s[4];
    stats(s);
    fprintf(stderr, "probe: loom blocks=%llu\n", (unsigned long long)s[1]);
  }
}
