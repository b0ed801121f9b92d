/* wait_child.c — what the stall detector must not call a stall under the
 * preload (issue 26): main() waiting in waitpid for its child (a shell,
 * `timeout`), then in pthread_join; and, so that the run shows the
 * detector is on, what it must: a thread named "spinner" that holds its
 * processor 400 ms without a scheduling point. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void* sleeper(void* arg) {
  usleep(500 * 1000);
  return arg;
}

static void* spinner(void* arg) {
  double end = now() + 0.4;
  while (now() < end) __asm__ volatile("" ::: "memory");
  return arg;
}

int main(void) {
  pid_t c = fork();
  if (c < 0) return 1;
  if (c == 0) {
    usleep(700 * 1000);
    _exit(3);
  }
  int st = 0;
  if (waitpid(c, &st, 0) != c || !WIFEXITED(st)) return 1;
  printf("child exited %d\n", WEXITSTATUS(st));
  pthread_t t;
  if (pthread_create(&t, NULL, sleeper, NULL) != 0 || pthread_join(t, NULL) != 0) return 1;
  printf("joined the sleeper\n");
  if (pthread_create(&t, NULL, spinner, NULL) != 0) return 1;
  pthread_setname_np(t, "spinner");
  if (pthread_join(t, NULL) != 0) return 1;
  printf("joined the spinner\n");
  return 0;
}
