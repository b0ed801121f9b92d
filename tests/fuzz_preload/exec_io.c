/* exec_io.c — the descriptor steps: make, flag, dup, close, read, write,
 * poll, block and wake (scenario.h). Each prints what the kernel fixes. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <termios.h>
#include <unistd.h>

#include "exec.h"

/* Numbers the steps ask for: dup2/dup3 onto kDupBase + the slot (each slot
 * its own, never another's), F_DUPFD from kDupMin up (above those), and a
 * number never open. */
enum { kBad = 250, kDupBase = 100, kDupMin = 150 };

static uint8_t rbuf[1 << 16], wbuf[1 << 16];

/* What a read returned, in words the kernel fixes (never raw random bytes). */
static void say_read(const char* what, int kind, long r, int e, const uint8_t* b, int file, long off) {
  if (r <= 0) {
    out("%s -> %s", what, res(r, e));
  } else if (kind == K_FILE) {
    out("%s -> %ld %s", what, r, file_bytes_ok(b, r, file, off) ? "pattern ok" : "pattern BAD");
  } else if (kind == K_URANDOM) {
    out("%s -> %ld", what, r);
  } else if (kind == K_EVENTFD || kind == K_TIMERFD) {
    uint64_t v = 0;
    memcpy(&v, b, r >= 8 ? 8 : (size_t)r);
    out("%s -> %ld value %llu", what, r, (unsigned long long)v);
  } else {
    out("%s -> %ld digest %08x", what, r, digest(b, (size_t)r));
  }
}

static int fl_of(int slot) { return slot >= 0 ? fdof[slot] : -1; }

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
  const Ofd* o = &m->o[m->nofd]; /* (not yet made: the sizes are the step's) */
  (void)o;
  static const long sizes[] = {0, 1000, 4096, 65536, 1 << 20, 3 << 20};
  long size = sizes[st->a % 6];
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

static int set_nonblock(int fd, int on, int how) {
  int v = on;
  switch (how % 4) {
    case 0: {
      int fl = fcntl(fd, F_GETFL);
      if (fl < 0) return -1;
      return fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
    }
    case 1:
      return ioctl(fd, FIONBIO, &v);
    case 2: {
      long fl = syscall(SYS_fcntl, fd, F_GETFL);
      if (fl < 0) return -1;
      return (int)syscall(SYS_fcntl, fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
    }
    default:
      return (int)syscall(SYS_ioctl, fd, FIONBIO, &v);
  }
}
static const char* kNbHow[] = {"fcntl", "ioctl(FIONBIO)", "syscall(fcntl)", "syscall(ioctl FIONBIO)"};

static void do_dup(const Model* m, const Step* st) {
  (void)m;
  int fd = fdof[st->s[0]], how = st->a % 12, r = -1, e = 0;
  int target = kDupBase + st->s[1];
  static const char* names[] = {"dup",
                                "dup2",
                                "dup3",
                                "dup3(O_CLOEXEC)",
                                "F_DUPFD",
                                "F_DUPFD_CLOEXEC",
                                "SCM_RIGHTS",
                                "syscall(dup)",
                                "dup2 over a live number",
                                "dup2 onto itself",
                                "dup3 onto itself",
                                "syscall(dup3) over a live number"};
  switch (how) {
    case 0:
      r = dup(fd);
      break;
    case 1:
      r = dup2(fd, target);
      break;
    case 2:
      r = dup3(fd, target, 0);
      break;
    case 3:
      r = dup3(fd, target, O_CLOEXEC);
      break;
    case 4:
      r = fcntl(fd, F_DUPFD, kDupMin);
      break;
    case 5:
      r = fcntl(fd, F_DUPFD_CLOEXEC, kDupMin);
      break;
    case 6: { /* through a unix socket of our own, as a descriptor passed between processes */
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) break;
      char c = 'x';
      struct iovec iov = {&c, 1};
      union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
      } u;
      memset(&u, 0, sizeof u);
      struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof u.b};
      struct cmsghdr* h = CMSG_FIRSTHDR(&msg);
      h->cmsg_level = SOL_SOCKET;
      h->cmsg_type = SCM_RIGHTS;
      h->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(h), &fd, sizeof fd);
      if (sendmsg(sv[0], &msg, 0) == 1) {
        memset(&u, 0, sizeof u);
        msg.msg_controllen = sizeof u.b;
        if (recvmsg(sv[1], &msg, st->r & 1 ? MSG_CMSG_CLOEXEC : 0) == 1 && (h = CMSG_FIRSTHDR(&msg)) &&
            h->cmsg_type == SCM_RIGHTS)
          memcpy(&r, CMSG_DATA(h), sizeof r);
      }
      e = errno;
      close(sv[0]);
      close(sv[1]);
      break;
    }
    case 7:
      r = (int)syscall(SYS_dup, fd);
      break;
    case 8:
      target = fdof[st->s[2]];
      r = dup2(fd, target);
      break;
    case 9:
      r = dup2(fd, fd);
      break;
    case 10:
      r = dup3(fd, fd, 0);
      break;
    case 11:
      target = fdof[st->s[2]];
      r = (int)syscall(SYS_dup3, fd, target, 0);
      break;
  }
  if (how != 6) e = errno;
  const char* verdict = r < 0 ? res(r, e) : "ok";
  if (r >= 0 && (how == 1 || how == 2 || how == 3 || how == 8 || how == 11))
    verdict = r == target ? "the number asked" : "WRONG number";
  if (r >= 0 && how == 9) verdict = r == fd ? "the same number" : "WRONG number";
  if (r >= 0 && (how == 4 || how == 5)) verdict = r >= kDupMin ? "at or above the minimum" : "WRONG number";
  out("dup s%d %s -> %s", st->s[0], names[how], verdict);
  if (how == 8 || how == 11 || how == 9 || how == 10) return;
  fdof[st->s[1]] = r;
}

