// signal_cases.c — the signal cases of issue 32 (item 5), as glibc answers
// them; three.sh compares each case's output with the plain glibc run's.
// One case per run (argv[1]); an alarm bounds each, so a lost signal or a
// hang fails the case instead of hanging the suite.
//   lost      30,000 rounds of one signal at a time, sent by a thread that
//             blocks it (kill, or with "tgkill" to its own kernel thread:
//             loom's processor, not the waiter's) to a sigwait loop: none lost
//   hold      sighold/sigrelse/sigset(SIG_HOLD)/sigignore/sigpause and the
//             BSD sigblock/sigsetmask/siggetmask act on the thread's mask
//   exec      a thread that blocks SIGUSR1 posix_spawns, then execs (execv,
//             execl, execve, fexecve in a chain): each new image starts with
//             SIGUSR1 blocked;
//             posix_spawnattr_setsigmask still wins; system() gives its
//             command the caller's mask too
//   execpend  what is pending at exec stays pending in the new image: with
//             SIGUSR1, SIGUSR2 and SIGRTMIN blocked, SIGUSR1 killed and two
//             SIGRTMIN sigqueued to the process, SIGUSR2 and a third
//             SIGRTMIN sent to the thread itself; the new image finds them
//             pending and takes each (signo, code, value) in order. A
//             failed exec (ENOENT: execve, execvp) first: the old image
//             still has each once, nothing lost, nothing doubled
//   queue     three queued instances of one realtime signal: sigwaitinfo
//             takes one, two stay pending, in order of their values
//   samask    a signal blocked by the handler's sa_mask is pending inside the
//             handler and runs after it
//   storm     a thread calls pthread_kill in a loop while another thread
//             storms it with a handled signal: no hang, no EINTR
//   eintr     a handled signal without SA_RESTART ends sem_wait with EINTR
//   attrmask  pthread_attr_setsigmask_np: the new thread starts with it
//   siginfo   an SA_SIGINFO handler reads what was sent: a timer's SI_TIMER
//             and value, pthread_sigqueue's SI_QUEUE and value to a thread
//             that never waited for a signal
//   ioeintr   a handler sent to a thread blocked on a descriptor runs at
//             once: a read on a pipe fails with EINTR without SA_RESTART
//             and goes on reading with it; poll fails with EINTR either way
//             (never restarted); so does accept without SA_RESTART
//   timeo     a socket's SO_RCVTIMEO bounds a thread's recv (EAGAIN), and a
//             handler ends such a recv with EINTR even with SA_RESTART
//             (signal(7): a call with a timeout is never restarted)
//   leavemask a thread cancelled inside a handler (sa_mask full) that blocks
//             in read: afterwards alarm() still reaches the process (the
//             kernel thread's mask is put back: an outside review found
//             every signal lost)
//   altcancel a thread with an alternate stack, cancelled while its SA_ONSTACK
//             handler blocks in read: the cleanups of its frames on its own
//             stack below the handler run (the file is built with
//             -fexceptions, as glibc's tst-cancelx20: cleanups by unwinding;
//             glibc's unwinding must see the handler's frames, on another
//             stack, as the innermost)
//   unseen    a handler sent to a thread blocked in a call loom does not
//             see (glibc's own system call: semop, flock, waitpid) runs at
//             once, with the sender's siginfo: semop fails with EINTR either
//             way (never restarted), flock and waitpid fail with EINTR
//             without SA_RESTART and go on waiting with it; so does the
//             program's own syscall(SYS_nanosleep) (EINTR); a one-shot
//             handler due on a computing thread runs once
//   altstack  sigaltstack is per thread: a thread's stack is its own, a new
//             thread has none, SS_DISABLE drops it; a handler installed
//             with SA_ONSTACK runs, and sigaction reports SA_ONSTACK back
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

#include "sigmask_util.h"
static int pending(int sig) {
  sigset_t s;
  sigpending(&s);
  return sigismember(&s, sig);
}

// ---- lost: a sigwait loop, one signal at a time ------------------------------------------------

enum { kRounds = 30000 };
static sem_t taken;

static void* lost_waiter(void* arg) {
  (void)arg;
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGUSR1);
  for (int i = 0; i < kRounds; ++i) {
    int sig = 0;
    if (sigwait(&s, &sig) != 0 || sig != SIGUSR1) break;
    sem_post(&taken);
  }
  return NULL;
}

