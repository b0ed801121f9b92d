/* mmsg.c — recvmmsg and sendmmsg, in plain C against glibc, on a datagram
 * socket pair. Built once, run as is and with LD_PRELOAD=libloom-pthread.so
 * on one processor (LOOM_PROCESSORS=1): stdout must be the same.
 *
 *   a reader thread blocks in recvmmsg for 4 datagrams that main sends two
 *   at a time, 50 ms apart; a ticker thread counts meanwhile. "the ticker
 *   ran while the reader waited" proves, on one processor, that the wait
 *   blocked a fibre and not the processor (glibc's threads tick anyway);
 *   the reader is still waiting after the first two (no MSG_WAITFORONE);
 *   MSG_DONTWAIT on an empty socket fails with EAGAIN;
 *   MSG_WAITFORONE returns what is there after the first;
 *   the timeout is looked at only after each datagram (recvmmsg(2), BUGS):
 *   a 100 ms timeout, one datagram at once and one 200 ms later gives 2;
 *   one sendmmsg of 1000 datagrams, more than the receiver's queue holds,
 *   sends all 1000 (a blocking socket waits for room), in order.
 *
 * On stderr only: "probe: loom blocks=N" when libloom is in the process
 * (dlsym), for the test to tell a loom run from a fall-through to glibc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

enum { MANY = 1000 };

static int sv[2]; /* [0] read, [1] written */
static atomic_int reader_in, reader_done;
static char got[4][16];
static int got_n = -2;

/* vec[i] points at buf[i] (size bytes each). */
static void setup(struct mmsghdr* vec, struct iovec* iov, char* buf, size_t size, int n) {
  memset(vec, 0, sizeof *vec * (size_t)n);
  for (int i = 0; i < n; ++i) {
    iov[i].iov_base = buf + (size_t)i * size;
    iov[i].iov_len = size;
    vec[i].msg_hdr.msg_iov = &iov[i];
    vec[i].msg_hdr.msg_iovlen = 1;
  }
}

static void* reader(void* arg) {
  (void)arg;
  struct mmsghdr vec[4];
  struct iovec iov[4];
  char buf[4][16];
  memset(buf, 0, sizeof buf);
  setup(vec, iov, &buf[0][0], sizeof buf[0], 4);
  atomic_store(&reader_in, 1);
  got_n = recvmmsg(sv[0], vec, 4, 0, NULL);
  if (got_n < 0) perror("reader: recvmmsg");
  for (int i = 0; i < got_n && i < 4; ++i) memcpy(got[i], buf[i], vec[i].msg_len < 15 ? vec[i].msg_len : 15);
  atomic_store(&reader_done, 1);
  return NULL;
}

/* Sends the strings as one sendmmsg. */
static int send_all(const char* const* s, int n) {
  struct mmsghdr vec[8];
  struct iovec iov[8];
  memset(vec, 0, sizeof vec);
  for (int i = 0; i < n; ++i) {
    iov[i].iov_base = (void*)s[i];
    iov[i].iov_len = strlen(s[i]);
    vec[i].msg_hdr.msg_iov = &iov[i];
    vec[i].msg_hdr.msg_iovlen = 1;
  }
  return sendmmsg(sv[1], vec, (unsigned)n, 0);
}

static void* later(void* arg) {
  usleep(200000);
  const char* s[] = {(const char*)arg};
  if (send_all(s, 1) != 1) fail("later: sendmmsg");
  return NULL;
}

static int drained;
static void* drain(void* arg) {
  (void)arg;
  struct mmsghdr vec[64];
  struct iovec iov[64];
  static int buf[64];
  setup(vec, iov, (char*)buf, sizeof buf[0], 64);
  int next = 0, in_order = 1, end = 0;
  while (!end) { /* until main's -1, sent after its sendmmsg returned */
    int n = recvmmsg(sv[0], vec, 64, MSG_WAITFORONE, NULL);
    if (n < 0) fail("drain: recvmmsg");
    for (int i = 0; i < n; ++i) {
      if (buf[i] == -1)
        end = 1;
      else
        in_order &= buf[i] == next++;
    }
    usleep(200); /* slower than the sender: its queue fills */
  }
  drained = in_order ? next : -1;
  return NULL;
}

