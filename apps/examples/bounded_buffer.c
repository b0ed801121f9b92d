/* bounded_buffer.c — producers and consumers on a bounded buffer, in plain
 * POSIX threads: one mutex, two condition variables.
 *
 * Built twice (apps/examples/CMakeLists.txt): against the system's pthreads
 * and, unchanged, with -include loom/pthread.h. tests/capi runs both and
 * compares their output. */
#include <pthread.h>
#include <stdio.h>

enum { PRODUCERS = 4, CONSUMERS = 3, ITEMS = 5000, SLOTS = 8 };

static int buffer[SLOTS];
static int head, count, producers_left = PRODUCERS;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
static long consumed_by_producer[PRODUCERS];

static void* produce(void* arg) {
  int id = (int)(long)arg;
  for (int i = 0; i < ITEMS; ++i) {
    pthread_mutex_lock(&lock);
    while (count == SLOTS) pthread_cond_wait(&not_full, &lock);
    buffer[(head + count) % SLOTS] = id * ITEMS + i;
    ++count;
    pthread_cond_signal(&not_empty);
    pthread_mutex_unlock(&lock);
  }
  pthread_mutex_lock(&lock);
  --producers_left;
  pthread_cond_broadcast(&not_empty);
  pthread_mutex_unlock(&lock);
  return NULL;
}

static void* consume(void* arg) {
  long* sum = (long*)arg;
  for (;;) {
    pthread_mutex_lock(&lock);
    while (count == 0 && producers_left > 0) pthread_cond_wait(&not_empty, &lock);
    if (count == 0) {
      pthread_mutex_unlock(&lock);
      return NULL;
    }
    int v = buffer[head];
    head = (head + 1) % SLOTS;
    --count;
    ++consumed_by_producer[v / ITEMS];
    pthread_cond_signal(&not_full);
    pthread_mutex_unlock(&lock);
    *sum += v;
  }
}

int main(void) {
  pthread_t p[PRODUCERS], c[CONSUMERS];
  long sums[CONSUMERS] = {0};
  for (int i = 0; i < CONSUMERS; ++i) pthread_create(&c[i], NULL, consume, &sums[i]);
  for (int i = 0; i < PRODUCERS; ++i) pthread_create(&p[i], NULL, produce, (void*)(long)i);
  for (int i = 0; i < PRODUCERS; ++i) pthread_join(p[i], NULL);
  long total = 0;
  for (int i = 0; i < CONSUMERS; ++i) {
    pthread_join(c[i], NULL);
    total += sums[i];
  }
  for (int i = 0; i < PRODUCERS; ++i) printf("producer %d: %ld items consumed\n", i, consumed_by_producer[i]);
  long n = (long)PRODUCERS * ITEMS;
  printf("sum %ld (expected %ld)\n", total, n * (n - 1) / 2);
  pthread_mutex_destroy(&lock);
  pthread_cond_destroy(&not_full);
  pthread_cond_destroy(&not_empty);
  return 0;
}
