/* tests/capi/sync_test.c — loom.h's synchronisation: mutexes of every type
 * and policy, conditions, rwlocks, barriers, spin locks, semaphores, sleep;
 * each POSIX error; timed waits that never return early; statically
 * initialised objects first used by many fibres at once. */
#define _POSIX_C_SOURCE 200809L
#include <loom/loom.h>
#include <stdatomic.h>

#include "ctest.h"

typedef void* (*fn_t)(void*);

static loom_t spawn(fn_t fn, void* arg) {
  loom_t t;
  CHECK_EQ(loom_create(&t, NULL, fn, arg), 0);
  return t;
}

static void join(loom_t t) { CHECK_EQ(loom_join(t, NULL), 0); }

static void* join_value(loom_t t) {
  void* r = NULL;
  CHECK_EQ(loom_join(t, &r), 0);
  return r;
}

/* Runs fn(arg) on a new fibre and returns its result as an int. */
static int on_other(fn_t fn, void* arg) { return (int)(intptr_t)join_value(spawn(fn, arg)); }

/* ---- mutexes ----------------------------------------------------------------------- */

static void* try_lock(void* m) { return (void*)(intptr_t)loom_mutex_trylock((loom_mutex_t*)m); }
static void* unlock(void* m) { return (void*)(intptr_t)loom_mutex_unlock((loom_mutex_t*)m); }

static void mutex_attributes(void) {
  loom_mutexattr_t a;
  int v;
  CHECK_EQ(loom_mutexattr_init(&a), 0);
  CHECK_EQ(loom_mutexattr_gettype(&a, &v), 0);
  CHECK_EQ(v, LOOM_MUTEX_DEFAULT);
  CHECK_EQ(loom_mutexattr_settype(&a, 17), EINVAL);
  CHECK_EQ(loom_mutexattr_settype(&a, LOOM_MUTEX_RECURSIVE), 0);
  CHECK_EQ(loom_mutexattr_gettype(&a, &v), 0);
  CHECK_EQ(v, LOOM_MUTEX_RECURSIVE);
  CHECK_EQ(loom_mutexattr_setpshared(&a, LOOM_PROCESS_SHARED), ENOTSUP);
  CHECK_EQ(loom_mutexattr_setpshared(&a, 5), EINVAL);
  CHECK_EQ(loom_mutexattr_setpshared(&a, LOOM_PROCESS_PRIVATE), 0);
  CHECK_EQ(loom_mutexattr_getpshared(&a, &v), 0);
  CHECK_EQ(v, LOOM_PROCESS_PRIVATE);
  CHECK_EQ(loom_mutexattr_setprotocol(&a, LOOM_PRIO_INHERIT), ENOTSUP);
  CHECK_EQ(loom_mutexattr_setprotocol(&a, 9), EINVAL);
  CHECK_EQ(loom_mutexattr_setprotocol(&a, LOOM_PRIO_NONE), 0);
  CHECK_EQ(loom_mutexattr_getprotocol(&a, &v), 0);
  CHECK_EQ(v, LOOM_PRIO_NONE);
  CHECK_EQ(loom_mutexattr_setrobust(&a, LOOM_MUTEX_ROBUST), ENOTSUP);
  CHECK_EQ(loom_mutexattr_setrobust(&a, LOOM_MUTEX_STALLED), 0);
  CHECK_EQ(loom_mutexattr_getrobust(&a, &v), 0);
  CHECK_EQ(v, LOOM_MUTEX_STALLED);
  CHECK_EQ(loom_mutexattr_setpolicy_np(&a, 99), EINVAL);
  CHECK_EQ(loom_mutexattr_setpolicy_np(&a, LOOM_MUTEX_POLICY_BATON), 0);
  CHECK_EQ(loom_mutexattr_getpolicy_np(&a, &v), 0);
  CHECK_EQ(v, LOOM_MUTEX_POLICY_BATON);
  CHECK_EQ(loom_mutexattr_destroy(&a), 0);
  CHECK_EQ(loom_mutexattr_gettype(&a, &v), EINVAL);
  loom_mutex_t m;
  CHECK_EQ(loom_mutex_init(&m, &a), EINVAL); /* destroyed attributes */
  CHECK_EQ(loom_mutex_init(&m, NULL), 0);
  CHECK_EQ(loom_mutex_consistent(&m), EINVAL);
  CHECK_EQ(loom_mutex_destroy(&m), 0);
}

static loom_mutex_t* make_mutex(loom_mutex_t* m, int type) {
  loom_mutexattr_t a;
  CHECK_EQ(loom_mutexattr_init(&a), 0);
  CHECK_EQ(loom_mutexattr_settype(&a, type), 0);
  CHECK_EQ(loom_mutex_init(m, &a), 0);
  CHECK_EQ(loom_mutexattr_destroy(&a), 0);
  return m;
}

