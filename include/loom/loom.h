/* loom/loom.h — loom's C API: pthreads, name for name, on fibres.
 *
 * Every pthread_X of POSIX threads is loom_X here (pthread_mutex_lock is
 * loom_mutex_lock, pthread_t is loom_t, PTHREAD_MUTEX_INITIALIZER is
 * LOOM_MUTEX_INITIALIZER), with the same arguments in the same order and the
 * same return convention: 0 or an errno value, never -1 and errno — except
 * where POSIX itself uses -1 and errno (the sem_* family, nanosleep and the
 * I/O calls), which loom_sem_*, loom_nanosleep and loom_read... follow.
 * To compile a pthread program unchanged, include loom/pthread.h instead of
 * <pthread.h> (see there).
 *
 * A loom_t is a fibre: a user-level thread with its own stack, run by one of
 * the processors (kernel threads) of a cluster. Blocking calls here block
 * the fibre, never its processor. No start-up call is needed: the runtime
 * starts before main() (a library constructor), main() runs as a fibre on
 * processor 0 of the default cluster, and returning from main() ends the
 * process, as with pthreads. Every function may also be called from a kernel
 * thread that is not a loom processor (one a library made with the system's
 * pthread_create): blocking calls then block that kernel thread.
 *
 * Thread safety. Every function is safe to call concurrently from any
 * fibres and threads, except that an object must not be initialised or
 * destroyed while another call uses it (as POSIX says). Attribute objects
 * are plain data: guard one that several threads change.
 *
 * Async-signal safety. Only loom_self, loom_equal, loom_errno_location, the
 * attribute getters (loom_*attr_get*) and loom_spin_trylock/loom_spin_unlock
 * may be called from a signal handler. Unlike POSIX's sem_post, loom_sem_post
 * is not among them: a handler runs on whatever fibre its kernel thread was
 * running, which may hold the semaphore's internal spin lock. From a handler,
 * write(2) (the system's, not loom_write) to a pipe or an eventfd that a
 * fibre reads.
 *
 * errno and thread-locals. errno is per kernel thread in the C library, and
 * a fibre that blocks may resume on another processor, i.e. another kernel
 * thread. loom keeps errno per fibre across its own calls:
 *   - a loom call that may switch saves the caller's errno on entry and,
 *     after its last switch, sets errno again — to the value the call sets
 *     on failure, else back to the saved value. So after a call that
 *     switched fibres or processors, errno is what that call set;
 *   - that last write goes through a fresh call to the C library's
 *     __errno_location(), made in a function the compiler cannot inline,
 *     so the address used is that of the kernel thread the fibre now runs
 *     on (this is how loom avoids the trap below internally).
 * The trap: glibc declares __errno_location() `const`, so a compiler may
 * compute &errno once and reuse the address after a call, e.g. in
 *     errno = 0; loom_sem_wait(&s); if (errno) ...
 * which would read the errno of the kernel thread the fibre ran on *before*
 * the call. This header therefore redefines `errno` as
 * (*loom_errno_location()), a call the compiler must repeat after every call
 * (define LOOM_KEEP_LIBC_ERRNO before including it to keep glibc's macro).
 * The same trap holds for any _Thread_local / __thread variable, which
 * belongs to the processor, not to the fibre: within one function a
 * compiler may compute its address before a call that blocks and use it
 * after. Keep per-fibre data in loom keys (loom_key_create), or reach a
 * thread-local only through a function the compiler may not inline
 * (__attribute__((noinline))), as loom_errno_location does.
 * In a process that loads libloom-pthread (the link and preload routes),
 * each thread made by loom_create has a thread control block of its own,
 * installed whenever it runs (README, "Three ways"; LOOM_TLS): there errno
 * and every thread-local are per thread, as on glibc, and the trap is gone.
 *
 * What differs from glibc's pthreads, all documented at the functions:
 * process-private objects only (PTHREAD_PROCESS_SHARED gives ENOTSUP);
 * cancellation acts at loom's own cancellation points only, and the
 * asynchronous type acts as the deferred one (loom_cancel); no signal
 * masks or signals per thread; priorities are
 * loom's three fibre priorities, not POSIX scheduling policies; rwlocks
 * prefer readers by default, as glibc's do (loom_rwlockattr_setkind_np).
 */
#ifndef LOOM_LOOM_H
#define LOOM_LOOM_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "loom/detail/stats_fields.h"