static void do_close(const Model* m, const Step* st) {
  (void)m;
  int fd = fdof[st->s[0]], how = st->a % 3, r;
  if (how == 0)
    r = close(fd);
  else if (how == 1)
    r = (int)syscall(SYS_close_range, fd, fd, 0);
  else
    r = (int)syscall(SYS_close, fd);
  out("close s%d %s -> %s", st->s[0], how == 0 ? "close" : how == 1 ? "close_range" : "syscall(close)", res(r, errno));
  fdof[st->s[0]] = -1;
}

static void do_badfd(const Step* st) {
  long r = 0;
  int how = st->a % 8;
  char c;
  static const char* names[] = {"read", "write", "close", "fcntl(F_GETFL)", "dup", "dup2", "poll", "recv"};
  struct pollfd p = {kBad, POLLIN, 0};
  switch (how) {
    case 0:
      r = read(kBad, &c, 1);
      break;
    case 1:
      r = write(kBad, "x", 1);
      break;
    case 2:
      r = close(kBad);
      break;
    case 3:
      r = fcntl(kBad, F_GETFL);
      break;
    case 4:
      r = dup(kBad);
      break;
    case 5:
      r = dup2(kBad, kBad + 1);
      break;
    case 6:
      r = poll(&p, 1, 0);
      out("badfd poll -> %s revents %x", res(r, errno), p.revents);
      return;
    case 7:
      r = recv(kBad, &c, 1, 0);
      break;
  }
  out("badfd %s -> %s", names[how], res(r, errno));
}

static long read_call(int fd, int call, uint8_t* b, long n, long off) {
  struct iovec iov[2] = {{b, (size_t)(n / 2)}, {b + n / 2, (size_t)(n - n / 2)}};
  struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
  switch (call) {
    case RC_READ:
      return read(fd, b, (size_t)n);
    case RC_READV:
      return readv(fd, iov, 2);
    case RC_RECV:
      return recv(fd, b, (size_t)n, 0);
    case RC_RECVFROM:
      return recvfrom(fd, b, (size_t)n, 0, NULL, NULL);
    case RC_RECVMSG:
      return recvmsg(fd, &msg, 0);
    case RC_DONTWAIT:
      return recv(fd, b, (size_t)n, MSG_DONTWAIT);
    case RC_PEEK:
      return recv(fd, b, (size_t)n, MSG_PEEK);
    case RC_PREAD:
      return pread(fd, b, (size_t)n, off);
    default:
      return read(fd, (void*)8, (size_t)n); /* EFAULT */
  }
}
static const char* kReadCall[] = {"read",           "readv",   "recv",
                                  "recvfrom",       "recvmsg", "recv(MSG_DONTWAIT)",
                                  "recv(MSG_PEEK)", "pread",   "read(bad buffer)"};

