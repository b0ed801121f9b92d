/* closefrom.c — a daemon's sweep of its descriptors between blocking I/O:
 * closefrom(3), close_range(3, ~0U, 0), then close() on every number
 * /proc/self/fd still lists. On glibc the sweep leaves nothing open; under
 * libloom-pthread the runtime's own descriptors (its epoll set and eventfd,
 * made at start-up and kept high: runtime/io/fd_table.hpp) must survive it
 * and stay invisible to it (close fails with EBADF), and blocking I/O must
 * go on working after each sweep: before the fix, closefrom(3) after a
 * first blocking read took the pollers' eventfd, and the next wake-up
 * aborted the process ("write (wake fd) failed"). And every low number
 * stays the program's (dup2 onto it, close it). Run as is and preloaded:
 * the same output; ctest runs it also with a descriptor limit of 64, on
 * the fibre poller and with the hooks off (LOOM_HOOK_IO=0, where loom
 * makes its descriptors only when it must). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static int p[2];
static char got;

static void* reader(void* arg) {
  (void)arg;
  got = 0;
  if (read(p[0], &got, 1) != 1) perror("read");
  return NULL;
}

/* A thread blocked in read() on a pipe until main writes; then poll() on a
 * socketpair until main writes. */
static int round_trip(void) {
  if (pipe(p) != 0) return perror("pipe"), 0;
  pthread_t t;
  pthread_create(&t, NULL, reader, NULL);
  usleep(20000);
  if (write(p[1], "x", 1) != 1) perror("write");
  pthread_join(t, NULL);
  close(p[0]);
  close(p[1]);
  if (got != 'x') return 0;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return perror("socketpair"), 0;
  struct pollfd pf = {.fd = sv[0], .events = POLLIN};
  if (write(sv[1], "y", 1) != 1) perror("write");
  int n = poll(&pf, 1, 5000);
  close(sv[0]);
  close(sv[1]);
  return n == 1;
}

/* Closes every number >= 3 that /proc/self/fd lists: how many closed. */
static int sweep(void) {
  int fds[4096], n = 0, closed = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return perror("opendir"), -1;
  int own = dirfd(d);
  for (struct dirent* e; (e = readdir(d)) && n < 4096;) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] != '.' && fd >= 3 && fd != own) fds[n++] = fd;
  }
  closedir(d);
  for (int i = 0; i < n; ++i)
    if (close(fds[i]) == 0) ++closed;
    else if (errno != EBADF) perror("close");
  return closed;
}

/* The numbers from 3 below the limit's half (at most 63): how many are
 * open (*open: those the program inherited, the same as and preloaded:
 * loom's own are above), and dup2 onto each free one, then close it — the
 * program's to take on glibc (run with a limit of 64 too). How many failed. */
static int low_numbers_taken(int* open) {
  struct rlimit rl;
  int top = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 128 ? (int)rl.rlim_cur / 2 : 64;
  int failed = 0;
  *open = 0;
  for (int fd = 3; fd < top; ++fd) {
    if (fcntl(fd, F_GETFD) >= 0) {
      ++*open;
      continue;
    }
    if (dup2(1, fd) != fd) {
      ++failed;
      continue;
    }
    if (close(fd) != 0) ++failed;
  }
  return failed;
}

int main(void) {
  int open_at_start, open_now;
  int taken = low_numbers_taken(&open_at_start);
  int ok = round_trip();
  closefrom(3);
  ok += round_trip();
  if (close_range(3, ~0U, 0) != 0) perror("close_range");
  ok += round_trip();
  int closed = sweep();
  ok += round_trip();
  taken += low_numbers_taken(&open_now);
  printf("closefrom: %d of 4 rounds of blocking I/O worked; the last sweep closed %d descriptors; "
         "%d low numbers open at the start, %d the program could not take\n", ok, closed, open_at_start, taken);
  return ok == 4 && closed == 0 && taken == 0 ? 0 : 1;
}
