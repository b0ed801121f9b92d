// destroy_after_use_test.c — every glibc synchronisation object that
// libloom-pthread implements, destroyed and its memory reused as soon as the
// waiter's call returns. POSIX allows it (a semaphore or a rwlock on the
// waiter's stack, a barrier freed by its serial thread), so the thread that
// let the waiter return must not touch the object after that point
// (docs/DESIGN.md, "no sync object is touched after...").
//
// Each round puts the object in a fresh heap block between guard bytes; the
// waiter, once its call returned, destroys the object and fills it with a
// poison pattern; after both threads are done the whole block must still
// read guard, poison, guard. A touch after the release either changes the
// pattern or, reading the poison as state, sets off more touches (a stale
// wake-up, a corrupted list) that do.
//
// The process-shared, robust and priority-protocol kinds (shared.cpp) run
// the same rounds ("shared ..."), on one process's threads.
//
// Built three ways (tests/pthread_lib/CMakeLists.txt): on glibc, linked with
// libloom-pthread, and with libloom-pthread's sources compiled in with
// LOOM_SYNC_TEST_HOOK=loom_test_released, which makes the library call
// loom_test_released(object, point) right after each releasing operation,
// and in a waiter between its parked mark and its park: while the object is
// this round's, it sleeps there (a fibre sleep: the other thread runs
// meanwhile, on this processor or the other), which widens the windows from
// a few instructions to 50-200 us. That hook is this file's, not the
// library's.
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { kGuard = 0x5A, kPoison = 0xA6, kPad = 64, kObj = 64, kBlock = kPad + kObj + kPad };

static int rounds = 400;
// The shared variants (capi/pthread/shared.cpp): process-shared rwlocks,
// condvars and barriers, and mutexes process-shared, robust, PRIO_INHERIT
// and PRIO_PROTECT in turn.
static int shared_mode;
static int failures;
static _Atomic(char*) current;  // this round's block, for the hook
static atomic_int stalls;
static pthread_t destroyer;  // this round's waiter, which destroys the object
static atomic_int destroyer_known;

static void i_destroy(void) {
  destroyer = pthread_self();
  atomic_store(&destroyer_known, 1);
}

// point 0: right after an operation that may let another thread destroy
// the object; 1: a waiter between its parked mark and its park (so that a
// releaser finds the mark while the waiter may still take the lock itself).
void loom_test_released(const void* object, int point) {
  char* b = atomic_load(&current);
  const char* o = object;
  if (!b || o < b + kPad || o >= b + kPad + kObj) return;
  if (point == 0 && atomic_load(&destroyer_known) && pthread_equal(pthread_self(), destroyer)) return;  // not its own releases
  atomic_fetch_add(&stalls, 1);
  usleep(point == 0 ? 200 : 50);
}

static char* block_new(void) {
  char* b = malloc(kBlock);
  memset(b, kGuard, kBlock);
  memset(b + kPad, 0, kObj);
  atomic_store(&destroyer_known, 0);
  atomic_store(&current, b);
  return b;
}

// 0xA6 in every byte: read as a lock word it says free but parked on (no
// writer, readers and writers parked), so a stale unlocker reading it goes
// on to write.
static void poison(void* obj) { memset(obj, kPoison, kObj); }

static void block_check(char* b, const char* what, int round) {
  atomic_store(&current, NULL);
  for (int i = 0; i < kBlock; i++) {
    int want = i >= kPad && i < kPad + kObj ? kPoison : kGuard;
    if ((unsigned char)b[i] != want) {
      printf("FAIL %s round %d: byte %d is 0x%02x, not 0x%02x: touched after destroy\n", what, round, i - kPad,
             (unsigned char)b[i], want);
      failures++;
      break;
    }
  }
  free(b);
}

static void run2(void* (*a)(void*), void* (*b)(void*), void* arg) {
  pthread_t ta, tb;
  if (pthread_create(&ta, NULL, a, arg) || pthread_create(&tb, NULL, b, arg)) {
    printf("pthread_create failed\n");
    exit(2);
  }
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
}

static void pause_a_little(int round) {
  if (round % 3) usleep((useconds_t)(round % 7) * 10);
}

// ---- semaphore: the waiter blocks (or spins on trywait) until the post ----
static int sem_round;
static void* sem_waiter(void* arg) {
  i_destroy();
  sem_t* s = arg;
  if (sem_round % 2)
    while (sem_trywait(s) != 0) sched_yield();
  else
    sem_wait(s);
  sem_destroy(s);
  poison(s);
  return NULL;
}
static void* sem_poster(void* arg) {
  pause_a_little(sem_round);
  sem_post(arg);
  return NULL;
}
static void test_sem(void) {
  for (sem_round = 0; sem_round < rounds; sem_round++) {
    char* b = block_new();
    sem_t* s = (sem_t*)(b + kPad);
    sem_init(s, 0, 0);
    run2(sem_waiter, sem_poster, s);
    block_check(b, "semaphore", sem_round);
  }
}