static void mutex_errors(void) {
  loom_mutex_t m;
  /* normal */
  make_mutex(&m, LOOM_MUTEX_NORMAL);
  CHECK_EQ(loom_mutex_lock(&m), 0);
  CHECK_EQ(loom_mutex_trylock(&m), EBUSY);
  CHECK_EQ(on_other(try_lock, &m), EBUSY);
  CHECK_EQ(loom_mutex_destroy(&m), EBUSY);
  CHECK_EQ(loom_mutex_unlock(&m), 0);
  CHECK_EQ(on_other(try_lock, &m), 0); /* taken by a fibre that ends holding it */
  CHECK_EQ(loom_mutex_destroy(&m), EBUSY);
  CHECK_EQ(loom_mutex_unlock(&m), 0); /* a normal mutex does not check its owner */
  CHECK_EQ(loom_mutex_destroy(&m), 0);
  CHECK_EQ(loom_mutex_lock(&m), EINVAL); /* destroyed */
  CHECK_EQ(loom_mutex_destroy(&m), EINVAL);

  /* error-checking */
  make_mutex(&m, LOOM_MUTEX_ERRORCHECK);
  CHECK_EQ(loom_mutex_unlock(&m), EPERM);
  CHECK_EQ(loom_mutex_lock(&m), 0);
  CHECK_EQ(loom_mutex_lock(&m), EDEADLK);
  CHECK_EQ(loom_mutex_trylock(&m), EBUSY);
  struct timespec abs = after(CLOCK_REALTIME, 10 * MS);
  CHECK_EQ(loom_mutex_timedlock(&m, &abs), EDEADLK);
  CHECK_EQ(on_other(unlock, &m), EPERM);
  CHECK_EQ(loom_mutex_unlock(&m), 0);
  CHECK_EQ(loom_mutex_unlock(&m), EPERM);
  CHECK_EQ(loom_mutex_destroy(&m), 0);

  /* recursive */
  make_mutex(&m, LOOM_MUTEX_RECURSIVE);
  for (int i = 0; i < 5; ++i) CHECK_EQ(loom_mutex_lock(&m), 0);
  CHECK_EQ(loom_mutex_trylock(&m), 0);
  CHECK_EQ(on_other(try_lock, &m), EBUSY);
  CHECK_EQ(on_other(unlock, &m), EPERM);
  CHECK_EQ(loom_mutex_destroy(&m), EBUSY);
  for (int i = 0; i < 6; ++i) CHECK_EQ(loom_mutex_unlock(&m), 0);
  CHECK_EQ(loom_mutex_unlock(&m), EPERM);
  CHECK_EQ(on_other(try_lock, &m), 0);
  CHECK_EQ(loom_mutex_trylock(&m), EBUSY);
  CHECK_EQ(loom_mutex_destroy(&m), EBUSY);
}

static void mutex_timedlock_never_early(void) {
  loom_mutex_t m;
  make_mutex(&m, LOOM_MUTEX_NORMAL);
  CHECK_EQ(on_other(try_lock, &m), 0);
  struct timespec abs = after(CLOCK_REALTIME, 30 * MS);
  CHECK_EQ(loom_mutex_timedlock(&m, &abs), ETIMEDOUT);
  CHECK_NOT_EARLY(CLOCK_REALTIME, abs);
  abs = after(CLOCK_MONOTONIC, 20 * MS);
  CHECK_EQ(loom_mutex_clocklock(&m, CLOCK_MONOTONIC, &abs), ETIMEDOUT);
  CHECK_NOT_EARLY(CLOCK_MONOTONIC, abs);
  struct timespec past = {1, 0};
  CHECK_EQ(loom_mutex_timedlock(&m, &past), ETIMEDOUT);
  /* EINVAL for a bad abstime, but only when the call would block. */
  struct timespec bad = {0, -1};
  CHECK_EQ(loom_mutex_timedlock(&m, &bad), EINVAL);
  bad.tv_nsec = 1000000000;
  CHECK_EQ(loom_mutex_timedlock(&m, &bad), EINVAL);
  CHECK_EQ(loom_mutex_clocklock(&m, CLOCK_PROCESS_CPUTIME_ID, &abs), EINVAL);
  CHECK_EQ(loom_mutex_unlock(&m), 0);
  CHECK_EQ(loom_mutex_timedlock(&m, &bad), 0);
  CHECK_EQ(loom_mutex_unlock(&m), 0);
  CHECK_EQ(loom_mutex_timedlock(&m, &past), 0);
  CHECK_EQ(loom_mutex_unlock(&m), 0);
  CHECK_EQ(loom_mutex_destroy(&m), 0);
}

/* Mutual exclusion under every type and policy. */
struct counted {
  loom_mutex_t* m;
  long* count;
  long iterations;
};

static void* count_up(void* arg) {
  struct counted* c = (struct counted*)arg;
  for (long i = 0; i < c->iterations; ++i) {
    CHECK_EQ(loom_mutex_lock(c->m), 0);
    long v = *c->count;
    if (i % 64 == 0) loom_yield(); /* switch while holding it */
    *c->count = v + 1;
    CHECK_EQ(loom_mutex_unlock(c->m), 0);
  }
  return NULL;
}

static void count_with(loom_mutex_t* m, int fibres, long iterations) {
  long count = 0;
  struct counted c = {m, &count, iterations};
  loom_t t[16];
  for (int i = 0; i < fibres; ++i) t[i] = spawn(count_up, &c);
  for (int i = 0; i < fibres; ++i) join(t[i]);
  CHECK_EQ(count, fibres * iterations);
}