// With by_tgkill, a helper process sends each signal with tgkill to one of
// this process's kernel threads in turn (under loom: processors and loom's
// own threads that do not block it in the kernel, whichever fibre runs
// there), as a signal from outside would.
static int lost(int by_tgkill) {
  block(SIG_BLOCK, SIGUSR1);  // every thread: the waiter inherits it
  sem_init(&taken, 0, 0);
  pthread_t w;
  pthread_create(&w, NULL, lost_waiter, NULL);
  int go[2] = {-1, -1};
  pid_t helper = -1;
  if (by_tgkill) {
    if (pipe(go) != 0) return 1;
    pid_t parent = getpid();
    fflush(stdout);
    helper = fork();
    if (helper == 0) {  // sends the tid it reads to its parent
      close(go[1]);
      pid_t tid;
      while (read(go[0], &tid, sizeof tid) == (ssize_t)sizeof tid) syscall(SYS_tgkill, parent, tid, SIGUSR1);
      _exit(0);
    }
    close(go[0]);
  }
  pid_t tids[64];
  int ntids = 0;
  for (int i = 0; i < kRounds; ++i) {
    if (by_tgkill) {
      if (i % 1000 == 0) {  // the kernel threads now
        char path[64];
        ntids = 0;
        for (pid_t t = getpid(); t < getpid() + 4096 && ntids < 64; ++t) {
          snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)t);
          FILE* f = fopen(path, "r");
          if (!f) continue;
          char line[256];
          unsigned long long blk = ~0ull;
          while (fgets(line, sizeof line, f))
            if (sscanf(line, "SigBlk: %llx", &blk) == 1) break;
          fclose(f);
          if (!(blk & (1ull << (SIGUSR1 - 1)))) tids[ntids++] = t;  // its kernel mask lets it in
        }
      }
      pid_t t = tids[i % ntids];
      if (write(go[1], &t, sizeof t) != (ssize_t)sizeof t) return 1;
    } else {
      kill(getpid(), SIGUSR1);
    }
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += 10;
    if (sem_timedwait(&taken, &t) != 0) {
      printf("lost: round %d lost its signal (pending %d)\n", i, pending(SIGUSR1));
      fflush(stdout);
      _exit(1);
    }
  }
  pthread_join(w, NULL);
  if (by_tgkill) {
    close(go[1]);
    waitpid(helper, NULL, 0);
  }
  printf("lost: %d rounds, none lost\n", kRounds);
  return 0;
}

// ---- hold: glibc's other mask functions ---------------------------------------------------------

static atomic_int ran_usr1, ran_usr2;
static void on_usr1(int sig) {
  (void)sig;
  ran_usr1++;
}
static void on_usr2(int sig) {
  (void)sig;
  ran_usr2++;
}

static void* hold_thread(void* arg) {
  (void)arg;
  signal(SIGUSR1, on_usr1);
  sighold(SIGUSR1);
  printf("hold: sighold blocks %d\n", blocked(SIGUSR1));
  raise(SIGUSR1);
  printf("hold: held: ran %d, pending %d\n", ran_usr1, pending(SIGUSR1));
  sigrelse(SIGUSR1);
  printf("hold: sigrelse: ran %d, blocked %d, pending %d\n", ran_usr1, blocked(SIGUSR1), pending(SIGUSR1));
  int was = sigset(SIGUSR1, SIG_HOLD) == SIG_HOLD;
  printf("hold: sigset(SIG_HOLD) was held %d\n", was);
  printf("hold: sigset blocks %d\n", blocked(SIGUSR1));
  raise(SIGUSR1);
  printf("hold: sigset-held: ran %d, pending %d\n", ran_usr1, pending(SIGUSR1));
  sigset(SIGUSR1, on_usr1);  // unblocks: delivered
  printf("hold: sigset(handler): ran %d, blocked %d\n", ran_usr1, blocked(SIGUSR1));
  sigignore(SIGUSR1);
  struct sigaction a;
  sigaction(SIGUSR1, NULL, &a);
  printf("hold: sigignore: SIG_IGN %d\n", a.sa_handler == SIG_IGN);
  signal(SIGUSR1, on_usr1);
  int old = sigblock((1 << (SIGUSR2 - 1)));
  printf("hold: sigblock: was %d, blocks %d, siggetmask %d\n", (old & (1 << (SIGUSR2 - 1))) != 0, blocked(SIGUSR2),
         (siggetmask() & (1 << (SIGUSR2 - 1))) != 0);
  signal(SIGUSR2, on_usr2);
  raise(SIGUSR2);
  printf("hold: sigblock-held: ran %d, pending %d\n", ran_usr2, pending(SIGUSR2));
  sigsetmask(old);
  printf("hold: sigsetmask: ran %d, blocks %d\n", ran_usr2, blocked(SIGUSR2));
  // sigpause(sig): sig unblocked while waiting for a signal; back blocked.
  sighold(SIGUSR1);
  raise(SIGUSR1);
  int r = sigpause(SIGUSR1);
  printf("hold: sigpause: %d EINTR %d, ran %d, blocked after %d\n", r, errno == EINTR, ran_usr1, blocked(SIGUSR1));
  sigrelse(SIGUSR1);
  return NULL;
}

static int hold(void) {
  pthread_t t;  // on a thread of the program's own, not main
  pthread_create(&t, NULL, hold_thread, NULL);
  pthread_join(t, NULL);
  return 0;
}

// ---- exec: the mask reaches the new image -----------------------------------------------------

static const char* self_path;

