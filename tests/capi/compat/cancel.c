/* Cancellation at each cancellation point: a worker blocks in one (or has a
 * request pending when it reaches it), the main thread cancels it and joins:
 * its cleanup handlers and key destructor have run, join gives
 * PTHREAD_CANCELED. Then the cancel state and type, a detached thread, one
 * that has ended, one cancelled before it could run, and a thread that
 * cancels itself. Plain <pthread.h> and POSIX I/O (the header route maps
 * the I/O too: -DLOOM_PTHREAD_IO). The main thread's short sleeps only make
 * it likely that a worker already waits when the request comes; the output
 * is the same either way. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static pthread_key_t key;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static sem_t never, ready, go, done;
static int fds[2], listener, pair[2], ep;

static void pause_a_little(void) {
  struct timespec t = {0, 20 * 1000 * 1000};
  nanosleep(&t, NULL);
}

static void say(void* s) { printf("  %s\n", (const char*)s); }
static void unlock_mu(void* s) {
  printf("  %s\n", (const char*)s);
  pthread_mutex_unlock(&mu);
}
static void key_gone(void* v) { printf("  key destructor: %s\n", (const char*)v); }
static void post_done(void* s) {
  printf("  %s\n", (const char*)s);
  sem_post(&done);
}

static void* blocked_in(void* arg) {
  const char* what = arg;
  char buf[64];
  pthread_setspecific(key, (void*)what);
  pthread_cleanup_push(say, "outer handler");
  pthread_cleanup_push(say, "inner handler");
  if (!strcmp(what, "read")) {
    if (read(fds[0], buf, sizeof buf) >= 0) printf("  read returned\n");
  } else if (!strcmp(what, "write")) {
    for (;;) (void)!write(fds[1], buf, sizeof buf); /* the pipe is full: it blocks */
  } else if (!strcmp(what, "recv")) {
    if (recv(pair[0], buf, sizeof buf, 0) >= 0) printf("  recv returned\n");
  } else if (!strcmp(what, "accept")) {
    if (accept(listener, NULL, NULL) >= 0) printf("  accept returned\n");
  } else if (!strcmp(what, "poll")) {
    struct pollfd p = {fds[0], POLLIN, 0};
    poll(&p, 1, -1);
  } else if (!strcmp(what, "select")) {
    fd_set r;
    FD_ZERO(&r);
    FD_SET(fds[0], &r);
    select(fds[0] + 1, &r, NULL, NULL, NULL);
  } else if (!strcmp(what, "epoll_wait")) {
    struct epoll_event e;
    epoll_wait(ep, &e, 1, -1);
  } else if (!strcmp(what, "sleep")) {
    sleep(1000);
  } else if (!strcmp(what, "nanosleep")) {
    struct timespec t = {1000, 0};
    nanosleep(&t, NULL);
  } else if (!strcmp(what, "sem_wait")) {
    sem_wait(&never);
  } else if (!strcmp(what, "sem_timedwait")) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += 1000;
    sem_timedwait(&never, &t);
  } else if (!strcmp(what, "testcancel")) {
    for (;;) pthread_testcancel();
  }
  printf("  %s: not cancelled\n", what);
  pthread_cleanup_pop(0);
  pthread_cleanup_pop(0);
  return NULL;
}

static void* cond_waiter(void* arg) {
  pthread_mutex_lock(&mu);
  pthread_cleanup_push(unlock_mu, "handler unlocks the mutex it holds again");
  if (arg) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += 1000;
    for (;;) pthread_cond_timedwait(&cv, &mu, &t);
  } else {
    for (;;) pthread_cond_wait(&cv, &mu);
  }
  pthread_cleanup_pop(1);
  return NULL;
}

/* (The request's result is printed after the join: the worker prints as it
 * acts, concurrently with the canceller.) */
static void report(const char* what, pthread_t t, int cancel_result) {
  void* r = NULL;
  int e = pthread_join(t, &r);
  printf("%s: cancel %d, join %d, cancelled %d\n", what, cancel_result, e, r == PTHREAD_CANCELED);
}

static void cancel_blocked(const char* what, void* (*fn)(void*), void* arg) {
  pthread_t t;
  printf("%s\n", what);
  pthread_create(&t, NULL, fn, arg);
  pause_a_little();
  report(what, t, pthread_cancel(t));
}

/* Disabled: the request waits until the thread enables cancellation again
 * and reaches a cancellation point. */
static void* disabled(void* arg) {
  (void)arg;
  int old = -1;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  sem_post(&ready);
  sem_wait(&go); /* cancelled meanwhile: not acted on, state disabled */
  printf("  disabled: still running, old state enabled %d\n", old == PTHREAD_CANCEL_ENABLE);
  pthread_testcancel();
  printf("  disabled: testcancel did not act\n");
  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
  printf("  enabled (deferred: nothing yet)\n");
  pthread_testcancel();
  printf("  not reached\n");
  return NULL;
}

/* Asynchronous type: enabling cancellation with a request pending acts at
 * once, in pthread_setcancelstate itself. */
