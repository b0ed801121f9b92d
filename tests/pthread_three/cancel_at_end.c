/* cancel_at_end.c — a request pending as a thread ends, and a fork child's
 * forking thread cancelled (outside review of the glibc cancellation points,
 * stop 39). The program's output must be the same plainly and under loom.
 *  1. A thread cancels itself and returns without reaching a cancellation
 *     point; its key destructor then writes to a file (a glibc cancellation
 *     point). glibc acts there (the thread ends cancelled); loom lets the
 *     destructor finish (docs/DESIGN.md, "Cancellation"). Either way the
 *     process goes on and the join returns: it crashed (glibc's unwinding
 *     found no buffer left).
 *  2. A worker forks; in the child, that thread (the child's only one)
 *     cancels itself and reaches pthread_testcancel: its cleanup handler
 *     runs and the child ends with status 0 (it crashed in loom's landing,
 *     which took the thread for one of loom's). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_key_t key;
static FILE* sink;

static void dtor(void* v) {
  fprintf(sink, "destructor %p\n", v);
  fflush(sink);
}

static void* ends_with_request(void* arg) {
  (void)arg;
  pthread_setspecific(key, (void*)1);
  pthread_cancel(pthread_self());
  return (void*)5;
}

static void cleanup(void* arg) {
  (void)arg;
  static const char m[] = "child: cleanup ran\n";
  write(1, m, sizeof m - 1);
}

static void* forker(void* arg) {
  (void)arg;
  pid_t p = fork();
  if (p == 0) {
    pthread_cleanup_push(cleanup, NULL);
    pthread_cancel(pthread_self());
    pthread_testcancel();
    pthread_cleanup_pop(0);
    _exit(3);  /* not cancelled */
  }
  int st = -1;
  waitpid(p, &st, 0);
  printf("child: %s %d\n", WIFEXITED(st) ? "exit status" : "killed by signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  sink = fopen("/dev/null", "w");
  pthread_key_create(&key, dtor);
  for (int i = 0; i < 20; ++i) {
    pthread_t t;
    void* r;
    pthread_create(&t, NULL, ends_with_request, NULL);
    pthread_join(t, &r);
  }
  printf("20 threads ended with a request pending, their destructors writing: joined\n");
  pthread_t f;
  pthread_create(&f, NULL, forker, NULL);
  pthread_join(f, NULL);
  return 0;
}
