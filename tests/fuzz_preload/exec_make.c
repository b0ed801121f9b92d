/* exec_make.c — the steps that make descriptors: pipes, socket pairs, TCP
 * connections and listeners on 127.0.0.1 (and accepts), regular files on
 * disk in a chosen cache state, eventfds, devices, FIFOs, ptys, timerfds;
 * each with the flags the step asks for, by the call that takes them
 * (scenario.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <termios.h>
#include <unistd.h>

#include "exec.h"

static uint8_t wbuf[1 << 16], rbuf[4096];

static int tcp_listener(int flags, int* port) {
  int l = socket(AF_INET, SOCK_STREAM | flags, 0);
  if (l < 0) return -1;
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (bind(l, (struct sockaddr*)&a, sizeof a) != 0 || listen(l, 16) != 0 ||
      getsockname(l, (struct sockaddr*)&a, &len) != 0) {
    close(l);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return l;
}

static int listener_port(int l) {
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  if (getsockname(l, (struct sockaddr*)&a, &len) != 0) return 0;
  return ntohs(a.sin_port);
}

/* A client of 127.0.0.1:port; "connect ok" or "connect started" (non-blocking). */
static int tcp_client(int port, int flags, char* said, int len) {
  int c = socket(AF_INET, SOCK_STREAM | flags, 0);
  if (c < 0) {
    snprintf(said, (size_t)len, "socket %s", res(-1, errno));
    return -1;
  }
  struct sockaddr_in a = {
      .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int r = connect(c, (struct sockaddr*)&a, sizeof a);
  int e = errno;
  if (r == 0) {
    snprintf(said, (size_t)len, "connect ok");
  } else if (e == EINPROGRESS && (flags & SOCK_NONBLOCK)) {
    struct pollfd p = {c, POLLOUT, 0};
    for (long t0 = now_ms(); now_ms() - t0 < 3000 && syscall(SYS_poll, &p, 1, 0) == 0;) usleep(200);
    int err = -1;
    socklen_t l = sizeof err;
    getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &l);
    snprintf(said, (size_t)len, "connect started, then %s", err == 0 ? "ok" : strerror(err));
  } else {
    snprintf(said, (size_t)len, "connect %s", res(r, e));
  }
  return c;
}

/* Waits (bounded) until a connection is queued on listener l. */
static void settle_listener(int l) {
  struct pollfd p = {l, POLLIN, 0};
  for (long t0 = now_ms(); now_ms() - t0 < 3000 && syscall(SYS_poll, &p, 1, 0) == 0;) usleep(200);
}

static int do_accept(int l, int how) {
  switch (how % 5) {
    case 0:
      return accept(l, NULL, NULL);
    case 1:
      return accept4(l, NULL, NULL, 0);
    case 2:
      return accept4(l, NULL, NULL, SOCK_NONBLOCK);
    case 3:
      return accept4(l, NULL, NULL, SOCK_CLOEXEC);
    default:
      return accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  }
}

struct acceptor {
  int l, how, fd, err;
};
static void* accept_thread(void* p) {
  struct acceptor* a = p;
  a->fd = do_accept(a->l, a->how);
  a->err = errno;
  return NULL;
}

static void make_file(const Model* m, const Step* st) {
  long size = file_size(st);
  int file = m->nfiles;
  char path[4096];
  snprintf(path, sizeof path, "%s/fuzz-file.%d.%d", workdir, (int)getpid(), file);
  int k = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (k < 0) {
    out("file: create %s", res(-1, errno));
    fdof[st->s[0]] = -1;
    return;
  }
  for (long off = 0; off < size;) {
    long n = size - off < (long)sizeof wbuf ? size - off : (long)sizeof wbuf;
    file_bytes(wbuf, n, file, off);
    if (pwrite(k, wbuf, (size_t)n, off) != n) break;
    off += n;
  }
  int cache = st->c % 3;
  if (cache) {
    fdatasync(k);
    posix_fadvise(k, 0, 0, POSIX_FADV_DONTNEED);
  }
  if (cache == 2) {
    posix_fadvise(k, 0, 0, POSIX_FADV_RANDOM);
    for (long off = 0; off < size; off += 8192) pread(k, rbuf, 4096, off);
  }
  int acc = st->b % 3 == 0 ? O_RDONLY : st->b % 3 == 1 ? O_WRONLY : O_RDWR;
  int flags = acc | (acc != O_RDONLY && ((st->b >> 2) & 1) ? O_APPEND : 0) | ((st->b >> 3) & 1 ? O_NONBLOCK : 0) |
              ((st->b >> 4) & 1 ? O_CLOEXEC : 0);
  int fd = open(path, flags);
  int e = errno;
  unlink(path);
  keeper[file] = k;
  fdof[st->s[0]] = fd;
  out("file s%d size %ld cache %s flags %s%s%s%s -> %s", st->s[0], size,
      cache == 0   ? "full"
      : cache == 1 ? "cold"
                   : "patchy",
      acc == O_RDONLY   ? "r"
      : acc == O_WRONLY ? "w"
                        : "rw",
      flags & O_APPEND ? "+append" : "", flags & O_NONBLOCK ? "+nonblock" : "", flags & O_CLOEXEC ? "+cloexec" : "",
      fd >= 0 ? "ok" : res(-1, e));
}