// exec (how: execv, execl, execve, fexecve) from a new thread that blocks
// SIGUSR1, to "report how rest...": the process goes on in the new image.
static void* exec_from(void* arg) {
  char** v = arg;  // how, then the rest of the chain
  const char* how = v[0];
  block(SIG_BLOCK, SIGUSR1);
  char* argv[16] = {(char*)self_path, "report"};
  int n = 2;
  for (char** p = v; *p && n < 15; ++p) argv[n++] = *p;
  argv[n] = NULL;
  fflush(stdout);
  if (strcmp(how, "execv") == 0) {
    execv(self_path, argv);
  } else if (strcmp(how, "execl") == 0) {
    execl(self_path, self_path, "report", how, v[1], v[1] ? v[2] : NULL, (char*)NULL);
  } else if (strcmp(how, "fexecve") == 0) {
    int fd = open(self_path, O_RDONLY | O_CLOEXEC);
    fexecve(fd, argv, environ);
  } else {
    execve(self_path, argv, environ);
  }
  printf("exec: %s failed\n", how);
  exit(1);
}

static int report_mask(char** rest) {  // the exec'd image: rest = how, next...
  sigset_t s;
  sigprocmask(SIG_BLOCK, NULL, &s);
  printf("exec: %s: USR1 blocked %d, USR2 blocked %d\n", rest[0], sigismember(&s, SIGUSR1), sigismember(&s, SIGUSR2));
  if (!rest[1]) return 0;
  sigemptyset(&s);
  sigprocmask(SIG_SETMASK, &s, NULL);
  pthread_t t;
  pthread_create(&t, NULL, exec_from, rest + 1);
  pthread_join(t, NULL);
  return 1;
}

static void* spawn_thread(void* arg) {
  (void)arg;
  block(SIG_BLOCK, SIGUSR1);
  // posix_spawn: the caller's mask, or the attribute's.
  fflush(stdout);
  char* argv[] = {(char*)self_path, "report", "posix_spawn", NULL};
  pid_t c;
  int st;
  if (posix_spawn(&c, self_path, NULL, NULL, argv, environ) == 0) waitpid(c, &st, 0);
  posix_spawnattr_t a;
  posix_spawnattr_init(&a);
  sigset_t m;
  sigemptyset(&m);
  sigaddset(&m, SIGUSR2);
  posix_spawnattr_setsigmask(&a, &m);
  posix_spawnattr_setflags(&a, POSIX_SPAWN_SETSIGMASK);
  char* argv2[] = {(char*)self_path, "report", "posix_spawn-setsigmask", NULL};
  if (posix_spawnp(&c, self_path, NULL, &a, argv2, environ) == 0) waitpid(c, &st, 0);
  posix_spawnattr_destroy(&a);
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "'%s' report system", self_path);
  int r = system(cmd);
  printf("exec: system: %d, USR1 still blocked %d, CHLD blocked %d\n", r, blocked(SIGUSR1), blocked(SIGCHLD));
  return NULL;
}

static int exec_case(void) {
  pthread_t t;
  pthread_create(&t, NULL, spawn_thread, NULL);
  pthread_join(t, NULL);
  // exec from a thread that blocks SIGUSR1, four ways in a chain.
  static char* chain[] = {"execv", "execl", "execve", "fexecve", NULL};
  pthread_create(&t, NULL, exec_from, chain);
  pthread_join(t, NULL);
  return 1;
}

// ---- execpend: what is pending at exec stays pending in the new image ------------------------

static void execpend_handler(int sig) { (void)sig; }

static const char* code_name(int code) {
  return code == SI_USER ? "SI_USER" : code == SI_TKILL ? "SI_TKILL" : code == SI_QUEUE ? "SI_QUEUE" : "other";
}

// Each signal of the case taken alone (zero timeout) until none is left:
// what sigpending said, then signo, code, sender and value in order. (Not
// pthread_kill's code: SI_TKILL for tgkill on most kernels, SI_USER on some.)
static void execpend_take(const char* when) {
  printf("execpend: %s: pending USR1 %d USR2 %d RTMIN %d\n", when, pending(SIGUSR1), pending(SIGUSR2),
         pending(SIGRTMIN));
  const int sigs[] = {SIGUSR1, SIGUSR2, SIGRTMIN};
  const char* names[] = {"USR1", "USR2", "RTMIN"};
  for (int k = 0; k < 3; ++k) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sigs[k]);
    struct timespec zero = {0, 0};
    siginfo_t si;
    int n = 0;
    while (n < 10 && sigtimedwait(&s, &si, &zero) == sigs[k]) {
      ++n;
      printf("execpend: %s: took %s %s, from us %d, value %d\n", when, names[k],
             sigs[k] == SIGUSR2 ? "-" : code_name(si.si_code),
             si.si_pid == getpid(), si.si_code == SI_QUEUE ? si.si_value.sival_int : 0);
    }
    printf("execpend: %s: %s taken %d, errno %s\n", when, names[k], n, errno == EAGAIN ? "EAGAIN" : "other");
  }
}

static void execpend_send(void) {
  kill(getpid(), SIGUSR1);
  sigqueue(getpid(), SIGRTMIN, (union sigval){.sival_int = 1});
  pthread_sigqueue(pthread_self(), SIGRTMIN, (union sigval){.sival_int = 2});
  pthread_kill(pthread_self(), SIGUSR2);
  sigqueue(getpid(), SIGRTMIN, (union sigval){.sival_int = 3});
}

