/* tests/capi/color_test.c — loom.h's colors and stages: events in posting
 * order per color, mutual exclusion, shared overlap, colored loom_create
 * fibres holding their color while blocked, the policy knobs, statistics,
 * every EINVAL, and stages from C. */
#define _POSIX_C_SOURCE 200809L
#include <loom/loom.h>
#include <math.h>
#include <stdatomic.h>

#include "ctest.h"

static loom_cluster_t* cl; /* 4 processors: room for overlap */

static void spin_ns(int64_t ns) {
  int64_t end = now_on(CLOCK_MONOTONIC) + ns;
  while (now_on(CLOCK_MONOTONIC) < end) {
  }
}

/* Waits (the fibre sleeps) until *v reaches target; fails after 20 s. */
static void wait_until(atomic_long* v, long target) {
  int64_t end = now_on(CLOCK_MONOTONIC) + 20000 * MS;
  while (atomic_load(v) < target) {
    CHECK(now_on(CLOCK_MONOTONIC) < end);
    loom_usleep(100);
  }
}

static void raise_max(atomic_long* max, long v) {
  long m = atomic_load(max);
  while (v > m && !atomic_compare_exchange_weak(max, &m, v)) {
  }
}

/* ---- order per color ----------------------------------------------------------------- */

enum { ORDER_MAX = 20000 };
static long order_seen[ORDER_MAX];
static long order_n; /* plain: the color serialises */
static atomic_long order_done;

static void record_order(void* arg) {
  order_seen[order_n++] = (long)(intptr_t)arg;
  atomic_fetch_add(&order_done, 1);
}

static atomic_long uncolored_ran;
static void count_uncolored(void* arg) {
  (void)arg;
  CHECK_EQ(loom_current_color(), 0);
  atomic_fetch_add(&uncolored_ran, 1);
}

static void events_start_in_posting_order(void) {
  /* Color 0 is "uncolored": its events run, unserialised. */
  CHECK_EQ(loom_event_post(0, count_uncolored, NULL), 0);
  CHECK_EQ(loom_event_post_to(cl, 0, 0, count_uncolored, NULL), 0);
  wait_until(&uncolored_ran, 2);

  long n = scaled(ORDER_MAX);
  for (int where = 0; where < 2; ++where) {
    uint32_t c = loom_color_allocate(1);
    CHECK(c != 0);
    order_n = 0;
    atomic_store(&order_done, 0);
    for (long i = 0; i < n; ++i) {
      if (where == 0)
        CHECK_EQ(loom_event_post(c, record_order, (void*)(intptr_t)i), 0); /* the caller's cluster */
      else
        CHECK_EQ(loom_event_post_to(cl, c, 0, record_order, (void*)(intptr_t)i), 0);
    }
    wait_until(&order_done, n);
    CHECK_EQ(order_n, n);
    for (long i = 0; i < n; ++i) CHECK_EQ(order_seen[i], i);
  }
}

/* ---- mutual exclusion -------------------------------------------------------------------- */

static uint32_t mx_color;
static long mx_counter; /* plain: the color serialises */
static atomic_long mx_inflight, mx_max, mx_done;

static void mx_event(void* arg) {
  (void)arg;
  raise_max(&mx_max, atomic_fetch_add(&mx_inflight, 1) + 1);
  long v = mx_counter;
  if ((v & 31) == 0) spin_ns(2000); /* a window for a second runner */
  mx_counter = v + 1;
  atomic_fetch_sub(&mx_inflight, 1);
  atomic_fetch_add(&mx_done, 1);
}

static void* mx_poster(void* arg) {
  long n = (long)(intptr_t)arg;
  for (long i = 0; i < n; ++i) CHECK_EQ(loom_event_post(mx_color, mx_event, NULL), 0);
  return NULL;
}

static void events_of_one_color_exclude_each_other(void) {
  enum { POSTERS = 8 };
  long per = scaled(4000);
  mx_color = loom_color_allocate(1);
  loom_attr_t a;
  loom_attr_init(&a);
  loom_attr_setcluster(&a, cl); /* posts from inside cl: its processors' queues */
  loom_t t[POSTERS];
  for (int i = 0; i < POSTERS; ++i) CHECK_EQ(loom_create(&t[i], &a, mx_poster, (void*)(intptr_t)per), 0);
  for (int i = 0; i < POSTERS; ++i) CHECK_EQ(loom_join(t[i], NULL), 0);
  loom_attr_destroy(&a);
  wait_until(&mx_done, POSTERS * per);
  CHECK_EQ(atomic_load(&mx_max), 1);
  CHECK_EQ(mx_counter, POSTERS * per);
}