static void* asynchronous(void* arg) {
  (void)arg;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
  sem_post(&ready);
  sem_wait(&go);
  int old = -1;
  printf("  setcanceltype: %d\n", pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &old));
  printf("  old type deferred: %d\n", old == PTHREAD_CANCEL_DEFERRED);
  pthread_cleanup_push(say, "async handler");
  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
  printf("  not reached\n");
  pthread_cleanup_pop(0);
  return NULL;
}

static void* detached_reader(void* arg) {
  (void)arg;
  char c;
  pthread_cleanup_push(post_done, "detached handler");
  sem_post(&ready);
  if (read(fds[0], &c, 1) >= 0) printf("  read returned\n");
  pthread_cleanup_pop(0);
  return NULL;
}

static void* returns_seven(void* arg) {
  (void)arg;
  sem_post(&ready);
  return (void*)7;
}

static void* self_cancel(void* arg) {
  pthread_t other = *(pthread_t*)arg;
  char c = 'x';
  pthread_cleanup_push(say, "self handler");
  /* (No printf before the point: glibc's stdio write is a cancellation
   * point of glibc's own, which loom does not see: cancel.cpp.) */
  int e = pthread_cancel(pthread_self());
  if (e != 0) printf("  cancel self: %d\n", e);
  if (other) {
    pthread_join(other, NULL); /* acts on entry */
  } else {
    (void)!write(fds[1], &c, 1); /* would not block: acts on entry all the same */
  }
  printf("  not reached\n");
  pthread_cleanup_pop(0);
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  pthread_key_create(&key, key_gone);
  sem_init(&never, 0, 0);
  sem_init(&ready, 0, 0);
  sem_init(&go, 0, 0);
  sem_init(&done, 0, 0);
  if (pipe(fds) != 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) return 1;
  listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener, (struct sockaddr*)&a, sizeof a) != 0 || listen(listener, 4) != 0) return 1;
  ep = epoll_create1(0);
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN;
  ev.data.fd = fds[0];
  epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], &ev);

  const char* points[] = {"read", "recv", "accept", "poll", "select", "epoll_wait", "sleep",
                          "nanosleep", "sem_wait", "sem_timedwait", "testcancel"};
  for (size_t i = 0; i < sizeof points / sizeof points[0]; ++i)
    cancel_blocked(points[i], blocked_in, (void*)points[i]);

  /* write: fill the pipe first (non-blocking), then block in write. */
  int fl = fcntl(fds[1], F_GETFL);
  fcntl(fds[1], F_SETFL, fl | O_NONBLOCK);
  char chunk[4096];
  memset(chunk, 'x', sizeof chunk);
  while (write(fds[1], chunk, sizeof chunk) > 0) {
  }
  fcntl(fds[1], F_SETFL, fl);
  cancel_blocked("write", blocked_in, (void*)"write");
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  while (read(fds[0], chunk, sizeof chunk) > 0) {
  }
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) & ~O_NONBLOCK);

  cancel_blocked("cond_wait", cond_waiter, NULL);
  printf("  mutex free: %d\n", pthread_mutex_trylock(&mu) == 0);
  pthread_mutex_unlock(&mu);
  cancel_blocked("cond_timedwait", cond_waiter, (void*)1);
  printf("  mutex free: %d\n", pthread_mutex_trylock(&mu) == 0);
  pthread_mutex_unlock(&mu);

  pthread_t t;
  int c;
  printf("disabled\n");
  pthread_create(&t, NULL, disabled, NULL);
  sem_wait(&ready);
  c = pthread_cancel(t);
  sem_post(&go);
  report("disabled", t, c);

  printf("asynchronous\n");
  pthread_create(&t, NULL, asynchronous, NULL);
  sem_wait(&ready);
  c = pthread_cancel(t);
  sem_post(&go);
  report("asynchronous", t, c);

  printf("detached\n");
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_create(&t, &at, detached_reader, NULL);
  pthread_attr_destroy(&at);
  sem_wait(&ready);
  pause_a_little();
  c = pthread_cancel(t);
  sem_wait(&done);
  printf("detached: cancel %d, its handler ran\n", c);

  printf("ended, not joined\n");
  pthread_create(&t, NULL, returns_seven, NULL);
  sem_wait(&ready);
  pause_a_little();
  c = pthread_cancel(t);
  void* r = NULL;
  int j = pthread_join(t, &r);
  printf("ended: cancel %d, join %d, value %ld\n", c, j, (long)r);

  printf("at once\n");
  pthread_create(&t, NULL, blocked_in, (void*)"read");
  report("at once", t, pthread_cancel(t));

  pthread_t none = 0;
  cancel_blocked("self, then write", self_cancel, &none);
  pthread_t sleeper;
  pthread_create(&sleeper, NULL, blocked_in, (void*)"sem_wait");
  cancel_blocked("self, then join", self_cancel, &sleeper);
  pause_a_little();
  report("joined-for", sleeper, pthread_cancel(sleeper));
  return 0;
}
