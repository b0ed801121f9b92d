/* model.c — the model of the kernel's descriptor state the scenarios keep
 * (scenario.h): what a read or write does now, which steps are valid, what
 * each does to the state. Pure: no system call, the same answers in every
 * run (the generator, gen.c, and every run's replay use it). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "scenario.h"

/* Budgets that keep every write from waiting (a pipe holds 64 KiB, a unix
 * stream socket some hundreds of small writes, a pty's line discipline 4 KiB,
 * a datagram socket's peer queue at least 10). */
enum { kStreamBudget = 16384, kStreamWrites = 24, kPtyBudget = 1024, kDgrams = 8, kFileMax = 8 << 20 };

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

const char* kind_name(int k) {
  static const char* n[K_NKINDS] = {"none",    "pipe-r", "pipe-w", "fifo-r",  "fifo-w", "unix", "udgram",
                                    "tcp",     "listen", "file",   "eventfd", "null",   "zero", "full",
                                    "urandom", "kmsg",   "pty-m",  "pty-s",   "timerfd"};
  return k >= 0 && k < K_NKINDS ? n[k] : "?";
}

void model_init(Model* m, unsigned exclude) {
  memset(m, 0, sizeof *m);
  for (int i = 0; i < kSlots; ++i) m->s[i].ofd = -1;
  m->exclude = exclude;
}

/* ---- queries -------------------------------------------------------------------------- */

static int ofd_of(const Model* m, int slot) { return slot >= 0 && slot < kSlots ? m->s[slot].ofd : -1; }
static int is_free(const Model* m, int slot) { return slot >= 0 && slot < kSlots && m->s[slot].ofd < 0; }
static int is_open(const Model* m, int slot) { return ofd_of(m, slot) >= 0; }
static int is_socket(int k) { return k == K_UNIX || k == K_UDGRAM || k == K_TCP || k == K_LISTEN; }
static int is_dev(int k) { return k == K_NULL || k == K_ZERO || k == K_FULL || k == K_URANDOM; }
static long lmin(long a, long b) { return a < b ? a : b; }

/* The peer is open: someone can still write to (or read from) it. */
static int peer_open(const Model* m, const Ofd* o) { return o->peer >= 0 && m->o[o->peer].refs > 0; }

/* Read calls (OP_READ's b): which ones are socket calls, which do not wait. */
static int rc_socket(int c) { return c >= RC_RECV && c <= RC_PEEK; }

int read_outcome(const Model* m, int i, long n) {
  const Ofd* o = &m->o[i];
  if (o->spoiled) return R_RACY;
  int nb = o->nonblock;
  switch (o->kind) {
    case K_PIPE_R:
    case K_FIFO_R:
      if (n == 0 || o->avail > 0 || !peer_open(m, o)) return R_NOW;
      return nb ? R_NOW : R_BLOCKS;
    case K_PIPE_W:
    case K_FIFO_W:
    case K_LISTEN:
    case K_FILE:
    case K_NULL:
    case K_ZERO:
    case K_FULL:
    case K_URANDOM:
      return R_NOW;
    case K_UNIX:
    case K_TCP:
      if (n == 0) return R_RACY; /* recv(0) waits on unix, returns on TCP (read(0) returns: read_call_outcome) */
      if (o->avail > 0 || !peer_open(m, o) || m->o[o->peer].wshut) return R_NOW;
      return nb ? R_NOW : R_BLOCKS;
    case K_UDGRAM:
      if (!peer_open(m, o)) return R_RACY;
      if (o->ndg > 0) return R_NOW;
      return nb ? R_NOW : R_BLOCKS;
    case K_EVENTFD:
      if (n < 8 || o->count > 0) return R_NOW;
      return nb ? R_NOW : R_BLOCKS;
    case K_KMSG:
      return nb ? R_NOW : R_BLOCKS;
    case K_PTY_M:
    case K_PTY_S:
      if (!peer_open(m, o) || m->o[o->peer].spoiled) return R_RACY;
      if (o->avail > 0) return R_NOW;
      return nb ? R_NOW : R_BLOCKS;
    case K_TIMERFD:
      if (n < 8) return R_NOW;
      if (o->timer) return nb ? R_RACY : R_NOW;
      return nb ? R_NOW : R_BLOCKS;
  }
  return R_RACY;
}

/* Bytes a read of n takes (once read_outcome says it returns). */
/* The kinds a read takes bytes from as a stream (o->avail). */
static int byte_stream_read(int kind) {
  return kind == K_PIPE_R || kind == K_FIFO_R || kind == K_UNIX || kind == K_TCP || kind == K_PTY_M || kind == K_PTY_S;
}

