/* flags.c — descriptors keep the flags the program set (issue 24, item 2).
 * A plain glibc program: a thread blocks reading a pipe and a socket while
 * main writes to them later; fcntl(F_GETFL) and the kernel's own record of
 * the open file (/proc/self/fdinfo, which no interposer sees) must say
 * "blocking" before and after; O_NONBLOCK set by the program gives EAGAIN
 * and shows in both; a child that is not preloaded inherits the flags the
 * program set, and writes 1,000,000 bytes through a blocking pipe the
 * parent drains slowly; a thread's blocking write of 1,000,000 bytes into a
 * pipe or a socket is whole. Same output on glibc and preloaded (same.sh); with
 * LOOM_PROCESSORS=1 a read that blocked its processor would hang (the
 * test's timeout). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* The kernel's O_NONBLOCK on fd's open file, from /proc/self/fdinfo. */
static int kernel_nonblock(int fd) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  int nb = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long fl;
    if (sscanf(line, "flags: %lo", &fl) == 1) nb = (fl & O_NONBLOCK) != 0;
  }
  fclose(f);
  return nb;
}

static void show(const char* what, int fd) {
  int fl = fcntl(fd, F_GETFL);
  printf("%s: fcntl nonblock=%d kernel nonblock=%d\n", what, fl < 0 ? -1 : (fl & O_NONBLOCK) != 0, kernel_nonblock(fd));
}

static void* reader(void* arg) {
  int fd = *(int*)arg;
  char c = 0;
  ssize_t r = read(fd, &c, 1);
  printf("reader: read %zd '%c'\n", r, r == 1 ? c : '?');
  return NULL;
}

/* A blocking read on another thread, then main's write after a while. */
static void blocking_read(const char* what, int rd, int wr) {
  show(what, rd);
  pthread_t t;
  pthread_create(&t, NULL, reader, &rd);
  usleep(100000);
  if (write(wr, "x", 1) != 1) printf("%s: write failed: %s\n", what, strerror(errno));
  pthread_join(t, NULL);
  show(what, rd);
  show(what, wr);
}

/* A blocking write is whole: 1,000,000 bytes in one call, into a pipe or a
 * socket the reader drains slowly. */
static void* big_writer(void* arg) {
  static char big[1000000];
  int fd = *(int*)arg;
  ssize_t r = write(fd, big, sizeof big);
  printf("big write: %zd\n", r);
  close(fd);
  return NULL;
}

static void whole_write(const char* what, int rd, int wr) {
  pthread_t t;
  pthread_create(&t, NULL, big_writer, &wr);
  char buf[4096];
  long total = 0;
  ssize_t r;
  usleep(50000);
  while ((r = read(rd, buf, sizeof buf)) > 0) {
    total += r;
    if (total % 65536 < 4096) usleep(1000);
  }
  pthread_join(t, NULL);
  close(rd);
  printf("%s: read %ld bytes\n", what, total);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0) {  /* exec'd, not preloaded */
    show("child stdin", 0);
    return 0;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  int p[2], s[2];
  if (pipe(p) != 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, s) != 0) return 1;
  blocking_read("pipe", p[0], p[1]);
  blocking_read("socket", s[0], s[1]);
  int w[2];
  if (pipe(w) != 0) return 1;
  whole_write("whole pipe write", w[0], w[1]);
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, w) != 0) return 1;
  whole_write("whole socket write", w[0], w[1]);

  /* The program's own O_NONBLOCK: EAGAIN, and both views show it. */
  fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
  char c;
  ssize_t r = read(p[0], &c, 1);
  printf("nonblocking read: %zd %s\n", r, r < 0 && errno == EAGAIN ? "EAGAIN" : "?");
  show("pipe set", p[0]);
  fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) & ~O_NONBLOCK);
  show("pipe cleared", p[0]);

  /* A child that is not preloaded sees the flags the program set. */
  pid_t pid = fork();
  if (pid == 0) {
    unsetenv("LD_PRELOAD");
    dup2(p[0], 0);
    execl("/proc/self/exe", argv[0], "child", (char*)NULL);
    _exit(127);
  }
  int st;
  waitpid(pid, &st, 0);

  /* A pipeline: a child that is not preloaded writes 1,000,000 bytes into
   * a pipe the parent drains slowly (a non-blocking pipe would fail it with
   * EAGAIN as soon as the pipe is full). */
  int q[2];
  if (pipe(q) != 0) return 1;
  pid = fork();
  if (pid == 0) {
    unsetenv("LD_PRELOAD");
    dup2(q[1], 1);
    close(q[0]);
    close(q[1]);
    execlp("head", "head", "-c", "1000000", "/dev/zero", (char*)NULL);
    _exit(127);
  }
  close(q[1]);
  show("pipeline", q[0]);
  char buf[4096];
  long total = 0;
  usleep(50000);
  while ((r = read(q[0], buf, sizeof buf)) > 0) {
    total += r;
    if (total % 65536 < 4096) usleep(1000);
  }
  waitpid(pid, &st, 0);
  printf("pipeline: read %ld bytes, child exit %d\n", total, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  return 0;
}
