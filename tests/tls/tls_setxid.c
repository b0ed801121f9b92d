/* tls_setxid — glibc's setuid family with threads alive: every kernel thread
 * of the process takes the new credentials and the call returns. Under
 * per-fibre TLS, glibc's SIGSETXID handler clears its flag in whatever block
 * is installed; loom runs it inside a trampoline that installs the kernel
 * thread's own (sched/tls.cpp), or the caller signals forever. (Needs root
 * to change the gid; otherwise both runs print the same EPERM.) A call that
 * fails sets main()'s errno wherever main() runs: setgroups with a size past
 * NGROUPS_MAX fails with EINVAL, as glibc's does, root or not. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <dirent.h>
#include <string.h>
#include <stdlib.h>
#include <errno.h>
#include <grp.h>
static volatile int stop;
static void* spin(void* a) { while (!stop) usleep(1000); return a; }
/* Kernel threads of the process whose effective gid is not `want`. */
static int others(int want) {
  int bad = 0;
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[256], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    FILE* f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
      if (!strncmp(line, "Gid:", 4)) { int a, b; sscanf(line + 4, "%d %d", &a, &b); if (b != want) ++bad; }
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return bad;
}
int main(void) {
  pthread_t t[4];
  for (int i = 0; i < 4; ++i) pthread_create(&t[i], 0, spin, 0);
  usleep(20000);
  /* Twenty rounds, main sleeping in between: on loom, main resumes on
   * either processor, and the call must reach every kernel thread from
   * both (glibc skips the kernel thread its caller's block names). */
  int r = 0, bad = 0, lost = 0;
  for (int round = 0; round < 20; ++round) {
    usleep(2000);
    int gid = 1234 + round % 2;
    r |= setegid(gid);
    if (others(gid)) ++bad;
    errno = 0;
    if (setgroups((size_t)-1, NULL) != -1 || errno != EINVAL) ++lost;
  }
  stop = 1;
  for (int i = 0; i < 4; ++i) pthread_join(t[i], 0);
  printf("setegid=%d, rounds with a kernel thread left behind: %d\n", r, bad);
  printf("rounds where a failed setgroups left errno other than EINVAL: %d\n", lost);
  return 0;
}
