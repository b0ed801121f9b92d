/* capi/pthread/nothrow.c — pthread_mutex_lock, pthread_mutex_timedlock and
 * pthread_mutex_clocklock by their glibc names, for the preload and link
 * routes: what they do is sync.cpp's (loom_pthread_mutex_*).
 *
 * Defined in C, not C++: glibc declares them nothrow (__THROWNL), which
 * makes a C++ definition noexcept. A thread with asynchronous cancellation
 * enabled is cancelled inside their wait (glibc's tst-cancel1), and the
 * unwinding passes these frames: a noexcept frame ends that in
 * std::terminate, a C frame lets it pass. */
#define _GNU_SOURCE
#include <pthread.h>
#include <time.h>

int loom_pthread_mutex_lock(pthread_mutex_t* m);
int loom_pthread_mutex_timedlock(pthread_mutex_t* m, const struct timespec* abs);
int loom_pthread_mutex_clocklock(pthread_mutex_t* m, clockid_t c, const struct timespec* abs);

int pthread_mutex_lock(pthread_mutex_t* m) { return loom_pthread_mutex_lock(m); }

int pthread_mutex_timedlock(pthread_mutex_t* m, const struct timespec* abs) {
  return loom_pthread_mutex_timedlock(m, abs);
}

int pthread_mutex_clocklock(pthread_mutex_t* m, clockid_t c, const struct timespec* abs) {
  return loom_pthread_mutex_clocklock(m, c, abs);
}
