/* exec_episodes.c — the steps that are small programs of their own: futex
 * waits woken every way, signals, several threads (and a child process)
 * reading one file through a shared offset, fork and exec, pthread
 * synchronisation, sleeps (scenario.h). Each one's output is fixed by
 * Linux however its threads are scheduled. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <semaphore.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec.h"

extern char** environ;
void evict(int file, int patchy, long size);

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

/* ---- signals ------------------------------------------------------------------------------ */

static atomic_int handled[65];
static pthread_t handled_on[65];
static atomic_int handled_value;

static void handler(int sig, siginfo_t* si, void* uc) {
  (void)uc;
  handled_on[sig] = pthread_self();
  atomic_store(&handled_value, si ? si->si_value.sival_int : 0);
  atomic_fetch_add(&handled[sig], 1);
}

void install_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGUSR2, &sa, NULL);
  sigaction(SIGRTMIN + 1, &sa, NULL);
}

static void mask(int how, int sig) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, sig);
  pthread_sigmask(how, &s, NULL);
}

struct sigthread {
  int kind, sig, fd;
  long r;
  int err, got, code, value, on_self, values[3];
  pthread_t self;
  atomic_int ready;
};

static void* sig_thread(void* p) {
  struct sigthread* s = p;
  s->self = pthread_self();
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, s->sig);
  siginfo_t si;
  atomic_store(&s->ready, 1);
  switch (s->kind) {
    case 1: /* sigwait */
      s->r = sigwait(&set, &s->got);
      break;
    case 2: /* sigwaitinfo */
      s->r = sigwaitinfo(&set, &si);
      s->err = errno;
      s->got = si.si_signo;
      s->code = si.si_code;
      s->value = si.si_pid == getpid();
      break;
    case 3:
    case 9: { /* sigsuspend with the signal open */
      sigset_t open;
      pthread_sigmask(SIG_BLOCK, NULL, &open);
      sigdelset(&open, s->sig);
      s->r = sigsuspend(&open);
      s->err = errno;
      s->on_self = pthread_equal(handled_on[s->sig], pthread_self());
      break;
    }
    case 8: /* three queued real-time signals, in order */
      for (int i = 0; i < 3; ++i) {
        s->r = sigwaitinfo(&set, &si);
        s->values[i] = si.si_value.sival_int;
      }
      break;
    case 10: { /* ppoll on a pipe nobody writes, the signal open during it */
      sigset_t open;
      pthread_sigmask(SIG_BLOCK, NULL, &open);
      sigdelset(&open, s->sig);
      struct pollfd f = {s->fd, POLLIN, 0};
      s->r = ppoll(&f, 1, NULL, &open);
      s->err = errno;
      s->on_self = pthread_equal(handled_on[s->sig], pthread_self());
      break;
    }
  }
  return NULL;
}

static volatile sig_atomic_t chld;
static void on_chld(int sig) {
  (void)sig;
  chld++;
}