static void mutual_exclusion_every_type_and_policy(void) {
  const int types[] = {LOOM_MUTEX_NORMAL, LOOM_MUTEX_RECURSIVE, LOOM_MUTEX_ERRORCHECK, LOOM_MUTEX_ADAPTIVE_NP};
  for (int ti = 0; ti < 4; ++ti) {
    for (int p = LOOM_MUTEX_POLICY_DEFAULT; p <= LOOM_MUTEX_POLICY_HYBRID; ++p) {
      loom_mutexattr_t a;
      loom_mutex_t m;
      CHECK_EQ(loom_mutexattr_init(&a), 0);
      CHECK_EQ(loom_mutexattr_settype(&a, types[ti]), 0);
      CHECK_EQ(loom_mutexattr_setpolicy_np(&a, p), 0);
      CHECK_EQ(loom_mutex_init(&m, &a), 0);
      count_with(&m, 8, scaled(2000));
      CHECK_EQ(loom_mutex_destroy(&m), 0);
      CHECK_EQ(loom_mutexattr_destroy(&a), 0);
    }
  }
}

/* Statically initialised: first used by many fibres at once. */
static loom_mutex_t static_mutex = LOOM_MUTEX_INITIALIZER;
static loom_mutex_t static_recursive = LOOM_RECURSIVE_MUTEX_INITIALIZER_NP;
static loom_mutex_t static_errorcheck = LOOM_ERRORCHECK_MUTEX_INITIALIZER_NP;
static loom_mutex_t static_adaptive = LOOM_ADAPTIVE_MUTEX_INITIALIZER_NP;
static loom_mutex_t zeroed_mutex; /* all zero: as good as the initialiser */

static void static_mutexes(void) {
  count_with(&static_mutex, 16, scaled(1000));
  count_with(&zeroed_mutex, 16, scaled(1000));
  count_with(&static_adaptive, 16, scaled(1000));
  CHECK_EQ(loom_mutex_lock(&static_recursive), 0);
  CHECK_EQ(loom_mutex_lock(&static_recursive), 0);
  CHECK_EQ(loom_mutex_unlock(&static_recursive), 0);
  CHECK_EQ(loom_mutex_unlock(&static_recursive), 0);
  CHECK_EQ(loom_mutex_unlock(&static_recursive), EPERM);
  CHECK_EQ(loom_mutex_lock(&static_errorcheck), 0);
  CHECK_EQ(loom_mutex_lock(&static_errorcheck), EDEADLK);
  CHECK_EQ(loom_mutex_unlock(&static_errorcheck), 0);
  loom_mutex_t never_used = LOOM_MUTEX_INITIALIZER;
  CHECK_EQ(loom_mutex_destroy(&never_used), 0);
}

/* ---- conditions --------------------------------------------------------------------- */

static loom_mutex_t cv_lock = LOOM_MUTEX_INITIALIZER;
static loom_cond_t cv = LOOM_COND_INITIALIZER;
static int cv_ready, cv_woken;

static void* cv_waiter(void* arg) {
  (void)arg;
  CHECK_EQ(loom_mutex_lock(&cv_lock), 0);
  while (!cv_ready) CHECK_EQ(loom_cond_wait(&cv, &cv_lock), 0);
  ++cv_woken;
  CHECK_EQ(loom_mutex_unlock(&cv_lock), 0);
  return NULL;
}

static void condition_broadcast_and_signal(void) {
  enum { N = 50 };
  loom_t t[N];
  for (int round = 0; round < 2; ++round) {
    cv_ready = cv_woken = 0;
    for (int i = 0; i < N; ++i) t[i] = spawn(cv_waiter, NULL);
    loom_usleep(5000);
    CHECK_EQ(loom_mutex_lock(&cv_lock), 0);
    cv_ready = 1;
    if (round == 0) {
      CHECK_EQ(loom_cond_broadcast(&cv), 0);
    }
    CHECK_EQ(loom_mutex_unlock(&cv_lock), 0);
    if (round == 1) {
      /* signal wakes at least one each time: N signals wake them all */
      for (int i = 0; i < N; ++i) CHECK_EQ(loom_cond_signal(&cv), 0);
    }
    for (int i = 0; i < N; ++i) join(t[i]);
    CHECK_EQ(cv_woken, N);
  }
}

