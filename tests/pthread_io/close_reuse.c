/* close_reuse.c — a thread blocked in read() on a socket whose number
 * another thread closes and at once hands out again (socketpair, dup2 or
 * accept), under libloom-pthread (issue 35, item 5).
 *
 * Each round: thread R reads one end of a socketpair (its peer stays open,
 * nothing is written: the read blocks); main closes R's number, at one of
 * several moments, makes a new socketpair (or dup2s a spare socket onto the
 * number, or accepts a connection), checks the number was taken again, and
 * writes 'x' into the new file. loom's contract (docs/DESIGN.md, "Close,
 * then the same number at once"): a read blocked across the close fails
 * with EBADF; a read that begins after the reuse reads the new file. So R
 * must end, within a bound, with EBADF, or with the new file's 'x' — but
 * not once R was seen waiting before the close (loom's count of blocked
 * waits, loom_io_stats, moved after R started). Then another thread reads
 * the new file until it has waited for a 'y' main writes: the new file's
 * reads must be its own (a registration with loom's poller that stood for
 * the old file's left such a read waiting for ever). A round that does not
 * end within 5 s is a hang.
 *
 * glibc's blocked reader keeps waiting on the old file, which is still open
 * at its other end: this program is for the preload only (it says so and
 * exits 2 without libloom). argv: rounds (default 3,000, divided by
 * LOOM_TEST_SCALE), threads spinning meanwhile (default 1), and one way of
 * reuse only (0 socketpair, 1 dup2, 2 accept). The first failure ends the
 * run with its round; otherwise one line of counts.
 *
 * On main before the fix (3,000 rounds, one spinning thread): 11 of 20 runs
 * failed on one processor, 8 of 20 on two. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char* const how_name[] = {"socketpair", "dup2", "accept"};

static void fail(const char* what) {
  perror(what);
  exit(1);
}

struct io_stats {
  uint64_t registrations, blocks, polls, events;
};
static void (*io_stats)(struct io_stats*);

static uint64_t blocks(void) {
  struct io_stats s;
  io_stats(&s);
  return s.blocks;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void relax(long n) {
  for (volatile long i = 0; i < n; i = i + 1) __builtin_ia32_pause();
}

/* Load: threads that spin (under loom, fibres that hold a processor until
 * the monitor gives it a spare kernel thread). */
static atomic_int stop;
static void* spin(void* arg) {
  (void)arg;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) relax(1000);
  return NULL;
}

static int fd;
static long reader_delay; /* pauses between R's start and its read */
static atomic_int started;
static sem_t done;
static ssize_t got;
static int got_errno;
static char byte;

static void* reader(void* arg) {
  (void)arg;
  byte = 0;
  atomic_store(&started, 1);
  relax(reader_delay);
  got = read(fd, &byte, 1);
  got_errno = errno;
  sem_post(&done);
  return NULL;
}

/* Then a read of the new file that must wait (the first byte, 'x', is
 * there unless R took it): the new file's registration with loom's poller
 * must be its own, not the old file's that the close took away. */
static int first_there;
static char bytes[2];
static void* new_reader(void* arg) {
  (void)arg;
  got = first_there ? read(fd, bytes, 1) : 1;
  if (got == 1) got = read(fd, bytes + 1, 1);
  got_errno = errno;
  sem_post(&done);
  return NULL;
}

/* Waits up to 5 s for a reader; on a hang, loom's list of fibres. */
static int ended(void) {
  struct timespec limit;
  clock_gettime(CLOCK_REALTIME, &limit);
  limit.tv_sec += 5;
  double from = now_s();
  int r;
  while ((r = sem_timedwait(&done, &limit)) != 0 && errno == EINTR) {
  }
  if (r == 0) return 1;
  int e = errno, v = -1;
  sem_getvalue(&done, &v);
  fprintf(stderr, "close_reuse: sem_timedwait: %s after %.3f s, the semaphore at %d\n", strerror(e), now_s() - from, v);
  void (*dump)(FILE*) = (void (*)(FILE*))dlsym(RTLD_DEFAULT, "loom_dump_fibres");
  if (dump) dump(stderr); /* what the reader waits for */
  return 0;
}

/* A listener on 127.0.0.1 for the accept rounds, and a connection to it. */
static int listener;
static int connect_to_listener(void) {
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  if (getsockname(listener, (struct sockaddr*)&a, &len) != 0) fail("getsockname");
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c < 0 || connect(c, (struct sockaddr*)&a, len) != 0) fail("connect");
  return c;
}

