// capi/pthread/futex.cpp — futex waits compiled into the program, on fibres.
//
// C++20's atomic::wait/notify, std::latch, std::barrier and
// std::counting_semaphore are inline in libstdc++'s headers, and end in
// syscall(SYS_futex, ...) made by the program itself (bits/atomic_wait.h,
// bits/atomic_timed_wait.h): FUTEX_WAIT, FUTEX_WAKE and FUTEX_WAIT_BITSET
// with FUTEX_BITSET_MATCH_ANY (an absolute time, FUTEX_CLOCK_REALTIME for
// system_clock), private or not depending on how libstdc++ was built. Made by a fibre, that call would
// block its processor, and on two processors two waiters stop everything.
// So this library defines syscall(2) by its glibc name:
//
//   SYS_futex, a WAIT or WAIT_BITSET (any bit), from a fibre, private, or
//   shared on an address in a private mapping (below)
//       the fibre parks in loom's parking lot on the address, if the word
//       still holds the expected value (checked under the bucket lock, so a
//       waker that changes the word and then wakes cannot be missed — the
//       kernel's own argument, parking_lot.hpp's contract); EAGAIN if it
//       does not, ETIMEDOUT at the deadline, 0 when woken. A fibre's wait is
//       never interrupted by a signal (no EINTR), as loom's other waits.
//   SYS_futex, a WAKE or WAKE_BITSET (any bit), from anyone
//       up to n fibres parked on the address, then the kernel's wake for the
//       rest (kernel threads that are not processors wait in the kernel);
//       the count woken, as the kernel's.
//   SYS_futex, a REQUEUE or CMP_REQUEUE, from anyone
//       loom's fibres parked on the address first: under the locks of both
//       addresses' buckets, if any fibre waits there, the CMP_REQUEUE's
//       compare (EAGAIN, nothing done, if it fails; with no fibre there, the
//       kernel's compare is the only one, and a bad address its EFAULT), then up to val of them woken and up to val2 of
//       the rest moved to uaddr2's queue (parking_lot::requeue); then the kernel's operation for its own waiters with
//       what is left of val and val2 (none if nothing is). Fibres stay in the parking lot, kernel threads in the
//       kernel: a later wake of uaddr2 looks in both. The count woken and moved, as the kernel's; if the kernel's
//       compare fails after loom's held (the word changed between), loom's count: the kernel's waiters are left to
//       whoever changed the word, as a CMP_REQUEUE that came just after the change would leave them.
//   SYS_futex, a WAKE_OP, from anyone
//       the operation on *uaddr2 made here, as one atomic instruction (a
//       CAS loop), then a WAKE of uaddr and, if the old value compares, of
//       uaddr2 — each fibres first, then the kernel's. A waiter of either
//       word validates it under its bucket lock, and the word changes before
//       the wakes look: the FUTEX_WAKE argument. The kernel checks uaddr2
//       first (a WAKE_OP with an ADD of 0 and a first word nobody waits on),
//       so a bad address or flag gives the kernel's error, not a fault here;
//       an op or comparison the kernel does not know goes to it as is.
//   SYS_close, SYS_dup, SYS_dup2, SYS_dup3, SYS_close_range, SYS_fcntl
//       the library's close, dup... (fd.cpp, io_syscall.hpp): they change
//       what a number refers to, and loom's record of the number must
//       follow (issue 35: the next file under it was called as the last).
//   anything else — every other system call, futexes in shared memory
//   (another process may wake them), other futex operations, a bitset that
//   is not "any", a kernel thread's wait, a signal handler's, the wait of a
//   fibre with asynchronous cancellation enabled (async_cancel_on) —
//       the system call itself, as glibc's syscall(2) makes it (no lookup:
//       jemalloc calls syscall from inside dlopen, before any constructor).
//
// The runtime's own system calls reach this function too (base/sys.hpp
// calls syscall by name); they are not futex waits on a fibre (processors
// sleep on their futex from the scheduler, not from a fibre), so they pass
// through, at the cost of two comparisons. (Its descriptor calls, close,
// the dups and fcntl, do not come here: sys::table_call.)
#include "base/futex.hpp"