static int execpend(void) {
  int sigs[] = {SIGUSR1, SIGUSR2, SIGRTMIN};
  for (int k = 0; k < 3; ++k) {
    signal(sigs[k], execpend_handler);
    block(SIG_BLOCK, sigs[k]);
  }
  // A failed exec: the process goes on with each signal still pending once.
  execpend_send();
  char* none[] = {"/nonexistent/loom-execpend", NULL};
  int r = execve(none[0], none, environ);
  printf("execpend: execve: %d %s\n", r, errno == ENOENT ? "ENOENT" : "other");
  char* none_p[] = {"loom-execpend-no-such-program", NULL};
  r = execvp(none_p[0], none_p);
  printf("execpend: execvp: %d %s\n", r, errno == ENOENT ? "ENOENT" : "other");
  execpend_take("after failed exec");
  // Then for real: the new image takes them.
  execpend_send();
  printf("execpend: before exec: pending USR1 %d USR2 %d RTMIN %d\n", pending(SIGUSR1), pending(SIGUSR2),
         pending(SIGRTMIN));
  fflush(stdout);
  char* argv[] = {(char*)self_path, "execpend-report", NULL};
  execv(self_path, argv);
  printf("execpend: exec failed\n");
  return 1;
}

// ---- queue: realtime signals stay queued --------------------------------------------------------

static int queue(void) {
  int sig = SIGRTMIN + 2;
  block(SIG_BLOCK, sig);
  for (int i = 1; i <= 3; ++i) sigqueue(getpid(), sig, (union sigval){.sival_int = i});
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, sig);
  for (int i = 0; i < 3; ++i) {
    siginfo_t si;
    int r = sigwaitinfo(&s, &si);
    printf("queue: took %d value %d, still pending %d\n", r == sig, si.si_value.sival_int, pending(sig));
  }
  struct timespec zero = {0, 0};
  int r = sigtimedwait(&s, NULL, &zero);
  printf("queue: then %d EAGAIN %d\n", r, errno == EAGAIN);
  return 0;
}

// Installs fn for sig with these flags and an empty sa_mask, or all
// blocked (full).
static void handle(int sig, void (*fn)(int), int flags, int full) {
  struct sigaction a;
  memset(&a, 0, sizeof a);
  a.sa_handler = fn;
  a.sa_flags = flags;
  if (full)
    sigfillset(&a.sa_mask);
  else
    sigemptyset(&a.sa_mask);
  sigaction(sig, &a, NULL);
}

// ---- samask: pending inside the handler ---------------------------------------------------------

static atomic_int usr2_in_handler = -1, usr2_pending_in_handler = -1;
static void samask_usr1(int sig) {
  (void)sig;
  raise(SIGUSR2);
  usr2_in_handler = ran_usr2;
  usr2_pending_in_handler = pending(SIGUSR2);
}

static void* samask_thread(void* arg) {
  (void)arg;
  struct sigaction a;
  memset(&a, 0, sizeof a);
  a.sa_handler = samask_usr1;
  sigemptyset(&a.sa_mask);
  sigaddset(&a.sa_mask, SIGUSR2);
  sigaction(SIGUSR1, &a, NULL);
  signal(SIGUSR2, on_usr2);
  raise(SIGUSR1);
  printf("samask: in the handler: USR2 ran %d, pending %d; after: ran %d\n", usr2_in_handler,
         usr2_pending_in_handler, ran_usr2);
  return NULL;
}

static int samask(void) {
  pthread_t t;
  pthread_create(&t, NULL, samask_thread, NULL);
  pthread_join(t, NULL);
  return 0;
}

// ---- storm: pthread_kill in a loop while stormed ------------------------------------------------

static atomic_int storm_stop, storm_eintr, storm_handled;
static void on_storm(int sig) {
  (void)sig;
  storm_handled++;
}
static pthread_t storm_target;

static void* storm_victim(void* arg) {  // sends, and is the storm's target
  (void)arg;
  for (int i = 0; i < 20000; ++i) {
    int r = pthread_kill(pthread_self(), 0);
    if (r == EINTR) storm_eintr++;
    r = pthread_kill(pthread_self(), SIGUSR2);
    if (r != 0) storm_eintr++;
  }
  storm_stop = 1;
  return NULL;
}
static void* stormer(void* arg) {
  (void)arg;
  while (!storm_stop) {
    if (pthread_kill(storm_target, SIGUSR1) != 0) break;
    sched_yield();
  }
  return NULL;
}

static int storm(void) {
  signal(SIGUSR1, on_storm);
  signal(SIGUSR2, on_storm);
  pthread_t s;
  pthread_create(&storm_target, NULL, storm_victim, NULL);
  pthread_create(&s, NULL, stormer, NULL);
  pthread_join(storm_target, NULL);
  pthread_join(s, NULL);
  printf("storm: ended, EINTR or errors %d, handled some %d\n", storm_eintr, storm_handled > 0);
  return 0;
}

// ---- eintr: a handled signal without SA_RESTART ends sem_wait ------------------------------------

static void on_alarm(int sig) { (void)sig; }

static int eintr(void) {
  handle(SIGALRM, on_alarm, 0, 0);
  sem_t s;
  sem_init(&s, 0, 0);
  alarm(1);
  int r = sem_wait(&s);
  printf("eintr: sem_wait %d EINTR %d\n", r, errno == EINTR);
  return 0;
}

