/* identity.c — join, detach and a thread's identity as glibc has them
 * (issue 32): a thread joining itself gets EDEADLK, a second detach EINVAL,
 * a timed join without a time waits, a thread naming itself names its
 * kernel thread (/proc), the initial thread has no guard; in a fork child
 * pthread_self() answers getattr and getname, a second detach is EINVAL
 * and a thread joins the forking thread after its pthread_exit; a
 * SIGEV_THREAD timer's thread (made by glibc itself) answers getattr on
 * itself; and at the end a thread joins main, which left with
 * pthread_exit, and gets its value. Also: all PTHREAD_KEYS_MAX keys can be
 * made, and C11's tss_set on a key never made fails. Each line is glibc's
 * answer. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "errname.h"

static pthread_barrier_t hold;

static void* wait_hold(void* arg) {
  pthread_barrier_wait(&hold);
  return arg;
}

static void* sleeper(void* arg) {
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL);
  return arg;
}

static void detach_twice(const char* where) {
  pthread_barrier_init(&hold, NULL, 3);
  pthread_t a, b;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_create(&a, NULL, wait_hold, NULL);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_create(&b, &at, wait_hold, NULL);
  pthread_attr_destroy(&at);
  int d1 = pthread_detach(a);
  int d2 = pthread_detach(a);
  int d3 = pthread_detach(b);
  printf("%s: detach %s, again %s, born detached %s\n", where, err(d1), err(d2), err(d3));
  pthread_barrier_wait(&hold);
  sleep(0);
}

static void comm_of_self(char* out, size_t n) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%ld/comm", (long)syscall(SYS_gettid));
  FILE* f = fopen(path, "r");
  out[0] = 0;
  if (f) {
    if (!fgets(out, (int)n, f)) out[0] = 0;
    fclose(f);
  }
  out[strcspn(out, "\n")] = 0;
}

static void self_calls(const char* where) {
  pthread_attr_t a;
  int e = pthread_getattr_np(pthread_self(), &a);
  int local = 0;
  void* lo = NULL;
  size_t size = 0;
  if (e == 0) {
    pthread_attr_getstack(&a, &lo, &size);
    pthread_attr_destroy(&a);
  }
  int inside = e == 0 && (char*)&local >= (char*)lo && (char*)&local < (char*)lo + size;
  char name[16] = "", comm[16] = "";
  int g = pthread_getname_np(pthread_self(), name, sizeof name);
  comm_of_self(comm, sizeof comm);
  printf("%s: getattr(self) %s, stack holds a local %d, getname %s, same as comm %d\n", where, err(e), inside,
         err(g), strcmp(name, comm) == 0);
  int s = pthread_setname_np(pthread_self(), "renamed");
  comm_of_self(comm, sizeof comm);
  printf("%s: setname %s, comm %s\n", where, err(s), comm);
}

static pthread_t forker;

static void* join_forker(void* arg) {
  (void)arg;
  void* r = NULL;
  int e = pthread_join(forker, &r);
  printf("child: joined the forking thread: %s, value %ld\n", err(e), (long)r);
  fflush(stdout);
  exit(0);
}

static void child_key_ends(void* v) {
  printf("child: the forking thread's key destructor ran (%ld)\n", (long)v);
  fflush(stdout);
}

static void in_fork_child(void) {
  pid_t p = fork();
  if (p == 0) {
    self_calls("child");
    printf("child: join self %s\n", err(pthread_join(pthread_self(), NULL)));
    detach_twice("child");
    forker = pthread_self();
    pthread_key_t k;
    pthread_key_create(&k, child_key_ends);
    pthread_setspecific(k, (void*)3);  /* its destructor runs at the pthread_exit below */
    pthread_t t;
    pthread_create(&t, NULL, join_forker, NULL);
    fflush(stdout);
    pthread_exit((void*)7);
  }
  int st = 0;
  waitpid(p, &st, 0);
  printf("child exited %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static pthread_mutex_t timer_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t timer_cond = PTHREAD_COND_INITIALIZER;
static int timer_result = -1;

static void on_timer(union sigval v) {
  (void)v;
  pthread_attr_t a;
  int e = pthread_getattr_np(pthread_self(), &a);
  if (e == 0) pthread_attr_destroy(&a);
  pthread_mutex_lock(&timer_lock);
  timer_result = e;
  pthread_cond_signal(&timer_cond);
  pthread_mutex_unlock(&timer_lock);
}

static void timer_thread(void) {
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD;
  ev.sigev_notify_function = on_timer;
  timer_t id;
  if (timer_create(CLOCK_MONOTONIC, &ev, &id) != 0) return;
  struct itimerspec it = {{0, 0}, {0, 1000 * 1000}};
  timer_settime(id, 0, &it, NULL);
  pthread_mutex_lock(&timer_lock);
  while (timer_result == -1) pthread_cond_wait(&timer_cond, &timer_lock);
  pthread_mutex_unlock(&timer_lock);
  printf("timer thread: getattr(self) %s\n", err(timer_result));
  timer_delete(id);
}

static void keys(void) {
  static pthread_key_t k[PTHREAD_KEYS_MAX + 1];
  int n = 0;
  while (n <= PTHREAD_KEYS_MAX && pthread_key_create(&k[n], NULL) == 0) ++n;
  printf("keys made: %d (PTHREAD_KEYS_MAX %d)\n", n, PTHREAD_KEYS_MAX);
  for (int i = 0; i < n; ++i) pthread_key_delete(k[i]);
  tss_t never = 3;
  printf("tss_set on a key never made: %s\n", tss_set(never, &n) == thrd_success ? "success" : "error");
  tss_t t;
  int made = tss_create(&t, NULL) == thrd_success;
  int set = tss_set(t, &n) == thrd_success;
  printf("tss_create %d, set %d, get back %d\n", made, set, tss_get(t) == &n);
  tss_delete(t);
}

static pthread_t main_thread;

static void* join_main(void* arg) {
  (void)arg;
  void* r = NULL;
  int e = pthread_join(main_thread, &r);
  printf("joined main: %s, value %ld\n", err(e), (long)r);
  fflush(stdout);
  exit(0);
}

int main(void) {
  main_thread = pthread_self();
  keys();
  printf("main: join self %s\n", err(pthread_join(pthread_self(), NULL)));
  pthread_attr_t a;
  size_t guard = 1;
  pthread_getattr_np(pthread_self(), &a);
  pthread_attr_getguardsize(&a, &guard);
  pthread_attr_destroy(&a);
  printf("main: guard size %zu\n", guard);
  detach_twice("main");
  pthread_t t;
  void* r = NULL;
  pthread_create(&t, NULL, sleeper, (void*)5);
  int e = pthread_timedjoin_np(t, &r, NULL);
  printf("timedjoin without a time: %s, value %ld\n", err(e), (long)r);
  pthread_create(&t, NULL, sleeper, (void*)6);
  e = pthread_clockjoin_np(t, &r, CLOCK_MONOTONIC, NULL);
  printf("clockjoin without a time: %s, value %ld\n", err(e), (long)r);
  self_calls("main");
  fflush(stdout);
  in_fork_child();
  timer_thread();
  fflush(stdout);
  pthread_create(&t, NULL, join_main, NULL);
  pthread_exit((void*)42);
}
