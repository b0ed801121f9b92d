/* close_in_handler.c — a signal handler closes a socket another thread is
 * blocked reading (issue 25, bug 7), in plain C against glibc. Run by
 * close_in_handler.sh as is and under LD_PRELOAD, on one processor: stdout
 * must be the same, and under loom the close must not have switched fibres
 * inside the handler.
 *
 * The handler (SIGALRM, from setitimer) lands while main is blocked in
 * read() on a pipe: under loom, most often while the processor sleeps in
 * the poller, with the poller's reaper flag held below the handler. On
 * io_uring the reader's poll holds the socket, and close used to wait for
 * its removal up to 200 ms, yielding and sleeping as a fibre — inside the
 * handler, on top of the interrupted idle loop. A ticker thread ticks every
 * 500 us: on one processor it cannot tick while the handler runs unless the
 * handler's close let other fibres run. The count goes to stderr (glibc's
 * own threads tick meanwhile, so it is not part of stdout). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common.h"

enum { ROUNDS = 5 };

static int sock[2], wake[2];
static long during_close = -1;
static int close_rc = -2;

static void on_alarm(int sig) {
  int saved = errno;
  (void)sig;
  long t0 = atomic_load(&ticks);
  close_rc = close(sock[0]);
  during_close = atomic_load(&ticks) - t0;
  char b = 'a';
  if (write(wake[1], &b, 1) != 1) _exit(3);
  errno = saved;
}

static void* reader(void* arg) {
  (void)arg;
  char c;
  (void)read(sock[0], &c, 1); /* glibc: the peer's byte; loom: EBADF when the handler closes it */
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  pthread_t tk;
  if (pthread_create(&tk, NULL, ticker, (void*)500)) fail("pthread_create");
  if (pipe(wake) != 0) fail("pipe");
  if (signal(SIGALRM, on_alarm) == SIG_ERR) fail("signal");
  long most = 0;
  for (int round = 0; round < ROUNDS; ++round) {
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sock) != 0) fail("socketpair");
    pthread_t r;
    if (pthread_create(&r, NULL, reader, NULL)) fail("pthread_create");
    usleep(20000); /* the reader blocks in read */
    struct itimerval it = {{0, 0}, {0, 20000}};
    setitimer(ITIMER_REAL, &it, NULL);
    char b = 0;
    ssize_t n = read(wake[0], &b, 1);
    /* Ends glibc's read, which holds the closed socket open; under loom the
     * close woke the reader (EBADF) and the socket is gone: EPIPE. */
    (void)send(sock[1], "z", 1, MSG_NOSIGNAL);
    pthread_join(r, NULL);
    close(sock[1]);
    printf("round %d: woken %zd '%c', the handler's close returned %d\n", round, n, b, close_rc);
    if (during_close > most) most = during_close;
  }
  atomic_store(&ticker_stop, 1);
  pthread_join(tk, NULL);
  if (dlsym(RTLD_DEFAULT, "loom_io_stats")) fprintf(stderr, "probe: most ticks while the handler closed: %ld\n", most);
  print_loom_probe();
  return 0;
}
