// handoff_latency — issue 31's figures for the monitor (sched/monitor.cpp),
// a plain pthread program run under the preload:
//
//   LD_PRELOAD=build/libloom-pthread.so LOOM_PROCESSORS=1 build/apps/bench/handoff_latency [ROUNDS]
//
// 1. The time from a processor blocking in a call loom does not see to its
//    queue running again. Thread A notes the time and blocks in read(2) of
//    a pipe, issued as the system call itself; thread B, queued behind it on
//    the one processor, notes when it runs and writes the pipe. Cold: 150 ms
//    between rounds, longer than a spare lingers, so each round waits for
//    the monitor to notice (a parked spare is woken, or the first one
//    started); warm: back to back, a spare still at work.
// 2. The monitor thread's CPU time and wake-ups (voluntary context
//    switches, from /proc) over 2 s with the process idle, and over 2 s with
//    one thread computing alone.
// Without loom (plain glibc) A and B are kernel threads of their own: the
// latency is the kernel's wake-up, and there is no monitor.
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int pfd[2];
static double t_block, t_ran;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void* poster(void* arg) {
  (void)arg;
  t_ran = now();
  char c = 1;
  if (syscall(SYS_write, pfd[1], &c, 1) != 1) abort();
  return NULL;
}

// A: makes B (queued behind it on its processor), then blocks where loom
// cannot see.
static void* blocker(void* arg) {
  (void)arg;
  pthread_t b;
  pthread_create(&b, NULL, poster, NULL);
  t_block = now();
  char c;
  if (syscall(SYS_read, pfd[0], &c, 1) != 1) abort();
  pthread_join(b, NULL);
  return NULL;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void report(const char* what, double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  printf("%-5s latency over %d rounds (ms): min %.3f  median %.3f  p90 %.3f  max %.3f\n", what, n, v[0] * 1e3,
         v[n / 2] * 1e3, v[(n * 9) / 10] * 1e3, v[n - 1] * 1e3);
}

static void rounds(const char* what, int n, useconds_t gap) {
  double* v = calloc((size_t)n, sizeof *v);
  for (int i = 0; i < n; i++) {
    pthread_t a;
    pthread_create(&a, NULL, blocker, NULL);
    pthread_join(a, NULL);
    v[i] = t_ran - t_block;
    if (gap) usleep(gap);
  }
  report(what, v, n);
  free(v);
}

// The monitor thread's CPU time (ticks) and voluntary switches; -1 if there
// is none (plain glibc).
static int monitor_tid(void) {
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  int tid = -1;
  while (d && (e = readdir(d))) {
    char path[300], comm[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (!f) continue;
    if (fgets(comm, sizeof comm, f) && strncmp(comm, "loom-monitor", 12) == 0) tid = atoi(e->d_name);
    fclose(f);
  }
  if (d) closedir(d);
  return tid;
}

static void monitor_cost(int tid, long* ticks, long* wakes) {
  char path[64], buf[1024];
  *ticks = *wakes = -1;
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
  FILE* f = fopen(path, "r");
  if (f && fgets(buf, sizeof buf, f)) {
    char* p = strrchr(buf, ')');
    long ut = 0, st = 0;
    // fields after ")": state(3) ... utime(14) stime(15)
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &ut, &st) == 2) *ticks = ut + st;
  }
  if (f) fclose(f);
  snprintf(path, sizeof path, "/proc/self/task/%d/status", tid);
  if ((f = fopen(path, "r"))) {
    while (fgets(buf, sizeof buf, f))
      if (sscanf(buf, "voluntary_ctxt_switches: %ld", wakes) == 1) break;
    fclose(f);
  }
}

static volatile int stop_compute;
static void* compute(void* arg) {
  (void)arg;
  volatile unsigned long x = 0;
  while (!stop_compute) x++;
  return NULL;
}

static void idle_cost(const char* what, int busy) {
  int tid = monitor_tid();
  if (tid < 0) {
    printf("monitor, %s: no loom-monitor thread (not under loom)\n", what);
    return;
  }
  pthread_t c;
  stop_compute = 0;
  if (busy) pthread_create(&c, NULL, compute, NULL);
  usleep(100000);
  long t0, w0, t1, w1;
  monitor_cost(tid, &t0, &w0);
  usleep(2000000);
  monitor_cost(tid, &t1, &w1);
  if (busy) {
    stop_compute = 1;
    pthread_join(c, NULL);
  }
  printf("monitor, %s: %ld ticks of CPU (1/%ld s each), %ld wake-ups in 2 s\n", what, t1 - t0, sysconf(_SC_CLK_TCK),
         w1 - w0);
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20;
  if (n < 2 || n > 100000) {
    fprintf(stderr, "usage: handoff_latency [ROUNDS (2-100000)]\n");
    return 2;
  }
  if (pipe(pfd) != 0) return 1;
  rounds("cold", n, 150000);
  rounds("warm", n, 0);
  idle_cost("process idle", 0);
  idle_cost("one thread computing", 1);
  return 0;
}