// ---- ioeintr: a handler cuts a wait on a descriptor short ----------------------------------------

static atomic_int io_handled;
static void on_io_signal(int sig) {
  (void)sig;
  io_handled++;
}

static int io_fd[2];
static atomic_int io_ready;
enum { kRead, kPoll, kAccept };
static int io_kind;
static int io_listener;

static void* io_blocked(void* arg) {
  (void)arg;
  char c;
  io_ready = 1;
  long r;
  if (io_kind == kRead) {
    r = read(io_fd[0], &c, 1);
  } else if (io_kind == kPoll) {
    struct pollfd p = {io_fd[0], POLLIN, 0};
    r = poll(&p, 1, 5000);
  } else {
    r = accept(io_listener, NULL, NULL);
  }
  int e = errno;
  printf("ioeintr:   returned %ld%s, handler ran %d\n", r, r < 0 && e == EINTR ? " EINTR" : "", io_handled);
  return NULL;
}

// One blocked call in a thread, a SIGUSR1 to that thread once it waits;
// after 2 s a byte is written (a missed interruption shows as "returned 1").
static void io_round(const char* what, int kind, int flags) {
  handle(SIGUSR1, on_io_signal, flags, 0);
  io_handled = 0;
  io_ready = 0;
  io_kind = kind;
  if (pipe(io_fd) != 0) abort();
  printf("ioeintr: %s\n", what);
  pthread_t t;
  pthread_create(&t, NULL, io_blocked, NULL);
  while (!io_ready) usleep(1000);
  usleep(200 * 1000);  // in the call by now
  pthread_kill(t, SIGUSR1);
  usleep(kind == kRead && (flags & SA_RESTART) ? 300 * 1000 : 2000 * 1000);
  if (write(io_fd[1], "x", 1) != 1) abort();
  if (kind == kAccept) {  // a connection ends a missed accept
    struct sockaddr_in sa;
    socklen_t n = sizeof sa;
    getsockname(io_listener, (struct sockaddr*)&sa, &n);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    connect(c, (struct sockaddr*)&sa, n);
    pthread_join(t, NULL);
    close(c);
  } else {
    pthread_join(t, NULL);
  }
  close(io_fd[0]);
  close(io_fd[1]);
}

static int ioeintr(void) {
  io_round("read, no SA_RESTART", kRead, 0);
  io_round("read, SA_RESTART", kRead, SA_RESTART);
  io_round("poll, SA_RESTART", kPoll, SA_RESTART);
  io_listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(io_listener, (struct sockaddr*)&sa, sizeof sa) != 0 || listen(io_listener, 4) != 0) abort();
  io_round("accept, no SA_RESTART", kAccept, 0);
  close(io_listener);
  return 0;
}

// ---- unseen: a handler cuts short a call loom does not see ---------------------------------------

static atomic_int un_handled, un_code_tkill, un_ready;
static void on_unseen_signal(int sig, siginfo_t* si, void* uc) {
  (void)sig;
  (void)uc;
  un_handled++;
  if (si->si_code == SI_TKILL && si->si_pid == getpid()) un_code_tkill++;
}
enum { kSemop, kFlock, kWaitpid, kRawSleep };
static int un_kind, un_sem, un_lock_fd, un_child_fd[2];
static pid_t un_child;
static const char* un_lock_path;

static void* un_blocked(void* arg) {
  (void)arg;
  long r;
  int fd = -1;
  un_ready = 1;
  if (un_kind == kSemop) {
    struct sembuf op = {0, -1, 0};
    r = semop(un_sem, &op, 1);
  } else if (un_kind == kFlock) {
    fd = open(un_lock_path, O_RDWR);
    r = flock(fd, LOCK_EX);
  } else if (un_kind == kWaitpid) {
    int status;
    r = waitpid(un_child, &status, 0);
    if (r == un_child) r = 1;
  } else {
    struct timespec t = {1, 500 * 1000 * 1000};
    r = syscall(SYS_nanosleep, &t, NULL);
  }
  int e = errno;
  printf("unseen:   returned %ld%s, handler ran %d, with the sender's siginfo %d\n", r,
         r < 0 && e == EINTR ? " EINTR" : "", un_handled, un_code_tkill);
  if (fd >= 0) close(fd);
  return NULL;
}

static void un_handler(int flags) {
  struct sigaction a;
  memset(&a, 0, sizeof a);
  a.sa_sigaction = on_unseen_signal;
  a.sa_flags = flags | SA_SIGINFO;
  sigemptyset(&a.sa_mask);
  sigaction(SIGUSR1, &a, NULL);
}