// ---- rwlock: a writer holds it, a reader (or writer) waits; the waiter
// destroys it once in and out ----
static int rw_round;
static atomic_int rw_held;
static void* rw_waiter(void* arg) {
  i_destroy();
  pthread_rwlock_t* rw = arg;
  while (!atomic_load(&rw_held)) sched_yield();
  if (rw_round % 2)
    pthread_rwlock_rdlock(rw);
  else
    pthread_rwlock_wrlock(rw);
  pthread_rwlock_unlock(rw);
  pthread_rwlock_destroy(rw);
  poison(rw);
  return NULL;
}
static void* rw_holder(void* arg) {
  pthread_rwlock_t* rw = arg;
  pthread_rwlock_wrlock(rw);
  atomic_store(&rw_held, 1);
  // Until the waiter has marked itself parked (loom's word: bit 1 readers,
  // bit 2 writers; glibc's differs, then this just waits a little).
  for (int i = 0; i < 200 && !(*(volatile unsigned*)rw & 6); i++) sched_yield();
  pthread_rwlock_unlock(rw);
  return NULL;
}
// The last reader's unlock: two readers in, a writer waits, the second
// reader out lets it in.
static void* rw_reader_holder(void* arg) {
  pthread_rwlock_t* rw = arg;
  pthread_rwlock_rdlock(rw);
  atomic_store(&rw_held, 1);
  for (int i = 0; i < 200 && !(*(volatile unsigned*)rw & 4); i++) sched_yield();
  pthread_rwlock_unlock(rw);
  return NULL;
}
static void* rw_writer_waiter(void* arg) {
  i_destroy();
  pthread_rwlock_t* rw = arg;
  while (!atomic_load(&rw_held)) sched_yield();
  pthread_rwlock_wrlock(rw);
  pthread_rwlock_unlock(rw);
  pthread_rwlock_destroy(rw);
  poison(rw);
  return NULL;
}
static void test_rwlock(void) {
  for (rw_round = 0; rw_round < rounds; rw_round++) {
    char* b = block_new();
    pthread_rwlock_t* rw = (pthread_rwlock_t*)(b + kPad);
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    if (rw_round % 4 >= 2) pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    if (shared_mode) pthread_rwlockattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_rwlock_init(rw, &a);
    atomic_store(&rw_held, 0);
    if (rw_round % 3 == 2)
      run2(rw_writer_waiter, rw_reader_holder, rw);
    else
      run2(rw_waiter, rw_holder, rw);
    block_check(b, "rwlock", rw_round);
  }
}

// ---- mutex ----
static int mx_round;
static atomic_int mx_held;
static void* mx_waiter(void* arg) {
  i_destroy();
  pthread_mutex_t* m = arg;
  while (!atomic_load(&mx_held)) sched_yield();
  pthread_mutex_lock(m);
  pthread_mutex_unlock(m);
  pthread_mutex_destroy(m);
  poison(m);
  return NULL;
}
static void* mx_holder(void* arg) {
  pthread_mutex_t* m = arg;
  pthread_mutex_lock(m);
  atomic_store(&mx_held, 1);
  for (int i = 0; i < 200 && !(*(volatile unsigned*)m & 2); i++) sched_yield();
  pthread_mutex_unlock(m);
  return NULL;
}
static void test_mutex(void) {
  static const int kinds[] = {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK,
                              PTHREAD_MUTEX_ADAPTIVE_NP};
  for (mx_round = 0; mx_round < rounds; mx_round++) {
    char* b = block_new();
    pthread_mutex_t* m = (pthread_mutex_t*)(b + kPad);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, kinds[mx_round % 4]);
    if (shared_mode) {
      switch (mx_round / 4 % 4) {
        case 0: pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED); break;
        case 1: pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST); break;
        case 2: pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT); break;
        default: pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_PROTECT); break;
      }
    }
    pthread_mutex_init(m, &a);
    atomic_store(&mx_held, 0);
    run2(mx_waiter, mx_holder, m);
    block_check(b, "mutex", mx_round);
  }
}

// ---- condition variable: signalled (or broadcast) under the mutex ----
static int cv_round;
static pthread_mutex_t cv_mutex = PTHREAD_MUTEX_INITIALIZER;
static int cv_flag;
static void* cv_waiter(void* arg) {
  i_destroy();
  pthread_cond_t* c = arg;
  pthread_mutex_lock(&cv_mutex);
  while (!cv_flag) pthread_cond_wait(c, &cv_mutex);
  pthread_mutex_unlock(&cv_mutex);
  pthread_cond_destroy(c);
  poison(c);
  return NULL;
}
static void* cv_signaller(void* arg) {
  pause_a_little(cv_round);
  pthread_mutex_lock(&cv_mutex);
  cv_flag = 1;
  if (cv_round % 2)
    pthread_cond_broadcast(arg);
  else
    pthread_cond_signal(arg);
  pthread_mutex_unlock(&cv_mutex);
  return NULL;
}
static void test_cond(void) {
  for (cv_round = 0; cv_round < rounds; cv_round++) {
    char* b = block_new();
    pthread_cond_t* c = (pthread_cond_t*)(b + kPad);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    if (shared_mode) pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    pthread_cond_init(c, &ca);
    cv_flag = 0;
    run2(cv_waiter, cv_signaller, c);
    block_check(b, "condvar", cv_round);
  }
}

