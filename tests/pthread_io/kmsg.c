/* kmsg.c — a character device that blocks is not read in place (issue 35,
 * item 3). A thread reads /dev/kmsg from its end, which waits for the next
 * kernel record; main sleeps and exits. On one processor (LOOM_PROCESSORS=1)
 * a read made in place holds the processor and main's sleep never ends
 * (alarm() then fails the run). Where /dev/kmsg cannot be read (no
 * CAP_SYSLOG, dmesg_restrict) the test says so and is skipped. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static void* read_kmsg(void* arg) {
  static char buf[8192];
  ssize_t r = read(*(int*)arg, buf, sizeof buf); /* waits for the next record */
  (void)r;
  return NULL;
}

int main(void) {
  alarm(10);
  int fd = open("/dev/kmsg", O_RDONLY);
  if (fd < 0 || lseek(fd, 0, SEEK_END) < 0) {
    printf("kmsg: cannot read /dev/kmsg here: skipped\n");
    return 0;
  }
  /* Something readable in place still is: /dev/zero and /dev/null. */
  int z = open("/dev/zero", O_RDONLY), n = open("/dev/null", O_RDONLY);
  char b[16] = {1};
  if (read(z, b, sizeof b) != (ssize_t)sizeof b || b[0] != 0 || read(n, b, sizeof b) != 0) {
    printf("kmsg: WRONG /dev/zero or /dev/null\n");
    return 1;
  }
  pthread_t t;
  pthread_create(&t, NULL, read_kmsg, &fd);
  usleep(300000);
  printf("kmsg: main slept while a thread waited on /dev/kmsg\n");
  fflush(stdout);
  _exit(0); /* the reader may wait for ever */
}
