/* Threads in lock-step phases: each adds to a shared array, a barrier ends
 * the phase, and the serial thread reports it. Plain <pthread.h>. */
#include <pthread.h>
#include <stdio.h>

enum { THREADS = 5, PHASES = 12 };

static pthread_barrier_t barrier;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long phase_sum[PHASES];
static int serial_count[PHASES];

static void* worker(void* arg) {
  long id = (long)arg;
  for (int p = 0; p < PHASES; ++p) {
    pthread_mutex_lock(&lock);
    phase_sum[p] += (id + 1) * (p + 1);
    pthread_mutex_unlock(&lock);
    int r = pthread_barrier_wait(&barrier);
    if (r == PTHREAD_BARRIER_SERIAL_THREAD) {
      ++serial_count[p];
      printf("phase %d: sum %ld\n", p, phase_sum[p]); /* every thread has added */
    } else if (r != 0) {
      printf("barrier_wait failed: %d\n", r);
    }
    pthread_barrier_wait(&barrier); /* the report is out before the next phase */
  }
  return NULL;
}

int main(void) {
  pthread_barrierattr_t a;
  int shared = -1;
  pthread_barrierattr_init(&a);
  pthread_barrierattr_getpshared(&a, &shared);
  printf("pshared private: %d\n", shared == PTHREAD_PROCESS_PRIVATE);
  printf("count 0: %d\n", pthread_barrier_init(&barrier, &a, 0));
  pthread_barrier_init(&barrier, &a, THREADS);
  pthread_barrierattr_destroy(&a);
  pthread_t t[THREADS];
  for (long i = 0; i < THREADS; ++i) pthread_create(&t[i], NULL, worker, (void*)i);
  for (int i = 0; i < THREADS; ++i) pthread_join(t[i], NULL);
  int ok = 1;
  for (int p = 0; p < PHASES; ++p) ok &= serial_count[p] == 1;
  printf("one serial thread per phase: %d\n", ok);
  pthread_barrier_destroy(&barrier);
  return 0;
}
