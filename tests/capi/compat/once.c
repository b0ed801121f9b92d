/* pthread_once from many threads at once; a statically initialised
 * recursive mutex. Plain <pthread.h>. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

enum { THREADS = 32 };

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int init_calls, saw_init;

static void init(void) {
  struct timespec d = {0, 10000000};
  nanosleep(&d, NULL); /* others arrive and must wait for the end of init */
  ++init_calls;
  printf("init ran\n");
}

static void* worker(void* arg) {
  (void)arg;
  pthread_once(&once, init);
  pthread_mutex_lock(&lock);
  if (init_calls == 1) ++saw_init;
  pthread_mutex_unlock(&lock);
  return NULL;
}

int main(void) {
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; ++i) pthread_create(&t[i], NULL, worker, NULL);
  for (int i = 0; i < THREADS; ++i) pthread_join(t[i], NULL);
  pthread_once(&once, init);
  printf("init calls %d, threads that saw it done %d\n", init_calls, saw_init);
  return 0;
}
