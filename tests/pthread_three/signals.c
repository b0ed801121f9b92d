// signals.c — POSIX's per-thread signals, as glibc gives them: masks per
// thread and inherited at creation; sigwait, sigwaitinfo and sigtimedwait
// woken by pthread_kill, pthread_sigqueue and a process-directed kill;
// sigsuspend and pause interrupted by a signal from another thread, the
// handler running on the waiting thread; raise and sigpending. Its output
// is compared with the plain glibc run's (three.sh), on 1 and 2 processors.
// An alarm bounds every run: a lost signal fails it instead of hanging.
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sigmask_util.h"

// ---- masks ----------------------------------------------------------------------------

static void* child_mask(void* arg) {
  (void)arg;
  printf("masks: child inherits USR1 blocked %d, USR2 blocked %d\n", blocked(SIGUSR1), blocked(SIGUSR2));
  block(SIG_UNBLOCK, SIGUSR1);
  block(SIG_BLOCK, SIGUSR2);
  printf("masks: child now USR1 %d, USR2 %d\n", blocked(SIGUSR1), blocked(SIGUSR2));
  return NULL;
}

static void masks(void) {
  block(SIG_BLOCK, SIGUSR1);
  pthread_t t;
  pthread_create(&t, NULL, child_mask, NULL);
  pthread_join(t, NULL);
  printf("masks: main keeps USR1 %d, USR2 %d\n", blocked(SIGUSR1), blocked(SIGUSR2));
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGKILL);
  sigaddset(&s, SIGSTOP);
  pthread_sigmask(SIG_BLOCK, &s, NULL);
  printf("masks: KILL blocked %d, STOP blocked %d\n", blocked(SIGKILL), blocked(SIGSTOP));
  printf("masks: bad how %d\n", pthread_sigmask(12345, &s, NULL) == EINVAL);
  block(SIG_UNBLOCK, SIGUSR1);
}

// ---- sigwait + pthread_kill / pthread_sigqueue / kill ---------------------------------------

static atomic_int taken;  // how many signals the waiter has taken: one at a time
                          // (a second USR1 sent while one is pending is lost)
static void wait_taken(int n) {
  while (atomic_load(&taken) < n) usleep(1000);
}

static void* waiter(void* arg) {
  (void)arg;
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGUSR1);
  sigaddset(&s, SIGTERM);
  int sig = 0;
  int e = sigwait(&s, &sig);
  printf("sigwait: %d, got %s\n", e, sig == SIGUSR1 ? "USR1" : sig == SIGTERM ? "TERM" : "?");
  atomic_store(&taken, 1);
  siginfo_t info;
  memset(&info, 0, sizeof info);
  sig = sigwaitinfo(&s, &info);
  printf("sigwaitinfo: %s, queued %d, value %d\n", sig == SIGUSR1 ? "USR1" : "?", info.si_code == SI_QUEUE,
         info.si_value.sival_int);
  atomic_store(&taken, 2);
  sig = sigwaitinfo(&s, &info);
  printf("sigwaitinfo: %s from kill, by this process %d\n", sig == SIGTERM ? "TERM" : "?",
         info.si_code == SI_USER && info.si_pid == getpid());
  struct timespec t = {0, 20 * 1000 * 1000};
  sig = sigtimedwait(&s, &info, &t);
  printf("sigtimedwait: %d, EAGAIN %d\n", sig, errno == EAGAIN);
  return NULL;
}

static void waits(void) {
  // Every thread blocks them (inherited): only the waiter takes them.
  block(SIG_BLOCK, SIGUSR1);
  block(SIG_BLOCK, SIGTERM);
  pthread_t t;
  pthread_create(&t, NULL, waiter, NULL);
  pthread_kill(t, SIGUSR1);
  wait_taken(1);
  union sigval v;
  v.sival_int = 42;
  pthread_sigqueue(t, SIGUSR1, v);
  wait_taken(2);
  kill(getpid(), SIGTERM);  // to the process: the only thread waiting for it
  pthread_join(t, NULL);
  block(SIG_UNBLOCK, SIGUSR1);
  block(SIG_UNBLOCK, SIGTERM);
}

// ---- sigsuspend and pause, woken by another thread --------------------------------------

static volatile sig_atomic_t handled;
static pthread_t handled_on;

static void on_usr2(int sig) {
  (void)sig;
  handled_on = pthread_self();
  handled = 1;
}

static void* kicker(void* arg) {
  usleep(20000);
  pthread_kill(*(pthread_t*)arg, SIGUSR2);
  return NULL;
}

static void* pauser(void* arg) {
  (void)arg;
  while (!handled) pause();
  printf("pause: handler ran on the paused thread %d\n", pthread_equal(handled_on, pthread_self()));
  return NULL;
}

