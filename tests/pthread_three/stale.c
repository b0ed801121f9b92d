/* stale.c — a pthread_t whose thread was joined, or was detached and has
 * finished, is stale: pthread_join and pthread_detach give ESRCH (glibc's
 * error; on glibc itself such a call is undefined, so this program is run
 * only on loom: through the header, preloaded into its glibc build, and
 * linked with -lloom-pthread; stale.expect is its output). A new thread
 * never gets an old thread's handle while that is remembered. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_EQ(a, b)                                                                             \
  do {                                                                                             \
    long a_ = (long)(a), b_ = (long)(b);                                                           \
    if (a_ != b_) {                                                                                \
      printf("FAILED line %d: %s = %ld (%s), expected %ld\n", __LINE__, #a, a_, strerror(a_), b_); \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static void* ret(void* a) { return a; }

static volatile int go, finished_body;
static void* body(void* a) {
  while (!go) sched_yield();
  finished_body = 1;
  return a;
}

static void* join_self(void* a) {
  (void)a;
  return (void*)(long)pthread_join(pthread_self(), NULL);
}

/* Whether t still names a thread: pthread_getattr_np gives ESRCH once the
 * handle is stale (loom; the header route has no pthread_kill). */
static int alive(pthread_t t) {
  pthread_attr_t a;
  int e = pthread_getattr_np(t, &a);
  if (e == 0) pthread_attr_destroy(&a);
  return e == 0;
}

int main(void) {
  pthread_t t;
  void* r = NULL;

  /* Joined: a second join, a detach, a getattr are ESRCH. */
  CHECK_EQ(pthread_create(&t, NULL, ret, (void*)7), 0);
  CHECK_EQ(pthread_join(t, &r), 0);
  CHECK_EQ((long)r, 7);
  CHECK_EQ(pthread_join(t, &r), ESRCH);
  CHECK_EQ(pthread_detach(t), ESRCH);
  CHECK_EQ(pthread_tryjoin_np(t, &r), ESRCH);
  CHECK_EQ(alive(t), 0);
  printf("joined: join, detach, tryjoin give ESRCH\n");

  /* Detached, then finished. */
  CHECK_EQ(pthread_create(&t, NULL, body, NULL), 0);
  CHECK_EQ(pthread_detach(t), 0);
  CHECK_EQ(pthread_detach(t), EINVAL); /* still alive (waiting for go), already detached */
  go = 1;
  while (!finished_body) sched_yield();
  for (int i = 0; i < 100000 && alive(t); ++i) sched_yield();
  CHECK_EQ(alive(t), 0);
  CHECK_EQ(pthread_join(t, &r), ESRCH);
  CHECK_EQ(pthread_detach(t), ESRCH);
  printf("detached and finished: join, detach give ESRCH\n");

  /* Created detached: the same once it has finished. */
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  finished_body = 0;
  CHECK_EQ(pthread_create(&t, &a, body, NULL), 0);
  pthread_attr_destroy(&a);
  while (!finished_body) sched_yield();
  for (int i = 0; i < 100000 && alive(t); ++i) sched_yield();
  CHECK_EQ(pthread_join(t, &r), ESRCH);
  printf("created detached, finished: join gives ESRCH\n");

  /* Handles are not reused while remembered: 1000 threads one after
   * another (each record's slot is reused) have 1000 distinct handles. */
  enum { kN = 1000 };
  static pthread_t seen[kN];
  for (int i = 0; i < kN; ++i) {
    CHECK_EQ(pthread_create(&seen[i], NULL, ret, NULL), 0);
    CHECK_EQ(pthread_join(seen[i], NULL), 0);
    for (int k = 0; k < i; ++k) CHECK_EQ(pthread_equal(seen[k], seen[i]), 0);
  }
  for (int i = 0; i < kN; ++i) CHECK_EQ(pthread_join(seen[i], NULL), ESRCH);
  printf("%d threads in turn: %d distinct handles, all stale after\n", kN, kN);

  /* A thread joining itself: EDEADLK. */
  CHECK_EQ(pthread_create(&t, NULL, join_self, NULL), 0);
  CHECK_EQ(pthread_join(t, &r), 0);
  CHECK_EQ((long)r, EDEADLK);
  printf("joining oneself: EDEADLK\n");
  return 0;
}
