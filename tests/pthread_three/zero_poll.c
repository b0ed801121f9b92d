// zero_poll.c — an event loop that never blocks: it looks for its workers'
// results with a zero timeout (epoll_wait, poll, select in turn) and spins
// on sched_yield, as some unmodified programs do. On glibc the kernel runs
// the workers meanwhile; on one loom processor a look that finds nothing
// must let them run (issue 24, item 6). Run with LOOM_PROCESSORS=1; the
// alarm turns a loop that starves its workers into a failure.
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <unistd.h>

enum { kWorkers = 4 };
static int efd;
static atomic_int done;

static void* worker(void* arg) {
  volatile uint64_t x = (uintptr_t)arg;
  for (int i = 0; i < 100000; ++i) x = x * 6364136223846793005u + 1;
  uint64_t one = 1;
  if (write(efd, &one, sizeof one) != sizeof one) perror("write");
  atomic_fetch_add(&done, 1);
  return NULL;
}

static void start(pthread_t* t) {
  for (long i = 0; i < kWorkers; ++i) pthread_create(&t[i], NULL, worker, (void*)i);
}
static void finish(pthread_t* t) {
  for (int i = 0; i < kWorkers; ++i) pthread_join(t[i], NULL);
}
static uint64_t take(void) {
  uint64_t n = 0;
  if (read(efd, &n, sizeof n) < 0) n = 0;
  return n;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  alarm(20);
  efd = eventfd(0, EFD_NONBLOCK);
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = efd};
  epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev);
  pthread_t t[kWorkers];

  uint64_t got = 0;
  start(t);
  while (got < kWorkers) {
    struct epoll_event out;
    if (epoll_wait(ep, &out, 1, 0) == 1) got += take();
  }
  finish(t);
  printf("epoll_wait(0): %llu results\n", (unsigned long long)got);

  got = 0;
  start(t);
  while (got < kWorkers) {
    struct pollfd p = {efd, POLLIN, 0};
    if (poll(&p, 1, 0) == 1) got += take();
  }
  finish(t);
  printf("poll(0): %llu results\n", (unsigned long long)got);

  got = 0;
  start(t);
  while (got < kWorkers) {
    fd_set r;
    FD_ZERO(&r);
    FD_SET(efd, &r);
    struct timeval z = {0, 0};
    if (select(efd + 1, &r, NULL, NULL, &z) == 1) got += take();
  }
  finish(t);
  printf("select(0): %llu results\n", (unsigned long long)got);

  atomic_store(&done, 0);
  start(t);
  while (atomic_load(&done) < kWorkers) sched_yield();
  finish(t);
  take();
  printf("sched_yield: %d workers done\n", atomic_load(&done));
  return 0;
}
