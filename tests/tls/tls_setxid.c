/* tls_setxid — glibc's setuid family with threads alive: every kernel thread
 * of the process takes the new credentials and the call returns. Under
 * per-fibre TLS, glibc's SIGSETXID handler clears its flag in whatever block
 * is installed; loom runs it inside a trampoline that installs the kernel
 * thread's own (sched/tls.cpp), or the caller signals forever. (Needs root
 * to change the gid; otherwise both runs print the same EPERM.) */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <dirent.h>
#include <string.h>
#include <stdlib.h>
static volatile int stop;
static void* spin(void* a) { while (!stop) usleep(1000); return a; }
int main(void) {
  pthread_t t[4];
  for (int i = 0; i < 4; ++i) pthread_create(&t[i], 0, spin, 0);
  usleep(20000);
  int r = setegid(1234);
  /* every kernel thread of the process has the new effective gid */
  int bad = 0, n = 0;
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[256], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    FILE* f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
      if (!strncmp(line, "Gid:", 4)) { int a, b; sscanf(line + 4, "%d %d", &a, &b); if (b != 1234) ++bad; ++n; }
    if (f) fclose(f);
  }
  closedir(d);
  stop = 1;
  for (int i = 0; i < 4; ++i) pthread_join(t[i], 0);
  printf("setegid=%d, kernel threads with another gid: %d\n", r, bad);
  return 0;
}
