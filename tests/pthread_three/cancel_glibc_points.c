// Cancellation at glibc's own cancellation points — the ones inside libc
// that libloom-pthread does not intercept (stdio's write, under fflush):
// glibc checks the running thread's struct pthread, a fibre's own block
// under loom (docs/DESIGN.md, "Cancellation"). Each case's output is
// glibc's:
//  1. a thread cancelled in fflush with two C cleanup buffers: both run,
//     innermost first, and the joiner gets PTHREAD_CANCELED; a key's
//     destructor runs after them.
//  2. no buffer at all: the thread still ends cancelled (glibc's unwinding
//     ends at the thread's start).
//  3. cancellation disabled: fflush does not act; pthread_testcancel does
//     once it is enabled again.
//  4. a cleanup handler that itself calls fflush while the thread is being
//     cancelled (and one of pthread_exit's): no second cancellation.
//  5. main cancels itself and reaches fflush with no buffer: main ends, the
//     process goes on until the last thread ends (status 0).
//  6. a thread already blocked in the kernel inside one (waitpid for a
//     child that sleeps): the request interrupts the call there (glibc:
//     SIGCANCEL to the thread; loom: to the kernel thread running the
//     fibre), its handler runs, the joiner gets PTHREAD_CANCELED.
//  7. the same with cancellation disabled: the call is not interrupted;
//     it returns when the child ends, and the request acts once enabled.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static FILE* null_file;
static pthread_barrier_t barrier;
static pthread_key_t key;

static void say(const char* s) {
  // stdout may be a pipe: fputs + fflush to it are cancellation points too;
  // the message is written with cancellation disabled.
  int old;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  fputs(s, stdout);
  fflush(stdout);
  pthread_setcancelstate(old, NULL);
}

static void handler(void* arg) { say((const char*)arg); }

static void key_destructor(void* v) { say((const char*)v); }

// Writes to /dev/null through stdio: fflush calls glibc's internal write,
// a cancellation point.
static void flush_some(void) {
  fputs("x", null_file);
  fflush(null_file);
}

static void* case1(void* arg) {
  (void)arg;
  pthread_setspecific(key, "  case 1: key destructor\n");
  pthread_cleanup_push(handler, "  case 1: outer handler\n");
  pthread_cleanup_push(handler, "  case 1: inner handler\n");
  pthread_barrier_wait(&barrier);
  pthread_barrier_wait(&barrier);  // cancelled by now
  for (int i = 0; i < 1000; i++) flush_some();
  say("  case 1: not cancelled\n");
  pthread_cleanup_pop(0);
  pthread_cleanup_pop(0);
  return NULL;
}

static void* case2(void* arg) {
  (void)arg;
  pthread_barrier_wait(&barrier);
  pthread_barrier_wait(&barrier);
  for (int i = 0; i < 1000; i++) flush_some();
  say("  case 2: not cancelled\n");
  return NULL;
}

static void* case3(void* arg) {
  (void)arg;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
  pthread_cleanup_push(handler, "  case 3: handler\n");
  pthread_barrier_wait(&barrier);
  pthread_barrier_wait(&barrier);
  for (int i = 0; i < 100; i++) flush_some();
  say("  case 3: fflush did not act while disabled\n");
  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
  pthread_testcancel();
  say("  case 3: not cancelled\n");
  pthread_cleanup_pop(0);
  return NULL;
}

static void flushing_handler(void* arg) {
  flush_some();  // no second cancellation here
  say((const char*)arg);
}

static void* case4(void* arg) {
  int exit_instead = arg != NULL;
  pthread_cleanup_push(handler, "  case 4: outer handler\n");
  pthread_cleanup_push(flushing_handler, "  case 4: handler that flushes\n");
  if (exit_instead) {
    pthread_exit((void*)7);
  }
  pthread_barrier_wait(&barrier);
  pthread_barrier_wait(&barrier);
  for (int i = 0; i < 1000; i++) flush_some();
  say("  case 4: not cancelled\n");
  pthread_cleanup_pop(0);
  pthread_cleanup_pop(0);
  return NULL;
}

// A child that sleeps until it is killed, for a waitpid that blocks.
static pid_t sleeper(void) {
  pid_t pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  return pid;
}

