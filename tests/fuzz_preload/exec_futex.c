/* exec_futex.c — OP_FUTEX and OP_FUTEX1: the program's own futex calls
 * (syscall(SYS_futex), which libloom-pthread defines): waiters woken by
 * WAKE, WAKE_BITSET, WAKE_OP, REQUEUE and CMP_REQUEUE, private, shared, in
 * MAP_SHARED memory; one thread's calls and the kernel's errors. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec.h"

/* ---- futexes ------------------------------------------------------------------------------ */

static uint32_t private_words[8] __attribute__((aligned(64)));
static uint32_t* shared_words; /* one MAP_SHARED page, mapped at start */

static long futex(uint32_t* a, int op, uint32_t val, const void* t, uint32_t* a2, uint32_t val3) {
  return syscall(SYS_futex, a, op, val, t, a2, val3);
}

struct waiter {
  uint32_t* word;
  int op; /* FUTEX_WAIT or FUTEX_WAIT_BITSET (with the private flag or not) */
  uint32_t bits;
  long timeout_ms;
  long r;
  int err;
  atomic_int* arrived;
  atomic_int done;
};

static void* wait_thread(void* p) {
  struct waiter* w = p;
  struct timespec t;
  if ((w->op & FUTEX_CMD_MASK) == FUTEX_WAIT_BITSET) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += w->timeout_ms / 1000;
    t.tv_nsec += (w->timeout_ms % 1000) * 1000000;
    if (t.tv_nsec >= 1000000000) {
      t.tv_sec++;
      t.tv_nsec -= 1000000000;
    }
  } else {
    t.tv_sec = w->timeout_ms / 1000;
    t.tv_nsec = (w->timeout_ms % 1000) * 1000000;
  }
  atomic_fetch_add(w->arrived, 1);
  errno = 0;
  w->r = futex(w->word, w->op, 0, &t, NULL, w->bits);
  w->err = errno;
  atomic_store(&w->done, 1);
  return NULL;
}

static int all_done(struct waiter* w, int n) {
  for (int i = 0; i < n; ++i)
    if (!atomic_load(&w[i].done)) return 0;
  return 1;
}

/* OP_FUTEX: waiters parked on A (and B), then woken by the step's operation,
 * repeated until every waiter has returned (a waiter that had not parked yet
 * when an operation came is found by the next one) or 3 s have passed: a
 * waiter the operation misses waits to its own 4 s timeout and says so. */
