/* fd_flags.c — a descriptor's O_NONBLOCK is the kernel's, however the
 * program changed it (issue 35, item 2). Each case changes the flag in a
 * way loom's own fcntl does not see, then reads:
 *  - ioctl(FIONBIO, 1) on a blocking socket and on a pipe: EAGAIN, not a wait
 *    (CPython's socket.setblocking(False), libuv);
 *  - fcntl(F_SETFL, O_NONBLOCK) on one number, a read through its dup;
 *  - a forked child sets O_NONBLOCK on the pipe it shares with the parent;
 *  - ioctl(FIONBIO, 0) on a socket created non-blocking, and fcntl through a
 *    dup clearing an eventfd's EFD_NONBLOCK: the read must wait as a fibre,
 *    not in place on the processor — on one processor (LOOM_PROCESSORS=1)
 *    the writer could never run otherwise.
 * Same output as is and preloaded (run_preload.sh); alarm() bounds a hang. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static void expect_eagain(const char* what, int fd) {
  unsigned long long v; /* (an eventfd's read takes 8 bytes) */
  errno = 0;
  ssize_t r = read(fd, &v, sizeof v);
  printf("%s: read %zd, %s\n", what, r, r < 0 && errno == EAGAIN ? "EAGAIN" : r < 0 ? "WRONG errno" : "WRONG");
  fflush(stdout);
}

struct reader {
  int fd;
  size_t n;
  ssize_t r;
};

static void* read_it(void* arg) {
  struct reader* rd = arg;
  unsigned long long v = 0;
  rd->r = read(rd->fd, &v, rd->n);
  return NULL;
}

/* A thread reads fd (which the program sees blocking); main writes after
 * a pause. On one processor, a read made in place never lets main write. */
static void read_while_main_writes(const char* what, int rfd, int wfd, size_t n) {
  struct reader rd = {rfd, n, -2};
  pthread_t t;
  pthread_create(&t, NULL, read_it, &rd);
  usleep(100000);
  unsigned long long one = 1;
  if (write(wfd, &one, n) != (ssize_t)n) fail("write");
  pthread_join(t, NULL);
  printf("%s: the blocked read got %zd\n", what, rd.r);
  fflush(stdout);
}

int main(void) {
  (void)ticker;
  alarm(20);
  int on = 1, off = 0, sv[2], p[2];

  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) fail("socketpair");
  ioctl(sv[0], FIONBIO, &on);
  expect_eagain("socket, ioctl FIONBIO 1", sv[0]);

  if (pipe(p) != 0) fail("pipe");
  ioctl(p[0], FIONBIO, &on);
  expect_eagain("pipe, ioctl FIONBIO 1", p[0]);
  ioctl(p[0], FIONBIO, &off);

  /* The dup is known to loom (a read through it) before its original
   * changes the open file's flag. */
  int d = dup(p[0]);
  if (write(p[1], "x", 1) != 1) fail("write");
  char c;
  if (read(d, &c, 1) != 1) fail("read");
  fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
  expect_eagain("pipe, O_NONBLOCK set through the original, read through a dup", d);
  fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) & ~O_NONBLOCK);

  pid_t pid = fork();
  if (pid == 0) {
    fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    _exit(0);
  }
  int st;
  waitpid(pid, &st, 0);
  expect_eagain("pipe, O_NONBLOCK set by a child", p[0]);

  int s2[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, s2) != 0) fail("socketpair");
  expect_eagain("socket made non-blocking", s2[0]);
  ioctl(s2[0], FIONBIO, &off);
  read_while_main_writes("socket, then ioctl FIONBIO 0", s2[0], s2[1], 1);

  int ev = eventfd(0, EFD_NONBLOCK);
  expect_eagain("eventfd made non-blocking", ev);
  int ev2 = dup(ev);
  fcntl(ev2, F_SETFL, fcntl(ev2, F_GETFL) & ~O_NONBLOCK);
  read_while_main_writes("eventfd, then O_NONBLOCK cleared through a dup", ev, ev, 8);

  print_loom_probe();
  return 0;
}