#ifdef __cplusplus
extern "C" {
#define LOOM_RESTRICT __restrict
#else
#define LOOM_RESTRICT restrict
#endif

#define LOOM_NORETURN __attribute__((__noreturn__))

struct addrinfo;
struct timespec;
struct sockaddr;
struct msghdr;
struct mmsghdr;
struct iovec;
struct epoll_event;
struct timeval;

/* ---- limits and constants --------------------------------------------------- */

/* A fibre's stack is between LOOM_STACK_MIN and LOOM_STACK_MAX bytes: a size
 * outside them is EINVAL here, std::invalid_argument in C++ (FibreAttr). */
#define LOOM_STACK_MIN 16384         /* = loom::kStackMin */
#define LOOM_STACK_MAX 1073741824    /* = loom::kStackMax (1 GiB) */
#define LOOM_STACK_DEFAULT 65536     /* unless LOOM_STACK_SIZE says otherwise */
#define LOOM_KEYS_MAX 1024           /* = loom::kKeysMax, glibc's PTHREAD_KEYS_MAX */
#define LOOM_DESTRUCTOR_ITERATIONS 4 /* = loom::kKeyDestructorRounds */
#define LOOM_SEM_VALUE_MAX 0x7fffffff
#define LOOM_BARRIER_SERIAL_THREAD (-1)

#define LOOM_CREATE_JOINABLE 0
#define LOOM_CREATE_DETACHED 1
#define LOOM_SCOPE_SYSTEM 0 /* not supported: fibres are process scope */
#define LOOM_SCOPE_PROCESS 1
#define LOOM_PROCESS_PRIVATE 0
#define LOOM_PROCESS_SHARED 1 /* not supported: ENOTSUP */

/* Fibre priorities (loom::Priority): every ready queue is searched from high. */
#define LOOM_PRIORITY_HIGH 0
#define LOOM_PRIORITY_NORMAL 1
#define LOOM_PRIORITY_LOW 2

#define LOOM_MUTEX_NORMAL 0 /* relock by the owner deadlocks */
#define LOOM_MUTEX_RECURSIVE 1
#define LOOM_MUTEX_ERRORCHECK 2
#define LOOM_MUTEX_ADAPTIVE_NP 3 /* a normal mutex with the spin policy */
#define LOOM_MUTEX_DEFAULT LOOM_MUTEX_NORMAL
/* The barging spectrum of loom::MutexPolicy (loom/sync.hpp). */
#define LOOM_MUTEX_POLICY_DEFAULT 0 /* the process default: LOOM_MUTEX=... */
#define LOOM_MUTEX_POLICY_BLOCKING 1
#define LOOM_MUTEX_POLICY_SPIN 2
#define LOOM_MUTEX_POLICY_BATON 3
#define LOOM_MUTEX_POLICY_HYBRID 4
#define LOOM_MUTEX_STALLED 0
#define LOOM_MUTEX_ROBUST 1 /* not supported: ENOTSUP */
#define LOOM_PRIO_NONE 0
#define LOOM_PRIO_INHERIT 1 /* not supported: ENOTSUP */
#define LOOM_PRIO_PROTECT 2 /* not supported: ENOTSUP */

#define LOOM_RWLOCK_PREFER_READER_NP 0 /* default, as in glibc */
#define LOOM_RWLOCK_PREFER_WRITER_NP 1
#define LOOM_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP 2
#define LOOM_RWLOCK_DEFAULT_NP LOOM_RWLOCK_PREFER_READER_NP

#define LOOM_CANCEL_ENABLE 0
#define LOOM_CANCEL_DISABLE 1
#define LOOM_CANCEL_DEFERRED 0
#define LOOM_CANCEL_ASYNCHRONOUS 1
#define LOOM_CANCELED ((void*)-1)

/* ---- types -------------------------------------------------------------------
 * Every object is a plain struct; the members are private. The synchronisation
 * objects hold their C++ counterpart (loom::Mutex, ...) in place, built on
 * first use when the object was statically initialised, so an all-zero object
 * and the LOOM_*_INITIALIZER constants need no init call. Sizes are part of
 * the ABI. */

typedef unsigned long loom_t;               /* like glibc's pthread_t */
typedef struct loom_cluster loom_cluster_t; /* a loom::Cluster */
typedef unsigned int loom_key_t;

#define LOOM_STORAGE_(n)          \
  union {                         \
    unsigned char _loom_bytes[n]; \
    int64_t _loom_ll;             \
    void* _loom_p;                \
    double _loom_d;               \
  }

typedef struct {
  unsigned int _loom_magic;
  int _loom_detachstate;
  size_t _loom_stacksize; /* 0: the cluster's default */
  size_t _loom_guardsize;
  loom_cluster_t* _loom_cluster; /* null: the creator's cluster */
  int _loom_priority;
  int _loom_scope;
  void* _loom_stackaddr; /* loom_attr_setstack, loom_getattr_np */
  uint32_t _loom_color;  /* 0: uncolored (loom_attr_setcolor) */
  int _loom_color_shared;
  int _loom_restable; /* loom_attr_setrestable_np */
  int _loom_reserved; /* the fields above took the rest: same size */
} loom_attr_t;

typedef struct {
  unsigned char _loom_state;
  unsigned char _loom_type;
  unsigned char _loom_policy;
  unsigned char _loom_pad[5];
  LOOM_STORAGE_(56) _loom_impl;
} loom_mutex_t;

typedef struct {
  unsigned int _loom_magic;
  int _loom_type;
  int _loom_policy;
  int _loom_pshared;
  int _loom_protocol;
  int _loom_robust;
} loom_mutexattr_t;

typedef struct {
  unsigned char _loom_state;
  unsigned char _loom_monotonic; /* timedwait's clock: 0 realtime, 1 monotonic */
  unsigned char _loom_pad[6];
  LOOM_STORAGE_(40) _loom_impl;
} loom_cond_t;

typedef struct {
  unsigned int _loom_magic;
  int _loom_clock;
  int _loom_pshared;
} loom_condattr_t;

typedef struct {
  unsigned char _loom_state;
  unsigned char _loom_kind;
  unsigned char _loom_pad[6];
  LOOM_STORAGE_(88) _loom_impl;
} loom_rwlock_t;

typedef struct {
  unsigned int _loom_magic;
  int _loom_kind;
  int _loom_pshared;
} loom_rwlockattr_t;

typedef struct {
  unsigned char _loom_state;
  unsigned char _loom_pad[7];
  LOOM_STORAGE_(56) _loom_impl;
} loom_barrier_t;

typedef struct {
  unsigned int _loom_magic;
  int _loom_pshared;
} loom_barrierattr_t;

typedef struct {
  unsigned char _loom_state;
  unsigned char _loom_pad[7];
  LOOM_STORAGE_(40) _loom_impl;
} loom_sem_t;

typedef struct {
  unsigned char _loom_state;
  unsigned char _loom_done; /* 1 once the routine has returned */
  unsigned char _loom_pad[6];
  LOOM_STORAGE_(32) _loom_impl;
} loom_once_t;

typedef struct {
  int _loom_lock;
  int _loom_pad;
} loom_spinlock_t;

#define LOOM_MUTEX_INITIALIZER_(type) \
  {                                   \
    0, type, 0, {0}, {                \
      { 0 }                           \
    }                                 \
  }
#define LOOM_MUTEX_INITIALIZER LOOM_MUTEX_INITIALIZER_(LOOM_MUTEX_NORMAL)
#define LOOM_RECURSIVE_MUTEX_INITIALIZER_NP LOOM_MUTEX_INITIALIZER_(LOOM_MUTEX_RECURSIVE)
#define LOOM_ERRORCHECK_MUTEX_INITIALIZER_NP LOOM_MUTEX_INITIALIZER_(LOOM_MUTEX_ERRORCHECK)
#define LOOM_ADAPTIVE_MUTEX_INITIALIZER_NP LOOM_MUTEX_INITIALIZER_(LOOM_MUTEX_ADAPTIVE_NP)
#define LOOM_COND_INITIALIZER \
  {                           \
    0, 0, {0}, {              \
      { 0 }                   \
    }                         \
  }
#define LOOM_RWLOCK_INITIALIZER       \
  {                                   \
    0, LOOM_RWLOCK_DEFAULT_NP, {0}, { \
      { 0 }                           \
    }                                 \
  }
#define LOOM_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP   \
  {                                                      \
    0, LOOM_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP, {0}, { \
      { 0 }                                              \
    }                                                    \
  }
#define LOOM_ONCE_INIT \
  {                    \
    0, 0, {0}, {       \
      { 0 }            \
    }                  \
  }

/* ---- threads -------------------------------------------------------------------
 * Errors are those POSIX lists; where loom can detect an undefined use it
 * returns the "may fail" error (ESRCH for a null handle, EINVAL for an
 * attribute object that was never initialised or was destroyed). */

/* Attributes: detach state, stack size (LOOM_STACK_MIN..LOOM_STACK_MAX, else EINVAL;
 * rounded up to whole pages), guard size (kept and reported; loom's guard is
 * always one page), scope (PROCESS only; SYSTEM gives ENOTSUP), and loom's
 * own: the cluster to run in and the fibre priority. */
int loom_attr_init(loom_attr_t* attr);
int loom_attr_destroy(loom_attr_t* attr);
int loom_attr_setdetachstate(loom_attr_t* attr, int state);
int loom_attr_getdetachstate(const loom_attr_t* attr, int* state);
int loom_attr_setstacksize(loom_attr_t* attr, size_t size);
int loom_attr_getstacksize(const loom_attr_t* LOOM_RESTRICT attr, size_t* LOOM_RESTRICT size);
int loom_attr_setguardsize(loom_attr_t* attr, size_t size);
int loom_attr_getguardsize(const loom_attr_t* LOOM_RESTRICT attr, size_t* LOOM_RESTRICT size);
/* A stack of the caller's: the new fibre runs on [addr, addr+size), which
 * must stay mapped until it has ended (EINVAL: a null addr, or a size
 * outside LOOM_STACK_MIN..LOOM_STACK_MAX). loom adds no guard page there,
 * puts the fibre's control block at its top, and the fibre may not
 * loom_rest (nor be made restable: loom_create gives EINVAL). getstack
 * reports it, or a running fibre's after loom_getattr_np (EINVAL when
 * neither). */
int loom_attr_setstack(loom_attr_t* attr, void* addr, size_t size);
int loom_attr_getstack(const loom_attr_t* LOOM_RESTRICT attr, void** LOOM_RESTRICT addr, size_t* LOOM_RESTRICT size);
int loom_attr_setscope(loom_attr_t* attr, int scope);
int loom_attr_getscope(const loom_attr_t* LOOM_RESTRICT attr, int* LOOM_RESTRICT scope);
int loom_attr_setcluster(loom_attr_t* attr, loom_cluster_t* cluster);
int loom_attr_getcluster(const loom_attr_t* LOOM_RESTRICT attr, loom_cluster_t** LOOM_RESTRICT cluster);
/* restable (0 or 1): under libloom-pthread, where each thread has a thread
 * control block of its own (its thread-locals, errno), build it on the
 * heap rather than at the top of the stack, so that the thread may
 * loom_rest (ENOTSUP otherwise); its thread-locals keep their values and
 * addresses across rests. A malloc of the block's size per thread. No
 * effect where threads have no block of their own. */
int loom_attr_setrestable_np(loom_attr_t* attr, int restable);
int loom_attr_getrestable_np(const loom_attr_t* LOOM_RESTRICT attr, int* LOOM_RESTRICT restable);
int loom_attr_setpriority(loom_attr_t* attr, int priority);
int loom_attr_getpriority(const loom_attr_t* LOOM_RESTRICT attr, int* LOOM_RESTRICT priority);
/* A colored fibre (see "colors" below): it waits for `color` of its cluster
 * before it starts and holds it until it exits, also while blocked; shared
 * (1) holds it shared, overlapping other shared work of the color, 0
 * exclusively. Color 0 (the default) is uncolored. EINVAL: shared not 0 or
 * 1, or shared with color 0. loom_getattr_np reports color 0. */
int loom_attr_setcolor(loom_attr_t* attr, uint32_t color, int shared);
int loom_attr_getcolor(const loom_attr_t* LOOM_RESTRICT attr, uint32_t* LOOM_RESTRICT color,
                       int* LOOM_RESTRICT shared);

/* Starts start(arg) on a new fibre (*thread is set before it can run).
 * EAGAIN: no memory for its stack; EINVAL: bad attributes. */
int loom_create(loom_t* LOOM_RESTRICT thread, const loom_attr_t* LOOM_RESTRICT attr, void* (*start)(void*),
                void* LOOM_RESTRICT arg);
/* EDEADLK: joining oneself; EINVAL: not joinable (detached, already being
 * joined, or not made by loom_create); ESRCH: a null or stale handle (the
 * thread was joined, or was detached and has finished: a loom_t carries a
 * generation count, so an old handle never names a newer thread). main's
 * handle may be joined: the joiner gets the value main passes to loom_exit. */
int loom_join(loom_t thread, void** retval);
/* GNU extensions: EBUSY if it has not finished; ETIMEDOUT at abstime
 * (CLOCK_REALTIME for timedjoin; clockjoin takes REALTIME or MONOTONIC);
 * a null abstime waits as long as loom_join does. */
int loom_tryjoin_np(loom_t thread, void** retval);
int loom_timedjoin_np(loom_t thread, void** retval, const struct timespec* abstime);
int loom_clockjoin_np(loom_t thread, void** retval, clockid_t clock, const struct timespec* abstime);
/* EINVAL: already detached or being joined; ESRCH: a null or stale handle. */
int loom_detach(loom_t thread);
/* Any caller has an id: fibres not made by loom_create (C++ loom::Fibre)
 * and kernel threads get a process-unique one too. */
loom_t loom_self(void);
int loom_equal(loom_t a, loom_t b);
/* Lets other ready fibres run (sched_yield); always 0. */
int loom_yield(void);
/* Ends the calling fibre as glibc's pthread_exit does: the stack unwinds by
 * a forced unwind (C++ destructors run; C frames need unwind tables, which
 * GCC and Clang emit by default on x86-64), running cleanup handlers as
 * the unwinding reaches their frames (innermost first), then key
 * destructors; retval goes to the joiner. A C++ `catch (...)` sees the
 * unwinding (so does `catch (abi::__forced_unwind&)`) and must rethrow:
 * one that swallows it aborts the process, as on glibc. Called from
 * main(), it waits for every fibre made by loom_create to finish, then
 * ends the process with status 0, as POSIX says (retval goes to main's
 * joiner, if any). Only for fibres made by
 * loom_create, and main (a C++ loom::Fibre that calls it aborts the process
 * with a message); on a kernel thread that is not a processor, its cleanup
 * handlers run and the system's pthread_exit ends it. */
LOOM_NORETURN void loom_exit(void* retval);
/* Runs init() once per loom_once_t; concurrent callers wait until it has
 * returned. If init ends its fibre with loom_exit, another caller runs it. */
int loom_once(loom_once_t* once, void (*init)(void));
/* The attributes of a live fibre: detach state, stack size and address,
 * guard size, cluster, priority. Initialises *attr itself (destroy it). */
int loom_getattr_np(loom_t thread, loom_attr_t* attr);
/* Names of up to 15 bytes (ERANGE beyond), for fibres made by loom_create
 * and main (ESRCH for others). */
int loom_setname_np(loom_t thread, const char* name);
int loom_getname_np(loom_t thread, char* name, size_t len);
/* The id by which the fibre listing (loom_dump_fibres), the stall detector,
 * gdb's `info fibres` and loom's messages name `thread`'s fibre (a loom_t
 * is a handle, not that id). Any id loom_self returns on a fibre works,
 * also for fibres not made by loom_create. ESRCH: a null or stale handle,
 * or a kernel thread that is not running a fibre; EINVAL: id null. */
int loom_getid_np(loom_t thread, uint64_t* id);
/* Kept but without effect (XSI): EINVAL for a negative level. */
int loom_getconcurrency(void);
int loom_setconcurrency(int level);

/* Cancellation, deferred, as POSIX has it (docs/DESIGN.md "Cancellation").
 * loom_cancel(t) asks t to end: 0, or ESRCH for a handle that names no
 * thread (null, joined, or detached and ended); a thread not started yet,
 * a detached one, main, and one that has ended but is not joined (nothing
 * happens to it) may be cancelled. t acts on it at its next cancellation
 * point with cancellation enabled — and a t already waiting in one is
 * woken — as loom_exit(LOOM_CANCELED) with cancellation disabled: cleanup
 * handlers, C++ destructors and key destructors run, the joiner gets
 * LOOM_CANCELED. The cancellation points: loom_testcancel, loom_join and
 * loom_clockjoin_np/timedjoin_np (on entry: a request does not wake a
 * joiner), loom_cond_wait/clockwait/timedwait (acting with the mutex held
 * again), loom_sem_wait/clockwait/timedwait (even when they need not wait),
 * loom_sleep, loom_usleep, loom_nanosleep, loom_clock_nanosleep, and the
 * I/O calls read, write, readv, writev, recv*, send*, accept*, connect, the
 * _until forms, pread, pwrite, fsync, close, poll_one, and loom_poll,
 * ppoll, select, pselect, epoll_wait, epoll_pwait (a wait they make on the
 * offload cluster — regular files, terminals — is not woken: they act when
 * it returns). Mutexes, rwlocks, barriers and once are not cancellation
 * points. loom_setcancelstate/loom_setcanceltype: EINVAL for other values;
 * the asynchronous type is kept but acts as deferred, except that enabling
 * it (or cancellation, with it) while a request is pending acts at once, as
 * glibc does. Callers without a record (C++ loom::Fibre, kernel threads)
 * keep a state and type that nothing acts on. */
int loom_setcancelstate(int state, int* oldstate);
int loom_setcanceltype(int type, int* oldtype);
int loom_cancel(loom_t thread);
void loom_testcancel(void);

/* Cleanup handlers (pthread_cleanup_push/pop): a lexically scoped pair, run
 * by loom_cleanup_pop(nonzero) or by loom_exit. The frame lives on the
 * caller's stack. */
struct loom_cleanup_frame {
  void (*_loom_fn)(void*);
  void* _loom_arg;
  struct loom_cleanup_frame* _loom_prev;
  void* _loom_owner;
};
void loom_cleanup_push_frame(struct loom_cleanup_frame* frame, void (*fn)(void*), void* arg);
void loom_cleanup_pop_frame(struct loom_cleanup_frame* frame, int execute);
#define loom_cleanup_push(fn, arg)          \
  do {                                      \
    struct loom_cleanup_frame _loom_cframe; \
    loom_cleanup_push_frame(&_loom_cframe, (fn), (arg));
#define loom_cleanup_pop(execute)                   \
  loom_cleanup_pop_frame(&_loom_cframe, (execute)); \
  }                                                 \
  while (0)

/* ---- fibre-local keys -----------------------------------------------------------
 * Per fibre (per kernel thread for callers that are not fibres). At a
 * fibre's exit, destructors of non-null values run, repeated up to
 * LOOM_DESTRUCTOR_ITERATIONS rounds while values remain. EAGAIN: all
 * LOOM_KEYS_MAX keys in use; EINVAL: a key not in use; ENOMEM. */
int loom_key_create(loom_key_t* key, void (*destructor)(void*));
int loom_key_delete(loom_key_t key);
void* loom_getspecific(loom_key_t key);
int loom_setspecific(loom_key_t key, const void* value);

/* ---- mutexes ----------------------------------------------------------------------
 * Types NORMAL (= DEFAULT; relocking deadlocks, or times out), RECURSIVE,
 * ERRORCHECK (relock: EDEADLK), ADAPTIVE_NP (normal, spin policy); loom's
 * policy attribute chooses along the barging spectrum (loom/sync.hpp).
 * lock: EDEADLK (errorcheck relock), EAGAIN (recursion count overflow);
 * trylock: EBUSY; timedlock: ETIMEDOUT, never before abstime, EINVAL for a
 * bad abstime when it would block; unlock: EPERM when a recursive or
 * errorcheck mutex is not the caller's; destroy: EBUSY while locked;
 * EINVAL for a destroyed mutex. */
int loom_mutexattr_init(loom_mutexattr_t* attr);
int loom_mutexattr_destroy(loom_mutexattr_t* attr);
int loom_mutexattr_settype(loom_mutexattr_t* attr, int type);
int loom_mutexattr_gettype(const loom_mutexattr_t* LOOM_RESTRICT attr, int* LOOM_RESTRICT type);
int loom_mutexattr_setpshared(loom_mutexattr_t* attr, int pshared);
int loom_mutexattr_getpshared(const loom_mutexattr_t* LOOM_RESTRICT attr, int* LOOM_RESTRICT pshared);
int loom_mutexattr_setprotocol(loom_mutexattr_t* attr, int protocol);
int loom_mutexattr_getprotocol(const loom_mutexattr_t* LOOM_RESTRICT attr, int* LOOM_RESTRICT protocol);
int loom_mutexattr_setrobust(loom_mutexattr_t* attr, int robust);
int loom_mutexattr_getrobust(const loom_mutexattr_t* LOOM_RESTRICT attr, int* LOOM_RESTRICT robust);
int loom_mutexattr_setpolicy_np(loom_mutexattr_t* attr, int policy);
int loom_mutexattr_getpolicy_np(const loom_mutexattr_t* LOOM_RESTRICT attr, int* LOOM_RESTRICT policy);

int loom_mutex_init(loom_mutex_t* LOOM_RESTRICT mutex, const loom_mutexattr_t* LOOM_RESTRICT attr);
int loom_mutex_destroy(loom_mutex_t* mutex);
int loom_mutex_lock(loom_mutex_t* mutex);
int loom_mutex_trylock(loom_mutex_t* mutex);
int loom_mutex_timedlock(loom_mutex_t* LOOM_RESTRICT mutex, const struct timespec* LOOM_RESTRICT abstime);
/* clock: CLOCK_REALTIME or CLOCK_MONOTONIC (EINVAL otherwise). */
int loom_mutex_clocklock(loom_mutex_t* LOOM_RESTRICT mutex, clockid_t clock,
                         const struct timespec* LOOM_RESTRICT abstime);
int loom_mutex_unlock(loom_mutex_t* mutex);
/* Robust mutexes are not supported: always EINVAL. */
int loom_mutex_consistent(loom_mutex_t* mutex);

/* ---- condition variables -----------------------------------------------------------
 * timedwait measures abstime on the condition's clock: CLOCK_REALTIME, as
 * POSIX says, unless loom_condattr_setclock chose CLOCK_MONOTONIC;
 * clockwait names the clock per call. A realtime deadline is turned into a
 * monotonic one when the wait starts; if the realtime clock was set back
 * meanwhile, the wait returns 0 (a spurious wake-up, which callers handle)
 * rather than ETIMEDOUT early. wait: EPERM when a recursive or errorcheck
 * mutex is not the caller's. destroy does not check for waiters: POSIX
 * allows destroying a condition right after a broadcast. */
int loom_condattr_init(loom_condattr_t* attr);
int loom_condattr_destroy(loom_condattr_t* attr);
int loom_condattr_setclock(loom_condattr_t* attr, clockid_t clock);
int loom_condattr_getclock(const loom_condattr_t* LOOM_RESTRICT attr, clockid_t* LOOM_RESTRICT clock);
int loom_condattr_setpshared(loom_condattr_t* attr, int pshared);
int loom_condattr_getpshared(const loom_condattr_t* LOOM_RESTRICT attr, int* LOOM_RESTRICT pshared);

int loom_cond_init(loom_cond_t* LOOM_RESTRICT cond, const loom_condattr_t* LOOM_RESTRICT attr);
int loom_cond_destroy(loom_cond_t* cond);
int loom_cond_wait(loom_cond_t* LOOM_RESTRICT cond, loom_mutex_t* LOOM_RESTRICT mutex);
int loom_cond_timedwait(loom_cond_t* LOOM_RESTRICT cond, loom_mutex_t* LOOM_RESTRICT mutex,
                        const struct timespec* LOOM_RESTRICT abstime);
int loom_cond_clockwait(loom_cond_t* LOOM_RESTRICT cond, loom_mutex_t* LOOM_RESTRICT mutex, clockid_t clock,
                        const struct timespec* LOOM_RESTRICT abstime);
int loom_cond_signal(loom_cond_t* cond);
int loom_cond_broadcast(loom_cond_t* cond);

/* ---- readers-writer locks ------------------------------------------------------------
 * Reader preference by default, as glibc (C++'s loom::RWLock prefers writers
 * by default instead: RWPreference::writer): a reader enters whenever no writer
 * holds the lock, so a fibre may take the read lock recursively (POSIX).
 * PREFER_WRITER(_NONRECURSIVE)_NP: new readers wait while a writer waits (no
 * writer starvation; a recursive read lock may then deadlock).
 * rdlock: EDEADLK if the caller holds the write lock, EAGAIN (too many
 * readers); wrlock: EDEADLK if the caller holds it; try*: EBUSY; timed*:
 * ETIMEDOUT; unlock: EPERM when the caller holds neither lock (the write
 * side knows its owner; readers are counted, not named); destroy: EBUSY
 * while held. */
int loom_rwlockattr_init(loom_rwlockattr_t* attr);
int loom_rwlockattr_destroy(loom_rwlockattr_t* attr);
int loom_rwlockattr_setpshared(loom_rwlockattr_t* attr, int pshared);
int loom_rwlockattr_getpshared(const loom_rwlockattr_t* LOOM_RESTRICT attr, int* LOOM_RESTRICT pshared);
int loom_rwlockattr_setkind_np(loom_rwlockattr_t* attr, int kind);
int loom_rwlockattr_getkind_np(const loom_rwlockattr_t* LOOM_RESTRICT attr, int* LOOM_RESTRICT kind);

int loom_rwlock_init(loom_rwlock_t* LOOM_RESTRICT rwlock, const loom_rwlockattr_t* LOOM_RESTRICT attr);
int loom_rwlock_destroy(loom_rwlock_t* rwlock);
int loom_rwlock_rdlock(loom_rwlock_t* rwlock);
int loom_rwlock_tryrdlock(loom_rwlock_t* rwlock);
int loom_rwlock_timedrdlock(loom_rwlock_t* LOOM_RESTRICT rwlock, const struct timespec* LOOM_RESTRICT abstime);
int loom_rwlock_clockrdlock(loom_rwlock_t* LOOM_RESTRICT rwlock, clockid_t clock,
                            const struct timespec* LOOM_RESTRICT abstime);
int loom_rwlock_wrlock(loom_rwlock_t* rwlock);
int loom_rwlock_trywrlock(loom_rwlock_t* rwlock);
int loom_rwlock_timedwrlock(loom_rwlock_t* LOOM_RESTRICT rwlock, const struct timespec* LOOM_RESTRICT abstime);
int loom_rwlock_clockwrlock(loom_rwlock_t* LOOM_RESTRICT rwlock, clockid_t clock,
                            const struct timespec* LOOM_RESTRICT abstime);
int loom_rwlock_unlock(loom_rwlock_t* rwlock);

/* ---- barriers --------------------------------------------------------------------------
 * init: EINVAL for a count of 0. wait returns LOOM_BARRIER_SERIAL_THREAD to
 * exactly one caller per phase and 0 to the others. */
int loom_barrierattr_init(loom_barrierattr_t* attr);
int loom_barrierattr_destroy(loom_barrierattr_t* attr);
int loom_barrierattr_setpshared(loom_barrierattr_t* attr, int pshared);
int loom_barrierattr_getpshared(const loom_barrierattr_t* LOOM_RESTRICT attr, int* LOOM_RESTRICT pshared);
int loom_barrier_init(loom_barrier_t* LOOM_RESTRICT barrier, const loom_barrierattr_t* LOOM_RESTRICT attr,
                      unsigned count);
int loom_barrier_destroy(loom_barrier_t* barrier);
int loom_barrier_wait(loom_barrier_t* barrier);

/* ---- spin locks ----------------------------------------------------------------------
 * Spin a while, then yield the processor between tries (a holder on the same
 * processor must get to run). EBUSY (trylock), EDEADLK is not detected. */
int loom_spin_init(loom_spinlock_t* lock, int pshared);
int loom_spin_destroy(loom_spinlock_t* lock);
int loom_spin_lock(loom_spinlock_t* lock);
int loom_spin_trylock(loom_spinlock_t* lock);
int loom_spin_unlock(loom_spinlock_t* lock);

/* ---- unnamed semaphores ---------------------------------------------------------------
 * POSIX's convention: 0, or -1 with errno. init: EINVAL (value above
 * LOOM_SEM_VALUE_MAX), ENOSYS (pshared != 0: process-shared semaphores are
 * not supported); trywait: EAGAIN; timedwait: ETIMEDOUT (never before
 * abstime, CLOCK_REALTIME), EINVAL (bad abstime when it would block); post:
 * EOVERFLOW; any: EINVAL for a semaphore not initialised. Not
 * async-signal-safe (see the top of this file). */
int loom_sem_init(loom_sem_t* sem, int pshared, unsigned value);
int loom_sem_destroy(loom_sem_t* sem);
int loom_sem_wait(loom_sem_t* sem);
int loom_sem_trywait(loom_sem_t* sem);
int loom_sem_timedwait(loom_sem_t* LOOM_RESTRICT sem, const struct timespec* LOOM_RESTRICT abstime);
int loom_sem_clockwait(loom_sem_t* LOOM_RESTRICT sem, clockid_t clock, const struct timespec* LOOM_RESTRICT abstime);
int loom_sem_post(loom_sem_t* sem);
int loom_sem_getvalue(loom_sem_t* LOOM_RESTRICT sem, int* LOOM_RESTRICT value);

/* ---- sleeping ---------------------------------------------------------------------------
 * The fibre sleeps; its processor runs others. With libloom-pthread (which
 * runs a program's signal handlers on its threads' fibres), a handler that
 * runs on the fibre during its sleep ends it, SA_RESTART or not, as the
 * kernel ends nanosleep: -1/EINTR with what was left in *rem (nanosleep,
 * usleep), EINTR returned (clock_nanosleep; *rem for a relative sleep),
 * the whole seconds left (sleep). A signal that runs no handler there
 * (ignored, blocked by the thread) does not end it. Without
 * libloom-pthread no signal interrupts a fibre's sleep: loom_sleep
 * returns 0, and *rem is set to zero.
 * nanosleep: -1/EINVAL for tv_nsec outside [0, 1e9) or a negative tv_sec;
 * clock_nanosleep returns the error (EINVAL, ENOTSUP for clocks other than
 * CLOCK_REALTIME and CLOCK_MONOTONIC) and takes TIMER_ABSTIME. */
unsigned int loom_sleep(unsigned int seconds);
int loom_usleep(unsigned int usec);
int loom_nanosleep(const struct timespec* req, struct timespec* rem);
int loom_clock_nanosleep(clockid_t clock, int flags, const struct timespec* req, struct timespec* rem);

/* The calling kernel thread's errno, looked up afresh on every call. */
int* loom_errno_location(void);

/* ---- clusters and processors ------------------------------------------------------------
 * A cluster is a scheduling domain: a set of processors (kernel threads)
 * with their own queues, configured from the LOOM_* variables
 * (loom/config.hpp). main() runs in the default cluster. */
/* EINVAL for 0 processors or more than 256; EAGAIN when threads cannot be made. */
int loom_cluster_create(loom_cluster_t** cluster, size_t processors);
/* Stops its processors. EBUSY while fibres remain in it (they must finish or
 * migrate first), EINVAL for the default cluster, EDEADLK from its own fibre. */
int loom_cluster_destroy(loom_cluster_t* cluster);
loom_cluster_t* loom_cluster_default(void);
/* The caller's cluster (the default one for kernel threads). */
loom_cluster_t* loom_cluster_self(void);
/* Adds n processors; *total (may be null) receives the new count. EINVAL for
 * n == 0 or more than 256 processors in all. */
int loom_cluster_add_processors(loom_cluster_t* cluster, size_t n, size_t* total);
size_t loom_cluster_processors(const loom_cluster_t* cluster);
unsigned int loom_cluster_id(const loom_cluster_t* cluster);
/* Moves the calling fibre to a processor of `to`; returns once it runs
 * there. EPERM from a kernel thread that is not a loom processor. */
int loom_migrate(loom_cluster_t* to);
/* The index of the calling fibre's processor within its cluster, or -1 on a
 * kernel thread that is not a processor. */
int loom_processor_index(void);

/* ---- statistics ----------------------------------------------------------------------
 * The runtime's counters, always on (loom/cluster.hpp says how they are kept;
 * loom/detail/stats_fields.h lists what each counts). LOOM_STATS=1 prints
 * every cluster's table at exit, LOOM_STATS_SIGNAL=SIGUSR2 (any catchable
 * signal, by name or number) whenever that signal arrives. */
typedef struct loom_stats {
#define LOOM_STATS_C_MEMBER(field, description) uint64_t field;
  LOOM_STATS_FIELDS(LOOM_STATS_C_MEMBER)
#undef LOOM_STATS_C_MEMBER
  uint64_t stack_bytes; /* bytes of fibre stacks mapped now, process-wide */
} loom_stats_t;

/* `cluster`'s counters (null: the caller's cluster): summed over its
 * processors when `processor` is -1, else that processor's own. EINVAL:
 * stats null, or processor neither -1 nor below the processor count. */
int loom_stats_get(const loom_cluster_t* cluster, int processor, loom_stats_t* stats);
/* Every live cluster's table to `out` (null: stderr). */
void loom_stats_print(FILE* out);
/* Every live fibre to `out` (null: stderr): id, name, state (running, ready,
 * blocked on what), cluster, processor, stack size and use (loom::dump_fibres;
 * LOOM_DUMP_SIGNAL=SIGUSR1 prints it on that signal). */
void loom_dump_fibres(FILE* out);

/* ---- colors --------------------------------------------------------------------------
 * loom/color.hpp as C. A color is a 32-bit mutual-exclusion domain of a
 * cluster: events (fn(arg), run to completion on a processor's event
 * runner) and colored fibres of one color never run at the same time, and
 * start in the order they were posted. A shared post may overlap other
 * shared work of its color, never exclusive work. Color 0 is "uncolored";
 * number your own colors below 2^31 and take others from
 * loom_color_allocate. An event may block (loom_mutex_lock, loom_read...),
 * holding its color meanwhile. Every call is safe from any fibre or thread
 * at any time; none waits for the event it posts; none is
 * async-signal-safe. `cluster` may be null everywhere: the caller's
 * cluster (the default one for kernel threads). */
typedef struct loom_color_stats {
  uint64_t events_run;         /* events that ran to completion */
  uint64_t fibres_started;     /* colored fibres that got their color */
  uint64_t steal_attempts;     /* thieves that looked at victims */
  uint64_t colors_stolen;      /* color queues that moved */
  uint64_t events_stolen;      /* events in those queues */
  uint64_t steal_cost_cycles;  /* smoothed TSC cycles of one steal */
  uint64_t stolen_work_cycles; /* mean measured work per stolen color */
  uint64_t colors_live;        /* color queues allocated now */
} loom_color_stats_t;

/* Posts fn(arg) as an event of `color` in the caller's cluster (exclusive,
 * or shared), or in `cluster` (shared: 0 or 1). Events of color 0 are
 * never serialised. EINVAL: fn null, shared not 0 or 1. */
int loom_event_post(uint32_t color, void (*fn)(void*), void* arg);
int loom_event_post_shared(uint32_t color, void (*fn)(void*), void* arg);
int loom_event_post_to(loom_cluster_t* cluster, uint32_t color, int shared, void (*fn)(void*), void* arg);
/* The color the caller runs under (an event's or a colored fibre's); 0 for
 * uncolored fibres and kernel threads. Not async-signal-safe. */
uint32_t loom_current_color(void);
/* The first of n consecutive colors nobody else gets from this call; 0 for
 * n == 0 or when the allocatable half of the color space is used up. */
uint32_t loom_color_allocate(uint32_t n);
/* The cluster's stealing policy, by name: "none", "libasync-smp",
 * "mely[:locality,time-left,penalty|base]" (LOOM_COLOR_STEAL). set: EINVAL
 * for a null or unknown name (nothing changes); get: EINVAL for a null buf,
 * ERANGE when len cannot hold the name and its NUL. */
int loom_color_set_policy(loom_cluster_t* cluster, const char* policy);
int loom_color_get_policy(loom_cluster_t* cluster, char* buf, size_t len);
/* Events of one color an event runner runs before it turns to the next
 * color (LOOM_COLOR_BATCH). EINVAL for 0. */
int loom_color_set_batch(loom_cluster_t* cluster, unsigned batch);
/* Where colors first posted from then on are placed (LOOM_COLOR_PLACEMENT):
 * "hash" (the color hashed over the processors) or "local" (the posting
 * processor). EINVAL for a null or unknown name. */
int loom_color_set_placement(loom_cluster_t* cluster, const char* placement);
/* The stealing penalty of the events that run fn: their queued work counts
 * as work / penalty when a thief weighs colors; 0 returns fn to the
 * measured value. EINVAL: fn null, penalty neither 0 nor >= 1 (or NaN). */
int loom_color_set_penalty(void (*fn)(void*), double penalty);
/* The cluster's color counters (sums over its processors). EINVAL: stats
 * null. */
int loom_color_stats(loom_cluster_t* cluster, loom_color_stats_t* stats);

/* ---- stages ----------------------------------------------------------------------------
 * loom/stage.hpp as C: a named group of operations whose concurrency the
 * stage's policy decides, on colors of the creator's cluster.
 *   EXCLUSIVE    operations never overlap and start in posting order;
 *   PARTITIONED  `partitions` colors: operations posted with one key are
 *                serialised, in posting order; other keys run in parallel
 *                (loom_stage_post without a key spreads over the partitions
 *                in turn, unordered);
 *   SHARED       operations may overlap; loom_stage_post_exclusive runs one
 *                with none of them (on the other policies it is
 *                loom_stage_post).
 * Each stage counts posts, starts and completions and times the wait (post
 * to start) and the run (start to return) on the monotonic clock.
 * Thread safety: every call may be made concurrently from any fibre or
 * thread, except that nothing may use a stage while loom_stage_destroy runs
 * or after. None is async-signal-safe. */
#define LOOM_STAGE_EXCLUSIVE 0
#define LOOM_STAGE_PARTITIONED 1
#define LOOM_STAGE_SHARED 2
#define LOOM_STAGE_PARTITIONS_MAX 65536

typedef struct loom_stage loom_stage_t; /* a loom::Stage */

typedef struct loom_stage_stats {
  uint64_t posted;     /* operations handed to the stage */
  uint64_t completed;  /* operations that have returned */
  uint64_t queued;     /* posted, not yet started (now) */
  uint64_t running;    /* started, not yet returned (now) */
  uint64_t queued_max; /* the most ever queued, as seen by a post */
  uint64_t wait_mean_ns, wait_max_ns; /* post -> start */
  uint64_t run_mean_ns, run_max_ns;   /* start -> return */
} loom_stage_stats_t;

/* EINVAL: name or out null, an unknown policy, PARTITIONED with 0 or more
 * than LOOM_STAGE_PARTITIONS_MAX partitions (the others ignore the
 * number); ENOMEM. The name is copied. */
int loom_stage_create(const char* name, int policy, unsigned partitions, loom_stage_t** out);
/* EINVAL: stage or fn null. */
int loom_stage_post(loom_stage_t* stage, void (*fn)(void*), void* arg);
int loom_stage_post_key(loom_stage_t* stage, uint64_t key, void (*fn)(void*), void* arg);
int loom_stage_post_exclusive(loom_stage_t* stage, void (*fn)(void*), void* arg);
/* Waits (the fibre blocks) until as many operations have returned as had
 * been posted at the call: at rest, until the stage is idle. EINVAL: stage
 * null; EDEADLK from one of the stage's own operations. From an event of
 * another color it blocks that processor's event runner, and may wait
 * forever for work queued behind it there: drain from fibres. */
int loom_stage_drain(loom_stage_t* stage);
/* EINVAL: stage or stats null. */
int loom_stage_stats(const loom_stage_t* stage, loom_stage_stats_t* stats);
/* A header line and the stage's row: counters, times in readable units.
 * EINVAL: stage or out null. loom_stage_print_all lists every live stage of
 * the process (EINVAL: out null). */
int loom_stage_print(const loom_stage_t* stage, FILE* out);
int loom_stage_print_all(FILE* out);
/* Waits until every operation posted to the stage has returned, as
 * loom_stage_drain, then frees it (its colors are not reused). EINVAL:
 * stage null; EDEADLK from one of its own operations. */
int loom_stage_destroy(loom_stage_t* stage);

/* ---- I/O ------------------------------------------------------------------------------
 * loom/io.hpp as C: each call has the signature, return convention (-1 and
 * errno) and errors of the system call it is named after, and blocks the
 * fibre, not the processor (read loom/io.hpp for descriptors, timeouts,
 * SIGPIPE and offloading). Descriptors are known to loom by number: close
 * them with loom_close, or call loom_forget after closing them otherwise.
 * The *_until forms take an absolute CLOCK_MONOTONIC deadline (null: none)
 * and fail with ETIMEDOUT when it passes. Thread-safe as the system calls;
 * none is async-signal-safe. */
int loom_socket(int domain, int type, int protocol);
int loom_socketpair(int domain, int type, int protocol, int sv[2]);
int loom_pipe(int fds[2]);
int loom_pipe2(int fds[2], int flags);
int loom_bind(int fd, const struct sockaddr* addr, socklen_t len);
int loom_listen(int fd, int backlog);
int loom_accept(int fd, struct sockaddr* LOOM_RESTRICT addr, socklen_t* LOOM_RESTRICT len);
int loom_accept4(int fd, struct sockaddr* LOOM_RESTRICT addr, socklen_t* LOOM_RESTRICT len, int flags);
int loom_connect(int fd, const struct sockaddr* addr, socklen_t len);
ssize_t loom_read(int fd, void* buf, size_t n);
ssize_t loom_write(int fd, const void* buf, size_t n);
ssize_t loom_readv(int fd, const struct iovec* iov, int iovcnt);
ssize_t loom_writev(int fd, const struct iovec* iov, int iovcnt);
ssize_t loom_recv(int fd, void* buf, size_t n, int flags);
ssize_t loom_send(int fd, const void* buf, size_t n, int flags);
ssize_t loom_recvfrom(int fd, void* LOOM_RESTRICT buf, size_t n, int flags, struct sockaddr* LOOM_RESTRICT from,
                      socklen_t* LOOM_RESTRICT len);
ssize_t loom_sendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* to, socklen_t len);
ssize_t loom_recvmsg(int fd, struct msghdr* msg, int flags);
ssize_t loom_sendmsg(int fd, const struct msghdr* msg, int flags);
/* The timeout of loom_recvmmsg is recvmmsg(2)'s, looked at only after each
 * datagram, as the kernel does (loom/io.hpp). */