// ---- barrier: its serial thread destroys it at once ----
static int bar_round;
static void* bar_party(void* arg) {
  pthread_barrier_t* b = arg;
  if (pthread_barrier_wait(b) == PTHREAD_BARRIER_SERIAL_THREAD) {
    pthread_barrier_destroy(b);  // waits for the other to be out
    poison(b);
  }
  return NULL;
}
static void* bar_late(void* arg) {
  pause_a_little(bar_round);
  return bar_party(arg);
}
static void test_barrier(void) {
  for (bar_round = 0; bar_round < rounds; bar_round++) {
    char* blk = block_new();
    pthread_barrier_t* b = (pthread_barrier_t*)(blk + kPad);
    pthread_barrierattr_t ba;
    pthread_barrierattr_init(&ba);
    if (shared_mode) pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(b, &ba, 2);
    run2(bar_party, bar_late, b);
    block_check(blk, "barrier", bar_round);
  }
}

// ---- spin lock ----
static atomic_int sp_held;
static void* sp_waiter(void* arg) {
  i_destroy();
  pthread_spinlock_t* l = arg;
  while (!atomic_load(&sp_held)) sched_yield();
  pthread_spin_lock(l);
  pthread_spin_unlock(l);
  pthread_spin_destroy(l);
  poison((void*)l);
  return NULL;
}
static void* sp_holder(void* arg) {
  pthread_spinlock_t* l = arg;
  pthread_spin_lock(l);
  atomic_store(&sp_held, 1);
  for (int i = 0; i < 20; i++) sched_yield();
  pthread_spin_unlock(l);
  return NULL;
}
static void test_spin(void) {
  for (int r = 0; r < rounds; r++) {
    char* b = block_new();
    pthread_spinlock_t* l = (pthread_spinlock_t*)(b + kPad);
    pthread_spin_init(l, PTHREAD_PROCESS_PRIVATE);
    atomic_store(&sp_held, 0);
    run2(sp_waiter, sp_holder, (void*)l);
    block_check(b, "spin lock", r);
  }
}

// ---- once: the caller that waited for init reuses the memory ----
static _Atomic(pthread_once_t*) once_obj;
static pthread_t once_runner;  // (not a __thread flag: a fibre's thread-locals are its processor's)
static void once_init(void) {
  once_runner = pthread_self();
  for (int i = 0; i < 20; i++) sched_yield();
}
static void* once_caller(void* arg) {
  (void)arg;
  pthread_once_t* o = atomic_load(&once_obj);
  pthread_once(o, once_init);
  if (!pthread_equal(once_runner, pthread_self())) poison((void*)o);  // it waited for (or found) init done
  return NULL;
}
static void test_once(void) {
  for (int r = 0; r < rounds; r++) {
    char* b = block_new();
    pthread_once_t* o = (pthread_once_t*)(b + kPad);
    *o = PTHREAD_ONCE_INIT;
    atomic_store(&once_obj, o);
    run2(once_caller, once_caller, NULL);
    block_check(b, "once", r);
  }
}

static void shared_variant(void (*run)(void)) {
  shared_mode = 1;
  run();
  shared_mode = 0;
}
static void test_shared_rwlock(void) { shared_variant(test_rwlock); }
static void test_shared_mutex(void) { shared_variant(test_mutex); }
static void test_shared_barrier(void) { shared_variant(test_barrier); }
// A process-shared condvar with a process-shared mutex.
static void test_shared_cond(void) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutex_init(&cv_mutex, &a);
  shared_variant(test_cond);
  pthread_mutex_destroy(&cv_mutex);
  pthread_mutex_init(&cv_mutex, NULL);
}

int main(int argc, char** argv) {
  if (argc > 1) rounds = atoi(argv[1]);
  static const struct {
    const char* name;
    void (*run)(void);
  } tests[] = {{"semaphore", test_sem}, {"rwlock", test_rwlock}, {"mutex", test_mutex}, {"condvar", test_cond},
               {"barrier", test_barrier}, {"spin lock", test_spin}, {"once", test_once},
               {"shared rwlock", test_shared_rwlock}, {"shared mutex", test_shared_mutex},
               {"shared condvar", test_shared_cond}, {"shared barrier", test_shared_barrier}};
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
    if (argc > 2 && !strstr(argv[2], tests[i].name)) continue;
    fprintf(stderr, "%s...\n", tests[i].name);
    tests[i].run();
  }
  printf("destroy-after-use: %d rounds per object, %d stalls in the hook, %d failures\n", rounds,
         atomic_load(&stalls), failures);
  return failures ? 1 : 0;
}
