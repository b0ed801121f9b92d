/* scenario.h — the differential tester's scenarios (issue 35, item 2).
 *
 * A scenario is a list of steps generated from a seed (model.c). Each step
 * is one action of a plain glibc program — make a descriptor of some kind,
 * change its flags one of the ways the kernel offers, dup it, close it,
 * read, write, poll, block a thread in a read that another step wakes, read
 * one file from several threads, fork and exec, wait on futexes, signal —
 * and prints what a program can observe of it that Linux makes
 * deterministic: return values, errno, a digest of the bytes, verdicts on
 * properties that hold on Linux (each read of a shared regular file
 * contiguous and whole), exit statuses. Never a descriptor number, a pid,
 * an address or a time.
 *
 * The generator keeps a model of the kernel's state (the open file
 * descriptions behind the program's numbers: kind, O_NONBLOCK, bytes
 * queued, file offset, peer) and emits only steps whose outcome the kernel
 * fixes: a read is made where it returns at once (data, end of file,
 * EAGAIN), or by a thread that a later action of the same step surely
 * wakes. The model never predicts values: the plain run gives them, and
 * the preloaded run must print the same.
 *
 * Replay and shrinking: a run may keep a subset of the steps (by index).
 * The model is replayed over the subset, and a step whose precondition no
 * longer holds there (its slot was never made, its read would now wait for
 * ever) is skipped, the same way in every run; so any subset is a valid
 * scenario and the driver can search for a small one that still differs. */
#ifndef FUZZ_PRELOAD_SCENARIO_H
#define FUZZ_PRELOAD_SCENARIO_H

#include <stdint.h>

enum { kSlots = 12, kMaxOfd = 192, kMaxSteps = 96 };

/* The kinds of open file description the generator makes. */
enum Kind {
  K_NONE,
  K_PIPE_R,
  K_PIPE_W,
  K_FIFO_R,
  K_FIFO_W,
  K_UNIX,   /* socketpair(AF_UNIX, SOCK_STREAM) end */
  K_UDGRAM, /* socketpair(AF_UNIX, SOCK_DGRAM) end */
  K_TCP,    /* a connected TCP socket on 127.0.0.1 */
  K_LISTEN, /* a listening TCP socket on 127.0.0.1 */
  K_FILE,   /* a regular file (on disk: the page cache can miss) */
  K_EVENTFD,
  K_NULL,
  K_ZERO,
  K_FULL,
  K_URANDOM,
  K_KMSG, /* /dev/kmsg from its end: a read waits for the next record */
  K_PTY_M,
  K_PTY_S,
  K_TIMERFD,
  K_NKINDS
};

