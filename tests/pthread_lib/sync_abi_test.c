// sync_abi_test.c — glibc's synchronisation objects, used as a plain
// <pthread.h> program uses them. Built against glibc only; run_twice.sh runs
// it on glibc, with -lloom-pthread, and with LD_PRELOAD=libloom-pthread.so:
// stdout must be identical, and stderr names the library that defines
// pthread_mutex_lock (the proof that the loom runs ran on loom).
//
// Everything printed to stdout is deterministic; timings are checked here
// and printed as ok/FAIL. Behaviour where loom differs from glibc by design
// (PROCESS_SHARED, robust) goes to stderr.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define THREADS 200

// glibc declares __errno_location const, so a compiler may keep &errno from
// before a blocking call; under loom the caller may be a fibre that resumed
// on another kernel thread, and would read that thread's old errno. This
// program reads and writes errno through a call the compiler cannot fold.
// (Unmodified binaries that cache &errno across blocking calls are a known
// limit of link-level interposition: see capi/pthread/sync.cpp.)
static int* (*volatile errno_loc)(void) = __errno_location;
#define ERRNO (*errno_loc())
static int failures;

#define CHECK(cond)                                          \
  do {                                                       \
    if (!(cond)) {                                           \
      printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      fflush(stdout);                                        \
      failures++;                                            \
    }                                                        \
  } while (0)
#define EQ(a, b) CHECK((a) == (b))

static void spawn(int n, void* (*fn)(void*), void* arg) {
  pthread_t* t = calloc((size_t)n, sizeof *t);
  for (int i = 0; i < n; i++) {
    int e = pthread_create(&t[i], NULL, fn, arg);
    if (e) {
      printf("pthread_create: %s\n", strerror(e));
      exit(2);
    }
  }
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  free(t);
}

static int64_t ns(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}
static struct timespec in_ms(clockid_t c, int ms) {
  int64_t t = ns(c) + (int64_t)ms * 1000000;
  struct timespec r = {t / 1000000000, t % 1000000000};
  return r;
}
static int reached(clockid_t c, const struct timespec* abs) {
  return ns(c) >= (int64_t)abs->tv_sec * 1000000000 + abs->tv_nsec;
}

// ---- sizes -----------------------------------------------------------------
static void test_sizes(void) {
  printf(
      "sizes: mutex %zu cond %zu rwlock %zu barrier %zu sem %zu mutexattr %zu condattr %zu rwlockattr %zu "
      "barrierattr %zu once %zu spin %zu\n",
      sizeof(pthread_mutex_t), sizeof(pthread_cond_t), sizeof(pthread_rwlock_t), sizeof(pthread_barrier_t),
      sizeof(sem_t), sizeof(pthread_mutexattr_t), sizeof(pthread_condattr_t), sizeof(pthread_rwlockattr_t),
      sizeof(pthread_barrierattr_t), sizeof(pthread_once_t), sizeof(pthread_spinlock_t));
}

// ---- static initialisers under concurrent first use -----------------------------
static pthread_mutex_t s_normal = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t s_recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t s_errorcheck = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
static pthread_mutex_t s_adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
static pthread_cond_t s_cond = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t s_rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_rwlock_t s_rw_writer = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static long c_normal, c_recursive, c_errorcheck, c_adaptive, c_rw, c_rw_writer, c_once_runs;
static atomic_int start_gate, arrived_static;
static int cond_go;

static void once_init(void) {
  usleep(20000);  // others arrive meanwhile and must wait, not run it
  c_once_runs++;
}

