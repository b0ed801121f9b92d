/* tests/capi/io_test.c — loom.h's I/O wrappers (loom/io.hpp in C) and
 * loom_offload: blocking semantics for fibres, the system calls' return
 * conventions and errors, deadlines that never expire early, and errno
 * kept per fibre across calls that block. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <fcntl.h>
#include <loom/loom.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <sys/uio.h>

#include "ctest.h"

static loom_t spawn(void* (*fn)(void*), void* arg) {
  loom_t t;
  CHECK_EQ(loom_create(&t, NULL, fn, arg), 0);
  return t;
}

/* A when_ready callback: counts its invocations. */
static void count_call(void* arg) { atomic_fetch_add((atomic_int*)arg, 1); }

/* Writes "d" to *arg 10 ms from now. */
static void* write_later(void* arg) {
  loom_usleep(10000);
  CHECK_EQ(loom_write(*(int*)arg, "d", 1), 1);
  return NULL;
}

static void* join_value(loom_t t) {
  void* r = NULL;
  CHECK_EQ(loom_join(t, &r), 0);
  return r;
}

/* ---- a stream through a socketpair: the writer blocks on a full buffer ---------------- */

enum { STREAM_BYTES = 1 << 20 };

static unsigned char pattern(size_t i) { return (unsigned char)(i * 131 + (i >> 9)); }

static void* stream_writer(void* arg) {
  int fd = *(int*)arg;
  static unsigned char buf[7777];
  size_t sent = 0;
  while (sent < STREAM_BYTES) {
    size_t n = STREAM_BYTES - sent < sizeof buf ? STREAM_BYTES - sent : sizeof buf;
    for (size_t i = 0; i < n; ++i) buf[i] = pattern(sent + i);
    ssize_t w = loom_write(fd, buf, n);
    CHECK(w > 0);
    sent += (size_t)w;
  }
  CHECK_EQ(loom_close(fd), 0);
  return NULL;
}

