/* tests/capi/thread_test.c — loom.h's threads: create, join, detach, exit,
 * attributes, names, cancellation at each of loom.h's cancellation points
 * and its rules, cleanup handlers, once, keys, clusters,
 * migration, per-fibre errno, and callers that are kernel threads. */
#define _POSIX_C_SOURCE 200809L
#include <loom/loom.h>
#include <poll.h>
#include <pthread.h> /* the system's: a kernel thread that is not a processor */
#include <stdatomic.h>
#include <time.h>

#include "ctest.h"

/* ---- create and join -------------------------------------------------------------- */

static void* add_one(void* arg) { return (void*)((intptr_t)arg + 1); }

static void create_join_returns_the_value(void) {
  enum { N = 200 };
  loom_t t[N];
  for (int i = 0; i < N; ++i) CHECK_EQ(loom_create(&t[i], NULL, add_one, (void*)(intptr_t)i), 0);
  for (int i = 0; i < N; ++i) {
    void* r = NULL;
    CHECK_EQ(loom_join(t[i], &r), 0);
    CHECK_EQ((intptr_t)r, i + 1);
  }
}

/* The id is stored before the new fibre can run (POSIX). */
static void* sees_own_id(void* arg) { return (void*)(intptr_t)loom_equal(loom_self(), **(loom_t**)arg); }

static void self_is_the_created_id(void) {
  enum { N = 64 };
  loom_t t[N];
  loom_t* where[N];
  for (int i = 0; i < N; ++i) {
    where[i] = &t[i];
    CHECK_EQ(loom_create(&t[i], NULL, sees_own_id, &where[i]), 0);
  }
  for (int i = 0; i < N; ++i) {
    void* r = NULL;
    CHECK_EQ(loom_join(t[i], &r), 0);
    CHECK_EQ((intptr_t)r, 1);
  }
  CHECK(loom_equal(loom_self(), loom_self()));
  CHECK(!loom_equal(loom_self(), t[0]));
  CHECK(loom_self() != 0);
}

static loom_sem_t gate, detached_gate;

static void* wait_gate(void* arg) {
  CHECK_EQ(loom_sem_wait((loom_sem_t*)arg), 0);
  return (void*)7;
}

static void* join_self(void* arg) {
  (void)arg;
  return (void*)(intptr_t)loom_join(loom_self(), NULL);
}

static loom_t join_target;
static atomic_int joiner_started;

static void* join_other(void* arg) {
  void* r = NULL;
  atomic_store(&joiner_started, 1);
  CHECK_EQ(loom_join(join_target, &r), 0);
  CHECK_EQ((intptr_t)r, 7);
  return arg;
}

static void join_errors(void) {
  void* r;
  CHECK_EQ(loom_sem_init(&gate, 0, 0), 0);
  /* EDEADLK: joining oneself, from a fibre and from main. */
  loom_t t;
  CHECK_EQ(loom_create(&t, NULL, join_self, NULL), 0);
  CHECK_EQ(loom_join(t, &r), 0);
  CHECK_EQ((intptr_t)r, EDEADLK);
  CHECK_EQ(loom_join(loom_self(), NULL), EDEADLK); /* main may be joined, by others */
  /* ESRCH: a null id. */
  CHECK_EQ(loom_join(0, NULL), ESRCH);
  CHECK_EQ(loom_detach(0), ESRCH);
  /* EINVAL: a fibre another fibre is already joining. */
  CHECK_EQ(loom_create(&join_target, NULL, wait_gate, &gate), 0);
  loom_t joiner;
  CHECK_EQ(loom_create(&joiner, NULL, join_other, NULL), 0);
  while (!atomic_load(&joiner_started)) loom_yield();
  loom_usleep(20000); /* it is inside loom_join now */
  struct timespec soon = after(CLOCK_REALTIME, 10 * MS);
  CHECK_EQ(loom_timedjoin_np(join_target, NULL, &soon), EINVAL);
  CHECK_EQ(loom_detach(join_target), EINVAL);
  CHECK_EQ(loom_sem_post(&gate), 0);
  CHECK_EQ(loom_join(joiner, NULL), 0);
  CHECK_EQ(loom_sem_destroy(&gate), 0);
  /* EINVAL: a detached fibre (still running; its semaphore outlives it). */
  CHECK_EQ(loom_sem_init(&detached_gate, 0, 0), 0);
  CHECK_EQ(loom_create(&t, NULL, wait_gate, &detached_gate), 0);
  CHECK_EQ(loom_detach(t), 0);
  CHECK_EQ(loom_join(t, NULL), EINVAL);
  CHECK_EQ(loom_detach(t), EINVAL);
  CHECK_EQ(loom_sem_post(&detached_gate), 0);
}