int loom_recvmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags, struct timespec* timeout);
int loom_sendmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags);
ssize_t loom_read_until(int fd, void* buf, size_t n, const struct timespec* deadline);
ssize_t loom_write_until(int fd, const void* buf, size_t n, const struct timespec* deadline);
int loom_accept4_until(int fd, struct sockaddr* LOOM_RESTRICT addr, socklen_t* LOOM_RESTRICT len, int flags,
                       const struct timespec* deadline);
int loom_connect_until(int fd, const struct sockaddr* addr, socklen_t len, const struct timespec* deadline);
/* Regular files and name lookup: made on the offload cluster. */
ssize_t loom_pread(int fd, void* buf, size_t n, off_t offset);
ssize_t loom_pwrite(int fd, const void* buf, size_t n, off_t offset);
int loom_fsync(int fd);
/* Returns 0 or an EAI_* code, as getaddrinfo(3); free with freeaddrinfo. */
int loom_getaddrinfo(const char* LOOM_RESTRICT node, const char* LOOM_RESTRICT service,
                     const struct addrinfo* LOOM_RESTRICT hints, struct addrinfo** LOOM_RESTRICT res);
int loom_close(int fd);
int loom_dup(int fd);
int loom_dup2(int fd, int newfd);
int loom_dup3(int fd, int newfd, int flags);
/* The third argument, if cmd takes one, as fcntl(2): an int or a pointer. */
int loom_fcntl(int fd, int cmd, ...);
int loom_setsockopt(int fd, int level, int name, const void* val, socklen_t len);
int loom_getsockopt(int fd, int level, int name, void* LOOM_RESTRICT val, socklen_t* LOOM_RESTRICT len);
/* poll(2) on one descriptor: the ready revents (> 0), 0 at the timeout (ms;
 * -1: none), -1 on error. */
