/* exec.h — the executor's shared parts (exec_*.c, scenario_main.c). */
#ifndef FUZZ_PRELOAD_EXEC_H
#define FUZZ_PRELOAD_EXEC_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "scenario.h"

extern int fdof[kSlots];     /* the number each slot holds, or -1 */
extern int keeper[kMaxOfd];  /* per file: a hidden O_RDWR descriptor of it (the file is unlinked) */
extern const char* workdir;  /* FIFOs and files are made here (a disk file system: the cache can miss) */
extern const char* self_exe; /* this program, for exec */
extern int step_index;       /* the step running, for out() */

/* One line of the observable output, "#<step> <op> <text>", written whole. */
void out(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/* "3" or "-1 EAGAIN" */
const char* res(long r, int err);
uint32_t digest(const void* p, size_t n);
void fill_bytes(uint8_t* b, long n, uint32_t r);
uint32_t file_word(int file, long w);
void file_bytes(uint8_t* b, long n, int file, long off);
int file_bytes_ok(const uint8_t* b, long n, int file, long off);
/* A thread with the test signals blocked (helpers never take a signal meant for another thread). */
int spawn(pthread_t* t, void* (*fn)(void*), void* arg);
void test_signals(void* set); /* sigset_t*: SIGUSR1, SIGUSR2, SIGRTMIN+1, SIGCHLD */
/* Waits (bounded) until fd has want bytes to read: TCP and ptys deliver later than the write returns. */
void settle_bytes(int fd, long want);
/* Waits (bounded) until fd's peer has shut down (TCP's FIN). */
void settle_hup(int fd);
int slot_of(const Model* m, int ofd); /* an open slot of that description, or -1 */
void settle_peer(const Model* after, int ofd);
long now_ms(void);
extern volatile int sigpipes;

int exec_make(const Model* m, const Step* st);     /* exec_make.c: 1 if it was a step that makes descriptors */
void exec_io(const Model* m, const Step* st);      /* exec_io.c: the other descriptor steps */
void exec_futex(const Step* st);                   /* exec_futex.c */
void exec_signal(const Step* st);                  /* exec_signal.c */
void exec_episode(const Model* m, const Step* st); /* exec_episodes.c: shared reads, children, threads, sleeps */
void evict(int file, int patchy, long size); /* a file's pages out of the cache (patchy: all but the first of 8 KiB) */
void install_handlers(void);
void map_shared_words(void);
/* --child: what an exec'd child does with a descriptor it inherited (OP_FORK). */
void child_op(int op, int fd, long n, uint32_t r, int kind, int file, long off, char* res_buf, int len);

#endif