long read_count(const Model* m, int i, long n) {
  const Ofd* o = &m->o[i];
  if (byte_stream_read(o->kind)) return lmin(n, o->avail);
  switch (o->kind) {
    case K_UDGRAM:
      return o->ndg ? lmin(n, o->dg[0]) : 0;
    case K_FILE:
      if (o->acc == O_WRONLY || o->off >= o->size) return 0;
      return lmin(n, o->size - o->off);
    case K_EVENTFD:
    case K_TIMERFD:
      return n >= 8 && (o->count > 0 || o->timer) ? 8 : 0;
    default:
      return 0;
  }
}

/* The read outcome of call c (OP_READ's b) on slot s. */
static int read_call_outcome(const Model* m, int s, long n, int c) {
  int i = ofd_of(m, s);
  const Ofd* o = &m->o[i];
  if (o->kind == K_KMSG && c != RC_READ) return R_RACY;
  if (rc_socket(c) && !is_socket(o->kind)) return o->spoiled ? R_RACY : R_NOW; /* ENOTSOCK */
  if (c == RC_PREAD) {
    if (o->kind == K_FILE || is_dev(o->kind)) return R_NOW;
    return o->spoiled || o->kind == K_KMSG ? R_RACY : R_NOW; /* ESPIPE */
  }
  if (o->kind == K_LISTEN) return R_NOW;
  /* read(2) and readv(2) of nothing from a socket: 0 at once (sock_read_iter), whatever its state */
  if (n == 0 && is_socket(o->kind) && (c == RC_READ || c == RC_READV)) return o->spoiled ? R_RACY : R_NOW;
  if (c == RC_DONTWAIT || c == RC_PEEK) {
    int r = read_outcome(m, i, n);
    if (c == RC_DONTWAIT && r == R_BLOCKS) return R_NOW;
    return r;
  }
  if (c == RC_FAULT) {
    int k = o->kind;
    if (!(k == K_PIPE_R || k == K_FIFO_R || k == K_UNIX || k == K_FILE || k == K_ZERO)) return R_RACY;
    if (read_outcome(m, i, n) != R_NOW || read_count(m, i, n) == 0) return R_RACY;
    if (k == K_FILE && o->acc == O_WRONLY) return R_RACY;
    return R_NOW;
  }
  return read_outcome(m, i, n);
}

/* Write calls (OP_WRITE's b). */
static int wc_socket(int c) { return c >= WC_SEND && c <= WC_NOSIGNAL; }

/* 1 if a write of n on slot s returns at once with an outcome the kernel fixes. */
static int write_ok(const Model* m, int s, long n, int c) {
  const Ofd* o = &m->o[ofd_of(m, s)];
  if (o->spoiled || o->kind == K_KMSG) return 0;
  if (wc_socket(c) && !is_socket(o->kind)) return 1; /* ENOTSOCK */
  if (c == WC_PWRITE) {
    if (o->kind != K_FILE) return o->kind != K_LISTEN; /* ESPIPE (and /dev/null's n) */
    return !o->append && o->acc != O_RDONLY && o->off + n <= kFileMax;
  }
  if (c == WC_FAULT && !(o->kind == K_PIPE_W || o->kind == K_UNIX || (o->kind == K_FILE && o->acc != O_RDONLY)))
    return 0;
  const Ofd* p = o->peer >= 0 ? &m->o[o->peer] : NULL;
  switch (o->kind) {
    case K_PIPE_W:
    case K_FIFO_W:
      if (!peer_open(m, o)) return 1; /* EPIPE */
      return !p->spoiled && p->avail + n <= kStreamBudget;
    case K_PIPE_R:
    case K_FIFO_R:
      return 1; /* EBADF */
    case K_UNIX:
      if (o->wshut || !peer_open(m, o)) return 1; /* EPIPE */
      return !p->spoiled && p->avail + n <= kStreamBudget && p->writes < kStreamWrites;
    case K_TCP:
      if (o->wshut) return 1;
      if (!peer_open(m, o)) return 0; /* the reset comes back later */
      return !p->spoiled && p->avail + n <= kStreamBudget && p->writes < kStreamWrites && n > 0;
    case K_UDGRAM:
      return peer_open(m, o) && !p->spoiled && p->ndg < kDgrams && n <= 2048;
    case K_FILE:
      return o->acc == O_RDONLY || (o->append ? o->size : o->off) + n <= kFileMax;
    case K_EVENTFD:
      return n <= 8; /* (more than 8: EINVAL on recent kernels, 8 of them written on older ones) */
    case K_TIMERFD:
    case K_NULL:
    case K_ZERO:
    case K_FULL:
    case K_URANDOM:
      return 1;
    case K_PTY_M:
    case K_PTY_S:
      return peer_open(m, o) && !p->spoiled && p->avail + n <= kPtyBudget && n > 0;
  }
  return 0;
}