int loom_poll_one(int fd, short events, int timeout_ms);
/* One-shot readiness callback (loom::io::when_ready): fn(arg) runs once,
 * when fd's direction `events` (POLLIN or POLLOUT, not both) has an edge —
 * at once, before this returns, if one is pending. Arm it after a read or
 * write found EAGAIN (or a short read drained a stream socket). fn runs in
 * the poller's context: it must not block; it may create a fibre or post an
 * event. loom_close(fd) invokes an armed fn once, after closing. 0, or -1
 * with errno: EINVAL, EBADF, EPERM (a regular file), EBUSY (armed already,
 * or a fibre waits on that direction). */
int loom_when_ready(int fd, short events, void (*fn)(void*), void* arg);
/* Rest (loom::io::rest): a fibre waiting at the top of its loop gives its
 * stack back. The caller ends where it stands (nothing on its stack
 * survives, as with longjmp), its stack returns to its processor's cache,
 * and when fd has input (call it after a read found EAGAIN or came up
 * short) the same fibre is continued at fn(arg) on a stack from the cache:
 * same id, name, keys; loom_self() the same for a thread of loom_create,
 * which may loom_exit or return from fn to end. A loom_close(fd) or the
 * peer's hang-up while it rests continues it too (its next call finds
 * EBADF or the end). loom_rest_until also continues it at the deadline
 * (absolute CLOCK_MONOTONIC; null: none), and loom_rest_status() then says
 * ETIMEDOUT (else 0). Returns only on failure, the error number (errno set
 * too): EINVAL (fn null; main, or a thread not detached; a fibre
 * loom_create did not make whose loom_self() was taken before its first
 * rest: that id is its control block's address, which a first rest moves),
 * ENOTSUP (a thread with a TLS block of its own under libloom-pthread that
 * was not made restable, loom_attr_setrestable_np; or colored), EBADF,
 * EPERM (not a socket or pipe, or not called on a fibre), EBUSY (a fibre
 * waits on fd's input, or a loom_when_ready callback is armed there). */
