// futex_ops.c — the program's own FUTEX_WAIT woken by the other futex
// operations that wake or move waiters: FUTEX_WAKE_OP (a waiter on each of
// its two words), FUTEX_REQUEUE and FUTEX_CMP_REQUEUE (a waiter moved to a
// second word, then woken there; CMP_REQUEUE with a wrong value: EAGAIN and
// nobody moved), a timed waiter moved and left to time out, a WAKE_OP on
// a bad address (EFAULT), each with the private and the shared operations (a shared
// futex on private memory parks a fibre under loom too). Issue 35, item 4:
// loom parked the waiters in its parking lot and sent these operations to
// the kernel, which found nobody — the waiters slept to their deadline.
//
// Every wait has a 5 s timeout: a waiter that times out was missed, and
// the program says so and exits 1. stdout is the same on glibc and
// preloaded (same.sh). Each waiter is given 200 ms to park first.
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int priv;  // FUTEX_PRIVATE_FLAG or 0
static _Atomic int done;
static _Atomic int failed;

static long futex(_Atomic uint32_t* a, int op, uint32_t val, long val2, _Atomic uint32_t* a2, uint32_t val3) {
  return syscall(SYS_futex, a, op | priv, val, val2, a2, val3);
}

struct waiter {
  _Atomic uint32_t* word;
  const char* name;
  pthread_t t;
  _Atomic int in;
};

// Waits (as a program's futex-based lock would) until `done`: a timeout is a
// missed wake-up.
static void* wait_thread(void* arg) {
  struct waiter* w = arg;
  atomic_store(&w->in, 1);
  while (!atomic_load(&done)) {
    struct timespec t = {5, 0};
    long r = syscall(SYS_futex, w->word, FUTEX_WAIT | priv, atomic_load(w->word), &t, NULL, 0);
    if (r == -1 && errno == ETIMEDOUT) {
      printf("%s: MISSED (timed out after 5 s)\n", w->name);
      atomic_store(&failed, 1);
      return NULL;
    }
  }
  return NULL;
}

static void start(struct waiter* w, _Atomic uint32_t* word, const char* name) {
  w->word = word;
  w->name = name;
  atomic_store(&w->in, 0);
  if (pthread_create(&w->t, NULL, wait_thread, w) != 0) abort();
  while (!atomic_load(&w->in)) usleep(1000);
}

static void settle(void) { usleep(200 * 1000); }

static void wake_op(void) {
  static _Atomic uint32_t w1, w2;
  atomic_store(&done, 0);
  atomic_store(&w1, 0);
  atomic_store(&w2, 0);
  struct waiter a, b;
  start(&a, &w1, "wake_op uaddr waiter");
  start(&b, &w2, "wake_op uaddr2 waiter");
  settle();
  atomic_store(&done, 1);
  // *uaddr2 = 1; wake 1 on uaddr; and, since the old value was 0, 1 on uaddr2.
  long r = futex(&w1, FUTEX_WAKE_OP, 1, 1, &w2, FUTEX_OP(FUTEX_OP_SET, 1, FUTEX_OP_CMP_EQ, 0));
  pthread_join(a.t, NULL);
  pthread_join(b.t, NULL);
  printf("wake_op: returned %ld, uaddr2 now %u\n", r, (unsigned)atomic_load(&w2));
  // A comparison that fails wakes uaddr only: the old value (1) is not 5.
  atomic_store(&done, 0);
  start(&a, &w1, "wake_op uaddr waiter (no compare)");
  settle();
  atomic_store(&done, 1);
  r = futex(&w1, FUTEX_WAKE_OP, 1, 1, &w2, FUTEX_OP(FUTEX_OP_ADD, 2, FUTEX_OP_CMP_EQ, 5));
  pthread_join(a.t, NULL);
  printf("wake_op: returned %ld, uaddr2 now %u\n", r, (unsigned)atomic_load(&w2));
}

static void requeue(int cmp) {
  static _Atomic uint32_t w1, w2;
  const char* what = cmp ? "cmp_requeue" : "requeue";
  atomic_store(&done, 0);
  struct waiter a, b;
  start(&a, &w1, cmp ? "cmp_requeue waiter 1" : "requeue waiter 1");
  start(&b, &w1, cmp ? "cmp_requeue waiter 2" : "requeue waiter 2");
  settle();
  if (cmp) {
    errno = 0;
    long r = futex(&w1, FUTEX_CMP_REQUEUE, 1, INT_MAX, &w2, 7);
    printf("%s with a wrong value: %ld (%s)\n", what, r, errno == EAGAIN ? "EAGAIN" : "not EAGAIN");
  }
  atomic_store(&done, 1);
  // Wake none, move both to w2 (REQUEUE); wake one, move one (CMP_REQUEUE).
  long r = cmp ? futex(&w1, FUTEX_CMP_REQUEUE, 1, INT_MAX, &w2, 0) : futex(&w1, FUTEX_REQUEUE, 0, INT_MAX, &w2, 0);
  printf("%s: returned %ld\n", what, r);
  settle();
  long r2 = futex(&w2, FUTEX_WAKE, INT_MAX, 0, NULL, 0);
  printf("%s: the wake of the second word woke %ld\n", what, r2);
  pthread_join(a.t, NULL);
  pthread_join(b.t, NULL);
}