static void make_dev(const Step* st) {
  static const char* paths[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/dev/random", "/dev/kmsg"};
  int which = st->a % 6;
  int acc = which == 5 ? O_RDONLY : st->b % 3 == 0 ? O_RDONLY : st->b % 3 == 1 ? O_WRONLY : O_RDWR;
  int flags = acc | ((st->b >> 2) & 1 ? O_NONBLOCK : 0) | ((st->b >> 3) & 1 ? O_CLOEXEC : 0);
  int fd = open(paths[which], flags);
  int e = errno;
  if (fd >= 0 && which == 5 && lseek(fd, 0, SEEK_END) < 0) {
    e = errno;
    close(fd);
    fd = -1;
  }
  fdof[st->s[0]] = fd;
  if (fd < 0 && which == 5)
    out("dev s%d %s: unavailable here", st->s[0], paths[which]); /* (no CAP_SYSLOG: the same in every run) */
  else
    out("dev s%d %s flags %x -> %s", st->s[0], paths[which], flags & (O_ACCMODE | O_NONBLOCK),
        fd >= 0 ? "ok" : res(-1, e));
}

static void make_pty(const Step* st) {
  int ce = (st->b >> 1) & 1 ? O_CLOEXEC : 0;
  int mfd = posix_openpt(O_RDWR | O_NOCTTY | (st->b & 1 ? O_NONBLOCK : 0) | ce);
  char name[128];
  int sfd = -1;
  if (mfd >= 0 && grantpt(mfd) == 0 && unlockpt(mfd) == 0 && ptsname_r(mfd, name, sizeof name) == 0)
    sfd = open(name, O_RDWR | O_NOCTTY | ((st->b >> 2) & 1 ? O_NONBLOCK : 0) | ce);
  if (sfd >= 0) {
    struct termios t;
    tcgetattr(sfd, &t);
    cfmakeraw(&t);
    tcsetattr(sfd, TCSANOW, &t);
  }
  fdof[st->s[0]] = mfd;
  fdof[st->s[1]] = sfd;
  out("pty s%d,s%d -> %s", st->s[0], st->s[1], mfd >= 0 && sfd >= 0 ? "ok" : "failed");
}

static void do_accept_step(const Model* m, const Step* st) {
  (void)m;
  int l = fdof[st->s[0]], how = st->a % 5, mode = st->b % 3, port = listener_port(l);
  char said[96] = "";
  int c = -1, a = -1, e = 0;
  if (mode == 1) {
    struct acceptor ac = {l, how, -1, 0};
    pthread_t t;
    spawn(&t, accept_thread, &ac);
    usleep(1000);
    c = tcp_client(port, 0, said, sizeof said);
    pthread_join(t, NULL);
    a = ac.fd;
    e = ac.err;
  } else {
    const char* first = "";
    if (mode == 2) {
      errno = 0;
      int x = do_accept(l, how);
      first = x < 0 && errno == EAGAIN ? "EAGAIN first, " : "WRONG first accept, ";
      if (x >= 0) close(x);
    }
    c = tcp_client(port, 0, said, sizeof said);
    settle_listener(l);
    a = do_accept(l, how);
    e = errno;
    out("accept s%d -> s%d,s%d: %s%s, accept -> %s", st->s[0], st->s[1], st->s[2], first, said,
        a >= 0 ? "ok" : res(-1, e));
  }
  if (mode == 1)
    out("accept s%d -> s%d,s%d by a blocked thread: %s, accept -> %s", st->s[0], st->s[1], st->s[2], said,
        a >= 0 ? "ok" : res(-1, e));
  fdof[st->s[1]] = c;
  fdof[st->s[2]] = a;
}

static void do_tcp(const Step* st) {
  int port = 0, lf = (st->a & 1 ? SOCK_NONBLOCK : 0) | ((st->a >> 1) & 1 ? SOCK_CLOEXEC : 0);
  int l = tcp_listener(lf, &port);
  char said[96] = "no listener";
  int c = -1, a = -1, e = 0;
  if (l >= 0) {
    c = tcp_client(port, (st->c & 1 ? SOCK_NONBLOCK : 0) | ((st->c >> 1) & 1 ? SOCK_CLOEXEC : 0), said, sizeof said);
    if (lf & SOCK_NONBLOCK) settle_listener(l);
    a = do_accept(l, st->b);
    e = errno;
  }
  out("tcp s%d,s%d%s: %s, accept -> %s", st->s[0], st->s[1], st->s[2] >= 0 ? " (listener kept)" : "", said,
      a >= 0 ? "ok" : res(-1, e));
  fdof[st->s[0]] = c;
  fdof[st->s[1]] = a;
  if (st->s[2] >= 0)
    fdof[st->s[2]] = l;
  else if (l >= 0)
    close(l);
}

/* 1 if st makes descriptors (and was run here). */
int exec_make(const Model* m, const Step* st) {
  switch (st->op) {
    case OP_PIPE: {
      int p[2] = {-1, -1}, r;
      static const int flags[] = {0, 0, O_NONBLOCK, O_CLOEXEC, O_NONBLOCK | O_CLOEXEC};
      r = st->a % 5 == 0 ? pipe(p) : pipe2(p, flags[st->a % 5]);
      static const char* how[] = {"pipe()", "pipe2(0)", "pipe2(O_NONBLOCK)", "pipe2(O_CLOEXEC)",
                                  "pipe2(O_NONBLOCK|O_CLOEXEC)"};
      out("pipe s%d,s%d %s -> %s", st->s[0], st->s[1], how[st->a % 5], res(r, errno));
      fdof[st->s[0]] = p[0];
      fdof[st->s[1]] = p[1];
      break;
    }
    case OP_SOCKPAIR: {
      int sv[2] = {-1, -1};
      int type = (st->a % 2 ? SOCK_DGRAM : SOCK_STREAM) | (st->b & 1 ? SOCK_NONBLOCK : 0) |
                 ((st->b >> 1) & 1 ? SOCK_CLOEXEC : 0);
      int r = socketpair(AF_UNIX, type, 0, sv);
      out("socketpair s%d,s%d %s%s -> %s", st->s[0], st->s[1], st->a % 2 ? "dgram" : "stream",
          st->b & 1 ? " nonblock" : "", res(r, errno));
      fdof[st->s[0]] = sv[0];
      fdof[st->s[1]] = sv[1];
      break;
    }
    case OP_TCP:
      do_tcp(st);
      break;
    case OP_FILE:
      make_file(m, st);
      break;
    case OP_EVENTFD: {
      int flags = (st->b & 1 ? EFD_NONBLOCK : 0) | ((st->b >> 1) & 1 ? EFD_CLOEXEC : 0) |
                  ((st->b >> 2) & 1 ? EFD_SEMAPHORE : 0);
      int fd = eventfd((unsigned)(st->a % 3), flags);
      out("eventfd s%d %d flags %x -> %s", st->s[0], st->a % 3, flags, fd >= 0 ? "ok" : res(-1, errno));
      fdof[st->s[0]] = fd;
      break;
    }
    case OP_DEV:
      make_dev(st);
      break;
    case OP_FIFO: {
      char path[4096];
      snprintf(path, sizeof path, "%s/fuzz-fifo.%d.%d", workdir, (int)getpid(), step_index);
      int ce = (st->b >> 1) & 1 ? O_CLOEXEC : 0;
      int r = mkfifo(path, 0600), rd = -1, wr = -1;
      if (r == 0) {
        rd = open(path, O_RDONLY | O_NONBLOCK | ce);
        wr = open(path, O_WRONLY | (st->b & 1 ? O_NONBLOCK : 0) | ce);
        unlink(path);
      }
      out("fifo s%d,s%d -> %s", st->s[0], st->s[1], rd >= 0 && wr >= 0 ? "ok" : "failed");
      fdof[st->s[0]] = rd;
      fdof[st->s[1]] = wr;
      break;
    }
    case OP_PTY:
      make_pty(st);
      break;
    case OP_TIMERFD: {
      int fd = timerfd_create(CLOCK_MONOTONIC, (st->b & 1 ? TFD_NONBLOCK : 0) | ((st->b >> 1) & 1 ? TFD_CLOEXEC : 0));
      out("timerfd s%d -> %s", st->s[0], fd >= 0 ? "ok" : res(-1, errno));
      fdof[st->s[0]] = fd;
      break;
    }
    case OP_ACCEPT:
      do_accept_step(m, st);
      break;
    default:
      return 0;
  }
  return 1;
}