int loom_rest(int fd, void (*fn)(void*), void* arg);
int loom_rest_until(int fd, void (*fn)(void*), void* arg, const struct timespec* deadline);
int loom_rest_status(void);
/* A new detached fibre (not a thread of loom_create: loom_self() gives it
 * a tagged id) that starts at rest on fd: no stack until fd first has
 * input, then fn(arg) runs, in the caller's cluster. 0, or an error number
 * as loom_rest's. */
int loom_rest_start(int fd, void (*fn)(void*), void* arg);
/* The same, made as attr says (its cluster, stack size and priority: a
 * server's worker starts connections in the cluster that serves them; a
 * color is refused with ENOTSUP; null: the defaults) and, with a deadline
 * (absolute CLOCK_MONOTONIC; null: none), continued then if fd had no
 * input (loom_rest_status() ETIMEDOUT): a connection that never sends
 * meets its idle timeout without ever taking a stack. EINVAL also for an
 * attr loom_attr_init did not initialise. */
int loom_rest_start_until(int fd, void (*fn)(void*), void* arg, const loom_attr_t* attr,
                          const struct timespec* deadline);
/* The I/O back end of the caller's cluster: "epoll" or "uring" (LOOM_IO;
 * "epoll" where io_uring was unavailable and the cluster fell back). */