static void condition_timed_never_early(void) {
  loom_mutex_t m;
  loom_cond_t c;
  make_mutex(&m, LOOM_MUTEX_ERRORCHECK);
  CHECK_EQ(loom_cond_init(&c, NULL), 0);
  CHECK_EQ(loom_mutex_lock(&m), 0);
  struct timespec abs = after(CLOCK_REALTIME, 30 * MS);
  int e;
  while ((e = loom_cond_timedwait(&c, &m, &abs)) == 0) {
  } /* 0 would be a spurious wake-up */
  CHECK_EQ(e, ETIMEDOUT);
  CHECK_NOT_EARLY(CLOCK_REALTIME, abs);
  CHECK_EQ(loom_mutex_lock(&m), EDEADLK); /* held again after the timeout */
  abs = after(CLOCK_MONOTONIC, 20 * MS);
  while ((e = loom_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &abs)) == 0) {
  }
  CHECK_EQ(e, ETIMEDOUT);
  CHECK_NOT_EARLY(CLOCK_MONOTONIC, abs);
  struct timespec bad = {0, 1000000000};
  CHECK_EQ(loom_cond_timedwait(&c, &m, &bad), EINVAL);
  CHECK_EQ(loom_cond_clockwait(&c, &m, CLOCK_PROCESS_CPUTIME_ID, &abs), EINVAL);
  CHECK_EQ(loom_mutex_unlock(&m), 0);
  /* EPERM: waiting on an error-checking mutex the caller does not hold. */
  CHECK_EQ(loom_cond_wait(&c, &m), EPERM);
  CHECK_EQ(loom_cond_timedwait(&c, &m, &abs), EPERM);
  CHECK_EQ(loom_cond_destroy(&c), 0);

  /* A condition whose clock is CLOCK_MONOTONIC. */
  loom_condattr_t a;
  clockid_t clk;
  CHECK_EQ(loom_condattr_init(&a), 0);
  CHECK_EQ(loom_condattr_getclock(&a, &clk), 0);
  CHECK_EQ(clk, CLOCK_REALTIME);
  CHECK_EQ(loom_condattr_setclock(&a, CLOCK_PROCESS_CPUTIME_ID), EINVAL);
  CHECK_EQ(loom_condattr_setclock(&a, CLOCK_MONOTONIC), 0);
  CHECK_EQ(loom_condattr_getclock(&a, &clk), 0);
  CHECK_EQ(clk, CLOCK_MONOTONIC);
  int v;
  CHECK_EQ(loom_condattr_setpshared(&a, LOOM_PROCESS_SHARED), ENOTSUP);
  CHECK_EQ(loom_condattr_setpshared(&a, 3), EINVAL);
  CHECK_EQ(loom_condattr_getpshared(&a, &v), 0);
  CHECK_EQ(v, LOOM_PROCESS_PRIVATE);
  CHECK_EQ(loom_cond_init(&c, &a), 0);
  CHECK_EQ(loom_condattr_destroy(&a), 0);
  CHECK_EQ(loom_cond_init(&c, &a), EINVAL);
  CHECK_EQ(loom_cond_init(&c, NULL), 0);
  CHECK_EQ(loom_condattr_init(&a), 0);
  CHECK_EQ(loom_condattr_setclock(&a, CLOCK_MONOTONIC), 0);
  CHECK_EQ(loom_cond_init(&c, &a), 0);
  CHECK_EQ(loom_mutex_lock(&m), 0);
  abs = after(CLOCK_MONOTONIC, 20 * MS);
  while ((e = loom_cond_timedwait(&c, &m, &abs)) == 0) {
  }
  CHECK_EQ(e, ETIMEDOUT);
  CHECK_NOT_EARLY(CLOCK_MONOTONIC, abs);
  CHECK_EQ(loom_mutex_unlock(&m), 0);
  CHECK_EQ(loom_cond_destroy(&c), 0);
  CHECK_EQ(loom_condattr_destroy(&a), 0);
  CHECK_EQ(loom_mutex_destroy(&m), 0);
}

/* A recursive mutex gets its depth back after the wait. */
static loom_mutex_t rec_m;
static loom_cond_t rec_c = LOOM_COND_INITIALIZER;
static int rec_flag;

static void* rec_signal(void* arg) {
  (void)arg;
  CHECK_EQ(loom_mutex_lock(&rec_m), 0); /* possible only if the wait released every level */
  rec_flag = 1;
  CHECK_EQ(loom_cond_signal(&rec_c), 0);
  CHECK_EQ(loom_mutex_unlock(&rec_m), 0);
  return NULL;
}

static void condition_with_recursive_mutex(void) {
  make_mutex(&rec_m, LOOM_MUTEX_RECURSIVE);
  CHECK_EQ(loom_mutex_lock(&rec_m), 0);
  CHECK_EQ(loom_mutex_lock(&rec_m), 0);
  loom_t t = spawn(rec_signal, NULL);
  while (!rec_flag) CHECK_EQ(loom_cond_wait(&rec_c, &rec_m), 0);
  CHECK_EQ(loom_mutex_unlock(&rec_m), 0);
  CHECK_EQ(loom_mutex_unlock(&rec_m), 0);
  CHECK_EQ(loom_mutex_unlock(&rec_m), EPERM);
  join(t);
  CHECK_EQ(loom_mutex_destroy(&rec_m), 0);
}

/* POSIX: a condition may be destroyed as soon as no thread is blocked on it,
 * e.g. right after a broadcast, while the woken ones still reacquire. */
struct dying {
  loom_mutex_t m;
  loom_cond_t c;
  int go, left;
};

static void* dying_waiter(void* arg) {
  struct dying* d = (struct dying*)arg;
  CHECK_EQ(loom_mutex_lock(&d->m), 0);
  while (!d->go) CHECK_EQ(loom_cond_wait(&d->c, &d->m), 0);
  --d->left;
  CHECK_EQ(loom_mutex_unlock(&d->m), 0);
  return NULL;
}

static void condition_destroyed_after_broadcast(void) {
  enum { N = 10 };
  struct dying* d = (struct dying*)calloc(1, sizeof *d);
  loom_t t[N];
  CHECK_EQ(loom_mutex_init(&d->m, NULL), 0);
  CHECK_EQ(loom_cond_init(&d->c, NULL), 0);
  d->left = N;
  for (int i = 0; i < N; ++i) t[i] = spawn(dying_waiter, d);
  loom_usleep(5000);
  CHECK_EQ(loom_mutex_lock(&d->m), 0);
  d->go = 1;
  CHECK_EQ(loom_cond_broadcast(&d->c), 0);
  CHECK_EQ(loom_cond_destroy(&d->c), 0);
  CHECK_EQ(loom_mutex_unlock(&d->m), 0);
  for (int i = 0; i < N; ++i) join(t[i]);
  CHECK_EQ(d->left, 0);
  CHECK_EQ(loom_mutex_destroy(&d->m), 0);
  free(d);
}

