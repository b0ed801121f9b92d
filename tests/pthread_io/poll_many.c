/* poll_many.c — poll, ppoll, select, pselect, epoll_wait and epoll_pwait over
 * many descriptors from several threads, in plain C against glibc. Built once,
 * run as is and with LD_PRELOAD=libloom-pthread.so: stdout must be the same.
 *
 * Each waiter thread owns a group of socket pairs; a feeder thread per group
 * writes one byte (a value of the pair's index) to each pair in a scrambled
 * order, sleeping now and then, and closes its end. The waiter waits with its
 * call until every pair has given its byte and its end of file, and records
 * what it saw; main prints the results in a fixed order.
 *
 * On stderr only (the two runs differ there): "probe: loom blocks=N" when
 * libloom's loom_io_stats is in the process (looked up with dlsym, so the
 * binary does not depend on loom), for the test to tell a loom run from a
 * silent fall-through to glibc. Then sendfile (more than a socket holds, to
 * a reader thread), fcntl's O_NONBLOCK, dup2 and clock_nanosleep. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

enum { POLL, PPOLL, SELECT, PSELECT, EPOLL, EPOLL_P, KINDS };
static const char* const kind_name[KINDS] = {"poll", "ppoll", "select", "pselect", "epoll_wait", "epoll_pwait"};
/* select's groups come first: their numbers stay below FD_SETSIZE. */
static const int group_size[KINDS] = {400, 200, 150, 150, 250, 100};

struct group {
  int kind;
  int n;
  int (*fd)[2]; /* [i][0] waited on, [i][1] the feeder's */
  long bytes, sum, eofs, waits, bad;
};

static void* feed(void* arg) {
  struct group* g = arg;
  /* A scramble of 0..n-1: i * 7919 mod n (n is not a multiple of 7919). */
  for (int k = 0; k < g->n; ++k) {
    int i = (int)(((long)k * 7919) % g->n);
    unsigned char b = (unsigned char)(i % 251);
    if (write(g->fd[i][1], &b, 1) != 1) fail("write");
    if (k % 16 == 0) {
      struct timespec t = {0, 200000};
      nanosleep(&t, NULL);
    }
    if (k % 64 == 0) usleep(300);
  }
  for (int i = 0; i < g->n; ++i) close(g->fd[i][1]);
  return NULL;
}

/* Reads what fd has: a byte, or the end of file. 1 when it is done. */
static int take(struct group* g, int i) {
  unsigned char b[4];
  ssize_t r = read(g->fd[i][0], b, sizeof b);
  if (r < 0) {
    ++g->bad;
    return 1;
  }
  if (r == 0) {
    ++g->eofs;
    return 1;
  }
  for (ssize_t j = 0; j < r; ++j) g->sum += b[j], ++g->bytes;
  return 0;
}

static void* wait_poll(struct group* g) {
  struct pollfd* p = calloc((size_t)g->n, sizeof *p);
  for (int i = 0; i < g->n; ++i) p[i].fd = g->fd[i][0], p[i].events = POLLIN;
  int left = g->n;
  sigset_t none;
  sigemptyset(&none);
  while (left > 0) {
    int r;
    if (g->kind == POLL) {
      r = poll(p, (nfds_t)g->n, 10000);
    } else {
      struct timespec t = {10, 0};
      r = ppoll(p, (nfds_t)g->n, &t, &none);
    }
    ++g->waits;
    if (r <= 0) fail(r == 0 ? "poll: timeout" : "poll");
    int seen = 0;
    for (int i = 0; i < g->n; ++i) {
      if (!p[i].revents) continue;
      ++seen;
      if (p[i].revents & ~(POLLIN | POLLHUP)) ++g->bad;
      if (take(g, i)) p[i].fd = -1, --left; /* ignored from now on */
    }
    if (seen != r) ++g->bad;
  }
  free(p);
  return NULL;
}

