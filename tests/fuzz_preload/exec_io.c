/* exec_io.c — the steps on descriptors made (exec_make.c): flags, dup,
 * close, read, write, poll, a thread blocked and what wakes it, lseek,
 * eviction, sendfile (scenario.h). Each prints what the kernel fixes. */
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