static void socketpair_stream(void) {
  int sv[2];
  CHECK_EQ(loom_socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  struct loom_io_stats before, st;
  loom_io_stats(&before);
  loom_t w = spawn(stream_writer, &sv[1]);
  unsigned char buf[4096];
  size_t got = 0;
  ssize_t r;
  /* Nobody reads yet: the writer must fill the buffer and block (a fixed
     sleep here left it to the machine's timing whether anyone blocked). */
  for (int i = 0; i < 10000; ++i) {
    loom_io_stats(&st);
    if (st.blocks > before.blocks) break;
    loom_usleep(1000);
  }
  CHECK(st.blocks > before.blocks);
  while ((r = loom_read(sv[0], buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < r; ++i) CHECK_EQ(buf[i], pattern(got + (size_t)i));
    got += (size_t)r;
  }
  CHECK_EQ(r, 0); /* end of file once the writer closed */
  CHECK_EQ(got, STREAM_BYTES);
  join_value(w);
  CHECK_EQ(loom_close(sv[0]), 0);
}

/* ---- a pipe: a reader waits as a fibre ------------------------------------------------ */

static void* late_writer(void* arg) {
  int fd = *(int*)arg;
  loom_usleep(20000);
  CHECK_EQ(loom_write(fd, "late", 4), 4);
  return NULL;
}

static void pipes(void) {
  int p[2];
  CHECK_EQ(loom_pipe(p), 0);
  loom_t w = spawn(late_writer, &p[1]);
  char buf[8] = {0};
  int64_t t0 = now_on(CLOCK_MONOTONIC);
  CHECK_EQ(loom_read(p[0], buf, sizeof buf), 4);
  CHECK(now_on(CLOCK_MONOTONIC) - t0 >= 15 * MS);
  CHECK(memcmp(buf, "late", 4) == 0);
  join_value(w);
  CHECK_EQ(loom_close(p[0]), 0);
  CHECK_EQ(loom_close(p[1]), 0);
  CHECK_EQ(loom_pipe2(p, O_CLOEXEC), 0);
  CHECK(fcntl(p[0], F_GETFD) & FD_CLOEXEC);
  CHECK_EQ(loom_close(p[0]), 0);
  CHECK_EQ(loom_close(p[1]), 0);
}

/* An eventfd the program made non-blocking (memcached's worker notify):
 * loom waits on it like a socket, its flags untouched. Another fibre bumps
 * it 15 ms later with the system's write. */
static void* late_bump(void* arg) {
  loom_usleep(15000);
  uint64_t one = 1;
  CHECK_EQ(write(*(int*)arg, &one, sizeof one), (ssize_t)sizeof one);
  return NULL;
}

static void own_nonblocking_eventfd(void) {
  int efd = eventfd(0, EFD_NONBLOCK);
  CHECK(efd >= 0);
  for (int round = 0; round < 3; round++) {
    loom_t w = spawn(late_bump, &efd);
    struct pollfd one = {.fd = efd, .events = POLLIN};
    CHECK_EQ(loom_poll(&one, 1, 5000), 1);
    CHECK(one.revents & POLLIN);
    uint64_t v = 0;
    CHECK_EQ(read(efd, &v, sizeof v), (ssize_t)sizeof v);
    CHECK_EQ(v, 1u);
    join_value(w);
    CHECK_EQ(loom_poll(&one, 1, 0), 0);
  }
  CHECK(fcntl(efd, F_GETFL) & O_NONBLOCK);
  CHECK_EQ(loom_close(efd), 0);
}

/* ---- TCP on 127.0.0.1 ------------------------------------------------------------------ */

static int listener(unsigned short* port) {
  int fd = loom_socket(AF_INET, SOCK_STREAM, 0);
  CHECK(fd >= 0);
  int one = 1;
  CHECK_EQ(loom_setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_EQ(loom_bind(fd, (struct sockaddr*)&a, sizeof a), 0);
  CHECK_EQ(loom_listen(fd, 64), 0);
  socklen_t len = sizeof a;
  CHECK_EQ(getsockname(fd, (struct sockaddr*)&a, &len), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

static int connect_to(unsigned short port) {
  int fd = loom_socket(AF_INET, SOCK_STREAM, 0);
  CHECK(fd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  CHECK_EQ(loom_connect(fd, (struct sockaddr*)&a, sizeof a), 0);
  return fd;
}

/* Echoes with each pair of calls in turn, then closes. */
static void* tcp_server(void* arg) {
  int lfd = *(int*)arg;
  struct sockaddr_in peer;
  socklen_t len = sizeof peer;
  int fd = loom_accept4(lfd, (struct sockaddr*)&peer, &len, SOCK_CLOEXEC);
  CHECK(fd >= 0);
  CHECK_EQ(len, sizeof peer);
  CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  char buf[64];
  ssize_t n;
  /* recv/send */
  CHECK_EQ(n = loom_recv(fd, buf, 5, MSG_WAITALL), 5);
  CHECK_EQ(loom_send(fd, buf, (size_t)n, 0), n);
  /* readv/writev */
  char a[3], b[4];
  struct iovec in[2] = {{a, sizeof a}, {b, sizeof b}};
  CHECK_EQ(loom_readv(fd, in, 2), 7);
  CHECK_EQ(loom_writev(fd, in, 2), 7);
  /* recvfrom/sendto (connected: no address) */
  CHECK_EQ(n = loom_recvfrom(fd, buf, 4, MSG_WAITALL, NULL, NULL), 4);
  CHECK_EQ(loom_sendto(fd, buf, (size_t)n, 0, NULL, 0), 4);
  /* recvmsg/sendmsg */
  struct iovec io = {buf, 6};
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  CHECK_EQ(loom_recvmsg(fd, &m, MSG_WAITALL), 6);
  CHECK_EQ(loom_sendmsg(fd, &m, 0), 6);
  CHECK_EQ(loom_close(fd), 0);
  return NULL;
}

static void read_exactly(int fd, char* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = loom_read(fd, buf + got, n - got);
    CHECK(r > 0);
    got += (size_t)r;
  }
}

static void tcp_every_call(void) {
  unsigned short port;
  int lfd = listener(&port);
  loom_t s = spawn(tcp_server, &lfd);
  int fd = connect_to(port);
  char buf[16];
  CHECK_EQ(loom_write(fd, "hello", 5), 5);
  read_exactly(fd, buf, 5);
  CHECK(memcmp(buf, "hello", 5) == 0);
  CHECK_EQ(loom_write(fd, "abcdefg", 7), 7);
  read_exactly(fd, buf, 7);
  CHECK(memcmp(buf, "abcdefg", 7) == 0);
  CHECK_EQ(loom_write(fd, "wxyz", 4), 4);
  read_exactly(fd, buf, 4);
  CHECK(memcmp(buf, "wxyz", 4) == 0);
  CHECK_EQ(loom_write(fd, "123456", 6), 6);
  read_exactly(fd, buf, 6);
  CHECK(memcmp(buf, "123456", 6) == 0);
  CHECK_EQ(loom_read(fd, buf, sizeof buf), 0); /* the server closed */
  join_value(s);
  /* getsockopt through loom */
  int type = 0;
  socklen_t len = sizeof type;
  CHECK_EQ(loom_getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len), 0);
  CHECK_EQ(type, SOCK_STREAM);
  CHECK_EQ(loom_close(fd), 0);

  /* A refused connect reports ECONNREFUSED: nobody listens once closed. */
  CHECK_EQ(loom_close(lfd), 0);
  fd = loom_socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  errno = 0;
  CHECK_EQ(loom_connect(fd, (struct sockaddr*)&a, sizeof a), -1);
  CHECK_EQ(errno, ECONNREFUSED);
  CHECK_EQ(loom_close(fd), 0);
}

static void* accept_plain(void* arg) {
  int fd = loom_accept(*(int*)arg, NULL, NULL);
  CHECK(fd >= 0);
  return (void*)(intptr_t)fd;
}

/* ---- deadlines, timeouts, poll ----------------------------------------------------------- */

static void deadlines_never_early(void) {
  unsigned short port;
  int lfd = listener(&port);
  struct timespec d = after(CLOCK_MONOTONIC, 20 * MS);
  CHECK_EQ(loom_accept4_until(lfd, NULL, NULL, 0, &d), -1);
  CHECK_EQ(errno, ETIMEDOUT);
  CHECK_NOT_EARLY(CLOCK_MONOTONIC, d);

  loom_t s = spawn(accept_plain, &lfd);
  int fd = loom_socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  d = after(CLOCK_MONOTONIC, 5000 * MS);
  CHECK_EQ(loom_connect_until(fd, (struct sockaddr*)&a, sizeof a, &d), 0);
  int peer = (int)(intptr_t)join_value(s);
  char buf[8];
  d = after(CLOCK_MONOTONIC, 20 * MS);
  CHECK_EQ(loom_read_until(fd, buf, sizeof buf, &d), -1);
  CHECK_EQ(errno, ETIMEDOUT);
  CHECK_NOT_EARLY(CLOCK_MONOTONIC, d);
  CHECK_EQ(loom_write_until(peer, "x", 1, NULL), 1);
  CHECK_EQ(loom_read_until(fd, buf, sizeof buf, NULL), 1);

  /* poll_one: 0 at its timeout, POLLIN once data is there. */
  int64_t t0 = now_on(CLOCK_MONOTONIC);
  CHECK_EQ(loom_poll_one(fd, POLLIN, 20), 0);
  CHECK(now_on(CLOCK_MONOTONIC) - t0 >= 20 * MS);
  CHECK_EQ(loom_write(peer, "y", 1), 1);
  CHECK(loom_poll_one(fd, POLLIN, -1) & POLLIN);
  CHECK_EQ(loom_read(fd, buf, 1), 1);

  /* when_ready: invoked at once while an edge is pending (the one poll_one
   * looked at is), armed otherwise; the next edge invokes it once. A second
   * arming while armed is EBUSY. */
  atomic_int fired = 0;
  int armed_at;
  do {
    armed_at = atomic_load(&fired);
    CHECK_EQ(loom_when_ready(fd, POLLIN, count_call, &fired), 0);
  } while (atomic_load(&fired) != armed_at);
  CHECK_EQ(loom_when_ready(fd, POLLIN, count_call, &fired), -1);
  CHECK_EQ(errno, EBUSY);
  CHECK_EQ(loom_when_ready(fd, POLLIN | POLLOUT, count_call, &fired), -1);
  CHECK_EQ(errno, EINVAL);
  CHECK_EQ(loom_write(peer, "z", 1), 1);
  for (int i = 0; i < 5000 && atomic_load(&fired) == armed_at; i++) loom_usleep(1000);
  CHECK_EQ(atomic_load(&fired), armed_at + 1);
  CHECK_EQ(loom_read(fd, buf, 1), 1);
  CHECK_EQ(buf[0], 'z');

  /* poll on one descriptor after a short read (a drained stream: the wait
   * needs no look first): nothing until the timeout, then the new bytes. */
  CHECK_EQ(loom_write(peer, "ab", 2), 2);
  CHECK_EQ(loom_poll_one(fd, POLLIN, -1) & POLLIN, POLLIN);
  CHECK_EQ(loom_read(fd, buf, sizeof buf), 2);
  struct pollfd one = {.fd = fd, .events = POLLIN};
  t0 = now_on(CLOCK_MONOTONIC);
  CHECK_EQ(loom_poll(&one, 1, 20), 0);
  CHECK(now_on(CLOCK_MONOTONIC) - t0 >= 20 * MS);
  CHECK_EQ(loom_write(peer, "c", 1), 1);
  CHECK_EQ(loom_read(fd, buf, sizeof buf), 1);  /* short: drained again */
  loom_t w = spawn(write_later, &peer);          /* "d", once poll waits */
  one.revents = 0;
  CHECK_EQ(loom_poll(&one, 1, 5000), 1);
  CHECK(one.revents & POLLIN);
  join_value(w);
  CHECK_EQ(loom_read(fd, buf, sizeof buf), 1);
  CHECK_EQ(buf[0], 'd');

  /* set_timeouts: an input call gives up with EAGAIN. */
  CHECK_EQ(loom_set_timeouts(fd, 20 * MS, 0), 0);
  t0 = now_on(CLOCK_MONOTONIC);
  CHECK_EQ(loom_read(fd, buf, 1), -1);
  CHECK_EQ(errno, EAGAIN);
  CHECK(now_on(CLOCK_MONOTONIC) - t0 >= 20 * MS);
  CHECK_EQ(loom_set_timeouts(fd, -1, 0), -1);
  CHECK_EQ(errno, EINVAL);
  CHECK_EQ(loom_set_timeouts(fd, 0, 0), 0);

  /* O_NONBLOCK set by the program: EAGAIN at once. */
  int fl = loom_fcntl(fd, F_GETFL);
  CHECK(fl >= 0);
  CHECK_EQ(loom_fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
  t0 = now_on(CLOCK_MONOTONIC);
  CHECK_EQ(loom_read(fd, buf, 1), -1);
  CHECK_EQ(errno, EAGAIN);
  CHECK(now_on(CLOCK_MONOTONIC) - t0 < 15 * MS);
  CHECK_EQ(loom_fcntl(fd, F_SETFL, fl), 0);

  /* dup, dup2, dup3: the copies read the same stream. */
  int d1 = loom_dup(fd);
  CHECK(d1 >= 0);
  CHECK_EQ(loom_write(peer, "1", 1), 1);
  CHECK_EQ(loom_read(d1, buf, 1), 1);
  CHECK_EQ(buf[0], '1');
  int d2 = loom_dup2(fd, d1 + 10);
  CHECK_EQ(d2, d1 + 10);
  int d3 = loom_dup3(fd, d1 + 11, O_CLOEXEC);
  CHECK_EQ(d3, d1 + 11);
  CHECK(loom_fcntl(d3, F_GETFD) & FD_CLOEXEC);
  int d4 = loom_fcntl(fd, F_DUPFD_CLOEXEC, d1 + 20);
  CHECK(d4 >= d1 + 20);
  CHECK_EQ(loom_write(peer, "23", 2), 2);
  CHECK_EQ(loom_read(d2, buf, 1), 1);
  CHECK_EQ(loom_read(d3, buf + 1, 1), 1);
  CHECK(buf[0] == '2' && buf[1] == '3');
  CHECK_EQ(loom_close(d1), 0);
  CHECK_EQ(loom_close(d2), 0);
  CHECK_EQ(loom_close(d3), 0);
  CHECK_EQ(loom_close(d4), 0);
  CHECK_EQ(loom_close(fd), 0);
  CHECK_EQ(loom_close(peer), 0);
  CHECK_EQ(loom_close(lfd), 0);
}

/* ---- close wakes a waiter; errno -------------------------------------------------------- */

static void* blocked_reader(void* arg) {
  char c;
  errno = 0;
  ssize_t r = loom_read(*(int*)arg, &c, 1);
  return (void*)(intptr_t)(r == -1 ? errno : 0);
}

static void close_wakes_waiter_with_ebadf(void) {
  int sv[2];
  CHECK_EQ(loom_socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  loom_t r = spawn(blocked_reader, &sv[0]);
  loom_usleep(20000);
  CHECK_EQ(loom_close(sv[0]), 0);
  CHECK_EQ((intptr_t)join_value(r), EBADF);
  CHECK_EQ(loom_close(sv[1]), 0);
}

/* errno: a failing call sets it, a succeeding one leaves the caller's, also
 * when the call blocked and the fibre came back on another processor. */
static void* errno_io_worker(void* arg) {
  int fd = *(int*)arg;
  char c;
  for (int i = 0; i < 100; ++i) {
    errno = 1000 + i;
    CHECK_EQ(loom_read(fd, &c, 1), 1); /* blocks until the main fibre writes */
    CHECK_EQ(errno, 1000 + i);
    CHECK_EQ(loom_read(-1, &c, 1), -1);
    CHECK_EQ(errno, EBADF);
  }
  return NULL;
}

static void errno_across_io(void) {
  int sv[2];
  CHECK_EQ(loom_socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  loom_t w = spawn(errno_io_worker, &sv[0]);
  for (int i = 0; i < 100; ++i) {
    loom_usleep(200);
    CHECK_EQ(loom_write(sv[1], "z", 1), 1);
  }
  join_value(w);
  CHECK_EQ(loom_close(sv[0]), 0);
  CHECK_EQ(loom_close(sv[1]), 0);
  errno = 0;
  CHECK_EQ(loom_close(-1), -1);
  CHECK_EQ(errno, EBADF);
}

/* ---- files, names, forget ---------------------------------------------------------------- */

static void files_and_names(void) {
  char path[] = "/tmp/loom_capi_io_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  unlink(path);
  CHECK_EQ(loom_pwrite(fd, "0123456789", 10, 0), 10);
  CHECK_EQ(loom_pwrite(fd, "AB", 2, 4), 2);
  CHECK_EQ(loom_fsync(fd), 0);
  char buf[16] = {0};
  CHECK_EQ(loom_pread(fd, buf, 10, 0), 10);
  CHECK(memcmp(buf, "0123AB6789", 10) == 0);
  CHECK_EQ(loom_pread(fd, buf, 10, 100), 0);
  CHECK_EQ(loom_close(fd), 0);
  CHECK_EQ(loom_pread(fd, buf, 1, 0), -1);
  CHECK_EQ(errno, EBADF);

  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  CHECK_EQ(loom_getaddrinfo("127.0.0.1", "8080", &hints, &res), 0);
  CHECK(res != NULL);
  CHECK_EQ(ntohs(((struct sockaddr_in*)res->ai_addr)->sin_port), 8080);
  freeaddrinfo(res);
  CHECK(loom_getaddrinfo("not an address", "80", &hints, &res) != 0);

  /* A descriptor closed behind loom's back, then forgotten: its number is
   * reused cleanly. */
  int sv[2];
  CHECK_EQ(loom_socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  close(sv[0]);
  loom_forget(sv[0]);
  int again[2];
  CHECK_EQ(loom_socketpair(AF_UNIX, SOCK_STREAM, 0, again), 0);
  CHECK_EQ(loom_write(again[1], "q", 1), 1);
  char c;
  CHECK_EQ(loom_read(again[0], &c, 1), 1);
  CHECK_EQ(loom_close(again[0]), 0);
  CHECK_EQ(loom_close(again[1]), 0);
  CHECK_EQ(loom_close(sv[1]), 0);
}

/* ---- offload ---------------------------------------------------------------------------- */

static void* offloaded(void* arg) {
  loom_cluster_t** where = (loom_cluster_t**)arg;
  *where = loom_cluster_self();
  CHECK_EQ(errno, 21); /* the caller's errno came along */
  errno = 33;
  return (void*)(intptr_t)42;
}

static void offload(void) {
  loom_cluster_t* where = NULL;
  errno = 21;
  CHECK_EQ((intptr_t)loom_offload(offloaded, &where), 42);
  CHECK_EQ(errno, 33); /* and the function's came back */
  CHECK(where != NULL && where != loom_cluster_default());
  CHECK(loom_cluster_self() == loom_cluster_default());
}

int main(void) {
  alarm(120);
  RUN(socketpair_stream);
  RUN(pipes);
  RUN(own_nonblocking_eventfd);
  RUN(tcp_every_call);
  RUN(deadlines_never_early);
  RUN(close_wakes_waiter_with_ebadf);
  RUN(errno_across_io);
  RUN(files_and_names);
  RUN(offload);
  return 0;
}
