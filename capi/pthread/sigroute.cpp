// capi/pthread/sigroute.cpp — the signal-context half of libloom-pthread's
// per-thread signals (sigthread.cpp has the whole story): what runs in the
// trampoline (sigtable.cpp) on whatever kernel thread the kernel picked, and
// what a poster on any thread does. The process's pending set and its queue
// of realtime signals; posting a signal to a thread's pending set (and
// waking its waits); route(), which chooses the thread POSIX would for a
// signal the kernel delivered; hurried(), the landing of a signal sent to
// the kernel thread of a fibre blocked in a system call loom does not see;
// discard_pending, for a disposition that ignores.
//
// What it reproduces of glibc (the kernel's, there): a signal directed at
// the process goes to one thread that does not block it, a waiter in
// sigwait's family first, or stays pending for the process until one
// unblocks or waits for it; a standard signal is pending once per thread
// and once for the process, a realtime one queues (a thread's instances
// and the process's), each instance taken once, in order, a thread's own
// first; SIGPIPE and SIGXFSZ stay with the thread that caused them, and the
// synchronous signals (SIGSEGV...) are never routed. What it does not: the
// kernel's RLIMIT_SIGPENDING counts per user and refuses the sender, where
// loom's queue holds as many instances as that limit and drops beyond it
// (sigqueue to this process from a fibre gets EAGAIN); and the choice among
// threads that do not block a signal is loom's (interrupting the running
// fibre first, then one parked in a wait), not the kernel's.
//
// Everything here is async-signal-safe: atomics, a spin lock taken with
// every signal blocked, sem_post (sync.cpp), a futex wake.
#include "sigroute.hpp"

#include <semaphore.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>

#include "base/futex.hpp"
#include "capi.hpp"
#include "sched/in_handler.hpp"
#include "sched/processor.hpp"
#include "signals.hpp"