static void* static_worker(void* arg) {
  (void)arg;
  atomic_fetch_add(&arrived_static, 1);
  while (!atomic_load(&start_gate)) sched_yield();
  EQ(pthread_once(&s_once, once_init), 0);
  EQ(c_once_runs, 1);
  for (int i = 0; i < 200; i++) {
    EQ(pthread_mutex_lock(&s_normal), 0);
    c_normal++;
    EQ(pthread_mutex_unlock(&s_normal), 0);
    EQ(pthread_mutex_lock(&s_recursive), 0);
    EQ(pthread_mutex_lock(&s_recursive), 0);
    c_recursive++;
    EQ(pthread_mutex_unlock(&s_recursive), 0);
    EQ(pthread_mutex_unlock(&s_recursive), 0);
    EQ(pthread_mutex_lock(&s_errorcheck), 0);
    EQ(pthread_mutex_lock(&s_errorcheck), EDEADLK);
    c_errorcheck++;
    EQ(pthread_mutex_unlock(&s_errorcheck), 0);
    EQ(pthread_mutex_lock(&s_adaptive), 0);
    c_adaptive++;
    EQ(pthread_mutex_unlock(&s_adaptive), 0);
    if (i % 4 == 0) {
      EQ(pthread_rwlock_wrlock(&s_rw), 0);
      c_rw++;
      EQ(pthread_rwlock_unlock(&s_rw), 0);
      EQ(pthread_rwlock_wrlock(&s_rw_writer), 0);
      c_rw_writer++;
      EQ(pthread_rwlock_unlock(&s_rw_writer), 0);
    } else {
      EQ(pthread_rwlock_rdlock(&s_rw), 0);
      EQ(pthread_rwlock_unlock(&s_rw), 0);
      EQ(pthread_rwlock_rdlock(&s_rw_writer), 0);
      EQ(pthread_rwlock_unlock(&s_rw_writer), 0);
    }
  }
  EQ(pthread_mutex_lock(&s_normal), 0);
  while (!cond_go) EQ(pthread_cond_wait(&s_cond, &s_normal), 0);
  EQ(pthread_mutex_unlock(&s_normal), 0);
  return NULL;
}

static void* static_releaser(void* arg) {
  (void)arg;
  while (atomic_load(&arrived_static) < THREADS) usleep(1000);
  atomic_store(&start_gate, 1);
  usleep(50000);
  EQ(pthread_mutex_lock(&s_normal), 0);
  cond_go = 1;
  EQ(pthread_cond_broadcast(&s_cond), 0);
  EQ(pthread_mutex_unlock(&s_normal), 0);
  return NULL;
}

static void test_static(void) {
  pthread_t r;
  pthread_create(&r, NULL, static_releaser, NULL);
  spawn(THREADS, static_worker, NULL);
  pthread_join(r, NULL);
  printf("static: normal %ld recursive %ld errorcheck %ld adaptive %ld rw %ld rw_writer %ld once %ld\n", c_normal,
         c_recursive, c_errorcheck, c_adaptive, c_rw, c_rw_writer, c_once_runs);
}

// ---- objects inside the program's own structs and arrays -------------------------
struct slot {
  char before;
  pthread_mutex_t m;
  char mid1;
  pthread_cond_t cv;
  short mid2;
  pthread_rwlock_t rw;
  char mid3;
  sem_t sem;
  pthread_spinlock_t spin;
  char mid4;
  long counter;
  long rcounter;
  char after;
};
#define SLOTS 7
static struct slot slots[SLOTS];

static void* struct_worker(void* arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  for (int i = 0; i < 300; i++) {
    struct slot* s = &slots[rand_r(&seed) % SLOTS];
    EQ(pthread_mutex_lock(&s->m), 0);
    s->counter++;
    EQ(pthread_mutex_unlock(&s->m), 0);
    EQ(pthread_rwlock_wrlock(&s->rw), 0);
    s->rcounter++;
    EQ(pthread_rwlock_unlock(&s->rw), 0);
    EQ(sem_wait(&s->sem), 0);
    EQ(sem_post(&s->sem), 0);
    EQ(pthread_spin_lock(&s->spin), 0);
    EQ(pthread_spin_unlock(&s->spin), 0);
  }
  return NULL;
}

static void* struct_worker_seeded(void* arg) {
  static atomic_uint next_seed;
  (void)arg;
  return struct_worker((void*)(uintptr_t)(atomic_fetch_add(&next_seed, 1) + 1));
}

static void test_structs(void) {
  for (int i = 0; i < SLOTS; i++) {
    struct slot* s = &slots[i];
    s->before = s->mid1 = s->mid3 = s->mid4 = s->after = (char)(0x5a + i);
    s->mid2 = (short)(0x5a5a + i);
    if (i % 2) {
      pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
      pthread_cond_t c = PTHREAD_COND_INITIALIZER;
      pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
      s->m = m;
      s->cv = c;
      s->rw = rw;
    } else {
      pthread_mutex_init(&s->m, NULL);
      pthread_cond_init(&s->cv, NULL);
      pthread_rwlock_init(&s->rw, NULL);
    }
    sem_init(&s->sem, 0, 2);
    pthread_spin_init(&s->spin, PTHREAD_PROCESS_PRIVATE);
  }
  spawn(THREADS, struct_worker_seeded, NULL);
  long total = 0, rtotal = 0;
  int canaries = 1;
  for (int i = 0; i < SLOTS; i++) {
    struct slot* s = &slots[i];
    char k = (char)(0x5a + i);
    canaries &= s->before == k && s->mid1 == k && s->mid3 == k && s->mid4 == k && s->after == k &&
                s->mid2 == (short)(0x5a5a + i);
    total += s->counter;
    rtotal += s->rcounter;
    int v;
    sem_getvalue(&s->sem, &v);
    EQ(v, 2);
    EQ(pthread_mutex_destroy(&s->m), 0);
    EQ(pthread_cond_destroy(&s->cv), 0);
    EQ(pthread_rwlock_destroy(&s->rw), 0);
    EQ(sem_destroy(&s->sem), 0);
    EQ(pthread_spin_destroy(&s->spin), 0);
  }
  printf("structs: total %ld rw %ld canaries %s\n", total, rtotal, canaries ? "intact" : "CLOBBERED");
}

