// capi/pthread/shared.cpp — glibc's process-shared, robust and
// priority-protocol synchronisation objects, which loom's own (sync.cpp,
// parking in this process's parking lot) cannot be.
//
// What it reproduces of glibc:
//   - PTHREAD_PROCESS_SHARED mutexes, condition variables, rwlocks and
//     barriers that work between processes mapping the same memory (fork's
//     children, or unrelated processes and a shared file): everything the
//     object needs is in its own bytes, and every wait is a futex wait on a
//     word of it — the kernel's, or, for a fibre on memory no other process
//     maps, loom's parking lot (the library's own syscall(2), futex.cpp,
//     which tells the two apart by the mapping).
//   - Robust mutexes: EOWNERDEAD to the next locker when the owner thread
//     (a fibre) ends or its process dies holding it, pthread_mutex_consistent,
//     ENOTRECOVERABLE after an unlock that did not make it consistent.
//   - PTHREAD_PRIO_INHERIT and PTHREAD_PRIO_PROTECT accepted with their
//     locking semantics and the ceiling's get/set (SCHED_FIFO's range, as
//     glibc checks it). Loom's fibres have no priorities to raise: an
//     "inheriting" mutex is a mutex of its type whose owner is known, a
//     "protecting" one records its ceiling — no thread's priority changes,
//     and the kernel's PI futex operations are not used.
//   - glibc's word protocols: a non-robust mutex's word is glibc's low-level
//     lock (0 free, 1 held, 2 held with waiters), a robust mutex's is the
//     owner's tid | FUTEX_WAITERS | FUTEX_OWNER_DIED.
//
// How (docs/DESIGN.md, "Process-shared and robust objects"):
//   - Dispatch. sync.cpp's fast paths reach here only through branches they
//     already take: a mutex whose __kind (@16) is not loom's 0-3 (glibc's
//     robust/PI/PP/pshared bits, set by init), a condvar with kCondShared in
//     its clock word, an rwlock with kRwShared in its kind word, a barrier
//     with kBarrierShared at @16. A statically initialised object is loom's.
//   - Layering. This file calls none above it (docs/DESIGN.md, "The files,
//     in layers"): a condvar's waiter lets the mutex go and takes it back
//     through the calls sync.cpp hands it with each wait (MutexCalls, the
//     one callback between the library's files), since only sync.cpp, above,
//     tells loom's mutexes from this file's.
//   - Waiting. A fibre that waits here on memory another process may map
//     blocks its kernel thread in FUTEX_WAIT; the monitor hands that
//     processor's queued fibres to a spare within LOOM_HANDOFF_US (DESIGN,
//     "Lost processors"), so a holder that is a fibre of the same processor
//     still runs. On private memory (a robust mutex in a global, say) the
//     fibre parks, as any futex wait of a fibre does.
//   - Robust ownership. The kernel marks a robust futex dead only for the
//     thread whose tid is in the word and only through that thread's own
//     robust list — and a fibre moves between kernel threads. So a robust
//     mutex's word holds the tid of one kernel thread per process, kept
//     alive for the process's life (loom-robust, started at the first
//     robust lock, sleeping with every signal blocked), whose robust list
//     (registered with set_robust_list) is the process's list of held robust
//     mutexes, linked through the mutexes as glibc links them. When the
//     process dies that thread dies with it and the kernel marks every one
//     OWNER_DIED and wakes a waiter — in this process's or another's. Which
//     fibre holds it is in the mutex (@8 the fibre, @20 the pid); when a
//     fibre ends (a key destructor set on its first robust lock) every
//     robust mutex it still holds is marked OWNER_DIED and a waiter woken,
//     here, as the kernel would for a thread.
//
// Mutex layout (40 bytes): @0 word  @4 recursion count  @8 owner (the fibre,
// rt::identity())  @16 kind (glibc's bits, ceiling at 12-19)  @20 owner's pid
// | kInconsistent | kNotRecoverable  @24 prev, @32 next: the robust list.
//
// What it does not do:
//   - Share an object with a process that is not under the preload: a
//     mutex's word protocols are glibc's (mutual exclusion and the robust
//     owner-dead mark work across: LMDB's tools, one side plain), but its
//     owner, count and state fields are not glibc's, so recursion, error
//     checks and consistency do not; a condvar's, rwlock's or barrier's
//     layout is loom's, and does not work with glibc's at all.
//   - A robust mutex held by a fibre is not marked dead if that fibre's
//     kernel thread alone dies (it never does: fibres end, processes die).
//     A fibre ended without its key destructors (a program's own longjmp
//     out of it) leaves its robust mutexes held.
//   - Boost anyone: no priority inheritance or ceiling takes effect, and a
//     PRIO_PROTECT mutex never fails with EINVAL for a caller above its
//     ceiling (fibres have no SCHED_FIFO priority).
//   - Prefer writers in a shared rwlock (PREFER_WRITER_NONRECURSIVE is
//     accepted and behaves as the default), or queue its waiters fairly:
//     an unlock with waiters wakes them all and they race.
#include "shared.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include "base/futex.hpp"
#include "base/spinlock.hpp"
#include "base/sys.hpp"
#include "capi.hpp"
#include "sync/wait.hpp"

