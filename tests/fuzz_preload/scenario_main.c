/* scenario_main.c — fuzz_preload_scenario: runs one seeded scenario
 * (scenario.h) and prints what it observed, one line per step. A plain
 * glibc program: no loom header, no loom library; the driver
 * (fuzz_preload.cpp) runs it as is and under LD_PRELOAD=libloom-pthread.so
 * and compares.
 *
 *   fuzz_preload_scenario [--exclude F,...] SEED [KEEP]
 *       KEEP: "all" (the default) or step indices and ranges, "0,4,7-9"
 *   fuzz_preload_scenario [--exclude F,...] --list SEED [KEEP]
 *       the steps the run would make (the model replayed over KEEP), unexecuted
 *   fuzz_preload_scenario --child OP FD N R "KIND FILE OFF" RESULTFD
 *       what an exec'd child does with a descriptor it inherited (OP_FORK)
 *
 * FUZZ_DIR names the directory for its files and FIFOs (default: the
 * working directory; a disk file system, where the page cache can miss). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "exec.h"

int fdof[kSlots];
int keeper[kMaxOfd];
const char* workdir = ".";
const char* self_exe;
int step_index;
volatile int sigpipes;

void out(const char* fmt, ...) {
  char line[1024];
  int len = snprintf(line, sizeof line, "#%d ", step_index);
  va_list ap;
  va_start(ap, fmt);
  len += vsnprintf(line + len, sizeof line - (size_t)len - 1, fmt, ap);
  va_end(ap);
  if (len > (int)sizeof line - 2) len = (int)sizeof line - 2;
  line[len++] = '\n';
  for (int done = 0; done < len;) {
    ssize_t w = write(1, line + done, (size_t)(len - done));
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return;
    }
    done += (int)w;
  }
}

const char* res(long r, int err) {
  static __thread char ring[8][64]; /* (several in one out() call) */
  static __thread int next;
  char* b = ring[next++ % 8];
  if (r >= 0) {
    snprintf(b, 64, "%ld", r);
    return b;
  }
  static const struct {
    int e;
    const char* n;
  } names[] = {{EAGAIN, "EAGAIN"},
               {EBADF, "EBADF"},
               {EINVAL, "EINVAL"},
               {EPIPE, "EPIPE"},
               {EFAULT, "EFAULT"},
               {ESPIPE, "ESPIPE"},
               {ENOTSOCK, "ENOTSOCK"},
               {ENOTCONN, "ENOTCONN"},
               {EINTR, "EINTR"},
               {ETIMEDOUT, "ETIMEDOUT"},
               {ENOSYS, "ENOSYS"},
               {ENOSPC, "ENOSPC"},
               {EEXIST, "EEXIST"},
               {EPERM, "EPERM"},
               {ECONNRESET, "ECONNRESET"},
               {EIO, "EIO"},
               {EINPROGRESS, "EINPROGRESS"},
               {ENOENT, "ENOENT"},
               {EOPNOTSUPP, "EOPNOTSUPP"},
               {EISDIR, "EISDIR"}};
  for (unsigned i = 0; i < sizeof names / sizeof names[0]; ++i)
    if (names[i].e == err) {
      snprintf(b, 64, "%ld %s", r, names[i].n);
      return b;
    }
  snprintf(b, 64, "%ld errno %d", r, err);
  return b;
}

uint32_t digest(const void* p, size_t n) {
  const uint8_t* b = p;
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 16777619u;
  return h;
}

void fill_bytes(uint8_t* b, long n, uint32_t r) {
  uint64_t x = r;
  for (long i = 0; i < n; ++i) {
    if (i % 8 == 0) x = mix64(x + (uint64_t)i);
    b[i] = (uint8_t)(x >> (8 * (i % 8)));
  }
}

/* A file's content: word w (bytes 4w..4w+3) is w ^ salt, so a buffer names
 * the offset it came from, and a torn one shows. */
uint32_t file_word(int file, long w) { return (uint32_t)w ^ (0x5bd1e995u * (uint32_t)(file + 1)); }

void file_bytes(uint8_t* b, long n, int file, long off) {
  for (long i = 0; i < n; ++i) {
    long o = off + i;
    b[i] = (uint8_t)(file_word(file, o / 4) >> (8 * (o % 4)));
  }
}

int file_bytes_ok(const uint8_t* b, long n, int file, long off) {
  for (long i = 0; i < n; ++i) {
    long o = off + i;
    if (b[i] != (uint8_t)(file_word(file, o / 4) >> (8 * (o % 4)))) return 0;
  }
  return 1;
}

void test_signals(void* p) {
  sigset_t* s = p;
  sigemptyset(s);
  sigaddset(s, SIGUSR1);
  sigaddset(s, SIGUSR2);
  sigaddset(s, SIGRTMIN + 1);
  sigaddset(s, SIGCHLD);
}