// ---- mutex kinds and their errors --------------------------------------------------------
static pthread_mutex_t held;
static int other_unlocks;  // only for kinds that check the owner
static void* try_other(void* arg) {
  pthread_mutex_t* m = arg;
  int r1 = pthread_mutex_trylock(m);
  int r2 = other_unlocks ? pthread_mutex_unlock(m) : 0;  // not ours
  return (void*)(intptr_t)(r1 * 1000 + r2);
}
static int other(pthread_mutex_t* m) {
  pthread_t t;
  void* r;
  pthread_create(&t, NULL, try_other, m);
  pthread_join(t, &r);
  return (int)(intptr_t)r;
}

static void test_mutex_kinds(void) {
  pthread_mutexattr_t a;
  int type;
  EQ(pthread_mutexattr_init(&a), 0);
  EQ(pthread_mutexattr_gettype(&a, &type), 0);
  printf("mutexattr default type %d\n", type);
  EQ(pthread_mutexattr_settype(&a, 99), EINVAL);
  EQ(pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_NONE), 0);
  int proto;
  EQ(pthread_mutexattr_getprotocol(&a, &proto), 0);
  EQ(proto, PTHREAD_PRIO_NONE);
  EQ(pthread_mutexattr_setpshared(&a, 12345), EINVAL);
  int robust;
  EQ(pthread_mutexattr_getrobust(&a, &robust), 0);
  EQ(robust, PTHREAD_MUTEX_STALLED);
  fprintf(stderr, "note: mutexattr_setpshared(SHARED) = %d\n",
          pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED));
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_PRIVATE);

  int kinds[] = {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK, PTHREAD_MUTEX_DEFAULT};
  const char* names[] = {"normal", "recursive", "errorcheck", "default"};
  for (int k = 0; k < 4; k++) {
    pthread_mutex_t m;
    EQ(pthread_mutexattr_settype(&a, kinds[k]), 0);
    EQ(pthread_mutexattr_gettype(&a, &type), 0);
    EQ(type, kinds[k]);
    EQ(pthread_mutex_init(&m, &a), 0);
    EQ(pthread_mutex_lock(&m), 0);
    int relock_try = pthread_mutex_trylock(&m);
    if (relock_try == 0) pthread_mutex_unlock(&m);
    struct timespec abs = in_ms(CLOCK_REALTIME, 30);
    int timed =
        kinds[k] == PTHREAD_MUTEX_NORMAL || kinds[k] == PTHREAD_MUTEX_DEFAULT ? -1 : pthread_mutex_timedlock(&m, &abs);
    if (timed == 0) pthread_mutex_unlock(&m);
    other_unlocks = kinds[k] == PTHREAD_MUTEX_RECURSIVE || kinds[k] == PTHREAD_MUTEX_ERRORCHECK;
    int o = other(&m);
    int destroy_locked = pthread_mutex_destroy(&m);
    EQ(pthread_mutex_unlock(&m), 0);
    int unlock_unlocked =
        kinds[k] == PTHREAD_MUTEX_NORMAL || kinds[k] == PTHREAD_MUTEX_DEFAULT ? -1 : pthread_mutex_unlock(&m);
    printf(
        "mutex %s: trylock-self %d timedlock-self %d other-trylock %d other-unlock %d destroy-locked %d "
        "unlock-unlocked %d\n",
        names[k], relock_try, timed, o / 1000, o % 1000, destroy_locked, unlock_unlocked);
    EQ(pthread_mutex_destroy(&m), 0);
  }
  // Recursion depth, trylock recursion.
  pthread_mutex_t r = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
  for (int i = 0; i < 1000; i++) EQ(pthread_mutex_trylock(&r), 0);
  for (int i = 0; i < 1000; i++) EQ(pthread_mutex_unlock(&r), 0);
  EQ(pthread_mutex_unlock(&r), EPERM);
  // timedlock: ETIMEDOUT, never early; EINVAL for a bad time only when it would wait.
  pthread_mutex_init(&held, NULL);
  pthread_mutex_lock(&held);
  pthread_t t;
  struct timespec bad = {0, 2000000000};
  EQ(pthread_mutex_timedlock(&r, &bad), 0);  // free: locks without looking at the time
  EQ(pthread_mutex_unlock(&r), 0);
  (void)t;
  struct timespec abs = in_ms(CLOCK_REALTIME, 40);
  pthread_mutex_t e = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
  pthread_mutex_lock(&e);
  EQ(pthread_mutex_timedlock(&e, &abs), EDEADLK);
  pthread_mutex_unlock(&e);
  other_unlocks = 0;
  EQ(other(&held), EBUSY * 1000);
  {
    // Another thread holds `held`: our timedlock times out.
    pthread_mutex_unlock(&held);
    pthread_mutex_t h = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&h);
    abs = in_ms(CLOCK_REALTIME, 40);
    // A normal mutex held by ourselves: glibc waits for the timeout.
    int tr = pthread_mutex_timedlock(&h, &abs);
    int early = !reached(CLOCK_REALTIME, &abs);
    struct timespec mabs = in_ms(CLOCK_MONOTONIC, 30);
    int cr = pthread_mutex_clocklock(&h, CLOCK_MONOTONIC, &mabs);
    int cearly = !reached(CLOCK_MONOTONIC, &mabs);
    int badclock = pthread_mutex_clocklock(&h, CLOCK_PROCESS_CPUTIME_ID, &mabs);
    int badtime = pthread_mutex_timedlock(&h, &bad);
    printf("timedlock: %d early %d clocklock %d early %d bad-clock %d bad-time %d\n", tr, early, cr, cearly, badclock,
           badtime);
    pthread_mutex_unlock(&h);
  }
  pthread_mutexattr_destroy(&a);
}