/* The steps. Arguments: s[] slots, a..d small parameters, r a sub-seed. */
enum Op {
  OP_PIPE,     /* s0 read end, s1 write end; a: pipe() or pipe2 flags */
  OP_SOCKPAIR, /* s0, s1; a: STREAM or DGRAM; b: SOCK_NONBLOCK/CLOEXEC bits */
  OP_TCP,      /* s0 client, s1 accepted, s2 listener kept (or -1); a, b, c: flags */
  OP_FILE,     /* s0; a: size class; b: open flags; c: cache state */
  OP_EVENTFD,  /* s0; a: initial value; b: EFD_* bits */
  OP_DEV,      /* s0; a: which device; b: flags */
  OP_FIFO,     /* s0 reader, s1 writer; b: writer flags */
  OP_PTY,      /* s0 master, s1 slave; b: flags */
  OP_TIMERFD,  /* s0; b: TFD_* bits */
  OP_SETNB,    /* s0; a: on/off; b: fcntl F_SETFL, ioctl FIONBIO, raw syscall fcntl */
  OP_CLOEXEC,  /* s0; a: on/off; b: F_SETFD or ioctl FIOCLEX/FIONCLEX */
  OP_GETFL,    /* s0: F_GETFL's access mode, O_NONBLOCK, O_APPEND; F_GETFD */
  OP_DUP,      /* s0 -> s1; a: dup, dup2, dup3, F_DUPFD(_CLOEXEC), SCM_RIGHTS, raw; s2: dup2 onto its number */
  OP_CLOSE,    /* s0; a: close, close_range, raw syscall */
  OP_BADFD,    /* a: which call on a number that is not open */
  OP_READ,     /* s0; a: n; b: which call */
  OP_WRITE,    /* s0; a: n; b: which call */
  OP_BLOCKED,  /* s0 read by a thread that s1's action wakes; a: n; b: call; c: waker; d: delay */
  OP_FOREVER,  /* s0 read by a thread that nothing wakes (prints nothing) */
  OP_ACCEPT,   /* s0 listener -> s1 client, s2 accepted; a: accept4 flags; b: thread first */
  OP_SHUTDOWN, /* s0: shutdown(SHUT_WR) */
  OP_POLL,     /* s0..s2 (-1: none); a: poll, ppoll, select, epoll; b: adds a bad number */
  OP_BPOLL,    /* s0 waited for by a thread (a: which call) until s1's write */
  OP_LSEEK,    /* s0; a: offset; b: whence */
  OP_EVICT,    /* s0 file: its pages dropped (a: all, patchy); feature evict */
  OP_SHARED,   /* s0 file read by a threads, b chunk, from c; d: cache, fork */
  OP_FORK,     /* s0 used by a child: a op; b: fork, fork+exec, posix_spawn */
  OP_FUTEX,    /* a: kind; b: waiters; c: private, shared, shared memory; d: variant */
  OP_FUTEX1,   /* a: a single-threaded futex call and its errors */
  OP_SIGNAL,   /* a: kind */
  OP_PIPES,    /* a threads each blocked on its own pipe, woken in a seeded order */
  OP_SYNC,     /* a: mutex, condvar, semaphore, barrier among b threads */
  OP_SLEEP,    /* a: which call */
  OP_SENDFILE, /* s0 out, s1 file in; a: n; b: with an offset */
  OP_NOPS
};

typedef struct {
  int op;
  int s[3];
  int a, b, c, d;
  uint32_t r;
} Step;

/* An open file description as the kernel keeps it (the generator's model). */
typedef struct {
  int kind;
  int refs;     /* numbers of the program that refer to it */
  int nonblock; /* O_NONBLOCK */
  int peer;     /* the other end, or -1 */
  int acc;      /* O_RDONLY, O_WRONLY, O_RDWR */
  int append;
  int wshut;   /* shut down for writing (this end) */
  int spoiled; /* state the model does not follow (a reset, a forever reader): flags, dup and close only */
  long avail;  /* bytes a read finds here */
  int writes;  /* unread writes queued here */
  int dg[8], ndg;
  long size, off;
  int file; /* the file's number in the scenario */
  uint64_t count;
  int sem;
  int timer; /* 0 disarmed, 1 armed (one shot) */
} Ofd;

typedef struct {
  int ofd; /* -1: not open */
  int cloexec;
} Slot;

/* Features a run may leave out (--exclude): behaviours where loom differs
 * from glibc by design (documented) or by a known, reported bug, so that the
 * bounded run in CI stays green while the rest is exercised. A step is
 * generated or replayed only if none of its features is excluded. */