static void tryjoin_and_timedjoin(void) {
  CHECK_EQ(loom_sem_init(&gate, 0, 0), 0);
  loom_t t;
  void* r = NULL;
  CHECK_EQ(loom_create(&t, NULL, wait_gate, &gate), 0);
  CHECK_EQ(loom_tryjoin_np(t, &r), EBUSY);
  struct timespec abs = after(CLOCK_REALTIME, 30 * MS);
  CHECK_EQ(loom_timedjoin_np(t, &r, &abs), ETIMEDOUT);
  CHECK_NOT_EARLY(CLOCK_REALTIME, abs);
  struct timespec mono = after(CLOCK_MONOTONIC, 20 * MS);
  CHECK_EQ(loom_clockjoin_np(t, &r, CLOCK_MONOTONIC, &mono), ETIMEDOUT);
  CHECK_NOT_EARLY(CLOCK_MONOTONIC, mono);
  struct timespec bad = {0, 1000000000};
  CHECK_EQ(loom_timedjoin_np(t, &r, &bad), EINVAL);
  CHECK_EQ(loom_sem_post(&gate), 0);
  abs = after(CLOCK_REALTIME, 10000 * MS);
  CHECK_EQ(loom_timedjoin_np(t, &r, &abs), 0);
  CHECK_EQ((intptr_t)r, 7);
  /* tryjoin of a fibre that has finished. */
  CHECK_EQ(loom_create(&t, NULL, add_one, (void*)41), 0);
  int e;
  while ((e = loom_tryjoin_np(t, &r)) == EBUSY) loom_usleep(1000);
  CHECK_EQ(e, 0);
  CHECK_EQ((intptr_t)r, 42);
  CHECK_EQ(loom_sem_destroy(&gate), 0);
}

/* ---- detach ------------------------------------------------------------------------ */

static atomic_int detached_done;
static loom_mutex_t done_lock = LOOM_MUTEX_INITIALIZER;
static loom_cond_t done_cond = LOOM_COND_INITIALIZER;

static void* finish_detached(void* arg) {
  if (arg) CHECK_EQ(loom_detach(loom_self()), 0);
  loom_yield();
  CHECK_EQ(loom_mutex_lock(&done_lock), 0);
  atomic_fetch_add(&detached_done, 1);
  CHECK_EQ(loom_cond_broadcast(&done_cond), 0);
  CHECK_EQ(loom_mutex_unlock(&done_lock), 0);
  return NULL;
}

static void detached_fibres_free_themselves(void) {
  enum { N = 300 };
  loom_attr_t a;
  CHECK_EQ(loom_attr_init(&a), 0);
  CHECK_EQ(loom_attr_setdetachstate(&a, LOOM_CREATE_DETACHED), 0);
  for (int i = 0; i < N; ++i) {
    loom_t t;
    if (i % 3 == 0) {
      CHECK_EQ(loom_create(&t, &a, finish_detached, NULL), 0); /* by attribute */
    } else if (i % 3 == 1) {
      CHECK_EQ(loom_create(&t, NULL, finish_detached, (void*)1), 0); /* detaches itself */
    } else {
      CHECK_EQ(loom_create(&t, NULL, finish_detached, NULL), 0);
      CHECK_EQ(loom_detach(t), 0); /* by its creator, maybe after it finished */
    }
  }
  CHECK_EQ(loom_attr_destroy(&a), 0);
  CHECK_EQ(loom_mutex_lock(&done_lock), 0);
  while (atomic_load(&detached_done) < N) CHECK_EQ(loom_cond_wait(&done_cond, &done_lock), 0);
  CHECK_EQ(loom_mutex_unlock(&done_lock), 0);
}

/* ---- exit, cleanup handlers, keys --------------------------------------------------- */

static char trail[64];
static loom_key_t trail_key;

static void note(void* s) { strcat(trail, (const char*)s); }

static void nested_exit(int depth);
static void (*volatile deeper)(int) = nested_exit; /* frames to unwind */

static void nested_exit(int depth) {
  if (depth == 0) loom_exit((void*)99);
  deeper(depth - 1);
  note("never");
}

static void* exits_with_handlers(void* arg) {
  (void)arg;
  CHECK_EQ(loom_setspecific(trail_key, "K"), 0);
  loom_cleanup_push(note, "a");
  loom_cleanup_push(note, "b");
  loom_cleanup_push(note, "x");
  loom_cleanup_pop(0); /* popped without running */
  loom_cleanup_push(note, "c");
  loom_cleanup_pop(1); /* popped and run */
  nested_exit(5);
  loom_cleanup_pop(0);
  loom_cleanup_pop(0);
  return NULL;
}

static void exit_runs_handlers_then_key_destructors(void) {
  trail[0] = 0;
  CHECK_EQ(loom_key_create(&trail_key, note), 0);
  loom_t t;
  void* r = NULL;
  CHECK_EQ(loom_create(&t, NULL, exits_with_handlers, NULL), 0);
  CHECK_EQ(loom_join(t, &r), 0);
  CHECK_EQ((intptr_t)r, 99);
  /* c by pop(1); b then a by loom_exit, innermost first; then K. */
  CHECK(strcmp(trail, "cbaK") == 0);
  CHECK_EQ(loom_key_delete(trail_key), 0);
}