static void* sleeper(void* arg) {
  (void)arg;
  while (!handled) usleep(5000);
  printf("usleep: handler ran on the sleeping thread %d\n", pthread_equal(handled_on, pthread_self()));
  return NULL;
}

static void suspends(void) {
  struct sigaction a;
  memset(&a, 0, sizeof a);
  a.sa_handler = on_usr2;
  sigemptyset(&a.sa_mask);
  sigaction(SIGUSR2, &a, NULL);

  block(SIG_BLOCK, SIGUSR2);
  pthread_t self = pthread_self(), k;
  pthread_create(&k, NULL, kicker, &self);
  sigset_t open;
  pthread_sigmask(SIG_BLOCK, NULL, &open);
  sigdelset(&open, SIGUSR2);
  int r = 0, e = 0;
  while (!handled) {
    r = sigsuspend(&open);
    e = errno;
  }
  printf("sigsuspend: %d EINTR %d, handler on main %d, USR2 blocked again %d\n", r, e == EINTR,
         pthread_equal(handled_on, self), blocked(SIGUSR2));
  pthread_join(k, NULL);
  block(SIG_UNBLOCK, SIGUSR2);

  handled = 0;
  pthread_t p;
  pthread_create(&p, NULL, pauser, NULL);
  usleep(20000);
  pthread_kill(p, SIGUSR2);
  pthread_join(p, NULL);

  handled = 0;
  pthread_create(&p, NULL, sleeper, NULL);
  usleep(20000);
  pthread_kill(p, SIGUSR2);
  pthread_join(p, NULL);

  handled = 0;
  raise(SIGUSR2);
  printf("raise: handled before it returned %d, on the caller %d\n", (int)handled, pthread_equal(handled_on, self));

  block(SIG_BLOCK, SIGUSR2);
  handled = 0;
  raise(SIGUSR2);
  sigset_t pend;
  sigpending(&pend);
  printf("sigpending: USR2 %d, handled %d\n", sigismember(&pend, SIGUSR2), (int)handled);
  block(SIG_UNBLOCK, SIGUSR2);  // delivered before pthread_sigmask returns
  printf("unblock: handled %d\n", (int)handled);
}

// ---- a default action still acts when one thread does not block the signal ------------------

static void* idler(void* arg) {
  (void)arg;
  for (;;) usleep(10000);
  return NULL;
}

// The program again, as "die": main blocks SIGTERM, another thread does
// not; a SIGTERM to the process kills it (the default action), as on glibc.
static int die(void) {
  pthread_t t;
  pthread_create(&t, NULL, idler, NULL);
  block(SIG_BLOCK, SIGTERM);
  kill(getpid(), SIGTERM);
  sleep(10);
  return 0;
}

// The program again, as "pipe": a thread sends to a closed peer without
// MSG_NOSIGNAL (SIGPIPE's default kills the process), then, if alive, with
// it (EPIPE).
static void* sender(void* arg) {
  int fd = *(int*)arg;
  char c = 'x';
  int flags = 0;
  if (send(fd, &c, 1, MSG_NOSIGNAL) < 0 && errno == EPIPE) printf("MSG_NOSIGNAL: EPIPE\n");
  send(fd, &c, 1, flags);
  printf("send: survived SIGPIPE\n");
  return NULL;
}
static int sigpipe(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  close(sv[1]);
  pthread_t t;
  pthread_create(&t, NULL, sender, &sv[0]);
  pthread_join(t, NULL);
  return 0;
}

// The program again, as "mask": what it inherited across fork and exec.
static int inherited(void) {
  printf("mask: exec'd child has USR1 blocked %d, USR2 blocked %d\n", blocked(SIGUSR1), blocked(SIGUSR2));
  return 0;
}

static void child(const char* self, const char* mode) {
  fflush(stdout);
  pid_t c = fork();
  if (c == 0) {
    execl(self, self, mode, (char*)NULL);
    _exit(127);
  }
  int st = 0;
  waitpid(c, &st, 0);
  printf("%s: child killed by signal %d\n", mode, WIFSIGNALED(st) ? WTERMSIG(st) : -WEXITSTATUS(st));
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "die") == 0) return die();
  if (argc > 1 && strcmp(argv[1], "pipe") == 0) return sigpipe();
  if (argc > 1 && strcmp(argv[1], "mask") == 0) return inherited();
  setvbuf(stdout, NULL, _IOLBF, 0);
  alarm(30);
  masks();
  waits();
  suspends();
  block(SIG_BLOCK, SIGUSR1);  // the forking thread's mask, not its processor's
  child("/proc/self/exe", "mask");
  block(SIG_UNBLOCK, SIGUSR1);
  child("/proc/self/exe", "die");
  child("/proc/self/exe", "pipe");
  printf("done\n");
  return 0;
}