static void* wait_select(struct group* g) {
  int left = g->n, hi = 0;
  char* done = calloc((size_t)g->n, 1);
  for (int i = 0; i < g->n; ++i)
    if (g->fd[i][0] >= hi) hi = g->fd[i][0] + 1;
  if (hi > FD_SETSIZE) fail("select: a descriptor beyond FD_SETSIZE");
  while (left > 0) {
    fd_set r;
    FD_ZERO(&r);
    for (int i = 0; i < g->n; ++i)
      if (!done[i]) FD_SET(g->fd[i][0], &r);
    int n;
    if (g->kind == SELECT) {
      struct timeval t = {10, 0};
      n = select(hi, &r, NULL, NULL, &t);
    } else {
      struct timespec t = {10, 0};
      n = pselect(hi, &r, NULL, NULL, &t, NULL);
    }
    ++g->waits;
    if (n <= 0) fail(n == 0 ? "select: timeout" : "select");
    int seen = 0;
    for (int i = 0; i < g->n; ++i)
      if (!done[i] && FD_ISSET(g->fd[i][0], &r)) {
        ++seen;
        if (take(g, i)) done[i] = 1, --left;
      }
    if (seen != n) ++g->bad;
  }
  free(done);
  return NULL;
}

static void* wait_epoll(struct group* g) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) fail("epoll_create1");
  for (int i = 0; i < g->n; ++i) {
    struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, g->fd[i][0], &e) != 0) fail("epoll_ctl");
  }
  int left = g->n;
  struct epoll_event ev[32];
  while (left > 0) {
    int n = g->kind == EPOLL ? epoll_wait(ep, ev, 32, 10000) : epoll_pwait(ep, ev, 32, 10000, NULL);
    ++g->waits;
    if (n <= 0) fail(n == 0 ? "epoll_wait: timeout" : "epoll_wait");
    for (int k = 0; k < n; ++k) {
      int i = (int)ev[k].data.u32;
      if (take(g, i)) {
        epoll_ctl(ep, EPOLL_CTL_DEL, g->fd[i][0], NULL);
        --left;
      }
    }
  }
  close(ep);
  return NULL;
}

/* Reads a socket to its end: the byte count and sum. */
struct sink {
  int fd;
  long bytes, sum;
};
static void* drain(void* arg) {
  struct sink* s = arg;
  unsigned char b[8192];
  ssize_t r;
  while ((r = read(s->fd, b, sizeof b)) > 0)
    for (ssize_t i = 0; i < r; ++i) s->sum += b[i], ++s->bytes;
  return NULL;
}