/* ---- attributes ----------------------------------------------------------------------- */

static void* report_stack(void* arg) {
  loom_attr_t* a = (loom_attr_t*)arg;
  char local = 0;
  CHECK_EQ(loom_getattr_np(loom_self(), a), 0);
  void* addr;
  size_t size;
  CHECK_EQ(loom_attr_getstack(a, &addr, &size), 0);
  CHECK((char*)addr <= &local && &local < (char*)addr + size);
  /* The whole requested stack is usable. */
  volatile char big[200 * 1024];
  big[0] = 1;
  big[sizeof big - 1] = 1;
  return (void*)(intptr_t)(big[0] + big[sizeof big - 1]);
}

static void attributes(void) {
  loom_attr_t a;
  int v;
  size_t n;
  loom_cluster_t* c;
  CHECK_EQ(loom_attr_init(&a), 0);
  CHECK_EQ(loom_attr_getdetachstate(&a, &v), 0);
  CHECK_EQ(v, LOOM_CREATE_JOINABLE);
  CHECK_EQ(loom_attr_setdetachstate(&a, 7), EINVAL);
  CHECK_EQ(loom_attr_getstacksize(&a, &n), 0);
  CHECK_EQ(n, LOOM_STACK_DEFAULT);
  CHECK_EQ(loom_attr_setstacksize(&a, LOOM_STACK_MIN - 1), EINVAL);
  CHECK_EQ(loom_attr_setstacksize(&a, LOOM_STACK_MIN), 0);
  CHECK_EQ(loom_attr_getstacksize(&a, &n), 0);
  CHECK_EQ(n, LOOM_STACK_MIN);
  CHECK_EQ(loom_attr_getguardsize(&a, &n), 0);
  CHECK_EQ(n, (size_t)sysconf(_SC_PAGESIZE));
  CHECK_EQ(loom_attr_setguardsize(&a, 0), 0);
  CHECK_EQ(loom_attr_getguardsize(&a, &n), 0);
  CHECK_EQ(n, 0);
  CHECK_EQ(loom_attr_getscope(&a, &v), 0);
  CHECK_EQ(v, LOOM_SCOPE_PROCESS);
  CHECK_EQ(loom_attr_setscope(&a, LOOM_SCOPE_SYSTEM), ENOTSUP);
  CHECK_EQ(loom_attr_setscope(&a, 9), EINVAL);
  CHECK_EQ(loom_attr_getpriority(&a, &v), 0);
  CHECK_EQ(v, LOOM_PRIORITY_NORMAL);
  CHECK_EQ(loom_attr_setpriority(&a, LOOM_PRIORITY_HIGH), 0);
  CHECK_EQ(loom_attr_setpriority(&a, 3), EINVAL);
  CHECK_EQ(loom_attr_getcluster(&a, &c), 0);
  CHECK(c == NULL);
  void* addr;
  CHECK_EQ(loom_attr_getstack(&a, &addr, &n), EINVAL); /* only after loom_getattr_np */

  /* A 256 KiB stack, reported by loom_getattr_np and usable to the end. */
  CHECK_EQ(loom_attr_setstacksize(&a, 256 * 1024), 0);
  loom_attr_t seen;
  loom_t t;
  void* r;
  CHECK_EQ(loom_create(&t, &a, report_stack, &seen), 0);
  CHECK_EQ(loom_join(t, &r), 0);
  CHECK_EQ((intptr_t)r, 2);
  CHECK_EQ(loom_attr_getstacksize(&seen, &n), 0);
  CHECK(n >= 256 * 1024);
  CHECK_EQ(loom_attr_getpriority(&seen, &v), 0);
  CHECK_EQ(v, LOOM_PRIORITY_HIGH);
  CHECK_EQ(loom_attr_getcluster(&seen, &c), 0);
  CHECK(c == loom_cluster_default());
  CHECK_EQ(loom_attr_destroy(&seen), 0);

  /* A destroyed attribute object is refused. */
  CHECK_EQ(loom_attr_destroy(&a), 0);
  CHECK_EQ(loom_attr_destroy(&a), EINVAL);
  CHECK_EQ(loom_attr_setdetachstate(&a, LOOM_CREATE_DETACHED), EINVAL);
  CHECK_EQ(loom_create(&t, &a, add_one, NULL), EINVAL);

  /* main's own stack. */
  char local = 0;
  CHECK_EQ(loom_getattr_np(loom_self(), &seen), 0);
  CHECK_EQ(loom_attr_getstack(&seen, &addr, &n), 0);
  CHECK((char*)addr <= &local && &local < (char*)addr + n);
  CHECK_EQ(loom_attr_getdetachstate(&seen, &v), 0);
  CHECK_EQ(v, LOOM_CREATE_JOINABLE);
  CHECK_EQ(loom_attr_destroy(&seen), 0);
  CHECK_EQ(loom_getattr_np(0, &seen), ESRCH);
}