static void do_signal(const Step* st) {
  int kind = st->a % 11;
  for (int i = 0; i < 65; ++i) atomic_store(&handled[i], 0);
  sigset_t none;
  sigemptyset(&none);
  switch (kind) {
    case 0: {
      raise(SIGUSR1);
      out("signal raise(SIGUSR1): handler ran %d time(s) before raise returned", atomic_load(&handled[SIGUSR1]));
      break;
    }
    case 1:
    case 2:
    case 3:
    case 8:
    case 9:
    case 10: {
      static const char* names[] = {"",
                                    "pthread_kill to a thread in sigwait",
                                    "kill to the process, a thread in sigwaitinfo",
                                    "pthread_kill to a thread in sigsuspend",
                                    "",
                                    "",
                                    "",
                                    "",
                                    "three pthread_sigqueue to a thread in sigwaitinfo",
                                    "kill to the process, a thread in sigsuspend",
                                    "pthread_kill to a thread in ppoll"};
      struct sigthread s;
      memset(&s, 0, sizeof s);
      s.kind = kind;
      s.sig = kind == 8 ? SIGRTMIN + 1 : kind == 1 || kind == 2 ? SIGUSR2 : SIGUSR1;
      int p[2] = {-1, -1};
      if (kind == 10 && pipe(p) == 0) s.fd = p[0];
      mask(SIG_BLOCK, s.sig); /* main never takes it; the thread inherits it blocked */
      pthread_t t;
      pthread_create(&t, NULL, sig_thread, &s);
      while (!atomic_load(&s.ready)) usleep(100);
      usleep(1000);
      if (kind == 2 || kind == 9) {
        kill(getpid(), s.sig);
      } else if (kind == 8) {
        for (int i = 0; i < 3; ++i) pthread_sigqueue(t, s.sig, (union sigval){.sival_int = 10 + i});
      } else {
        pthread_kill(t, s.sig);
      }
      pthread_join(t, NULL);
      mask(SIG_UNBLOCK, s.sig);
      if (p[0] >= 0) {
        close(p[0]);
        close(p[1]);
      }
      if (kind == 1)
        out("signal %s -> %ld, got %s", names[kind], s.r, s.got == SIGUSR2 ? "SIGUSR2" : "WRONG");
      else if (kind == 2)
        out("signal %s -> %s, got %s, SI_USER %s, from this process %s", names[kind], s.r > 0 ? "ok" : res(s.r, s.err),
            s.got == SIGUSR2 ? "SIGUSR2" : "WRONG", s.code == SI_USER ? "yes" : "no", s.value ? "yes" : "no");
      else if (kind == 8)
        out("signal %s -> values %d %d %d", names[kind], s.values[0], s.values[1], s.values[2]);
      else
        out("signal %s -> %s, handler ran %d time(s), on that thread %s", names[kind], res(s.r, s.err),
            atomic_load(&handled[s.sig]), s.on_self ? "yes" : "no");
      break;
    }
    case 4: {
      mask(SIG_BLOCK, SIGUSR1);
      raise(SIGUSR1);
      sigset_t pend;
      sigpending(&pend);
      int was = sigismember(&pend, SIGUSR1), before = atomic_load(&handled[SIGUSR1]);
      mask(SIG_UNBLOCK, SIGUSR1);
      out("signal blocked raise: pending %s, handler before unblock %d, after %d", was ? "yes" : "no", before,
          atomic_load(&handled[SIGUSR1]));
      break;
    }
    case 5: {
      mask(SIG_BLOCK, SIGUSR1);
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGUSR1);
      int fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
      struct signalfd_siginfo si;
      errno = 0;
      long r0 = read(fd, &si, sizeof si);
      int e0 = errno;
      int how = st->d % 3;
      if (how == 0)
        kill(getpid(), SIGUSR1);
      else if (how == 1)
        raise(SIGUSR1);
      else
        pthread_kill(pthread_self(), SIGUSR1);
      errno = 0;
      long r1 = read(fd, &si, sizeof si);
      int e1 = errno;
      close(fd);
      sigset_t pend;
      sigpending(&pend);
      int left = sigismember(&pend, SIGUSR1);
      if (left) { /* take it, so that the unblock does not run the handler later */
        int got;
        sigwait(&set, &got);
      }
      mask(SIG_UNBLOCK, SIGUSR1);
      out("signal signalfd, empty read %s, after %s: %s%s, still pending %s", res(r0, e0),
          how == 0   ? "kill"
          : how == 1 ? "raise"
                     : "pthread_kill",
          res(r1, e1), r1 == (long)sizeof si ? (si.ssi_signo == SIGUSR1 ? " SIGUSR1" : " WRONG") : "",
          left ? "yes" : "no");
      break;
    }
    case 6: {
      struct sigaction sa, old;
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = on_chld;
      sa.sa_flags = SA_RESTART;
      sigaction(SIGCHLD, &sa, &old);
      chld = 0;
      pid_t pid = fork();
      if (pid == 0) _exit(3);
      int status = 0;
      pid_t w = waitpid(pid, &status, 0);
      for (long t0 = now_ms(); !chld && now_ms() - t0 < 2000;) usleep(200);
      sigaction(SIGCHLD, &old, NULL);
      out("signal SIGCHLD: waitpid %s, exit %d, handler ran %s", w == pid ? "ok" : "WRONG",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1, chld ? "yes" : "no");
      break;
    }
    case 7: {
      mask(SIG_BLOCK, SIGUSR2);
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGUSR2);
      struct timespec zero = {0, 0};
      siginfo_t si;
      errno = 0;
      int r0 = sigtimedwait(&set, &si, &zero), e0 = errno;
      sigqueue(getpid(), SIGUSR2, (union sigval){.sival_int = 42});
      int r1 = sigtimedwait(&set, &si, &zero);
      mask(SIG_UNBLOCK, SIGUSR2);
      out("signal sigtimedwait nothing -> %s; after sigqueue -> %s value %d SI_QUEUE %s", res(r0, e0),
          r1 == SIGUSR2 ? "SIGUSR2" : res(r1, errno), r1 == SIGUSR2 ? si.si_value.sival_int : 0,
          r1 == SIGUSR2 && si.si_code == SI_QUEUE ? "yes" : "no");
      break;
    }
  }
  pthread_sigmask(SIG_SETMASK, &none, NULL);
}