static long write_call(int fd, int call, const uint8_t* b, long n, long off) {
  struct iovec iov[2] = {{(void*)b, (size_t)(n / 2)}, {(void*)(b + n / 2), (size_t)(n - n / 2)}};
  struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
  switch (call) {
    case WC_WRITE:
      return write(fd, b, (size_t)n);
    case WC_WRITEV:
      return writev(fd, iov, 2);
    case WC_SEND:
      return send(fd, b, (size_t)n, 0);
    case WC_SENDTO:
      return sendto(fd, b, (size_t)n, 0, NULL, 0);
    case WC_SENDMSG:
      return sendmsg(fd, &msg, 0);
    case WC_DONTWAIT:
      return send(fd, b, (size_t)n, MSG_DONTWAIT);
    case WC_NOSIGNAL:
      return send(fd, b, (size_t)n, MSG_NOSIGNAL);
    case WC_PWRITE:
      return pwrite(fd, b, (size_t)n, off);
    default:
      return write(fd, (void*)8, (size_t)n); /* EFAULT */
  }
}
static const char* kWriteCall[] = {
    "write",  "writev",           "send", "sendto", "sendmsg", "send(MSG_DONTWAIT)", "send(MSG_NOSIGNAL)",
    "pwrite", "write(bad buffer)"};

/* The bytes a write of the step carries: a file's pattern at its place, an eventfd's value, else the step's. */
static void write_bytes(const Model* m, const Step* st, int ofd, long n, long at) {
  const Ofd* o = &m->o[ofd];
  if (o->kind == K_FILE) {
    file_bytes(wbuf, n, o->file, at);
  } else {
    fill_bytes(wbuf, n, st->r);
    if (o->kind == K_EVENTFD && n >= 8) {
      uint64_t v = 1 + st->r % 3;
      memcpy(wbuf, &v, 8);
    }
  }
}

static void do_read(const Model* m, const Step* st) {
  int s = st->s[0], fd = fdof[s], call = st->b % RC_N, i = m->s[s].ofd;
  const Ofd* o = &m->o[i];
  long n = step_len(st);
  long off = o->kind == K_FILE ? (long)(st->r % (uint32_t)(o->size + 100)) : 0;
  errno = 0;
  long r = read_call(fd, call, rbuf, n, off);
  char what[96];
  snprintf(what, sizeof what, "%s s%d(%s) n=%ld", kReadCall[call], s, kind_name(o->kind), n);
  say_read(what, o->kind, r, errno, rbuf, o->file, call == RC_PREAD ? off : o->off);
}

static void do_write(const Model* m, const Step* st) {
  int s = st->s[0], fd = fdof[s], call = st->b % WC_N, i = m->s[s].ofd;
  const Ofd* o = &m->o[i];
  long n = step_len(st);
  long at = o->kind == K_FILE ? (o->append ? o->size : o->off) : 0;
  write_bytes(m, st, i, n, at);
  int before = sigpipes;
  errno = 0;
  long r = write_call(fd, call, wbuf, n, o->off);
  int e = errno;
  int pipes = sigpipes - before;
  out("%s s%d(%s) n=%ld -> %s%s", kWriteCall[call], s, kind_name(o->kind), n, res(r, e), pipes ? " +SIGPIPE" : "");
}

/* ---- a thread blocked in a read, and what wakes it -------------------------------------- */

struct reader {
  int fd, call, kind, file;
  long n, off, r;
  int err;
  uint8_t buf[8192 + 64];
};

static void* read_thread(void* p) {
  struct reader* rd = p;
  errno = 0;
  switch (rd->call) {
    case 0:
      rd->r = read(rd->fd, rd->buf, (size_t)rd->n);
      break;
    case 1: {
      struct iovec iov[2] = {{rd->buf, (size_t)(rd->n / 2)}, {rd->buf + rd->n / 2, (size_t)(rd->n - rd->n / 2)}};
      rd->r = readv(rd->fd, iov, 2);
      break;
    }
    case 2:
      rd->r = recv(rd->fd, rd->buf, (size_t)rd->n, 0);
      break;
    case 3: {
      struct iovec iov = {rd->buf, (size_t)rd->n};
      struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
      rd->r = recvmsg(rd->fd, &msg, 0);
      break;
    }
    default:
      rd->r = recv(rd->fd, rd->buf, (size_t)rd->n, MSG_WAITALL);
      break;
  }
  rd->err = errno;
  return NULL;
}
static const char* kBlockedCall[] = {"read", "readv", "recv", "recvmsg", "recv(MSG_WAITALL)"};
static const char* kWaker[] = {"a write", "every number of the peer closed", "shutdown(SHUT_WR)", "an eventfd write",
                               "the timer armed"};