static void* detached_reports_detached(void* arg) {
  loom_attr_t a;
  int v = -1;
  CHECK_EQ(loom_getattr_np(loom_self(), &a), 0);
  CHECK_EQ(loom_attr_getdetachstate(&a, &v), 0);
  CHECK_EQ(loom_attr_destroy(&a), 0);
  CHECK_EQ(loom_sem_post((loom_sem_t*)arg), 0);
  return (void*)(intptr_t)v;
}

static void getattr_of_detached(void) {
  loom_sem_t done;
  loom_attr_t a;
  loom_t t;
  CHECK_EQ(loom_sem_init(&done, 0, 0), 0);
  CHECK_EQ(loom_attr_init(&a), 0);
  CHECK_EQ(loom_attr_setdetachstate(&a, LOOM_CREATE_DETACHED), 0);
  CHECK_EQ(loom_create(&t, &a, detached_reports_detached, &done), 0);
  CHECK_EQ(loom_sem_wait(&done), 0);
  CHECK_EQ(loom_attr_destroy(&a), 0);
  loom_usleep(1000); /* let it finish before `done` goes out of scope */
  CHECK_EQ(loom_sem_destroy(&done), 0);
}

static void names(void) {
  char buf[32];
  CHECK_EQ(loom_getname_np(loom_self(), buf, sizeof buf), 0);
  CHECK(strcmp(buf, "main") == 0);
  CHECK_EQ(loom_setname_np(loom_self(), "exactly15chars!"), 0);
  CHECK_EQ(loom_getname_np(loom_self(), buf, sizeof buf), 0);
  CHECK(strcmp(buf, "exactly15chars!") == 0);
  CHECK_EQ(loom_getname_np(loom_self(), buf, 15), ERANGE);
  CHECK_EQ(loom_setname_np(loom_self(), "sixteen chars!!!"), ERANGE);
  CHECK_EQ(loom_setname_np(loom_self(), "main"), 0);
  CHECK_EQ(loom_getname_np(0, buf, sizeof buf), ESRCH);
}

/* loom_getid_np: the id the fibre listing prints for a thread (issue 26). */
static void* wait_on_sem(void* arg) {
  CHECK_EQ(loom_sem_wait((loom_sem_t*)arg), 0);
  return NULL;
}

static void ids_match_the_listing(void) {
  loom_sem_t go;
  loom_t t, d;
  loom_attr_t a;
  uint64_t id = 0, did = 0, mine = 0;
  CHECK_EQ(loom_sem_init(&go, 0, 0), 0);
  CHECK_EQ(loom_create(&t, NULL, wait_on_sem, &go), 0);
  CHECK_EQ(loom_setname_np(t, "id-subject"), 0);
  CHECK_EQ(loom_attr_init(&a), 0);
  CHECK_EQ(loom_attr_setdetachstate(&a, LOOM_CREATE_DETACHED), 0);
  CHECK_EQ(loom_create(&d, &a, wait_on_sem, &go), 0);
  CHECK_EQ(loom_attr_destroy(&a), 0);
  CHECK_EQ(loom_getid_np(t, &id), 0);
  CHECK_EQ(loom_getid_np(d, &did), 0);
  CHECK_EQ(loom_getid_np(loom_self(), &mine), 0);
  CHECK(id != 0 && did != 0 && mine != 0 && id != did && id != mine);
  /* The listing's line for that id is the named thread's. */
  char* buf = NULL;
  size_t len = 0;
  FILE* out = open_memstream(&buf, &len);
  CHECK(out != NULL);
  loom_dump_fibres(out);
  fclose(out);
  char want[64];
  snprintf(want, sizeof want, "\n  %-8llu id-subject ", (unsigned long long)id);
  if (!strstr(buf, want)) fprintf(stderr, "no line '%s' in:\n%s", want + 1, buf);
  CHECK(strstr(buf, want) != NULL);
  snprintf(want, sizeof want, "\n  %-8llu main ", (unsigned long long)mine);
  if (!strstr(buf, want)) fprintf(stderr, "no line '%s' in:\n%s", want + 1, buf);
  CHECK(strstr(buf, want) != NULL);
  free(buf);
  /* Errors: a null out, a null or stale handle. */
  CHECK_EQ(loom_getid_np(t, NULL), EINVAL);
  CHECK_EQ(loom_getid_np(0, &id), ESRCH);
  CHECK_EQ(loom_sem_post(&go), 0);
  CHECK_EQ(loom_sem_post(&go), 0);
  CHECK_EQ(loom_join(t, NULL), 0);
  CHECK_EQ(loom_getid_np(t, &id), ESRCH);
  loom_usleep(1000); /* the detached one finishes before `go` goes */
  CHECK_EQ(loom_sem_destroy(&go), 0);
}