/* ---- effects -------------------------------------------------------------------------- */

static int new_ofd(Model* m, int kind, int nonblock) {
  if (m->nofd >= kMaxOfd) abort(); /* (step_valid keeps room for three) */
  int i = m->nofd++;
  Ofd* o = &m->o[i];
  memset(o, 0, sizeof *o);
  o->kind = kind;
  o->nonblock = nonblock;
  o->peer = -1;
  o->acc = O_RDWR;
  return i;
}

static void bind_slot(Model* m, int slot, int ofd, int cloexec) {
  m->s[slot].ofd = ofd;
  m->s[slot].cloexec = cloexec;
  m->o[ofd].refs++;
}

/* The last number of an open file description closed. */
static void last_close(Model* m, int i) {
  Ofd* o = &m->o[i];
  if (o->peer < 0) return;
  Ofd* p = &m->o[o->peer];
  /* Unread data at a close resets a TCP connection and makes the unix
   * peer's next read ECONNRESET; a pty's other side hangs up. */
  if ((o->kind == K_TCP || o->kind == K_UNIX) && o->avail > 0) p->spoiled = 1;
  if (o->kind == K_PTY_M || o->kind == K_PTY_S) p->spoiled = 1;
}

static void drop_slot(Model* m, int slot) {
  int i = m->s[slot].ofd;
  m->s[slot].ofd = -1;
  if (i >= 0 && --m->o[i].refs == 0) last_close(m, i);
}

static void pair(Model* m, int a, int b) {
  m->o[a].peer = b;
  m->o[b].peer = a;
}

static void consume(Model* m, int i, long n, int peek) {
  Ofd* o = &m->o[i];
  long c = read_count(m, i, n);
  if (peek) return;
  if (byte_stream_read(o->kind)) {
    o->avail -= c;
    if (o->avail == 0) o->writes = 0;
    return;
  }
  switch (o->kind) {
    case K_UDGRAM:
      if (o->ndg) {
        memmove(o->dg, o->dg + 1, sizeof o->dg[0] * (size_t)(o->ndg - 1));
        o->ndg--;
      }
      break;
    case K_FILE:
      o->off += c;
      break;
    case K_EVENTFD:
      if (c) o->count = o->sem ? o->count - 1 : 0;
      break;
    case K_TIMERFD:
      if (c) o->timer = 0;
      break;
  }
}

/* The value an eventfd write adds (the executor writes the same). */
static uint64_t efd_value(const Step* st) { return 1 + st->r % 3; }

static void produce(Model* m, int i, long n, const Step* st) {
  Ofd* o = &m->o[i];
  Ofd* p = o->peer >= 0 ? &m->o[o->peer] : NULL;
  switch (o->kind) {
    case K_PIPE_W:
    case K_FIFO_W:
    case K_UNIX:
    case K_TCP:
    case K_PTY_M:
    case K_PTY_S:
      if (o->wshut || !p || p->refs == 0) return;
      p->avail += n;
      p->writes++;
      break;
    case K_UDGRAM:
      if (p && p->refs > 0 && p->ndg < 8) p->dg[p->ndg++] = (int)n;
      break;
    case K_FILE:
      if (o->acc == O_RDONLY) return;
      if (o->append) o->off = o->size;
      o->off += n;
      if (o->off > o->size) o->size = o->off;
      break;
    case K_EVENTFD:
      if (n == 8) o->count += efd_value(st);
      break;
  }
}

/* ---- steps ---------------------------------------------------------------------------- */

static const long kSizes[] = {0, 1000, 4096, 65536, 1 << 20, 3 << 20};

long file_size(const Step* st) { return kSizes[st->a % 6]; }
static const long kLens[] = {0, 1, 7, 8, 64, 100, 1000, 4096, 8192};
static const long kSeeks[] = {0, 1, 100, 4096, 5000, 65536, -1, -4096};

long step_len(const Step* st) { return kLens[st->a % 9]; }

static int all_free(const Model* m, const Step* st, int n) {
  for (int i = 0; i < n; ++i) {
    if (!is_free(m, st->s[i])) return 0;
    for (int j = 0; j < i; ++j)
      if (st->s[i] == st->s[j]) return 0;
  }
  return 1;
}

