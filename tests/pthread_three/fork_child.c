/* fork_child.c — fork without exec in a threaded program, as a pre-forking
 * server or redis' BGSAVE does: the child goes on using threads, locks and
 * I/O. The same output on glibc, preloaded and linked.
 *
 * The parent keeps four workers busy on a mutex and a condition variable
 * (waiters parked at the fork) and two threads ping-ponging over a
 * socketpair (a read blocked at the fork). A pthread_atfork pair takes the
 * workers' mutex across the fork, as POSIX asks of a program that uses a
 * lock in the child: the prepare handler must wait for a worker to release
 * it. The fork is made twice: from main, and from a thread.
 * In each child:
 *  - four threads (each its handle: pthread_self, pthread_kill, names) add
 *    to a counter under the workers' mutex (contended),
 *    and hand a token round a condition variable of the child's own;
 *  - two threads ping-pong 1,000 bytes over a new socketpair (blocking
 *    reads), and a pipe carries the child's report to the parent;
 *  - the forking thread keeps its key's value; a thread's key destructor
 *    runs at its exit;
 *  - the child forked from a thread ends that thread with pthread_exit while
 *    a detached thread it made still has work to do: the child lives on
 *    until that thread has written its line (its exit status 0).
 * The parent's workers go on after each fork, and are joined at the end. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char* what) {
  printf("FAILED: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* ---- the parent's workers ------------------------------------------------ */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn = PTHREAD_COND_INITIALIZER;
static long counter, token;
static volatile int stop;

static void* worker(void* a) {
  long me = (long)a;
  while (!stop) {
    pthread_mutex_lock(&lock);
    ++counter;
    while (token % 4 != me && !stop) pthread_cond_wait(&turn, &lock);
    ++token;
    pthread_cond_broadcast(&turn);
    pthread_mutex_unlock(&lock);
    /* A pause in the kernel's sense: on one processor, four fibres passing
     * a token round without one would starve main's sleep (its timer is
     * looked at when the processor has nothing to run). */
    usleep(50);
  }
  return NULL;
}

static int pp[2];
static void* pinger(void* a) {
  (void)a;
  char c = 'x';
  while (!stop)
    if (write(pp[0], &c, 1) != 1 || read(pp[0], &c, 1) != 1) break;
  return NULL;
}
static void* ponger(void* a) {
  (void)a;
  char c;
  while (read(pp[1], &c, 1) == 1)
    if (write(pp[1], &c, 1) != 1) break;
  return NULL;
}

/* The prepare handler holds the mutex a moment, so that workers are parked
 * on it at the fork: in the child they do not exist, and a wake meant for
 * one of them (with LOOM_MUTEX=baton, the lock itself) must not be spent. */
static void prepare(void) {
  pthread_mutex_lock(&lock);
  usleep(2000);
}
static void release(void) { pthread_mutex_unlock(&lock); }

/* ---- what the child does ------------------------------------------------- */

enum { kThreads = 4, kAdds = 10000, kRounds = 1000 };
static long child_counter, child_token;
/* The parent's condition variable had waiters at the fork: on glibc it is
 * unusable in the child (POSIX leaves it undefined), so the child has its
 * own. The mutex is the parent's, taken across the fork by the atfork pair. */
static pthread_cond_t child_turn = PTHREAD_COND_INITIALIZER;
static pthread_key_t key;
static int report; /* the pipe to the parent */
static pthread_key_t forker_key; /* set by the forking thread before the fork */

static void say(const char* line) {
  if (write(report, line, strlen(line)) < 0) _exit(3);
}

static void destroyed(void* v) {
  char line[80];
  snprintf(line, sizeof line, "child: a thread's key destructor ran with %ld\n", (long)v);
  say(line);
}

static pthread_t adders[4];

static void* adder(void* a) {
  long me = (long)a;
  /* its handle is the one pthread_create gave, and names it to the calls
   * by handle */
  char name[16];
  snprintf(name, sizeof name, "adder%ld", me);
  if (!pthread_equal(pthread_self(), adders[me]) || pthread_kill(pthread_self(), 0) != 0 ||
      pthread_setname_np(pthread_self(), name) != 0 || pthread_getname_np(adders[me], name, sizeof name) != 0 ||
      name[5] != (char)('0' + me))
    return (void*)-100;
  for (int i = 0; i < kAdds; ++i) {
    pthread_mutex_lock(&lock);
    ++child_counter;
    pthread_mutex_unlock(&lock);
  }
  /* a token round the threads, in order, through the condition variable */
  for (int r = 0; r < 10; ++r) {
    pthread_mutex_lock(&lock);
    while (child_token % kThreads != me) pthread_cond_wait(&child_turn, &lock);
    ++child_token;
    pthread_cond_broadcast(&child_turn);
    pthread_mutex_unlock(&lock);
  }
  if (me == 0) pthread_setspecific(key, (void*)42);
  return (void*)me;
}

