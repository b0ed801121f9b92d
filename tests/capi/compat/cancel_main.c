/* Cancelling the main thread: it waits in sem_wait, another thread cancels
 * it; main's cleanup handler runs and main ends as with pthread_exit — the
 * process lives on until its last thread returns, then exits with 0.
 * Plain <pthread.h>. */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <time.h>

static pthread_t main_thread;
static sem_t never, handled;

static void main_handler(void* arg) {
  (void)arg;
  printf("main: cleanup handler\n");
  sem_post(&handled);
}

static void* canceller(void* arg) {
  (void)arg;
  struct timespec t = {0, 20 * 1000 * 1000};
  nanosleep(&t, NULL); /* main likely waits by now; the output is the same either way */
  int e = pthread_cancel(main_thread);
  sem_wait(&handled);
  printf("worker: cancel main: %d; its handler ran, the process goes on\n", e);
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  sem_init(&never, 0, 0);
  sem_init(&handled, 0, 0);
  main_thread = pthread_self();
  pthread_t t;
  pthread_create(&t, NULL, canceller, NULL);
  pthread_cleanup_push(main_handler, NULL);
  sem_wait(&never);
  printf("main: not cancelled\n");
  pthread_cleanup_pop(0);
  return 1;
}