namespace loom::capi::pthread::shared {

namespace {

// As sync.cpp's: tests/pthread_lib's destroy-after-use program names a
// stall hook, called right after each operation that may let another
// thread destroy the object. The library's own build has none.
#ifdef LOOM_SYNC_TEST_HOOK
extern "C" void LOOM_SYNC_TEST_HOOK(const void* object, int point);
#define released(object) LOOM_SYNC_TEST_HOOK(object, 0)
#else
#define released(object) ((void)0)
#endif

template <class T>
std::atomic<T>& at(const volatile void* base, std::size_t offset) {
  static_assert(sizeof(std::atomic<T>) == sizeof(T) && std::atomic<T>::is_always_lock_free);
  return *reinterpret_cast<std::atomic<T>*>(const_cast<char*>(static_cast<const volatile char*>(base)) + offset);
}

// ---- futex words ------------------------------------------------------------------------
//
// Through the library's own syscall(2) (futex.cpp): a fibre's wait on
// private memory parks it in loom's parking lot, and a wake reaches those
// fibres and then the kernel's waiters; anything else is the kernel's.

// 0, or EAGAIN (the word changed), ETIMEDOUT, EINTR. abs: on clock c,
// nullptr for none.
int futex_wait(const void* word, std::uint32_t v, bool priv, clockid_t c, const timespec* abs) {
  if (abs && abs->tv_sec < 0) return ETIMEDOUT;  // long past (the kernel: EINVAL), as glibc's
  int op = FUTEX_WAIT_BITSET | (priv ? FUTEX_PRIVATE_FLAG : 0) | (abs && c == CLOCK_REALTIME ? FUTEX_CLOCK_REALTIME : 0);
  ErrnoKeeper keep;
  long r = ::syscall(SYS_futex, word, op, v, abs, nullptr, FUTEX_BITSET_MATCH_ANY);
  int e = r < 0 ? *errno_slot() : 0;
  keep.done();
  return e;
}

// As futex_wait, until a loom Deadline (kForever: none).
int futex_wait_until(const void* word, std::uint32_t v, bool priv, Deadline d) {
  if (d == kForever) return futex_wait(word, v, priv, CLOCK_MONOTONIC, nullptr);
  timespec t{time_t(d / 1000000000), long(d % 1000000000)};
  return futex_wait(word, v, priv, CLOCK_MONOTONIC, &t);
}

void futex_wake(const void* word, int n, bool priv) {
  ErrnoKeeper keep;
  ::syscall(SYS_futex, word, FUTEX_WAKE | (priv ? FUTEX_PRIVATE_FLAG : 0), n, nullptr, nullptr, 0);
  keep.done();
}

// ---- who we are ----------------------------------------------------------------------------

std::atomic<pid_t> g_pid{0};
std::atomic<bool> g_atfork{false};

void after_fork_in_child();

void once_atfork() {
  bool expected = false;
  if (!g_atfork.load(std::memory_order_acquire) && g_atfork.compare_exchange_strong(expected, true))
    pthread_atfork(nullptr, nullptr, &after_fork_in_child);
}

pid_t my_pid() {
  pid_t p = g_pid.load(std::memory_order_relaxed);
  if (p == 0) {
    once_atfork();
    p = pid_t(rt::raw_syscall(SYS_getpid, 0, 0, 0, 0, 0, 0));
    g_pid.store(p, std::memory_order_relaxed);
  }
  return p;
}

// ---- mutex -----------------------------------------------------------------------------------

constexpr std::uint32_t kWaiters = FUTEX_WAITERS, kOwnerDied = FUTEX_OWNER_DIED, kTidMask = FUTEX_TID_MASK;
// @20: the owner's pid (pid_max is at most 2^22), two states, and the top
// byte cond_users_add's.
constexpr int kPidMask = 0x003fffff, kInconsistent = 1 << 22, kNotRecoverable = 1 << 23;

std::atomic<std::uint32_t>& mword(const pthread_mutex_t* m) { return at<std::uint32_t>(m, 0); }
std::uint32_t& mcount(pthread_mutex_t* m) { return *reinterpret_cast<std::uint32_t*>(reinterpret_cast<char*>(m) + 4); }
std::atomic<const void*>& mowner(const pthread_mutex_t* m) { return at<const void*>(m, 8); }
std::atomic<int>& mkind(const pthread_mutex_t* m) { return at<int>(m, 16); }
std::atomic<int>& maux(const pthread_mutex_t* m) { return at<int>(m, 20); }

// The robust list's links, as glibc's (__list.__prev @24, __next @32): the
// kernel's entries point at @32, and the word is 32 bytes before.
struct RobustEntry {
  RobustEntry* next;
};
pthread_mutex_t* mutex_of(RobustEntry* e) { return reinterpret_cast<pthread_mutex_t*>(reinterpret_cast<char*>(e) - 32); }
RobustEntry* entry_of(pthread_mutex_t* m) { return reinterpret_cast<RobustEntry*>(reinterpret_cast<char*>(m) + 32); }
RobustEntry*& prev_of(pthread_mutex_t* m) { return *reinterpret_cast<RobustEntry**>(reinterpret_cast<char*>(m) + 24); }

// The kernel's struct robust_list_head.
struct RobustHead {
  RobustEntry list;
  long futex_offset;
  RobustEntry* pending;
};
RobustHead g_head{{&g_head.list}, -32, nullptr};
rt::SpinLock g_list_lock;  // the list, pending, and the robust CAS with them
std::atomic<int> g_helper_tid{0};
std::atomic<int> g_helper_state{0};  // 0 none, 1 starting, 2 running

void* helper_main(void*) {
  sigset_t all;
  sigfillset(&all);
  (rt::sys::pthread().sigmask)(SIG_BLOCK, &all, nullptr);
  rt::raw_syscall(SYS_set_robust_list, reinterpret_cast<long>(&g_head), sizeof g_head, 0, 0, 0, 0);
  g_helper_tid.store(int(rt::raw_syscall(SYS_gettid, 0, 0, 0, 0, 0, 0)), std::memory_order_release);
  static std::atomic<int> never{0};
  for (;;) rt::futex_wait(&never, 0);
  return nullptr;
}

// The tid that robust words hold for this process: loom-robust's.
std::uint32_t robust_tid() {
  int t = g_helper_tid.load(std::memory_order_acquire);
  if (t != 0) return std::uint32_t(t);
  int expected = 0;
  if (g_helper_state.compare_exchange_strong(expected, 1)) {
    my_pid();  // registers the fork handler
    pthread_t th;
    const auto& sys = rt::sys::pthread();
    if (sys.create(&th, nullptr, &helper_main, nullptr) == 0) {
      sys.detach(th);
      sys.setname_np(th, "loom-robust");
    } else {
      // No thread: this kernel thread's tid stands in (the mutexes are
      // then marked dead only if it dies).
      g_helper_tid.store(int(rt::raw_syscall(SYS_gettid, 0, 0, 0, 0, 0, 0)), std::memory_order_release);
    }
    g_helper_state.store(2, std::memory_order_release);
  }
  while ((t = g_helper_tid.load(std::memory_order_acquire)) == 0) rt::sys::sched_yield();
  return std::uint32_t(t);
}

void after_fork_in_child() {
  // One kernel thread: the child's robust list starts empty (the parent's
  // mutexes stay the parent's). The forking thread stands in for the
  // child's threads itself, registering the list as its own: under
  // libloom-pthread it lives as long as the child (its pthread_exit waits
  // for the others, then exits the process; thread.cpp, "fork"). A
  // loom-robust of the child's own cost a thread per child, and its exit a
  // scheduling round before the parent's waitpid returned (glibc's
  // tst-robust-fork, 33,000 forks, took three times its limit). glibc's
  // own list for that thread, replaced, is unused: its robust mutexes are
  // this file's.
  g_pid.store(0, std::memory_order_relaxed);
  new (&g_list_lock) rt::SpinLock();
  g_head.list.next = &g_head.list;
  g_head.pending = nullptr;
  if (rt::raw_syscall(SYS_set_robust_list, reinterpret_cast<long>(&g_head), sizeof g_head, 0, 0, 0, 0) == 0) {
    g_helper_tid.store(int(rt::raw_syscall(SYS_gettid, 0, 0, 0, 0, 0, 0)), std::memory_order_relaxed);
    g_helper_state.store(2, std::memory_order_relaxed);
  } else {
    g_helper_tid.store(0, std::memory_order_relaxed);
    g_helper_state.store(0, std::memory_order_relaxed);
  }
}

// With g_list_lock held.
void enqueue(pthread_mutex_t* m) {
  RobustEntry* e = entry_of(m);
  RobustEntry* first = g_head.list.next;
  e->next = first;
  prev_of(m) = &g_head.list;
  if (first != &g_head.list) prev_of(mutex_of(first)) = e;
  g_head.list.next = e;
}
void dequeue(pthread_mutex_t* m) {
  RobustEntry* e = entry_of(m);
  RobustEntry* prev = prev_of(m);
  prev->next = e->next;
  if (e->next != &g_head.list) prev_of(mutex_of(e->next)) = prev;
  e->next = nullptr;
  prev_of(m) = nullptr;
}

// ---- a fibre that ends holding robust mutexes ----------------------------------------------

loom_key_t g_key;
std::atomic<int> g_key_state{0};  // 0 none, 1 making, 2 made

void fibre_ended(void* value);

void note_robust_holder() {
  if (g_key_state.load(std::memory_order_acquire) != 2) {
    int expected = 0;
    if (g_key_state.compare_exchange_strong(expected, 1)) {
      loom_key_create(&g_key, &fibre_ended);
      g_key_state.store(2, std::memory_order_release);
    }
    while (g_key_state.load(std::memory_order_acquire) != 2) rt::sys::sched_yield();
  }
  if (!loom_getspecific(g_key)) loom_setspecific(g_key, &g_key);
}

// Marks every robust mutex the ending fibre holds OWNER_DIED, as the kernel
// does for a thread that exits: the word keeps its waiters bit, and one
// waiter is woken (after the list lock: the wake touches the address only).
void fibre_ended(void*) {
  const void* self = rt::identity();
  const int pid = my_pid();
  for (;;) {
    void* wake[16];
    int n = 0;
    bool more = false;
    {
      rt::SpinGuard g(g_list_lock);
      for (RobustEntry* e = g_head.list.next; e != &g_head.list;) {
        pthread_mutex_t* m = mutex_of(e);
        e = e->next;
        if (mowner(m).load(std::memory_order_relaxed) != self || (maux(m).load(std::memory_order_relaxed) & kPidMask) != pid)
          continue;
        if (n == 16) {
          more = true;
          break;
        }
        dequeue(m);
        mowner(m).store(nullptr, std::memory_order_relaxed);
        mcount(m) = 0;
        maux(m).fetch_and(~(kPidMask | kInconsistent), std::memory_order_relaxed);
        std::uint32_t old = mword(m).exchange(0, std::memory_order_relaxed);
        mword(m).store((old & kWaiters) | kOwnerDied, std::memory_order_release);
        if (old & kWaiters) wake[n++] = m;
      }
    }
    for (int i = 0; i < n; ++i) futex_wake(wake[i], 1, false);
    if (!more) return;
  }
}

int mtype(int k) { return k & 3; }
bool robust(int k) { return k & kKindRobust; }
// Robust words are waited on and woken with the shared operations, as
// glibc's: the kernel's owner-died wake is a shared one.
bool private_futex(int k) { return !(k & (kKindPshared | kKindRobust)); }

bool held_by_me(const pthread_mutex_t* m, const void* self, int pid) {
  return mowner(m).load(std::memory_order_relaxed) == self && (maux(m).load(std::memory_order_relaxed) & kPidMask) == pid;
}

void take(pthread_mutex_t* m, const void* self, int pid) {
  mowner(m).store(self, std::memory_order_relaxed);
  mcount(m) = 1;
  int a = maux(m).load(std::memory_order_relaxed);
  while (!maux(m).compare_exchange_weak(a, (a & ~kPidMask) | pid, std::memory_order_relaxed)) {
  }
}

int lock_plain(pthread_mutex_t* m, int k, Deadline d) {
  auto& w = mword(m);
  std::uint32_t z = 0;
  if (w.compare_exchange_strong(z, 1, std::memory_order_acquire)) return 0;
  if (d == kNow) return EBUSY;
  const bool priv = private_futex(k);
  while (w.exchange(2, std::memory_order_acquire) != 0) {
    if (futex_wait_until(&w, 2, priv, d) == ETIMEDOUT) return ETIMEDOUT;
  }
  return 0;
}

int lock_robust(pthread_mutex_t* m, Deadline d, bool* died) {
  auto& w = mword(m);
  const std::uint32_t tid = robust_tid();
  std::uint32_t extra = 0;  // FUTEX_WAITERS once we have waited: others may wait too
  for (;;) {
    std::uint32_t v;
    {
      rt::SpinGuard g(g_list_lock);
      g_head.pending = entry_of(m);
      v = w.load(std::memory_order_relaxed);
      while (!(v & kTidMask)) {
        if (maux(m).load(std::memory_order_relaxed) & kNotRecoverable) {
          g_head.pending = nullptr;
          return ENOTRECOVERABLE;
        }
        if (w.compare_exchange_weak(v, tid | (v & kWaiters) | extra, std::memory_order_acquire)) {
          enqueue(m);
          g_head.pending = nullptr;
          *died = v & kOwnerDied;
          return 0;
        }
      }
      g_head.pending = nullptr;
    }
    if (d == kNow) return EBUSY;
    if (!(v & kWaiters) && !w.compare_exchange_strong(v, v | kWaiters, std::memory_order_relaxed)) continue;
    if (futex_wait_until(&w, v | kWaiters, false, d) == ETIMEDOUT) return ETIMEDOUT;
    extra = kWaiters;
  }
}

}  // namespace

bool valid_ceiling(int c) noexcept {
  return c >= sched_get_priority_min(SCHED_FIFO) && c <= sched_get_priority_max(SCHED_FIFO) &&
         ((c << kCeilingShift) & ~kCeilingMask) == 0;
}
int min_ceiling() noexcept { return sched_get_priority_min(SCHED_FIFO); }

int mutex_init(pthread_mutex_t* m, int type, bool rob, int protocol, bool pshared, int ceiling) noexcept {
  if (rob && protocol == PTHREAD_PRIO_PROTECT) return ENOTSUP;  // as glibc
  int k = type;
  if (rob) k |= kKindRobust | kKindPshared;
  if (pshared) k |= kKindPshared;
  if (protocol == PTHREAD_PRIO_INHERIT) k |= kKindPI;
  if (protocol == PTHREAD_PRIO_PROTECT) k |= kKindPP | ((ceiling ? ceiling : min_ceiling()) << kCeilingShift);
  std::memset(static_cast<void*>(m), 0, sizeof *m);
  mkind(m).store(k, std::memory_order_release);
  return 0;
}

int mutex_lock(pthread_mutex_t* m, Deadline d) noexcept {
  const int k = mkind(m).load(std::memory_order_relaxed);
  if (!is_mutex_kind(k)) return EINVAL;
  const void* self = rt::identity();
  const int pid = my_pid();
  const int type = mtype(k);
  if (held_by_me(m, self, pid)) {
    if (type == PTHREAD_MUTEX_RECURSIVE_NP) {
      if (mcount(m) == UINT_MAX) return EAGAIN;
      ++mcount(m);
      return 0;
    }
    // (glibc's trylock: EDEADLK for a robust, PI or PP one, EBUSY for the
    // one that is only process-shared)
    if (type == PTHREAD_MUTEX_ERRORCHECK_NP)
      return d == kNow && !(k & (kKindRobust | kKindPI | kKindPP)) ? EBUSY : EDEADLK;
    // normal and adaptive: a relock deadlocks (or times out), as glibc's
  }
  if (!robust(k)) {
    int e = lock_plain(m, k, d);
    if (e == 0) take(m, self, pid);
    return e;
  }
  bool died = false;
  int e = lock_robust(m, d, &died);
  if (e) return e;
  take(m, self, pid);
  note_robust_holder();
  if (died) {
    maux(m).fetch_or(kInconsistent, std::memory_order_relaxed);
    return EOWNERDEAD;
  }
  return 0;
}

int mutex_unlock(pthread_mutex_t* m) noexcept {
  const int k = mkind(m).load(std::memory_order_relaxed);
  if (!is_mutex_kind(k)) return EINVAL;
  const int type = mtype(k);
  const bool mine = held_by_me(m, rt::identity(), my_pid());
  auto& w = mword(m);
  if (!robust(k)) {
    if (type == PTHREAD_MUTEX_RECURSIVE_NP || type == PTHREAD_MUTEX_ERRORCHECK_NP) {
      if (!mine || w.load(std::memory_order_relaxed) == 0) return EPERM;
      if (type == PTHREAD_MUTEX_RECURSIVE_NP && --mcount(m) > 0) return 0;
    }
    mowner(m).store(nullptr, std::memory_order_relaxed);
    std::uint32_t old = w.exchange(0, std::memory_order_release);
    released(m);
    if (old == 2) futex_wake(&w, 1, private_futex(k));  // the address only
    return 0;
  }
  // Robust: only the owner, whatever the type (glibc checks the word's tid).
  if (!mine || (w.load(std::memory_order_relaxed) & kTidMask) != robust_tid()) return EPERM;
  if (type == PTHREAD_MUTEX_RECURSIVE_NP && --mcount(m) > 0) return 0;
  int wake = 1;
  if (maux(m).load(std::memory_order_relaxed) & kInconsistent) {
    // Unlocked without pthread_mutex_consistent: unusable from now on, and
    // every waiter is told so.
    maux(m).fetch_xor(kInconsistent | kNotRecoverable, std::memory_order_relaxed);
    wake = INT_MAX;
  }
  mowner(m).store(nullptr, std::memory_order_relaxed);
  mcount(m) = 0;
  std::uint32_t old;
  {
    rt::SpinGuard g(g_list_lock);
    g_head.pending = entry_of(m);
    dequeue(m);
    old = w.exchange(0, std::memory_order_release);
    g_head.pending = nullptr;
  }
  released(m);
  if ((old & kWaiters) || wake > 1) futex_wake(&w, wake, false);
  return 0;
}

int mutex_destroy(pthread_mutex_t* m) noexcept {
  const int k = mkind(m).load(std::memory_order_relaxed);
  if (!is_mutex_kind(k)) return EINVAL;
  // As glibc's: a robust mutex is never busy (its holder's list still has
  // it, as glibc's thread's would); another is while held or a condvar
  // waiter will take it back.
  if (!robust(k) && (mword(m).load(std::memory_order_relaxed) != 0 || cond_users(m))) return EBUSY;
  mkind(m).store(-1, std::memory_order_relaxed);
  return 0;
}

int mutex_consistent(pthread_mutex_t* m) noexcept {
  const int k = mkind(m).load(std::memory_order_relaxed);
  if (!is_mutex_kind(k) || !robust(k) || !(maux(m).load(std::memory_order_relaxed) & kInconsistent)) return EINVAL;
  maux(m).fetch_and(~kInconsistent, std::memory_order_relaxed);
  return 0;
}

int mutex_getprioceiling(const pthread_mutex_t* m, int* ceiling) noexcept {
  const int k = mkind(m).load(std::memory_order_relaxed);
  if (!is_mutex_kind(k) || !(k & kKindPP)) return EINVAL;
  *ceiling = (k & kCeilingMask) >> kCeilingShift;
  return 0;
}

// glibc takes the mutex (unless the caller holds it), changes the ceiling
// and lets it go.
int mutex_setprioceiling(pthread_mutex_t* m, int ceiling, int* old) noexcept {
  int k = mkind(m).load(std::memory_order_relaxed);
  if (!is_mutex_kind(k) || !(k & kKindPP)) return EINVAL;
  if (!valid_ceiling(ceiling)) return EINVAL;
  bool held = held_by_me(m, rt::identity(), my_pid());
  if (held && mtype(k) == PTHREAD_MUTEX_ERRORCHECK_NP) return EDEADLK;
  if (!held)
    if (int e = mutex_lock(m, kForever)) return e;
  k = mkind(m).load(std::memory_order_relaxed);
  if (old) *old = (k & kCeilingMask) >> kCeilingShift;
  mkind(m).store((k & ~kCeilingMask) | (ceiling << kCeilingShift), std::memory_order_relaxed);
  if (!held) mutex_unlock(m);
  return 0;
}

// ---- condition variable ---------------------------------------------------------------------
//
// loom's layout (@0 sequence, @4 waiters, @8 clock | kCondShared): the
// waiter counts itself in, reads the sequence, releases the mutex and
// sleeps on the sequence while it is unchanged; signal and broadcast bump
// it and, when someone waits (sync.cpp's test), wake one or all. The kernel
// (or the parking lot) compares the word, so a signal after the read is not
// lost; a waiter may take a wake meant for another (spurious wake-ups,
// which POSIX allows). `waiters` is the waiter's last touch: destroy waits
// for it (sync.cpp). The mutex, of any kind, is let go and taken back by
// the caller's calls (MutexCalls: sync.cpp's, which call this file for a
// mutex of this file's).

int cond_wait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock, const timespec* abs, MutexCalls calls) noexcept {
  auto& seq = at<std::uint32_t>(c, 0);
  auto& waiters = at<std::uint32_t>(c, 4);
  if (abs && !valid(abs)) return EINVAL;
  waiters.fetch_add(1, std::memory_order_seq_cst);
  std::uint32_t s = seq.load(std::memory_order_seq_cst);
  cond_users_add(m, 1);
  if (int e = calls.unlock(m)) {
    cond_users_add(m, -1);
    waiters.fetch_sub(1, std::memory_order_release);
    return e;
  }
  int w = futex_wait(&seq, s, false, clock, abs);
  waiters.fetch_sub(1, std::memory_order_release);  // last touch of c
  released(c);
  int e = calls.lock(m);
  if (e == 0 || e == EOWNERDEAD) cond_users_add(m, -1);
  if (e) return e;  // EOWNERDEAD, as glibc's
  return w == ETIMEDOUT && reached(clock, *abs) ? ETIMEDOUT : 0;
}

