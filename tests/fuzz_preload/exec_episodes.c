/* exec_episodes.c — the steps that are small programs of their own:
 * several threads (and a child process) reading one file through a shared
 * offset, fork, exec and posix_spawn children, threads each blocked on a
 * pipe, pthread synchronisation, sleeps (scenario.h; futexes in
 * exec_futex.c, signals in exec_signal.c). Each one's output is fixed by
 * Linux however its threads are scheduled. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <semaphore.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec.h"

extern char** environ;

/* ---- threads, each blocked on a pipe of its own --------------------------------------------- */

struct piper {
  int fd;
  long r;
  uint8_t b[16];
};
static void* pipe_thread(void* p) {
  struct piper* q = p;
  q->r = read(q->fd, q->b, sizeof q->b);
  return NULL;
}

static void do_pipes(const Step* st) {
  int n = 2 + st->a % 5, p[6][2];
  struct piper q[6];
  pthread_t t[6];
  for (int i = 0; i < n; ++i) {
    if (pipe(p[i]) != 0) return;
    q[i] = (struct piper){.fd = p[i][0]};
    spawn(&t[i], pipe_thread, &q[i]);
  }
  int order[6];
  for (int i = 0; i < n; ++i) order[i] = i;
  uint32_t r = st->r;
  for (int i = n - 1; i > 0; --i) {
    r = (uint32_t)mix64(r);
    int j = (int)(r % (uint32_t)(i + 1)), x = order[i];
    order[i] = order[j];
    order[j] = x;
  }
  for (int i = 0; i < n; ++i) {
    char c[3] = {'a', (char)('0' + order[i]), '\n'};
    write(p[order[i]][1], c, (size_t)(1 + (order[i] % 3)));
    if (st->b & 1) usleep(300);
  }
  char line[128];
  int len = snprintf(line, sizeof line, "pipes %d threads woken in a seeded order:", n);
  for (int i = 0; i < n; ++i) {
    pthread_join(t[i], NULL);
    len += snprintf(line + len, sizeof line - (size_t)len, " %ld", q[i].r);
    close(p[i][0]);
    close(p[i][1]);
  }
  out("%s", line);
}

/* ---- pthread synchronisation ------------------------------------------------------------------ */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_barrier_t bar;
static sem_t sem_a, sem_b;
static long counter, queued, serials;
static int sync_kind, sync_n;

static void* sync_thread(void* p) {
  long id = (long)(intptr_t)p;
  switch (sync_kind) {
    case 0:
      for (int i = 0; i < 1000; ++i) {
        pthread_mutex_lock(&mu);
        counter++;
        pthread_mutex_unlock(&mu);
      }
      break;
    case 1: /* thread 0 consumes what the others produce */
      if (id == 0) {
        for (int got = 0; got < 100 * (sync_n - 1); ++got) {
          pthread_mutex_lock(&mu);
          while (queued == 0) pthread_cond_wait(&cv, &mu);
          queued--;
          counter++;
          pthread_mutex_unlock(&mu);
        }
      } else {
        for (int i = 0; i < 100; ++i) {
          pthread_mutex_lock(&mu);
          queued++;
          pthread_cond_signal(&cv);
          pthread_mutex_unlock(&mu);
        }
      }
      break;
    case 2: /* ping-pong between threads 0 and 1 */
      for (int i = 0; i < 100 && id < 2; ++i) {
        sem_wait(id == 0 ? &sem_a : &sem_b);
        __atomic_fetch_add(&counter, 1, __ATOMIC_SEQ_CST);
        sem_post(id == 0 ? &sem_b : &sem_a);
      }
      break;
    case 3:
      for (int i = 0; i < 10; ++i)
        if (pthread_barrier_wait(&bar) == PTHREAD_BARRIER_SERIAL_THREAD)
          __atomic_fetch_add(&serials, 1, __ATOMIC_SEQ_CST);
      break;
    case 4:
      for (int i = 0; i < 200; ++i) {
        if (i % 4 == (int)id % 4) {
          pthread_rwlock_wrlock(&rw);
          counter++;
          pthread_rwlock_unlock(&rw);
        } else {
          pthread_rwlock_rdlock(&rw);
          pthread_rwlock_unlock(&rw);
        }
      }
      break;
  }
  return NULL;
}