/* A slot whose open file description plain flag and number operations may use. */
static int any_open(const Model* m, int slot) { return is_open(m, slot); }

/* The bytes a blocked read's waker writes (case 0). */
long blocked_wake_len(const Step* st, int kind, long n) {
  if ((st->b % 5) == 4) return n + st->r % 64;
  return 1 + st->r % (kind == K_TCP ? 1024 : kind == K_PTY_M || kind == K_PTY_S ? 512 : 4096);
}

static int blocked_valid(const Model* m, const Step* st) {
  if (!is_open(m, st->s[0]) || !is_open(m, st->s[1])) return 0;
  int r = ofd_of(m, st->s[0]), w = ofd_of(m, st->s[1]);
  const Ofd* R = &m->o[r];
  const Ofd* W = &m->o[w];
  long n = step_len(st);
  int call = st->b % 5; /* read, readv, recv, recvmsg, recv MSG_WAITALL */
  if (call >= 2 && !is_socket(R->kind)) return 0;
  if (R->kind == K_LISTEN || R->kind == K_KMSG || n == 0) return 0;
  if (read_outcome(m, r, n) != R_BLOCKS) return 0;
  switch (st->c % 5) {
    case 0: { /* W writes m bytes */
      if (R->peer != w || R->kind == K_EVENTFD || R->kind == K_TIMERFD) return 0;
      if (call == 4 && R->kind != K_UNIX && R->kind != K_TCP) return 0;
      long mm = blocked_wake_len(st, R->kind, n);
      return write_ok(m, st->s[1], mm, WC_WRITE) && !W->wshut;
    }
    case 1: /* every number of the peer closed: end of file */
      if (R->peer != w || call == 4) return 0;
      if (!(R->kind == K_PIPE_R || R->kind == K_FIFO_R || R->kind == K_UNIX || R->kind == K_TCP)) return 0;
      return W->avail == 0 && !W->spoiled;
    case 2: /* shutdown(W, SHUT_WR) */
      return R->peer == w && (R->kind == K_UNIX || R->kind == K_TCP) && !W->spoiled && call != 4;
    case 3: /* an eventfd's own write */
      return R->kind == K_EVENTFD && r == w && call < 2;
    case 4: /* a timerfd armed */
      return R->kind == K_TIMERFD && r == w && call < 2;
  }
  return 0;
}

static int poll_kind_ok(const Model* m, int slot) {
  if (slot < 0) return 1;
  if (!is_open(m, slot)) return 0;
  const Ofd* o = &m->o[ofd_of(m, slot)];
  if (o->spoiled || o->kind == K_KMSG || (o->kind == K_TIMERFD && o->timer)) return 0;
  if (o->peer >= 0 && m->o[o->peer].spoiled) return 0;
  if ((o->kind == K_PTY_M || o->kind == K_PTY_S) && !peer_open(m, o)) return 0;
  if ((o->kind == K_TCP || o->kind == K_UDGRAM) && !peer_open(m, o)) return 0;
  return 1;
}

static int fork_valid(const Model* m, const Step* st) {
  if (!is_open(m, st->s[0])) return 0;
  int i = ofd_of(m, st->s[0]);
  const Ofd* o = &m->o[i];
  int execd = st->b % 3 != 0;
  if (execd && m->s[st->s[0]].cloexec) return 1; /* the child sees EBADF: no effect */
  long n = step_len(st);
  switch (st->a % FK_N) {
    case FK_READ:
      return o->kind != K_KMSG && read_outcome(m, i, n) == R_NOW;
    case FK_WRITE:
      if (write_ok(m, st->s[0], n, WC_WRITE) == 0) return 0;
      /* a write that raises SIGPIPE: the child's disposition decides (default in an exec'd one) */
      return 1;
    case FK_BLOCKED: {
      if (!is_open(m, st->s[1]) || o->peer != ofd_of(m, st->s[1]) || n == 0) return 0;
      if (!(o->kind == K_PIPE_R || o->kind == K_FIFO_R || o->kind == K_UNIX)) return 0;
      return read_outcome(m, i, n) == R_BLOCKS && write_ok(m, st->s[1], 1 + st->r % 512, WC_WRITE);
    }
    default:
      return 1;
  }
}