// One blocked call in a thread, a SIGUSR1 to that thread once it waits;
// after 1 s the call's wait is ended (a missed interruption shows as a
// success with the handler run late).
static void un_round(const char* what, int kind, int flags) {
  un_handler(flags);
  un_handled = un_code_tkill = un_ready = 0;
  un_kind = kind;
  printf("unseen: %s\n", what);
  if (kind == kSemop) {
    un_sem = semget(IPC_PRIVATE, 1, 0600);
    if (un_sem < 0) abort();
  } else if (kind == kFlock) {
    if (flock(un_lock_fd, LOCK_EX) != 0) abort();  // held through another open file
  } else if (kind == kWaitpid) {
    if (pipe(un_child_fd) != 0) abort();
    un_child = fork();
    if (un_child == 0) {
      char c;
      close(un_child_fd[1]);
      _exit(read(un_child_fd[0], &c, 1) == 1 ? 0 : 1);
    }
    close(un_child_fd[0]);
  }
  pthread_t t;
  pthread_create(&t, NULL, un_blocked, NULL);
  while (!un_ready) usleep(1000);
  usleep(300 * 1000);  // in the call by now
  pthread_kill(t, SIGUSR1);
  usleep(1000 * 1000);
  if (kind == kSemop) {
    struct sembuf op = {0, 1, 0};
    semop(un_sem, &op, 1);
    pthread_join(t, NULL);
    semctl(un_sem, 0, IPC_RMID);
  } else if (kind == kFlock) {
    flock(un_lock_fd, LOCK_UN);
    pthread_join(t, NULL);
  } else if (kind == kWaitpid) {
    if (write(un_child_fd[1], "x", 1) != 1) abort();
    pthread_join(t, NULL);
    close(un_child_fd[1]);
    waitpid(un_child, NULL, 0);  // (reaped already when the wait went on)
  } else {
    pthread_join(t, NULL);
  }
}

// A one-shot handler (SA_RESETHAND) due on a thread that computes, then
// reaches a delivery point: it runs once, and the process lives on.
static atomic_int un_computing;
static void* un_compute(void* arg) {
  (void)arg;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  un_computing = 1;
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 500 * 1000 * 1000L);
  sched_yield();
  printf("unseen:   computed, handler ran %d\n", un_handled);
  return NULL;
}

static int unseen(void) {
  char path[] = "/tmp/loom-unseen-XXXXXX";
  un_lock_fd = mkstemp(path);
  if (un_lock_fd < 0) abort();
  un_lock_path = path;
  un_round("semop, SA_RESTART", kSemop, SA_RESTART);
  un_round("flock, no SA_RESTART", kFlock, 0);
  un_round("flock, SA_RESTART", kFlock, SA_RESTART);
  un_round("waitpid, no SA_RESTART", kWaitpid, 0);
  un_round("waitpid, SA_RESTART", kWaitpid, SA_RESTART);
  un_round("syscall(SYS_nanosleep), SA_RESTART", kRawSleep, SA_RESTART);
  printf("unseen: a computing thread, SA_RESETHAND\n");
  un_handler(SA_RESETHAND);
  un_handled = un_code_tkill = 0;
  pthread_t t;
  pthread_create(&t, NULL, un_compute, NULL);
  while (!un_computing) usleep(1000);
  usleep(100 * 1000);
  pthread_kill(t, SIGUSR1);
  pthread_join(t, NULL);
  close(un_lock_fd);
  unlink(path);
  return 0;
}

// ---- timeo: SO_RCVTIMEO -------------------------------------------------------------------------

static int timeo_sock;
static void* timeo_thread(void* arg) {
  (void)arg;
  char c;
  io_ready = 1;
  long r = recv(timeo_sock, &c, 1, 0);
  int e = errno;
  printf("timeo:   recv %ld%s%s, handler ran %d\n", r, r < 0 && (e == EAGAIN || e == EWOULDBLOCK) ? " EAGAIN" : "",
         r < 0 && e == EINTR ? " EINTR" : "", io_handled);
  return NULL;
}

