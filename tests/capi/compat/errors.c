/* The errors POSIX specifies, as glibc and loom report them: both builds
 * must print the same. Plain <pthread.h>. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char* name(int e) {
  switch (e) {
    case 0:
      return "0";
    case EBUSY:
      return "EBUSY";
    case EDEADLK:
      return "EDEADLK";
    case EPERM:
      return "EPERM";
    case EINVAL:
      return "EINVAL";
    case ETIMEDOUT:
      return "ETIMEDOUT";
    case EAGAIN:
      return "EAGAIN";
    case ESRCH:
      return "ESRCH";
    case ENOTSUP:
      return "ENOTSUP";
    default:
      return strerror(e);
  }
}

#define SHOW(call) printf("%-58s %s\n", #call, name(call))

static pthread_mutex_t held;

static void* lock_it(void* m) {
  pthread_mutex_lock((pthread_mutex_t*)m);
  return NULL;
}
static void* unlock_it(void* m) { return (void*)(long)pthread_mutex_unlock((pthread_mutex_t*)m); }

static struct timespec soon(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_nsec += 10000000;
  if (t.tv_nsec >= 1000000000) {
    t.tv_nsec -= 1000000000;
    ++t.tv_sec;
  }
  return t;
}

static void* join_self(void* arg) {
  (void)arg;
  return (void*)(long)pthread_join(pthread_self(), NULL);
}

int main(void) {
  pthread_mutexattr_t ma;
  pthread_mutex_t m;
  pthread_t t;
  void* r;
  struct timespec abs;

  pthread_mutexattr_init(&ma);
  SHOW(pthread_mutexattr_settype(&ma, 12345));
  SHOW(pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK));
  pthread_mutex_init(&m, &ma);
  SHOW(pthread_mutex_unlock(&m));
  SHOW(pthread_mutex_lock(&m));
  SHOW(pthread_mutex_lock(&m));
  SHOW(pthread_mutex_trylock(&m));
  abs = soon();
  SHOW(pthread_mutex_timedlock(&m, &abs));
  pthread_create(&t, NULL, unlock_it, &m);
  pthread_join(t, &r);
  printf("%-58s %s\n", "pthread_mutex_unlock(&m) by another thread", name((int)(long)r));
  SHOW(pthread_mutex_destroy(&m));
  SHOW(pthread_mutex_unlock(&m));
  SHOW(pthread_mutex_destroy(&m));

  SHOW(pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE));
  pthread_mutex_init(&m, &ma);
  SHOW(pthread_mutex_lock(&m));
  SHOW(pthread_mutex_trylock(&m));
  SHOW(pthread_mutex_unlock(&m));
  SHOW(pthread_mutex_unlock(&m));
  SHOW(pthread_mutex_unlock(&m));
  pthread_mutex_destroy(&m);
  pthread_mutexattr_destroy(&ma);

  pthread_mutex_init(&held, NULL);
  pthread_create(&t, NULL, lock_it, &held);
  pthread_join(t, NULL);
  SHOW(pthread_mutex_trylock(&held));
  abs = soon();
  SHOW(pthread_mutex_timedlock(&held, &abs));
  abs.tv_nsec = -1;
  SHOW(pthread_mutex_timedlock(&held, &abs));

  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&cm);
  abs = soon();
  SHOW(pthread_cond_timedwait(&c, &cm, &abs));
  pthread_mutex_unlock(&cm);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  SHOW(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC));
  SHOW(pthread_condattr_setclock(&ca, CLOCK_PROCESS_CPUTIME_ID));
  pthread_condattr_destroy(&ca);

  pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
  SHOW(pthread_rwlock_wrlock(&rw));
  SHOW(pthread_rwlock_wrlock(&rw));
  SHOW(pthread_rwlock_rdlock(&rw));
  SHOW(pthread_rwlock_trywrlock(&rw));
  SHOW(pthread_rwlock_unlock(&rw));
  SHOW(pthread_rwlock_rdlock(&rw));
  SHOW(pthread_rwlock_trywrlock(&rw));
  abs = soon();
  SHOW(pthread_rwlock_timedwrlock(&rw, &abs));
  SHOW(pthread_rwlock_unlock(&rw));

  pthread_barrier_t b;
  SHOW(pthread_barrier_init(&b, NULL, 0));
  SHOW(pthread_barrier_init(&b, NULL, 1));
  SHOW(pthread_barrier_wait(&b) == PTHREAD_BARRIER_SERIAL_THREAD ? 0 : -1);
  SHOW(pthread_barrier_destroy(&b));

  pthread_attr_t a;
  pthread_attr_init(&a);
  SHOW(pthread_attr_setdetachstate(&a, 12345));
  SHOW(pthread_attr_setstacksize(&a, 1));
  pthread_attr_destroy(&a);

  pthread_create(&t, NULL, join_self, NULL);
  pthread_join(t, &r);
  printf("%-58s %s\n", "pthread_join(pthread_self(), NULL)", name((int)(long)r));

  pthread_key_t k;
  pthread_key_create(&k, NULL);
  SHOW(pthread_key_delete(k));

  pthread_spinlock_t s;
  pthread_spin_init(&s, PTHREAD_PROCESS_PRIVATE);
  SHOW(pthread_spin_trylock(&s));
  SHOW(pthread_spin_trylock(&s));
  SHOW(pthread_spin_unlock(&s));
  SHOW(pthread_spin_destroy(&s));
  return 0;
}
