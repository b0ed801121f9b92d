/* fork_pipe.c — pipe, fork, dup2 onto standard output, exec: the exec'd
 * program (head, which knows nothing of loom) writes 1,000,000 bytes into a
 * pipe the parent drains slowly. loom must leave the program's pipe
 * blocking (io/io.cpp, the descriptor rule), or head fails with EAGAIN once
 * the pipe is full. Same output on glibc and preloaded. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
  int p[2];
  if (pipe(p) != 0) return 1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    execlp("head", "head", "-c", "1000000", "/dev/zero", (char*)NULL);
    _exit(127);
  }
  close(p[1]);
  char buf[4096];
  long total = 0;
  ssize_t r;
  usleep(50000); /* let the pipe fill */
  while ((r = read(p[0], buf, sizeof buf)) > 0) {
    total += r;
    if (total % 65536 < 4096) usleep(1000);
  }
  int st;
  waitpid(pid, &st, 0);
  printf("read %ld bytes, child exit %d\n", total, WEXITSTATUS(st));
  return 0;
}