static int timeo(void) {
  handle(SIGUSR1, on_io_signal, SA_RESTART, 0);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
  timeo_sock = sv[0];
  for (int round = 0; round < 2; round++) {
    struct timeval tv = {round == 0 ? 0 : 5, round == 0 ? 300 * 1000 : 0};
    setsockopt(timeo_sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    printf("timeo: %s\n", round == 0 ? "a 0.3 s timeout, no signal" : "a 5 s timeout, a handler (SA_RESTART)");
    io_handled = 0;
    io_ready = 0;
    pthread_t t;
    pthread_create(&t, NULL, timeo_thread, NULL);
    while (!io_ready) usleep(1000);
    if (round == 1) {
      usleep(200 * 1000);
      pthread_kill(t, SIGUSR1);
    }
    pthread_join(t, NULL);
  }
  return 0;
}

// ---- leavemask: leaving a handler by cancellation ------------------------------------------------

static int lm_fd[2];
static atomic_int lm_in_handler, lm_alarms;
static void lm_handler(int sig) {
  (void)sig;
  lm_in_handler = 1;
  char c;
  if (read(lm_fd[0], &c, 1) == 1) lm_in_handler = 2;  // cancelled here
}
static void lm_alarm(int sig) {
  (void)sig;
  lm_alarms++;
}
// Starts fn's thread, sends it SIGUSR1, waits until its handler says it
// is in (*in_handler), lets it block there, cancels it and joins it: what
// it ended with.
static void* cancel_in_handler(void* (*fn)(void*), atomic_int* in_handler) {
  pthread_t t;
  pthread_create(&t, NULL, fn, NULL);
  usleep(50 * 1000);
  pthread_kill(t, SIGUSR1);
  while (!*in_handler) usleep(1000);
  usleep(50 * 1000);
  pthread_cancel(t);
  void* r;
  pthread_join(t, &r);
  return r;
}

static int lm_idle[2];
static void* lm_thread(void* arg) {
  (void)arg;
  char c;
  for (;;) (void)!read(lm_idle[0], &c, 1);  // (a wait the handler cuts short)
  return NULL;
}

static int leavemask(void) {
  handle(SIGUSR1, lm_handler, 0, 1);
  handle(SIGALRM, lm_alarm, 0, 0);
  if (pipe(lm_fd) != 0 || pipe(lm_idle) != 0) abort();
  for (int round = 0; round < 2; round++) {
    lm_in_handler = 0;
    void* r = cancel_in_handler(lm_thread, &lm_in_handler);
    printf("leavemask: round %d: cancelled in the handler %d\n", round, r == PTHREAD_CANCELED);
  }
  alarm(1);
  for (int i = 0; i < 30 && !lm_alarms; i++) usleep(100 * 1000);
  printf("leavemask: alarm handled %d\n", lm_alarms > 0);
  return 0;
}

// ---- altcancel: cancelled in a handler on the alternate stack ----------------------------------

static int ac_fd[2];
static atomic_int ac_in_handler, ac_cleanups;
static void ac_handler(int sig) {
  (void)sig;
  ac_in_handler = 1;
  char c;
  (void)!read(ac_fd[0], &c, 1);  // cancelled here
  ac_in_handler = 2;
}
static void ac_cleanup(int* which) { ac_cleanups |= *which; }
static void __attribute__((noinline)) ac_inner(void) {
  int which __attribute__((cleanup(ac_cleanup))) = 2;
  int idle[2];
  if (pipe(idle) != 0) abort();
  char c;
  for (;;) (void)!read(idle[0], &c, 1);  // (a wait the handler cuts short)
}
static void ac_outer_cleanup(void* arg) { ac_cleanups |= *(int*)arg; }
static void* ac_thread(void* arg) {
  (void)arg;
  stack_t ss;
  ss.ss_sp = malloc(1 << 16);
  ss.ss_size = 1 << 16;
  ss.ss_flags = 0;
  if (sigaltstack(&ss, NULL) != 0) abort();
  int one = 1;
  pthread_cleanup_push(ac_outer_cleanup, &one);
  ac_inner();
  pthread_cleanup_pop(0);
  return NULL;
}

static int altcancel(void) {
  handle(SIGUSR1, ac_handler, SA_ONSTACK, 0);
  if (pipe(ac_fd) != 0) abort();
  void* r = cancel_in_handler(ac_thread, &ac_in_handler);
  printf("altcancel: cancelled in the handler %d, handler returned %d\n", r == PTHREAD_CANCELED, ac_in_handler == 2);
  printf("altcancel: cleanup below the handler ran %d, pthread_cleanup_push's ran %d\n", (ac_cleanups & 2) != 0,
         (ac_cleanups & 1) != 0);
  return 0;
}

// ---- altstack: sigaltstack per thread -----------------------------------------------------------

static atomic_int alt_handled;
static void on_alt_signal(int sig) {
  (void)sig;
  alt_handled++;
}

static void show_alt(const char* who, size_t expect) {
  stack_t now;
  sigaltstack(NULL, &now);
  printf("altstack: %s: %s%s\n", who, (now.ss_flags & SS_DISABLE) ? "none" : "set",
         !(now.ss_flags & SS_DISABLE) && now.ss_size == expect ? ", its size" : "");
}

static void* alt_thread(void* arg) {
  (void)arg;
  show_alt("new thread", 0);
  stack_t ss;
  ss.ss_sp = malloc(65536);
  ss.ss_size = 65536;
  ss.ss_flags = 0;
  printf("altstack: new thread sets one: %d\n", sigaltstack(&ss, NULL));
  show_alt("new thread", 65536);
  raise(SIGUSR2);
  printf("altstack: SA_ONSTACK handler ran in the new thread: %d\n", alt_handled);
  ss.ss_flags = SS_DISABLE;
  sigaltstack(&ss, NULL);
  show_alt("new thread, after SS_DISABLE", 0);
  return NULL;
}

static int altstack(void) {
  stack_t ss, bad;
  ss.ss_sp = malloc(1 << 20);
  ss.ss_size = 1 << 20;
  ss.ss_flags = 0;
  printf("altstack: main sets one: %d\n", sigaltstack(&ss, NULL));
  bad = ss;
  bad.ss_size = 1024;
  errno = 0;
  printf("altstack: too small: %d ENOMEM %d\n", sigaltstack(&bad, NULL), errno == ENOMEM);
  bad.ss_size = 1 << 20;
  bad.ss_flags = 12345;
  errno = 0;
  printf("altstack: bad flags: %d EINVAL %d\n", sigaltstack(&bad, NULL), errno == EINVAL);
  struct sigaction old;
  handle(SIGUSR2, on_alt_signal, SA_ONSTACK, 0);
  sigaction(SIGUSR2, NULL, &old);
  printf("altstack: sigaction reports SA_ONSTACK: %d\n", (old.sa_flags & SA_ONSTACK) != 0);
  pthread_t t;
  pthread_create(&t, NULL, alt_thread, NULL);
  pthread_join(t, NULL);
  show_alt("main", (size_t)1 << 20);
  raise(SIGUSR2);
  printf("altstack: SA_ONSTACK handler ran in main: %d\n", alt_handled);
  return 0;
}

// ---- attrmask: pthread_attr_setsigmask_np -------------------------------------------------------

static void* attr_thread(void* arg) {
  (void)arg;
  printf("attrmask: thread: USR1 blocked %d, USR2 blocked %d\n", blocked(SIGUSR1), blocked(SIGUSR2));
  return NULL;
}

static int attrmask(void) {
  block(SIG_BLOCK, SIGUSR1);
  pthread_attr_t a;
  pthread_attr_init(&a);
  sigset_t m, got;
  printf("attrmask: none set: %d\n", pthread_attr_getsigmask_np(&a, &got) == PTHREAD_ATTR_NO_SIGMASK_NP);
  sigemptyset(&m);
  sigaddset(&m, SIGUSR2);
  printf("attrmask: set %d\n", pthread_attr_setsigmask_np(&a, &m));
  int g = pthread_attr_getsigmask_np(&a, &got);
  printf("attrmask: get %d, has USR2 %d\n", g, sigismember(&got, SIGUSR2));
  pthread_t t;
  pthread_create(&t, &a, attr_thread, NULL);
  pthread_join(t, NULL);
  pthread_attr_setsigmask_np(&a, NULL);
  printf("attrmask: cleared: %d\n", pthread_attr_getsigmask_np(&a, &got) == PTHREAD_ATTR_NO_SIGMASK_NP);
  pthread_create(&t, &a, attr_thread, NULL);  // the creator's mask
  pthread_join(t, NULL);
  pthread_attr_destroy(&a);
  return 0;
}

// ---- siginfo: the sender's siginfo reaches the handler -------------------------------------------

static volatile sig_atomic_t got_count, got_code, got_value;
static void si_handler(int sig, siginfo_t* info, void* ctx) {
  (void)sig;
  (void)ctx;
  got_code = info->si_code;
  got_value = info->si_value.sival_int;
  got_count = got_count + 1;
}
static void* si_sleeper(void* arg) {
  (void)arg;
  while (!got_count) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}
static int siginfo_case(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = si_handler;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGRTMIN, &sa, NULL);
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_SIGNAL;
  ev.sigev_signo = SIGRTMIN;
  ev.sigev_value.sival_int = 42;
  timer_t tm;
  if (timer_create(CLOCK_MONOTONIC, &ev, &tm) != 0) return 1;
  struct itimerspec it = {{0, 0}, {0, 10000000}};
  timer_settime(tm, 0, &it, NULL);
  while (!got_count) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  timer_delete(tm);
  printf("siginfo: timer: SI_TIMER %d, value %d\n", got_code == SI_TIMER, (int)got_value);
  got_count = 0;
  pthread_t t;
  pthread_create(&t, NULL, si_sleeper, NULL);
  union sigval v = {.sival_int = 7};
  pthread_sigqueue(t, SIGRTMIN, v);
  pthread_join(t, NULL);
  printf("siginfo: pthread_sigqueue: SI_QUEUE %d, value %d\n", got_code == SI_QUEUE, (int)got_value);
  return 0;
}

