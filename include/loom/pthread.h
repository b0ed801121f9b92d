/* loom/pthread.h — compile a pthread program unchanged on loom's fibres.
 *
 * Include it instead of <pthread.h>, or force-include it without touching
 * the source:
 *     cc -include loom/pthread.h prog.c $(pkg-config --cflags --libs loom)
 * Every pthread_* and unnamed sem_* name (functions, types, constants and
 * static initialisers), PTHREAD_STACK_MIN and friends, and sched_yield,
 * sleep, usleep, nanosleep and clock_nanosleep (fibre-aware: the fibre
 * sleeps, its processor runs others) become loom's, as macros: see
 * loom/loom.h for what each does and how it differs from glibc's.
 *
 * With LOOM_PTHREAD_IO defined (-DLOOM_PTHREAD_IO), the socket and
 * descriptor calls of loom/io.hpp — socket, bind, listen, accept, accept4,
 * connect, read, write, readv, writev, recv, send, recvfrom, sendto,
 * recvmsg, sendmsg, recvmmsg, sendmmsg, pread, pwrite, fsync, getaddrinfo,
 * close, dup, dup2, dup3, fcntl, setsockopt, getsockopt, pipe, pipe2, socketpair, and poll,
 * ppoll, select, pselect, epoll_wait, epoll_pwait (any number of
 * descriptors; loom/loom.h says what becomes of a signal mask) — become
 * loom_read and so on too, so that a thread-per-connection server blocks
 * fibres rather than processors. It is opt-in because those names are
 * common words: a struct member or C++ function called `read` or `bind`
 * is renamed as well (consistently within the program, but not in a library
 * header compiled without the macro), and std::bind breaks: for C.
 *
 * A name loom cannot support (signals to a thread, signal masks, scheduling
 * policies, CPU affinity, caller-supplied stacks, fork handlers, named
 * semaphores, priority ceilings) fails to compile with a message naming it;
 * it never silently reaches the system's version. Cancellation is loom's:
 * pthread_cancel acts at loom's cancellation points (loom/loom.h, at
 * loom_cancel): its waits, sleeps and joins, and with LOOM_PTHREAD_IO its
 * I/O calls; pthread_cleanup_push_defer_np and _pop_restore_np do not
 * compile.
 *
 * Order of includes. The system headers that declare or use these names are
 * included here, before the macros are defined; their include guards then
 * keep a later #include of them from seeing the macros. So <pthread.h>,
 * <semaphore.h>, <unistd.h>, <signal.h> ... may come before or after this
 * file. One consequence of force-including it: feature-test macros
 * (_GNU_SOURCE, _POSIX_C_SOURCE) must be given on the command line (-D),
 * since a #define in the source comes after these headers were read. In
 * C++, the standard library's threading headers are included first for the
 * same reason: std::mutex, std::thread and friends stay the system's
 * (compiled into libstdc++ against the system's types), which block the
 * processor; C++ programs should use loom::Mutex and loom::Fibre instead.
 *
 * The mappings are object-like macros, so an identifier spelled like a
 * mapped name is renamed wherever it appears after this header: a struct
 * member called `sleep`, say, becomes `loom_sleep` — consistently within
 * the program, which is harmless unless a library's header, compiled
 * without these macros, shares that struct.
 *
 * errno is per fibre across loom's calls (loom/loom.h explains how); limits
 * the program reads through sysconf (_SC_THREAD_STACK_MIN...) are still the
 * system's.
 */
#ifndef LOOM_PTHREAD_H
#define LOOM_PTHREAD_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#if defined(__cplusplus)
#include <condition_variable>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <thread>
#if __cplusplus >= 202002L && defined(__has_include)
#if __has_include(<semaphore>)
#include <atomic>
#include <barrier>
#include <latch>
#include <semaphore>
#include <stop_token>
#endif
#endif
#endif

#include "loom/loom.h"

/* ---- names loom cannot support: a compile-time error naming them ------------- */