/* ---- threads, each blocked on a pipe of its own --------------------------------------------- */

struct piper {
  int fd;
  long r;
  uint8_t b[16];
};
static void* pipe_thread(void* p) {
  struct piper* q = p;
  q->r = read(q->fd, q->b, sizeof q->b);
  return NULL;
}

static void do_pipes(const Step* st) {
  int n = 2 + st->a % 5, p[6][2];
  struct piper q[6];
  pthread_t t[6];
  for (int i = 0; i < n; ++i) {
    if (pipe(p[i]) != 0) return;
    q[i] = (struct piper){.fd = p[i][0]};
    spawn(&t[i], pipe_thread, &q[i]);
  }
  int order[6];
  for (int i = 0; i < n; ++i) order[i] = i;
  uint32_t r = st->r;
  for (int i = n - 1; i > 0; --i) {
    r = (uint32_t)mix64(r);
    int j = (int)(r % (uint32_t)(i + 1)), x = order[i];
    order[i] = order[j];
    order[j] = x;
  }
  for (int i = 0; i < n; ++i) {
    char c[3] = {'a', (char)('0' + order[i]), '\n'};
    write(p[order[i]][1], c, (size_t)(1 + (order[i] % 3)));
    if (st->b & 1) usleep(300);
  }
  char line[128];
  int len = snprintf(line, sizeof line, "pipes %d threads woken in a seeded order:", n);
  for (int i = 0; i < n; ++i) {
    pthread_join(t[i], NULL);
    len += snprintf(line + len, sizeof line - (size_t)len, " %ld", q[i].r);
    close(p[i][0]);
    close(p[i][1]);
  }
  out("%s", line);
}

/* ---- pthread synchronisation ------------------------------------------------------------------ */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_barrier_t bar;
static sem_t sem_a, sem_b;
static long counter, queued, serials;
static int sync_kind, sync_n;

static void* sync_thread(void* p) {
  long id = (long)(intptr_t)p;
  switch (sync_kind) {
    case 0:
      for (int i = 0; i < 1000; ++i) {
        pthread_mutex_lock(&mu);
        counter++;
        pthread_mutex_unlock(&mu);
      }
      break;
    case 1: /* thread 0 consumes what the others produce */
      if (id == 0) {
        for (int got = 0; got < 100 * (sync_n - 1); ++got) {
          pthread_mutex_lock(&mu);
          while (queued == 0) pthread_cond_wait(&cv, &mu);
          queued--;
          counter++;
          pthread_mutex_unlock(&mu);
        }
      } else {
        for (int i = 0; i < 100; ++i) {
          pthread_mutex_lock(&mu);
          queued++;
          pthread_cond_signal(&cv);
          pthread_mutex_unlock(&mu);
        }
      }
      break;
    case 2: /* ping-pong between threads 0 and 1 */
      for (int i = 0; i < 100 && id < 2; ++i) {
        sem_wait(id == 0 ? &sem_a : &sem_b);
        __atomic_fetch_add(&counter, 1, __ATOMIC_SEQ_CST);
        sem_post(id == 0 ? &sem_b : &sem_a);
      }
      break;
    case 3:
      for (int i = 0; i < 10; ++i)
        if (pthread_barrier_wait(&bar) == PTHREAD_BARRIER_SERIAL_THREAD)
          __atomic_fetch_add(&serials, 1, __ATOMIC_SEQ_CST);
      break;
    case 4:
      for (int i = 0; i < 200; ++i) {
        if (i % 4 == (int)id % 4) {
          pthread_rwlock_wrlock(&rw);
          counter++;
          pthread_rwlock_unlock(&rw);
        } else {
          pthread_rwlock_rdlock(&rw);
          pthread_rwlock_unlock(&rw);
        }
      }
      break;
  }
  return NULL;
}