static void do_blocked(const Model* m, const Step* st) {
  int r = m->s[st->s[0]].ofd, w = m->s[st->s[1]].ofd;
  const Ofd* R = &m->o[r];
  static struct reader rd;
  memset(&rd, 0, sizeof rd);
  rd.fd = fdof[st->s[0]];
  rd.call = st->b % 5;
  rd.n = step_len(st);
  rd.kind = R->kind;
  pthread_t t;
  spawn(&t, read_thread, &rd);
  usleep((useconds_t)(st->d % 6) * 1000);
  int waker = st->c % 5;
  switch (waker) {
    case 0: {
      long mm = blocked_wake_len(st, R->kind, rd.n);
      fill_bytes(wbuf, mm, st->r);
      if (rd.call == 4) { /* MSG_WAITALL: the bytes in two writes */
        write(fdof[st->s[1]], wbuf, (size_t)(rd.n / 2));
        usleep(1000);
        write(fdof[st->s[1]], wbuf + rd.n / 2, (size_t)(mm - rd.n / 2));
      } else {
        write(fdof[st->s[1]], wbuf, (size_t)mm);
      }
      break;
    }
    case 1:
      for (int s = 0; s < kSlots; ++s)
        if (m->s[s].ofd == w) {
          close(fdof[s]);
          fdof[s] = -1;
        }
      break;
    case 2:
      shutdown(fdof[st->s[1]], SHUT_WR);
      break;
    case 3: {
      uint64_t v = 1 + st->r % 3;
      write(fdof[st->s[1]], &v, 8);
      break;
    }
    case 4: {
      struct itimerspec its = {.it_value = {0, 2000000}};
      timerfd_settime(fdof[st->s[1]], 0, &its, NULL);
      break;
    }
  }
  pthread_join(t, NULL);
  char what[128];
  snprintf(what, sizeof what, "blocked %s s%d(%s) n=%ld woken by %s", kBlockedCall[rd.call], st->s[0],
           kind_name(R->kind), rd.n, kWaker[waker]);
  say_read(what, R->kind, rd.r, rd.err, rd.buf, 0, 0);
}

static void* forever_thread(void* p) {
  static uint8_t b[8192];
  int fd = (int)(intptr_t)p;
  while (read(fd, b, sizeof b) > 0) {
  }
  return NULL;
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

static void do_poll(const Model* m, const Step* st) {
  int fds[4], n = 0;
  for (int i = 0; i < 3; ++i)
    if (st->s[i] >= 0) fds[n++] = fdof[st->s[i]];
  if (st->b & 1) fds[n++] = kBad;
  char line[256];
  int len = 0;
  int how = st->a % 4;
  static const char* names[] = {"poll", "ppoll", "select", "epoll"};
  len += snprintf(line + len, sizeof line - (size_t)len, "%s", names[how]);
  for (int i = 0; i < 3; ++i)
    if (st->s[i] >= 0)
      len += snprintf(line + len, sizeof line - (size_t)len, " s%d(%s)", st->s[i],
                      kind_name(m->o[m->s[st->s[i]].ofd].kind));
  if (st->b & 1) len += snprintf(line + len, sizeof line - (size_t)len, " bad");
  len += snprintf(line + len, sizeof line - (size_t)len, " ->");
  if (how <= 1) {
    struct pollfd p[4];
    for (int i = 0; i < n; ++i) p[i] = (struct pollfd){fds[i], POLLIN | POLLOUT | POLLRDHUP, 0};
    struct timespec zero = {0, 0};
    int r = how == 0 ? poll(p, (nfds_t)n, 0) : ppoll(p, (nfds_t)n, &zero, NULL);
    len += snprintf(line + len, sizeof line - (size_t)len, " %s:", res(r, errno));
    for (int i = 0; i < n; ++i) len += snprintf(line + len, sizeof line - (size_t)len, " %x", p[i].revents);
  } else if (how == 2) {
    fd_set rs, ws, es;
    FD_ZERO(&rs);
    FD_ZERO(&ws);
    FD_ZERO(&es);
    int top = 0;
    for (int i = 0; i < n; ++i)
      if (fds[i] >= 0 && fds[i] < FD_SETSIZE) {
        FD_SET(fds[i], &rs);
        FD_SET(fds[i], &ws);
        FD_SET(fds[i], &es);
        if (fds[i] >= top) top = fds[i] + 1;
      }
    struct timeval zero = {0, 0};
    int r = select(top, &rs, &ws, &es, &zero);
    len += snprintf(line + len, sizeof line - (size_t)len, " %s:", res(r, errno));
    for (int i = 0; i < n && r >= 0; ++i)
      len +=
          snprintf(line + len, sizeof line - (size_t)len, " %s%s%s", fds[i] >= 0 && FD_ISSET(fds[i], &rs) ? "r" : "-",
                   fds[i] >= 0 && FD_ISSET(fds[i], &ws) ? "w" : "-", fds[i] >= 0 && FD_ISSET(fds[i], &es) ? "e" : "-");
  } else {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    uint32_t got[4] = {0};
    for (int i = 0; i < n; ++i) {
      struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.u32 = (uint32_t)i};
      int r = epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
      len += snprintf(line + len, sizeof line - (size_t)len, " add %s", res(r, errno));
    }
    struct epoll_event ev[8];
    int r = epoll_wait(ep, ev, 8, 0);
    for (int i = 0; i < r; ++i)
      if (ev[i].data.u32 < 4) got[ev[i].data.u32] = ev[i].events;
    len += snprintf(line + len, sizeof line - (size_t)len, "; wait %s:", res(r, errno));
    for (int i = 0; i < n; ++i) len += snprintf(line + len, sizeof line - (size_t)len, " %x", got[i]);
    close(ep);
  }
  out("%s", line);
}

