// capi/pthread/shared.hpp — what sync.cpp hands to shared.cpp: the objects
// that are not loom's own (process-shared, robust, priority-protocol), told
// apart by their own bytes (see shared.cpp for the layouts and why).
#pragma once

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstdint>

#include "loom/sync.hpp"  // Deadline

namespace loom::capi::pthread::shared {

// glibc's __kind bits beyond the type (0-3): a mutex with any is shared.cpp's.
// The priority ceiling of a PRIO_PROTECT mutex sits above them (bits 12-19).
constexpr int kKindRobust = 16, kKindPI = 32, kKindPP = 64, kKindPshared = 128;
constexpr int kCeilingShift = 12, kCeilingMask = 0xff << kCeilingShift;

// True for the __kind of a mutex shared.cpp made (never for loom's 0-3, nor
// for a destroyed mutex's -1).
inline bool is_mutex_kind(int k) {
  return k >= kKindRobust && (k & ~(3 | kKindRobust | kKindPI | kKindPP | kKindPshared | kCeilingMask)) == 0;
}

// Condition-variable waiters that released a mutex and will take it back
// (glibc's __nusers: destroy says EBUSY while there are any), in the top
// byte of the word at @20 of every mutex, loom's or shared.cpp's; changed by
// the mutex's holder only (the waiter before it lets go, and after it has it
// again). Counted modulo 256.
inline void cond_users_add(pthread_mutex_t* m, int d) {
  reinterpret_cast<std::atomic<std::uint32_t>*>(reinterpret_cast<char*>(m) + 20)
      ->fetch_add(std::uint32_t(d) << 24, std::memory_order_relaxed);
}
inline bool cond_users(const pthread_mutex_t* m) {
  return reinterpret_cast<const std::atomic<std::uint32_t>*>(reinterpret_cast<const char*>(m) + 20)
             ->load(std::memory_order_relaxed) >> 24;
}

// mutexattr bits (sync.cpp's attribute int): type 0-1, robust 4, pshared 6,
// protocol 8-9, ceiling 12-19.
int mutex_init(pthread_mutex_t* m, int type, bool robust, int protocol, bool pshared, int ceiling) noexcept;
int mutex_lock(pthread_mutex_t* m, Deadline d) noexcept;  // kNow: trylock
int mutex_unlock(pthread_mutex_t* m) noexcept;
int mutex_destroy(pthread_mutex_t* m) noexcept;
int mutex_consistent(pthread_mutex_t* m) noexcept;
int mutex_getprioceiling(const pthread_mutex_t* m, int* ceiling) noexcept;
int mutex_setprioceiling(pthread_mutex_t* m, int ceiling, int* old) noexcept;
// SCHED_FIFO's range, as glibc checks ceilings against it.
bool valid_ceiling(int ceiling) noexcept;
int min_ceiling() noexcept;

// A process-shared condition variable: this bit in its clock word (@8).
constexpr int kCondShared = 1 << 30;
// Its waiter lets the mutex go and takes it back with these: the caller's
// (sync.cpp's pthread_mutex_unlock and lock), since the mutex may be loom's
// own or this file's, which only sync.cpp, above this file, tells apart.
struct MutexCalls {
  int (*unlock)(pthread_mutex_t*);
  int (*lock)(pthread_mutex_t*);
};
int cond_wait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock, const timespec* abs, MutexCalls calls) noexcept;
void cond_wake(pthread_cond_t* c, bool all) noexcept;

// A process-shared rwlock: this bit in its kind word (@48).
constexpr std::uint32_t kRwShared = 1u << 16;
int rw_rdlock(pthread_rwlock_t* rw, Deadline d) noexcept;
int rw_wrlock(pthread_rwlock_t* rw, Deadline d) noexcept;
int rw_unlock(pthread_rwlock_t* rw) noexcept;

// A process-shared barrier: this value in its word at @16.
constexpr std::uint32_t kBarrierShared = 0x5348;  // "SH"
int barrier_wait(pthread_barrier_t* b) noexcept;

}  // namespace loom::capi::pthread::shared