static void do_sync(const Step* st) {
  sync_kind = st->a % 5;
  sync_n = 2 + st->b % 3;
  counter = queued = serials = 0;
  sem_init(&sem_a, 0, 1);
  sem_init(&sem_b, 0, 0);
  pthread_barrier_init(&bar, NULL, (unsigned)sync_n);
  pthread_t t[4];
  for (int i = 0; i < sync_n; ++i) spawn(&t[i], sync_thread, (void*)(intptr_t)i);
  for (int i = 0; i < sync_n; ++i) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  sem_destroy(&sem_a);
  sem_destroy(&sem_b);
  static const char* names[] = {"mutex", "condvar", "semaphores", "barrier", "rwlock"};
  out("sync %s, %d threads -> counter %ld, serial threads %ld", names[sync_kind], sync_n, counter, serials);
}

/* ---- sleeps ----------------------------------------------------------------------------------- */

static void do_sleep(const Step* st) {
  int how = st->a % 7;
  struct timespec t = {0, 1000000}, bad = {0, 1000000000}, neg = {-1, 0}, past = {0, 0};
  long r = 0;
  errno = 0;
  static const char* names[] = {"nanosleep 1 ms",
                                "nanosleep bad nsec",
                                "clock_nanosleep absolute past",
                                "usleep(0)",
                                "clock_nanosleep unknown clock",
                                "sleep(0)",
                                "nanosleep negative"};
  switch (how) {
    case 0:
      r = nanosleep(&t, NULL);
      break;
    case 1:
      r = nanosleep(&bad, NULL);
      break;
    case 2:
      r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &past, NULL); /* returns the error */
      break;
    case 3:
      r = usleep(0);
      break;
    case 4:
      r = clock_nanosleep(12345, 0, &t, NULL);
      break;
    case 5:
      r = sleep(0);
      break;
    case 6:
      r = nanosleep(&neg, NULL);
      break;
  }
  out("sleep %s -> %s", names[how], res(r, errno));
}

/* ---- one file read through one offset by several threads (and a child) ----------------------- */

/* What Linux guarantees of read(2) on a regular file shared by threads (and
 * a parent and its child): each read is atomic with respect to the offset —
 * its bytes are one contiguous piece of the file, and between them the
 * reads cover the file from where they started exactly once — and whole:
 * all it asked for, unless it reaches the end. The first two are always
 * checked; wholeness (short reads, reads off the chunk grid) only where
 * loom's documented short read of a trusted descriptor is not left out
 * (X_EVICT, docs/DESIGN.md "A regular file's read is one system call"). */
struct shared {
  int fd, file;
  long size, start, chunk;
  atomic_uchar* bytes; /* per byte of the file: times read (MAP_SHARED: a child counts too) */
  atomic_long* stats;  /* reads, torn, short, off the grid, errors */
};

/* The offset a buffer of file bytes came from (its words name it), or -1. */
static long offset_of(const uint8_t* b, long n, int file) {
  for (long s = 0; s < 4 && s + 4 <= n; ++s) {
    uint32_t w;
    memcpy(&w, b + s, 4);
    long off = (long)(w ^ file_word(file, 0)) * 4 - s; /* (w ^ salt is the word's index) */
    if (off >= 0 && file_bytes_ok(b, n, file, off)) return off;
  }
  return -1;
}

static void* shared_reader(void* p) {
  struct shared* sh = p;
  uint8_t* b = malloc((size_t)sh->chunk);
  for (;;) {
    long n = read(sh->fd, b, (size_t)sh->chunk);
    if (n <= 0) {
      if (n < 0) atomic_fetch_add(&sh->stats[4], 1);
      break;
    }
    atomic_fetch_add(&sh->stats[0], 1);
    long off = offset_of(b, n, sh->file);
    if (off < 0 || off + n > sh->size) {
      atomic_fetch_add(&sh->stats[1], 1); /* not one contiguous piece of the file: torn */
      continue;
    }
    for (long i = 0; i < n; ++i) atomic_fetch_add(&sh->bytes[off + i], 1);
    long want = sh->size - off < sh->chunk ? sh->size - off : sh->chunk;
    if (n != want) atomic_fetch_add(&sh->stats[2], 1);
    if ((off - sh->start) % sh->chunk) atomic_fetch_add(&sh->stats[3], 1);
  }
  free(b);
  return NULL;
}

