/* stale_fd.c — a number whose file changes behind loom's close() and dup2()
 * is called as its new file (issue 35; the differential tester's
 * `closerange`, `rawclose` and `rawdup`). loom records what each number
 * refers to (a socket: recv and send; a pipe: RWF_NOWAIT; a device read in
 * place); every route that closes or replaces a number must drop the
 * record, or the next file under the number is called the wrong way:
 *  - closefrom, close_range (glibc's, and by syscall), then the number
 *    reused: /dev/full written through a former pipe's number says ENOSPC
 *    (loom said EOPNOTSUPP: pwritev2 with RWF_NOWAIT);
 *  - syscall(SYS_close), then the number reused: /dev/null read, and written
 *    though opened read-only, through a former socket's number: 0 and EBADF
 *    (loom: ENOTSOCK for both);
 *  - syscall(SYS_dup3) and syscall(SYS_dup2) of a pipe's end over a live
 *    socket's number: a write goes into the pipe (loom: ENOTSOCK), a thread
 *    reading the number waits for the pipe's byte;
 *  - a route no wrapper sees: fclose of an fdopen'd socket (stdio closes it
 *    inside libc), then the number reused: /dev/null read gives 0 (the
 *    record's wrong route fails with ENOTSOCK, which loom checks and then
 *    calls again; rt::io_stale); a regular file's, an eventfd under its
 *    number: 8 bytes (ESPIPE);
 *  - CLOSE_RANGE_CLOEXEC closes nothing: the pipe is still written.
 * Same output as is and preloaded (tests/pthread_proc/same.sh), on one
 * processor; alarm() bounds a hang. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char* res(long r, int e) {
  static char b[64];
  if (r >= 0)
    snprintf(b, sizeof b, "%ld", r);
  else
    snprintf(b, sizeof b, "-1 %s", strerrorname_np(e));
  return b;
}

/* path opened under the number `want` (the lowest free one), or the run fails. */
static int reopen(const char* path, int flags, int want) {
  int fd = open(path, flags);
  if (fd != want) {
    printf("WRONG: %s opened as %d, not %d\n", path, fd, want);
    exit(1);
  }
  return fd;
}

/* A pipe whose write end loom has used (recorded as a pipe). */
static void used_pipe(int p[2]) {
  char c;
  if (pipe(p) != 0 || write(p[1], "x", 1) != 1 || read(p[0], &c, 1) != 1) {
    perror("pipe");
    exit(1);
  }
}

/* A socket pair whose first end loom has used (recorded as a socket). */
static void used_socket(int sv[2]) {
  char c;
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || write(sv[1], "x", 1) != 1 || read(sv[0], &c, 1) != 1) {
    perror("socketpair");
    exit(1);
  }
}

/* The pipe's write end closed by `how`, /dev/full opened under its number. */
static void full_after(const char* how) {
  int p[2];
  used_pipe(p);
  int fd = p[1];
  long r = 0;
  if (!strcmp(how, "closefrom"))
    closefrom(fd); /* (first: nothing of loom's is open above it yet) */
  else if (!strcmp(how, "close_range"))
    r = close_range(fd, fd, 0);
  else if (!strcmp(how, "close_range(UNSHARE)"))
    r = close_range(fd, fd, CLOSE_RANGE_UNSHARE);
  else
    r = syscall(SYS_close_range, fd, fd, 0);
  int full = reopen("/dev/full", O_WRONLY, fd);
  errno = 0;
  long w = write(full, "abc", 3);
  printf("%s of a pipe's end, /dev/full under its number: close %ld, write %s\n", how, r, res(w, errno));
  close(full);
  close(p[0]);
}

struct reader {
  int fd;
  long r;
  char c;
};

static void* read_one(void* arg) {
  struct reader* rd = arg;
  rd->r = read(rd->fd, &rd->c, 1);
  return NULL;
}

