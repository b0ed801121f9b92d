// capi/pthread/cxx_future.cpp — std::future and std::promise on fibres.
//
// libstdc++'s futures do not wait through pthreads: a shared state's status
// word is a futex, and future::wait/get (inline in <future>, so compiled into
// the program) call std::__atomic_futex_unsigned_base::_M_futex_wait_until,
// which makes the futex system call itself — blocking the processor, not the
// fibre. Those members are exported by libstdc++.so and called through the
// program's PLT, so this library defines them too (the same way it defines
// pthread_*): a fibre parks in loom's parking lot on the word's address; a
// kernel thread that is not a processor still waits in the kernel (libstdc++'s
// own code, found with dlsym); a notify wakes both.
//
// Why no lost wake-up: libstdc++ changes the word before it notifies. A
// fibre parks only if validate — run under the bucket lock — still sees the
// value it was told to wait on; the notifier's unpark_all takes the same
// lock after the change, so it either finds the fibre queued or the fibre
// saw the change. Kernel-thread waiters have the futex's own guarantee, and
// the notify always makes the futex call too.
//
// C++20's atomic::wait, std::latch, std::barrier and std::counting_semaphore
// make the futex call in code inlined into the program: futex.cpp defines
// syscall(2) for them.
#include <bits/atomic_futex.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "base/sys.hpp"
#include "capi.hpp"
#include "sched/processor.hpp"
#include "sync/parking_lot.hpp"

namespace loom::capi::pthread_lib {
namespace {

using Base = std::__atomic_futex_unsigned_base;
using NotifyFn = void (*)(unsigned*);

// libstdc++'s own members, for kernel threads that are not processors.
struct Libstdcxx {
  void* wait_until;
  void* wait_until_steady;
  NotifyFn notify_all;
};

const Libstdcxx& libstdcxx() {
  static const Libstdcxx l = [] {
    Libstdcxx r{};
    r.wait_until = rt::sys::library_symbol(
        "libstdc++.so.6",
        "_ZNSt28__atomic_futex_unsigned_base19_M_futex_wait_untilEPjjbNSt6chrono8durationIlSt5ratioILl1ELl1EE"
        "EENS2_IlS3_ILl1ELl1000000000EEEE");
    r.wait_until_steady = rt::sys::library_symbol(
        "libstdc++.so.6",
        "_ZNSt28__atomic_futex_unsigned_base26_M_futex_wait_until_steadyEPjjbNSt6chrono8durationIlSt5ratioILl1ELl1E"
        "EEENS2_IlS3_ILl1ELl1000000000EEEE");
    r.notify_all = reinterpret_cast<NotifyFn>(
        rt::sys::library_symbol("libstdc++.so.6", "_ZNSt28__atomic_futex_unsigned_base19_M_futex_notify_allEPj"));
    return r;
  }();
  return l;
}

// A member function called through a plain address: x86-64's ABI passes
// `this` as the first argument (the members do not use it).
using WaitAddr = bool (*)(Base*, unsigned*, unsigned, bool, std::chrono::seconds, std::chrono::nanoseconds);

// A fibre's wait: false only when the (absolute) time on `clock` has come,
// as libstdc++'s: the caller re-reads the word either way.
bool park_fibre(unsigned* addr, unsigned val, bool has_timeout, std::chrono::seconds s, std::chrono::nanoseconds ns,
                clockid_t clock) {
  if (has_timeout && s.count() < 0) return false;
  Deadline d = kForever;
  timespec abs{};
  if (has_timeout) {
    abs.tv_sec = static_cast<time_t>(s.count());
    abs.tv_nsec = static_cast<long>(ns.count());
    d = deadline_of(clock, abs);
  }
  ErrnoKeeper k;
  rt::Parked p = rt::parking_lot::park_if(
      addr, [addr, val] { return __atomic_load_n(addr, __ATOMIC_SEQ_CST) == val; }, d, rt::WaitKind::futex);
  k.done();
  return p.result != rt::ParkResult::TimedOut || (has_timeout && !reached(clock, abs));
}

}  // namespace
}  // namespace loom::capi::pthread_lib

using namespace loom;
using namespace loom::capi::pthread_lib;

bool std::__atomic_futex_unsigned_base::_M_futex_wait_until(unsigned* addr, unsigned val, bool has_timeout,
                                                            std::chrono::seconds s, std::chrono::nanoseconds ns) {
  if (!rt::this_fibre_or_null())
    return reinterpret_cast<WaitAddr>(libstdcxx().wait_until)(this, addr, val, has_timeout, s, ns);
  return park_fibre(addr, val, has_timeout, s, ns, CLOCK_REALTIME);
}

bool std::__atomic_futex_unsigned_base::_M_futex_wait_until_steady(unsigned* addr, unsigned val, bool has_timeout,
                                                                   std::chrono::seconds s,
                                                                   std::chrono::nanoseconds ns) {
  if (!rt::this_fibre_or_null())
    return reinterpret_cast<WaitAddr>(libstdcxx().wait_until_steady)(this, addr, val, has_timeout, s, ns);
  return park_fibre(addr, val, has_timeout, s, ns, CLOCK_MONOTONIC);
}

void std::__atomic_futex_unsigned_base::_M_futex_notify_all(unsigned* addr) {
  rt::parking_lot::unpark_all(addr);
  libstdcxx().notify_all(addr);
}