int main(void) {
  if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0) fail("socketpair");
  pthread_t tk, rd;
  if (pthread_create(&tk, NULL, ticker, (void*)1000) || pthread_create(&rd, NULL, reader, NULL)) fail("pthread_create");

  /* 1. A reader blocked in recvmmsg for 4; two sendmmsg of 2. */
  while (!atomic_load(&reader_in)) usleep(1000);
  usleep(20000);
  long t0 = atomic_load(&ticks);
  usleep(50000);
  long t1 = atomic_load(&ticks);
  printf("reader waiting after 50 ms: %s; the ticker ran meanwhile: %s\n", atomic_load(&reader_done) ? "no" : "yes",
         t1 > t0 ? "yes" : "no");
  const char* first[] = {"d0", "d1"};
  const char* second[] = {"d2", "d3"};
  printf("sendmmsg: %d\n", send_all(first, 2));
  usleep(50000);
  printf("reader waiting after 2 of 4: %s\n", atomic_load(&reader_done) ? "no" : "yes");
  printf("sendmmsg: %d\n", send_all(second, 2));
  pthread_join(rd, NULL);
  printf("reader got %d:", got_n);
  for (int i = 0; i < got_n && i < 4; ++i) printf(" %s", got[i]);
  printf("\n");

  struct mmsghdr vec[8];
  struct iovec iov[8];
  char buf[8][16];
  setup(vec, iov, &buf[0][0], sizeof buf[0], 8);

  /* 2. MSG_DONTWAIT on an empty socket. */
  errno = 0;
  int r = recvmmsg(sv[0], vec, 8, MSG_DONTWAIT, NULL);
  printf("MSG_DONTWAIT on empty: %d %s\n", r, errno == EAGAIN ? "EAGAIN" : strerror(errno));

  /* 3. MSG_WAITFORONE: what is there after the first. */
  const char* three[] = {"a", "b", "c"};
  printf("sendmmsg: %d\n", send_all(three, 3));
  printf("MSG_WAITFORONE of 8: %d\n", recvmmsg(sv[0], vec, 8, MSG_WAITFORONE, NULL));

  /* 4. The timeout, looked at after each datagram. */
  const char* one[] = {"t0"};
  send_all(one, 1);
  pthread_t lt;
  if (pthread_create(&lt, NULL, later, "t1")) fail("pthread_create");
  struct timespec tmo = {0, 100000000};
  r = recvmmsg(sv[0], vec, 8, 0, &tmo);
  pthread_join(lt, NULL);
  printf("timeout 100 ms, a datagram now and one at 200 ms: %d, %ld.%09ld left\n", r, (long)tmo.tv_sec, tmo.tv_nsec);

  /* 5. One sendmmsg of more than the receiver's queue holds. */
  static int many[MANY];
  static struct mmsghdr mvec[MANY];
  static struct iovec miov[MANY];
  for (int i = 0; i < MANY; ++i) {
    many[i] = i;
    miov[i].iov_base = &many[i];
    miov[i].iov_len = sizeof many[i];
    mvec[i].msg_hdr.msg_iov = &miov[i];
    mvec[i].msg_hdr.msg_iovlen = 1;
  }
  pthread_t dr;
  if (pthread_create(&dr, NULL, drain, NULL)) fail("pthread_create");
  r = sendmmsg(sv[1], mvec, MANY, 0);
  int end = -1;
  if (send(sv[1], &end, sizeof end, 0) != sizeof end) fail("send");
  pthread_join(dr, NULL);
  printf("sendmmsg of %d: %d; the reader got %d in order\n", MANY, r, drained);

  atomic_store(&ticker_stop, 1);
  pthread_join(tk, NULL);
  print_loom_probe();
  return 0;
}
