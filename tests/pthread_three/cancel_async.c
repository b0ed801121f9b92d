// cancel_async.c — the asynchronous cancellation type in waits that are no
// cancellation point (issue 32); three.sh compares each case's output with
// the plain glibc run's. One case per run (argv[1]); an alarm bounds each.
//   mutex     a waiter of the asynchronous type in pthread_mutex_lock, then
//             in pthread_mutex_timedlock, cancelled while it waits, for
//             each kind (normal, recursive, errorcheck, adaptive): it acts
//             there and its cleanup runs; a second waiter behind it gets
//             the mutex; the mutex is then free and can be destroyed
//   condwait  a waiter of the asynchronous type in pthread_cond_wait,
//             cancelled while the canceller holds the mutex: its cleanup
//             runs only once the mutex is taken back (it unlocks it), never
//             meanwhile; the mutex can be destroyed afterwards
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t m;
static volatile int started, cleaned;
static int timed;

static void count_cleanup(void* a) {
  (void)a;
  cleaned++;
}

static void* async_waiter(void* a) {
  (void)a;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  pthread_cleanup_push(count_cleanup, NULL);
  started = 1;
  if (!timed) {
    pthread_mutex_lock(&m);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    pthread_mutex_timedlock(&m, &ts);
  }
  pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, NULL);
  pthread_mutex_unlock(&m);
  pthread_cleanup_pop(0);
  return (void*)1;
}

static void* deferred_waiter(void* a) {
  (void)a;
  started = 1;
  int e = pthread_mutex_lock(&m);
  pthread_mutex_unlock(&m);
  return (void*)(long)(e == 0 ? 2 : 3);
}

static void wait_started(void) {
  while (!started) usleep(1000);
  usleep(50 * 1000);  // (into its wait)
}

static void mutex_case(int type, const char* name) {
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_settype(&ma, type);
  pthread_mutex_init(&m, &ma);
  cleaned = 0;
  pthread_mutex_lock(&m);
  pthread_t t, u;
  void* r;
  started = 0;
  pthread_create(&t, NULL, async_waiter, NULL);
  wait_started();
  started = 0;
  pthread_create(&u, NULL, deferred_waiter, NULL);
  wait_started();
  pthread_cancel(t);
  usleep(100 * 1000);
  pthread_mutex_unlock(&m);
  pthread_join(t, &r);
  printf("mutex: %s %s: async waiter %s, cleanups %d;", name, timed ? "timedlock" : "lock",
         r == PTHREAD_CANCELED ? "cancelled" : "returned", cleaned);
  pthread_join(u, &r);
  printf(" second waiter %s;", r == (void*)2 ? "got it" : "failed");
  int e = pthread_mutex_trylock(&m);
  int e2 = pthread_mutex_unlock(&m);
  printf(" trylock %d unlock %d destroy %d\n", e, e2, pthread_mutex_destroy(&m));
}

static int mutex(void) {
  static const struct {
    int type;
    const char* name;
  } kinds[] = {{PTHREAD_MUTEX_NORMAL, "normal"},
               {PTHREAD_MUTEX_RECURSIVE, "recursive"},
               {PTHREAD_MUTEX_ERRORCHECK, "errorcheck"},
               {PTHREAD_MUTEX_ADAPTIVE_NP, "adaptive"}};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    for (timed = 0; timed < 2; timed++) mutex_case(kinds[i].type, kinds[i].name);
  return 0;
}

static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static volatile int waiting;

static void unlock_cleanup(void* a) {
  (void)a;
  cleaned = 1;
  pthread_mutex_unlock(&m);
}

static void* cond_waiter(void* a) {
  (void)a;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  pthread_mutex_lock(&m);
  pthread_cleanup_push(unlock_cleanup, NULL);
  waiting = 1;
  for (;;) pthread_cond_wait(&c, &m);
  pthread_cleanup_pop(0);
  return NULL;
}

static int condwait(void) {
  pthread_mutex_init(&m, NULL);
  cleaned = 0;
  pthread_t t;
  pthread_create(&t, NULL, cond_waiter, NULL);
  while (!waiting) usleep(1000);
  pthread_mutex_lock(&m);
  pthread_cancel(t);
  usleep(200 * 1000);
  int busy = pthread_mutex_trylock(&m);
  printf("condwait: while main holds the mutex: cleanup ran %d, trylock %d\n", cleaned, busy);
  pthread_mutex_unlock(&m);
  void* r;
  pthread_join(t, &r);
  printf("condwait: cancelled %d, cleanup ran %d, destroy %d\n", r == PTHREAD_CANCELED, cleaned,
         pthread_mutex_destroy(&m));
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  alarm(60);
  const char* c = argc > 1 ? argv[1] : "";
  if (strcmp(c, "mutex") == 0) return mutex();
  if (strcmp(c, "condwait") == 0) return condwait();
  fprintf(stderr, "usage: cancel_async mutex|condwait\n");
  return 2;
}