/* ---- shared overlap -------------------------------------------------------------------------- */

static atomic_long sh_inflight, sh_max, sh_done;

static void sh_event(void* arg) {
  (void)arg;
  raise_max(&sh_max, atomic_fetch_add(&sh_inflight, 1) + 1);
  /* Stay until another shared event has joined, or 2 ms. */
  int64_t end = now_on(CLOCK_MONOTONIC) + 2 * MS;
  while (atomic_load(&sh_inflight) < 2 && now_on(CLOCK_MONOTONIC) < end) {
  }
  spin_ns(20000);
  atomic_fetch_sub(&sh_inflight, 1);
  atomic_fetch_add(&sh_done, 1);
}

/* Shared events of one color overlap only when a thief takes some of them
 * (under "none" a color stays on one processor's runner). */
static void shared_events_overlap(void) {
  uint32_t c = loom_color_allocate(1);
  long posted = 0;
  CHECK_EQ(loom_color_set_policy(cl, "mely"), 0);
  for (int round = 0; round < 10 && atomic_load(&sh_max) < 2; ++round) {
    for (int i = 0; i < 32; ++i, ++posted) CHECK_EQ(loom_event_post_to(cl, c, 1, sh_event, NULL), 0);
    wait_until(&sh_done, posted);
  }
  CHECK(atomic_load(&sh_max) >= 2);
  /* And loom_event_post_shared, on the caller's cluster. */
  atomic_store(&sh_done, 0);
  for (int i = 0; i < 8; ++i) CHECK_EQ(loom_event_post_shared(c, sh_event, NULL), 0);
  wait_until(&sh_done, 8);
}

/* ---- colored fibres ---------------------------------------------------------------------------- */

static uint32_t fc_color;
static loom_mutex_t fc_mutex = LOOM_MUTEX_INITIALIZER;
static atomic_long fc_started, fc_done, fc_event_ran, fc_event_saw_done, fc_saw_color;

static void* fc_locker(void* arg) {
  (void)arg;
  atomic_store(&fc_saw_color, (long)loom_current_color());
  atomic_store(&fc_started, 1);
  CHECK_EQ(loom_mutex_lock(&fc_mutex), 0); /* blocks: main holds it */
  CHECK_EQ(loom_current_color(), fc_color);
  atomic_store(&fc_done, 1);
  CHECK_EQ(loom_mutex_unlock(&fc_mutex), 0);
  return NULL;
}

static void* fc_sleeper(void* arg) {
  (void)arg;
  atomic_store(&fc_saw_color, (long)loom_current_color());
  atomic_store(&fc_started, 1);
  loom_usleep(20000);
  CHECK_EQ(loom_current_color(), fc_color);
  atomic_store(&fc_done, 1);
  return NULL;
}

static void fc_event(void* arg) {
  (void)arg;
  CHECK_EQ(loom_current_color(), fc_color);
  atomic_store(&fc_event_saw_done, atomic_load(&fc_done));
  atomic_store(&fc_event_ran, 1);
}

/* A colored fibre blocked in `start` keeps an event of its color out. */
static void one_colored_fibre(void* (*start)(void*), int lock_first) {
  atomic_store(&fc_started, 0);
  atomic_store(&fc_done, 0);
  atomic_store(&fc_event_ran, 0);
  atomic_store(&fc_event_saw_done, 0);
  loom_attr_t a;
  loom_attr_init(&a);
  loom_attr_setcluster(&a, cl);
  CHECK_EQ(loom_attr_setcolor(&a, fc_color, 0), 0);
  uint32_t got = 0;
  int shared = -1;
  CHECK_EQ(loom_attr_getcolor(&a, &got, &shared), 0);
  CHECK_EQ(got, fc_color);
  CHECK_EQ(shared, 0);
  if (lock_first) CHECK_EQ(loom_mutex_lock(&fc_mutex), 0);
  loom_t t;
  CHECK_EQ(loom_create(&t, &a, start, NULL), 0);
  loom_attr_destroy(&a);
  wait_until(&fc_started, 1);
  CHECK_EQ(atomic_load(&fc_saw_color), fc_color);
  CHECK_EQ(loom_event_post_to(cl, fc_color, 0, fc_event, NULL), 0);
  loom_usleep(5000); /* the fibre is blocked by now; the event must wait */
  CHECK_EQ(atomic_load(&fc_event_ran), 0);
  if (lock_first) CHECK_EQ(loom_mutex_unlock(&fc_mutex), 0);
  CHECK_EQ(loom_join(t, NULL), 0);
  wait_until(&fc_event_ran, 1);
  CHECK_EQ(atomic_load(&fc_event_saw_done), 1);
}