static void cancellation_state(void) {
  int old = -1;
  CHECK_EQ(loom_setcancelstate(LOOM_CANCEL_DISABLE, &old), 0);
  CHECK_EQ(old, LOOM_CANCEL_ENABLE);
  CHECK_EQ(loom_setcancelstate(LOOM_CANCEL_ENABLE, &old), 0);
  CHECK_EQ(old, LOOM_CANCEL_DISABLE);
  CHECK_EQ(loom_setcancelstate(5, &old), EINVAL);
  CHECK_EQ(loom_setcanceltype(LOOM_CANCEL_ASYNCHRONOUS, &old), 0);
  CHECK_EQ(old, LOOM_CANCEL_DEFERRED);
  CHECK_EQ(loom_setcanceltype(LOOM_CANCEL_DEFERRED, &old), 0);
  CHECK_EQ(old, LOOM_CANCEL_ASYNCHRONOUS);
  CHECK_EQ(loom_setcanceltype(5, NULL), EINVAL);
  loom_testcancel(); /* nothing pending: returns */
  CHECK_EQ(loom_getconcurrency(), 0);
  CHECK_EQ(loom_setconcurrency(4), 0);
  CHECK_EQ(loom_getconcurrency(), 4);
  CHECK_EQ(loom_setconcurrency(-1), EINVAL);
  CHECK_EQ(loom_setconcurrency(0), 0);
}

/* ---- cancellation at loom.h's own cancellation points ---------------------------- */

static loom_mutex_t cmu = LOOM_MUTEX_INITIALIZER;
static loom_cond_t ccv = LOOM_COND_INITIALIZER;
static loom_sem_t cnever;
static int cpipe[2];
static atomic_int handlers_run;

static void count_handler(void* arg) {
  (void)arg;
  atomic_fetch_add(&handlers_run, 1);
}
static void unlock_cmu(void* arg) {
  (void)arg;
  atomic_fetch_add(&handlers_run, 1);
  CHECK_EQ(loom_mutex_unlock(&cmu), 0); /* the condvar wait took it again */
}

enum { C_COND, C_COND_TIMED, C_SEM, C_SEM_TIMED, C_READ, C_POLL, C_SLEEP, C_NANOSLEEP, C_TESTCANCEL, C_KINDS };

static void* cancellable(void* arg) {
  int kind = (int)(intptr_t)arg;
  struct timespec far;
  clock_gettime(CLOCK_REALTIME, &far);
  far.tv_sec += 1000;
  char c;
  loom_cleanup_push(count_handler, NULL);
  switch (kind) {
    case C_COND:
    case C_COND_TIMED:
      CHECK_EQ(loom_mutex_lock(&cmu), 0);
      loom_cleanup_push(unlock_cmu, NULL);
      for (;;) kind == C_COND ? loom_cond_wait(&ccv, &cmu) : loom_cond_timedwait(&ccv, &cmu, &far);
      loom_cleanup_pop(0);
      break;
    case C_SEM: loom_sem_wait(&cnever); break;
    case C_SEM_TIMED: loom_sem_timedwait(&cnever, &far); break;
    case C_READ: loom_read(cpipe[0], &c, 1); break;
    case C_POLL: {
      struct pollfd p = {cpipe[0], POLLIN, 0};
      loom_poll(&p, 1, -1);
      break;
    }
    case C_SLEEP: loom_sleep(1000); break;
    case C_NANOSLEEP: {
      struct timespec t = {1000, 0};
      loom_nanosleep(&t, NULL);
      break;
    }
    case C_TESTCANCEL:
      for (;;) loom_testcancel();
  }
  loom_cleanup_pop(0);
  return (void*)1; /* not cancelled */
}

static void cancel_each_point(void) {
  CHECK_EQ(loom_sem_init(&cnever, 0, 0), 0);
  CHECK_EQ(loom_pipe(cpipe), 0);
  for (int k = 0; k < C_KINDS; ++k) {
    for (int early = 0; early < 2; ++early) { /* cancelled before it can wait, and while it waits */
      atomic_store(&handlers_run, 0);
      loom_t t;
      CHECK_EQ(loom_create(&t, NULL, cancellable, (void*)(intptr_t)k), 0);
      if (!early) loom_usleep(10000); /* likely waiting by now; the result is the same either way */
      CHECK_EQ(loom_cancel(t), 0);
      void* r = NULL;
      CHECK_EQ(loom_join(t, &r), 0);
      CHECK(r == LOOM_CANCELED);
      CHECK_EQ(atomic_load(&handlers_run), k == C_COND || k == C_COND_TIMED ? 2 : 1);
    }
  }
  CHECK_EQ(loom_mutex_trylock(&cmu), 0);
  CHECK_EQ(loom_mutex_unlock(&cmu), 0);
  CHECK_EQ(loom_close(cpipe[0]), 0);
  CHECK_EQ(loom_close(cpipe[1]), 0);
  CHECK_EQ(loom_sem_destroy(&cnever), 0);
}

static void* returns_two(void* arg) {
  (void)arg;
  return (void*)2;
}