int main(int argc, char** argv) {
  io_stats = (void (*)(struct io_stats*))dlsym(RTLD_DEFAULT, "loom_io_stats");
  if (!io_stats) {
    printf("close_reuse: not under libloom-pthread (glibc's reader waits on the old file): run it preloaded\n");
    return 2;
  }
  long rounds = argc > 1 ? atol(argv[1]) : 3000;
  const char* scale = getenv("LOOM_TEST_SCALE");
  if (argc <= 1 && scale && atol(scale) > 1) rounds /= atol(scale);
  int spinners = argc > 2 ? atoi(argv[2]) : 1;
  int only = argc > 3 ? atoi(argv[3]) : -1; /* one way of reuse only (0, 1, 2) */

  listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (listener < 0 || bind(listener, (struct sockaddr*)&a, sizeof a) != 0 || listen(listener, 16) != 0)
    fail("listener");

  sem_init(&done, 0, 0);
  pthread_t spin_threads[8];
  if (spinners > 8) spinners = 8;
  for (int i = 0; i < spinners; ++i) pthread_create(&spin_threads[i], NULL, spin, NULL);

  long ebadf = 0, fresh = 0, seen_blocked = 0, not_reused = 0;
  double worst = 0;
  for (long round = 0; round < rounds; ++round) {
    int sv[2], spare[2] = {-1, -1}, peer = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) fail("socketpair");
    fd = sv[0];
    int how = only >= 0 ? only : (int)(round % 3); /* 0: socketpair, 1: dup2, 2: accept */
    if (how == 1 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, spare) != 0) fail("socketpair");
    if (how == 2) peer = connect_to_listener(); /* queued: accept takes it at once */
    atomic_store(&started, 0);
    /* When the close comes: about R's attempt (R pauses a varying while
     * before its read, main closes at once), after a spin of varying length
     * (R's way from its attempt to the park), once R has counted its wait
     * (maybe not parked yet), or well after. */
    int when = (int)((round / 3) % 8);
    reader_delay = when < 4 ? (round * 37) % 400 : 0;
    uint64_t b0 = when >= 6 ? blocks() : 0;
    pthread_t r;
    if (pthread_create(&r, NULL, reader, NULL) != 0) fail("pthread_create");
    for (int n = 0; !atomic_load(&started); ++n)
      if (n < 200)
        relax(50);
      else
        usleep(1); /* (one processor: R runs only when main waits) */
    if (when >= 4 && when < 6) relax((round * 37) % (when == 4 ? 400 : 4000));
    int blocked = 0; /* R was seen waiting before the close */
    if (when >= 6) {
      double until = now_s() + 1;
      while (blocks() == b0 && now_s() < until) usleep(1);
      if (when == 6)
        relax((round * 13) % 500);
      else
        usleep(200);
      blocked = blocks() != b0;
    }
    int nv[2] = {-1, -1};
    if (how == 0) {
      close(fd);
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, nv) != 0) fail("socketpair");
    } else if (how == 1) {
      if (dup2(spare[0], fd) != fd) fail("dup2");
      nv[0] = fd;
      nv[1] = spare[1];
    } else {
      close(fd);
      nv[0] = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
      if (nv[0] < 0) fail("accept4");
      nv[1] = peer;
    }
    double closed_at = now_s();
    int reused = nv[0] == fd || nv[1] == fd;
    if (!reused) ++not_reused;
    int other = nv[0] == fd ? nv[1] : nv[0];
    if (write(other, "x", 1) != 1) fail("write");
    if (!ended()) {
      printf("close_reuse: WRONG: round %ld (%s, close %s): the reader never returned (5 s)\n", round, how_name[how],
             blocked ? "after it waited" : "early");
      fflush(stdout);
      _exit(1);
    }
    double took = now_s() - closed_at;
    if (took > worst) worst = took;
    pthread_join(r, NULL);
    seen_blocked += blocked;
    if (got < 0 && got_errno == EBADF) {
      ++ebadf;
    } else if (got == 1 && byte == 'x' && !blocked && reused) {
      ++fresh; /* the read began after the reuse (it had not counted a wait) */
    } else {
      printf("close_reuse: WRONG: round %ld (%s, close %s): read returned %zd (%s), byte '%c'%s\n", round,
             how_name[how], blocked ? "after it waited" : "early", got, got < 0 ? strerror(got_errno) : "-",
             byte ? byte : '?', reused ? "" : " (the number was not reused)");
      fflush(stdout);
      _exit(1);
    }
    if (reused) {
      first_there = got < 0;
      uint64_t b1 = blocks();
      if (pthread_create(&r, NULL, new_reader, NULL) != 0) fail("pthread_create");
      double until = now_s() + 1;
      while (blocks() == b1 && now_s() < until) usleep(1);
      if (write(other, "y", 1) != 1) fail("write");
      int new_ended = ended();
      if (!new_ended || got != 1 || bytes[1] != 'y') {
        printf("close_reuse: WRONG: round %ld (%s): a read of the new file after the reuse %s\n", round, how_name[how],
               new_ended ? "failed" : "never returned (5 s)");
        fflush(stdout);
        _exit(1);
      }
      pthread_join(r, NULL);
    }
    close(sv[1]);
    close(nv[0]);
    close(nv[1]);
    if (how == 1) close(spare[0]);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < spinners; ++i) pthread_join(spin_threads[i], NULL);
  printf(
      "close_reuse: %ld rounds, %ld seen waiting before the close; %ld EBADF, %ld read the new file; "
      "%ld numbers not reused; slowest %.1f ms\n",
      rounds, seen_blocked, ebadf, fresh, not_reused, worst * 1e3);
  return 0;
}
