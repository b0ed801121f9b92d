/* attrs.c — thread attributes and per-thread calls whose answers are the
 * same on glibc and on loom's fibres: defaults reported, values set and
 * read back, glibc's errors (EINVAL, ENOTSUP, ERANGE), a running thread's
 * attributes (its stack contains its locals), names, cancel state, keys
 * with destructor rounds; the default attribute's affinity set and signal
 * mask, and the masks a new thread starts with (a POSIX thread, a C11 one,
 * one made in a fork child). What differs by design (the default stack size,
 * caller-supplied stacks, realtime policies, CPU clocks) is not printed:
 * README, "Three ways to run a pthread program on loom". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <threads.h>
#include <unistd.h>

#include "errname.h"

static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER; /* main prints first */

static void* inside(void* arg) {
  pthread_mutex_lock(&gate);
  pthread_mutex_unlock(&gate);
  int local = 0;
  pthread_attr_t a;
  void* lo = NULL;
  size_t size = 0;
  int detach = -1;
  int e = pthread_getattr_np(pthread_self(), &a);
  pthread_attr_getstack(&a, &lo, &size);
  pthread_attr_getdetachstate(&a, &detach);
  pthread_attr_destroy(&a);
  printf("running thread: getattr_np %s, its stack holds its locals: %d, at least the size asked: %d, %s\n", err(e),
         (char*)&local >= (char*)lo && (char*)&local < (char*)lo + size, size >= (size_t)arg,
         detach == PTHREAD_CREATE_DETACHED ? "detached" : "joinable");
  char name[32];
  printf("setname %s, ", err(pthread_setname_np(pthread_self(), "worker-1")));
  printf("getname %s ", err(pthread_getname_np(pthread_self(), name, sizeof name)));
  printf("'%s', ", name);
  printf("a 16-byte name %s, ", err(pthread_setname_np(pthread_self(), "0123456789abcdef")));
  printf("a short buffer %s\n", err(pthread_getname_np(pthread_self(), name, 4)));
  int old = -1;
  e = pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  printf("cancel state: set %s, old %s; ", err(e), old == PTHREAD_CANCEL_ENABLE ? "enabled" : "?");
  pthread_setcancelstate(old, NULL);
  printf("type: bad %s\n", err(pthread_setcanceltype(42, NULL)));
  printf("join self %s\n", err(pthread_join(pthread_self(), NULL)));
  return NULL;
}

static pthread_key_t key;
static int rounds;
static void destroy_value(void* v) {
  ++rounds;
  if ((long)v < 3) pthread_setspecific(key, (void*)((long)v + 1)); /* set again: another round */
}
static void* set_key(void* arg) {
  pthread_setspecific(key, (void*)1);
  return arg;
}

/* Which of SIGHUP, SIGUSR1, SIGUSR2 the calling thread blocks. */
static void print_mask(const char* who) {
  sigset_t m;
  pthread_sigmask(SIG_SETMASK, NULL, &m);
  printf("  %s blocks:%s%s%s\n", who, sigismember(&m, SIGHUP) ? " HUP" : "", sigismember(&m, SIGUSR1) ? " USR1" : "",
         sigismember(&m, SIGUSR2) ? " USR2" : "");
}
static void* mask_thread(void* who) {
  print_mask(who);
  return NULL;
}
static int mask_c11(void* who) {
  print_mask(who);
  return 0;
}
static void masks_of(const char* when, pthread_attr_t* attr) {
  pthread_t t;
  thrd_t c;
  char who[2][64];
  snprintf(who[0], sizeof who[0], "%s: a thread", when);
  snprintf(who[1], sizeof who[1], "%s: a C11 thread", when);
  pthread_create(&t, attr, mask_thread, who[0]);
  pthread_join(t, NULL);
  if (thrd_create(&c, mask_c11, who[1]) == thrd_success) thrd_join(c, NULL);
}

/* The default attribute's affinity set and mask, read back and given to
 * the threads made without an attribute (C11 threads too), in this
 * process and in a fork child (whose threads are glibc's under loom). */
static void defaults_and_masks(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setaffinity_np(&a, sizeof set, &set);
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  pthread_attr_setsigmask_np(&a, &hup);
  printf("setattr_default with affinity and mask %s\n", err(pthread_setattr_default_np(&a)));
  pthread_attr_destroy(&a);
  pthread_getattr_default_np(&a);
  CPU_ZERO(&set);
  printf("  affinity reads back %s:", err(pthread_attr_getaffinity_np(&a, sizeof set, &set)));
  for (int i = 0; i < 8; ++i) printf(" %d", CPU_ISSET(i, &set) ? 1 : 0);
  sigset_t m;
  sigemptyset(&m);
  int got = pthread_attr_getsigmask_np(&a, &m);
  printf("\n  mask reads back %s, HUP %d\n", err(got), sigismember(&m, SIGHUP));
  pthread_attr_destroy(&a);

  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, NULL);
  masks_of("default", NULL);
  pthread_attr_init(&a);
  sigset_t usr2;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  pthread_attr_setsigmask_np(&a, &usr2);
  masks_of("own mask", &a);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    masks_of("fork child, default", NULL);
    masks_of("fork child, own mask", &a);
    fflush(stdout);
    _exit(0);
  }
  waitpid(pid, NULL, 0);
  pthread_attr_destroy(&a);

  pthread_attr_init(&a);  /* back to inheritance */
  pthread_setattr_default_np(&a);
  pthread_attr_destroy(&a);
  masks_of("defaults reset", NULL);
  pthread_sigmask(SIG_UNBLOCK, &usr1, NULL);
}

