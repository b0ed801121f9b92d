// capi/sem_sleep.cpp — unnamed semaphores and the sleep family. Both use
// POSIX's -1-and-errno convention (clock_nanosleep excepted), so errno is
// set here, after the last switch, through a fresh lookup (capi.hpp).
#include <chrono>
#include <limits>

#include "base/futex.hpp"
#include "capi.hpp"
#include "sched/cancel.hpp"
#include "sched/processor.hpp"

namespace loom::capi {

namespace {

int fail(int e) {
  *errno_slot() = e;
  return -1;
}

Semaphore* sem_of(loom_sem_t* s) {
  return s ? object<Semaphore>(
                 s, [](void*) {}, /*build_unset=*/false)
           : nullptr;
}

// Sleeps until clock c reads abs or later. A sleep too long for a deadline
// is made in long steps. A cancellation point: a pending request acts
// before it and when it comes during it. False if a signal handler ran on
// the fibre meanwhile (libloom-pthread's): the sleep ends there, EINTR for
// the caller, as the kernel's (rt::sleep_until_interruptible).
bool sleep_until(clockid_t c, const timespec& abs) {
  constexpr std::int64_t kStepNs = std::int64_t(86400) * 1000000000;
  cancel_point();
  while (!reached(c, abs)) {
    Deadline d = deadline_of(c, abs);
    if (d == kForever) d = rt::now_ns() + kStepNs;
    // (a request ends it unless cancellation is disabled, or acting)
    switch (rt::sleep_until_interruptible(d, rt::this_processor() && cancel_acts_here())) {
      case rt::SleepEnd::cancelled:
        cancel_point();
        return true;  // (not reached: the request acts)
      case rt::SleepEnd::interrupted:
        return false;
      case rt::SleepEnd::reached:
        break;
    }
  }
  return true;
}

// Sleeps for rel on the monotonic clock (saturating: a huge rel is
// forever). False if a handler ended it (sleep_until), with what was left
// of rel in *rem (if not null).
bool sleep_for(const timespec& rel, timespec* rem = nullptr) {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  timespec abs{now.tv_sec + rel.tv_sec, now.tv_nsec + rel.tv_nsec};
  if (abs.tv_nsec >= 1000000000) {
    ++abs.tv_sec;
    abs.tv_nsec -= 1000000000;
  }
  if (rel.tv_sec > std::numeric_limits<time_t>::max() - now.tv_sec - 1) abs = {std::numeric_limits<time_t>::max(), 0};
  if (sleep_until(CLOCK_MONOTONIC, abs)) return true;
  if (rem) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    timespec left{abs.tv_sec - now.tv_sec, abs.tv_nsec - now.tv_nsec};
    if (left.tv_nsec < 0) {
      --left.tv_sec;
      left.tv_nsec += 1000000000;
    }
    if (left.tv_sec < 0) left = {0, 0};
    if (left.tv_sec > rel.tv_sec || (left.tv_sec == rel.tv_sec && left.tv_nsec > rel.tv_nsec)) left = rel;
    *rem = left;
  }
  return false;
}

bool valid_clock(clockid_t c) {
  timespec res;
  return clock_getres(c, &res) == 0;
}

}  // namespace

}  // namespace loom::capi

using namespace loom;
using namespace loom::capi;