// ---- condition variables -------------------------------------------------------------------
static pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int queue_items, consumed, producers_done;

static void* cond_consumer(void* arg) {
  (void)arg;
  pthread_mutex_lock(&cm);
  for (;;) {
    while (queue_items == 0 && !producers_done) pthread_cond_wait(&cv, &cm);
    if (queue_items == 0) break;
    queue_items--;
    consumed++;
  }
  pthread_mutex_unlock(&cm);
  return NULL;
}
static void* cond_producer(void* arg) {
  (void)arg;
  for (int i = 0; i < 50; i++) {
    pthread_mutex_lock(&cm);
    queue_items++;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&cm);
  }
  return NULL;
}
static void* cond_both(void* arg) { return ((intptr_t)arg & 1) ? cond_producer(arg) : cond_consumer(arg); }
static atomic_int both_id;
static void* cond_both_id(void* arg) {
  (void)arg;
  return cond_both((void*)(intptr_t)atomic_fetch_add(&both_id, 1));
}
static void* cond_finish(void* arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&cm);
    int done = consumed == (THREADS / 2) * 50;
    if (done) {
      producers_done = 1;
      pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&cm);
    if (done) return NULL;
    usleep(2000);
  }
}

static void test_cond(void) {
  pthread_t f;
  pthread_create(&f, NULL, cond_finish, NULL);
  spawn(THREADS, cond_both_id, NULL);
  pthread_join(f, NULL);
  printf("cond: consumed %d left %d\n", consumed, queue_items);

  // timedwait: ETIMEDOUT at, never before, the deadline; on both clocks.
  pthread_condattr_t ca;
  clockid_t clk;
  pthread_condattr_init(&ca);
  pthread_condattr_getclock(&ca, &clk);
  EQ(clk, CLOCK_REALTIME);
  EQ(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC), 0);
  EQ(pthread_condattr_setclock(&ca, CLOCK_PROCESS_CPUTIME_ID), EINVAL);
  pthread_condattr_getclock(&ca, &clk);
  EQ(clk, CLOCK_MONOTONIC);
  fprintf(stderr, "note: condattr_setpshared(SHARED) = %d\n", pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED));
  pthread_cond_t mc;
  pthread_cond_init(&mc, &ca);
  pthread_mutex_lock(&cm);
  int early = 0, results = 0;
  for (int i = 0; i < 5; i++) {
    struct timespec abs = in_ms(CLOCK_REALTIME, 5 + i * 3);
    int r;
    while ((r = pthread_cond_timedwait(&cv, &cm, &abs)) == 0) {
    }
    results += r == ETIMEDOUT;
    early += !reached(CLOCK_REALTIME, &abs);
    struct timespec mabs = in_ms(CLOCK_MONOTONIC, 5 + i * 3);
    while ((r = pthread_cond_timedwait(&mc, &cm, &mabs)) == 0) {
    }
    results += r == ETIMEDOUT;
    early += !reached(CLOCK_MONOTONIC, &mabs);
    mabs = in_ms(CLOCK_MONOTONIC, 4);
    while ((r = pthread_cond_clockwait(&cv, &cm, CLOCK_MONOTONIC, &mabs)) == 0) {
    }
    results += r == ETIMEDOUT;
    early += !reached(CLOCK_MONOTONIC, &mabs);
  }
  struct timespec bad = {0, -1};
  int badtime = pthread_cond_timedwait(&cv, &cm, &bad);
  pthread_mutex_unlock(&cm);
  // Errorcheck mutex not held: EPERM.
  pthread_mutex_t e = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
  int eperm = pthread_cond_wait(&cv, &e);
  printf("cond timed: %d of 15 ETIMEDOUT, early %d, bad-time %d, unowned-errorcheck %d\n", results, early, badtime,
         eperm);
  pthread_cond_destroy(&mc);
  pthread_condattr_destroy(&ca);
}

