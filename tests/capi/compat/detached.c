/* Detached threads, by attribute and by pthread_detach; main waits on a
 * counter. Plain <pthread.h>. */
#include <limits.h> /* PTHREAD_STACK_MIN */
#include <pthread.h>
#include <stdio.h>

enum { THREADS = 60 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t all_done = PTHREAD_COND_INITIALIZER;
static int done;

static void* worker(void* arg) {
  if (arg) pthread_detach(pthread_self());
  pthread_mutex_lock(&lock);
  if (++done == THREADS) pthread_cond_signal(&all_done);
  pthread_mutex_unlock(&lock);
  return NULL;
}

int main(void) {
  pthread_attr_t a;
  int state = -1;
  pthread_attr_init(&a);
  pthread_attr_getdetachstate(&a, &state);
  printf("default joinable: %d\n", state == PTHREAD_CREATE_JOINABLE);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_attr_getdetachstate(&a, &state);
  printf("now detached: %d\n", state == PTHREAD_CREATE_DETACHED);
  size_t stack = 0;
  printf("setstacksize(PTHREAD_STACK_MIN): %d\n", pthread_attr_setstacksize(&a, PTHREAD_STACK_MIN));
  pthread_attr_getstacksize(&a, &stack);
  printf("stack size is the minimum: %d\n", stack == PTHREAD_STACK_MIN);
  printf("setstacksize(PTHREAD_STACK_MIN - 1): %d\n", pthread_attr_setstacksize(&a, PTHREAD_STACK_MIN - 1) != 0);
  for (int i = 0; i < THREADS; ++i) {
    pthread_t t;
    if (i % 3 == 0) {
      pthread_create(&t, &a, worker, NULL);
    } else if (i % 3 == 1) {
      pthread_create(&t, NULL, worker, (void*)1); /* detaches itself */
    } else {
      pthread_create(&t, NULL, worker, NULL);
      pthread_detach(t);
    }
  }
  pthread_attr_destroy(&a);
  pthread_mutex_lock(&lock);
  while (done < THREADS) pthread_cond_wait(&all_done, &lock);
  pthread_mutex_unlock(&lock);
  printf("all %d detached threads ran\n", done);
  return 0;
}