namespace loom::capi::pthread_signal {

// ---- the process's pending set ----------------------------------------------------------

namespace {

std::atomic<std::uint64_t> process_pending{0};  // every thread blocked these when they came
SignalInfo process_info[64];                    // written before the bit is set

}  // namespace

std::atomic<int> waiters{0};  // fibres inside a wait: route looks for them

SignalInfo info_of(const siginfo_t* si) {
  if (!si) return SignalInfo{SI_TKILL, int(::getpid()), unsigned(::getuid()), nullptr};
  return SignalInfo{si->si_code, si->si_pid, si->si_uid, si->si_value.sival_ptr};
}
// The converse: what a handler or sigwaitinfo is given of sig.
void to_siginfo(int sig, const SignalInfo& i, siginfo_t* out) {
  std::memset(out, 0, sizeof *out);
  out->si_signo = sig;
  out->si_code = i.code;
  out->si_pid = i.pid;
  out->si_uid = i.uid;
  out->si_value.sival_ptr = i.value;
}

namespace {

// sem_post is async-signal-safe in libloom-pthread (sync.cpp: a fibre
// waiter is handed to a waker thread): a handler may wake a waiting fibre.
void wake(SignalState& s) {
  int e = *errno_slot();
  sem_post(&s.wake);
  *errno_slot() = e;
}

void post_process(int sig, const SignalInfo& i);

}  // namespace

// ---- interrupts (sigthread.cpp, "interrupts") --------------------------------------------
//
// A handler due on a fibre parked in a wait runs there at once: the wait is
// cut short by a kernel thread of sigthread.cpp's (started with the first
// handler the program installs: interrupts_on), woken through this futex
// word. The waiter notes its key in its SignalState under the bucket lock
// and then reads its pending set; a poster sets the pending bit, then asks:
// one of the two sees the other.
std::atomic<int> interrupt_word{0};
std::atomic<bool> interrupts_on{false};

void ask_interrupt(SignalState& s) {
  if (!interrupts_on.load(std::memory_order_acquire)) return;
  s.interrupt.store(true, std::memory_order_seq_cst);
  interrupt_word.fetch_add(1, std::memory_order_seq_cst);
  rt::futex_wake(&interrupt_word, 1);
}

namespace {

// Realtime signals queue, as the kernel queues them: each instance is
// taken once, in the order it came, a thread's own before the process's
// (the kernel's dequeue_signal: the thread's private queue, then the
// shared one). A FIFO a signal for the process and one a signal for each
// thread (SignalState::rt_head), of nodes from one pool sized by the
// process's RLIMIT_SIGPENDING as it first queues (at least 16, at most
// 2^20; mapped, touched only as used; a static pool of up to 1,024 where
// the mapping fails): so a sigqueue to itself is refused near where the
// kernel would refuse it, and what exec hands the kernel fits. Beyond that
// an instance is dropped, where the kernel would have refused the sender
// with EAGAIN (a sigqueue to this process from a fibre gets EAGAIN:
// queue_failed). A thread's pending bit of a
// realtime signal is set while an instance sent to it is queued, the
// process's while one sent to the process is: both under the lock. An
// instance sent to a thread that has ended is dropped under the lock, so
// that none outlives drop_queued (the state is reused for the next thread).
//
// (Before: a thread's pending set held one instance, the process queued 32.
// A process-directed instance routed to a waiter went into the waiter's
// one place ahead of older ones queued for the process, take() read the
// siginfo after clearing the bit, and the 33rd was dropped: a sigwait
// storm of 20,000 lost half and took 796 out of order.)
//
// One lock, taken with every signal blocked on the kernel thread (route
// queues from a handler); a fork child starts with it free and the queues
// empty (rt_after_fork).
constexpr int kRtFirst = 32;  // the kernel's first realtime signal (glibc keeps 32 and 33)
struct RtItem {
  SignalInfo info;
  std::uint32_t next;  // node number + 1; 0: none
};
struct RtList {
  std::uint32_t* head;
  std::uint32_t* tail;
};
std::uint32_t process_head[33], process_tail[33];
constexpr std::uint32_t kFallback = 1024;
RtItem rt_fallback[kFallback];
RtItem* rt_pool = nullptr;  // mapped as the first instance queues
std::uint32_t rt_capacity = 0, rt_used = 0, rt_free = 0;
std::atomic_flag rt_lock = ATOMIC_FLAG_INIT;
bool queued(int sig) { return sig >= SIGRTMIN; }
RtList list_of(int sig, SignalState* to) {
  const int k = sig - kRtFirst;
  return to ? RtList{&to->rt_head[k], &to->rt_tail[k]} : RtList{&process_head[k], &process_tail[k]};
}

// (Keeps errno: its system calls, from a handler too, must not change the
// program's.)
class RtLocked {
 public:
  RtLocked() noexcept : errno_(*errno_slot()) {
    sigset_t all;
    sigfillset(&all);
    ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &saved_, _NSIG / 8);
    while (rt_lock.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~RtLocked() {
    rt_lock.clear(std::memory_order_release);
    ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &saved_, nullptr, _NSIG / 8);
    *errno_slot() = errno_;
  }