int step_valid(const Model* m, const Step* st) {
  if (step_features(m, st) & m->exclude) return 0;
  if (m->nofd + 3 > kMaxOfd) return 0; /* (any step may make up to three descriptions) */
  switch (st->op) {
    case OP_PIPE:
    case OP_SOCKPAIR:
    case OP_FIFO:
    case OP_PTY:
      return all_free(m, st, 2);
    case OP_TCP:
      if (!all_free(m, st, 2)) return 0;
      return st->s[2] < 0 || (all_free(m, st, 3));
    case OP_FILE:
    case OP_EVENTFD:
    case OP_DEV:
    case OP_TIMERFD:
      return is_free(m, st->s[0]);
    case OP_SETNB:
    case OP_CLOEXEC:
    case OP_GETFL:
    case OP_CLOSE:
      return any_open(m, st->s[0]);
    case OP_DUP: {
      int how = st->a % 12;
      if (!is_open(m, st->s[0])) return 0;
      if (how == 8 || how == 11) return is_open(m, st->s[2]) && st->s[2] != st->s[0];
      if (how == 9 || how == 10) return 1;
      return is_free(m, st->s[1]);
    }
    case OP_BADFD:
    case OP_FUTEX:
    case OP_FUTEX1:
    case OP_SIGNAL:
    case OP_PIPES:
    case OP_SYNC:
    case OP_SLEEP:
      return 1;
    case OP_READ:
      return is_open(m, st->s[0]) && read_call_outcome(m, st->s[0], step_len(st), st->b % RC_N) == R_NOW;
    case OP_WRITE:
      return is_open(m, st->s[0]) && write_ok(m, st->s[0], step_len(st), st->b % WC_N);
    case OP_BLOCKED:
      return blocked_valid(m, st);
    case OP_FOREVER: {
      if (!is_open(m, st->s[0])) return 0;
      int i = ofd_of(m, st->s[0]);
      int k = m->o[i].kind;
      if (!(k == K_KMSG || k == K_PIPE_R || k == K_UNIX || k == K_EVENTFD)) return 0;
      return read_outcome(m, i, 8192) == R_BLOCKS;
    }
    case OP_ACCEPT: {
      if (!is_open(m, st->s[0]) || !is_free(m, st->s[1]) || !is_free(m, st->s[2]) || st->s[1] == st->s[2]) return 0;
      const Ofd* l = &m->o[ofd_of(m, st->s[0])];
      if (l->kind != K_LISTEN) return 0;
      if (st->b % 3 == 1 && l->nonblock) return 0;  /* a thread's blocking accept */
      if (st->b % 3 == 2 && !l->nonblock) return 0; /* EAGAIN first */
      return 1;
    }
    case OP_SHUTDOWN: {
      if (!is_open(m, st->s[0])) return 0;
      const Ofd* o = &m->o[ofd_of(m, st->s[0])];
      return (o->kind == K_UNIX || o->kind == K_TCP) && !o->spoiled && !o->wshut && peer_open(m, o);
    }
    case OP_POLL:
      if (st->s[0] < 0) return 0;
      return poll_kind_ok(m, st->s[0]) && poll_kind_ok(m, st->s[1]) && poll_kind_ok(m, st->s[2]);
    case OP_BPOLL: {
      if (!is_open(m, st->s[0]) || !is_open(m, st->s[1])) return 0;
      int r = ofd_of(m, st->s[0]);
      const Ofd* R = &m->o[r];
      if (!(R->kind == K_PIPE_R || R->kind == K_FIFO_R || R->kind == K_UNIX || R->kind == K_TCP)) return 0;
      if (R->peer != ofd_of(m, st->s[1]) || R->spoiled || R->avail > 0 || !peer_open(m, R)) return 0;
      if (m->o[R->peer].wshut) return 0;
      return write_ok(m, st->s[1], 1 + st->r % 512, WC_WRITE);
    }
    case OP_LSEEK:
      return is_open(m, st->s[0]) && m->o[ofd_of(m, st->s[0])].kind != K_KMSG;
    case OP_EVICT:
      return is_open(m, st->s[0]) && m->o[ofd_of(m, st->s[0])].kind == K_FILE;
    case OP_SHARED: {
      if (!is_open(m, st->s[0])) return 0;
      const Ofd* o = &m->o[ofd_of(m, st->s[0])];
      return o->kind == K_FILE && o->acc != O_WRONLY && o->size >= 65536 && !o->spoiled;
    }
    case OP_FORK:
      return fork_valid(m, st);
    case OP_SENDFILE: {
      if (!is_open(m, st->s[0]) || !is_open(m, st->s[1])) return 0;
      const Ofd* in = &m->o[ofd_of(m, st->s[1])];
      const Ofd* out = &m->o[ofd_of(m, st->s[0])];
      if (in->kind != K_FILE || in->acc == O_WRONLY || in->spoiled) return 0;
      /* (not into a file: another file's bytes would break its pattern) */
      if (!(out->kind == K_PIPE_W || out->kind == K_UNIX || out->kind == K_TCP || out->kind == K_NULL)) return 0;
      if (out->kind != K_NULL && !peer_open(m, out)) return 0;
      if (ofd_of(m, st->s[0]) == ofd_of(m, st->s[1])) return 0;
      long c = st->b % 2 ? lmin(step_len(st), in->size) : read_count(m, ofd_of(m, st->s[1]), step_len(st));
      return c == 0 || write_ok(m, st->s[0], c, WC_WRITE);
    }
  }
  return 0;
}