struct poller {
  int fd, how;
  long r;
  int err;
  unsigned ev;
};
static void* poll_thread(void* p) {
  struct poller* q = p;
  errno = 0;
  switch (q->how % 5) {
    case 0:
    case 1: {
      struct pollfd f = {q->fd, POLLIN, 0};
      q->r = poll(&f, 1, q->how % 5 == 0 ? -1 : 5000);
      q->ev = (unsigned)f.revents;
      break;
    }
    case 2: {
      struct pollfd f = {q->fd, POLLIN, 0};
      q->r = ppoll(&f, 1, NULL, NULL);
      q->ev = (unsigned)f.revents;
      break;
    }
    case 3: {
      fd_set rs;
      FD_ZERO(&rs);
      FD_SET(q->fd, &rs);
      q->r = select(q->fd + 1, &rs, NULL, NULL, NULL);
      q->ev = FD_ISSET(q->fd, &rs) ? 1 : 0;
      break;
    }
    default: {
      int ep = epoll_create1(EPOLL_CLOEXEC);
      struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 7};
      epoll_ctl(ep, EPOLL_CTL_ADD, q->fd, &ev);
      q->r = epoll_wait(ep, &ev, 1, -1);
      q->ev = q->r == 1 ? ev.events : 0;
      close(ep);
      break;
    }
  }
  q->err = errno;
  return NULL;
}

static void do_bpoll(const Model* m, const Step* st) {
  static const char* names[] = {"poll(-1)", "poll(5000)", "ppoll(NULL)", "select(NULL)", "epoll_wait(-1)"};
  struct poller q = {fdof[st->s[0]], st->a % 5, 0, 0, 0};
  pthread_t t;
  spawn(&t, poll_thread, &q);
  usleep(1000);
  long mm = 1 + st->r % 512;
  fill_bytes(wbuf, mm, st->r);
  write(fdof[st->s[1]], wbuf, (size_t)mm);
  pthread_join(t, NULL);
  out("blocked %s s%d(%s) woken by a write -> %s events %x", names[q.how], st->s[0],
      kind_name(m->o[m->s[st->s[0]].ofd].kind), res(q.r, q.err), q.ev);
}

static void do_lseek(const Model* m, const Step* st) {
  static const long seeks[] = {0, 1, 100, 4096, 5000, 65536, -1, -4096};
  int whence = st->b % 3 == 0 ? SEEK_SET : st->b % 3 == 1 ? SEEK_CUR : SEEK_END;
  errno = 0;
  long r = lseek(fdof[st->s[0]], seeks[st->a % 8], whence);
  out("lseek s%d(%s) %ld %s -> %s", st->s[0], kind_name(m->o[m->s[st->s[0]].ofd].kind), seeks[st->a % 8],
      whence == SEEK_SET   ? "SET"
      : whence == SEEK_CUR ? "CUR"
                           : "END",
      res(r, errno));
}

