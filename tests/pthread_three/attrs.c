/* attrs.c — thread attributes and per-thread calls whose answers are the
 * same on glibc and on loom's fibres: defaults reported, values set and
 * read back, glibc's errors (EINVAL, ENOTSUP, ERANGE), a running thread's
 * attributes (its stack contains its locals), names, cancel state, keys
 * with destructor rounds. What differs by design (the default stack size,
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
#include <unistd.h>

static const char* err(int e) {
  switch (e) {
    case 0:
      return "0";
    case EINVAL:
      return "EINVAL";
    case ENOTSUP:
      return "ENOTSUP";
    case ERANGE:
      return "ERANGE";
    case ESRCH:
      return "ESRCH";
    case EDEADLK:
      return "EDEADLK";
    case EBUSY:
      return "EBUSY";
    default:
      return "other";
  }
}

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
  return 0;
}