/* ---- rwlocks ------------------------------------------------------------------------- */

static loom_rwlock_t static_rw = LOOM_RWLOCK_INITIALIZER;
static atomic_int readers_in, writers_in;
static long rw_a, rw_b;

static void* rw_worker(void* arg) {
  long n = (long)(intptr_t)arg;
  for (long i = 0; i < n; ++i) {
    if (i % 8 == 0) {
      CHECK_EQ(loom_rwlock_wrlock(&static_rw), 0);
      CHECK_EQ(atomic_fetch_add(&writers_in, 1), 0);
      CHECK_EQ(atomic_load(&readers_in), 0);
      ++rw_a;
      loom_yield();
      ++rw_b;
      atomic_fetch_sub(&writers_in, 1);
      CHECK_EQ(loom_rwlock_unlock(&static_rw), 0);
    } else {
      CHECK_EQ(loom_rwlock_rdlock(&static_rw), 0);
      atomic_fetch_add(&readers_in, 1);
      CHECK_EQ(atomic_load(&writers_in), 0);
      CHECK_EQ(rw_a, rw_b);
      loom_yield();
      atomic_fetch_sub(&readers_in, 1);
      CHECK_EQ(loom_rwlock_unlock(&static_rw), 0);
    }
  }
  return NULL;
}

static void rwlock_readers_and_writers(void) {
  enum { N = 12 };
  loom_t t[N];
  long n = scaled(800);
  for (int i = 0; i < N; ++i) t[i] = spawn(rw_worker, (void*)(intptr_t)n);
  for (int i = 0; i < N; ++i) join(t[i]);
  CHECK_EQ(rw_a, N * ((n + 7) / 8));
  CHECK_EQ(rw_a, rw_b);
  /* (That readers share the lock is checked deterministically below.) */
}

static void* try_rd(void* r) { return (void*)(intptr_t)loom_rwlock_tryrdlock((loom_rwlock_t*)r); }
static void* try_wr(void* r) { return (void*)(intptr_t)loom_rwlock_trywrlock((loom_rwlock_t*)r); }
static void* rw_unlock(void* r) { return (void*)(intptr_t)loom_rwlock_unlock((loom_rwlock_t*)r); }
static void* timed_rd(void* r) {
  struct timespec abs = after(CLOCK_REALTIME, 20 * MS);
  int e = loom_rwlock_timedrdlock((loom_rwlock_t*)r, &abs);
  CHECK_NOT_EARLY(CLOCK_REALTIME, abs);
  return (void*)(intptr_t)e;
}
static void* rd_lock(void* r) { return (void*)(intptr_t)loom_rwlock_rdlock((loom_rwlock_t*)r); }

static void rwlock_errors(void) {
  loom_rwlock_t r;
  CHECK_EQ(loom_rwlock_init(&r, NULL), 0);
  CHECK_EQ(loom_rwlock_unlock(&r), EPERM);
  /* write-locked by the caller */
  CHECK_EQ(loom_rwlock_wrlock(&r), 0);
  CHECK_EQ(loom_rwlock_wrlock(&r), EDEADLK);
  CHECK_EQ(loom_rwlock_rdlock(&r), EDEADLK);
  CHECK_EQ(loom_rwlock_trywrlock(&r), EBUSY);
  CHECK_EQ(loom_rwlock_tryrdlock(&r), EBUSY);
  CHECK_EQ(on_other(try_rd, &r), EBUSY);
  CHECK_EQ(on_other(try_wr, &r), EBUSY);
  CHECK_EQ(on_other(timed_rd, &r), ETIMEDOUT);
  CHECK_EQ(on_other(rw_unlock, &r), EPERM);
  CHECK_EQ(loom_rwlock_destroy(&r), EBUSY);
  CHECK_EQ(loom_rwlock_unlock(&r), 0);
  /* read-locked (twice: recursive reads are fine) */
  CHECK_EQ(loom_rwlock_rdlock(&r), 0);
  CHECK_EQ(loom_rwlock_tryrdlock(&r), 0);
  CHECK_EQ(on_other(try_rd, &r), 0);
  CHECK_EQ(loom_rwlock_unlock(&r), 0); /* the other fibre's read lock */
  CHECK_EQ(loom_rwlock_trywrlock(&r), EBUSY);
  struct timespec abs = after(CLOCK_REALTIME, 20 * MS);
  CHECK_EQ(loom_rwlock_timedwrlock(&r, &abs), ETIMEDOUT);
  CHECK_NOT_EARLY(CLOCK_REALTIME, abs);
  abs = after(CLOCK_MONOTONIC, 20 * MS);
  CHECK_EQ(loom_rwlock_clockwrlock(&r, CLOCK_MONOTONIC, &abs), ETIMEDOUT);
  CHECK_NOT_EARLY(CLOCK_MONOTONIC, abs);
  struct timespec bad = {0, -5};
  CHECK_EQ(loom_rwlock_timedwrlock(&r, &bad), EINVAL);
  CHECK_EQ(loom_rwlock_clockrdlock(&r, CLOCK_MONOTONIC, &bad), 0); /* would not block */
  CHECK_EQ(loom_rwlock_destroy(&r), EBUSY);
  for (int i = 0; i < 3; ++i) CHECK_EQ(loom_rwlock_unlock(&r), 0);
  CHECK_EQ(loom_rwlock_unlock(&r), EPERM);
  CHECK_EQ(loom_rwlock_destroy(&r), 0);
  CHECK_EQ(loom_rwlock_rdlock(&r), EINVAL);
}