 private:
  int errno_;
  sigset_t saved_;
};

// Under the lock: a free node's number + 1, or 0 when the pool is full.
// The pool: system calls only, from a handler too.
std::uint32_t rt_alloc() {
  if (!rt_pool) {
    rlimit l{};
    std::uint64_t n = ::syscall(SYS_prlimit64, 0, RLIMIT_SIGPENDING, nullptr, &l) == 0 ? l.rlim_cur : 0;
    n = n < 16 ? 16 : n > (1u << 20) ? (1u << 20) : n;
    void* m = reinterpret_cast<void*>(::syscall(SYS_mmap, nullptr, n * sizeof(RtItem), PROT_READ | PROT_WRITE,
                                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (m == MAP_FAILED) m = rt_fallback, n = n < kFallback ? n : kFallback;  // (an address-space limit, say)
    rt_pool = static_cast<RtItem*>(m);
    rt_capacity = std::uint32_t(n);
  }
  if (rt_free) {
    std::uint32_t k = rt_free;
    rt_free = rt_pool[k - 1].next;
    return k;
  }
  return rt_used < rt_capacity ? ++rt_used : 0;
}

// Set when a push of this kernel thread's found the pool full (the
// instance dropped): a sigqueue that queued through route reads it.
thread_local bool tls_queue_failed __attribute__((tls_model("initial-exec"))) = false;

// Under the lock: sig's instance for `to` (null: the process) queued, its
// owner's bit set. Dropped (true) for a thread that has ended; false when
// the pool is full.
bool rt_push(int sig, SignalState* to, const SignalInfo& i) {
  if (to && to->ended.load(std::memory_order_seq_cst)) return true;  // as the kernel's, gone with the thread
  std::uint32_t k = rt_alloc();
  if (!k) {
    tls_queue_failed = true;
    return false;
  }
  rt_pool[k - 1] = RtItem{i, 0};
  RtList l = list_of(sig, to);
  (*l.tail ? rt_pool[*l.tail - 1].next : *l.head) = k;
  *l.tail = k;
  (to ? to->pending : process_pending).fetch_or(bit(sig), std::memory_order_seq_cst);
  return true;
}

// Under the lock: sig's first instance for `to` (null: the process) into
// *out, the owner's bit cleared with its last.
bool rt_pop(int sig, SignalState* to, SignalInfo* out) {
  RtList l = list_of(sig, to);
  std::uint32_t k = *l.head;
  if (!k) return false;
  *out = rt_pool[k - 1].info;
  *l.head = rt_pool[k - 1].next;
  if (!*l.head) {
    *l.tail = 0;
    (to ? to->pending : process_pending).fetch_and(~bit(sig), std::memory_order_acq_rel);
  }
  rt_pool[k - 1].next = rt_free;
  rt_free = k;
  return true;
}

// Under the lock: drops sig's instances for `to` (null: the process), its
// bit cleared.
void rt_drop(int sig, SignalState* to) {
  RtList l = list_of(sig, to);
  while (std::uint32_t k = *l.head) {
    *l.head = rt_pool[k - 1].next;
    rt_pool[k - 1].next = rt_free;
    rt_free = k;
  }
  *l.tail = 0;
  (to ? to->pending : process_pending).fetch_and(~bit(sig), std::memory_order_acq_rel);
}

// sig pending for the process (signal context too).
void post_process(int sig, const SignalInfo& i) {
  if (!queued(sig)) {
    process_info[sig - 1] = i;
    process_pending.fetch_or(bit(sig), std::memory_order_seq_cst);
    return;
  }
  RtLocked l;
  rt_push(sig, nullptr, i);
}

bool drop_one(SignalState& s, void* arg) {  // under the realtime lock
  rt_drop(*static_cast<int*>(arg), &s);
  return false;  // on to the next
}

bool discard_one(SignalState& s, void* arg) {
  s.pending.fetch_and(~*static_cast<std::uint64_t*>(arg), std::memory_order_acq_rel);
  return false;  // on to the next
}

}  // namespace

void post(SignalState& s, int sig, const SignalInfo& i) {
  if (queued(sig)) {  // queued for s (rt_push sets its bit)
    RtLocked l;
    rt_push(sig, &s, i);
  } else {
    if (SignalInfo* a = s.info.load(std::memory_order_acquire)) a[sig - 1] = i;
    s.pending.fetch_or(bit(sig), std::memory_order_seq_cst);
  }
  wake(s);
}

bool take_process(int sig, SignalInfo* out) {
  std::uint64_t b = bit(sig);
  if (!(process_pending.load(std::memory_order_acquire) & b)) return false;
  if (!queued(sig)) {
    if (!(process_pending.fetch_and(~b, std::memory_order_acq_rel) & b)) return false;
    *out = process_info[sig - 1];
    return true;
  }
  RtLocked l;
  return rt_pop(sig, nullptr, out);
}

// Takes sig out of s's pending set, or the process's: its info, or false
// if another taker won.
bool take(SignalState& s, int sig, SignalInfo* out) {
  std::uint64_t b = bit(sig);
  if (queued(sig)) {
    if (!(pending_for(s) & b)) return false;
    RtLocked l;
    return rt_pop(sig, &s, out) || rt_pop(sig, nullptr, out);
  }
  if (s.pending.fetch_and(~b, std::memory_order_acq_rel) & b) {
    s.routed.fetch_and(~b, std::memory_order_relaxed);
    SignalInfo* a = s.info.load(std::memory_order_acquire);
    *out = a ? a[sig - 1] : info_of(nullptr);
    return true;
  }
  return take_process(sig, out);
}

std::uint64_t process_pending_now() { return process_pending.load(std::memory_order_seq_cst); }

std::uint64_t pending_for(const SignalState& s) {
  return s.pending.load(std::memory_order_seq_cst) | process_pending.load(std::memory_order_seq_cst);
}

// ---- delivery on the calling fibre's kernel thread ------------------------------------------

// The signal this kernel thread sends itself now, as it sends it (read by
// the trampoline: initial-exec, no TLS call in a handler; a hurry merged
// with it takes its siginfo: hurried). Set by sigthread.cpp's run_here.
thread_local const siginfo_t* tls_delivering __attribute__((tls_model("initial-exec"))) = nullptr;
// Start-up unblocks the signals the process inherited blocked (sigthread.cpp's look_up_early).
thread_local bool tls_adopting __attribute__((tls_model("initial-exec"))) = false;

namespace {

bool delivering(int sig) { return tls_delivering && tls_delivering->si_signo == sig; }

}  // namespace

// The child of a fork: every thread there is a kernel thread of glibc's
// (the forking one included), whose mask is the kernel's; route leaves
// each signal to the thread the kernel picked. The states copied from the
// parent (waiters, parked fibres) name fibres the child does not have.
// Set by sigthread.cpp's child handler.
std::atomic<bool> fork_child{false};

// ---- route (signal context) ------------------------------------------------------------

namespace {

bool claim_process_pending(SignalState& s, void* arg);

}  // namespace

// sig, pending for the process, goes back there (a thread it was routed to
// ended without taking it): a thread that waits for it or does not block
// it is woken to take it, as route's last step.
bool hand_back(int sig, const SignalInfo& i) {
  Routing r{sig, i, false, nullptr, false};
  post_process(sig, i);
  return any_signal_state(&claim_process_pending, &r);  // false: no thread takes it now
}

bool queue_full() {
  RtLocked l;
  return rt_pool && !rt_free && rt_used == rt_capacity;
}

bool queue_failed() {
  bool failed = tls_queue_failed;
  tls_queue_failed = false;
  return failed;
}

void rt_after_fork() noexcept {
  new (&rt_lock) std::atomic_flag();
  rt_lock.clear();
  for (int k = 0; k < 33; ++k) process_head[k] = process_tail[k] = 0;
  process_pending.fetch_and(bit(kRtFirst) - 1, std::memory_order_relaxed);
  rt_free = 0;
  rt_used = 0;
}

bool claim_queued(int sig) {
  Routing r{sig, SignalInfo{}, false, nullptr, false};
  return any_signal_state(&claim_process_pending, &r);
}

void drop_queued(SignalState& s, std::uint64_t sigs) {
  RtLocked l;
  for (sigs &= ~(bit(SIGRTMIN) - 1); sigs; sigs &= sigs - 1) rt_drop(lowest(sigs), &s);
}

namespace {

// A process-directed signal posted to s by route. Against s's end
// (thread_ended): it marks s ended, then takes its pending set; this sets
// the bit, then reads `ended` (both sequentially consistent), so a signal
// posted as s ends is taken back by one of the two, never lost with it.
void post_routed(SignalState& s, int sig, const SignalInfo& i) {
  if (queued(sig)) {  // stays the process's, behind older instances: s is woken to take it
    post_process(sig, i);
    wake(s);
    // ... unless its wait ended meanwhile: the other half of ~WaitScope's
    // pair (it clears `waits`, then reads the process's pending set).
    if (!(s.waits.load(std::memory_order_seq_cst) & bit(sig))) claim_queued(sig);
    return;
  }
  std::uint64_t b = bit(sig);
  s.routed.fetch_or(b, std::memory_order_relaxed);
  post(s, sig, i);
  if (s.ended.load(std::memory_order_seq_cst) && (s.pending.fetch_and(~b, std::memory_order_acq_rel) & b)) {
    SignalInfo* a = s.info.load(std::memory_order_acquire);
    hand_back(sig, a ? a[sig - 1] : i);
  }
}

bool post_to_waiter(SignalState& s, void* arg) {
  auto* r = static_cast<Routing*>(arg);
  if (!(s.waits.load(std::memory_order_acquire) & bit(r->sig))) return false;
  post_routed(s, r->sig, r->info);
  return true;
}

// After sig was made pending for the process: a thread that began waiting
// for it, or unblocked it, while route looked elsewhere (the other half of
// WaitScope's pair; set_mask's too) is woken (or its wait cut short) to
// take it itself.
bool claim_process_pending(SignalState& s, void* arg) {
  auto* r = static_cast<Routing*>(arg);
  if (s.waits.load(std::memory_order_seq_cst) & bit(r->sig)) {
    wake(s);
    return true;
  }
  if (s.mask.load(std::memory_order_seq_cst) & bit(r->sig)) return false;
  wake(s);  // it takes it from the process's set at its next delivery point
  ask_interrupt(s);
  return true;
}

bool post_to_unblocked(SignalState& s, void* arg) {
  auto* r = static_cast<Routing*>(arg);
  if (&s == r->skip || (s.mask.load(std::memory_order_acquire) & bit(r->sig))) return false;
  // First pass (a handler, interrupts on): a thread parked in the parking
  // lot, whose wait is cut short to run it there at once.
  if (r->parked_only) {
    if (!s.parked_key.load(std::memory_order_seq_cst)) return false;
    r->posted = true;
    post_routed(s, r->sig, r->info);
    ask_interrupt(s);
    return true;
  }
  // Interrupting a fibre that blocks it: posted to this one, which runs it
  // at its next delivery point. Interrupting no fibre of the program (an
  // idle processor, one of loom's own threads): run here, at once, as a
  // thread that blocks nothing would. A default action acts here either way.
  r->posted = !r->by_default && r->skip;
  if (r->posted) {
    post_routed(s, r->sig, r->info);
    ask_interrupt(s);  // blocked in a call loom does not see: hurried
  }
  return true;
}

}  // namespace

namespace {

std::atomic<unsigned> handled[65];  // a count per signal of the trampoline's calls, bumped as each ends

}  // namespace

unsigned routings(int sig) { return handled[sig].load(std::memory_order_acquire); }

namespace {
std::atomic<SignalState*> kill_sender[65];  // awaiting_kill's
}  // namespace

void awaiting_kill(int sig, SignalState* expected, SignalState* now) {
  kill_sender[sig].compare_exchange_strong(expected, now, std::memory_order_acq_rel);
}
void routing_done(int sig) noexcept {
  if (sig > 0 && sig <= 64) handled[sig].fetch_add(1, std::memory_order_release);
}

bool route(int sig, const siginfo_t* si, bool by_default) noexcept {
  if (synchronous(sig) || delivering(sig)) return false;
  if (fork_child.load(std::memory_order_relaxed)) return false;  // the kernel's choice, with the kernel's masks
  // The runtime's own (the stall detector's tgkill) and glibc's raise and
  // abort: meant for this kernel thread.
  // (Not those pending since before exec, which come as start-up unblocks
  // them: a raise of the former image's.)
  if (si && si->si_code == SI_TKILL && si->si_pid == ::getpid() && !tls_adopting) return false;
  SignalState* cur = signal_state();
  if (rt::Processor* p = rt::this_processor_at_entry(); !p || p->current() == &p->idle_fibre()) cur = nullptr;
  Routing r{sig, info_of(si), by_default, cur, false};
  if (thread_directed(sig) && cur) {
    if (!(cur->mask.load(std::memory_order_acquire) & bit(sig))) return false;
    post(*cur, sig, r.info);  // pending on the thread that caused it
    return true;
  }
  if (waiters.load(std::memory_order_acquire) > 0 && any_signal_state(&post_to_waiter, &r)) return true;
  if (cur && !(cur->mask.load(std::memory_order_acquire) & bit(sig))) return false;
  // No program thread runs here: a sender waiting in kill for it that
  // leaves it open takes it (sigthread.cpp, await_routing).
  if (!cur && !by_default) {
    SignalState* w = kill_sender[sig].load(std::memory_order_acquire);
    if (w && !(w->mask.load(std::memory_order_acquire) & bit(sig)) && !w->ended.load(std::memory_order_acquire)) {
      post_routed(*w, sig, r.info);
      return true;
    }
  }
  if (!by_default && interrupts_on.load(std::memory_order_acquire)) {
    r.parked_only = true;
    if (any_signal_state(&post_to_unblocked, &r)) return true;
    r.parked_only = false;
  }
  if (any_signal_state(&post_to_unblocked, &r)) return r.posted;  // else: the default action, here
  post_process(sig, r.info);
  any_signal_state(&claim_process_pending, &r);
  return true;
}

bool is_hurry(const siginfo_t& si) noexcept {
  return si.si_code == kSiHurry && si.si_errno == kHurryErrno && si.si_pid == ::getpid();
}

bool hurried(int sig, siginfo_t* si, void* context) noexcept {
  // run_here's own tgkill of sig merged with this one in the kernel (a
  // standard signal is pending once): this is that delivery.
  if (delivering(sig)) {
    *si = *tls_delivering;
    return true;
  }
#if defined(__x86_64__)
  // The interrupted fibre, inside a handler too (a nested handler, as the
  // kernel runs one: the kernel thread's mask, the handler's, let it in).
  rt::Processor* p = rt::this_processor_at_entry();
  if (!p || p->current() == &p->idle_fibre()) return false;
  SignalState* s = signal_state();
  if (!s || s != si->si_value.sival_ptr) return false;
  if (!rt::in_signal_handler() && (s->mask.load(std::memory_order_acquire) & bit(sig))) return false;
  // In a system call that blocked: the instruction after a `syscall` with
  // EINTR, or the `syscall` itself to be restarted (bytes read only within
  // the instruction's own page), made by the program or glibc, never by
  // loom's code but for the program's own syscall(2).
  const auto& regs = static_cast<const ucontext_t*>(context)->uc_mcontext.gregs;
  const auto ip = static_cast<std::uintptr_t>(regs[REG_RIP]);
  const auto* at = reinterpret_cast<const unsigned char*>(ip);
  const bool interrupted = regs[REG_RAX] == -EINTR && (ip & 0xfff) >= 2 && at[-2] == 0x0f && at[-1] == 0x05;
  const bool restarting = !interrupted && ((ip + 1) & 0xfff) != 0 && at[0] == 0x0f && at[1] == 0x05;
  if (!(interrupted || restarting) || !program_call_site(interrupted ? ip - 2 : ip)) return false;
  SignalInfo i;
  if (!take(*s, sig, &i)) return false;  // a delivery point took it meanwhile
  to_siginfo(sig, i, si);
  return true;
#else
  (void)context;
  return false;
#endif
}

void discard_pending(int sig) noexcept {
  if (sig <= 0 || sig > 64) return;
  std::uint64_t b = bit(sig);
  if (queued(sig)) {
    RtLocked l;  // (keeps errno)
    rt_drop(sig, nullptr);
    any_signal_state(&drop_one, &sig);
  } else {
    process_pending.fetch_and(~b, std::memory_order_acq_rel);
  }
  any_signal_state(&discard_one, &b);
}

}  // namespace loom::capi::pthread_signal