// A recursive mutex held twice: cond_wait releases it fully and restores it.
static pthread_mutex_t rm = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_cond_t rcv = PTHREAD_COND_INITIALIZER;
static int rflag;
static void* rsignal(void* arg) {
  (void)arg;
  pthread_mutex_lock(&rm);
  rflag = 1;
  pthread_cond_signal(&rcv);
  pthread_mutex_unlock(&rm);
  return NULL;
}

// ---- rwlocks -------------------------------------------------------------------------------
static pthread_rwlock_t rwl = PTHREAD_RWLOCK_INITIALIZER;
static pthread_barrier_t readers_in;
static long shared_value;
static atomic_int writers_inside, readers_inside, bad_overlap;

static void* overlapping_reader(void* arg) {
  (void)arg;
  EQ(pthread_rwlock_rdlock(&rwl), 0);
  pthread_barrier_wait(&readers_in);  // all 8 hold it at once, or this never returns
  EQ(pthread_rwlock_unlock(&rwl), 0);
  return NULL;
}
static void* rw_mixed(void* arg) {
  intptr_t id = (intptr_t)arg;
  (void)id;
  static atomic_int ids;
  int me = atomic_fetch_add(&ids, 1);
  for (int i = 0; i < 100; i++) {
    if ((me + i) % 5 == 0) {
      EQ(pthread_rwlock_wrlock(&rwl), 0);
      if (atomic_fetch_add(&writers_inside, 1) != 0 || atomic_load(&readers_inside) != 0) atomic_store(&bad_overlap, 1);
      shared_value++;
      atomic_fetch_sub(&writers_inside, 1);
      EQ(pthread_rwlock_unlock(&rwl), 0);
    } else {
      EQ(pthread_rwlock_rdlock(&rwl), 0);
      atomic_fetch_add(&readers_inside, 1);
      if (atomic_load(&writers_inside) != 0) atomic_store(&bad_overlap, 1);
      atomic_fetch_sub(&readers_inside, 1);
      EQ(pthread_rwlock_unlock(&rwl), 0);
    }
  }
  return NULL;
}
static void* writer_waits(void* arg) {
  pthread_rwlock_t* l = arg;
  EQ(pthread_rwlock_wrlock(l), 0);
  EQ(pthread_rwlock_unlock(l), 0);
  return NULL;
}
// With a reader inside and a writer waiting, may a new reader enter?
static int reader_enters_past_writer(pthread_rwlock_t* l) {
  EQ(pthread_rwlock_rdlock(l), 0);
  pthread_t w;
  pthread_create(&w, NULL, writer_waits, l);
  usleep(100000);  // the writer is waiting by now
  int r = pthread_rwlock_tryrdlock(l);
  if (r == 0) pthread_rwlock_unlock(l);
  struct timespec abs = in_ms(CLOCK_REALTIME, 20);
  int tr = pthread_rwlock_timedrdlock(l, &abs);
  if (tr == 0) pthread_rwlock_unlock(l);
  EQ(pthread_rwlock_unlock(l), 0);
  pthread_join(w, NULL);
  return r * 1000 + tr;
}

