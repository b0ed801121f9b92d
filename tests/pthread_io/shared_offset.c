/* shared_offset.c — a read(2) of a regular file is atomic with respect to
 * the file's offset and whole (issue 35, item 1). 4 threads read 8 KiB at a
 * time from one descriptor of a 16 MiB file whose every 4-byte word holds
 * its own index, so each read can be checked: 8 KiB back (the file is a
 * multiple of it), contiguous words, at a multiple of 8 KiB, and every
 * chunk read exactly once.
 *   patchy: only the first page of every 8 KiB is in the page cache (the
 *           cache emptied with fdatasync + POSIX_FADV_DONTNEED, the pages
 *           read back with readahead off): loom read the cached page in
 *           place, then the rest on the offload cluster, a second call that
 *           moved the shared offset on its own — other threads' reads fell
 *           between (about one read in five came back torn).
 *   cached: the whole file in the cache: the in-place fast path, under the
 *           same contention.
 * The file is made in the working directory (a disk file system: tmpfs has
 * no uncached pages). stdout is the same on glibc and preloaded (same.sh);
 * alarm() bounds a run. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kFile = 16 << 20, kChunk = 8192, kChunks = kFile / kChunk, kThreads = 4 };

static int fd;
static atomic_int seen[kChunks];
static atomic_long reads, short_reads, torn;

static void* reader(void* arg) {
  (void)arg;
  static _Thread_local uint32_t buf[kChunk / 4];
  for (;;) {
    ssize_t n = read(fd, buf, kChunk);
    if (n == 0) break;
    if (n < 0) {
      perror("read");
      exit(1);
    }
    atomic_fetch_add(&reads, 1);
    if (n != kChunk) atomic_fetch_add(&short_reads, 1);
    int ok = buf[0] % (kChunk / 4) == 0;
    for (ssize_t i = 1; ok && i < n / 4; ++i) ok = buf[i] == buf[0] + (uint32_t)i;
    if (!ok) {
      atomic_fetch_add(&torn, 1);
      continue;
    }
    if (n == kChunk) atomic_fetch_add(&seen[buf[0] / (kChunk / 4)], 1);
  }
  return NULL;
}

static void run(const char* path, const char* what, int patchy) {
  if (patchy) {
    int c = open(path, O_RDONLY);
    if (c < 0 || fdatasync(c) != 0 || posix_fadvise(c, 0, 0, POSIX_FADV_DONTNEED) != 0) {
      perror("drop the cache");
      exit(1);
    }
    posix_fadvise(c, 0, 0, POSIX_FADV_RANDOM); /* no readahead: one page each */
    char page[4096];
    for (long off = 0; off < kFile; off += kChunk)
      if (pread(c, page, sizeof page, off) != (ssize_t)sizeof page) {
        perror("pread");
        exit(1);
      }
    close(c);
  } else {
    int c = open(path, O_RDONLY);
    static char all[1 << 20];
    while (read(c, all, sizeof all) > 0) {
    }
    close(c);
  }
  fd = open(path, O_RDONLY);
  if (fd < 0) {
    perror("open");
    exit(1);
  }
  if (patchy) posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM); /* the pattern stays as it is */
  for (int i = 0; i < kChunks; ++i) atomic_store(&seen[i], 0);
  atomic_store(&reads, 0);
  atomic_store(&short_reads, 0);
  atomic_store(&torn, 0);
  pthread_t t[kThreads];
  for (int i = 0; i < kThreads; ++i)
    if (pthread_create(&t[i], NULL, reader, NULL) != 0) exit(1);
  for (int i = 0; i < kThreads; ++i) pthread_join(t[i], NULL);
  close(fd);
  int once = 1;
  for (int i = 0; i < kChunks; ++i) once &= atomic_load(&seen[i]) == 1;
  printf("%s: %ld reads, %ld short, %ld torn, every chunk read once: %s\n", what, atomic_load(&reads),
         atomic_load(&short_reads), atomic_load(&torn), once ? "yes" : "NO");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  alarm(100);
  char path[] = "shared_offset.XXXXXX";
  int w = mkstemp(path);
  if (w < 0) {
    perror("mkstemp");
    return 1;
  }
  static uint32_t words[1 << 18];
  for (uint32_t base = 0; base < kFile / 4; base += 1 << 18) {
    for (uint32_t i = 0; i < 1 << 18; ++i) words[i] = base + i;
    if (write(w, words, sizeof words) != (ssize_t)sizeof words) {
      perror("write");
      return 1;
    }
  }
  close(w);
  run(path, "patchy", 1);
  run(path, "cached", 0);
  unlink(path);
  return 0;
}