static void* disables_then_tests(void* arg) {
  loom_sem_t* go = arg;
  CHECK_EQ(loom_setcancelstate(LOOM_CANCEL_DISABLE, NULL), 0);
  CHECK_EQ(loom_sem_post(go), 0);
  loom_usleep(20000); /* cancelled meanwhile: disabled, a sleep does not act */
  loom_testcancel();
  CHECK_EQ(loom_setcancelstate(LOOM_CANCEL_ENABLE, NULL), 0);
  loom_testcancel();
  return (void*)1;
}

static void cancel_rules(void) {
  /* ESRCH for no thread: 0, a joined handle; an ended, unjoined one: 0. */
  loom_t t;
  CHECK_EQ(loom_cancel(0), ESRCH);
  CHECK_EQ(loom_create(&t, NULL, returns_two, NULL), 0);
  loom_usleep(5000);
  CHECK_EQ(loom_cancel(t), 0);
  void* r = NULL;
  CHECK_EQ(loom_join(t, &r), 0);
  CHECK(r == (void*)2);
  CHECK_EQ(loom_cancel(t), ESRCH);
  /* Disabled: the request waits for the state to allow it. */
  loom_sem_t go;
  CHECK_EQ(loom_sem_init(&go, 0, 0), 0);
  CHECK_EQ(loom_create(&t, NULL, disables_then_tests, &go), 0);
  CHECK_EQ(loom_sem_wait(&go), 0);
  CHECK_EQ(loom_cancel(t), 0);
  CHECK_EQ(loom_join(t, &r), 0);
  CHECK(r == LOOM_CANCELED);
  CHECK_EQ(loom_sem_destroy(&go), 0);
}

/* ---- once ------------------------------------------------------------------------------ */

static loom_once_t once = LOOM_ONCE_INIT;
static atomic_int once_calls, once_seen;

static void init_once(void) {
  loom_usleep(5000); /* others arrive meanwhile and must wait */
  atomic_fetch_add(&once_calls, 1);
}

static void* call_once_fn(void* arg) {
  (void)arg;
  CHECK_EQ(loom_once(&once, init_once), 0);
  if (atomic_load(&once_calls) == 1) atomic_fetch_add(&once_seen, 1);
  return NULL;
}

static void once_runs_once_for_many_fibres(void) {
  enum { N = 100 };
  loom_t t[N];
  for (int i = 0; i < N; ++i) CHECK_EQ(loom_create(&t[i], NULL, call_once_fn, NULL), 0);
  for (int i = 0; i < N; ++i) CHECK_EQ(loom_join(t[i], NULL), 0);
  CHECK_EQ(atomic_load(&once_calls), 1);
  CHECK_EQ(atomic_load(&once_seen), N);
}

/* ---- keys -------------------------------------------------------------------------------- */

static loom_key_t k1, k2;
static atomic_int dtor_calls, dtor_rounds_left;
static int values[256];

static void count_dtor(void* v) {
  CHECK(loom_getspecific(k1) == NULL); /* cleared before the call (POSIX) */
  CHECK(v != NULL);
  atomic_fetch_add(&dtor_calls, 1);
}

static void again_dtor(void* v) {
  atomic_fetch_add(&dtor_calls, 1);
  if (atomic_fetch_sub(&dtor_rounds_left, 1) > 0) CHECK_EQ(loom_setspecific(k2, v), 0);
}

static void* use_keys(void* arg) {
  int i = (int)(intptr_t)arg;
  CHECK(loom_getspecific(k1) == NULL);
  CHECK_EQ(loom_setspecific(k1, &values[i]), 0);
  loom_yield();
  CHECK(loom_getspecific(k1) == &values[i]); /* per fibre */
  return NULL;
}

static void* set_k2(void* arg) {
  CHECK_EQ(loom_setspecific(k2, arg), 0);
  return NULL;
}