#include <fcntl.h>
#include <link.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>

#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "base/spinlock.hpp"
#include "base/sys.hpp"
#include "capi.hpp"
#include "io_syscall.hpp"
#include "sched/cancel.hpp"
#include "sched/fibre.hpp"
#include "sched/in_handler.hpp"
#include "sched/processor.hpp"
#include "sync/parking_lot.hpp"

#if defined(__x86_64__)
// The instruction of every system call made through syscall(2), in a
// function of its own, [loom_program_syscall, loom_program_syscall_end):
// a handler hurried to a fibre blocked here runs at once, as in glibc's
// syscall (sigthread.cpp, "hurry"), where one blocked in any other call of
// loom's code waits for its delivery point. No frame, so unwinding (a
// cancellation in such a handler) passes it as a leaf.
asm(R"(
    .text
    .globl loom_program_syscall
    .hidden loom_program_syscall
    .type loom_program_syscall, @function
loom_program_syscall:
    .cfi_startproc
    movq %rdi, %rax
    movq %rsi, %rdi
    movq %rdx, %rsi
    movq %rcx, %rdx
    movq %r8, %r10
    movq %r9, %r8
    movq 8(%rsp), %r9
    syscall
    ret
    .cfi_endproc
    .size loom_program_syscall, .-loom_program_syscall
    .globl loom_program_syscall_end
    .hidden loom_program_syscall_end
loom_program_syscall_end:
)");
#endif