static void do_futex(const Step* st) {
  int kind = st->a % 6, n = 1 + st->b % 4, mem = st->c % 3, d = st->d;
  int priv = mem == 0 ? FUTEX_PRIVATE_FLAG : 0;
  uint32_t* words = mem == 2 ? shared_words : private_words;
  uint32_t *A = &words[0], *B = &words[4];
  *A = 0;
  *B = 0;
  static const char* kinds[] = {"WAKE", "WAKE_BITSET", "WAKE_OP", "REQUEUE", "CMP_REQUEUE", "timed REQUEUE"};
  static const char* mems[] = {"private", "shared op, private memory", "shared op, MAP_SHARED memory"};
  struct waiter w[5];
  atomic_int arrived = 0;
  uint32_t bits = FUTEX_BITSET_MATCH_ANY;
  /* WAKE_BITSET: plain waits woken with some bits (d & 8: all of them), or
   * waits with bits of their own woken with those bits after a wake with
   * others, which wakes nobody. */
  int wait_op = FUTEX_WAIT;
  uint32_t wake_bits = d & 8 ? FUTEX_BITSET_MATCH_ANY : 1u << ((d >> 1) % 3);
  if (kind == 1 && !(d & 1)) {
    wait_op = FUTEX_WAIT_BITSET;
    bits = wake_bits = 1u << ((d >> 1) % 3);
  }
  int nw = kind == 5 ? n + 1 : n;
  pthread_t t[5];
  for (int i = 0; i < nw; ++i) {
    w[i] = (struct waiter){.word = kind == 2 && (i & 1) ? B : A,
                           .op = wait_op | priv,
                           .bits = bits,
                           .timeout_ms = kind == 5 && i == n ? 50 : 4000,
                           .arrived = &arrived};
    atomic_init(&w[i].done, 0);
    spawn(&t[i], wait_thread, &w[i]);
  }
  while (atomic_load(&arrived) < nw) usleep(100);
  usleep(2000);
  char first[64] = "";
  long t0 = now_ms();
  if (kind == 1 && wait_op == FUTEX_WAIT_BITSET) { /* bits nobody waits with wake nobody */
    long r = futex(A, FUTEX_WAKE_BITSET | priv, INT_MAX, NULL, NULL, ~bits & 7);
    snprintf(first, sizeof first, " (other bits first: %s)", res(r, errno));
  }
  if (kind == 4) {
    long r = futex(A, FUTEX_CMP_REQUEUE | priv, 0, (void*)(long)INT_MAX, B, 1); /* *A is 0, not 1 */
    snprintf(first, sizeof first, " (a wrong value first: %s)", res(r, errno));
  }
  /* WAKE_OP's operation and comparison: every one true for an old value of 0. */
  static const int ops[] = {FUTEX_OP_SET, FUTEX_OP_ADD, FUTEX_OP_OR, FUTEX_OP_ANDN, FUTEX_OP_XOR};
  static const struct {
    int cmp, arg;
  } cmps[] = {{FUTEX_OP_CMP_EQ, 0},   {FUTEX_OP_CMP_GE, 0}, {FUTEX_OP_CMP_NE, 5},
              {FUTEX_OP_CMP_LT, 100}, {FUTEX_OP_CMP_LE, 0}, {FUTEX_OP_CMP_GT, -1}};
  uint32_t encoded = (uint32_t)FUTEX_OP(ops[(d >> 2) % 5], 1, cmps[(d >> 5) % 6].cmp, cmps[(d >> 5) % 6].arg & 0xfff);
  while (!all_done(w, n) && now_ms() - t0 < 3000) {
    switch (kind) {
      case 0:
        futex(A, FUTEX_WAKE | priv, d & 1 ? 1 : INT_MAX, NULL, NULL, 0);
        break;
      case 1:
        futex(A, FUTEX_WAKE_BITSET | priv, d & 16 ? 1 : INT_MAX, NULL, NULL, wake_bits);
        break;
      case 2:
        futex(A, FUTEX_WAKE_OP | priv, INT_MAX, (void*)(long)INT_MAX, B, encoded);
        break;
      case 3:
      case 4:
        futex(A, (kind == 3 ? FUTEX_REQUEUE : FUTEX_CMP_REQUEUE) | priv, (uint32_t)(d & 1), (void*)(long)INT_MAX, B, 0);
        futex(B, FUTEX_WAKE | priv, INT_MAX, NULL, NULL, 0);
        break;
      case 5:
        /* All moved to B, the timed one too; B woken only after 100 ms, when
         * the timed one (50 ms) has surely timed out there. */
        futex(A, FUTEX_CMP_REQUEUE | priv, 0, (void*)(long)INT_MAX, B, 0);
        usleep(100000);
        futex(B, FUTEX_WAKE | priv, INT_MAX, NULL, NULL, 0);
        break;
    }
    usleep(500);
  }
  int missed = !all_done(w, n);
  for (int i = 0; i < nw; ++i) pthread_join(t[i], NULL);
  char line[256];
  int len =
      snprintf(line, sizeof line, "futex %s, %s, %d waiter%s%s:", kinds[kind], mems[mem], n, n > 1 ? "s" : "", first);
  for (int i = 0; i < nw; ++i) {
    /* A waiter on B may find B changed before it parks (WAKE_OP): EAGAIN is as good as a wake there. */
    int ok = w[i].r == 0 || (w[i].word == B && w[i].r < 0 && w[i].err == EAGAIN);
    len += snprintf(line + len, sizeof line - (size_t)len, " %s", ok ? "woken" : res(w[i].r, w[i].err));
  }
  out("%s%s", line, missed ? " (NOT all woken in 3 s)" : "");
}