static loom_rwlock_t pref_rw;
static atomic_int writer_waiting;

static void* waiting_writer(void* arg) {
  (void)arg;
  atomic_store(&writer_waiting, 1);
  CHECK_EQ(loom_rwlock_wrlock(&pref_rw), 0);
  CHECK_EQ(loom_rwlock_unlock(&pref_rw), 0);
  return NULL;
}

/* Reader preference (the default, as glibc's): a reader holding the lock
 * takes it again while a writer waits. Writer preference: a new reader
 * waits behind the writer. */
static void rwlock_preference(void) {
  loom_rwlockattr_t a;
  int kind;
  CHECK_EQ(loom_rwlockattr_init(&a), 0);
  CHECK_EQ(loom_rwlockattr_getkind_np(&a, &kind), 0);
  CHECK_EQ(kind, LOOM_RWLOCK_PREFER_READER_NP);
  CHECK_EQ(loom_rwlockattr_setkind_np(&a, 7), EINVAL);
  CHECK_EQ(loom_rwlockattr_setpshared(&a, LOOM_PROCESS_SHARED), ENOTSUP);
  CHECK_EQ(loom_rwlockattr_setpshared(&a, 4), EINVAL);
  CHECK_EQ(loom_rwlockattr_getpshared(&a, &kind), 0);
  CHECK_EQ(kind, LOOM_PROCESS_PRIVATE);

  CHECK_EQ(loom_rwlock_init(&pref_rw, &a), 0);
  CHECK_EQ(loom_rwlock_rdlock(&pref_rw), 0);
  atomic_store(&writer_waiting, 0);
  loom_t w = spawn(waiting_writer, NULL);
  while (!atomic_load(&writer_waiting)) loom_yield();
  loom_usleep(5000);
  CHECK_EQ(loom_rwlock_rdlock(&pref_rw), 0);
  CHECK_EQ(on_other(try_rd, &pref_rw), 0);
  for (int i = 0; i < 3; ++i) CHECK_EQ(loom_rwlock_unlock(&pref_rw), 0);
  join(w);
  CHECK_EQ(loom_rwlock_destroy(&pref_rw), 0);

  CHECK_EQ(loom_rwlockattr_setkind_np(&a, LOOM_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP), 0);
  CHECK_EQ(loom_rwlock_init(&pref_rw, &a), 0);
  CHECK_EQ(loom_rwlock_rdlock(&pref_rw), 0);
  atomic_store(&writer_waiting, 0);
  w = spawn(waiting_writer, NULL);
  while (!atomic_load(&writer_waiting)) loom_yield();
  loom_usleep(5000);
  CHECK_EQ(on_other(try_rd, &pref_rw), EBUSY);
  CHECK_EQ(loom_rwlock_unlock(&pref_rw), 0);
  join(w);
  CHECK_EQ(on_other(rd_lock, &pref_rw), 0);
  CHECK_EQ(loom_rwlock_unlock(&pref_rw), 0);
  CHECK_EQ(loom_rwlock_destroy(&pref_rw), 0);
  CHECK_EQ(loom_rwlockattr_destroy(&a), 0);
  CHECK_EQ(loom_rwlock_init(&pref_rw, &a), EINVAL);
}

/* ---- barriers ----------------------------------------------------------------------------- */

enum { BARRIER_FIBRES = 6, PHASES = 20 };
static loom_barrier_t barrier;
static atomic_int arrived[PHASES], serials[PHASES];

static void* phase_worker(void* arg) {
  (void)arg;
  for (int p = 0; p < PHASES; ++p) {
    atomic_fetch_add(&arrived[p], 1);
    int r = loom_barrier_wait(&barrier);
    CHECK(r == 0 || r == LOOM_BARRIER_SERIAL_THREAD);
    if (r == LOOM_BARRIER_SERIAL_THREAD) atomic_fetch_add(&serials[p], 1);
    CHECK_EQ(atomic_load(&arrived[p]), BARRIER_FIBRES); /* nobody is behind */
  }
  return NULL;
}