namespace loom::capi::pthread_futex {
namespace {

// glibc's syscall(2), as it is: the instruction, -1 and errno on failure.
long kernel(long n, long a0, long a1, long a2, long a3, long a4, long a5) {
#if defined(__x86_64__)
  long r = loom_program_syscall(n, a0, a1, a2, a3, a4, a5);
#else
  long r = rt::raw_syscall(n, a0, a1, a2, a3, a4, a5);
#endif
  if (r < 0 && r > -4096) {
    errno = int(-r);
    return -1;
  }
  return r;
}

// ---- shared futexes on private memory --------------------------------------------------
//
// libstdc++ as Debian builds it (no _GLIBCXX_HAVE_LINUX_FUTEX_PRIVATE) makes
// its waits with the shared operations (FUTEX_WAIT, not FUTEX_WAIT_PRIVATE),
// on atomics in the program's own memory. A shared futex in memory no other
// process maps is the process's alone (the kernel keys it by mm and address,
// as a private one), so a fibre may park on it; one in a MAP_SHARED mapping
// may be woken from another process, through the kernel only, and stays the
// kernel's. Which mapping an address is in comes from /proc/self/maps, read
// on a miss; the private ranges found are remembered (kRanges of them,
// replaced in turn). A private range unmapped and replaced by a shared one
// at the same address would be taken for private: a program that maps shared
// memory where it unmapped private memory, and then waits there from a
// thread, is the case this leaves open.
constexpr int kRanges = 32;
struct Range {
  std::uintptr_t lo, hi;
};
Range ranges[kRanges];
int next_range = 0;
rt::SpinLock ranges_lock;

bool remembered(std::uintptr_t a) {
  rt::SpinGuard g(ranges_lock);
  for (const Range& r : ranges)
    if (a >= r.lo && a < r.hi) return true;
  return false;
}

// Whether a lies in a private mapping, from /proc/self/maps.
bool private_mapping(std::uintptr_t a) {
  if (remembered(a)) return true;
  int fd = int(kernel(SYS_openat, AT_FDCWD, long("/proc/self/maps"), O_RDONLY | O_CLOEXEC, 0, 0, 0));
  if (fd < 0) return false;
  char buf[4096];
  std::size_t have = 0;
  bool found = false, priv = false;
  Range hit{};
  for (;;) {
    long n = kernel(SYS_read, fd, long(buf + have), long(sizeof buf - have), 0, 0, 0);
    if (n <= 0) break;
    have += std::size_t(n);
    std::size_t start = 0;
    for (std::size_t i = 0; i < have; ++i) {
      if (buf[i] != '\n') continue;
      // "lo-hi perms ...": perms[3] is 'p' (private) or 's' (shared).
      char* end = nullptr;
      std::uintptr_t lo = std::strtoull(buf + start, &end, 16);
      std::uintptr_t hi = end && *end == '-' ? std::strtoull(end + 1, &end, 16) : 0;
      if (a >= lo && a < hi && end && end + 4 < buf + i) {
        found = true;
        priv = end[4] == 'p';
        hit = Range{lo, hi};
        break;
      }
      start = i + 1;
    }
    if (found) break;
    std::memmove(buf, buf + start, have - start);
    have -= start;
    if (have == sizeof buf) have = 0;  // (no line is that long)
  }
  kernel(SYS_close, fd, 0, 0, 0, 0, 0);
  if (found && priv) {
    rt::SpinGuard g(ranges_lock);
    ranges[next_range] = hit;
    next_range = (next_range + 1) % kRanges;
  }
  return found && priv;
}

bool on_fibre() {
  rt::Processor* p = rt::this_processor_at_entry();
  return p && p->current() != &p->idle_fibre() && !rt::in_signal_handler();
}

// Whether the calling fibre asks for asynchronous cancellation (enabled,
// asynchronous type, not already acting on a request). Its futex wait is
// the kernel's, made inside glibc's window (syscall.c): SIGCANCEL cuts it
// short as glibc's would, where loom's parked wait is no cancellation
// point. The kernel thread blocks meanwhile (the monitor's handoff gives
// its processor's other fibres another thread), and a wake reaches the
// kernel's waiters after loom's (wake).
bool async_cancel_on() {
  rt::Fibre* f = rt::this_fibre_or_null();
  return f && (f->cancel.load(std::memory_order_relaxed) & (rt::kCancelAsync | rt::kCancelDisabled | rt::kCancelActing)) ==
                  rt::kCancelAsync;
}

// A fibre's wait: 0, or -1 with errno (EAGAIN, ETIMEDOUT, EINVAL).
long fibre_wait(const std::uint32_t* addr, std::uint32_t val, const timespec* t, bool absolute, bool realtime) {
  ErrnoKeeper k;
  Deadline d = kForever;
  if (t) {
    if (t->tv_sec < 0 || t->tv_nsec < 0 || t->tv_nsec >= 1'000'000'000) {
      k.done(EINVAL);
      return -1;
    }
    if (absolute)
      d = deadline_of(realtime ? CLOCK_REALTIME : CLOCK_MONOTONIC, *t);
    else
      d = rt::now_ns() + std::int64_t(t->tv_sec) * 1'000'000'000 + t->tv_nsec;
  }
  rt::Parked r = rt::parking_lot::park_if(
      addr, [addr, val] { return __atomic_load_n(addr, __ATOMIC_SEQ_CST) == val; }, d, rt::WaitKind::futex);
  int e = r.result == rt::ParkResult::Invalid ? EAGAIN : r.result == rt::ParkResult::TimedOut ? ETIMEDOUT : 0;
  k.done(e);
  return e ? -1 : 0;
}

// Wakes up to n waiters on addr: fibres first, then the kernel's. A count
// of 0 or less wakes one, as the kernel's loop does (it stops after the
// first waiter it wakes once the count is reached). FUTEX_CLOCK_REALTIME on
// a wake is the kernel's ENOSYS before anything happens.
long wake(std::uint32_t* addr, int op, int n, long a3, long a4, long a5) {
  if (op & FUTEX_CLOCK_REALTIME) return kernel(SYS_futex, long(addr), op, n, a3, a4, a5);
  if (n <= 0) {
    if (rt::parking_lot::unpark_one(addr).unparked) return 1;
    return kernel(SYS_futex, long(addr), op, n, a3, a4, a5);
  }
  long woken = 0;
  if (n == INT_MAX) {
    woken = rt::parking_lot::unpark_all(addr);
  } else {
    while (woken < n && rt::parking_lot::unpark_one(addr).unparked) ++woken;
  }
  if (woken >= n) return woken;
  long more = kernel(SYS_futex, long(addr), op, n == INT_MAX ? n : n - woken, a3, a4, a5);
  return more < 0 ? (woken ? woken : more) : woken + more;
}

// A word nobody waits on, for the kernel's checks of a requeue's and a
// WAKE_OP's arguments made before loom acts (requeue, wake_op); always 0.
std::uint32_t nobody;

// FUTEX_REQUEUE and FUTEX_CMP_REQUEUE (header comment).
long requeue(std::uint32_t* addr, int op, int nwake, long a3, long a4, long a5, bool cmp) {
  int nmove = int(std::uint32_t(a3));  // val2 travels in the timeout's place
  if (nwake < 0 || nmove < 0 || (std::uintptr_t(addr) & 3)) return kernel(SYS_futex, long(addr), op, nwake, a3, a4, a5);
  // The kernel's checks of the flags (FUTEX_CLOCK_REALTIME: ENOSYS) and of
  // uaddr2 (misaligned: EINVAL; for the shared operations, unmapped:
  // EFAULT), before loom moves or wakes anyone: the same operation from a
  // word nobody waits on, waking and moving nobody.
  if (kernel(SYS_futex, long(&nobody), op, 0, 0, a4, 0) < 0) return -1;
  struct Cmp {
    const std::uint32_t* addr;
    std::uint32_t val;
  } c{addr, std::uint32_t(a5)};
  auto same = [](void* p) {
    auto* c = static_cast<Cmp*>(p);
    return __atomic_load_n(c->addr, __ATOMIC_SEQ_CST) == c->val;
  };
  rt::parking_lot::Requeued r = rt::parking_lot::requeue(addr, reinterpret_cast<const void*>(a4), unsigned(nwake),
                                                         unsigned(nmove), cmp ? +same : nullptr, &c);
  if (!r.valid) {
    errno = EAGAIN;
    return -1;
  }
  long done = long(r.woken) + long(r.requeued);
  long kwake = nwake - long(r.woken), kmove = nmove - long(r.requeued);
  if (done && kwake == 0 && kmove == 0) return done;
  long more = kernel(SYS_futex, long(addr), op, kwake, kmove, a4, a5);
  return more < 0 ? (done ? done : more) : done + more;
}

// FUTEX_WAKE_OP (header comment). -1 with errno as the kernel's.
long wake_op(std::uint32_t* addr, int op, int nwake, long a3, long a4, long a5) {
  auto* addr2 = reinterpret_cast<std::uint32_t*>(a4);
  auto enc = std::uint32_t(a5);
  unsigned fop = (enc >> 28) & 7, fcmp = (enc >> 24) & 15;  // (bit 31: FUTEX_OP_OPARG_SHIFT)
  bool shift = (enc >> 28) & FUTEX_OP_OPARG_SHIFT;
  if (fop > FUTEX_OP_XOR || fcmp > FUTEX_OP_CMP_GE || (std::uintptr_t(addr) & 3))
    return kernel(SYS_futex, long(addr), op, nwake, a3, a4, a5);  // its ENOSYS or EINVAL, uaddr2 untouched
  // The kernel's checks of uaddr2 and the flags, with an operation that
  // changes nothing, on a first word nobody waits on. (The kernel wakes one
  // waiter of a word whose count is 0: if the old value is -2048, one
  // kernel thread waiting on uaddr2 is woken here, and counted.)
  constexpr std::uint32_t kAddZero = FUTEX_OP(FUTEX_OP_ADD, 0, FUTEX_OP_CMP_EQ, 0x800);
  long early = kernel(SYS_futex, long(&nobody), op, 0, 0, long(addr2), long(kAddZero));
  if (early < 0) return -1;
  auto sext12 = [](std::uint32_t v) { return std::int32_t(v << 20) >> 20; };
  std::int32_t oparg = sext12((enc >> 12) & 0xfff), cmparg = sext12(enc & 0xfff);
  if (shift) oparg = std::int32_t(1u << (oparg & 31));
  std::uint32_t old = __atomic_load_n(addr2, __ATOMIC_RELAXED), next;
  do {
    switch (fop) {
      case FUTEX_OP_SET:
        next = std::uint32_t(oparg);
        break;
      case FUTEX_OP_ADD:
        next = old + std::uint32_t(oparg);
        break;
      case FUTEX_OP_OR:
        next = old | std::uint32_t(oparg);
        break;
      case FUTEX_OP_ANDN:
        next = old & ~std::uint32_t(oparg);
        break;
      default:
        next = old ^ std::uint32_t(oparg);
        break;  // FUTEX_OP_XOR
    }
  } while (!__atomic_compare_exchange_n(addr2, &old, next, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
  auto o = std::int32_t(old);
  bool both = false;
  switch (fcmp) {
    case FUTEX_OP_CMP_EQ:
      both = o == cmparg;
      break;
    case FUTEX_OP_CMP_NE:
      both = o != cmparg;
      break;
    case FUTEX_OP_CMP_LT:
      both = o < cmparg;
      break;
    case FUTEX_OP_CMP_LE:
      both = o <= cmparg;
      break;
    case FUTEX_OP_CMP_GT:
      both = o > cmparg;
      break;
    default:
      both = o >= cmparg;
      break;  // FUTEX_OP_CMP_GE
  }
  int wake_cmd = FUTEX_WAKE | (op & ~FUTEX_CMD_MASK);
  long n = wake(addr, wake_cmd, nwake, 0, 0, 0);
  if (n < 0) return n;
  n += early;
  // What the pre-check woke on uaddr2 counts against val2; with nothing
  // woken there, a count of 0 or less wakes one, as for uaddr (wake()).
  int nwake2 = int(std::uint32_t(a3)) - int(early);
  if (both && (nwake2 > 0 || !early)) {
    long m = wake(addr2, wake_cmd, nwake2, 0, 0, 0);
    if (m > 0) n += m;
  }
  return n;
}

// ---- the program's own calls ------------------------------------------------------------
//
// loom's own code calls syscall(2) by name too (base/sys.hpp, 120-odd
// places): told apart by the caller's address, against the executable
// segments of libloom and libloom-pthread, noted at start (before any
// fibre: a call before then, jemalloc's inside dlopen, is the program's).
struct CodeRange {
  std::uintptr_t lo = 0, hi = 0;
};
CodeRange loom_code[2];

// The executable segment holding fn.
CodeRange code_range_of(const void* fn) {
  struct Find {
    std::uintptr_t at;
    CodeRange found;
  } find{reinterpret_cast<std::uintptr_t>(fn), {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* arg) {
        auto* f = static_cast<Find*>(arg);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& h = info->dlpi_phdr[i];
          if (h.p_type != PT_LOAD || !(h.p_flags & PF_X)) continue;
          const std::uintptr_t lo = info->dlpi_addr + h.p_vaddr, hi = lo + h.p_memsz;
          if (f->at < lo || f->at >= hi) continue;
          f->found = CodeRange{lo, hi};
          return 1;
        }
        return 0;
      },
      &find);
  return find.found;
}

__attribute__((constructor)) void note_loom_code() {
  loom_code[0] = code_range_of(reinterpret_cast<const void*>(&private_mapping));
  loom_code[1] = code_range_of(reinterpret_cast<const void*>(&rt::this_fibre_or_null));
}

}  // namespace
}  // namespace loom::capi::pthread_futex

using namespace loom;
using namespace loom::capi;
using namespace loom::capi::pthread_futex;

// syscall(2) by its glibc name is syscall.c's (in C: a cancellation's
// unwinding must pass it, and the kernel's call is made there). First it
// asks here whether the call is one loom answers: true with *r its result.
extern "C" int loom_pthread_syscall_loom(long number, long a0, long a1, long a2, long a3, long a4, long a5, long* r) {
  // futex(2)'s op, val and val3 are ints: a caller passes them as such, and
  // the upper half of what va_arg reads as a long is not defined.
  int op = int(a1);
  if (__builtin_expect(number == SYS_futex, 0)) {
    auto* addr = reinterpret_cast<std::uint32_t*>(a0);
    int cmd = op & FUTEX_CMD_MASK;
    // (val3, the bitset, is read only by the _BITSET forms: a plain WAIT's
    // caller may not pass it at all.)
    bool any = cmd == FUTEX_WAIT || cmd == FUTEX_WAKE || std::uint32_t(a5) == FUTEX_BITSET_MATCH_ANY;
    // A wake reaches the fibres parked here (only ever on private memory)
    // and the kernel's waiters.
    if (any && (cmd == FUTEX_WAKE || cmd == FUTEX_WAKE_BITSET)) {
      *r = wake(addr, op, int(a2), a3, a4, a5);
      return 1;
    }
    if (cmd == FUTEX_REQUEUE || cmd == FUTEX_CMP_REQUEUE) {
      *r = requeue(addr, op, int(a2), a3, a4, a5, cmd == FUTEX_CMP_REQUEUE);
      return 1;
    }
    if (cmd == FUTEX_WAKE_OP) {
      *r = wake_op(addr, op, int(a2), a3, a4, a5);
      return 1;
    }
    if (any && (cmd == FUTEX_WAIT || cmd == FUTEX_WAIT_BITSET) && on_fibre() && !async_cancel_on() &&
        ((op & FUTEX_PRIVATE_FLAG) || private_mapping(std::uintptr_t(a0)))) {
      *r = fibre_wait(addr, std::uint32_t(a2), reinterpret_cast<const timespec*>(a3), cmd == FUTEX_WAIT_BITSET,
                      (op & FUTEX_CLOCK_REALTIME) != 0);
      return 1;
    }
  } else if (__builtin_expect(loom::capi::pthread_io::descriptor_call(number), 0)) {
    *r = loom::capi::pthread_io::descriptor_syscall(number, a0, a1, a2);
    return 1;
  }
  return 0;
}

// Every other call is the kernel's, made by syscall.c as glibc's syscall(2)
// makes it. loom's own code calls syscall(2) by name too (base/sys.hpp,
// 120-odd places, some with locks held), told apart by the caller's
// address (*own set): its calls are made by loom_pthread_own_syscall, whose
// instruction is no landing site for a hurried handler (sigthread.cpp's
// program_call_site), and never in the window below. The program's own,
// made by a fibre whose cancellation is enabled and asynchronous, is
// cancellable inside, as on glibc, where such a thread may be cancelled
// anywhere (glibc's tst-cancel30: a raw SYS_pause): syscall.c makes it
// between this call and loom_pthread_async_leave. Returns the word to hand
// to leave, or nullptr.
extern "C" int* loom_pthread_async_enter(const void* caller, int* own) {
  if ((*own = loom_code_at(reinterpret_cast<std::uintptr_t>(caller)))) return nullptr;
  rt::Fibre* f = rt::this_fibre_or_null();
  if (__builtin_expect(!f || !(f->cancel.load(std::memory_order_relaxed) & rt::kCancelAsync), 1)) return nullptr;
  return async_call_enter();
}

extern "C" long loom_pthread_own_syscall(long n, long a0, long a1, long a2, long a3, long a4, long a5) {
  return rt::raw_syscall(n, a0, a1, a2, a3, a4, a5);
}

extern "C" void loom_pthread_async_leave(int* w) {
  ErrnoKeeper k;
  async_call_leave(w);
  k.done();
}

#if !defined(__x86_64__)
extern "C" long loom_program_syscall(long n, long a0, long a1, long a2, long a3, long a4, long a5) {
  return rt::raw_syscall(n, a0, a1, a2, a3, a4, a5);
}
#endif

bool loom::capi::loom_code_at(std::uintptr_t ip) noexcept {
  for (const CodeRange& r : loom_code)
    if (ip >= r.lo && ip < r.hi) return true;
  return false;
}

bool loom::capi::program_call_site(std::uintptr_t ip) noexcept {
#if defined(__x86_64__)
  if (ip >= reinterpret_cast<std::uintptr_t>(&loom_program_syscall) &&
      ip < reinterpret_cast<std::uintptr_t>(loom_program_syscall_end))
    return true;
#endif
  return !loom_code_at(ip);
}
