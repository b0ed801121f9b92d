/* hook_off.c — what LOOM_HOOK_IO=0 changes, seen from a plain glibc program:
 * a socket pair, a poll that times out, a write and a read. Prints whether
 * the socket is non-blocking underneath (never, on these routes: loom keeps
 * the program's flags, io/io.cpp's descriptor rule) and, when libloom is in the
 * process (dlsym), how many times the I/O of main's cluster waited through
 * loom. hook_off.sh runs it plainly, under LD_PRELOAD, and under LD_PRELOAD
 * with LOOM_HOOK_IO=0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static int nonblock_underneath(int fd) {
  char path[64], line[128];
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  unsigned flags = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "flags: %o", &flags) == 1) break;
  fclose(f);
  return (flags & O_NONBLOCK) != 0;
}

int main(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  struct pollfd p = {sv[0], POLLIN, 0};
  int r = poll(&p, 1, 20);
  char c = 'h';
  if (write(sv[1], &c, 1) != 1 || read(sv[0], &c, 1) != 1) return 1;
  printf("poll %d, program sees O_NONBLOCK %d, underneath %d\n", r, (fcntl(sv[0], F_GETFL) & O_NONBLOCK) != 0,
         nonblock_underneath(sv[0]));
  void (*stats)(uint64_t*) = (void (*)(uint64_t*))dlsym(RTLD_DEFAULT, "loom_io_stats");
  if (stats) {
    uint64_t s[4];
    stats(s);
    printf("loom blocks %llu\n", (unsigned long long)s[1]);
  } else {
    printf("no loom\n");
  }
  close(sv[0]);
  close(sv[1]);
  return 0;
}