const char* loom_io_backend(void);
/* poll(2), ppoll(2), select(2), pselect(2), epoll_wait(2), epoll_pwait(2)
 * over any number of descriptors (the program's own included: loom never
 * changes their flags), with the system calls' results and errors; the
 * fibre waits, its processor runs others. A timeout of 0 does not wait, a
 * negative one (or null) waits forever, and none ends early. select leaves
 * the time not slept in *timeout, as Linux's. epoll_* act on the program's
 * own epoll set. Signal masks: a fibre has none; the mask is applied to each
 * zero-timeout look the call makes (a pending signal it unblocks is
 * delivered then: EINTR), not to the wait between looks — wake a waiting
 * fibre through a descriptor (self-pipe, signalfd). See loom/io.hpp. */
int loom_poll(struct pollfd* fds, nfds_t n, int timeout_ms);
int loom_ppoll(struct pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* sigmask);
int loom_select(int nfds, fd_set* LOOM_RESTRICT readfds, fd_set* LOOM_RESTRICT writefds,
                fd_set* LOOM_RESTRICT exceptfds, struct timeval* LOOM_RESTRICT timeout);
int loom_pselect(int nfds, fd_set* LOOM_RESTRICT readfds, fd_set* LOOM_RESTRICT writefds,
                 fd_set* LOOM_RESTRICT exceptfds, const struct timespec* LOOM_RESTRICT timeout,
                 const sigset_t* LOOM_RESTRICT sigmask);