#if defined(__clang__)
#define LOOM_UNSUPPORTED_ATTR_(msg) __attribute__((__unavailable__(msg)))
#else
#define LOOM_UNSUPPORTED_ATTR_(msg) __attribute__((__error__(msg)))
#endif
#ifdef __cplusplus
#define LOOM_UNSUPPORTED_(name, why)          \
  extern "C" int loom_unsupported_##name(...) \
      LOOM_UNSUPPORTED_ATTR_("loom/pthread.h: " #name " is not supported on fibres: " why);
#else
#define LOOM_UNSUPPORTED_(name, why)   \
  extern int loom_unsupported_##name() \
      LOOM_UNSUPPORTED_ATTR_("loom/pthread.h: " #name " is not supported on fibres: " why);
#endif

#define LOOM_WHY_SIGNALS_ "signals and signal masks belong to kernel threads, not fibres"
#define LOOM_WHY_SCHED_ "fibres have loom's three priorities (loom_attr_setpriority), not POSIX policies"
#define LOOM_WHY_AFFINITY_ "fibres move between processors; use clusters (loom_attr_setcluster, loom_migrate)"
#define LOOM_WHY_STACK_ "loom allocates fibre stacks itself (with a guard page); set only their size"
#define LOOM_WHY_PSHARED_ "named semaphores are process-shared; loom's are process-private"
#define LOOM_WHY_CEILING_ "priority-protected mutexes are not supported"

LOOM_UNSUPPORTED_(pthread_kill, LOOM_WHY_SIGNALS_)
LOOM_UNSUPPORTED_(pthread_sigmask, LOOM_WHY_SIGNALS_)
LOOM_UNSUPPORTED_(pthread_sigqueue, LOOM_WHY_SIGNALS_)
LOOM_UNSUPPORTED_(pthread_attr_setsigmask_np, LOOM_WHY_SIGNALS_)
LOOM_UNSUPPORTED_(pthread_attr_getsigmask_np, LOOM_WHY_SIGNALS_)
LOOM_UNSUPPORTED_(pthread_atfork, "fork() of a process running fibres on several kernel threads is not supported")
LOOM_UNSUPPORTED_(pthread_attr_setstack, LOOM_WHY_STACK_)
LOOM_UNSUPPORTED_(pthread_attr_setstackaddr, LOOM_WHY_STACK_)
LOOM_UNSUPPORTED_(pthread_attr_getstackaddr, LOOM_WHY_STACK_)
LOOM_UNSUPPORTED_(pthread_attr_setinheritsched, LOOM_WHY_SCHED_)
LOOM_UNSUPPORTED_(pthread_attr_getinheritsched, LOOM_WHY_SCHED_)
LOOM_UNSUPPORTED_(pthread_attr_setschedpolicy, LOOM_WHY_SCHED_)
LOOM_UNSUPPORTED_(pthread_attr_getschedpolicy, LOOM_WHY_SCHED_)
LOOM_UNSUPPORTED_(pthread_attr_setschedparam, LOOM_WHY_SCHED_)
LOOM_UNSUPPORTED_(pthread_attr_getschedparam, LOOM_WHY_SCHED_)
LOOM_UNSUPPORTED_(pthread_setschedparam, LOOM_WHY_SCHED_)
LOOM_UNSUPPORTED_(pthread_getschedparam, LOOM_WHY_SCHED_)
LOOM_UNSUPPORTED_(pthread_setschedprio, LOOM_WHY_SCHED_)
LOOM_UNSUPPORTED_(pthread_getcpuclockid, "a fibre has no CPU-time clock of its own")
LOOM_UNSUPPORTED_(pthread_setaffinity_np, LOOM_WHY_AFFINITY_)
LOOM_UNSUPPORTED_(pthread_getaffinity_np, LOOM_WHY_AFFINITY_)
LOOM_UNSUPPORTED_(pthread_attr_setaffinity_np, LOOM_WHY_AFFINITY_)
LOOM_UNSUPPORTED_(pthread_attr_getaffinity_np, LOOM_WHY_AFFINITY_)
LOOM_UNSUPPORTED_(pthread_getattr_default_np, "default attributes are per cluster (LOOM_* variables)")
LOOM_UNSUPPORTED_(pthread_setattr_default_np, "default attributes are per cluster (LOOM_* variables)")
LOOM_UNSUPPORTED_(pthread_mutexattr_setprioceiling, LOOM_WHY_CEILING_)
LOOM_UNSUPPORTED_(pthread_mutexattr_getprioceiling, LOOM_WHY_CEILING_)
LOOM_UNSUPPORTED_(pthread_mutex_setprioceiling, LOOM_WHY_CEILING_)
LOOM_UNSUPPORTED_(pthread_mutex_getprioceiling, LOOM_WHY_CEILING_)
LOOM_UNSUPPORTED_(pthread_cleanup_push_defer_np, "not on the header route: pthread_setcanceltype and pthread_cleanup_push")
LOOM_UNSUPPORTED_(pthread_cleanup_pop_restore_np, "not on the header route: pthread_cleanup_pop and pthread_setcanceltype")
LOOM_UNSUPPORTED_(sem_open, LOOM_WHY_PSHARED_)
LOOM_UNSUPPORTED_(sem_close, LOOM_WHY_PSHARED_)
LOOM_UNSUPPORTED_(sem_unlink, LOOM_WHY_PSHARED_)

#undef pthread_cleanup_push_defer_np
#undef pthread_cleanup_pop_restore_np
#define pthread_kill loom_unsupported_pthread_kill
#define pthread_sigmask loom_unsupported_pthread_sigmask
#define pthread_sigqueue loom_unsupported_pthread_sigqueue
#define pthread_attr_setsigmask_np loom_unsupported_pthread_attr_setsigmask_np
#define pthread_attr_getsigmask_np loom_unsupported_pthread_attr_getsigmask_np
#define pthread_atfork loom_unsupported_pthread_atfork
#define pthread_attr_setstack loom_unsupported_pthread_attr_setstack
#define pthread_attr_setstackaddr loom_unsupported_pthread_attr_setstackaddr
#define pthread_attr_getstackaddr loom_unsupported_pthread_attr_getstackaddr
#define pthread_attr_setinheritsched loom_unsupported_pthread_attr_setinheritsched
#define pthread_attr_getinheritsched loom_unsupported_pthread_attr_getinheritsched
#define pthread_attr_setschedpolicy loom_unsupported_pthread_attr_setschedpolicy
#define pthread_attr_getschedpolicy loom_unsupported_pthread_attr_getschedpolicy
#define pthread_attr_setschedparam loom_unsupported_pthread_attr_setschedparam
#define pthread_attr_getschedparam loom_unsupported_pthread_attr_getschedparam
#define pthread_setschedparam loom_unsupported_pthread_setschedparam
#define pthread_getschedparam loom_unsupported_pthread_getschedparam
#define pthread_setschedprio loom_unsupported_pthread_setschedprio
#define pthread_getcpuclockid loom_unsupported_pthread_getcpuclockid
#define pthread_setaffinity_np loom_unsupported_pthread_setaffinity_np
#define pthread_getaffinity_np loom_unsupported_pthread_getaffinity_np
#define pthread_attr_setaffinity_np loom_unsupported_pthread_attr_setaffinity_np
#define pthread_attr_getaffinity_np loom_unsupported_pthread_attr_getaffinity_np
#define pthread_getattr_default_np loom_unsupported_pthread_getattr_default_np
#define pthread_setattr_default_np loom_unsupported_pthread_setattr_default_np
#define pthread_mutexattr_setprioceiling loom_unsupported_pthread_mutexattr_setprioceiling
#define pthread_mutexattr_getprioceiling loom_unsupported_pthread_mutexattr_getprioceiling
#define pthread_mutex_setprioceiling loom_unsupported_pthread_mutex_setprioceiling
#define pthread_mutex_getprioceiling loom_unsupported_pthread_mutex_getprioceiling
#define pthread_cleanup_push_defer_np(fn, arg)             \
  loom_unsupported_pthread_cleanup_push_defer_np(fn, arg); \
  {
#define pthread_cleanup_pop_restore_np(ex) \
  }                                        \
  loom_unsupported_pthread_cleanup_pop_restore_np(ex)
#define sem_open loom_unsupported_sem_open
#define sem_close loom_unsupported_sem_close
#define sem_unlink loom_unsupported_sem_unlink

/* ---- types ------------------------------------------------------------------------------- */

#define pthread_t loom_t
#define pthread_attr_t loom_attr_t
#define pthread_key_t loom_key_t
#define pthread_once_t loom_once_t
#define pthread_mutex_t loom_mutex_t
#define pthread_mutexattr_t loom_mutexattr_t
#define pthread_cond_t loom_cond_t
#define pthread_condattr_t loom_condattr_t
#define pthread_rwlock_t loom_rwlock_t
#define pthread_rwlockattr_t loom_rwlockattr_t
#define pthread_barrier_t loom_barrier_t
#define pthread_barrierattr_t loom_barrierattr_t
#define pthread_spinlock_t loom_spinlock_t
#define sem_t loom_sem_t

/* ---- constants and static initialisers ------------------------------------------------- */

#undef PTHREAD_STACK_MIN
#define PTHREAD_STACK_MIN LOOM_STACK_MIN
#undef PTHREAD_KEYS_MAX
#define PTHREAD_KEYS_MAX LOOM_KEYS_MAX
#undef PTHREAD_DESTRUCTOR_ITERATIONS
#define PTHREAD_DESTRUCTOR_ITERATIONS LOOM_DESTRUCTOR_ITERATIONS
#undef SEM_VALUE_MAX
#define SEM_VALUE_MAX LOOM_SEM_VALUE_MAX

#undef PTHREAD_CREATE_JOINABLE
#define PTHREAD_CREATE_JOINABLE LOOM_CREATE_JOINABLE
#undef PTHREAD_CREATE_DETACHED
#define PTHREAD_CREATE_DETACHED LOOM_CREATE_DETACHED
#undef PTHREAD_SCOPE_SYSTEM
#define PTHREAD_SCOPE_SYSTEM LOOM_SCOPE_SYSTEM
#undef PTHREAD_SCOPE_PROCESS
#define PTHREAD_SCOPE_PROCESS LOOM_SCOPE_PROCESS
#undef PTHREAD_PROCESS_PRIVATE
#define PTHREAD_PROCESS_PRIVATE LOOM_PROCESS_PRIVATE
#undef PTHREAD_PROCESS_SHARED
#define PTHREAD_PROCESS_SHARED LOOM_PROCESS_SHARED

#undef PTHREAD_MUTEX_NORMAL
#define PTHREAD_MUTEX_NORMAL LOOM_MUTEX_NORMAL
#undef PTHREAD_MUTEX_RECURSIVE
#define PTHREAD_MUTEX_RECURSIVE LOOM_MUTEX_RECURSIVE
#undef PTHREAD_MUTEX_ERRORCHECK
#define PTHREAD_MUTEX_ERRORCHECK LOOM_MUTEX_ERRORCHECK
#undef PTHREAD_MUTEX_DEFAULT
#define PTHREAD_MUTEX_DEFAULT LOOM_MUTEX_DEFAULT
#undef PTHREAD_MUTEX_TIMED_NP
#define PTHREAD_MUTEX_TIMED_NP LOOM_MUTEX_NORMAL
#undef PTHREAD_MUTEX_RECURSIVE_NP
#define PTHREAD_MUTEX_RECURSIVE_NP LOOM_MUTEX_RECURSIVE
#undef PTHREAD_MUTEX_ERRORCHECK_NP
#define PTHREAD_MUTEX_ERRORCHECK_NP LOOM_MUTEX_ERRORCHECK
#undef PTHREAD_MUTEX_ADAPTIVE_NP
#define PTHREAD_MUTEX_ADAPTIVE_NP LOOM_MUTEX_ADAPTIVE_NP
#undef PTHREAD_MUTEX_FAST_NP
#define PTHREAD_MUTEX_FAST_NP LOOM_MUTEX_NORMAL
#undef PTHREAD_MUTEX_STALLED
#define PTHREAD_MUTEX_STALLED LOOM_MUTEX_STALLED
#undef PTHREAD_MUTEX_STALLED_NP
#define PTHREAD_MUTEX_STALLED_NP LOOM_MUTEX_STALLED
#undef PTHREAD_MUTEX_ROBUST
#define PTHREAD_MUTEX_ROBUST LOOM_MUTEX_ROBUST
#undef PTHREAD_MUTEX_ROBUST_NP
#define PTHREAD_MUTEX_ROBUST_NP LOOM_MUTEX_ROBUST
#undef PTHREAD_PRIO_NONE
#define PTHREAD_PRIO_NONE LOOM_PRIO_NONE
#undef PTHREAD_PRIO_INHERIT
#define PTHREAD_PRIO_INHERIT LOOM_PRIO_INHERIT
#undef PTHREAD_PRIO_PROTECT
#define PTHREAD_PRIO_PROTECT LOOM_PRIO_PROTECT

#undef PTHREAD_RWLOCK_PREFER_READER_NP
#define PTHREAD_RWLOCK_PREFER_READER_NP LOOM_RWLOCK_PREFER_READER_NP
#undef PTHREAD_RWLOCK_PREFER_WRITER_NP
#define PTHREAD_RWLOCK_PREFER_WRITER_NP LOOM_RWLOCK_PREFER_WRITER_NP
#undef PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP
#define PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP LOOM_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP
#undef PTHREAD_RWLOCK_DEFAULT_NP
#define PTHREAD_RWLOCK_DEFAULT_NP LOOM_RWLOCK_DEFAULT_NP

#undef PTHREAD_BARRIER_SERIAL_THREAD
#define PTHREAD_BARRIER_SERIAL_THREAD LOOM_BARRIER_SERIAL_THREAD
#undef PTHREAD_CANCEL_ENABLE
#define PTHREAD_CANCEL_ENABLE LOOM_CANCEL_ENABLE
#undef PTHREAD_CANCEL_DISABLE
#define PTHREAD_CANCEL_DISABLE LOOM_CANCEL_DISABLE
#undef PTHREAD_CANCEL_DEFERRED
#define PTHREAD_CANCEL_DEFERRED LOOM_CANCEL_DEFERRED
#undef PTHREAD_CANCEL_ASYNCHRONOUS
#define PTHREAD_CANCEL_ASYNCHRONOUS LOOM_CANCEL_ASYNCHRONOUS
#undef PTHREAD_CANCELED
#define PTHREAD_CANCELED LOOM_CANCELED

#undef PTHREAD_ONCE_INIT
#define PTHREAD_ONCE_INIT LOOM_ONCE_INIT
#undef PTHREAD_MUTEX_INITIALIZER
#define PTHREAD_MUTEX_INITIALIZER LOOM_MUTEX_INITIALIZER
#undef PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP
#define PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP LOOM_RECURSIVE_MUTEX_INITIALIZER_NP
#undef PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP
#define PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP LOOM_ERRORCHECK_MUTEX_INITIALIZER_NP
#undef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
#define PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP LOOM_ADAPTIVE_MUTEX_INITIALIZER_NP
#undef PTHREAD_COND_INITIALIZER
#define PTHREAD_COND_INITIALIZER LOOM_COND_INITIALIZER
#undef PTHREAD_RWLOCK_INITIALIZER
#define PTHREAD_RWLOCK_INITIALIZER LOOM_RWLOCK_INITIALIZER
#undef PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP
#define PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP LOOM_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP

/* ---- functions ---------------------------------------------------------------------- */

#define pthread_create loom_create
#define pthread_join loom_join
#define pthread_tryjoin_np loom_tryjoin_np
#define pthread_timedjoin_np loom_timedjoin_np
#define pthread_clockjoin_np loom_clockjoin_np
#define pthread_detach loom_detach
#define pthread_self loom_self
#define pthread_equal loom_equal
#define pthread_exit loom_exit
#define pthread_once loom_once
#define pthread_yield loom_yield
#define pthread_getattr_np loom_getattr_np
#define pthread_setname_np loom_setname_np
#define pthread_getname_np loom_getname_np
#define pthread_getconcurrency loom_getconcurrency
#define pthread_setconcurrency loom_setconcurrency
#define pthread_setcancelstate loom_setcancelstate
#define pthread_setcanceltype loom_setcanceltype
#define pthread_cancel loom_cancel
#define pthread_testcancel loom_testcancel
#undef pthread_cleanup_push
#define pthread_cleanup_push loom_cleanup_push
#undef pthread_cleanup_pop
#define pthread_cleanup_pop loom_cleanup_pop

#define pthread_attr_init loom_attr_init
#define pthread_attr_destroy loom_attr_destroy
#define pthread_attr_setdetachstate loom_attr_setdetachstate
#define pthread_attr_getdetachstate loom_attr_getdetachstate
#define pthread_attr_setstacksize loom_attr_setstacksize
#define pthread_attr_getstacksize loom_attr_getstacksize
#define pthread_attr_setguardsize loom_attr_setguardsize
#define pthread_attr_getguardsize loom_attr_getguardsize
#define pthread_attr_getstack loom_attr_getstack
#define pthread_attr_setscope loom_attr_setscope
#define pthread_attr_getscope loom_attr_getscope

#define pthread_key_create loom_key_create
#define pthread_key_delete loom_key_delete
#define pthread_getspecific loom_getspecific
#define pthread_setspecific loom_setspecific

#define pthread_mutexattr_init loom_mutexattr_init
#define pthread_mutexattr_destroy loom_mutexattr_destroy
#define pthread_mutexattr_settype loom_mutexattr_settype
#define pthread_mutexattr_gettype loom_mutexattr_gettype
#define pthread_mutexattr_setpshared loom_mutexattr_setpshared
#define pthread_mutexattr_getpshared loom_mutexattr_getpshared
#define pthread_mutexattr_setprotocol loom_mutexattr_setprotocol
#define pthread_mutexattr_getprotocol loom_mutexattr_getprotocol
#define pthread_mutexattr_setrobust loom_mutexattr_setrobust
#define pthread_mutexattr_getrobust loom_mutexattr_getrobust
#define pthread_mutexattr_setrobust_np loom_mutexattr_setrobust
#define pthread_mutexattr_getrobust_np loom_mutexattr_getrobust
#define pthread_mutex_init loom_mutex_init
#define pthread_mutex_destroy loom_mutex_destroy
#define pthread_mutex_lock loom_mutex_lock
#define pthread_mutex_trylock loom_mutex_trylock
#define pthread_mutex_timedlock loom_mutex_timedlock
#define pthread_mutex_clocklock loom_mutex_clocklock
#define pthread_mutex_unlock loom_mutex_unlock
#define pthread_mutex_consistent loom_mutex_consistent
#define pthread_mutex_consistent_np loom_mutex_consistent

#define pthread_condattr_init loom_condattr_init
#define pthread_condattr_destroy loom_condattr_destroy
#define pthread_condattr_setclock loom_condattr_setclock
#define pthread_condattr_getclock loom_condattr_getclock
#define pthread_condattr_setpshared loom_condattr_setpshared
#define pthread_condattr_getpshared loom_condattr_getpshared
#define pthread_cond_init loom_cond_init
#define pthread_cond_destroy loom_cond_destroy
#define pthread_cond_wait loom_cond_wait
#define pthread_cond_timedwait loom_cond_timedwait
#define pthread_cond_clockwait loom_cond_clockwait
#define pthread_cond_signal loom_cond_signal
#define pthread_cond_broadcast loom_cond_broadcast

#define pthread_rwlockattr_init loom_rwlockattr_init
#define pthread_rwlockattr_destroy loom_rwlockattr_destroy
#define pthread_rwlockattr_setpshared loom_rwlockattr_setpshared
#define pthread_rwlockattr_getpshared loom_rwlockattr_getpshared
#define pthread_rwlockattr_setkind_np loom_rwlockattr_setkind_np
#define pthread_rwlockattr_getkind_np loom_rwlockattr_getkind_np
#define pthread_rwlock_init loom_rwlock_init
#define pthread_rwlock_destroy loom_rwlock_destroy
#define pthread_rwlock_rdlock loom_rwlock_rdlock
#define pthread_rwlock_tryrdlock loom_rwlock_tryrdlock
#define pthread_rwlock_timedrdlock loom_rwlock_timedrdlock
#define pthread_rwlock_clockrdlock loom_rwlock_clockrdlock
#define pthread_rwlock_wrlock loom_rwlock_wrlock
#define pthread_rwlock_trywrlock loom_rwlock_trywrlock
#define pthread_rwlock_timedwrlock loom_rwlock_timedwrlock
#define pthread_rwlock_clockwrlock loom_rwlock_clockwrlock
#define pthread_rwlock_unlock loom_rwlock_unlock

#define pthread_barrierattr_init loom_barrierattr_init
#define pthread_barrierattr_destroy loom_barrierattr_destroy
#define pthread_barrierattr_setpshared loom_barrierattr_setpshared
#define pthread_barrierattr_getpshared loom_barrierattr_getpshared
#define pthread_barrier_init loom_barrier_init
#define pthread_barrier_destroy loom_barrier_destroy
#define pthread_barrier_wait loom_barrier_wait

#define pthread_spin_init loom_spin_init
#define pthread_spin_destroy loom_spin_destroy
#define pthread_spin_lock loom_spin_lock
#define pthread_spin_trylock loom_spin_trylock
#define pthread_spin_unlock loom_spin_unlock

#define sem_init loom_sem_init
#define sem_destroy loom_sem_destroy
#define sem_wait loom_sem_wait
#define sem_trywait loom_sem_trywait
#define sem_timedwait loom_sem_timedwait
#define sem_clockwait loom_sem_clockwait
#define sem_post loom_sem_post
#define sem_getvalue loom_sem_getvalue

#define sched_yield loom_yield
#define sleep loom_sleep
#define usleep loom_usleep
#define nanosleep loom_nanosleep
#define clock_nanosleep loom_clock_nanosleep

/* ---- descriptors, on request ------------------------------------------------------ */

#ifdef LOOM_PTHREAD_IO
#define socket loom_socket
#define socketpair loom_socketpair
#define pipe loom_pipe
#define pipe2 loom_pipe2
#define bind loom_bind
#define listen loom_listen
#define accept loom_accept
#define accept4 loom_accept4
#define connect loom_connect
#define read loom_read
#define write loom_write
#define readv loom_readv
#define writev loom_writev
#define recv loom_recv
#define send loom_send
#define recvfrom loom_recvfrom
#define sendto loom_sendto
#define recvmsg loom_recvmsg
#define sendmsg loom_sendmsg
#define recvmmsg loom_recvmmsg
#define sendmmsg loom_sendmmsg
#define pread loom_pread
#define pwrite loom_pwrite
#define fsync loom_fsync
#define getaddrinfo loom_getaddrinfo
#define close loom_close
#define dup loom_dup
#define dup2 loom_dup2
#define dup3 loom_dup3
#define fcntl loom_fcntl
#define setsockopt loom_setsockopt
#define getsockopt loom_getsockopt
#define poll loom_poll
#define ppoll loom_ppoll
#define select loom_select
#define pselect loom_pselect
#define epoll_wait loom_epoll_wait
#define epoll_pwait loom_epoll_pwait
#endif

#endif /* LOOM_PTHREAD_H */