/* A shared read goes through the slot's own descriptor unless it empties
 * the cache (patchy or cold) while short reads of a trusted descriptor are
 * left out: then through a fresh one of the same file (X_EVICT). */
int shared_through_slot(const Model* m, const Step* st) { return !(m->exclude & X_EVICT) || (st->d & 3) < 2; }

void step_apply(Model* m, const Step* st) {
  switch (st->op) {
    case OP_PIPE: {
      int nb = st->a % 5 == 2 || st->a % 5 == 4, ce = st->a % 5 >= 3;
      int r = new_ofd(m, K_PIPE_R, nb), w = new_ofd(m, K_PIPE_W, nb);
      m->o[r].acc = O_RDONLY;
      m->o[w].acc = O_WRONLY;
      pair(m, r, w);
      bind_slot(m, st->s[0], r, ce);
      bind_slot(m, st->s[1], w, ce);
      break;
    }
    case OP_SOCKPAIR: {
      int k = st->a % 2 ? K_UDGRAM : K_UNIX, nb = st->b & 1, ce = (st->b >> 1) & 1;
      int x = new_ofd(m, k, nb), y = new_ofd(m, k, nb);
      pair(m, x, y);
      bind_slot(m, st->s[0], x, ce);
      bind_slot(m, st->s[1], y, ce);
      break;
    }
    case OP_TCP: {
      int cnb = st->c & 1, cce = (st->c >> 1) & 1;
      int am = st->b % 5, anb = am == 2 || am == 4, ace = am >= 3;
      int x = new_ofd(m, K_TCP, cnb), y = new_ofd(m, K_TCP, anb);
      pair(m, x, y);
      bind_slot(m, st->s[0], x, cce);
      bind_slot(m, st->s[1], y, ace);
      if (st->s[2] >= 0) bind_slot(m, st->s[2], new_ofd(m, K_LISTEN, st->a & 1), (st->a >> 1) & 1);
      break;
    }
    case OP_FILE: {
      int acc = st->b % 3 == 0 ? O_RDONLY : st->b % 3 == 1 ? O_WRONLY : O_RDWR;
      int i = new_ofd(m, K_FILE, (st->b >> 3) & 1);
      m->o[i].acc = acc;
      m->o[i].append = acc != O_RDONLY && ((st->b >> 2) & 1);
      m->o[i].size = file_size(st);
      m->o[i].file = m->nfiles++;
      bind_slot(m, st->s[0], i, (st->b >> 4) & 1);
      break;
    }
    case OP_EVENTFD: {
      int i = new_ofd(m, K_EVENTFD, st->b & 1);
      m->o[i].count = (uint64_t)(st->a % 3);
      m->o[i].sem = (st->b >> 2) & 1;
      bind_slot(m, st->s[0], i, (st->b >> 1) & 1);
      break;
    }
    case OP_DEV: {
      static const int kinds[] = {K_NULL, K_ZERO, K_FULL, K_URANDOM, K_URANDOM, K_KMSG};
      int k = kinds[st->a % 6];
      int i = new_ofd(m, k, (st->b >> 2) & 1);
      m->o[i].acc = k == K_KMSG ? O_RDONLY : st->b % 3 == 0 ? O_RDONLY : st->b % 3 == 1 ? O_WRONLY : O_RDWR;
      bind_slot(m, st->s[0], i, (st->b >> 3) & 1);
      break;
    }
    case OP_FIFO: {
      int r = new_ofd(m, K_FIFO_R, 1), w = new_ofd(m, K_FIFO_W, st->b & 1);
      m->o[r].acc = O_RDONLY;
      m->o[w].acc = O_WRONLY;
      pair(m, r, w);
      bind_slot(m, st->s[0], r, (st->b >> 1) & 1);
      bind_slot(m, st->s[1], w, (st->b >> 1) & 1);
      break;
    }
    case OP_PTY: {
      int x = new_ofd(m, K_PTY_M, st->b & 1), y = new_ofd(m, K_PTY_S, (st->b >> 2) & 1);
      pair(m, x, y);
      bind_slot(m, st->s[0], x, (st->b >> 1) & 1);
      bind_slot(m, st->s[1], y, (st->b >> 1) & 1);
      break;
    }
    case OP_TIMERFD:
      bind_slot(m, st->s[0], new_ofd(m, K_TIMERFD, st->b & 1), (st->b >> 1) & 1);
      break;
    case OP_SETNB:
      m->o[ofd_of(m, st->s[0])].nonblock = st->a & 1;
      break;
    case OP_CLOEXEC:
      m->s[st->s[0]].cloexec = st->a & 1;
      break;
    case OP_GETFL:
    case OP_BADFD:
    case OP_POLL:
    case OP_FUTEX:
    case OP_FUTEX1:
    case OP_SIGNAL:
    case OP_PIPES:
    case OP_SYNC:
    case OP_SLEEP:
    case OP_EVICT:
      break;
    case OP_DUP: {
      int how = st->a % 12, i = ofd_of(m, st->s[0]);
      if (how == 9 || how == 10) break;
      if (how == 8 || how == 11) {
        drop_slot(m, st->s[2]);
        bind_slot(m, st->s[2], i, 0);
        break;
      }
      int ce = how == 3 || how == 5 || (how == 6 && (st->r & 1));
      bind_slot(m, st->s[1], i, ce);
      break;
    }
    case OP_CLOSE:
      drop_slot(m, st->s[0]);
      break;
    case OP_READ:
      consume(m, ofd_of(m, st->s[0]), step_len(st),
              st->b % RC_N == RC_PEEK || st->b % RC_N == RC_PREAD || st->b % RC_N == RC_FAULT ||
                  (rc_socket(st->b % RC_N) && !is_socket(m->o[ofd_of(m, st->s[0])].kind)));
      break;
    case OP_WRITE: {
      int c = st->b % WC_N, i = ofd_of(m, st->s[0]);
      if (c == WC_FAULT || (wc_socket(c) && !is_socket(m->o[i].kind))) break;
      if (c == WC_PWRITE) {
        Ofd* o = &m->o[i];
        if (o->kind == K_FILE && o->acc != O_RDONLY && o->off + step_len(st) > o->size) o->size = o->off + step_len(st);
        break;
      }
      produce(m, i, step_len(st), st);
      break;
    }
    case OP_BLOCKED: {
      int r = ofd_of(m, st->s[0]), w = ofd_of(m, st->s[1]);
      long n = step_len(st);
      switch (st->c % 5) {
        case 0:
          produce(m, w, blocked_wake_len(st, m->o[r].kind, n), st);
          break;
        case 1:
          for (int s = 0; s < kSlots; ++s)
            if (m->s[s].ofd == w) drop_slot(m, s);
          break;
        case 2:
          m->o[w].wshut = 1;
          break;
        case 3:
          m->o[r].count += efd_value(st);
          break;
        case 4:
          m->o[r].timer = 1;
          break;
      }
      consume(m, r, n, 0);
      break;
    }
    case OP_FOREVER: {
      Ofd* o = &m->o[ofd_of(m, st->s[0])];
      if (o->kind == K_KMSG || o->kind == K_EVENTFD) m->hogs++;
      o->spoiled = 1;
      if (o->peer >= 0) m->o[o->peer].spoiled = 1;
      break;
    }
    case OP_ACCEPT: {
      int am = st->a % 5, anb = am == 2 || am == 4, ace = am >= 3;
      int x = new_ofd(m, K_TCP, 0), y = new_ofd(m, K_TCP, anb);
      pair(m, x, y);
      bind_slot(m, st->s[1], x, 0);
      bind_slot(m, st->s[2], y, ace);
      break;
    }
    case OP_SHUTDOWN:
      m->o[ofd_of(m, st->s[0])].wshut = 1;
      break;
    case OP_BPOLL:
      produce(m, ofd_of(m, st->s[1]), 1 + st->r % 512, st);
      break;
    case OP_LSEEK: {
      Ofd* o = &m->o[ofd_of(m, st->s[0])];
      if (o->kind != K_FILE) break;
      long base = st->b % 3 == 0 ? 0 : st->b % 3 == 1 ? o->off : o->size;
      long to = base + kSeeks[st->a % 8];
      if (to >= 0) o->off = to;
      break;
    }
    case OP_SHARED: {
      Ofd* o = &m->o[ofd_of(m, st->s[0])];
      if (shared_through_slot(m, st)) o->off = o->size;
      break;
    }
    case OP_FORK: {
      int i = ofd_of(m, st->s[0]);
      if (st->b % 3 != 0 && m->s[st->s[0]].cloexec) break;
      switch (st->a % FK_N) {
        case FK_READ:
          consume(m, i, step_len(st), 0);
          break;
        case FK_WRITE:
          produce(m, i, step_len(st), st);
          break;
        case FK_SETNB:
          m->o[i].nonblock = 1;
          break;
        case FK_CLEARNB:
          m->o[i].nonblock = 0;
          break;
        case FK_BLOCKED:
          produce(m, ofd_of(m, st->s[1]), 1 + st->r % 512, st);
          consume(m, i, step_len(st), 0);
          break;
      }
      break;
    }
    case OP_SENDFILE: {
      int in = ofd_of(m, st->s[1]);
      Ofd* o = &m->o[in];
      long c = st->b % 2 ? lmin(step_len(st), o->size) : read_count(m, in, step_len(st));
      if (!(st->b % 2)) o->off += c;
      if (c) produce(m, ofd_of(m, st->s[0]), c, st);
      break;
    }
  }
}

