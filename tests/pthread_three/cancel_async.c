// cancel_async.c — the asynchronous cancellation type in waits that are no
// cancellation point (issue 32); three.sh compares each case's output with
// the plain glibc run's. One case per run (argv[1]); an alarm bounds each.
//   mutex     a waiter of the asynchronous type in pthread_mutex_lock, then
//             in pthread_mutex_timedlock, cancelled while it waits, for
//             each kind (normal, recursive, errorcheck, adaptive): it acts
//             there and its cleanup runs; a second waiter behind it gets
//             the mutex; the mutex is then free and can be destroyed
//   condwait  a waiter of the asynchronous type in pthread_cond_wait,
//             cancelled while the canceller holds the mutex: its cleanup
//             runs only once the mutex is taken back (it unlocks it), never
//             meanwhile; the mutex can be destroyed afterwards
//   syscall   the program's own raw syscall(2) (SYS_pause, SYS_ppoll with
//             no time-out, SYS_futex's FUTEX_WAIT private and shared, which
//             loom would otherwise park itself), cancelled 300 ms in (a blocked kernel thread
//             by then: the monitor has handed its processor on): acts
//             inside the call, cleanup runs; 100 threads cancelled as they
//             leave a barrier for the call (the race between the request
//             and the call's window); with cancellation disabled, a raw nanosleep of 200
//             ms is not cut short, and the request acts when it is enabled;
//             a futex wait of the asynchronous type still ends at a wake
//   forkchild the same raw SYS_pause, and a barrier's wake (glibc's
//             tst-cancel30), in a fork child, whose threads are glibc's:
//             its asynchronous cancellation never unwinds into loom's
//             frames (100 threads, each cancelled as it leaves a barrier)
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t m;
static volatile int started, cleaned;
static int timed;

static void count_cleanup(void* a) {
  (void)a;
  cleaned++;
}

static void* async_waiter(void* a) {
  (void)a;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  pthread_cleanup_push(count_cleanup, NULL);
  started = 1;
  if (!timed) {
    pthread_mutex_lock(&m);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    pthread_mutex_timedlock(&m, &ts);
  }
  pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, NULL);
  pthread_mutex_unlock(&m);
  pthread_cleanup_pop(0);
  return (void*)1;
}

static void* deferred_waiter(void* a) {
  (void)a;
  started = 1;
  int e = pthread_mutex_lock(&m);
  pthread_mutex_unlock(&m);
  return (void*)(long)(e == 0 ? 2 : 3);
}

static void wait_started(void) {
  while (!started) usleep(1000);
  usleep(50 * 1000);  // (into its wait)
}

static void mutex_case(int type, const char* name) {
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_settype(&ma, type);
  pthread_mutex_init(&m, &ma);
  cleaned = 0;
  pthread_mutex_lock(&m);
  pthread_t t, u;
  void* r;
  started = 0;
  pthread_create(&t, NULL, async_waiter, NULL);
  wait_started();
  started = 0;
  pthread_create(&u, NULL, deferred_waiter, NULL);
  wait_started();
  pthread_cancel(t);
  usleep(100 * 1000);
  pthread_mutex_unlock(&m);
  pthread_join(t, &r);
  printf("mutex: %s %s: async waiter %s, cleanups %d;", name, timed ? "timedlock" : "lock",
         r == PTHREAD_CANCELED ? "cancelled" : "returned", cleaned);
  pthread_join(u, &r);
  printf(" second waiter %s;", r == (void*)2 ? "got it" : "failed");
  int e = pthread_mutex_trylock(&m);
  int e2 = pthread_mutex_unlock(&m);
  printf(" trylock %d unlock %d destroy %d\n", e, e2, pthread_mutex_destroy(&m));
}

static int mutex(void) {
  static const struct {
    int type;
    const char* name;
  } kinds[] = {{PTHREAD_MUTEX_NORMAL, "normal"},
               {PTHREAD_MUTEX_RECURSIVE, "recursive"},
               {PTHREAD_MUTEX_ERRORCHECK, "errorcheck"},
               {PTHREAD_MUTEX_ADAPTIVE_NP, "adaptive"}};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    for (timed = 0; timed < 2; timed++) mutex_case(kinds[i].type, kinds[i].name);
  return 0;
}

static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static volatile int waiting;

static void unlock_cleanup(void* a) {
  (void)a;
  cleaned = 1;
  pthread_mutex_unlock(&m);
}

static void* cond_waiter(void* a) {
  (void)a;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  pthread_mutex_lock(&m);
  pthread_cleanup_push(unlock_cleanup, NULL);
  waiting = 1;
  for (;;) pthread_cond_wait(&c, &m);
  pthread_cleanup_pop(0);
  return NULL;
}

static int condwait(void) {
  pthread_mutex_init(&m, NULL);
  cleaned = 0;
  pthread_t t;
  pthread_create(&t, NULL, cond_waiter, NULL);
  while (!waiting) usleep(1000);
  pthread_mutex_lock(&m);
  pthread_cancel(t);
  usleep(200 * 1000);
  int busy = pthread_mutex_trylock(&m);
  printf("condwait: while main holds the mutex: cleanup ran %d, trylock %d\n", cleaned, busy);
  pthread_mutex_unlock(&m);
  void* r;
  pthread_join(t, &r);
  printf("condwait: cancelled %d, cleanup ran %d, destroy %d\n", r == PTHREAD_CANCELED, cleaned,
         pthread_mutex_destroy(&m));
  return 0;
}