int main(void) {
  pthread_attr_t a;
  int i = -1;
  size_t n = 0;
  struct sched_param sp;
  printf("init %s\n", err(pthread_attr_init(&a)));
  pthread_attr_getdetachstate(&a, &i);
  printf("detachstate %s\n", i == PTHREAD_CREATE_JOINABLE ? "joinable" : "?");
  pthread_attr_getinheritsched(&a, &i);
  printf("inheritsched %s\n", i == PTHREAD_INHERIT_SCHED ? "inherit" : "explicit");
  pthread_attr_getschedpolicy(&a, &i);
  printf("policy %s\n", i == SCHED_OTHER ? "SCHED_OTHER" : "?");
  pthread_attr_getschedparam(&a, &sp);
  printf("priority %d\n", sp.sched_priority);
  pthread_attr_getscope(&a, &i);
  printf("scope %s\n", i == PTHREAD_SCOPE_SYSTEM ? "system" : "process");
  pthread_attr_getguardsize(&a, &n);
  printf("guardsize is a page: %d\n", n == (size_t)sysconf(_SC_PAGESIZE));
  pthread_attr_getstacksize(&a, &n);
  printf("stacksize at least PTHREAD_STACK_MIN: %d\n", n >= (size_t)PTHREAD_STACK_MIN);

  printf("setdetachstate 7 %s\n", err(pthread_attr_setdetachstate(&a, 7)));
  printf("setscope process %s, ", err(pthread_attr_setscope(&a, PTHREAD_SCOPE_PROCESS)));
  printf("system %s, ", err(pthread_attr_setscope(&a, PTHREAD_SCOPE_SYSTEM)));
  printf("9 %s\n", err(pthread_attr_setscope(&a, 9)));
  printf("setinheritsched 9 %s, ", err(pthread_attr_setinheritsched(&a, 9)));
  printf("explicit %s\n", err(pthread_attr_setinheritsched(&a, PTHREAD_EXPLICIT_SCHED)));
  pthread_attr_getinheritsched(&a, &i);
  printf("  reads back %s\n", i == PTHREAD_EXPLICIT_SCHED ? "explicit" : "inherit");
  printf("setschedpolicy 99 %s\n", err(pthread_attr_setschedpolicy(&a, 99)));
  sp.sched_priority = 5;
  printf("setschedparam 5 under SCHED_OTHER %s\n", err(pthread_attr_setschedparam(&a, &sp)));
  pthread_attr_setinheritsched(&a, PTHREAD_INHERIT_SCHED);
  printf("setstacksize 1000 %s\n", err(pthread_attr_setstacksize(&a, 1000)));
  printf("setstacksize 256 KiB %s\n", err(pthread_attr_setstacksize(&a, 256 * 1024)));
  pthread_attr_getstacksize(&a, &n);
  printf("  reads back %zu\n", n);
  printf("setguardsize 3 pages %s\n", err(pthread_attr_setguardsize(&a, 3 * (size_t)sysconf(_SC_PAGESIZE))));
  pthread_attr_getguardsize(&a, &n);
  printf("  reads back 3 pages: %d\n", n == 3 * (size_t)sysconf(_SC_PAGESIZE));

  pthread_t t;
  pthread_mutex_lock(&gate);
  printf("create with the attribute %s\n", err(pthread_create(&t, &a, inside, (void*)(256 * 1024))));
  pthread_mutex_unlock(&gate);
  printf("join %s\n", err(pthread_join(t, NULL)));
  printf("destroy %s\n", err(pthread_attr_destroy(&a)));

  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&a, 64 * 1024);
  pthread_create(&t, &a, inside, (void*)(64 * 1024));
  pthread_attr_destroy(&a);
  sleep(1); /* the detached thread prints before the keys below */

  printf("key create %s\n", err(pthread_key_create(&key, destroy_value)));
  pthread_create(&t, NULL, set_key, NULL);
  pthread_join(t, NULL);
  printf("key destructor rounds %d (values set again twice)\n", rounds);
  int e = pthread_key_delete(key);
  printf("key delete %s, ", err(e));
  printf("again %s\n", err(pthread_key_delete(key)));
  printf("equal self %d, kill self 0 %s\n", pthread_equal(pthread_self(), pthread_self()),
         err(pthread_kill(pthread_self(), 0)));
  defaults_and_masks();
  return 0;
}
