/* Unnamed semaphores: ping-pong in strict alternation, counts, timed and
 * try waits with errno. Plain <semaphore.h>. */
#include <errno.h>
#include <limits.h> /* SEM_VALUE_MAX */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static sem_t ping, pong;

static void* ponger(void* arg) {
  (void)arg;
  for (int i = 0; i < 5; ++i) {
    sem_wait(&ping);
    printf("pong %d\n", i);
    sem_post(&pong);
  }
  return NULL;
}

static const char* name(int e) {
  return e == EAGAIN ? "EAGAIN" : e == ETIMEDOUT ? "ETIMEDOUT" : e == EINVAL ? "EINVAL" : strerror(e);
}

int main(void) {
  sem_init(&ping, 0, 0);
  sem_init(&pong, 0, 0);
  pthread_t t;
  pthread_create(&t, NULL, ponger, NULL);
  for (int i = 0; i < 5; ++i) {
    printf("ping %d\n", i);
    sem_post(&ping);
    sem_wait(&pong);
  }
  pthread_join(t, NULL);

  sem_t s;
  int v = -1;
  sem_init(&s, 0, 3);
  sem_getvalue(&s, &v);
  printf("value %d\n", v);
  while (sem_trywait(&s) == 0) {
  }
  printf("trywait on 0: %s\n", name(errno));
  struct timespec abs;
  clock_gettime(CLOCK_REALTIME, &abs);
  abs.tv_nsec += 20000000;
  if (abs.tv_nsec >= 1000000000) {
    abs.tv_nsec -= 1000000000;
    ++abs.tv_sec;
  }
  int r = sem_timedwait(&s, &abs);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  int late_enough = now.tv_sec > abs.tv_sec || (now.tv_sec == abs.tv_sec && now.tv_nsec >= abs.tv_nsec);
  printf("timedwait: %d %s, not early: %d\n", r, name(errno), late_enough);
  abs.tv_nsec = 1000000000;
  r = sem_timedwait(&s, &abs);
  printf("timedwait with a bad time: %d %s\n", r, name(errno));
  sem_post(&s);
  sem_getvalue(&s, &v);
  printf("value %d\n", v);
  printf("init above SEM_VALUE_MAX: %d %s\n", sem_init(&s, 0, (unsigned)SEM_VALUE_MAX + 1u), name(errno));
  sem_destroy(&s);
  sem_destroy(&ping);
  sem_destroy(&pong);
  return 0;
}