static void do_sync(const Step* st) {
  sync_kind = st->a % 5;
  sync_n = 2 + st->b % 3;
  counter = queued = serials = 0;
  sem_init(&sem_a, 0, 1);
  sem_init(&sem_b, 0, 0);
  pthread_barrier_init(&bar, NULL, (unsigned)sync_n);
  pthread_t t[4];
  for (int i = 0; i < sync_n; ++i) spawn(&t[i], sync_thread, (void*)(intptr_t)i);
  for (int i = 0; i < sync_n; ++i) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  sem_destroy(&sem_a);
  sem_destroy(&sem_b);
  static const char* names[] = {"mutex", "condvar", "semaphores", "barrier", "rwlock"};
  out("sync %s, %d threads -> counter %ld, serial threads %ld", names[sync_kind], sync_n, counter, serials);
}

/* ---- sleeps ----------------------------------------------------------------------------------- */

static void do_sleep(const Step* st) {
  int how = st->a % 7;
  struct timespec t = {0, 1000000}, bad = {0, 1000000000}, neg = {-1, 0}, past = {0, 0};
  long r = 0;
  errno = 0;
  static const char* names[] = {"nanosleep 1 ms",
                                "nanosleep bad nsec",
                                "clock_nanosleep absolute past",
                                "usleep(0)",
                                "clock_nanosleep unknown clock",
                                "sleep(0)",
                                "nanosleep negative"};
  switch (how) {
    case 0:
      r = nanosleep(&t, NULL);
      break;
    case 1:
      r = nanosleep(&bad, NULL);
      break;
    case 2:
      r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &past, NULL); /* returns the error */
      break;
    case 3:
      r = usleep(0);
      break;
    case 4:
      r = clock_nanosleep(12345, 0, &t, NULL);
      break;
    case 5:
      r = sleep(0);
      break;
    case 6:
      r = nanosleep(&neg, NULL);
      break;
  }
  out("sleep %s -> %s", names[how], res(r, errno));
}

/* ---- one file read through one offset by several threads (and a child) ----------------------- */

/* What Linux guarantees of read(2) on a regular file shared by threads (and
 * a parent and its child): each read is atomic with respect to the offset —
 * its bytes are one contiguous piece of the file, and between them the
 * reads cover the file from where they started exactly once — and whole:
 * all it asked for, unless it reaches the end. The first two are always
 * checked; wholeness (short reads, reads off the chunk grid) only where
 * loom's documented short read of a trusted descriptor is not left out
 * (X_EVICT, docs/DESIGN.md "A regular file's read is one system call"). */
struct shared {
  int fd, file;
  long size, start, chunk;
  atomic_uchar* bytes; /* per byte of the file: times read (MAP_SHARED: a child counts too) */
  atomic_long* stats;  /* reads, torn, short, off the grid, errors */
};

/* The offset a buffer of file bytes came from (its words name it), or -1. */
static long offset_of(const uint8_t* b, long n, int file) {
  for (long s = 0; s < 4 && s + 4 <= n; ++s) {
    uint32_t w;
    memcpy(&w, b + s, 4);
    long off = (long)(w ^ file_word(file, 0)) * 4 - s; /* (w ^ salt is the word's index) */
    if (off >= 0 && file_bytes_ok(b, n, file, off)) return off;
  }
  return -1;
}

static void* shared_reader(void* p) {
  struct shared* sh = p;
  uint8_t* b = malloc((size_t)sh->chunk);
  for (;;) {
    long n = read(sh->fd, b, (size_t)sh->chunk);
    if (n <= 0) {
      if (n < 0) atomic_fetch_add(&sh->stats[4], 1);
      break;
    }
    atomic_fetch_add(&sh->stats[0], 1);
    long off = offset_of(b, n, sh->file);
    if (off < 0 || off + n > sh->size) {
      atomic_fetch_add(&sh->stats[1], 1); /* not one contiguous piece of the file: torn */
      continue;
    }
    for (long i = 0; i < n; ++i) atomic_fetch_add(&sh->bytes[off + i], 1);
    long want = sh->size - off < sh->chunk ? sh->size - off : sh->chunk;
    if (n != want) atomic_fetch_add(&sh->stats[2], 1);
    if ((off - sh->start) % sh->chunk) atomic_fetch_add(&sh->stats[3], 1);
  }
  free(b);
  return NULL;
}