/* sendfile, fcntl's O_NONBLOCK, dup2, clock_nanosleep: one line each. */
static void descriptors(void) {
  enum { SIZE = 1 << 20 };
  char path[] = "/tmp/poll_many_XXXXXX";
  int file = mkstemp(path);
  if (file < 0) fail("mkstemp");
  unlink(path);
  unsigned char* data = malloc(SIZE);
  long want = 0;
  for (int i = 0; i < SIZE; ++i) data[i] = (unsigned char)(i * 31 + (i >> 11)), want += data[i];
  if (write(file, data, SIZE) != SIZE) fail("write (file)");
  free(data);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) fail("socketpair");
  struct sink s = {sv[1], 0, 0};
  pthread_t t;
  if (pthread_create(&t, NULL, drain, &s) != 0) fail("pthread_create");
  off_t off = 0;
  long sent = 0;
  while (sent < SIZE) { /* more than the socket holds: sendfile waits for room */
    ssize_t r = sendfile(sv[0], file, &off, (size_t)(SIZE - sent));
    if (r <= 0) fail("sendfile");
    sent += r;
  }
  shutdown(sv[0], SHUT_WR);
  pthread_join(t, NULL);
  printf("sendfile: %ld bytes sent, %ld received, sum %s\n", sent, s.bytes, s.sum == want ? "right" : "WRONG");
  close(file);

  int fl = fcntl(sv[0], F_GETFL);
  fcntl(sv[0], F_SETFL, fl | O_NONBLOCK);
  char c;
  errno = 0;
  ssize_t r = read(sv[0], &c, 1);
  int e = errno;
  printf("O_NONBLOCK read on nothing: %zd %s, F_GETFL shows it %d\n", r, e == EAGAIN ? "EAGAIN" : strerror(e),
         (fcntl(sv[0], F_GETFL) & O_NONBLOCK) != 0);
  fcntl(sv[0], F_SETFL, fl);
  printf("cleared: F_GETFL shows it %d\n", (fcntl(sv[0], F_GETFL) & O_NONBLOCK) != 0);
  int d = dup2(sv[0], 900);
  if (write(sv[1], "d", 1) != 1) fail("write");
  printf("dup2 to %d, read through it: %zd\n", d, read(d, &c, 1));
  close(d);
  struct timespec t0, t1, rel = {0, 20000000};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int z = clock_nanosleep(CLOCK_MONOTONIC, 0, &rel, NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long us = (t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000;
  printf("clock_nanosleep 20 ms: %d, %s\n", z, us >= 20000 ? "not early" : "EARLY");
  close(sv[0]);
  close(sv[1]);
}

static void* waiter(void* arg) {
  struct group* g = arg;
  switch (g->kind) {
    case POLL:
    case PPOLL: return wait_poll(g);
    case SELECT:
    case PSELECT: return wait_select(g);
    default: return wait_epoll(g);
  }
}

int main(void) {
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);

  struct group g[KINDS];
  int order[KINDS] = {SELECT, PSELECT, POLL, PPOLL, EPOLL, EPOLL_P};
  for (int o = 0; o < KINDS; ++o) {
    int k = order[o];
    memset(&g[k], 0, sizeof g[k]);
    g[k].kind = k;
    g[k].n = group_size[k];
    g[k].fd = calloc((size_t)g[k].n, sizeof *g[k].fd);
    for (int i = 0; i < g[k].n; ++i)
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, g[k].fd[i]) != 0) fail("socketpair");
  }
  pthread_t w[KINDS], f[KINDS];
  for (int k = 0; k < KINDS; ++k)
    if (pthread_create(&w[k], NULL, waiter, &g[k]) != 0) fail("pthread_create");
  for (int k = 0; k < KINDS; ++k)
    if (pthread_create(&f[k], NULL, feed, &g[k]) != 0) fail("pthread_create");
  for (int k = 0; k < KINDS; ++k) pthread_join(f[k], NULL), pthread_join(w[k], NULL);

  long expect_sum[KINDS];
  for (int k = 0; k < KINDS; ++k) {
    expect_sum[k] = 0;
    for (int i = 0; i < g[k].n; ++i) expect_sum[k] += i % 251;
    printf("%-12s %4d pairs: %4ld bytes, sum %6ld (%s), %4ld ends of file, %ld wrong\n", kind_name[k], g[k].n,
           g[k].bytes, g[k].sum, g[k].sum == expect_sum[k] ? "right" : "WRONG", g[k].eofs, g[k].bad);
    for (int i = 0; i < g[k].n; ++i) close(g[k].fd[i][0]);
    free(g[k].fd);
  }
  /* A timeout on nothing, and a closed number. */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) fail("socketpair");
  struct pollfd p[2] = {{sv[0], POLLIN, 0}, {sv[1], POLLIN, 0}};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int r = poll(p, 2, 30);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
  printf("poll on nothing for 30 ms: %d, %s\n", r, ms >= 30 ? "not early" : "EARLY");
  close(sv[1]);
  p[1].fd = sv[1];
  r = poll(p, 2, -1);
  printf("peer closed, and a closed number: %d, revents %#x %#x\n", r, (unsigned)p[0].revents,
         (unsigned)p[1].revents);
  close(sv[0]);

  descriptors();

  print_loom_probe();
  return 0;
}