extern "C" {

// ---- semaphores --------------------------------------------------------------------

int loom_sem_init(loom_sem_t* s, int pshared, unsigned value) {
  if (!s || value > LOOM_SEM_VALUE_MAX) return fail(EINVAL);
  if (pshared) return fail(ENOSYS);  // POSIX's error for an unsupported pshared
  new (&s->_loom_impl) Semaphore(value);
  store_state(&s->_loom_state, kReady);
  return 0;
}

int loom_sem_destroy(loom_sem_t* s) {
  if (!sem_of(s)) return fail(EINVAL);
  std::launder(reinterpret_cast<Semaphore*>(&s->_loom_impl))->~Semaphore();
  store_state(&s->_loom_state, kDestroyed);
  return 0;
}

int loom_sem_wait(loom_sem_t* s) {
  Semaphore* x = sem_of(s);
  if (!x) return fail(EINVAL);
  cancel_point();  // even when it need not wait, as glibc's
  if (x->acquire_errno(kNow) == 0) return 0;
  ErrnoKeeper k;
  int e;
  {
    CancellableWait c;
    e = x->acquire_errno(kForever);
  }
  cancel_point();  // a request ended the wait
  k.done(e);
  return e ? -1 : 0;
}

int loom_sem_trywait(loom_sem_t* s) {
  Semaphore* x = sem_of(s);
  if (!x) return fail(EINVAL);
  int e = x->acquire_errno(kNow);
  return e ? fail(e) : 0;
}

int loom_sem_clockwait(loom_sem_t* s, clockid_t clock, const struct timespec* abs) {
  Semaphore* x = sem_of(s);
  if (!x) return fail(EINVAL);
  cancel_point();
  ErrnoKeeper k;
  int e = timed(clock, abs, EAGAIN, [x](Deadline d) {
    int r;
    {
      CancellableWait c;
      r = x->acquire_errno(d);
    }
    cancel_point();  // a request ended the wait (before timed() would wait again)
    return r;
  });
  k.done(e);
  return e ? -1 : 0;
}

int loom_sem_timedwait(loom_sem_t* s, const struct timespec* abs) { return loom_sem_clockwait(s, CLOCK_REALTIME, abs); }

int loom_sem_post(loom_sem_t* s) {
  Semaphore* x = sem_of(s);
  if (!x) return fail(EINVAL);
  int e = x->release_errno();
  return e ? fail(e) : 0;
}

int loom_sem_getvalue(loom_sem_t* s, int* value) {
  Semaphore* x = sem_of(s);
  if (!x || !value) return fail(EINVAL);
  *value = static_cast<int>(x->value());
  return 0;
}

// ---- sleeping -------------------------------------------------------------------------
// A signal handler run on the fibre during a sleep (libloom-pthread's: the
// C API alone runs none there) ends it with EINTR, as the kernel ends
// nanosleep, SA_RESTART or not (sleep_until above).

unsigned int loom_sleep(unsigned int seconds) {
  ErrnoKeeper k;
  timespec left;
  if (!sleep_for(timespec{static_cast<time_t>(seconds), 0}, &left)) {
    k.done(EINTR);
    return static_cast<unsigned>(left.tv_sec);  // the whole seconds left, as glibc's sleep
  }
  k.done();
  return 0;
}

int loom_usleep(unsigned int usec) {
  ErrnoKeeper k;
  bool slept = sleep_for(timespec{static_cast<time_t>(usec / 1000000), static_cast<long>(usec % 1000000) * 1000});
  k.done(slept ? 0 : EINTR);
  return slept ? 0 : -1;
}

int loom_nanosleep(const struct timespec* req, struct timespec* rem) {
  if (!valid(req) || req->tv_sec < 0) return fail(EINVAL);
  ErrnoKeeper k;
  timespec left{0, 0};
  bool slept = sleep_for(*req, &left);
  k.done(slept ? 0 : EINTR);
  if (rem) *rem = left;
  return slept ? 0 : -1;
}

int loom_clock_nanosleep(clockid_t clock, int flags, const struct timespec* req, struct timespec* rem) {
  if (!supported_clock(clock)) return valid_clock(clock) ? ENOTSUP : EINVAL;
  // A negative time is refused, absolute too, as the kernel's.
  if (!valid(req) || (flags & ~TIMER_ABSTIME) || req->tv_sec < 0) return EINVAL;
  ErrnoKeeper k;
  timespec left{0, 0};
  bool slept = (flags & TIMER_ABSTIME) ? sleep_until(clock, *req) : sleep_for(*req, &left);
  k.done();
  if (rem && !(flags & TIMER_ABSTIME)) *rem = left;
  return slept ? 0 : EINTR;
}

}  // extern "C"