static void do_shared(const Model* m, const Step* st) {
  const Ofd* o = &m->o[m->s[st->s[0]].ofd];
  static const long chunks[] = {4096, 8192, 12288, 16384, 65536, 4000};
  int threads = 2 + st->a % 3, cache = st->d & 3, forked = (st->d >> 2) & 1;
  long chunk = chunks[st->b % 6], size = o->size;
  long start = (long)(st->c % (uint32_t)(size / 4096)) * 4096;
  if (cache == 1) {
    int k = keeper[o->file];
    static uint8_t b[1 << 16];
    for (long off = 0; off < size; off += (long)sizeof b) pread(k, b, sizeof b, off);
  } else if (cache >= 2) {
    evict(o->file, cache == 2, size);
  }
  int fd = fdof[st->s[0]];
  int fresh = !shared_through_slot(m, st);
  if (fresh) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", keeper[o->file]);
    fd = open(path, O_RDONLY | O_CLOEXEC);
  }
  if (cache >= 2) posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM); /* the pattern stays as it is */
  lseek(fd, start, SEEK_SET);
  size_t bytes = sizeof(atomic_long) * 8 + (size_t)size;
  atomic_long* mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  struct shared sh = {fd, o->file, size, start, chunk, (atomic_uchar*)(mem + 8), mem};
  pid_t child = -1;
  if (forked) {
    child = fork();
    if (child == 0) {
      pthread_t t;
      pthread_create(&t, NULL, shared_reader, &sh);
      shared_reader(&sh);
      pthread_join(t, NULL);
      _exit(0);
    }
  }
  pthread_t t[4];
  for (int i = 0; i < threads; ++i) spawn(&t[i], shared_reader, &sh);
  for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
  int status = 0;
  if (child > 0) waitpid(child, &status, 0);
  long missing = 0, twice = 0;
  for (long i = 0; i < size; ++i) {
    int v = atomic_load(&sh.bytes[i]);
    if (i >= start && v == 0) missing++;
    if (v > 1 || (i < start && v)) twice++;
  }
  long end = lseek(fd, 0, SEEK_CUR);
  char whole[96] = "";
  if (!(m->exclude & X_EVICT))
    snprintf(whole, sizeof whole, "; short %ld, off the chunk grid %ld", atomic_load(&mem[2]), atomic_load(&mem[3]));
  out("shared-read s%d%s %d threads%s, chunk %ld from %ld of %ld (%s): torn %ld, bytes missed %ld, read twice %ld, "
      "errors %ld, offset at the end %s%s",
      st->s[0], fresh ? " (a fresh descriptor)" : "", threads, forked ? " and a child's two" : "", chunk, start, size,
      cache == 0   ? "cache as is"
      : cache == 1 ? "cached"
      : cache == 2 ? "patchy"
                   : "cold",
      atomic_load(&mem[1]), missing, twice, atomic_load(&mem[4]), end == size ? "yes" : "NO", whole);
  munmap(mem, bytes);
  if (fresh) {
    close(fd);
    /* The file whole in the cache again, for the slot's own descriptor (which may be trusted). */
    int k = keeper[o->file];
    static uint8_t b[1 << 16];
    for (long off = 0; off < size; off += (long)sizeof b) pread(k, b, sizeof b, off);
  }
}

/* ---- fork, exec, posix_spawn ------------------------------------------------------------------- */

void child_op(int op, int fd, long n, uint32_t r, int kind, int file, long off, char* buf, int len) {
  static uint8_t b[8192 + 64];
  long x;
  errno = 0;
  switch (op) {
    case FK_READ:
    case FK_BLOCKED:
      x = read(fd, b, (size_t)n);
      if (x > 0 && kind == K_FILE)
        snprintf(buf, (size_t)len, "read %ld %s", x, file_bytes_ok(b, x, file, off) ? "pattern ok" : "pattern BAD");
      else if (x > 0 && kind != K_URANDOM)
        snprintf(buf, (size_t)len, "read %ld digest %08x", x, digest(b, (size_t)x));
      else
        snprintf(buf, (size_t)len, "read %s", res(x, errno));
      break;
    case FK_WRITE:
      if (kind == K_FILE)
        file_bytes(b, n, file, off);
      else
        fill_bytes(b, n, r);
      if (kind == K_EVENTFD && n >= 8) {
        uint64_t v = 1 + r % 3;
        memcpy(b, &v, 8);
      }
      x = write(fd, b, (size_t)n);
      snprintf(buf, (size_t)len, "write %s", res(x, errno));
      break;
    case FK_SETNB: {
      int one = 1;
      snprintf(buf, (size_t)len, "ioctl(FIONBIO, 1) %s", res(ioctl(fd, FIONBIO, &one), errno));
      break;
    }
    case FK_CLEARNB: {
      int fl = fcntl(fd, F_GETFL);
      snprintf(buf, (size_t)len, "clear O_NONBLOCK %s", res(fl < 0 ? fl : fcntl(fd, F_SETFL, fl & ~O_NONBLOCK), errno));
      break;
    }
    case FK_GETFL: {
      int fl = fcntl(fd, F_GETFL);
      snprintf(buf, (size_t)len, "getfl %s", fl < 0 ? res(fl, errno) : fl & O_NONBLOCK ? "nonblock" : "blocking");
      break;
    }
    default:
      snprintf(buf, (size_t)len, "descriptor %s", fcntl(fd, F_GETFD) >= 0 ? "open" : "closed");
      break;
  }
}