void evict(int file, int patchy, long size) {
  int k = keeper[file];
  fdatasync(k);
  posix_fadvise(k, 0, 0, POSIX_FADV_DONTNEED);
  if (patchy) {
    posix_fadvise(k, 0, 0, POSIX_FADV_RANDOM);
    for (long off = 0; off < size; off += 8192) pread(k, rbuf, 4096, off);
  }
}

static void do_sendfile(const Model* m, const Step* st) {
  int out_fd = fdof[st->s[0]], in_fd = fdof[st->s[1]];
  off_t off = 0;
  int before = sigpipes;
  errno = 0;
  long r = sendfile(out_fd, in_fd, st->b % 2 ? &off : NULL, (size_t)step_len(st));
  int e = errno;
  out("sendfile s%d(%s) <- s%d(file)%s n=%ld -> %s%s", st->s[0], kind_name(m->o[m->s[st->s[0]].ofd].kind), st->s[1],
      st->b % 2 ? " at 0" : "", step_len(st), res(r, e), sigpipes != before ? " +SIGPIPE" : "");
}

void exec_io(const Model* m, const Step* st) {
  int fd0 = fl_of(st->s[0]);
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
    case OP_SETNB: {
      int r = set_nonblock(fd0, st->a & 1, st->b);
      out("setnb s%d(%s) %s by %s -> %s", st->s[0], kind_name(m->o[m->s[st->s[0]].ofd].kind), st->a & 1 ? "on" : "off",
          kNbHow[st->b % 4], res(r, errno));
      break;
    }
    case OP_CLOEXEC: {
      int on = st->a & 1, how = st->b % 3, r;
      if (how == 1)
        r = ioctl(fd0, on ? FIOCLEX : FIONCLEX);
      else if (how == 2 && on)
        r = (int)syscall(SYS_close_range, fd0, fd0, CLOSE_RANGE_CLOEXEC);
      else
        r = fcntl(fd0, F_SETFD, on ? FD_CLOEXEC : 0);
      out("cloexec s%d %s -> %s", st->s[0], on ? "on" : "off", res(r, errno));
      break;
    }
    case OP_GETFL: {
      int fl = fcntl(fd0, F_GETFL), e = errno, fd = fcntl(fd0, F_GETFD);
      if (fl < 0)
        out("getfl s%d -> %s", st->s[0], res(fl, e));
      else
        out("getfl s%d(%s) -> acc %d%s%s%s", st->s[0], kind_name(m->o[m->s[st->s[0]].ofd].kind), fl & O_ACCMODE,
            fl & O_NONBLOCK ? " nonblock" : "", fl & O_APPEND ? " append" : "",
            fd > 0 && (fd & FD_CLOEXEC) ? " cloexec" : "");
      break;
    }
    case OP_DUP:
      do_dup(m, st);
      break;
    case OP_CLOSE:
      do_close(m, st);
      break;
    case OP_BADFD:
      do_badfd(st);
      break;
    case OP_READ:
      do_read(m, st);
      break;
    case OP_WRITE:
      do_write(m, st);
      break;
    case OP_BLOCKED:
      do_blocked(m, st);
      break;
    case OP_FOREVER: {
      pthread_t t;
      spawn(&t, forever_thread, (void*)(intptr_t)fd0);
      pthread_detach(t);
      usleep(1000);
      out("forever-read s%d(%s): a thread waits for good", st->s[0], kind_name(m->o[m->s[st->s[0]].ofd].kind));
      break;
    }
    case OP_ACCEPT:
      do_accept_step(m, st);
      break;
    case OP_SHUTDOWN:
      out("shutdown s%d SHUT_WR -> %s", st->s[0], res(shutdown(fd0, SHUT_WR), errno));
      break;
    case OP_POLL:
      do_poll(m, st);
      break;
    case OP_BPOLL:
      do_bpoll(m, st);
      break;
    case OP_LSEEK:
      do_lseek(m, st);
      break;
    case OP_EVICT: {
      const Ofd* o = &m->o[m->s[st->s[0]].ofd];
      evict(o->file, st->a & 1, o->size);
      out("evict s%d %s", st->s[0], st->a & 1 ? "patchy" : "all");
      break;
    }
    case OP_SENDFILE:
      do_sendfile(m, st);
      break;
  }
}
