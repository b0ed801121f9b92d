// capi/sync.cpp — loom_mutex_t, loom_cond_t, loom_rwlock_t, loom_barrier_t,
// loom_spinlock_t and their attribute objects, over loom/sync.hpp.
//
// Each C object holds its C++ primitive in place (capi.hpp: object<T>),
// built on first use when it was statically initialised. A blocking call
// first tries without blocking, so the common uncontended case costs no
// errno bookkeeping; only the path that may switch saves and restores errno.
#include <cstring>

#include "capi.hpp"

namespace loom::capi {

namespace {

constexpr unsigned kMutexAttrMagic = 0x6c6f6d61;    // "loma"
constexpr unsigned kCondAttrMagic = 0x6c6f6361;     // "loca"
constexpr unsigned kRWAttrMagic = 0x6c6f7277;       // "lorw"
constexpr unsigned kBarrierAttrMagic = 0x6c6f6261;  // "loba"

template <class A>
bool ok(const A* a, unsigned magic) {
  return a && a->_loom_magic == magic;
}

// PROCESS_SHARED is a valid value that loom does not support.
int check_pshared(int v) {
  if (v == LOOM_PROCESS_PRIVATE) return 0;
  return v == LOOM_PROCESS_SHARED ? ENOTSUP : EINVAL;
}

MutexType mutex_type(unsigned char t) {
  switch (t) {
    case LOOM_MUTEX_RECURSIVE:
      return MutexType::recursive;
    case LOOM_MUTEX_ERRORCHECK:
      return MutexType::errorcheck;
    default:
      return MutexType::normal;
  }
}

MutexPolicy mutex_policy(unsigned char type, unsigned char policy) {
  switch (policy) {
    case LOOM_MUTEX_POLICY_BLOCKING:
      return MutexPolicy::blocking;
    case LOOM_MUTEX_POLICY_SPIN:
      return MutexPolicy::spin;
    case LOOM_MUTEX_POLICY_BATON:
      return MutexPolicy::baton;
    case LOOM_MUTEX_POLICY_HYBRID:
      return MutexPolicy::hybrid;
    default:
      return type == LOOM_MUTEX_ADAPTIVE_NP ? MutexPolicy::spin : default_mutex_policy();
  }
}

Mutex* mutex_of(loom_mutex_t* m) {
  if (!m) return nullptr;
  return object<Mutex>(
      m, [m](void* w) { new (w) Mutex(mutex_type(m->_loom_type), mutex_policy(m->_loom_type, m->_loom_policy)); });
}

CondVar* cond_of(loom_cond_t* c) {
  if (!c) return nullptr;
  return object<CondVar>(c, [](void* w) { new (w) CondVar; });
}

RWLock* rwlock_of(loom_rwlock_t* r) {
  if (!r) return nullptr;
  return object<RWLock>(r, [r](void* w) {
    new (w) RWLock(r->_loom_kind == LOOM_RWLOCK_PREFER_READER_NP ? RWPreference::reader : RWPreference::writer);
  });
}

// Blocks in `op(kForever)` after `op(kNow)` found the object busy.
template <class Op>
int blocking(int busy, Op&& op) {
  int e = op(kNow);
  if (e != busy) return e;
  ErrnoKeeper k;
  e = op(kForever);
  k.done();
  return e;
}

template <class Op>
int timed_keep_errno(clockid_t c, const timespec* abs, int busy, Op&& op) {
  ErrnoKeeper k;
  int e = timed(c, abs, busy, op);
  k.done();
  return e;
}

// Destroys a C object whose C++ object needs no emptiness check (or has
// passed it): all-zero objects are just marked.
template <class T, class C>
int destroy_object(C* o) {
  if (!o) return EINVAL;
  unsigned char s = load_state(&o->_loom_state);
  if (s == kReady) {
    std::launder(reinterpret_cast<T*>(&o->_loom_impl))->~T();
  } else if (s != kUnset) {
    return EINVAL;
  }
  store_state(&o->_loom_state, kDestroyed);
  return 0;
}

}  // namespace

}  // namespace loom::capi

using namespace loom;
using namespace loom::capi;