int main(void) {
  alarm(20);
  setvbuf(stdout, NULL, _IOLBF, 0);

  full_after("closefrom");
  full_after("close_range");
  full_after("syscall(close_range)");
  full_after("close_range(UNSHARE)");

  /* syscall(SYS_close) of a socket, /dev/null read-only under its number. */
  int sv[2];
  used_socket(sv);
  long r = syscall(SYS_close, sv[0]);
  int null = reopen("/dev/null", O_RDONLY, sv[0]);
  char buf[8];
  errno = 0;
  long rd = read(null, buf, sizeof buf);
  int erd = errno;
  errno = 0;
  long wr = write(null, "x", 1);
  printf("syscall(close) of a socket, /dev/null under its number: close %ld, read %s,", r, res(rd, erd));
  printf(" write %s\n", res(wr, errno));
  close(null);
  close(sv[1]);

  /* A pipe's write end dup'd over a live socket's number by syscall. */
  long nums[] = {SYS_dup3, SYS_dup2};
  const char* names[] = {"syscall(dup3)", "syscall(dup2)"};
  for (int i = 0; i < 2; ++i) {
    int p[2];
    used_socket(sv);
    used_pipe(p);
    r = nums[i] == SYS_dup3 ? syscall(SYS_dup3, p[1], sv[0], 0) : syscall(nums[i], p[1], sv[0]);
    errno = 0;
    long w0 = write(sv[0], "", 0), w1 = write(sv[0], "y", 1);
    int e = errno;
    char c = '-';
    struct pollfd q = {p[0], POLLIN, 0};
    long got = poll(&q, 1, 0) == 1 ? read(p[0], &c, 1) : -1; /* (-1: the write went elsewhere) */
    printf("%s of a pipe's end over a socket's number: %s, write 0 -> %ld, 1 -> %s, the pipe got %ld '%c'\n", names[i],
           r == sv[0] ? "the number asked" : "WRONG", w0, res(w1, e), got, c);
    /* And its read end over the socket's peer: a thread's read waits for the pipe. */
    syscall(SYS_dup3, p[0], sv[1], 0);
    struct reader rdr = {sv[1], -2, '-'};
    pthread_t t;
    pthread_create(&t, NULL, read_one, &rdr);
    usleep(50000);
    if (write(p[1], "z", 1) != 1) perror("write");
    pthread_join(t, NULL);
    printf("%s: a thread's read of the number got %ld '%c'\n", names[i], rdr.r, rdr.c);
    close(sv[0]);
    close(sv[1]);
    close(p[0]);
    close(p[1]);
  }

  /* stdio closes an fdopen'd socket inside libc: no wrapper sees it. */
  used_socket(sv);
  FILE* f = fdopen(sv[0], "r");
  fclose(f);
  null = reopen("/dev/null", O_RDONLY, sv[0]);
  errno = 0;
  rd = read(null, buf, sizeof buf);
  printf("fclose(fdopen(socket)), /dev/null under its number: read %s\n", res(rd, errno));
  close(null);
  close(sv[1]);

  /* The same for a regular file, whose reads loom probes at the offset
   * (read_in_place), and an eventfd under its number: the probe's preadv2
   * fails with ESPIPE. */
  char path[] = "/tmp/stale_fd.XXXXXX";
  int file = mkstemp(path);
  static char page[4096];
  if (file < 0 || write(file, page, sizeof page) != (ssize_t)sizeof page) perror("mkstemp");
  unlink(path);
  if (lseek(file, 0, SEEK_SET) != 0 || read(file, page, 100) != 100) perror("read");
  fclose(fdopen(file, "r"));
  int ev = eventfd(5, 0);
  if (ev != file) printf("WRONG: the eventfd is %d, not %d\n", ev, file);
  uint64_t v = 0;
  errno = 0;
  rd = read(ev, &v, sizeof v);
  printf("fclose(fdopen(regular file)), an eventfd under its number: read %s, value %llu\n", res(rd, errno),
         (unsigned long long)v);
  close(ev);

  /* CLOSE_RANGE_CLOEXEC closes nothing. */
  int p[2];
  used_pipe(p);
  r = close_range(p[1], p[1], CLOSE_RANGE_CLOEXEC);
  errno = 0;
  long w = write(p[1], "q", 1);
  printf("close_range(CLOEXEC) of a pipe's end: %ld, then write %s, FD_CLOEXEC %d\n", r, res(w, errno),
         fcntl(p[1], F_GETFD) & FD_CLOEXEC);
  return 0;
}
