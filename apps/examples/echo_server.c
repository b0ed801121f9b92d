/* echo_server.c — a thread-per-connection TCP echo server in plain POSIX:
 * socket, bind, listen, accept, and for each connection a detached thread
 * that reads and writes back until end of file.
 *
 *   echo_server_pthread [PORT]   kernel threads, blocking system calls
 *   echo_server_loom [PORT]      the same source built with
 *                                -include loom/pthread.h -DLOOM_PTHREAD_IO:
 *                                each connection is a fibre, and its reads
 *                                and writes block the fibre, not the processor
 *
 * It listens on 127.0.0.1 (PORT 0, the default, picks a free port) and
 * prints "listening on port N" once it accepts connections. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static void* serve(void* arg) {
  int fd = (int)(intptr_t)arg;
  char buf[16384];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || write_all(fd, buf, (size_t)n) != 0) break;
  }
  close(fd);
  return NULL;
}

int main(int argc, char** argv) {
  int port = argc > 1 ? atoi(argv[1]) : 0;
  signal(SIGPIPE, SIG_IGN); /* a peer that left must not kill the server */

  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  if (lfd < 0) {
    perror("echo_server: socket");
    return 1;
  }
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons((unsigned short)port);
  socklen_t len = sizeof addr;
  // The system's largest backlog (net.core.somaxconn, 4096 here), as the
  // web server's: tests open 10,000 connections at once, and with 1,024
  // the queue overflowed whenever the accepting fibre waited its turn
  // behind the connections' own (SYN cookies, then resets: 1 run in 4).
  if (bind(lfd, (struct sockaddr*)&addr, sizeof addr) != 0 || listen(lfd, SOMAXCONN) != 0 ||
      getsockname(lfd, (struct sockaddr*)&addr, &len) != 0) {
    perror("echo_server: bind/listen");
    return 1;
  }
  printf("listening on port %d\n", ntohs(addr.sin_port));
  fflush(stdout);

  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  for (;;) {
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      perror("echo_server: accept");
      return 1;
    }
    pthread_t t;
    if (pthread_create(&t, &attr, serve, (void*)(intptr_t)fd) != 0) {
      fprintf(stderr, "echo_server: no thread for a connection\n");
      close(fd);
    }
  }
}
