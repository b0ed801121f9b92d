/* main ends with pthread_exit: its cleanup handler and key destructor run,
 * the other threads (joinable and detached) finish, and then the process
 * exits with status 0, running atexit handlers. Plain <pthread.h>. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { THREADS = 4 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int finished;
static pthread_key_t key;

static void report(void) { printf("at exit: %d of %d threads finished\n", finished, THREADS); }

static void say(void* s) { printf("%s\n", (const char*)s); }

static void* worker(void* arg) {
  struct timespec d = {0, 10000000L * (long)arg};
  nanosleep(&d, NULL);
  pthread_mutex_lock(&lock);
  ++finished;
  pthread_mutex_unlock(&lock);
  return NULL;
}

int main(void) {
  atexit(report);
  pthread_key_create(&key, say);
  pthread_setspecific(key, "main's key destructor");
  pthread_attr_t detached;
  pthread_attr_init(&detached);
  pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
  for (long i = 0; i < THREADS; ++i) {
    pthread_t t;
    pthread_create(&t, i % 2 ? &detached : NULL, worker, (void*)(i + 1));
  }
  pthread_attr_destroy(&detached);
  pthread_cleanup_push(say, "main's cleanup handler");
  printf("main calls pthread_exit\n");
  pthread_exit(NULL);
  pthread_cleanup_pop(0);
  printf("not reached\n");
  return 1;
}
