/* pthread_exit from a nested call: cleanup handlers innermost first, then
 * key destructors; the joiner gets the value. Plain <pthread.h>. */
#include <pthread.h>
#include <stdio.h>

static pthread_key_t key;

static void say(void* s) { printf("%s\n", (const char*)s); }

static void leave(int depth);
static void (*volatile deeper)(int) = leave; /* frames for pthread_exit to unwind */

static void leave(int depth) {
  if (depth == 0) pthread_exit((void*)42);
  deeper(depth - 1);
  printf("not reached\n");
}

static void* worker(void* arg) {
  (void)arg;
  pthread_setspecific(key, "key destructor");
  pthread_cleanup_push(say, "outer handler");
  pthread_cleanup_push(say, "popped, not run");
  pthread_cleanup_pop(0);
  pthread_cleanup_push(say, "popped and run");
  pthread_cleanup_pop(1);
  pthread_cleanup_push(say, "inner handler");
  leave(3);
  pthread_cleanup_pop(0);
  pthread_cleanup_pop(0);
  return NULL;
}

static void* returns(void* arg) { return arg; }

int main(void) {
  pthread_key_create(&key, say);
  pthread_t t;
  void* r = NULL;
  pthread_create(&t, NULL, worker, NULL);
  pthread_join(t, &r);
  printf("joined: %ld\n", (long)r);
  pthread_create(&t, NULL, returns, (void*)7);
  pthread_join(t, &r);
  printf("returned: %ld\n", (long)r);
  int old = -1;
  printf("setcancelstate: %d\n", pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old));
  printf("old state enabled: %d\n", old == PTHREAD_CANCEL_ENABLE);
  pthread_setcancelstate(old, NULL);
  printf("bad cancel state: %d\n", pthread_setcancelstate(12345, NULL) != 0);
  return 0;
}