static atomic_long sf_inside, sf_max;

static void* sf_shared_sleeper(void* arg) {
  (void)arg;
  raise_max(&sf_max, atomic_fetch_add(&sf_inside, 1) + 1);
  loom_usleep(20000);
  atomic_fetch_sub(&sf_inside, 1);
  return NULL;
}

static void colored_fibres_hold_their_color_while_blocked(void) {
  fc_color = loom_color_allocate(1);
  one_colored_fibre(fc_locker, 1);
  one_colored_fibre(fc_sleeper, 0);
  /* Shared holders overlap each other while they sleep. */
  loom_attr_t a;
  loom_attr_init(&a);
  loom_attr_setcluster(&a, cl);
  CHECK_EQ(loom_attr_setcolor(&a, fc_color, 1), 0);
  loom_t t[3];
  for (int i = 0; i < 3; ++i) CHECK_EQ(loom_create(&t[i], &a, sf_shared_sleeper, NULL), 0);
  for (int i = 0; i < 3; ++i) CHECK_EQ(loom_join(t[i], NULL), 0);
  loom_attr_destroy(&a);
  CHECK(atomic_load(&sf_max) >= 2);
}

/* ---- knobs and statistics --------------------------------------------------------------- */

static void noop(void* arg) { (void)arg; }

static void policy_batch_penalty_and_stats(void) {
  char buf[64];
  CHECK_EQ(loom_color_get_policy(cl, buf, sizeof buf), 0);
  char saved[64];
  strcpy(saved, buf);
  CHECK_EQ(loom_color_set_policy(cl, "libasync-smp"), 0);
  CHECK_EQ(loom_color_get_policy(cl, buf, sizeof buf), 0);
  CHECK(strcmp(buf, "libasync-smp") == 0);
  CHECK_EQ(loom_color_set_policy(cl, "no-such-policy"), EINVAL);
  CHECK_EQ(loom_color_get_policy(cl, buf, sizeof buf), 0);
  CHECK(strcmp(buf, "libasync-smp") == 0); /* unchanged */
  CHECK_EQ(loom_color_get_policy(cl, buf, 3), ERANGE);
  CHECK_EQ(loom_color_set_policy(NULL, "none"), 0); /* the caller's cluster */
  CHECK_EQ(loom_color_set_policy(cl, saved), 0);
  CHECK_EQ(loom_color_set_policy(NULL, "mely"), 0);
  CHECK_EQ(loom_color_set_placement(cl, "local"), 0);
  CHECK_EQ(loom_color_set_placement(cl, "hash"), 0);
  CHECK_EQ(loom_color_set_batch(cl, 4), 0);
  CHECK_EQ(loom_color_set_batch(NULL, 10), 0);
  CHECK_EQ(loom_color_set_penalty(noop, 2.0), 0);
  CHECK_EQ(loom_color_set_penalty(noop, 0), 0);

  loom_color_stats_t s;
  memset(&s, 0xff, sizeof s);
  CHECK_EQ(loom_color_stats(cl, &s), 0);
  CHECK(s.events_run > 0 && s.events_run != UINT64_MAX);
  CHECK(s.fibres_started > 0);
  CHECK_EQ(loom_color_stats(NULL, &s), 0);
  CHECK(s.events_run > 0); /* the default cluster ran events too */
  CHECK(loom_current_color() == 0);
}

