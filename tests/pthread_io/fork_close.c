/* fork_close.c — a fork child closing its copies of descriptors must not
 * disturb the parent. A thread waits to read a socket (under loom: a fibre
 * whose socket is in the cluster's epoll set, which the child shares as an
 * open file); the child closes the socket and a dup of it, and exits; then
 * the parent writes, and the reader must wake. alarm() turns a lost wake-up
 * into a failure rather than a hang. Run preloaded by the test; plain glibc
 * gives the same output. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int sv[2];
static char got = '?';

static void* reader(void* arg) {
  (void)arg;
  if (read(sv[0], &got, 1) != 1) got = '!';
  return NULL;
}

int main(void) {
  alarm(20);
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  int d = dup(sv[0]);
  pthread_t t;
  if (pthread_create(&t, NULL, reader, NULL) != 0) return 1;
  usleep(50000); /* the reader is waiting now */
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    close(d);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (write(sv[1], "f", 1) != 1) return 1;
  pthread_join(t, NULL);
  printf("child exited %d; the reader got '%c' after the child closed its copies\n", WEXITSTATUS(status), got);
  return 0;
}