static void barrier_phases(void) {
  loom_barrierattr_t a;
  int v;
  CHECK_EQ(loom_barrierattr_init(&a), 0);
  CHECK_EQ(loom_barrierattr_setpshared(&a, LOOM_PROCESS_SHARED), ENOTSUP);
  CHECK_EQ(loom_barrierattr_setpshared(&a, 2), EINVAL);
  CHECK_EQ(loom_barrierattr_setpshared(&a, LOOM_PROCESS_PRIVATE), 0);
  CHECK_EQ(loom_barrierattr_getpshared(&a, &v), 0);
  CHECK_EQ(v, LOOM_PROCESS_PRIVATE);
  CHECK_EQ(loom_barrier_init(&barrier, &a, 0), EINVAL);
  CHECK_EQ(loom_barrier_init(&barrier, &a, BARRIER_FIBRES), 0);
  CHECK_EQ(loom_barrierattr_destroy(&a), 0);
  CHECK_EQ(loom_barrierattr_getpshared(&a, &v), EINVAL);
  loom_t t[BARRIER_FIBRES];
  for (int i = 0; i < BARRIER_FIBRES; ++i) t[i] = spawn(phase_worker, NULL);
  for (int i = 0; i < BARRIER_FIBRES; ++i) join(t[i]);
  for (int p = 0; p < PHASES; ++p) CHECK_EQ(atomic_load(&serials[p]), 1);
  CHECK_EQ(loom_barrier_destroy(&barrier), 0);
  CHECK_EQ(loom_barrier_wait(&barrier), EINVAL);
  /* A barrier of one: every wait is serial. */
  CHECK_EQ(loom_barrier_init(&barrier, NULL, 1), 0);
  CHECK_EQ(loom_barrier_wait(&barrier), LOOM_BARRIER_SERIAL_THREAD);
  CHECK_EQ(loom_barrier_destroy(&barrier), 0);
}

/* ---- spin locks --------------------------------------------------------------------------- */

static loom_spinlock_t spin;
static long spin_count;

static void* spin_worker(void* arg) {
  long n = (long)(intptr_t)arg;
  for (long i = 0; i < n; ++i) {
    CHECK_EQ(loom_spin_lock(&spin), 0);
    ++spin_count;
    CHECK_EQ(loom_spin_unlock(&spin), 0);
  }
  return NULL;
}

static void spin_locks(void) {
  CHECK_EQ(loom_spin_init(&spin, 9), EINVAL);
  CHECK_EQ(loom_spin_init(&spin, LOOM_PROCESS_PRIVATE), 0);
  CHECK_EQ(loom_spin_trylock(&spin), 0);
  CHECK_EQ(loom_spin_trylock(&spin), EBUSY);
  CHECK_EQ(loom_spin_destroy(&spin), EBUSY);
  CHECK_EQ(loom_spin_unlock(&spin), 0);
  enum { N = 8 };
  loom_t t[N];
  long n = scaled(5000);
  for (int i = 0; i < N; ++i) t[i] = spawn(spin_worker, (void*)(intptr_t)n);
  for (int i = 0; i < N; ++i) join(t[i]);
  CHECK_EQ(spin_count, N * n);
  CHECK_EQ(loom_spin_destroy(&spin), 0);
}

/* ---- semaphores --------------------------------------------------------------------------- */

static loom_sem_t ping, pong;

static void* ponger(void* arg) {
  long n = (long)(intptr_t)arg;
  for (long i = 0; i < n; ++i) {
    CHECK_EQ(loom_sem_wait(&ping), 0);
    CHECK_EQ(loom_sem_post(&pong), 0);
  }
  return NULL;
}

static void semaphores(void) {
  loom_sem_t s;
  int v;
  CHECK_EQ(loom_sem_init(&s, 0, (unsigned)LOOM_SEM_VALUE_MAX + 1), -1);
  CHECK_EQ(errno, EINVAL);
  CHECK_EQ(loom_sem_init(&s, 1, 0), -1);
  CHECK_EQ(errno, ENOSYS);
  memset(&s, 0, sizeof s);
  CHECK_EQ(loom_sem_post(&s), -1); /* never initialised */
  CHECK_EQ(errno, EINVAL);
  CHECK_EQ(loom_sem_init(&s, 0, 2), 0);
  CHECK_EQ(loom_sem_getvalue(&s, &v), 0);
  CHECK_EQ(v, 2);
  CHECK_EQ(loom_sem_trywait(&s), 0);
  CHECK_EQ(loom_sem_wait(&s), 0);
  errno = 0;
  CHECK_EQ(loom_sem_trywait(&s), -1);
  CHECK_EQ(errno, EAGAIN);
  struct timespec abs = after(CLOCK_REALTIME, 30 * MS);
  CHECK_EQ(loom_sem_timedwait(&s, &abs), -1);
  CHECK_EQ(errno, ETIMEDOUT);
  CHECK_NOT_EARLY(CLOCK_REALTIME, abs);
  abs = after(CLOCK_MONOTONIC, 20 * MS);
  CHECK_EQ(loom_sem_clockwait(&s, CLOCK_MONOTONIC, &abs), -1);
  CHECK_EQ(errno, ETIMEDOUT);
  CHECK_NOT_EARLY(CLOCK_MONOTONIC, abs);
  struct timespec bad = {0, 1000000000};
  CHECK_EQ(loom_sem_timedwait(&s, &bad), -1);
  CHECK_EQ(errno, EINVAL);
  CHECK_EQ(loom_sem_post(&s), 0);
  CHECK_EQ(loom_sem_timedwait(&s, &bad), 0); /* would not block: abstime unchecked */
  CHECK_EQ(loom_sem_destroy(&s), 0);
  CHECK_EQ(loom_sem_wait(&s), -1);
  CHECK_EQ(errno, EINVAL);
  /* EOVERFLOW past the maximum. */
  CHECK_EQ(loom_sem_init(&s, 0, LOOM_SEM_VALUE_MAX), 0);
  CHECK_EQ(loom_sem_post(&s), -1);
  CHECK_EQ(errno, EOVERFLOW);
  CHECK_EQ(loom_sem_getvalue(&s, &v), 0);
  CHECK_EQ(v, LOOM_SEM_VALUE_MAX);
  CHECK_EQ(loom_sem_destroy(&s), 0);
  /* Ping-pong between two fibres. */
  long n = scaled(5000);
  CHECK_EQ(loom_sem_init(&ping, 0, 0), 0);
  CHECK_EQ(loom_sem_init(&pong, 0, 0), 0);
  loom_t t = spawn(ponger, (void*)(intptr_t)n);
  for (long i = 0; i < n; ++i) {
    CHECK_EQ(loom_sem_post(&ping), 0);
    CHECK_EQ(loom_sem_wait(&pong), 0);
  }
  join(t);
  CHECK_EQ(loom_sem_destroy(&ping), 0);
  CHECK_EQ(loom_sem_destroy(&pong), 0);
}