void cond_wake(pthread_cond_t* c, bool all) noexcept { futex_wake(&at<std::uint32_t>(c, 0), all ? INT_MAX : 1, false); }

// ---- rwlock ---------------------------------------------------------------------------------
//
// @0 state: kWriter, kWaiting (someone sleeps on it), readers × 8;
// @24 the writer (the fibre), @32 its pid; @48 kind | kRwShared. An unlock
// that finds kWaiting clears it and wakes every sleeper; those that lose
// the race set it again.

constexpr std::uint32_t kWriter = 1, kWaiting = 2, kReader = 8;
constexpr std::int64_t kRwRecheckNs = 100'000'000;

std::atomic<std::uint32_t>& rwstate(pthread_rwlock_t* rw) { return at<std::uint32_t>(rw, 0); }
std::atomic<const void*>& rwowner(pthread_rwlock_t* rw) { return at<const void*>(rw, 24); }
std::atomic<int>& rwpid(pthread_rwlock_t* rw) { return at<int>(rw, 32); }

bool rw_mine(pthread_rwlock_t* rw) {
  return rwowner(rw).load(std::memory_order_relaxed) == rt::identity() && rwpid(rw).load(std::memory_order_relaxed) == my_pid();
}

template <class CanTake, class Next>
int rw_acquire(pthread_rwlock_t* rw, Deadline d, CanTake can_take, Next next) {
  auto& st = rwstate(rw);
  for (;;) {
    std::uint32_t s = st.load(std::memory_order_relaxed);
    if (can_take(s)) {
      if (s >= UINT32_MAX - kReader) return EAGAIN;
      if (st.compare_exchange_weak(s, next(s), std::memory_order_acquire)) return 0;
      continue;
    }
    if (d == kNow) return EBUSY;
    if ((s & kWriter) && rw_mine(rw)) return EDEADLK;
    if (!(s & kWaiting) && !st.compare_exchange_weak(s, s | kWaiting, std::memory_order_relaxed)) continue;
    // A sleep looks again at least every kRwRecheckNs: a process that dies
    // between its release and its wake leaves the sleepers unwoken.
    const Deadline cap = rt::now_ns() + kRwRecheckNs;
    const bool capped = d == kForever || cap < d;
    if (futex_wait_until(&st, s | kWaiting, false, capped ? cap : d) == ETIMEDOUT && !capped) return ETIMEDOUT;
  }
}

}  // namespace loom::capi::pthread::shared

