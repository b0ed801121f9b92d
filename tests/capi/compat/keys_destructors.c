/* Thread-specific data: values per thread, destructors at exit (also after
 * pthread_exit), repeated while a destructor sets a value again. Plain
 * <pthread.h>. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { THREADS = 8 };

static pthread_key_t key, again_key;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int freed, again_calls, wrong_value;

static void free_value(void* v) {
  pthread_mutex_lock(&lock);
  ++freed;
  if (pthread_getspecific(key) != NULL) ++wrong_value; /* cleared before the call */
  pthread_mutex_unlock(&lock);
  free(v);
}

static void set_again(void* v) {
  pthread_mutex_lock(&lock);
  int n = ++again_calls;
  pthread_mutex_unlock(&lock);
  if (n <= 2) pthread_setspecific(again_key, v); /* one more round, twice */
}

static void* worker(void* arg) {
  long id = (long)arg;
  int* v = malloc(sizeof *v);
  *v = (int)id;
  if (pthread_getspecific(key) != NULL) printf("thread %ld: fresh value not null\n", id);
  pthread_setspecific(key, v);
  sched_yield();
  if (*(int*)pthread_getspecific(key) != id) printf("thread %ld: sees another's value\n", id);
  if (id == 0) pthread_setspecific(again_key, &again_calls);
  if (id == 1) pthread_exit(NULL); /* destructors run after pthread_exit too */
  return NULL;
}

int main(void) {
  pthread_key_create(&key, free_value);
  pthread_key_create(&again_key, set_again);
  pthread_t t[THREADS];
  for (long i = 0; i < THREADS; ++i) pthread_create(&t[i], NULL, worker, (void*)i);
  for (int i = 0; i < THREADS; ++i) pthread_join(t[i], NULL);
  printf("destructors run: %d of %d\n", freed, THREADS);
  printf("value cleared before destructor: %d\n", wrong_value == 0);
  printf("repeating destructor calls: %d\n", again_calls);
  pthread_setspecific(key, "main's");
  printf("main's value: %s\n", (const char*)pthread_getspecific(key));
  pthread_setspecific(key, NULL);
  printf("delete: %d\n", pthread_key_delete(key));
  pthread_key_delete(again_key);
  return 0;
}