static void do_shared(const Model* m, const Step* st) {
  const Ofd* o = &m->o[m->s[st->s[0]].ofd];
  static const long chunks[] = {4096, 8192, 12288, 16384, 65536, 4000};
  int threads = 2 + st->a % 3, cache = st->d & 3, forked = (st->d >> 2) & 1;
  long chunk = chunks[st->b % 6], size = o->size;
  long start = (long)(st->c % (uint32_t)(size / 4096)) * 4096;
  if (cache == 1) {
    int k = keeper[o->file];
    static uint8_t b[1 << 16];
    for (long off = 0; off < size; off += (long)sizeof b) pread(k, b, sizeof b, off);
  } else if (cache >= 2) {
    evict(o->file, cache == 2, size);
  }
  int fd = fdof[st->s[0]];
  int fresh = !shared_through_slot(m, st);
  if (fresh) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", keeper[o->file]);
    fd = open(path, O_RDONLY | O_CLOEXEC);
  }
  if (cache >= 2) posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM); /* the pattern stays as it is */
  lseek(fd, start, SEEK_SET);
  size_t bytes = sizeof(atomic_long) * 8 + (size_t)size;
  atomic_long* mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  struct shared sh = {fd, o->file, size, start, chunk, (atomic_uchar*)(mem + 8), mem};
  pid_t child = -1;
  if (forked) {
    child = fork();
    if (child == 0) {
      pthread_t t;
      pthread_create(&t, NULL, shared_reader, &sh);
      shared_reader(&sh);
      pthread_join(t, NULL);
      _exit(0);
    }
  }
  pthread_t t[4];
  for (int i = 0; i < threads; ++i) spawn(&t[i], shared_reader, &sh);
  for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
  int status = 0;
  if (child > 0) waitpid(child, &status, 0);
  long missing = 0, twice = 0;
  for (long i = 0; i < size; ++i) {
    int v = atomic_load(&sh.bytes[i]);
    if (i >= start && v == 0) missing++;
    if (v > 1 || (i < start && v)) twice++;
  }
  long end = lseek(fd, 0, SEEK_CUR);
  char whole[96] = "";
  if (!(m->exclude & X_EVICT))
    snprintf(whole, sizeof whole, "; short %ld, off the chunk grid %ld", atomic_load(&mem[2]), atomic_load(&mem[3]));
  out("shared-read s%d%s %d threads%s, chunk %ld from %ld of %ld (%s): torn %ld, bytes missed %ld, read twice %ld, "
      "errors %ld, offset at the end %s%s",
      st->s[0], fresh ? " (a fresh descriptor)" : "", threads, forked ? " and a child's two" : "", chunk, start, size,
      cache == 0   ? "cache as is"
      : cache == 1 ? "cached"
      : cache == 2 ? "patchy"
                   : "cold",
      atomic_load(&mem[1]), missing, twice, atomic_load(&mem[4]), end == size ? "yes" : "NO", whole);
  munmap(mem, bytes);
  if (fresh) {
    close(fd);
    /* The file whole in the cache again, for the slot's own descriptor (which may be trusted). */
    int k = keeper[o->file];
    static uint8_t b[1 << 16];
    for (long off = 0; off < size; off += (long)sizeof b) pread(k, b, sizeof b, off);
  }
}

/* ---- fork, exec, posix_spawn ------------------------------------------------------------------- */

void child_op(int op, int fd, long n, uint32_t r, int kind, int file, long off, char* buf, int len) {
  static uint8_t b[8192 + 64];
  long x;
  errno = 0;
  switch (op) {
    case FK_READ:
    case FK_BLOCKED:
      x = read(fd, b, (size_t)n);
      if (x > 0 && kind == K_FILE)
        snprintf(buf, (size_t)len, "read %ld %s", x, file_bytes_ok(b, x, file, off) ? "pattern ok" : "pattern BAD");
      else if (x > 0 && kind != K_URANDOM)
        snprintf(buf, (size_t)len, "read %ld digest %08x", x, digest(b, (size_t)x));
      else
        snprintf(buf, (size_t)len, "read %s", res(x, errno));
      break;
    case FK_WRITE:
      if (kind == K_FILE)
        file_bytes(b, n, file, off);
      else
        fill_bytes(b, n, r);
      if (kind == K_EVENTFD && n >= 8) {
        uint64_t v = 1 + r % 3;
        memcpy(b, &v, 8);
      }
      x = write(fd, b, (size_t)n);
      snprintf(buf, (size_t)len, "write %s", res(x, errno));
      break;
    case FK_SETNB: {
      int one = 1;
      snprintf(buf, (size_t)len, "ioctl(FIONBIO, 1) %s", res(ioctl(fd, FIONBIO, &one), errno));
      break;
    }
    case FK_CLEARNB: {
      int fl = fcntl(fd, F_GETFL);
      snprintf(buf, (size_t)len, "clear O_NONBLOCK %s", res(fl < 0 ? fl : fcntl(fd, F_SETFL, fl & ~O_NONBLOCK), errno));
      break;
    }
    case FK_GETFL: {
      int fl = fcntl(fd, F_GETFL);
      snprintf(buf, (size_t)len, "getfl %s", fl < 0 ? res(fl, errno) : fl & O_NONBLOCK ? "nonblock" : "blocking");
      break;
    }
    default:
      snprintf(buf, (size_t)len, "descriptor %s", fcntl(fd, F_GETFD) >= 0 ? "open" : "closed");
      break;
  }
}