static void keys(void) {
  enum { N = 100 };
  CHECK_EQ(loom_key_create(&k1, count_dtor), 0);
  CHECK_EQ(loom_key_create(&k2, again_dtor), 0);
  CHECK(k1 != k2);
  loom_t t[N];
  for (int i = 0; i < N; ++i) CHECK_EQ(loom_create(&t[i], NULL, use_keys, (void*)(intptr_t)i), 0);
  for (int i = 0; i < N; ++i) CHECK_EQ(loom_join(t[i], NULL), 0);
  CHECK_EQ(atomic_load(&dtor_calls), N);

  /* A destructor that sets the value again gets more rounds, up to
   * LOOM_DESTRUCTOR_ITERATIONS in all. */
  atomic_store(&dtor_calls, 0);
  atomic_store(&dtor_rounds_left, 100);
  CHECK_EQ(loom_create(&t[0], NULL, set_k2, &values[0]), 0);
  CHECK_EQ(loom_join(t[0], NULL), 0);
  CHECK_EQ(atomic_load(&dtor_calls), LOOM_DESTRUCTOR_ITERATIONS);
  atomic_store(&dtor_calls, 0);
  atomic_store(&dtor_rounds_left, 1);
  CHECK_EQ(loom_create(&t[0], NULL, set_k2, &values[0]), 0);
  CHECK_EQ(loom_join(t[0], NULL), 0);
  CHECK_EQ(atomic_load(&dtor_calls), 2);

  /* main's values. */
  CHECK_EQ(loom_setspecific(k1, &values[1]), 0);
  CHECK(loom_getspecific(k1) == &values[1]);
  CHECK_EQ(loom_setspecific(k1, NULL), 0);
  CHECK_EQ(loom_key_delete(k1), 0);
  CHECK_EQ(loom_key_delete(k2), 0);
  CHECK_EQ(loom_key_delete(k2), EINVAL);
  CHECK_EQ(loom_setspecific(k2, &values[0]), EINVAL);

  /* EAGAIN once every key is taken. */
  loom_key_t all[LOOM_KEYS_MAX + 1];
  int made = 0, e;
  while ((e = loom_key_create(&all[made], NULL)) == 0) CHECK(++made <= LOOM_KEYS_MAX);
  CHECK_EQ(e, EAGAIN);
  CHECK(made > LOOM_KEYS_MAX / 2);
  for (int i = 0; i < made; ++i) CHECK_EQ(loom_key_delete(all[i]), 0);
}

/* ---- clusters, migration, errno --------------------------------------------------------- */

static loom_cluster_t* other;

static void* in_cluster(void* arg) {
  (void)arg;
  CHECK(loom_cluster_self() == other);
  CHECK(loom_processor_index() >= 0 && (size_t)loom_processor_index() < loom_cluster_processors(other));
  CHECK_EQ(loom_cluster_destroy(other), EDEADLK);
  /* errno stays the fibre's across a move to another kernel thread. */
  errno = 1234;
  CHECK_EQ(loom_migrate(loom_cluster_default()), 0);
  CHECK_EQ(errno, 1234);
  CHECK(loom_cluster_self() == loom_cluster_default());
  errno = 4321;
  CHECK_EQ(loom_migrate(other), 0);
  CHECK_EQ(errno, 4321);
  CHECK(loom_cluster_self() == other);
  return NULL;
}

static void* park_in_cluster(void* arg) {
  CHECK_EQ(loom_sem_wait((loom_sem_t*)arg), 0);
  return NULL;
}

static void clusters_and_migration(void) {
  CHECK_EQ(loom_cluster_create(&other, 0), EINVAL);
  CHECK_EQ(loom_cluster_create(&other, 2), 0);
  CHECK_EQ(loom_cluster_processors(other), 2);
  CHECK(loom_cluster_id(other) != loom_cluster_id(loom_cluster_default()));
  size_t total = 0;
  CHECK_EQ(loom_cluster_add_processors(other, 1, &total), 0);
  CHECK_EQ(total, 3);
  CHECK_EQ(loom_cluster_add_processors(other, 0, &total), EINVAL);
  CHECK(loom_cluster_self() == loom_cluster_default());
  CHECK_EQ(loom_cluster_destroy(loom_cluster_default()), EINVAL);

  loom_attr_t a;
  loom_t t;
  CHECK_EQ(loom_attr_init(&a), 0);
  CHECK_EQ(loom_attr_setcluster(&a, other), 0);
  CHECK_EQ(loom_create(&t, &a, in_cluster, NULL), 0);
  CHECK_EQ(loom_join(t, NULL), 0);

  /* EBUSY while a fibre is in it. */
  loom_sem_t s;
  CHECK_EQ(loom_sem_init(&s, 0, 0), 0);
  CHECK_EQ(loom_create(&t, &a, park_in_cluster, &s), 0);
  CHECK_EQ(loom_cluster_destroy(other), EBUSY);
  CHECK_EQ(loom_sem_post(&s), 0);
  CHECK_EQ(loom_join(t, NULL), 0);
  CHECK_EQ(loom_sem_destroy(&s), 0);

  /* main itself may move, and come back. */
  errno = 77;
  CHECK_EQ(loom_migrate(other), 0);
  CHECK(loom_cluster_self() == other);
  CHECK_EQ(errno, 77);
  CHECK_EQ(loom_migrate(loom_cluster_default()), 0);
  CHECK_EQ(errno, 77);

  CHECK_EQ(loom_attr_destroy(&a), 0);
  CHECK_EQ(loom_cluster_destroy(other), 0);
}

/* errno after calls that fail, when the fibre keeps moving between
 * processors: each sees what its own last call set. */
static void* errno_worker(void* arg) {
  loom_sem_t* s = (loom_sem_t*)arg;
  for (int i = 0; i < 200; ++i) {
    errno = 0;
    struct timespec abs = after(CLOCK_REALTIME, 100000); /* 0.1 ms */
    CHECK_EQ(loom_sem_timedwait(s, &abs), -1);
    CHECK_EQ(errno, ETIMEDOUT);
    CHECK_EQ(loom_sem_trywait(s), -1);
    CHECK_EQ(errno, EAGAIN);
    errno = i;
    loom_yield();
    CHECK_EQ(errno, i);
  }
  return NULL;
}

