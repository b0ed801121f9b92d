// idle_pingpong — what the monitor (sched/monitor.cpp) costs a server that
// idles between requests, issue 31's worst case for a runtime thread that
// looks at processors:
//
//   idle_pingpong [REQUESTS [GAP_US]]          (defaults 3000 and 2000)
//   CHILD_PRELOAD=build/libloom-pthread.so LOOM_PROCESSORS=1 LOOM_HANDOFF_US=0|1000 idle_pingpong ...
//
// The driver (this process, never preloaded) sends one byte down a pipe
// every GAP_US, busy-waiting between requests, and times the echo; the
// child (this program again, exec'd with LD_PRELOAD=$CHILD_PRELOAD) reads
// and writes the byte back. Between requests the child's processor sleeps,
// so every request wakes it. Prints the round trip's median and p99 and the
// child's CPU time (user + system, all its threads) and voluntary context
// switches per request: compare LOOM_HANDOFF_US=0 (no monitor) with the
// default in one run.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static int echo(void) {
  char c;
  while (read(0, &c, 1) == 1)
    if (write(1, &c, 1) != 1) return 1;
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--child") == 0) return echo();
  long n = argc > 1 ? strtol(argv[1], NULL, 10) : 3000;
  long gap_us = argc > 2 ? strtol(argv[2], NULL, 10) : 2000;
  if (argc > 3 || n < 1 || n > 10000000 || gap_us < 0 || gap_us > 10000000) {
    fprintf(stderr, "usage: idle_pingpong [REQUESTS (1..10000000) [GAP_US (0..10000000)]]\n");
    return 2;
  }
  int to[2], from[2];
  if (pipe(to) != 0 || pipe(from) != 0) {
    perror("idle_pingpong: pipe");
    return 1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("idle_pingpong: fork");
    return 1;
  }
  if (pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[0]);
    close(to[1]);
    close(from[0]);
    close(from[1]);
    const char* preload = getenv("CHILD_PRELOAD");
    if (preload && *preload) setenv("LD_PRELOAD", preload, 1);
    execl("/proc/self/exe", argv[0], "--child", (char*)NULL);
    perror("idle_pingpong: exec");
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  double* rtt = calloc((size_t)n, sizeof *rtt);
  if (!rtt) return 1;
  char c = 'x';
  const int warmup = 100;
  for (int i = 0; i < warmup; ++i)
    if (write(to[1], &c, 1) != 1 || read(from[0], &c, 1) != 1) goto broken;
  for (long i = 0; i < n; ++i) {
    double until = now_s() + (double)gap_us / 1e6;
    while (now_s() < until) {
    }
    double start = now_s();
    if (write(to[1], &c, 1) != 1 || read(from[0], &c, 1) != 1) goto broken;
    rtt[i] = now_s() - start;
  }
  close(to[1]);
  int status;
  struct rusage ru;
  if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "idle_pingpong: the child failed (status %d)\n", status);
    return 1;
  }
  qsort(rtt, (size_t)n, sizeof *rtt, by_value);
  double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
               (double)ru.ru_stime.tv_usec / 1e6;
  printf("rtt median %.1f us, p99 %.1f us; child CPU %.2f us and %.2f voluntary switches per request\n",
         rtt[n / 2] * 1e6, rtt[n * 99 / 100] * 1e6, cpu / (double)(n + warmup) * 1e6,
         (double)ru.ru_nvcsw / (double)(n + warmup));
  free(rtt);
  return 0;
broken:
  fprintf(stderr, "idle_pingpong: the child stopped answering\n");
  return 1;
}
