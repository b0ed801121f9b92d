/* foreign.c — a kernel thread that is not one of loom's processors (made
 * with glibc's own pthread_create, found with dlsym, as a library's private
 * thread would be) uses the pthread calls: its pthread_self is its own and
 * stable, keys are its own, and a thread it creates runs (as a fibre in the
 * default cluster, on loom) and is joined from it. The same output on glibc
 * and every loom route. It ends with pthread_exit, which on loom must reach
 * glibc's for such a thread, after its cleanup handler; then its key's
 * destructor runs. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*create_fn)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
typedef int (*join_fn)(pthread_t, void**);

static pthread_key_t key, dkey;

/* A key's destructor runs when the kernel thread exits (glibc's exit). */
static void destroyed(void* v) { printf("kernel thread: its key's destructor ran with %ld\n", (long)v); }

static void* child(void* a) {
  pthread_setspecific(key, (void*)3);
  return (void*)((long)a * 2 + (long)pthread_getspecific(key));
}

static volatile int finishing;
static void said(void* what) {
  printf("%s\n", (const char*)what);
  finishing = 1;
}

static void* kernel_thread(void* a) {
  (void)a;
  pthread_t me = pthread_self();
  printf("kernel thread: self is stable %d, differs from main's %d\n", pthread_equal(me, pthread_self()),
         !pthread_equal(me, *(pthread_t*)a));
  pthread_setspecific(key, (void*)7);
  pthread_setspecific(dkey, (void*)9);
  pthread_t t;
  void* r = NULL;
  if (pthread_create(&t, NULL, child, (void*)20) != 0 || pthread_join(t, &r) != 0) {
    printf("FAILED: create/join from a kernel thread\n");
    exit(1);
  }
  sched_yield();
  printf("kernel thread: its child returned %ld, its key still %ld\n", (long)r, (long)pthread_getspecific(key));
  pthread_cleanup_push(said, "kernel thread: its cleanup handler ran at pthread_exit");
  pthread_exit((void*)1); /* glibc's, for a kernel thread of glibc's */
  pthread_cleanup_pop(0);
  return NULL;
}

int main(void) {
  void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  create_fn sys_create = libc ? (create_fn)dlsym(libc, "pthread_create") : NULL;
  join_fn sys_join = libc ? (join_fn)dlsym(libc, "pthread_join") : NULL;
  if (!sys_create || !sys_join) {
    printf("FAILED: no libc.so.6\n");
    return 1;
  }
  pthread_key_create(&key, NULL);
  pthread_key_create(&dkey, destroyed);
  pthread_setspecific(key, (void*)5);
  pthread_t main_id = pthread_self(), k;
  void* r = NULL;
  if (sys_create(&k, NULL, kernel_thread, &main_id) != 0) {
    printf("FAILED: glibc's pthread_create\n");
    return 1;
  }
  /* glibc's join blocks the caller's kernel thread: on loom with one
   * processor the fibre the kernel thread creates could then never run.
   * Yield (a fibre yield on loom) until the thread is on its way out. */
  while (!finishing) sched_yield();
  if (sys_join(k, &r) != 0) {
    printf("FAILED: glibc's pthread_create\n");
    return 1;
  }
  printf("main: the kernel thread returned %ld, main's key still %ld\n", (long)r, (long)pthread_getspecific(key));
  return 0;
}