// A waiter with a deadline, moved to another word and then never woken,
// times out there (under loom its timeout unqueues it from the second
// word's bucket); and a WAKE_OP on a bad second address is EFAULT.
static _Atomic uint32_t t1, t2;
static void* timed_thread(void* arg) {
  (void)arg;
  struct timespec t = {0, 400 * 1000 * 1000};
  long r = syscall(SYS_futex, &t1, FUTEX_WAIT | priv, 0, &t, NULL, 0);
  printf("requeued timed waiter: %s\n", r == -1 && errno == ETIMEDOUT ? "ETIMEDOUT" : "woken (WRONG)");
  return NULL;
}

static void edges(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, timed_thread, NULL) != 0) abort();
  usleep(100 * 1000);
  printf("requeue of the timed waiter: %ld\n", futex(&t1, FUTEX_REQUEUE, 0, 1, &t2, 0));
  pthread_join(t, NULL);
  errno = 0;
  long r = futex(&t1, FUTEX_WAKE_OP, 1, 1, (_Atomic uint32_t*)8, FUTEX_OP(FUTEX_OP_SET, 1, FUTEX_OP_CMP_EQ, 0));
  printf("wake_op on a bad address: %ld (%s)\n", r, errno == EFAULT ? "EFAULT" : "not EFAULT");
}

// Bad arguments leave the waiters alone (an outside review of issue 35's
// item 4): a CMP_REQUEUE to a misaligned second word is EINVAL, a wake or
// requeue with FUTEX_CLOCK_REALTIME ENOSYS, a WAKE_OP on a misaligned first
// word EINVAL with the second word unchanged — and a wake of 0 wakes one.
static void bad_arguments(void) {
  static _Atomic uint32_t w1, w2;
  static _Atomic uint32_t pair[2];
  atomic_store(&done, 0);
  struct waiter a;
  start(&a, &w1, "waiter left alone by bad arguments");
  settle();
  errno = 0;
  long r = futex(&w1, FUTEX_CMP_REQUEUE, 1, 1, (_Atomic uint32_t*)((char*)&w2 + 1), 0);
  printf("cmp_requeue to a misaligned word: %ld (%s)\n", r, errno == EINVAL ? "EINVAL" : "not EINVAL");
  errno = 0;
  r = futex(&w1, FUTEX_CMP_REQUEUE | FUTEX_CLOCK_REALTIME, 1, 1, &w2, 0);
  printf("cmp_requeue with FUTEX_CLOCK_REALTIME: %ld (%s)\n", r, errno == ENOSYS ? "ENOSYS" : "not ENOSYS");
  errno = 0;
  r = futex(&w1, FUTEX_WAKE | FUTEX_CLOCK_REALTIME, 1, 0, NULL, 0);
  printf("wake with FUTEX_CLOCK_REALTIME: %ld (%s)\n", r, errno == ENOSYS ? "ENOSYS" : "not ENOSYS");
  errno = 0;
  r = futex((_Atomic uint32_t*)((char*)&pair[0] + 1), FUTEX_WAKE_OP, 1, 1, &w2,
            FUTEX_OP(FUTEX_OP_SET, 7, FUTEX_OP_CMP_EQ, 0));
  printf("wake_op on a misaligned word: %ld (%s), uaddr2 now %u\n", r, errno == EINVAL ? "EINVAL" : "not EINVAL",
         (unsigned)atomic_load(&w2));
  atomic_store(&done, 1);
  r = futex(&w1, FUTEX_WAKE, 0, 0, NULL, 0);
  printf("wake of 0: woke %ld\n", r);
  pthread_join(a.t, NULL);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 0; i < 2; ++i) {
    priv = i ? FUTEX_PRIVATE_FLAG : 0;
    printf("-- %s\n", i ? "private" : "shared");
    wake_op();
    requeue(0);
    requeue(1);
    edges();
    bad_arguments();
  }
  if (atomic_load(&failed)) {
    printf("futex_ops: a waiter was missed\n");
    return 1;
  }
  printf("futex_ops: every waiter woken\n");
  return 0;
}