static int sp[2];
static void* echo(void* a) {
  (void)a;
  char c;
  for (int i = 0; i < kRounds; ++i)
    if (read(sp[1], &c, 1) != 1 || write(sp[1], &c, 1) != 1) return (void*)1;
  return NULL;
}

static void child_work(void) {
  pthread_t* t = adders;
  pthread_t e;
  if (pthread_key_create(&key, destroyed) != 0) die("pthread_key_create");
  for (long i = 0; i < kThreads; ++i)
    if (pthread_create(&t[i], NULL, adder, (void*)i) != 0) die("pthread_create in the child");
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) die("socketpair");
  if (pthread_create(&e, NULL, echo, NULL) != 0) die("pthread_create in the child");
  int trips = 0;
  for (int i = 0; i < kRounds; ++i) {
    char c = (char)i, back = 0;
    if (write(sp[0], &c, 1) != 1 || read(sp[0], &back, 1) != 1 || back != c) break;
    ++trips;
  }
  long sum = 0;
  for (int i = 0; i < kThreads; ++i) {
    void* r;
    if (pthread_join(t[i], &r) != 0) die("pthread_join in the child");
    sum += (long)r;
  }
  void* er;
  if (pthread_join(e, &er) != 0) die("pthread_join in the child");
  char line[160];
  snprintf(line, sizeof line,
           "child: %d threads added %ld under the mutex, passed the token %ld times, returned %ld\n"
           "child: %d round trips over a socketpair (echo thread returned %ld)\n",
           kThreads, child_counter, child_token, sum, trips, (long)er);
  say(line);
}

static void* late_writer(void* a) {
  (void)a;
  usleep(20000); /* well after the forking thread's pthread_exit */
  say("child: a detached thread finished after the forking thread's pthread_exit\n");
  return NULL;
}

/* Forks; the child does its work and ends as `how` says. The parent prints
 * what the child reported and how it ended. */
static void fork_once(const char* from, int from_thread) {
  int p[2];
  if (pipe(p) != 0) die("pipe");
  fflush(stdout);
  long before = counter;
  pthread_setspecific(forker_key, (void*)(from_thread ? 8L : 7L));
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    close(p[0]);
    report = p[1];
    child_counter = child_token = 0;
    char line[80];
    snprintf(line, sizeof line, "child: the forking thread's key still holds %ld\n", (long)pthread_getspecific(forker_key));
    say(line);
    child_work();
    if (from_thread) {
      pthread_t t;
      pthread_attr_t at;
      pthread_attr_init(&at);
      pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
      if (pthread_create(&t, &at, late_writer, NULL) != 0) die("pthread_create (detached) in the child");
      pthread_exit(NULL); /* the process ends with its last thread, status 0 */
    }
    _exit(0);
  }
  close(p[1]);
  char buf[1024];
  size_t n = 0;
  ssize_t r;
  while (n < sizeof buf - 1 && (r = read(p[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
  buf[n] = 0;
  close(p[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) die("waitpid");
  printf("fork from %s:\n%schild exit %d\n", from, buf, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  /* the parent's workers go on */
  for (;;) {
    pthread_mutex_lock(&lock);
    long now = counter;
    pthread_mutex_unlock(&lock);
    if (now > before + 100) break;
    usleep(1000);
  }
  printf("parent: workers went on after the fork\n");
}

static void* forker(void* a) {
  (void)a;
  fork_once("a thread", 1);
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IOFBF, 4096);
  if (pthread_atfork(prepare, release, release) != 0) die("pthread_atfork");
  if (pthread_key_create(&forker_key, NULL) != 0) die("pthread_key_create");
  pthread_t w[4], pi, po;
  for (long i = 0; i < 4; ++i)
    if (pthread_create(&w[i], NULL, worker, (void*)i) != 0) die("pthread_create");
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, pp) != 0) die("socketpair");
  if (pthread_create(&po, NULL, ponger, NULL) != 0 || pthread_create(&pi, NULL, pinger, NULL) != 0)
    die("pthread_create");
  usleep(10000);

  fork_once("main", 0);
  pthread_t f;
  if (pthread_create(&f, NULL, forker, NULL) != 0 || pthread_join(f, NULL) != 0) die("the forking thread");

  stop = 1;
  pthread_mutex_lock(&lock);
  pthread_cond_broadcast(&turn);
  pthread_mutex_unlock(&lock);
  for (int i = 0; i < 4; ++i) pthread_join(w[i], NULL);
  pthread_join(pi, NULL);
  shutdown(pp[0], SHUT_RDWR);
  pthread_join(po, NULL);
  printf("parent: workers joined\n");
  return 0;
}
