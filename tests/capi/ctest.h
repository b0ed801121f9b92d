/* tests/capi/ctest.h — a few checks for the C API's tests (C11).
 *
 * A failed check prints where and what, then aborts: the test stops at the
 * first failure. alarm() turns a hang into a failure. */
#ifndef LOOM_TESTS_CTEST_H
#define LOOM_TESTS_CTEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#define CHECK_EQ(a, b)                                                                                       \
  do {                                                                                                       \
    long long a_ = (long long)(a), b_ = (long long)(b);                                                      \
    if (a_ != b_) {                                                                                          \
      fprintf(stderr, "%s:%d: check failed: %s == %s (%lld vs %lld)\n", __FILE__, __LINE__, #a, #b, a_, b_); \
      abort();                                                                                               \
    }                                                                                                        \
  } while (0)

#define RUN(test)                            \
  do {                                       \
    fprintf(stderr, "[ RUN  ] %s\n", #test); \
    test();                                  \
    fprintf(stderr, "[   OK ] %s\n", #test); \
  } while (0)

/* Sanitizer runs set LOOM_TEST_SCALE to divide iteration counts. */
static inline long scaled(long n) {
  const char* s = getenv("LOOM_TEST_SCALE");
  long k = s ? atol(s) : 1;
  long r = k > 1 ? n / k : n;
  return r > 0 ? r : 1;
}

static inline int64_t now_on(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline struct timespec ts_of(int64_t ns) {
  struct timespec t;
  t.tv_sec = (time_t)(ns / 1000000000);
  t.tv_nsec = (long)(ns % 1000000000);
  return t;
}

/* An absolute time `ns` from now on clock c. */
static inline struct timespec after(clockid_t c, int64_t ns) { return ts_of(now_on(c) + ns); }

static inline int64_t ts_ns(const struct timespec* t) { return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec; }

/* Checks a timed call that timed out returned at or after its deadline. */
#define CHECK_NOT_EARLY(clock, abs) CHECK(now_on(clock) >= ts_ns(&(abs)))

#define MS (1000000LL)

#endif