/* ---- sleeping ------------------------------------------------------------------------------ */

static void* sleeper(void* arg) {
  (void)arg;
  struct timespec d = {0, 50 * MS};
  CHECK_EQ(loom_nanosleep(&d, NULL), 0);
  return NULL;
}

static void sleeping(void) {
  int64_t t0 = now_on(CLOCK_MONOTONIC);
  struct timespec d = {0, 20 * MS}, rem = {5, 5};
  CHECK_EQ(loom_nanosleep(&d, &rem), 0);
  CHECK(now_on(CLOCK_MONOTONIC) - t0 >= 20 * MS);
  CHECK(rem.tv_sec == 0 && rem.tv_nsec == 0);
  struct timespec bad = {0, 1000000000};
  CHECK_EQ(loom_nanosleep(&bad, NULL), -1);
  CHECK_EQ(errno, EINVAL);
  bad.tv_sec = -1;
  bad.tv_nsec = 0;
  CHECK_EQ(loom_nanosleep(&bad, NULL), -1);
  CHECK_EQ(errno, EINVAL);

  t0 = now_on(CLOCK_MONOTONIC);
  CHECK_EQ(loom_usleep(10000), 0);
  CHECK(now_on(CLOCK_MONOTONIC) - t0 >= 10 * MS);
  CHECK_EQ(loom_sleep(0), 0);

  struct timespec abs = after(CLOCK_REALTIME, 20 * MS);
  CHECK_EQ(loom_clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &abs, NULL), 0);
  CHECK_NOT_EARLY(CLOCK_REALTIME, abs);
  abs = after(CLOCK_MONOTONIC, 20 * MS);
  CHECK_EQ(loom_clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &abs, NULL), 0);
  CHECK_NOT_EARLY(CLOCK_MONOTONIC, abs);
  t0 = now_on(CLOCK_MONOTONIC);
  CHECK_EQ(loom_clock_nanosleep(CLOCK_MONOTONIC, 0, &d, NULL), 0);
  CHECK(now_on(CLOCK_MONOTONIC) - t0 >= 20 * MS);
  CHECK_EQ(loom_clock_nanosleep(CLOCK_MONOTONIC, 0, &bad, NULL), EINVAL);
  CHECK_EQ(loom_clock_nanosleep(CLOCK_PROCESS_CPUTIME_ID, 0, &d, NULL), ENOTSUP);
  CHECK_EQ(loom_clock_nanosleep((clockid_t)12345, 0, &d, NULL), EINVAL);
  CHECK_EQ(loom_clock_nanosleep(CLOCK_MONOTONIC, 77, &d, NULL), EINVAL);

  /* A sleeping fibre frees its processor: on a one-processor cluster, four
   * 50 ms sleeps take about 50 ms, not 200. */
  loom_cluster_t* one;
  loom_attr_t a;
  loom_t t[4];
  CHECK_EQ(loom_cluster_create(&one, 1), 0);
  CHECK_EQ(loom_attr_init(&a), 0);
  CHECK_EQ(loom_attr_setcluster(&a, one), 0);
  t0 = now_on(CLOCK_MONOTONIC);
  for (int i = 0; i < 4; ++i) CHECK_EQ(loom_create(&t[i], &a, sleeper, NULL), 0);
  for (int i = 0; i < 4; ++i) join(t[i]);
  int64_t took = now_on(CLOCK_MONOTONIC) - t0;
  CHECK(took >= 50 * MS && took < 150 * MS);
  CHECK_EQ(loom_attr_destroy(&a), 0);
  CHECK_EQ(loom_cluster_destroy(one), 0);
}

int main(void) {
  alarm(120);
  RUN(mutex_attributes);
  RUN(mutex_errors);
  RUN(mutex_timedlock_never_early);
  RUN(mutual_exclusion_every_type_and_policy);
  RUN(static_mutexes);
  RUN(condition_broadcast_and_signal);
  RUN(condition_timed_never_early);
  RUN(condition_with_recursive_mutex);
  RUN(condition_destroyed_after_broadcast);
  RUN(rwlock_readers_and_writers);
  RUN(rwlock_errors);
  RUN(rwlock_preference);
  RUN(barrier_phases);
  RUN(spin_locks);
  RUN(semaphores);
  RUN(sleeping);
  return 0;
}