static void every_einval(void) {
  uint32_t c = loom_color_allocate(2);
  CHECK(c != 0);
  CHECK_EQ(loom_color_allocate(0), 0);
  CHECK_EQ(loom_event_post(c, NULL, NULL), EINVAL);
  CHECK_EQ(loom_event_post_shared(c, NULL, NULL), EINVAL);
  CHECK_EQ(loom_event_post_to(cl, c, 2, noop, NULL), EINVAL);
  CHECK_EQ(loom_event_post_to(cl, c, -1, noop, NULL), EINVAL);
  CHECK_EQ(loom_event_post_to(NULL, c, 0, NULL, NULL), EINVAL);

  loom_attr_t a;
  memset(&a, 0, sizeof a); /* never initialised */
  uint32_t got;
  int shared;
  CHECK_EQ(loom_attr_setcolor(&a, c, 0), EINVAL);
  CHECK_EQ(loom_attr_getcolor(&a, &got, &shared), EINVAL);
  CHECK_EQ(loom_attr_setcolor(NULL, c, 0), EINVAL);
  loom_attr_init(&a);
  CHECK_EQ(loom_attr_getcolor(&a, &got, &shared), 0);
  CHECK_EQ(got, 0);
  CHECK_EQ(shared, 0);
  CHECK_EQ(loom_attr_setcolor(&a, c, 2), EINVAL);
  CHECK_EQ(loom_attr_setcolor(&a, 0, 1), EINVAL); /* shared uncolored */
  CHECK_EQ(loom_attr_setcolor(&a, 0, 0), 0);
  CHECK_EQ(loom_attr_getcolor(&a, NULL, &shared), EINVAL);
  CHECK_EQ(loom_attr_getcolor(&a, &got, NULL), EINVAL);
  loom_attr_destroy(&a);

  char buf[64];
  CHECK_EQ(loom_color_set_policy(cl, NULL), EINVAL);
  CHECK_EQ(loom_color_set_policy(cl, ""), EINVAL);
  CHECK_EQ(loom_color_get_policy(cl, NULL, 64), EINVAL);
  CHECK_EQ(loom_color_get_policy(cl, buf, 0), ERANGE);
  CHECK_EQ(loom_color_set_batch(cl, 0), EINVAL);
  CHECK_EQ(loom_color_set_placement(cl, NULL), EINVAL);
  CHECK_EQ(loom_color_set_placement(cl, "nearby"), EINVAL);
  CHECK_EQ(loom_color_set_penalty(NULL, 2.0), EINVAL);
  CHECK_EQ(loom_color_set_penalty(noop, 0.5), EINVAL);
  CHECK_EQ(loom_color_set_penalty(noop, -1.0), EINVAL);
  CHECK_EQ(loom_color_set_penalty(noop, (double)NAN), EINVAL);
  CHECK_EQ(loom_color_stats(cl, NULL), EINVAL);

  loom_stage_t* st = NULL;
  CHECK_EQ(loom_stage_create(NULL, LOOM_STAGE_EXCLUSIVE, 0, &st), EINVAL);
  CHECK_EQ(loom_stage_create("x", LOOM_STAGE_EXCLUSIVE, 0, NULL), EINVAL);
  CHECK_EQ(loom_stage_create("x", 3, 1, &st), EINVAL);
  CHECK_EQ(loom_stage_create("x", -1, 1, &st), EINVAL);
  CHECK_EQ(loom_stage_create("x", LOOM_STAGE_PARTITIONED, 0, &st), EINVAL);
  CHECK_EQ(loom_stage_create("x", LOOM_STAGE_PARTITIONED, LOOM_STAGE_PARTITIONS_MAX + 1, &st), EINVAL);
  CHECK(st == NULL);
  CHECK_EQ(loom_stage_create("x", LOOM_STAGE_SHARED, 0, &st), 0); /* partitions ignored */
  loom_stage_stats_t ss;
  CHECK_EQ(loom_stage_post(NULL, noop, NULL), EINVAL);
  CHECK_EQ(loom_stage_post(st, NULL, NULL), EINVAL);
  CHECK_EQ(loom_stage_post_key(NULL, 1, noop, NULL), EINVAL);
  CHECK_EQ(loom_stage_post_key(st, 1, NULL, NULL), EINVAL);
  CHECK_EQ(loom_stage_post_exclusive(NULL, noop, NULL), EINVAL);
  CHECK_EQ(loom_stage_post_exclusive(st, NULL, NULL), EINVAL);
  CHECK_EQ(loom_stage_drain(NULL), EINVAL);
  CHECK_EQ(loom_stage_stats(NULL, &ss), EINVAL);
  CHECK_EQ(loom_stage_stats(st, NULL), EINVAL);
  CHECK_EQ(loom_stage_print(NULL, stderr), EINVAL);
  CHECK_EQ(loom_stage_print(st, NULL), EINVAL);
  CHECK_EQ(loom_stage_print_all(NULL), EINVAL);
  CHECK_EQ(loom_stage_destroy(NULL), EINVAL);
  CHECK_EQ(loom_stage_stats(st, &ss), 0);
  CHECK_EQ(ss.posted, 0); /* nothing above was posted */
  CHECK_EQ(loom_stage_destroy(st), 0);
}

