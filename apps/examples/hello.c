/* hello.c — threads say hello, in plain POSIX threads.
 *
 * Built twice (apps/examples/CMakeLists.txt): hello_pthread against the
 * system's pthreads, hello_loom unchanged with -include loom/pthread.h,
 * where each thread is a fibre and main() is one too. */
#include <pthread.h>
#include <stdio.h>

enum { THREADS = 8 };

struct greeting {
  int id;
  char text[64];
};

static void* greet(void* arg) {
  struct greeting* g = arg;
  snprintf(g->text, sizeof g->text, "hello from thread %d", g->id);
  return g->text;
}

int main(void) {
  pthread_t t[THREADS];
  struct greeting g[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    g[i].id = i;
    if (pthread_create(&t[i], NULL, greet, &g[i]) != 0) {
      fprintf(stderr, "hello: pthread_create failed\n");
      return 1;
    }
  }
  for (int i = 0; i < THREADS; ++i) {
    void* text;
    pthread_join(t[i], &text);
    printf("%s\n", (const char*)text);
  }
  return 0;
}