static void errno_per_fibre(void) {
  enum { N = 8 };
  loom_sem_t s;
  loom_t t[N];
  CHECK_EQ(loom_sem_init(&s, 0, 0), 0);
  for (int i = 0; i < N; ++i) CHECK_EQ(loom_create(&t[i], NULL, errno_worker, &s), 0);
  for (int i = 0; i < N; ++i) CHECK_EQ(loom_join(t[i], NULL), 0);
  CHECK_EQ(loom_sem_destroy(&s), 0);
}

/* ---- a kernel thread of the system's pthreads ------------------------------------------------ */

static loom_mutex_t shared_lock = LOOM_MUTEX_INITIALIZER;
static long shared_count;

static loom_sem_t kernel_done;

static void* kernel_thread(void* arg) {
  CHECK_EQ(loom_processor_index(), -1);
  CHECK(loom_equal(loom_self(), loom_self()));
  CHECK(!loom_equal(loom_self(), *(loom_t*)arg));
  CHECK_EQ(loom_migrate(loom_cluster_default()), EPERM);
  for (int i = 0; i < 1000; ++i) {
    CHECK_EQ(loom_mutex_lock(&shared_lock), 0);
    ++shared_count;
    CHECK_EQ(loom_mutex_unlock(&shared_lock), 0);
  }
  loom_t t;
  void* r;
  CHECK_EQ(loom_create(&t, NULL, add_one, (void*)1), 0); /* joined by a kernel thread */
  CHECK_EQ(loom_join(t, &r), 0);
  CHECK_EQ((intptr_t)r, 2);
  CHECK_EQ(loom_sem_post(&kernel_done), 0);
  return NULL;
}

static void* fibre_counter(void* arg) {
  (void)arg;
  for (int i = 0; i < 1000; ++i) {
    CHECK_EQ(loom_mutex_lock(&shared_lock), 0);
    ++shared_count;
    if (i % 100 == 0) loom_yield();
    CHECK_EQ(loom_mutex_unlock(&shared_lock), 0);
  }
  return NULL;
}

static void kernel_threads_are_callers_too(void) {
  pthread_t k;
  loom_t me = loom_self(), f;
  CHECK_EQ(loom_sem_init(&kernel_done, 0, 0), 0);
  CHECK_EQ(pthread_create(&k, NULL, kernel_thread, &me), 0);
  CHECK_EQ(loom_create(&f, NULL, fibre_counter, NULL), 0);
  CHECK_EQ(loom_join(f, NULL), 0);
  /* The system's pthread_join would block this processor: wait as a fibre. */
  CHECK_EQ(loom_sem_wait(&kernel_done), 0);
  CHECK_EQ(pthread_join(k, NULL), 0);
  CHECK_EQ(loom_sem_destroy(&kernel_done), 0);
  CHECK_EQ(shared_count, 2000);
}

static void* yield_until(void* arg) {
  atomic_int* flag = (atomic_int*)arg;
  while (!atomic_load(flag)) CHECK_EQ(loom_yield(), 0);
  return NULL;
}

static void* set_flag(void* arg) {
  atomic_store((atomic_int*)arg, 1);
  return NULL;
}

/* On one processor, a fibre that yields lets the others run. */
static void yield_lets_others_run(void) {
  loom_cluster_t* one;
  loom_attr_t a;
  atomic_int flag = 0;
  loom_t y, s;
  CHECK_EQ(loom_cluster_create(&one, 1), 0);
  CHECK_EQ(loom_attr_init(&a), 0);
  CHECK_EQ(loom_attr_setcluster(&a, one), 0);
  CHECK_EQ(loom_create(&y, &a, yield_until, &flag), 0);
  CHECK_EQ(loom_create(&s, &a, set_flag, &flag), 0);
  CHECK_EQ(loom_join(y, NULL), 0);
  CHECK_EQ(loom_join(s, NULL), 0);
  CHECK_EQ(loom_attr_destroy(&a), 0);
  CHECK_EQ(loom_cluster_destroy(one), 0);
}

int main(void) {
  alarm(120);
  RUN(create_join_returns_the_value);
  RUN(self_is_the_created_id);
  RUN(join_errors);
  RUN(tryjoin_and_timedjoin);
  RUN(detached_fibres_free_themselves);
  RUN(exit_runs_handlers_then_key_destructors);
  RUN(attributes);
  RUN(getattr_of_detached);
  RUN(names);
  RUN(ids_match_the_listing);
  RUN(cancellation_state);
  RUN(cancel_each_point);
  RUN(cancel_rules);
  RUN(once_runs_once_for_many_fibres);
  RUN(keys);
  RUN(clusters_and_migration);
  RUN(errno_per_fibre);
  RUN(kernel_threads_are_callers_too);
  RUN(yield_lets_others_run);
  return 0;
}