/* OP_FUTEX1: one thread's futex calls and their errors. */
static void do_futex1(const Step* st) {
  int priv = st->c & 1 ? FUTEX_PRIVATE_FLAG : 0;
  uint32_t* words = st->c & 2 ? shared_words : private_words;
  uint32_t *A = &words[0], *B = &words[4];
  *A = 0;
  *B = (uint32_t)(st->d % 7);
  struct timespec ms = {0, 1000000}, past = {0, 0};
  int how = st->a % 12;
  long r = 0;
  errno = 0;
  static const int ops[] = {FUTEX_OP_SET, FUTEX_OP_ADD, FUTEX_OP_OR, FUTEX_OP_ANDN, FUTEX_OP_XOR};
  static const char* names[] = {"WAIT on another value",
                                "WAIT 1 ms",
                                "WAIT_BITSET at a past time",
                                "WAKE nobody",
                                "WAKE_OP nobody",
                                "REQUEUE nobody",
                                "CMP_REQUEUE with a wrong value",
                                "WAIT misaligned",
                                "WAIT_BITSET with no bits",
                                "an unknown operation",
                                "WAKE with CLOCK_REALTIME",
                                "CMP_REQUEUE to a misaligned word"};
  switch (how) {
    case 0:
      r = futex(A, FUTEX_WAIT | priv, 1, NULL, NULL, 0);
      break;
    case 1:
      r = futex(A, FUTEX_WAIT | priv, 0, &ms, NULL, 0);
      break;
    case 2:
      r = futex(A, FUTEX_WAIT_BITSET | priv, 0, &past, NULL, FUTEX_BITSET_MATCH_ANY);
      break;
    case 3:
      r = futex(A, FUTEX_WAKE | priv, 1, NULL, NULL, 0);
      break;
    case 4:
      r = futex(A, FUTEX_WAKE_OP | priv, 1, (void*)1L, B,
                (uint32_t)FUTEX_OP(ops[st->d % 5], st->d % 9, FUTEX_OP_CMP_GT, 2));
      break;
    case 5:
      r = futex(A, FUTEX_REQUEUE | priv, 1, (void*)1L, B, 0);
      break;
    case 6:
      r = futex(A, FUTEX_CMP_REQUEUE | priv, 1, (void*)1L, B, 1);
      break;
    case 7:
      r = futex((uint32_t*)((char*)A + 1), FUTEX_WAIT | priv, 0, &ms, NULL, 0);
      break;
    case 8:
      r = futex(A, FUTEX_WAIT_BITSET | priv, 0, &past, NULL, 0);
      break;
    case 9:
      r = futex(A, 99 | priv, 0, NULL, NULL, 0);
      break;
    case 10:
      r = futex(A, FUTEX_WAKE | FUTEX_CLOCK_REALTIME | priv, 1, NULL, NULL, 0);
      break;
    case 11:
      r = futex(A, FUTEX_CMP_REQUEUE | priv, 1, (void*)1L, (uint32_t*)((char*)B + 2), 0);
      break;
  }
  int e = errno;
  char after[48] = "";
  if (how == 4) snprintf(after, sizeof after, ", second word now %u", *B);
  out("futex1 %s%s%s -> %s%s", names[how], priv ? " private" : "", st->c & 2 ? " in MAP_SHARED memory" : "", res(r, e),
      after);
}

void map_shared_words(void) {
  shared_words = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
}

void exec_futex(const Step* st) {
  if (st->op == OP_FUTEX)
    do_futex(st);
  else
    do_futex1(st);
}