unsigned step_features(const Model* m, const Step* st) {
  switch (st->op) {
    case OP_FILE:
      return st->c % 3 ? X_EVICT : 0; /* made cold or patchy: a descriptor may be trusted, then meet a missing page */
    case OP_CLOSE:
      return st->a % 3 == 1 ? X_CLOSERANGE : st->a % 3 == 2 ? X_RAWCLOSE : 0;
    case OP_DUP:
      return st->a % 12 == 11 ? X_RAWDUP : 0;
    case OP_FUTEX1:
      return st->a % 12 == 7 ? X_FUTEXARGS : 0;
    case OP_READ: {
      int i = ofd_of(m, st->s[0]), c = st->b % RC_N;
      if (i < 0) return 0;
      const Ofd* o = &m->o[i];
      if (is_socket(o->kind) && step_len(st) == 0 && (c == RC_READ || c == RC_READV || c == RC_FAULT)) return X_ZEROIO;
      if (o->kind == K_FILE && o->acc == O_WRONLY && rc_socket(c)) return X_NOTSOCK;
      return 0;
    }
    case OP_WRITE: {
      int i = ofd_of(m, st->s[0]), c = st->b % WC_N;
      if (i < 0) return 0;
      const Ofd* o = &m->o[i];
      if (is_socket(o->kind) && step_len(st) == 0 && (c == WC_WRITE || c == WC_WRITEV || c == WC_FAULT))
        return X_ZEROIO;
      if (o->kind == K_FILE && o->acc == O_RDONLY && wc_socket(c)) return X_NOTSOCK;
      return 0;
    }
    case OP_FOREVER: {
      int i = ofd_of(m, st->s[0]);
      return i >= 0 && m->hogs > 0 && (m->o[i].kind == K_KMSG || m->o[i].kind == K_EVENTFD) ? X_OFFLOADHOG : 0;
    }
    case OP_BLOCKED: {
      unsigned f = st->b % 5 == 4 ? X_WAITALL : 0;
      int i = ofd_of(m, st->s[0]);
      if (i >= 0 && m->hogs > 0) {
        int k = m->o[i].kind;
        if (k == K_EVENTFD || k == K_TIMERFD || k == K_FIFO_R || k == K_PTY_M || k == K_PTY_S) f |= X_OFFLOADHOG;
      }
      return f;
    }
    case OP_EVICT:
      return X_EVICT;
    case OP_FUTEX: {
      unsigned f = st->c % 3 == 2 ? X_SHMFUTEX : 0;
      if (st->a % 6 == 1 && !((st->d & 1) && (st->d & 8))) f |= X_BITSET; /* bits other than "any" */
      return f;
    }
    case OP_SIGNAL:
      switch (st->a % 11) {
        case 5:
          return X_SIGNALFD;
        case 7:
          return X_SELFSIG;
        case 8:
          return X_RTQUEUE;
        case 10:
          return X_EINTR;
      }
      return 0;
    case OP_FORK: {
      int i = ofd_of(m, st->s[0]);
      return i >= 0 && is_socket(m->o[i].kind) && step_len(st) == 0 && st->a % FK_N == FK_READ ? X_ZEROIO : 0;
    }
    case OP_SENDFILE: {
      int in = ofd_of(m, st->s[1]), out = ofd_of(m, st->s[0]);
      if (in < 0 || out < 0 || m->o[in].kind != K_FILE || !is_socket(m->o[out].kind)) return 0;
      long c = st->b % 2 ? lmin(step_len(st), m->o[in].size) : read_count(m, in, step_len(st));
      return c == 0 ? X_SENDFILE0 : 0;
    }
  }
  return 0;
}