int loom_epoll_wait(int epfd, struct epoll_event* events, int maxevents, int timeout_ms);
int loom_epoll_pwait(int epfd, struct epoll_event* events, int maxevents, int timeout_ms, const sigset_t* sigmask);
/* Bounds on every later wait on fd, in ns (0: none): input calls fail with
 * EAGAIN after waiting `in_ns`, output calls after `out_ns`. */
int loom_set_timeouts(int fd, int64_t in_ns, int64_t out_ns);
void loom_forget(int fd);

struct loom_io_stats {
  uint64_t registrations; /* epoll_ctl ADD */
  uint64_t blocks;        /* waits on a readiness semaphore */
  uint64_t polls;         /* epoll_wait calls that returned events */
  uint64_t events;        /* readiness events delivered */
};
/* The calling fibre's cluster's I/O counters. */
void loom_io_stats(struct loom_io_stats* stats);

/* Runs fn(arg) on the offload cluster (its own processors) and returns its
 * result; other fibres keep running meanwhile. For blocking code that has no
 * fibre-aware form (a library's blocking call, a long computation). */
void* loom_offload(void* (*fn)(void*), void* arg);

#ifdef __cplusplus
}
#endif

/* Every errno read or written after this point is looked up afresh (see the
 * top of this file). */
#ifndef LOOM_KEEP_LIBC_ERRNO
#undef errno
#define errno (*loom_errno_location())
#endif

#endif /* LOOM_LOOM_H */