static volatile pid_t waited;

static void* case6(void* arg) {
  (void)arg;
  pthread_cleanup_push(handler, "  case 6: handler\n");
  pthread_barrier_wait(&barrier);
  pthread_barrier_wait(&barrier);  // the child is there
  int status;
  waitpid(waited, &status, 0);  // cancelled inside the kernel
  say("  case 6: not cancelled\n");
  pthread_cleanup_pop(0);
  return NULL;
}

static void* case7(void* arg) {
  (void)arg;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
  pthread_cleanup_push(handler, "  case 7: handler\n");
  pthread_barrier_wait(&barrier);
  pthread_barrier_wait(&barrier);
  int status;
  if (waitpid(waited, &status, 0) == waited && WIFSIGNALED(status)) say("  case 7: waitpid returned when the child ended\n");
  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
  pthread_testcancel();
  say("  case 7: not cancelled\n");
  pthread_cleanup_pop(0);
  return NULL;
}

// Cases 6 and 7: the thread is let into waitpid, then cancelled; the child
// is killed a moment later (case 7's waitpid returns then; case 6's must
// have been interrupted already, or the child is reaped here).
static void run_blocked(const char* name, void* (*fn)(void*)) {
  printf("%s\n", name);
  fflush(stdout);
  waited = sleeper();
  if (waited < 0) abort();
  pthread_t t;
  if (pthread_create(&t, NULL, fn, NULL) != 0) abort();
  pthread_barrier_wait(&barrier);
  pthread_barrier_wait(&barrier);
  usleep(200 * 1000);  // inside waitpid by now
  if (pthread_cancel(t) != 0) abort();
  usleep(200 * 1000);
  kill(waited, SIGKILL);
  void* r;
  if (pthread_join(t, &r) != 0) abort();
  waitpid(waited, NULL, 0);  // (case 6's child)
  printf("  joined: %s\n", r == PTHREAD_CANCELED ? "PTHREAD_CANCELED" : "a value");
  fflush(stdout);
}

static void run(const char* name, void* (*fn)(void*), void* arg, int cancel) {
  printf("%s\n", name);
  fflush(stdout);
  pthread_t t;
  if (pthread_create(&t, NULL, fn, arg) != 0) abort();
  if (cancel) {
    pthread_barrier_wait(&barrier);
    if (pthread_cancel(t) != 0) abort();
    pthread_barrier_wait(&barrier);
  }
  void* r;
  if (pthread_join(t, &r) != 0) abort();
  printf("  joined: %s\n", r == PTHREAD_CANCELED ? "PTHREAD_CANCELED" : r == (void*)7 ? "7" : "a value");
  fflush(stdout);
}

static void* last_thread(void* arg) {
  (void)arg;
  pthread_barrier_wait(&barrier);  // main has cancelled itself
  usleep(100 * 1000);
  say("  case 5: the last thread ends the process\n");
  return NULL;
}

int main(void) {
  null_file = fopen("/dev/null", "w");
  if (!null_file) return 1;
  setvbuf(null_file, NULL, _IONBF, 0);
  pthread_barrier_init(&barrier, NULL, 2);
  pthread_key_create(&key, key_destructor);
  run("case 1: cancelled in fflush, two handlers", case1, NULL, 1);
  run("case 2: cancelled in fflush, no handler", case2, NULL, 1);
  run("case 3: cancellation disabled around fflush", case3, NULL, 1);
  run("case 4: a handler flushes while the thread is cancelled", case4, NULL, 1);
  run("case 4: the same, the thread calls pthread_exit", case4, (void*)1, 0);
  run_blocked("case 6: cancelled while blocked in waitpid", case6);
  run_blocked("case 7: the same, cancellation disabled", case7);
  printf("case 5: main cancels itself and reaches fflush\n");
  fflush(stdout);
  pthread_t t;
  if (pthread_create(&t, NULL, last_thread, NULL) != 0) abort();
  pthread_cancel(pthread_self());
  pthread_barrier_wait(&barrier);  // (not a cancellation point)
  for (int i = 0; i < 1000; i++) flush_some();
  say("  case 5: main not cancelled\n");
  return 1;
}