static const char* const raw_calls[] = {"pause", "ppoll", "futex wait (private)", "futex wait (shared)"};
static unsigned futex_word, woken_word;

static void* raw_waiter(void* a) {
  long which = (long)a;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  pthread_cleanup_push(count_cleanup, NULL);
  started = 1;
  if (which == 0)
    syscall(SYS_pause);
  else if (which == 1)
    syscall(SYS_ppoll, NULL, 0L, NULL, NULL, 8L);
  else
    syscall(SYS_futex, &futex_word, which == 2 ? FUTEX_WAIT_PRIVATE : FUTEX_WAIT, 0, NULL, NULL, 0);
  pthread_cleanup_pop(0);
  return (void*)1;
}

// Of the asynchronous type and never cancelled: a wake still ends the wait.
static void* futex_sleeper(void* a) {
  (void)a;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  started = 1;
  while (__atomic_load_n(&woken_word, __ATOMIC_ACQUIRE) == 0)
    syscall(SYS_futex, &woken_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
  return (void*)2;
}

static void* raw_sleeper(void* a) {
  (void)a;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
  pthread_cleanup_push(count_cleanup, NULL);
  started = 1;
  struct timespec t = {0, 200 * 1000 * 1000};
  long r = syscall(SYS_nanosleep, &t, NULL);
  printf("syscall: disabled: nanosleep returned %ld, cleanups %d;", r, cleaned);
  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
  printf(" (not here)");
  pthread_cleanup_pop(0);
  return (void*)1;
}

// A barrier per thread, never destroyed nor used again: a thread
// cancelled asynchronously may be cut short inside its wait (as glibc's
// tst-cancel30 may be), which leaves the barrier unusable.
static pthread_barrier_t gates[200];

static void* racer(void* a) {
  pthread_barrier_t* g = a;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  pthread_barrier_wait(g);
  if (g >= gates + 100) syscall(SYS_pause);  // (the first hundred: no pause)
  return (void*)1;
}

// n threads (at most 100), each cancelled as soon as the barrier lets main
// go, with the thread on its way out of the barrier or (pause) into a raw
// pause: how many ended cancelled, or (no pause) how many ended.
static int race(int n, int pause) {
  int ended = 0;
  for (int i = 0; i < n; i++) {
    pthread_barrier_t* g = &gates[i + (pause ? 100 : 0)];
    pthread_barrier_init(g, NULL, 2);
    pthread_t t;
    void* r;
    pthread_create(&t, NULL, racer, g);
    pthread_barrier_wait(g);
    pthread_cancel(t);
    pthread_join(t, &r);
    ended += r == PTHREAD_CANCELED || !pause;
  }
  return ended;
}

static int raw(void) {
  for (long i = 0; i < 4; i++) {
    pthread_t t;
    void* r;
    cleaned = 0;
    started = 0;
    pthread_create(&t, NULL, raw_waiter, (void*)i);
    while (!started) usleep(1000);
    usleep(300 * 1000);
    pthread_cancel(t);
    pthread_join(t, &r);
    printf("syscall: %s: %s, cleanups %d\n", raw_calls[i], r == PTHREAD_CANCELED ? "cancelled" : "returned", cleaned);
  }
  {
    pthread_t t;
    void* r;
    started = 0;
    pthread_create(&t, NULL, futex_sleeper, NULL);
    while (!started) usleep(1000);
    usleep(100 * 1000);
    __atomic_store_n(&woken_word, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &woken_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    pthread_join(t, &r);
    printf("syscall: futex wait of the asynchronous type, woken: %s\n", r == (void*)2 ? "returned" : "cancelled?");
  }
  printf("syscall: cancelled entering pause: %d of 100\n", race(100, 1));
  pthread_t t;
  void* r;
  cleaned = 0;
  started = 0;
  pthread_create(&t, NULL, raw_sleeper, NULL);
  while (!started) usleep(1000);
  usleep(50 * 1000);
  pthread_cancel(t);
  pthread_join(t, &r);
  printf(" then %s, cleanups %d\n", r == PTHREAD_CANCELED ? "cancelled" : "returned", cleaned);
  return 0;
}

static int forkchild(void) {
  pid_t p = fork();
  if (p == 0) {
    printf("forkchild: cancelled in pause: %d of 100\n", race(100, 1));
    printf("forkchild: leaving a barrier: %d of 100 ended\n", race(100, 0));
    _exit(0);
  }
  int st;
  waitpid(p, &st, 0);
  printf("forkchild: child %s %d\n", WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  alarm(60);
  const char* c = argc > 1 ? argv[1] : "";
  if (strcmp(c, "mutex") == 0) return mutex();
  if (strcmp(c, "condwait") == 0) return condwait();
  if (strcmp(c, "syscall") == 0) return raw();
  if (strcmp(c, "forkchild") == 0) return forkchild();
  fprintf(stderr, "usage: cancel_async mutex|condwait|syscall|forkchild\n");
  return 2;
}