/* ---- stages ------------------------------------------------------------------------------ */

enum { KEYS = 16, KEY_POSTS = 400 };
static long key_last[KEYS]; /* plain: each key's partition serialises */
static atomic_long key_out_of_order, stage_ran, drain_result;
static loom_stage_t* self_stage;

static void key_op(void* arg) {
  long v = (long)(intptr_t)arg, key = v % KEYS, seq = v / KEYS;
  if (key_last[key] >= seq) atomic_fetch_add(&key_out_of_order, 1);
  key_last[key] = seq;
  atomic_fetch_add(&stage_ran, 1);
}

static void drains_itself(void* arg) {
  (void)arg;
  atomic_store(&drain_result, loom_stage_drain(self_stage));
  CHECK_EQ(loom_stage_destroy(self_stage), EDEADLK);
}

static void stage_from_c(void) {
  loom_stage_t* s = NULL;
  CHECK_EQ(loom_stage_create("c-partitioned", LOOM_STAGE_PARTITIONED, 4, &s), 0);
  for (int k = 0; k < KEYS; ++k) key_last[k] = -1;
  long n = scaled(KEYS * KEY_POSTS);
  for (long i = 0; i < n; ++i) CHECK_EQ(loom_stage_post_key(s, (uint64_t)(i % KEYS), key_op, (void*)(intptr_t)i), 0);
  CHECK_EQ(loom_stage_drain(s), 0);
  CHECK_EQ(atomic_load(&stage_ran), n);
  CHECK_EQ(atomic_load(&key_out_of_order), 0);
  CHECK_EQ(loom_stage_post(s, noop, NULL), 0); /* unkeyed */
  CHECK_EQ(loom_stage_post_exclusive(s, noop, NULL), 0);
  CHECK_EQ(loom_stage_drain(s), 0);

  loom_stage_stats_t st;
  CHECK_EQ(loom_stage_stats(s, &st), 0);
  CHECK_EQ(st.posted, n + 2);
  CHECK_EQ(st.completed, st.posted);
  CHECK_EQ(st.queued, 0);
  CHECK_EQ(st.running, 0);
  CHECK(st.queued_max >= 1);
  CHECK(st.wait_max_ns >= st.wait_mean_ns && st.wait_max_ns > 0);
  CHECK(st.run_max_ns >= st.run_mean_ns && st.run_max_ns > 0);

  FILE* f = tmpfile();
  CHECK(f != NULL);
  CHECK_EQ(loom_stage_print(s, f), 0);
  CHECK_EQ(loom_stage_print_all(f), 0);
  rewind(f);
  char text[4096];
  size_t len = fread(text, 1, sizeof text - 1, f);
  text[len] = 0;
  fclose(f);
  CHECK(strstr(text, "c-partitioned") != NULL);
  CHECK(strstr(text, "partitioned/4") != NULL);

  /* Waiting for itself is refused, not a hang. */
  CHECK_EQ(loom_stage_create("c-exclusive", LOOM_STAGE_EXCLUSIVE, 0, &self_stage), 0);
  atomic_store(&drain_result, -1);
  CHECK_EQ(loom_stage_post(self_stage, drains_itself, NULL), 0);
  CHECK_EQ(loom_stage_destroy(self_stage), 0); /* waits for drains_itself */
  CHECK_EQ(atomic_load(&drain_result), EDEADLK);
  CHECK_EQ(loom_stage_destroy(s), 0);
}

int main(void) {
  alarm(120);
  CHECK_EQ(loom_cluster_create(&cl, 4), 0);
  RUN(events_start_in_posting_order);
  RUN(events_of_one_color_exclude_each_other);
  RUN(shared_events_overlap);
  RUN(colored_fibres_hold_their_color_while_blocked);
  RUN(policy_batch_penalty_and_stats);
  RUN(every_einval);
  RUN(stage_from_c);
  return 0;
}