static void test_rwlock(void) {
  pthread_barrier_init(&readers_in, NULL, 8);
  spawn(8, overlapping_reader, NULL);
  pthread_barrier_destroy(&readers_in);
  spawn(THREADS, rw_mixed, NULL);
  printf("rwlock: readers overlap, writes %ld, overlap violations %d\n", shared_value, atomic_load(&bad_overlap));
  pthread_rwlock_t def = PTHREAD_RWLOCK_INITIALIZER;
  pthread_rwlock_t wpref = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
  int d = reader_enters_past_writer(&def), w = reader_enters_past_writer(&wpref);
  printf("rwlock past waiting writer: default try %d timed %d; writer-nonrecursive try %d timed %d\n", d / 1000,
         d % 1000, w / 1000, w % 1000);
  pthread_rwlockattr_t a;
  int kind;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_getkind_np(&a, &kind);
  int badkind = pthread_rwlockattr_setkind_np(&a, 77);
  pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_t viaattr;
  pthread_rwlock_init(&viaattr, &a);
  int wa = reader_enters_past_writer(&viaattr);
  // Errors: relocking as writer, reading while writing, try on a held lock.
  EQ(pthread_rwlock_wrlock(&viaattr), 0);
  int wr = pthread_rwlock_wrlock(&viaattr), rd = pthread_rwlock_rdlock(&viaattr);
  int trw = pthread_rwlock_trywrlock(&viaattr), trr = pthread_rwlock_tryrdlock(&viaattr);
  EQ(pthread_rwlock_unlock(&viaattr), 0);
  EQ(pthread_rwlock_rdlock(&viaattr), 0);
  struct timespec abs = in_ms(CLOCK_REALTIME, 30);
  int tw = pthread_rwlock_timedwrlock(&viaattr, &abs);
  int early = !reached(CLOCK_REALTIME, &abs);
  struct timespec mabs = in_ms(CLOCK_MONOTONIC, 20);
  int cw = pthread_rwlock_clockwrlock(&viaattr, CLOCK_MONOTONIC, &mabs);
  early += !reached(CLOCK_MONOTONIC, &mabs);
  EQ(pthread_rwlock_unlock(&viaattr), 0);
  printf(
      "rwlockattr: default kind %d bad kind %d via attr try %d; wrlock-self %d rdlock-self %d trywr %d tryrd %d "
      "timedwr %d clockwr %d early %d\n",
      kind, badkind, wa / 1000, wr, rd, trw, trr, tw, cw, early);
  pthread_rwlock_destroy(&viaattr);
  pthread_rwlockattr_destroy(&a);
}

// ---- barriers ------------------------------------------------------------------------------
#define BROUNDS 20
static pthread_barrier_t bar;
static atomic_int serials[BROUNDS];
static atomic_int phase_count[BROUNDS];
static atomic_int order_violations;
static void* barrier_worker(void* arg) {
  (void)arg;
  for (int r = 0; r < BROUNDS; r++) {
    atomic_fetch_add(&phase_count[r], 1);
    int e = pthread_barrier_wait(&bar);
    if (e == PTHREAD_BARRIER_SERIAL_THREAD)
      atomic_fetch_add(&serials[r], 1);
    else
      EQ(e, 0);
    if (atomic_load(&phase_count[r]) != THREADS) atomic_store(&order_violations, 1);
  }
  return NULL;
}
static void test_barrier(void) {
  EQ(pthread_barrier_init(&bar, NULL, 0), EINVAL);
  EQ(pthread_barrier_init(&bar, NULL, THREADS), 0);
  spawn(THREADS, barrier_worker, NULL);
  int ok = 1;
  for (int r = 0; r < BROUNDS; r++) ok &= atomic_load(&serials[r]) == 1;
  printf("barrier: %d rounds, one serial thread each %s, order violations %d\n", BROUNDS, ok ? "yes" : "NO",
         atomic_load(&order_violations));
  EQ(pthread_barrier_destroy(&bar), 0);
  pthread_barrierattr_t ba;
  int ps;
  pthread_barrierattr_init(&ba);
  pthread_barrierattr_getpshared(&ba, &ps);
  EQ(ps, PTHREAD_PROCESS_PRIVATE);
  pthread_barrierattr_destroy(&ba);
}