int main(int argc, char** argv) {
  self_path = "/proc/self/exe";
  static char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    self_path = exe;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 2 && strcmp(argv[1], "report") == 0) return report_mask(argv + 2);
  if (argc > 1 && strcmp(argv[1], "execpend-report") == 0) {
    execpend_take("after exec");
    return 0;
  }
  alarm(60);
  const char* c = argc > 1 ? argv[1] : "";
  if (strcmp(c, "lost") == 0) return lost(argc > 2 && strcmp(argv[2], "tgkill") == 0);
  if (strcmp(c, "hold") == 0) return hold();
  if (strcmp(c, "exec") == 0) return exec_case();
  if (strcmp(c, "execpend") == 0) return execpend();
  if (strcmp(c, "queue") == 0) return queue();
  if (strcmp(c, "samask") == 0) return samask();
  if (strcmp(c, "storm") == 0) return storm();
  if (strcmp(c, "eintr") == 0) return eintr();
  if (strcmp(c, "attrmask") == 0) return attrmask();
  if (strcmp(c, "siginfo") == 0) return siginfo_case();
  if (strcmp(c, "ioeintr") == 0) return ioeintr();
  if (strcmp(c, "altstack") == 0) return altstack();
  if (strcmp(c, "leavemask") == 0) return leavemask();
  if (strcmp(c, "altcancel") == 0) return altcancel();
  if (strcmp(c, "timeo") == 0) return timeo();
  if (strcmp(c, "unseen") == 0) return unseen();
  fprintf(stderr, "usage: signal_cases lost [tgkill]|hold|exec|execpend|queue|samask|storm|eintr|attrmask|siginfo|ioeintr|altstack|leavemask|timeo|altcancel|unseen\n");
  return 2;
}