static void do_fork(const Model* m, const Step* st) {
  int s = st->s[0], fd = fdof[s], op = st->a % FK_N, mode = st->b % 3, i = m->s[s].ofd;
  const Ofd* o = &m->o[i];
  long n = step_len(st);
  long off = o->kind == K_FILE ? (op == FK_WRITE && o->append ? o->size : o->off) : 0;
  int rp[2];
  if ((mode == 0 ? pipe2(rp, O_CLOEXEC) : pipe(rp)) != 0) return;
  pid_t pid = -1;
  char a[8][32];
  char* argv[10];
  snprintf(a[0], 32, "--child");
  snprintf(a[1], 32, "%d", op);
  snprintf(a[2], 32, "%d", fd);
  snprintf(a[3], 32, "%ld", n);
  snprintf(a[4], 32, "%u", st->r);
  snprintf(a[5], 32, "%d %d %ld", o->kind, o->file, off);
  snprintf(a[6], 32, "%d", rp[1]);
  argv[0] = (char*)"fuzz_preload_scenario";
  for (int k = 0; k < 7; ++k) argv[k + 1] = a[k];
  argv[8] = NULL;
  if (mode == 2) {
    if (posix_spawn(&pid, self_exe, NULL, NULL, argv, environ) != 0) pid = -1;
  } else {
    pid = fork();
    if (pid == 0) {
      if (mode == 1) {
        execv(self_exe, argv);
        _exit(127);
      }
      char line[128];
      child_op(op, fd, n, st->r, o->kind, o->file, off, line, sizeof line);
      write(rp[1], line, strlen(line));
      _exit(0);
    }
  }
  close(rp[1]);
  if (op == FK_BLOCKED && pid > 0 && !(mode && m->s[s].cloexec)) {
    usleep(2000);
    static uint8_t b[512];
    long mm = 1 + st->r % 512;
    fill_bytes(b, mm, st->r);
    write(fdof[st->s[1]], b, (size_t)mm);
  }
  char line[160] = "";
  long got = 0, x;
  while (got < (long)sizeof line - 1 && (x = read(rp[0], line + got, sizeof line - 1 - (size_t)got)) > 0) got += x;
  line[got] = 0;
  close(rp[0]);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  static const char* modes[] = {"fork", "fork+exec", "posix_spawn"};
  static const char* ops[] = {"read",  "write",      "set O_NONBLOCK", "clear O_NONBLOCK",
                              "getfl", "is it open", "blocked read"};
  char how[32];
  if (WIFEXITED(status))
    snprintf(how, sizeof how, "exit %d", WEXITSTATUS(status));
  else
    snprintf(how, sizeof how, "signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : -1);
  out("%s child: %s s%d(%s)%s n=%ld -> %s; %s", modes[mode], ops[op], s, kind_name(o->kind),
      m->s[s].cloexec ? " cloexec" : "", n, got ? line : "(nothing)", how);
}

void exec_episode(const Model* m, const Step* st) {
  switch (st->op) {
    case OP_PIPES:
      do_pipes(st);
      break;
    case OP_SYNC:
      do_sync(st);
      break;
    case OP_SLEEP:
      do_sleep(st);
      break;
    case OP_SHARED:
      do_shared(m, st);
      break;
    case OP_FORK:
      do_fork(m, st);
      break;
  }
}