// ---- spin locks ----------------------------------------------------------------------------
static pthread_spinlock_t spin;
static long spin_counter;
static void* spin_worker(void* arg) {
  (void)arg;
  for (int i = 0; i < 1000; i++) {
    pthread_spin_lock(&spin);
    spin_counter++;
    pthread_spin_unlock(&spin);
  }
  return NULL;
}
static void test_spin(void) {
  EQ(pthread_spin_init(&spin, PTHREAD_PROCESS_PRIVATE), 0);
  spawn(THREADS, spin_worker, NULL);
  pthread_spin_lock(&spin);
  int busy = pthread_spin_trylock(&spin);
  pthread_spin_unlock(&spin);
  int free_ = pthread_spin_trylock(&spin);
  pthread_spin_unlock(&spin);
  printf("spin: counter %ld trylock-held %d trylock-free %d\n", spin_counter, busy, free_);
  pthread_spin_destroy(&spin);
}

// ---- semaphores ----------------------------------------------------------------------------
#define BUF 8
static sem_t empty_slots, full_slots;
static pthread_mutex_t buf_lock = PTHREAD_MUTEX_INITIALIZER;
static int buf[BUF], head, tail;
static long sum_in, sum_out;
static atomic_int sem_ids;
static void* sem_worker(void* arg) {
  (void)arg;
  int me = atomic_fetch_add(&sem_ids, 1);
  for (int i = 0; i < 100; i++) {
    if (me % 2 == 0) {
      while (sem_wait(&empty_slots) != 0) EQ(ERRNO, EINTR);
      pthread_mutex_lock(&buf_lock);
      buf[head] = me * 1000 + i;
      head = (head + 1) % BUF;
      sum_in += me * 1000 + i;
      pthread_mutex_unlock(&buf_lock);
      sem_post(&full_slots);
    } else {
      while (sem_wait(&full_slots) != 0) EQ(ERRNO, EINTR);
      pthread_mutex_lock(&buf_lock);
      sum_out += buf[tail];
      tail = (tail + 1) % BUF;
      pthread_mutex_unlock(&buf_lock);
      sem_post(&empty_slots);
    }
  }
  return NULL;
}

static sem_t sig_sem;
static void on_alarm(int sig) {
  (void)sig;
  int saved = ERRNO;
  sem_post(&sig_sem);
  ERRNO = saved;
}
static void* sig_waiter(void* arg) {
  int* woken = arg;
  int r;
  while ((r = sem_wait(&sig_sem)) != 0 && ERRNO == EINTR) {
  }
  *woken = r == 0;
  return NULL;
}

static void test_sem(void) {
  sem_init(&empty_slots, 0, BUF);
  sem_init(&full_slots, 0, 0);
  spawn(THREADS, sem_worker, NULL);
  int ve, vf;
  sem_getvalue(&empty_slots, &ve);
  sem_getvalue(&full_slots, &vf);
  printf("sem bounded buffer: in %ld out %ld, empty %d full %d\n", sum_in, sum_out, ve, vf);

  sem_t s;
  sem_init(&s, 0, 0);
  ERRNO = 0;
  int tw = sem_trywait(&s);
  int te = ERRNO;
  struct timespec abs = in_ms(CLOCK_REALTIME, 30);
  int r = sem_timedwait(&s, &abs);
  int re = ERRNO;
  int early = !reached(CLOCK_REALTIME, &abs);
  struct timespec mabs = in_ms(CLOCK_MONOTONIC, 20);
  int cr = sem_clockwait(&s, CLOCK_MONOTONIC, &mabs);
  int ce = ERRNO;
  early += !reached(CLOCK_MONOTONIC, &mabs);
  struct timespec bad = {0, 1000000000};
  int br = sem_timedwait(&s, &bad);
  int be = ERRNO;
  sem_post(&s);
  ERRNO = 1234;
  int ok_bad = sem_timedwait(&s, &bad);  // value 1: glibc looks at the time first
  int okbe = ERRNO;
  int after = sem_trywait(&s);
  printf(
      "sem: after %d trywait %d/%s timedwait %d/%s clockwait %d/%s early %d bad-time %d/%s bad-time-available %d/%s\n",
      after, tw, strerror(te), r, strerror(re), cr, strerror(ce), early, br, strerror(be), ok_bad,
      okbe == 1234 ? "errno kept" : strerror(okbe));
  sem_destroy(&s);
  ERRNO = 0;
  int ir = sem_init(&s, 0, (unsigned)SEM_VALUE_MAX + 1u);
  printf("sem_init over max: %d/%s\n", ir, strerror(ERRNO));
  sem_init(&s, 0, SEM_VALUE_MAX);
  ERRNO = 0;
  int pr = sem_post(&s);
  printf("sem_post at max: %d/%s\n", pr, strerror(ERRNO));
  sem_destroy(&s);

  // sem_post from a SIGALRM handler wakes a waiting thread; twice, the
  // second time with the main thread itself the waiter.
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  sem_init(&sig_sem, 0, 0);
  int woken = 0;
  pthread_t w;
  pthread_create(&w, NULL, sig_waiter, &woken);
  struct itimerval it = {{0, 0}, {0, 50000}};
  setitimer(ITIMER_REAL, &it, NULL);
  pthread_join(w, NULL);
  int woken_main = 0;
  setitimer(ITIMER_REAL, &it, NULL);
  sig_waiter(&woken_main);
  printf("sem_post from a signal handler: thread woken %d, main woken %d\n", woken, woken_main);
  sem_destroy(&sig_sem);
}