enum Feature {
  X_EVICT = 1 << 0,       /* a file's cache emptied under a descriptor loom trusts: short reads (documented) */
  X_SHMFUTEX = 1 << 1,    /* futex waits in MAP_SHARED memory */
  X_BITSET = 1 << 2,      /* FUTEX_WAIT_BITSET/WAKE_BITSET with bits other than "any" */
  X_SIGNALFD = 1 << 3,    /* signalfd reading signals the program blocked */
  X_EINTR = 1 << 4,       /* a blocking call interrupted by a handler (documented: not interrupted) */
  X_RTQUEUE = 1 << 5,     /* a real-time signal sent several times before it is taken (each one queued) */
  X_ZEROIO = 1 << 6,      /* read/readv/write/writev of 0 bytes on a socket (0 at once, whatever its state) */
  X_CLOSERANGE = 1 << 7,  /* close_range(2) of a descriptor, then its number reused */
  X_RAWCLOSE = 1 << 8,    /* syscall(SYS_close), then the number reused */
  X_FUTEXARGS = 1 << 9,   /* a futex wait's arguments the kernel refuses (a misaligned word) */
  X_RAWDUP = 1 << 10,     /* syscall(SYS_dup3) over a live number */
  X_WAITALL = 1 << 11,    /* recv(MSG_WAITALL) whose bytes come in two writes */
  X_OFFLOADHOG = 1 << 12, /* offloaded calls that wait, more than one at once (a forever reader holds one thread) */
  X_NOTSOCK = 1 << 13,    /* a socket call on a regular file it cannot read (recv) or write (send) */
  X_SELFSIG = 1 << 14,    /* sigqueue to the process, the signal blocked, then sigtimedwait(0) at once */
  X_SENDFILE0 = 1 << 15,  /* sendfile of nothing (its file at the end) to a socket */
  X_NFEATURES = 16
};
/* "known": what a run leaves out unless told otherwise (the driver's
 * default, CI's and `make fuzz-preload`'s): the two documented divergences
 * and the bugs this tester found on main at 791fbd4 (docs/DESIGN.md, "The
 * differential tester"); a fix takes its feature out of this mask. */
#define X_KNOWN                                                                                              \
  (X_EVICT | X_EINTR | X_SHMFUTEX | X_BITSET | X_SIGNALFD | X_RTQUEUE | X_ZEROIO | X_FUTEXARGS | X_WAITALL | \
   X_OFFLOADHOG | X_NOTSOCK | X_SELFSIG | X_SENDFILE0)
const char* feature_name(int bit);
/* "evict,bitset", "known", "known,-evict" (all known but evict), "none" -> mask; ~0u on an unknown name */
unsigned feature_parse(const char* list);

typedef struct {
  Ofd o[kMaxOfd];
  int nofd;
  Slot s[kSlots];
  int nfiles;
  int hogs; /* forever readers of a kind loom offloads (each holds an offload thread for good) */
  unsigned exclude;
} Model;

typedef struct {
  uint64_t seed;
  int n;
  Step step[kMaxSteps];
} Scenario;

/* model.c */
unsigned step_features(const Model* m, const Step* st);
void model_init(Model* m, unsigned exclude);
int step_valid(const Model* m, const Step* st);
void step_apply(Model* m, const Step* st);
const char* kind_name(int kind);
/* gen.c */
void generate(Scenario* sc, uint64_t seed, unsigned exclude);
void describe(const Step* st, char* buf, int len);
/* What a read of n bytes on an open file description does now. */
enum ReadOutcome { R_NOW, R_BLOCKS, R_RACY };
int read_outcome(const Model* m, int ofd, long n);
long read_count(const Model* m, int ofd, long n);

long step_len(const Step* st);
long file_size(const Step* st); /* OP_FILE's */
int shared_through_slot(const Model* m, const Step* st);
long blocked_wake_len(const Step* st, int kind, long n);
const char* op_name(int op);
uint64_t mix64(uint64_t x);

/* Read and write calls (OP_READ's and OP_WRITE's b, modulo RC_N, WC_N). */
enum { RC_READ, RC_READV, RC_RECV, RC_RECVFROM, RC_RECVMSG, RC_DONTWAIT, RC_PEEK, RC_PREAD, RC_FAULT, RC_N };
enum { WC_WRITE, WC_WRITEV, WC_SEND, WC_SENDTO, WC_SENDMSG, WC_DONTWAIT, WC_NOSIGNAL, WC_PWRITE, WC_FAULT, WC_N };
/* OP_FORK's a (modulo FK_N): what the child does with the descriptor. */
enum { FK_READ, FK_WRITE, FK_SETNB, FK_CLEARNB, FK_GETFL, FK_ISOPEN, FK_BLOCKED, FK_N };

#endif