namespace loom::capi::pthread::shared {

int rw_rdlock(pthread_rwlock_t* rw, Deadline d) noexcept {
  return rw_acquire(
      rw, d, [](std::uint32_t s) { return !(s & kWriter); }, [](std::uint32_t s) { return s + kReader; });
}

int rw_wrlock(pthread_rwlock_t* rw, Deadline d) noexcept {
  int e = rw_acquire(
      rw, d, [](std::uint32_t s) { return (s & ~kWaiting) == 0; }, [](std::uint32_t s) { return s | kWriter; });
  if (e == 0) {
    rwowner(rw).store(rt::identity(), std::memory_order_relaxed);
    rwpid(rw).store(my_pid(), std::memory_order_relaxed);
  }
  return e;
}

int rw_unlock(pthread_rwlock_t* rw) noexcept {
  auto& st = rwstate(rw);
  std::uint32_t s = st.load(std::memory_order_relaxed);
  // Whose unlock this is is decided once: a writer's bit stays set until
  // its own CAS below, and its owner is cleared before that CAS, so a CAS
  // that fails (a waiter just set kWaiting) must not ask again.
  const bool writer = s & kWriter;
  if (writer) {
    if (!rw_mine(rw)) return EPERM;
    rwowner(rw).store(nullptr, std::memory_order_relaxed);
    rwpid(rw).store(0, std::memory_order_relaxed);
  }
  std::uint32_t next;
  do {
    if (writer) {
      next = s & ~(kWriter | kWaiting);
    } else {
      if (s < kReader) return EPERM;
      next = s - kReader;
      if (next < kReader) next &= ~kWaiting;  // the last reader wakes the sleepers
    }
  } while (!st.compare_exchange_weak(s, next, std::memory_order_release, std::memory_order_relaxed));
  released(rw);
  if ((s & kWaiting) && !(next & kWaiting)) futex_wake(&st, INT_MAX, false);
  return 0;
}

// ---- barrier --------------------------------------------------------------------------------
//
// loom's layout (@0 arrived | generation << 32, @8 count, @12 threads
// inside), with the sleepers on the generation's half (@4) in the kernel.

int barrier_wait(pthread_barrier_t* b) noexcept {
  auto& word = at<std::uint64_t>(b, 0);
  auto& inside = at<std::uint32_t>(b, 12);
  const void* gen_word = reinterpret_cast<char*>(b) + 4;
  std::uint32_t count = at<std::uint32_t>(b, 8).load(std::memory_order_acquire);
  if (count == 0) return EINVAL;
  inside.fetch_add(1, std::memory_order_acquire);
  std::uint64_t v = word.load(std::memory_order_acquire);
  for (;;) {
    if (std::uint32_t(v) + 1 == count) {
      if (word.compare_exchange_weak(v, ((v >> 32) + 1) << 32, std::memory_order_acq_rel)) {
        released(b);  // (the others may leave now, but destroy waits for `inside`)
        futex_wake(gen_word, INT_MAX, false);
        inside.fetch_sub(1, std::memory_order_release);
        return PTHREAD_BARRIER_SERIAL_THREAD;
      }
      continue;
    }
    if (word.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) break;
  }
  const std::uint32_t gen = std::uint32_t(v >> 32);
  while (std::uint32_t(word.load(std::memory_order_acquire) >> 32) == gen)
    futex_wait(gen_word, gen, false, CLOCK_MONOTONIC, nullptr);
  inside.fetch_sub(1, std::memory_order_release);
  released(b);
  return 0;
}

}  // namespace loom::capi::pthread::shared