extern "C" {

// ---- mutex attributes -------------------------------------------------------------

int loom_mutexattr_init(loom_mutexattr_t* a) {
  if (!a) return EINVAL;
  std::memset(a, 0, sizeof *a);
  a->_loom_magic = kMutexAttrMagic;
  a->_loom_type = LOOM_MUTEX_DEFAULT;
  a->_loom_policy = LOOM_MUTEX_POLICY_DEFAULT;
  a->_loom_pshared = LOOM_PROCESS_PRIVATE;
  a->_loom_protocol = LOOM_PRIO_NONE;
  a->_loom_robust = LOOM_MUTEX_STALLED;
  return 0;
}

int loom_mutexattr_destroy(loom_mutexattr_t* a) {
  if (!ok(a, kMutexAttrMagic)) return EINVAL;
  a->_loom_magic = 0;
  return 0;
}

int loom_mutexattr_settype(loom_mutexattr_t* a, int type) {
  if (!ok(a, kMutexAttrMagic) || type < LOOM_MUTEX_NORMAL || type > LOOM_MUTEX_ADAPTIVE_NP) return EINVAL;
  a->_loom_type = type;
  return 0;
}

int loom_mutexattr_gettype(const loom_mutexattr_t* a, int* type) {
  if (!ok(a, kMutexAttrMagic) || !type) return EINVAL;
  *type = a->_loom_type;
  return 0;
}

int loom_mutexattr_setpshared(loom_mutexattr_t* a, int v) {
  if (!ok(a, kMutexAttrMagic)) return EINVAL;
  return check_pshared(v);
}

int loom_mutexattr_getpshared(const loom_mutexattr_t* a, int* v) {
  if (!ok(a, kMutexAttrMagic) || !v) return EINVAL;
  *v = a->_loom_pshared;
  return 0;
}

int loom_mutexattr_setprotocol(loom_mutexattr_t* a, int p) {
  if (!ok(a, kMutexAttrMagic)) return EINVAL;
  if (p == LOOM_PRIO_NONE) return 0;
  return p == LOOM_PRIO_INHERIT || p == LOOM_PRIO_PROTECT ? ENOTSUP : EINVAL;
}

int loom_mutexattr_getprotocol(const loom_mutexattr_t* a, int* p) {
  if (!ok(a, kMutexAttrMagic) || !p) return EINVAL;
  *p = a->_loom_protocol;
  return 0;
}

int loom_mutexattr_setrobust(loom_mutexattr_t* a, int r) {
  if (!ok(a, kMutexAttrMagic)) return EINVAL;
  if (r == LOOM_MUTEX_STALLED) return 0;
  return r == LOOM_MUTEX_ROBUST ? ENOTSUP : EINVAL;
}

int loom_mutexattr_getrobust(const loom_mutexattr_t* a, int* r) {
  if (!ok(a, kMutexAttrMagic) || !r) return EINVAL;
  *r = a->_loom_robust;
  return 0;
}

int loom_mutexattr_setpolicy_np(loom_mutexattr_t* a, int p) {
  if (!ok(a, kMutexAttrMagic) || p < LOOM_MUTEX_POLICY_DEFAULT || p > LOOM_MUTEX_POLICY_HYBRID) return EINVAL;
  a->_loom_policy = p;
  return 0;
}

int loom_mutexattr_getpolicy_np(const loom_mutexattr_t* a, int* p) {
  if (!ok(a, kMutexAttrMagic) || !p) return EINVAL;
  *p = a->_loom_policy;
  return 0;
}

// ---- mutexes ------------------------------------------------------------------------

int loom_mutex_init(loom_mutex_t* m, const loom_mutexattr_t* a) {
  if (!m || (a && !ok(a, kMutexAttrMagic))) return EINVAL;
  m->_loom_type = static_cast<unsigned char>(a ? a->_loom_type : LOOM_MUTEX_DEFAULT);
  m->_loom_policy = static_cast<unsigned char>(a ? a->_loom_policy : LOOM_MUTEX_POLICY_DEFAULT);
  new (&m->_loom_impl) Mutex(mutex_type(m->_loom_type), mutex_policy(m->_loom_type, m->_loom_policy));
  store_state(&m->_loom_state, kReady);
  return 0;
}

int loom_mutex_destroy(loom_mutex_t* m) {
  if (!m) return EINVAL;
  if (load_state(&m->_loom_state) == kReady) {
    Mutex* x = mutex_of(m);
    if (x->held_by_caller() || x->lock_errno(kNow) != 0) return EBUSY;
    x->unlock_errno();
  }
  return destroy_object<Mutex>(m);
}

int loom_mutex_lock(loom_mutex_t* m) {
  Mutex* x = mutex_of(m);
  if (!x) return EINVAL;
  return blocking(EBUSY, [x](Deadline d) { return x->lock_errno(d); });
}

int loom_mutex_trylock(loom_mutex_t* m) {
  Mutex* x = mutex_of(m);
  if (!x) return EINVAL;
  int e = x->lock_errno(kNow);
  return e == EDEADLK ? EBUSY : e;  // an error-checking mutex the caller holds is busy too
}

int loom_mutex_clocklock(loom_mutex_t* m, clockid_t clock, const struct timespec* abs) {
  Mutex* x = mutex_of(m);
  if (!x) return EINVAL;
  return timed_keep_errno(clock, abs, EBUSY, [x](Deadline d) { return x->lock_errno(d); });
}

int loom_mutex_timedlock(loom_mutex_t* m, const struct timespec* abs) {
  return loom_mutex_clocklock(m, CLOCK_REALTIME, abs);
}

int loom_mutex_unlock(loom_mutex_t* m) {
  Mutex* x = mutex_of(m);
  if (!x) return EINVAL;
  return x->unlock_errno();
}

int loom_mutex_consistent(loom_mutex_t* m) {
  (void)m;
  return EINVAL;  // no mutex is robust
}

// ---- condition attributes -------------------------------------------------------------

int loom_condattr_init(loom_condattr_t* a) {
  if (!a) return EINVAL;
  std::memset(a, 0, sizeof *a);
  a->_loom_magic = kCondAttrMagic;
  a->_loom_clock = CLOCK_REALTIME;
  a->_loom_pshared = LOOM_PROCESS_PRIVATE;
  return 0;
}

int loom_condattr_destroy(loom_condattr_t* a) {
  if (!ok(a, kCondAttrMagic)) return EINVAL;
  a->_loom_magic = 0;
  return 0;
}

int loom_condattr_setclock(loom_condattr_t* a, clockid_t c) {
  if (!ok(a, kCondAttrMagic) || !supported_clock(c)) return EINVAL;
  a->_loom_clock = c;
  return 0;
}

int loom_condattr_getclock(const loom_condattr_t* a, clockid_t* c) {
  if (!ok(a, kCondAttrMagic) || !c) return EINVAL;
  *c = a->_loom_clock;
  return 0;
}

int loom_condattr_setpshared(loom_condattr_t* a, int v) {
  if (!ok(a, kCondAttrMagic)) return EINVAL;
  return check_pshared(v);
}

int loom_condattr_getpshared(const loom_condattr_t* a, int* v) {
  if (!ok(a, kCondAttrMagic) || !v) return EINVAL;
  *v = a->_loom_pshared;
  return 0;
}

// ---- conditions -----------------------------------------------------------------------

int loom_cond_init(loom_cond_t* c, const loom_condattr_t* a) {
  if (!c || (a && !ok(a, kCondAttrMagic))) return EINVAL;
  c->_loom_monotonic = a && a->_loom_clock == CLOCK_MONOTONIC;
  new (&c->_loom_impl) CondVar;
  store_state(&c->_loom_state, kReady);
  return 0;
}

int loom_cond_destroy(loom_cond_t* c) { return destroy_object<CondVar>(c); }

// Cancellation points (capi.hpp): a pending request acts on entry, with
// the mutex held; one that comes during the wait ends it (CancellableWait)
// and acts once the mutex is taken again.
int loom_cond_wait(loom_cond_t* c, loom_mutex_t* m) {
  CondVar* cv = cond_of(c);
  Mutex* x = mutex_of(m);
  if (!cv || !x) return EINVAL;
  cancel_point();
  ErrnoKeeper k;
  int e;
  {
    CancellableWait c;
    e = cv->wait_errno(*x, kForever);
  }
  k.done();
  cancel_point();  // a request ended the wait: it acts with the mutex taken again
  return e;
}

int loom_cond_clockwait(loom_cond_t* c, loom_mutex_t* m, clockid_t clock, const struct timespec* abs) {
  CondVar* cv = cond_of(c);
  Mutex* x = mutex_of(m);
  if (!cv || !x || !supported_clock(clock) || !valid(abs)) return EINVAL;
  cancel_point();
  ErrnoKeeper k;
  int e;
  {
    CancellableWait c;
    e = cv->wait_errno(*x, deadline_of(clock, *abs));
  }
  cancel_point();
  // The realtime clock may have been set back since the deadline was
  // computed: report a spurious wake-up rather than an early timeout.
  if (e == ETIMEDOUT && !reached(clock, *abs)) e = 0;
  k.done();
  return e;
}

int loom_cond_timedwait(loom_cond_t* c, loom_mutex_t* m, const struct timespec* abs) {
  if (!c) return EINVAL;
  return loom_cond_clockwait(c, m, c->_loom_monotonic ? CLOCK_MONOTONIC : CLOCK_REALTIME, abs);
}

int loom_cond_signal(loom_cond_t* c) {
  CondVar* cv = cond_of(c);
  if (!cv) return EINVAL;
  cv->notify_one();
  return 0;
}

int loom_cond_broadcast(loom_cond_t* c) {
  CondVar* cv = cond_of(c);
  if (!cv) return EINVAL;
  cv->notify_all();
  return 0;
}

// ---- rwlock attributes ----------------------------------------------------------------

int loom_rwlockattr_init(loom_rwlockattr_t* a) {
  if (!a) return EINVAL;
  std::memset(a, 0, sizeof *a);
  a->_loom_magic = kRWAttrMagic;
  a->_loom_kind = LOOM_RWLOCK_DEFAULT_NP;
  a->_loom_pshared = LOOM_PROCESS_PRIVATE;
  return 0;
}

int loom_rwlockattr_destroy(loom_rwlockattr_t* a) {
  if (!ok(a, kRWAttrMagic)) return EINVAL;
  a->_loom_magic = 0;
  return 0;
}

int loom_rwlockattr_setpshared(loom_rwlockattr_t* a, int v) {
  if (!ok(a, kRWAttrMagic)) return EINVAL;
  return check_pshared(v);
}

int loom_rwlockattr_getpshared(const loom_rwlockattr_t* a, int* v) {
  if (!ok(a, kRWAttrMagic) || !v) return EINVAL;
  *v = a->_loom_pshared;
  return 0;
}

int loom_rwlockattr_setkind_np(loom_rwlockattr_t* a, int kind) {
  if (!ok(a, kRWAttrMagic) || kind < LOOM_RWLOCK_PREFER_READER_NP || kind > LOOM_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP)
    return EINVAL;
  a->_loom_kind = kind;
  return 0;
}

int loom_rwlockattr_getkind_np(const loom_rwlockattr_t* a, int* kind) {
  if (!ok(a, kRWAttrMagic) || !kind) return EINVAL;
  *kind = a->_loom_kind;
  return 0;
}

// ---- rwlocks ----------------------------------------------------------------------------

int loom_rwlock_init(loom_rwlock_t* r, const loom_rwlockattr_t* a) {
  if (!r || (a && !ok(a, kRWAttrMagic))) return EINVAL;
  r->_loom_kind = static_cast<unsigned char>(a ? a->_loom_kind : LOOM_RWLOCK_DEFAULT_NP);
  new (&r->_loom_impl)
      RWLock(r->_loom_kind == LOOM_RWLOCK_PREFER_READER_NP ? RWPreference::reader : RWPreference::writer);
  store_state(&r->_loom_state, kReady);
  return 0;
}

int loom_rwlock_destroy(loom_rwlock_t* r) {
  if (!r) return EINVAL;
  if (load_state(&r->_loom_state) == kReady) {
    RWLock* x = rwlock_of(r);
    if (x->lock_errno(kNow) != 0) return EBUSY;
    x->unlock_errno();
  }
  return destroy_object<RWLock>(r);
}

int loom_rwlock_rdlock(loom_rwlock_t* r) {
  RWLock* x = rwlock_of(r);
  if (!x) return EINVAL;
  return blocking(EBUSY, [x](Deadline d) { return x->lock_shared_errno(d); });
}

int loom_rwlock_tryrdlock(loom_rwlock_t* r) {
  RWLock* x = rwlock_of(r);
  if (!x) return EINVAL;
  int e = x->lock_shared_errno(kNow);
  return e == EDEADLK ? EBUSY : e;
}

int loom_rwlock_clockrdlock(loom_rwlock_t* r, clockid_t clock, const struct timespec* abs) {
  RWLock* x = rwlock_of(r);
  if (!x) return EINVAL;
  return timed_keep_errno(clock, abs, EBUSY, [x](Deadline d) { return x->lock_shared_errno(d); });
}

int loom_rwlock_timedrdlock(loom_rwlock_t* r, const struct timespec* abs) {
  return loom_rwlock_clockrdlock(r, CLOCK_REALTIME, abs);
}

int loom_rwlock_wrlock(loom_rwlock_t* r) {
  RWLock* x = rwlock_of(r);
  if (!x) return EINVAL;
  return blocking(EBUSY, [x](Deadline d) { return x->lock_errno(d); });
}

int loom_rwlock_trywrlock(loom_rwlock_t* r) {
  RWLock* x = rwlock_of(r);
  if (!x) return EINVAL;
  int e = x->lock_errno(kNow);
  return e == EDEADLK ? EBUSY : e;
}

int loom_rwlock_clockwrlock(loom_rwlock_t* r, clockid_t clock, const struct timespec* abs) {
  RWLock* x = rwlock_of(r);
  if (!x) return EINVAL;
  return timed_keep_errno(clock, abs, EBUSY, [x](Deadline d) { return x->lock_errno(d); });
}

int loom_rwlock_timedwrlock(loom_rwlock_t* r, const struct timespec* abs) {
  return loom_rwlock_clockwrlock(r, CLOCK_REALTIME, abs);
}

int loom_rwlock_unlock(loom_rwlock_t* r) {
  RWLock* x = rwlock_of(r);
  if (!x) return EINVAL;
  return x->unlock_errno();
}

// ---- barriers ----------------------------------------------------------------------------

int loom_barrierattr_init(loom_barrierattr_t* a) {
  if (!a) return EINVAL;
  a->_loom_magic = kBarrierAttrMagic;
  a->_loom_pshared = LOOM_PROCESS_PRIVATE;
  return 0;
}

int loom_barrierattr_destroy(loom_barrierattr_t* a) {
  if (!ok(a, kBarrierAttrMagic)) return EINVAL;
  a->_loom_magic = 0;
  return 0;
}

int loom_barrierattr_setpshared(loom_barrierattr_t* a, int v) {
  if (!ok(a, kBarrierAttrMagic)) return EINVAL;
  return check_pshared(v);
}

int loom_barrierattr_getpshared(const loom_barrierattr_t* a, int* v) {
  if (!ok(a, kBarrierAttrMagic) || !v) return EINVAL;
  *v = a->_loom_pshared;
  return 0;
}

int loom_barrier_init(loom_barrier_t* b, const loom_barrierattr_t* a, unsigned count) {
  if (!b || count == 0 || (a && !ok(a, kBarrierAttrMagic))) return EINVAL;
  new (&b->_loom_impl) Barrier(count);
  store_state(&b->_loom_state, kReady);
  return 0;
}

int loom_barrier_destroy(loom_barrier_t* b) {
  if (!b || load_state(&b->_loom_state) != kReady) return EINVAL;
  return destroy_object<Barrier>(b);
}

int loom_barrier_wait(loom_barrier_t* b) {
  Barrier* x = b ? object<Barrier>(
                       b, [](void*) {}, false)
                 : nullptr;
  if (!x) return EINVAL;
  ErrnoKeeper k;
  bool serial = x->arrive_and_wait();
  k.done();
  return serial ? LOOM_BARRIER_SERIAL_THREAD : 0;
}

// ---- spin locks --------------------------------------------------------------------------

int loom_spin_init(loom_spinlock_t* l, int pshared) {
  // A spin lock is one word: it works across processes as it is.
  if (!l || (pshared != LOOM_PROCESS_PRIVATE && pshared != LOOM_PROCESS_SHARED)) return EINVAL;
  __atomic_store_n(&l->_loom_lock, 0, __ATOMIC_RELEASE);
  return 0;
}

int loom_spin_destroy(loom_spinlock_t* l) {
  if (!l) return EINVAL;
  return __atomic_load_n(&l->_loom_lock, __ATOMIC_ACQUIRE) ? EBUSY : 0;
}

int loom_spin_trylock(loom_spinlock_t* l) {
  if (!l) return EINVAL;
  return __atomic_exchange_n(&l->_loom_lock, 1, __ATOMIC_ACQUIRE) ? EBUSY : 0;
}

int loom_spin_lock(loom_spinlock_t* l) {
  if (!l) return EINVAL;
  // The holder may be a fibre of this same processor that blocked while
  // holding the lock: after a short spin, let it run.
  constexpr unsigned kSpins = 128;
  for (unsigned i = 1;; ++i) {
    if (!__atomic_load_n(&l->_loom_lock, __ATOMIC_RELAXED) && !__atomic_exchange_n(&l->_loom_lock, 1, __ATOMIC_ACQUIRE))
      return 0;
    if (i % kSpins == 0) {
      loom_yield();
    } else {
      detail::cpu_relax();
    }
  }
}

int loom_spin_unlock(loom_spinlock_t* l) {
  if (!l) return EINVAL;
  __atomic_store_n(&l->_loom_lock, 0, __ATOMIC_RELEASE);
  return 0;
}

}  // extern "C"
