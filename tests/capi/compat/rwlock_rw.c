/* Readers check an invariant that writers keep; static initialiser; try
 * and timed forms. Plain <pthread.h>. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

enum { READERS = 6, WRITERS = 3, ROUNDS = 2000 };

static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static long a, b, reads, broken;
static pthread_mutex_t stats = PTHREAD_MUTEX_INITIALIZER;

static void* reader(void* arg) {
  (void)arg;
  for (int i = 0; i < ROUNDS; ++i) {
    pthread_rwlock_rdlock(&rw);
    long x = a, y = b;
    pthread_rwlock_unlock(&rw);
    pthread_mutex_lock(&stats);
    ++reads;
    if (x != y) ++broken;
    pthread_mutex_unlock(&stats);
  }
  return NULL;
}

static void* writer(void* arg) {
  (void)arg;
  for (int i = 0; i < ROUNDS; ++i) {
    pthread_rwlock_wrlock(&rw);
    ++a;
    sched_yield();
    ++b;
    pthread_rwlock_unlock(&rw);
  }
  return NULL;
}

static void* try_both(void* arg) {
  (void)arg;
  printf("tryrdlock while written: %s\n", pthread_rwlock_tryrdlock(&rw) == EBUSY ? "EBUSY" : "?");
  printf("trywrlock while written: %s\n", pthread_rwlock_trywrlock(&rw) == EBUSY ? "EBUSY" : "?");
  struct timespec abs;
  clock_gettime(CLOCK_REALTIME, &abs);
  abs.tv_nsec += 20000000;
  if (abs.tv_nsec >= 1000000000) {
    abs.tv_nsec -= 1000000000;
    ++abs.tv_sec;
  }
  printf("timedwrlock while written: %s\n", pthread_rwlock_timedwrlock(&rw, &abs) == ETIMEDOUT ? "ETIMEDOUT" : "?");
  return NULL;
}

int main(void) {
  pthread_t t[READERS + WRITERS];
  for (int i = 0; i < READERS + WRITERS; ++i) pthread_create(&t[i], NULL, i < READERS ? reader : writer, NULL);
  for (int i = 0; i < READERS + WRITERS; ++i) pthread_join(t[i], NULL);
  printf("writes %ld %ld, reads %ld, torn reads %ld\n", a, b, reads, broken);
  pthread_rwlock_wrlock(&rw);
  pthread_t x;
  pthread_create(&x, NULL, try_both, NULL);
  pthread_join(x, NULL);
  pthread_rwlock_unlock(&rw);
  /* two readers at once */
  pthread_rwlock_rdlock(&rw);
  printf("second reader: %d\n", pthread_rwlock_tryrdlock(&rw));
  pthread_rwlock_unlock(&rw);
  pthread_rwlock_unlock(&rw);
  printf("destroy: %d\n", pthread_rwlock_destroy(&rw));
  return 0;
}