int spawn(pthread_t* t, void* (*fn)(void*), void* arg) {
  sigset_t s, old;
  test_signals(&s);
  pthread_sigmask(SIG_BLOCK, &s, &old);
  int r = pthread_create(t, NULL, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return r;
}

long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void settle_bytes(int fd, long want) {
  for (long t0 = now_ms(); now_ms() - t0 < 3000;) {
    int n = 0;
    if (ioctl(fd, FIONREAD, &n) != 0 || n >= want) return;
    usleep(200);
  }
}

void settle_hup(int fd) {
  struct pollfd p = {fd, POLLRDHUP, 0};
  for (long t0 = now_ms(); now_ms() - t0 < 3000; usleep(200)) {
    p.revents = 0;
    if (syscall(SYS_poll, &p, 1, 0) != 0) return;
  }
}

int slot_of(const Model* m, int ofd) {
  for (int s = 0; s < kSlots; ++s)
    if (m->s[s].ofd == ofd) return s;
  return -1;
}

/* After a step: what TCP and ptys deliver a little after the write (or the
 * close) that sent it has arrived, so that the next step finds what the
 * model says, as a pipe's reader would at once. */
static void settle(const Model* m) {
  for (int i = 0; i < m->nofd; ++i) {
    const Ofd* o = &m->o[i];
    if (o->refs == 0 || o->spoiled || !(o->kind == K_TCP || o->kind == K_PTY_M || o->kind == K_PTY_S)) continue;
    int s = slot_of(m, i);
    if (s < 0 || fdof[s] < 0) continue;
    if (o->avail > 0) settle_bytes(fdof[s], o->avail);
    if (o->kind == K_TCP && o->peer >= 0 && (m->o[o->peer].refs == 0 || m->o[o->peer].wshut)) settle_hup(fdof[s]);
  }
}

static void on_sigpipe(int sig) {
  (void)sig;
  sigpipes++;
}

/* "all", or "0,3,5-9" */
static int parse_keep(const char* spec, int n, unsigned char* keep) {
  if (!spec || strcmp(spec, "all") == 0) {
    memset(keep, 1, (size_t)n);
    return 0;
  }
  memset(keep, 0, (size_t)n);
  for (const char* p = spec; *p;) {
    char* end;
    long a = strtol(p, &end, 10), b = a;
    if (end == p) return -1;
    if (*end == '-') {
      p = end + 1;
      b = strtol(p, &end, 10);
      if (end == p) return -1;
    }
    for (long i = a; i <= b && i < n; ++i)
      if (i >= 0) keep[i] = 1;
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return 0;
}

static int child_main(int argc, char** argv) {
  if (argc < 8) return 2;
  int kind = 0, file = 0;
  long off = 0;
  sscanf(argv[6], "%d %d %ld", &kind, &file, &off);
  char line[128];
  child_op(atoi(argv[2]), atoi(argv[3]), atol(argv[4]), (uint32_t)strtoul(argv[5], NULL, 10), kind, file, off, line,
           sizeof line);
  int rfd = atoi(argv[7]);
  write(rfd, line, strlen(line));
  return 0;
}

static int usage(void) {
  fprintf(stderr, "usage: fuzz_preload_scenario [--exclude F,...] [--list] SEED [KEEP]\n");
  return 2;
}

// The kernel ignores a closed number in select's sets past the end of its
// descriptor table, and says EBADF below it. loom's monitor keeps files
// open at half the descriptor limit (docs/DESIGN.md, "Lost processors"),
// which grows the table under the preload when a processor is examined:
// grown here to the same size in both runs, `select ... bad` compares the
// call, not how large the table happened to be.
static void grow_descriptor_table(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur < 2) return;
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  int high = fcntl(fd, F_DUPFD_CLOEXEC, (int)(rl.rlim_cur / 2));
  if (high >= 0) close(high);
  close(fd);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_main(argc, argv);
  unsigned exclude = 0;
  int list = 0, i = 1;
  for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; ++i) {
    if (strcmp(argv[i], "--list") == 0) {
      list = 1;
    } else if (strcmp(argv[i], "--exclude") == 0 && i + 1 < argc) {
      exclude = feature_parse(argv[++i]);
      if (exclude == ~0u) {
        fprintf(stderr, "fuzz_preload_scenario: unknown feature in %s\n", argv[i]);
        return 2;
      }
    } else {
      return usage();
    }
  }
  if (i >= argc) return usage();
  uint64_t seed = strtoull(argv[i], NULL, 10);
  static Scenario sc;
  generate(&sc, seed, exclude);
  unsigned char keep[kMaxSteps];
  if (parse_keep(i + 1 < argc ? argv[i + 1] : NULL, sc.n, keep) != 0) return usage();

  static Model m;
  model_init(&m, exclude);
  if (list) {
    for (int k = 0; k < sc.n; ++k) {
      char d[160];
      describe(&sc.step[k], d, sizeof d);
      int valid = keep[k] && step_valid(&m, &sc.step[k]);
      if (valid) step_apply(&m, &sc.step[k]);
      printf("#%d %s%s\n", k, d, !keep[k] ? " (left out)" : valid ? "" : " (skipped: not valid here)");
    }
    return 0;
  }

  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = 0;
  self_exe = exe;
  if (getenv("FUZZ_DIR")) workdir = getenv("FUZZ_DIR");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigpipe;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGPIPE, &sa, NULL);
  install_handlers();
  map_shared_words();
  grow_descriptor_table();
  for (int s = 0; s < kSlots; ++s) fdof[s] = -1;

  for (int k = 0; k < sc.n; ++k) {
    const Step* st = &sc.step[k];
    if (!keep[k] || !step_valid(&m, st)) continue;
    step_index = k;
    switch (st->op) {
      case OP_FUTEX:
      case OP_FUTEX1:
        exec_futex(st);
        break;
      case OP_SIGNAL:
        exec_signal(st);
        break;
      case OP_SHARED:
      case OP_FORK:
      case OP_PIPES:
      case OP_SYNC:
      case OP_SLEEP:
        exec_episode(&m, st);
        break;
      default:
        if (!exec_make(&m, st)) exec_io(&m, st);
    }
    step_apply(&m, st);
    settle(&m);
  }
  step_index = sc.n;
  out("end");
  return 0;
}