// ---- a named semaphore: glibc's sem_open lays it out, the library's
// sem_* use it (a process-shared futex protocol, as glibc's)
static sem_t* named;
static void* named_poster(void* arg) {
  (void)arg;
  usleep(20000);
  sem_post(named);
  return NULL;
}
static void test_named_sem(void) {
  char name[64];
  snprintf(name, sizeof name, "/loom-sync-abi-%d", (int)getpid());
  named = sem_open(name, O_CREAT | O_EXCL, 0600, 1);
  if (named == SEM_FAILED) {
    printf("named sem: sem_open failed\n");
    return;
  }
  sem_unlink(name);
  int v0, v1;
  sem_getvalue(named, &v0);
  int w = sem_wait(named);
  int t = sem_trywait(named);
  int te = ERRNO;
  pthread_t p;
  pthread_create(&p, NULL, named_poster, NULL);
  int w2;
  while ((w2 = sem_wait(named)) != 0 && ERRNO == EINTR) {
  }
  pthread_join(p, NULL);
  struct timespec abs = in_ms(CLOCK_REALTIME, 20);
  int tw = sem_timedwait(named, &abs);
  int twe = ERRNO;
  sem_post(named);
  sem_post(named);
  sem_getvalue(named, &v1);
  printf("named sem: value %d wait %d trywait %d/%s wait-for-post %d timedwait %d/%s value %d\n", v0, w, t,
         strerror(te), w2, tw, strerror(twe), v1);
  sem_close(named);
}

// ---- once under contention, on a fresh once ---------------------------------------------------
static pthread_once_t once2 = PTHREAD_ONCE_INIT;
static atomic_int once2_runs, once2_seen_done;
static void once2_init(void) {
  usleep(30000);
  atomic_fetch_add(&once2_runs, 1);
}
static void* once2_worker(void* arg) {
  (void)arg;
  pthread_once(&once2, once2_init);
  if (atomic_load(&once2_runs) == 1) atomic_fetch_add(&once2_seen_done, 1);
  return NULL;
}

int main(void) {
  Dl_info info;
  if (dladdr((void*)&pthread_mutex_lock, &info) && info.dli_fname)
    fprintf(stderr, "impl: pthread_mutex_lock from %s\n", info.dli_fname);
  if (dladdr((void*)&sem_post, &info) && info.dli_fname) fprintf(stderr, "impl: sem_post from %s\n", info.dli_fname);
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_sizes();
  test_static();
  test_structs();
  test_mutex_kinds();
  test_cond();
  {
    // A recursive mutex held once: cond_wait releases and restores it.
    // (Held twice, glibc's cond_wait releases one level only and deadlocks.)
    pthread_mutex_lock(&rm);
    pthread_t t;
    pthread_create(&t, NULL, rsignal, NULL);
    while (!rflag) EQ(pthread_cond_wait(&rcv, &rm), 0);
    int u1 = pthread_mutex_unlock(&rm), u2 = pthread_mutex_unlock(&rm);
    pthread_join(t, NULL);
    printf("cond with a recursive mutex: unlocks %d %d\n", u1, u2);
  }
  test_rwlock();
  test_barrier();
  test_spin();
  spawn(THREADS, once2_worker, NULL);
  printf("once: runs %d, all saw it done %s\n", atomic_load(&once2_runs),
         atomic_load(&once2_seen_done) == THREADS ? "yes" : "no");
  test_sem();
  test_named_sem();
  printf("failures: %d\n", failures);
  return failures != 0;
}
