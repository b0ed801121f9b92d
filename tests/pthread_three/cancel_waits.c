// Cancellation of a thread waiting in pthread_join (and its timed forms),
// and in pthread_cond_wait with a priority-inheritance mutex (loom's
// condvar with a mutex of capi/pthread/shared.cpp's): the request ends the
// wait, as glibc's. A cancelled joiner leaves its target joinable; a
// cancelled condvar waiter runs its handler with the mutex held again.
// And close: a cancellation point that acts before the call (the
// descriptor stays open).
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

static sem_t go;
static pthread_mutex_t pi_mutex;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int waiting;

static void say(void* s) { printf("%s", (const char*)s); fflush(stdout); }

static void* target(void* arg) {
  (void)arg;
  while (sem_wait(&go) != 0) {
  }
  return (void*)42;
}

static void* joiner(void* arg) {
  pthread_t t = *(pthread_t*)arg;
  int how = ((int*)arg)[sizeof(pthread_t) / sizeof(int)];
  void* r;
  pthread_cleanup_push(say, "  joiner: handler\n");
  if (how == 0) {
    pthread_join(t, &r);
  } else {
    struct timespec ts;
    clock_gettime(how == 1 ? CLOCK_REALTIME : CLOCK_MONOTONIC, &ts);
    ts.tv_sec += 3600;
    if (how == 1)
      pthread_timedjoin_np(t, &r, &ts);
    else
      pthread_clockjoin_np(t, &r, CLOCK_MONOTONIC, &ts);
  }
  say("  joiner: join returned\n");
  pthread_cleanup_pop(0);
  return NULL;
}

static void unlock_handler(void* m) {
  // The mutex is held again (the wait took it back before acting).
  say("  waiter: handler, unlocking\n");
  if (pthread_mutex_unlock((pthread_mutex_t*)m) != 0) say("  waiter: not held\n");
}

static void* cond_waiter(void* arg) {
  (void)arg;
  pthread_mutex_lock(&pi_mutex);
  pthread_cleanup_push(unlock_handler, &pi_mutex);
  waiting = 1;
  for (;;) pthread_cond_wait(&cond, &pi_mutex);
  pthread_cleanup_pop(0);
  return NULL;
}

static void join_case(const char* name, int how) {
  printf("%s\n", name);
  fflush(stdout);
  pthread_t t, j;
  union {
    pthread_t t;
    int i[sizeof(pthread_t) / sizeof(int) + 1];
  } arg;
  pthread_create(&t, NULL, target, NULL);
  arg.t = t;
  arg.i[sizeof(pthread_t) / sizeof(int)] = how;
  pthread_create(&j, NULL, joiner, &arg);
  struct timespec d = {0, 100 * 1000 * 1000};
  nanosleep(&d, NULL);  // (likely waiting by now; the output is the same either way)
  pthread_cancel(j);
  void* r;
  pthread_join(j, &r);
  printf("  joiner joined: %s\n", r == PTHREAD_CANCELED ? "PTHREAD_CANCELED" : "a value");
  sem_post(&go);
  int e = pthread_join(t, &r);
  printf("  target still joinable: %s, %ld\n", e == 0 ? "yes" : "no", (long)(intptr_t)r);
  fflush(stdout);
}

static int close_fd;
static sem_t close_go;

static void* closer(void* arg) {
  (void)arg;
  pthread_cleanup_push(say, "  closer: handler\n");
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
  while (sem_wait(&close_go) != 0) {  // (a cancellation point: disabled around it)
  }
  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);  // (deferred: does not act)
  close(close_fd);
  say("  closer: close returned\n");
  pthread_cleanup_pop(0);
  return NULL;
}

static void close_case(void) {
  printf("cancelled at close\n");
  fflush(stdout);
  close_fd = open("/dev/null", O_RDONLY);
  sem_init(&close_go, 0, 0);
  pthread_t c;
  pthread_create(&c, NULL, closer, NULL);
  pthread_cancel(c);  // pending when it reaches close
  sem_post(&close_go);
  void* r;
  pthread_join(c, &r);
  printf("  closer joined: %s\n", r == PTHREAD_CANCELED ? "PTHREAD_CANCELED" : "a value");
  printf("  descriptor still open: %s\n", fcntl(close_fd, F_GETFD) != -1 ? "yes" : "no");
}

int main(void) {
  sem_init(&go, 0, 0);
  join_case("cancelled in pthread_join", 0);
  join_case("cancelled in pthread_timedjoin_np", 1);
  join_case("cancelled in pthread_clockjoin_np", 2);

  printf("cancelled in pthread_cond_wait with a PI mutex\n");
  fflush(stdout);
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  if (pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT) != 0) return 1;
  pthread_mutex_init(&pi_mutex, &a);
  pthread_t w;
  pthread_create(&w, NULL, cond_waiter, NULL);
  for (;;) {  // until it waits (it released the mutex)
    pthread_mutex_lock(&pi_mutex);
    int ready = waiting;
    pthread_mutex_unlock(&pi_mutex);
    if (ready) break;
    sched_yield();
  }
  pthread_cancel(w);
  void* r;
  pthread_join(w, &r);
  printf("  waiter joined: %s\n", r == PTHREAD_CANCELED ? "PTHREAD_CANCELED" : "a value");
  printf("  mutex free again: %s\n", pthread_mutex_trylock(&pi_mutex) == 0 ? "yes" : "no");
  close_case();
  return 0;
}