static void do_fork(const Model* m, const Step* st) {
  int s = st->s[0], fd = fdof[s], op = st->a % FK_N, mode = st->b % 3, i = m->s[s].ofd;
  const Ofd* o = &m->o[i];
  long n = step_len(st);
  long off = o->kind == K_FILE ? (op == FK_WRITE && o->append ? o->size : o->off) : 0;
  int rp[2];
  if ((mode == 0 ? pipe2(rp, O_CLOEXEC) : pipe(rp)) != 0) return;
  pid_t pid = -1;
  char a[8][32];
  char* argv[10];
  snprintf(a[0], 32, "--child");
  snprintf(a[1], 32, "%d", op);
  snprintf(a[2], 32, "%d", fd);
  snprintf(a[3], 32, "%ld", n);
  snprintf(a[4], 32, "%u", st->r);
  snprintf(a[5], 32, "%d %d %ld", o->kind, o->file, off);
  snprintf(a[6], 32, "%d", rp[1]);
  argv[0] = (char*)"fuzz_preload_scenario";
  for (int k = 0; k < 7; ++k) argv[k + 1] = a[k];
  argv[8] = NULL;
  if (mode == 2) {
    if (posix_spawn(&pid, self_exe, NULL, NULL, argv, environ) != 0) pid = -1;
  } else {
    pid = fork();
    if (pid == 0) {
      if (mode == 1) {
        execv(self_exe, argv);
        _exit(127);
      }
      char line[128];
      child_op(op, fd, n, st->r, o->kind, o->file, off, line, sizeof line);
      write(rp[1], line, strlen(line));
      _exit(0);
    }
  }
  close(rp[1]);
  if (op == FK_BLOCKED && pid > 0 && !(mode && m->s[s].cloexec)) {
    usleep(2000);
    static uint8_t b[512];
    long mm = 1 + st->r % 512;
    fill_bytes(b, mm, st->r);
    write(fdof[st->s[1]], b, (size_t)mm);
  }
  char line[160] = "";
  long got = 0, x;
  while (got < (long)sizeof line - 1 && (x = read(rp[0], line + got, sizeof line - 1 - (size_t)got)) > 0) got += x;
  line[got] = 0;
  close(rp[0]);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  static const char* modes[] = {"fork", "fork+exec", "posix_spawn"};
  static const char* ops[] = {"read",  "write",      "set O_NONBLOCK", "clear O_NONBLOCK",
                              "getfl", "is it open", "blocked read"};
  char how[32];
  if (WIFEXITED(status))
    snprintf(how, sizeof how, "exit %d", WEXITSTATUS(status));
  else
    snprintf(how, sizeof how, "signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : -1);
  out("%s child: %s s%d(%s)%s n=%ld -> %s; %s", modes[mode], ops[op], s, kind_name(o->kind),
      m->s[s].cloexec ? " cloexec" : "", n, got ? line : "(nothing)", how);
}

void exec_episode(const Model* m, const Step* st) {
  switch (st->op) {
    case OP_FUTEX:
      do_futex(st);
      break;
    case OP_FUTEX1:
      do_futex1(st);
      break;
    case OP_SIGNAL:
      do_signal(st);
      break;
    case OP_PIPES:
      do_pipes(st);
      break;
    case OP_SYNC:
      do_sync(st);
      break;
    case OP_SLEEP:
      do_sleep(st);
      break;
    case OP_SHARED:
      do_shared(m, st);
      break;
    case OP_FORK:
      do_fork(m, st);
      break;
  }
}

void map_shared_words(void) {
  shared_words = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
}
