/* locks.c — the fibre listing of a pthread program stuck on its locks
 * (issue 26), printed through loom_dump_fibres (found with dlsym: the
 * program knows nothing of loom). Every wait is timed (3 s), so the
 * program ends; the listing is made while all of them wait:
 *   left, right   a lock cycle on two normal mutexes: each is listed
 *                 blocked on a mutex held by the other, by name
 *   errchk        an error-checking mutex main holds: held by "main"
 *   cv-waiter     a condition variable
 *   rw-writer     a rwlock main holds for reading
 *   sem-waiter    a semaphore
 *   bar-waiter    a barrier of 2 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t c = PTHREAD_MUTEX_INITIALIZER, e;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_barrier_t bar, both;
static sem_t sem;
static sem_t holding;

static struct timespec in_3s(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += 3;
  return t;
}

static void cross(pthread_mutex_t* first, pthread_mutex_t* second) {
  pthread_mutex_lock(first);
  pthread_barrier_wait(&both); /* each holds its first before it asks for the second */
  sem_post(&holding);
  struct timespec t = in_3s();
  if (pthread_mutex_timedlock(second, &t) == 0) pthread_mutex_unlock(second);
  pthread_mutex_unlock(first);
}

static void* left(void* x) {
  pthread_setname_np(pthread_self(), "left");
  cross(&a, &b);
  return x;
}
static void* right(void* x) {
  pthread_setname_np(pthread_self(), "right");
  cross(&b, &a);
  return x;
}
static void* errchk(void* x) {
  pthread_setname_np(pthread_self(), "errchk");
  struct timespec t = in_3s();
  if (pthread_mutex_timedlock(&e, &t) == 0) pthread_mutex_unlock(&e);
  return x;
}
static void* cv_waiter(void* x) {
  pthread_setname_np(pthread_self(), "cv-waiter");
  pthread_mutex_lock(&c);
  struct timespec t = in_3s();
  pthread_cond_timedwait(&cv, &c, &t);
  pthread_mutex_unlock(&c);
  return x;
}
static void* rw_writer(void* x) {
  pthread_setname_np(pthread_self(), "rw-writer");
  struct timespec t = in_3s();
  if (pthread_rwlock_timedwrlock(&rw, &t) == 0) pthread_rwlock_unlock(&rw);
  return x;
}
static void* sem_waiter(void* x) {
  pthread_setname_np(pthread_self(), "sem-waiter");
  struct timespec t = in_3s();
  sem_timedwait(&sem, &t);
  return x;
}
static void* bar_waiter(void* x) {
  pthread_setname_np(pthread_self(), "bar-waiter");
  pthread_barrier_wait(&bar);
  return x;
}

int main(void) {
  void (*dump)(FILE*) = (void (*)(FILE*))dlsym(RTLD_DEFAULT, "loom_dump_fibres");
  if (!dump) {
    printf("locks: not running on loom\n");
    return 2;
  }
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
  pthread_mutex_init(&e, &ma);
  pthread_barrier_init(&bar, NULL, 2);
  pthread_barrier_init(&both, NULL, 2);
  sem_init(&sem, 0, 0);
  sem_init(&holding, 0, 0);
  pthread_mutex_lock(&e);
  pthread_rwlock_rdlock(&rw);
  void* (*fns[])(void*) = {left, right, errchk, cv_waiter, rw_writer, sem_waiter, bar_waiter};
  enum { n = sizeof fns / sizeof fns[0] };
  pthread_t t[n];
  for (int i = 0; i < n; ++i)
    if (pthread_create(&t[i], NULL, fns[i], NULL) != 0) return 1;
  sem_wait(&holding);
  sem_wait(&holding);
  usleep(300 * 1000);  /* all of them parked by now */
  dump(stdout);
  fflush(stdout);
  pthread_barrier_wait(&bar);
  pthread_mutex_unlock(&e);
  pthread_rwlock_unlock(&rw);
  for (int i = 0; i < n; ++i) pthread_join(t[i], NULL);
  printf("locks: done\n");
  return 0;
}
