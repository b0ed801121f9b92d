/* tests/capi/echo_client.c PORT — the client test both builds of
 * apps/examples/echo_server must pass: many connections open at once, each
 * echoing its own messages, and one connection streaming 4 MiB while it
 * reads the echo back (a server that blocked a processor per connection
 * with few processors, or lost a wake-up, would hang: alarm() fails it). */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "ctest.h"

enum { CONNECTIONS = 200, ROUNDS = 3, STREAM = 4 << 20 };

static int port;

static int dial(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(fd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((unsigned short)port);
  CHECK_EQ(connect(fd, (struct sockaddr*)&a, sizeof a), 0);
  return fd;
}

static void read_exactly(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    CHECK(r > 0);
    p += r;
    n -= (size_t)r;
  }
}

static void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    CHECK(w > 0);
    p += w;
    n -= (size_t)w;
  }
}

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + (i >> 12)); }

static void* stream_writer(void* arg) {
  int fd = *(int*)arg;
  static char buf[65536];
  for (size_t off = 0; off < STREAM; off += sizeof buf) {
    for (size_t i = 0; i < sizeof buf; ++i) buf[i] = (char)pattern(off + i);
    write_all(fd, buf, sizeof buf);
  }
  shutdown(fd, SHUT_WR);
  return NULL;
}

int main(int argc, char** argv) {
  CHECK(argc == 2);
  port = atoi(argv[1]);
  alarm(60);

  /* Many connections at once: every one is served concurrently. */
  static int fd[CONNECTIONS];
  for (int i = 0; i < CONNECTIONS; ++i) fd[i] = dial();
  for (int r = 0; r < ROUNDS; ++r) {
    char msg[64], back[64];
    for (int i = CONNECTIONS - 1; i >= 0; --i) {
      int n = snprintf(msg, sizeof msg, "round %d connection %d", r, i);
      write_all(fd[i], msg, (size_t)n);
    }
    for (int i = 0; i < CONNECTIONS; ++i) {
      int n = snprintf(msg, sizeof msg, "round %d connection %d", r, i);
      read_exactly(fd[i], back, (size_t)n);
      CHECK(memcmp(msg, back, (size_t)n) == 0);
    }
  }
  for (int i = 0; i < CONNECTIONS; ++i) {
    shutdown(fd[i], SHUT_WR);
    char c;
    CHECK_EQ(read(fd[i], &c, 1), 0); /* the server closes after end of file */
    close(fd[i]);
  }

  /* A stream larger than the socket buffers, read back as it is written. */
  int s = dial();
  pthread_t w;
  CHECK_EQ(pthread_create(&w, NULL, stream_writer, &s), 0);
  static char buf[65536];
  size_t got = 0;
  ssize_t r;
  while ((r = read(s, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < r; ++i) CHECK_EQ((unsigned char)buf[i], pattern(got + (size_t)i));
    got += (size_t)r;
  }
  CHECK_EQ(r, 0);
  CHECK_EQ(got, STREAM);
  CHECK_EQ(pthread_join(w, NULL), 0);
  close(s);
  printf("echo_client: ok\n");
  return 0;
}
