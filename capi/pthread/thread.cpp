// capi/pthread/thread.cpp — libloom-pthread's threads: pthread_create and
// every pthread_* call about threads, their attributes, keys, exit,
// signals and fork (cancellation and cleanup buffers: cancel.cpp), by glibc's names and with glibc's
// signatures, so that an unmodified program (linked with -lloom-pthread, or
// run with LD_PRELOAD=libloom-pthread.so) runs each thread it creates as a
// fibre.
//
// Glue only: a thread is a fibre of loom_create (capi/thread.cpp), and
// pthread_t is loom_t — a slot and a generation, so a stale handle gives
// ESRCH as glibc's does. What lives here is what glibc's ABI adds on top of
// loom.h:
//  - pthread_attr_t is glibc's 56-byte object; loom's settings are kept in
//    it (Attr below) and turned into a loom_attr_t at create time;
//  - pthread_exit is loom_exit's forced unwind (capi/thread.cpp), which
//    runs glibc's cleanup buffers (cancel.cpp, with cancellation itself)
//    and C++ destructors in stack order;
//  - fork: a handler registered before any of the program's marks the child's
//    only kernel thread as "not a processor", so every hook of the library
//    behaves as glibc's there (blocking the kernel thread); threads the
//    child creates are glibc's kernel threads (see "fork" below).
//
// Choices where glibc's threads and fibres differ (README: "Three ways to
// run a pthread program on loom"):
//  - stack size: a thread without a size gets glibc's default (the
//    RLIMIT_STACK soft limit, reserved, committed where touched), or
//    LOOM_STACK_SIZE's; a size the program sets (>= PTHREAD_STACK_MIN) is
//    used as given, and getattr reports it (the thread's own TLS block sits
//    above it). Caller-supplied stacks (setstack, setstackaddr) are where
//    the fibre runs (loom_attr_setstack), without a guard page (as glibc).
//  - pthread_attr_t is laid out as glibc's struct pthread_attr (flags,
//    sizes, stack top, extension), so glibc's own thread-making functions
//    (SIGEV_THREAD, mq_notify) read the program's settings from it.
//  - scheduling: inheritsched, policy, priority and scope are kept in the
//    attribute and reported back as set (scope SYSTEM as glibc; PROCESS gives
//    ENOTSUP as glibc's does), but a fibre has no POSIX policy: they do not
//    change how it runs. pthread_setschedparam accepts SCHED_OTHER, BATCH and
//    IDLE at priority 0 and refuses FIFO and RR with EPERM (as glibc does
//    for an unprivileged process).
//  - affinity: a fibre moves between its cluster's processors. A set is
//    checked (EINVAL without a CPU the process may use, at pthread_create
//    and pthread_setaffinity_np, as the kernel makes glibc's answer) and
//    kept in the attribute (and the default attribute), not applied; getting a thread's reports the
//    process's CPUs (where a fibre may run). A bad scheduling attribute
//    (a priority outside its policy's range) is refused at create.
//  - signals: each fibre has its own mask and pending set (sigthread.cpp:
//    pthread_sigmask, pthread_kill, the waits); loom changes no disposition
//    (loom_pthread_routes below keeps the runtime's SIGPIPE default away).
//    pthread_attr_setsigmask_np gives the new thread its mask.
//    pthread_setattr_default_np also sets glibc's default (its own threads:
//    C11's, SIGEV_THREAD's), and a fork child's threads get the attribute's
//    mask and affinity from glibc.
//  - cancellation: cancel.cpp.
//  - pthread_getcpuclockid: a clock of the fibre's own CPU time, counted
//    from this first ask on (clock.cpp; docs/DESIGN.md, "Per-thread CPU
//    clocks"); glibc's for threads of glibc's.
//  - callers that are not loom processors (before the runtime started, other
//    kernel threads, a fork child) may call pthread_self, pthread_equal, the
//    key and attribute calls; pthread_create from a kernel thread that is not
//    a processor makes a fibre in the default cluster (in a fork child, a
//    kernel thread of glibc's). Such a thread's pthread_self() is glibc's
//    handle, and the calls by handle on itself (getattr, names, CPU clock,
//    kill) are glibc's: glibc's own helper threads (SIGEV_THREAD timers,
//    mq_notify) answer as on glibc. The forking thread of a fork child keeps
//    its handle from before the fork (its stack, its name; main can be
//    joined there after its pthread_exit).
//  - join and detach: glibc's errors (EDEADLK joining oneself, EINVAL for a
//    second detach, also in a fork child); main may be joined once it has
//    called pthread_exit; a timed join without a time waits. A thread
//    naming itself names its kernel thread too (a fibre's processor, until
//    another fibre there names itself), so /proc shows it as on glibc; main
//    unnamed answers with the process's name. Not done: a circular join of
//    two other threads (glibc's EDEADLK when the target joins the caller).
//    In a fork child, glibc's stack cache holds the parent's processor
//    threads' stacks, so a thread made there may get a larger one than asked
//    (glibc's own behaviour with a cache, unlike a fresh glibc process).
//  - keys: all PTHREAD_KEYS_MAX (1,024); C11's tss_* are loom's keys too.
//  - a thread that cannot be made (no memory for its stack) gives EAGAIN,
//    after letting the threads that could give memory back run.
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <threads.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "base/futex.hpp"
#include "base/spinlock.hpp"
#include "base/sys.hpp"
#include "capi.hpp"
#include "loom/loom.h"
#include "sched/in_handler.hpp"
#include "sched/processor.hpp"
#include "sched/tls.hpp"
#include "signals.hpp"
#include "sync/keys.hpp"
#include "sync/parking_lot.hpp"
#include "sync/wait.hpp"

// glibc declares most pointer arguments here nonnull; the checks are kept for
// callers that reach these through casts or dlsym (EINVAL, as loom.h does).
#pragma GCC diagnostic ignored "-Wnonnull-compare"

extern "C" int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void), void* dso);
extern "C" void* __dso_handle;

namespace loom::capi::pthread_lib {
namespace {

// ---- the attribute object ----------------------------------------------------------

// loom's settings inside glibc's pthread_attr_t (56 bytes on x86-64), laid
// out as glibc's own struct pthread_attr: glibc's functions that make
// threads with a program's attribute themselves (SIGEV_THREAD timers,
// mq_notify) read it as theirs, and find what the program set. loom's mark
// sits in glibc's padding; the extension (an affinity set) is glibc's shape.
struct AttrExt {  // glibc's struct pthread_attr_extension
  cpu_set_t* cpuset;
  std::size_t cpusetsize;
  sigset_t sigmask;
  bool sigmask_set;
};
struct Attr {
  std::int32_t priority;  // sched_param.sched_priority
  std::int32_t policy;
  std::int32_t flags;  // glibc's bits, kFlag* below
  std::uint32_t magic;
  std::size_t guardsize;
  void* stackaddr;        // the top of the stack (glibc's convention), with kFlagStackAddr
  std::size_t stacksize;  // 0: the default
  AttrExt* ext;           // null: no affinity set
  // pthread_attr_setsigmask_np's mask (bit s-1: signal s), with kHasSigmask
  // (signal 32's bit, glibc's own, never in a mask) set when there is one.
  // (glibc's unused word: glibc keeps its mask in the extension.)
  std::uint64_t sigmask;
};
constexpr std::int32_t kFlagDetached = 0x1, kFlagExplicitSched = 0x2, kFlagScopeProcess = 0x4, kFlagStackAddr = 0x8;
constexpr std::uint64_t kHasSigmask = std::uint64_t(1) << 31;
static_assert(sizeof(Attr) <= sizeof(pthread_attr_t), "libloom-pthread: Attr must fit glibc's pthread_attr_t");
static_assert(alignof(Attr) <= alignof(pthread_attr_t), "libloom-pthread: pthread_attr_t under-aligned");

constexpr std::uint32_t kAttrMagic = 0x6c706174;  // "lpat"

Attr* attr_of(pthread_attr_t* a) {
  auto* r = reinterpret_cast<Attr*>(a);
  return a && r->magic == kAttrMagic ? r : nullptr;
}
const Attr* attr_of(const pthread_attr_t* a) {
  auto* r = reinterpret_cast<const Attr*>(a);
  return a && r->magic == kAttrMagic ? r : nullptr;
}

std::size_t page_size() {
  static const std::size_t n = std::size_t(sysconf(_SC_PAGESIZE));
  return n;
}

// pthread_setattr_default_np's stack and guard sizes (0: loom's defaults)
// and detach state: what a thread made without an attribute gets.
std::atomic<std::size_t> default_stacksize{0};
std::atomic<std::size_t> default_guardsize{0};
std::atomic<std::uint64_t> default_sigmask{0};  // and its signal mask (kHasSigmask when set)
std::atomic<bool> default_detached{false};
// and its affinity set (null: none), replaced whole under default_lock.
rt::SpinLock default_lock;
cpu_set_t* default_cpuset = nullptr;
std::size_t default_cpusetsize = 0;
std::atomic<bool> has_default_cpuset{false};

void init_attr(Attr* r) {
  std::memset(static_cast<void*>(r), 0, sizeof(pthread_attr_t));
  r->magic = kAttrMagic;
  r->policy = SCHED_OTHER;
  r->stacksize = default_stacksize.load(std::memory_order_relaxed);
  std::size_t g = default_guardsize.load(std::memory_order_relaxed);
  r->guardsize = g ? g : page_size();
}

int detach_of(const Attr* r) { return r->flags & kFlagDetached ? PTHREAD_CREATE_DETACHED : PTHREAD_CREATE_JOINABLE; }
void set_flag(Attr* r, std::int32_t f, bool on) { r->flags = on ? r->flags | f : r->flags & ~f; }

std::size_t loom_default_stack() {
  loom_attr_t a;
  loom_attr_init(&a);
  std::size_t n = 0;
  loom_attr_getstacksize(&a, &n);
  loom_attr_destroy(&a);
  return n;
}

// glibc's own default for a new thread (the RLIMIT_STACK soft limit, or its
// architecture default when that is unlimited), asked of glibc itself.
std::size_t glibc_default_stack() {
  static const std::size_t n = [] {
    int (*getdefault)(pthread_attr_t*) = nullptr;
    int (*getsize)(const pthread_attr_t*, size_t*) = nullptr;
    int (*destroy)(pthread_attr_t*) = nullptr;
    rt::sys::find_symbol(getdefault, "libc.so.6", "pthread_getattr_default_np");
    rt::sys::find_symbol(getsize, "libc.so.6", "pthread_attr_getstacksize");
    rt::sys::find_symbol(destroy, "libc.so.6", "pthread_attr_destroy");
    std::size_t size = 0;
    pthread_attr_t a;
    if (getdefault && getsize && getdefault(&a) == 0) {
      getsize(&a, &size);
      if (destroy) destroy(&a);
    }
    return size ? size : std::size_t(8) << 20;
  }();
  return n;
}

// A thread without a stack size gets what glibc would give it, unless
// LOOM_STACK_SIZE says otherwise: address space reserved, committed only
// where touched, so an idle thread costs the pages it used, as on glibc.
std::size_t thread_default_stack() {
  static const bool loom_sized = std::getenv("LOOM_STACK_SIZE") != nullptr;
  return loom_sized ? loom_default_stack() : glibc_default_stack();
}

// ---- glibc's own functions, for callers that are not loom's -------------------------

struct Glibc {
  // Also in base/sys.hpp, but there sanitizer builds take the names' own
  // addresses, which would be this library's definitions.
  [[noreturn]] void (*exit)(void*);
  // For the threads of a fork child (see "fork" below).
  int (*create)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  int (*join)(pthread_t, void**);
  int (*tryjoin_np)(pthread_t, void**);
  int (*timedjoin_np)(pthread_t, void**, const struct timespec*);
  int (*clockjoin_np)(pthread_t, void**, clockid_t, const struct timespec*);
  int (*detach)(pthread_t);
  int (*getattr_np)(pthread_t, pthread_attr_t*);
  int (*setname_np)(pthread_t, const char*);
  int (*getname_np)(pthread_t, char*, size_t);
  int (*attr_init)(pthread_attr_t*);
  int (*attr_setdetachstate)(pthread_attr_t*, int);
  int (*attr_setstacksize)(pthread_attr_t*, size_t);
  int (*attr_setguardsize)(pthread_attr_t*, size_t);
  int (*attr_setstack)(pthread_attr_t*, void*, size_t);
  int (*attr_destroy)(pthread_attr_t*);
  int (*attr_getstack)(const pthread_attr_t*, void**, size_t*);
  int (*attr_getguardsize)(const pthread_attr_t*, size_t*);
  int (*attr_getdetachstate)(const pthread_attr_t*, int*);
  int (*getcpuclockid)(pthread_t, clockid_t*);
  int (*setaffinity_np)(pthread_t, size_t, const cpu_set_t*);
  int (*attr_setsigmask_np)(pthread_attr_t*, const sigset_t*);
  int (*attr_setaffinity_np)(pthread_attr_t*, size_t, const cpu_set_t*);
  int (*setattr_default_np)(const pthread_attr_t*);
  int (*key_create)(pthread_key_t*, void (*)(void*));
  int (*setspecific)(pthread_key_t, const void*);
};

// Looked up in libc.so.6 itself, as base/sys.cpp does (not RTLD_NEXT: what
// comes "next" depends on how the program was linked).
const Glibc& glibc() {
  static const Glibc g = [] {
    Glibc r{};
    rt::sys::find_symbol(r.exit, "libc.so.6", "pthread_exit");
    rt::sys::find_symbol(r.key_create, "libc.so.6", "pthread_key_create");
    rt::sys::find_symbol(r.setspecific, "libc.so.6", "pthread_setspecific");
    rt::sys::find_symbol(r.create, "libc.so.6", "pthread_create");
    rt::sys::find_symbol(r.join, "libc.so.6", "pthread_join");
    rt::sys::find_symbol(r.tryjoin_np, "libc.so.6", "pthread_tryjoin_np");
    rt::sys::find_symbol(r.timedjoin_np, "libc.so.6", "pthread_timedjoin_np");
    rt::sys::find_symbol(r.clockjoin_np, "libc.so.6", "pthread_clockjoin_np");
    rt::sys::find_symbol(r.detach, "libc.so.6", "pthread_detach");
    rt::sys::find_symbol(r.getattr_np, "libc.so.6", "pthread_getattr_np");
    rt::sys::find_symbol(r.setname_np, "libc.so.6", "pthread_setname_np");
    rt::sys::find_symbol(r.getname_np, "libc.so.6", "pthread_getname_np");
    rt::sys::find_symbol(r.attr_init, "libc.so.6", "pthread_attr_init");
    rt::sys::find_symbol(r.attr_setdetachstate, "libc.so.6", "pthread_attr_setdetachstate");
    rt::sys::find_symbol(r.attr_setstacksize, "libc.so.6", "pthread_attr_setstacksize");
    rt::sys::find_symbol(r.attr_setguardsize, "libc.so.6", "pthread_attr_setguardsize");
    rt::sys::find_symbol(r.attr_setstack, "libc.so.6", "pthread_attr_setstack");
    rt::sys::find_symbol(r.attr_destroy, "libc.so.6", "pthread_attr_destroy");
    rt::sys::find_symbol(r.attr_getstack, "libc.so.6", "pthread_attr_getstack");
    rt::sys::find_symbol(r.attr_getguardsize, "libc.so.6", "pthread_attr_getguardsize");
    rt::sys::find_symbol(r.attr_getdetachstate, "libc.so.6", "pthread_attr_getdetachstate");
    rt::sys::find_symbol(r.getcpuclockid, "libc.so.6", "pthread_getcpuclockid");
    rt::sys::find_symbol(r.setaffinity_np, "libc.so.6", "pthread_setaffinity_np");
    rt::sys::find_symbol(r.attr_setsigmask_np, "libc.so.6", "pthread_attr_setsigmask_np");
    rt::sys::find_symbol(r.attr_setaffinity_np, "libc.so.6", "pthread_attr_setaffinity_np");
    rt::sys::find_symbol(r.setattr_default_np, "libc.so.6", "pthread_setattr_default_np");
    return r;
  }();
  return g;
}

// glibc's pthread_self(), without a call through glibc(): it may be asked
// before anything is looked up, by a malloc's initialisation (jemalloc asks
// inside its init lock, and looking a symbol up mallocs). glibc's pthread_t
// is its thread block, which keeps its own address at %fs:16 on x86-64
// (only kernel threads loom did not make ask: a fibre's %fs is its own).
pthread_t glibc_self() {
  pthread_t r;
  asm("mov %%fs:16, %0" : "=r"(r));
  return r;
}

// ---- fork ----------------------------------------------------------------------------
//
// The child of a fork has one kernel thread: the one that ran the forking
// fibre. It stops being a processor (after_fork_in_child, the first child
// handler the program's run after), so every hook of the library takes the
// path of a kernel thread that is not loom's — glibc's behaviour: locks wait
// on futexes, I/O and sleeps block in the kernel. The parent's other
// fibres, processors, poller and offload threads are not in the child, and
// loom does not rebuild them there (docs/DESIGN.md, "fork"): a thread the
// child creates is a kernel thread of glibc's own, which runs the program's
// code with loom's locks, keys and I/O calls as such a thread does.

std::atomic<bool> forked_child{false};

// Threads made in the child: their handles are glibc's, kept here so that
// join, detach and the calls by handle reach glibc for them (a handle of
// the parent's threads still reaches loom, which knows it). `live` counts
// those whose start routine has not ended: the forking thread's own end
// waits for them, since the process ends with its last thread.
// Detached ones are listed too, so that a second detach gives EINVAL as
// glibc's does (not ESRCH: loom does not know the handle), until they end:
// a thread detached when it ends drops its own entry (kept, the list grew
// with every short detached thread and each look walked it: glibc's
// tst-create-detached, 100,000 of them, timed out). One detached after
// its end stays until glibc hands the same handle to a new thread, whose
// entry replaces it.
// glibc may give a joined thread's handle to a new thread as soon as the
// join has freed it, before the joiner forgets the entry: entries are
// told apart by their sequence number (the new one's must stay).
struct ChildThread {
  pthread_t handle;
  bool detached;      // by its attribute or pthread_detach
  std::uint64_t seq;  // from 1
  // Set as it starts, cleared as it ends: its rt::identity() and its
  // cancel_asked, for pthread_cancel (wake_fork_child_thread).
  const void* ident = nullptr;
  std::atomic<bool>* asked = nullptr;
};
struct ChildThreads {
  rt::SpinLock lock;
  std::vector<ChildThread> handles;
  std::uint64_t made = 0;  // under lock
  std::atomic<int> live{0};
};
ChildThreads& child_threads() {
  static ChildThreads* c = new ChildThreads;  // never destroyed: threads may outlive exit's destructors
  return *c;
}
thread_local bool is_child_thread = false;
// The forking thread of a fork child: set there by the child handler (its
// thread-locals are the forking fibre's). Not "not a child thread": glibc's
// own helper threads in the child (mq_notify's, SIGEV_THREAD's) are neither,
// and took the forking thread's handle for their pthread_self().
thread_local bool is_forking_thread = false;
// The forking thread's handle from before the fork: its pthread_self() in
// the child, so that the calls by handle keep answering for it (its stack,
// name, joining main) as they did in the parent.
pthread_t fork_self = 0;
// ... and glibc's handle for it there (its block, which glibc's fork told
// the kernel thread's tid): what a signal or a cancellation sent to
// fork_self goes to, since the child's threads are glibc's.
pthread_t fork_glibc = 0;
// ... and whether it has ended there (its kernel thread may wait on for the
// child's other threads: nothing is sent to it then, as glibc sends nothing
// to a thread that has exited).
std::atomic<bool> fork_self_ended{false};
// glibc's handle of the initial thread, taken before main's fibre has a
// thread block of its own.
pthread_t initial_thread = 0;

bool on_fibre() { return rt::this_fibre_or_null() != nullptr; }

// Kernel threads loom did not make whose handle their pthread_self() gave
// out (glibc's SIGEV_THREAD timer threads, mq_notify's): so that another
// thread's pthread_cancel, pthread_kill... of that handle reach glibc's,
// as on glibc (its tst-cancel28 cancels a timer's thread). The last 64;
// a handle of a thread that has ended stays listed, as stale as glibc's.
std::atomic<pthread_t> foreign_seen[64];
std::atomic<unsigned> foreign_next{0};

bool known_foreign(pthread_t t) {
  if (t == 0) return false;
  for (auto& f : foreign_seen)
    if (f.load(std::memory_order_acquire) == t) return true;
  return false;
}
void note_foreign(pthread_t t) {
  if (known_foreign(t)) return;
  foreign_seen[foreign_next.fetch_add(1, std::memory_order_relaxed) % 64].store(t, std::memory_order_release);
}

// A kernel thread loom knows nothing of: not a fibre, and not the forking
// thread of a fork child (which keeps its handle from before the fork).
bool foreign_caller() {
  return !on_fibre() && !(forked_child.load(std::memory_order_relaxed) && is_forking_thread);
}

// The forking thread of a fork child joining itself: EDEADLK (loom sees no
// fibre there to compare).
bool joins_itself(pthread_t t) {
  return forked_child.load(std::memory_order_relaxed) && is_forking_thread && t == fork_self;
}

// The sequence number of t's entry: 0 when t is not a thread made in the
// child.
std::uint64_t child_seq(pthread_t t) {
  if (!forked_child.load(std::memory_order_relaxed)) return 0;
  ChildThreads& c = child_threads();
  rt::SpinGuard g(c.lock);
  for (const ChildThread& h : c.handles)
    if (h.handle == t) return h.seq;
  return 0;
}
bool child_handle(pthread_t t) { return child_seq(t) != 0; }

// Under the list's lock.
ChildThread* find_child(ChildThreads& c, pthread_t t) {
  for (ChildThread& h : c.handles)
    if (h.handle == t) return &h;
  return nullptr;
}
void drop_child(ChildThreads& c, ChildThread* h) {
  *h = c.handles.back();
  c.handles.pop_back();
}

void forget_child_handle(pthread_t t, std::uint64_t seq) {
  ChildThreads& c = child_threads();
  rt::SpinGuard g(c.lock);
  if (ChildThread* h = find_child(c, t); h && h->seq == seq) drop_child(c, h);
}

// A join of a thread made in the child is glibc's; any other, loom's.
template <class GlibcJoin, class LoomJoin>
int join_either(pthread_t t, GlibcJoin glibc_join, LoomJoin loom_join) {
  const std::uint64_t seq = child_seq(t);
  if (!seq) return joins_itself(t) ? EDEADLK : loom_join();
  int e = glibc_join();
  if (e == 0) forget_child_handle(t, seq);
  return e;
}

// pthread_detach of a thread made in the child: glibc's, but a second one
// gives EINVAL without reaching glibc (the thread may be gone).
int detach_child(pthread_t t) {
  ChildThreads& c = child_threads();
  rt::SpinGuard g(c.lock);
  ChildThread* h = find_child(c, t);
  if (!h) return ESRCH;
  if (h->detached) return EINVAL;
  int e = glibc().detach(t);
  if (e == 0) h->detached = true;
  return e;
}

// pthread_cancel asked for the calling thread (made in the child): set
// before the request looks for the thread's wait (parking_lot's
// kernel_cancel_due reads it).
thread_local std::atomic<bool> cancel_asked{false};

// Whether a request for the calling thread is due: asked, and glibc's
// cancellation state enabled (read by setting it: a deferred request is
// not acted on by setcancelstate).
bool kernel_cancel_due() {
  if (!cancel_asked.load(std::memory_order_seq_cst)) return false;
  static int (*setstate)(int, int*) = [] {
    int (*fn)(int, int*) = nullptr;
    rt::sys::find_symbol(fn, "libc.so.6", "pthread_setcancelstate");
    return fn;
  }();
  int old = PTHREAD_CANCEL_ENABLE;
  setstate(PTHREAD_CANCEL_DISABLE, &old);
  setstate(old, nullptr);
  return old == PTHREAD_CANCEL_ENABLE;
}

// The end of a thread made in the child, however it ends (its start
// routine returns, pthread_exit or cancellation unwind through child_start).
void child_thread_ended() {
  ChildThreads& c = child_threads();
  {
    rt::SpinGuard g(c.lock);
    if (ChildThread* e = find_child(c, glibc_self()); e && e->asked == &cancel_asked) {
      if (e->detached) {
        drop_child(c, e);  // nobody may name it any more
      } else {
        e->ident = nullptr;
        e->asked = nullptr;
      }
    }
  }
  if (c.live.fetch_sub(1, std::memory_order_acq_rel) == 1) rt::futex_wake(&c.live, INT_MAX);
}

// The forking thread ends in the child (its start routine returned, or
// pthread_exit): once the threads made there have ended, the process exits
// with status 0, as glibc's last thread does.
void forking_thread_ends() {
  keys_run_kernel_thread_destructors();  // as a thread's end does (none left after pthread_exit's)
  ChildThreads& c = child_threads();
  for (int n; (n = c.live.load(std::memory_order_acquire)) != 0;) rt::futex_wait(&c.live, n);
}

struct ChildStart {
  void* (*start)(void*);
  void* arg;
  std::atomic<bool> listed{false};  // the creator's last touch
};

void* child_start(void* p) {
  auto* given = static_cast<ChildStart*>(p);
  // Its entry is listed before it runs (its own pthread_detach(pthread_self())
  // must find it). Waited for here, not by holding the list's lock across
  // glibc's create: the new threads spun on that lock while creators held
  // it (glibc's tst-create-detached, two creators making 100,000 threads on
  // 2 CPUs, timed out).
  while (!given->listed.load(std::memory_order_acquire)) rt::sys::sched_yield();
  ChildStart s{given->start, given->arg};
  delete given;
  is_child_thread = true;
  {
    ChildThreads& c = child_threads();
    rt::SpinGuard g(c.lock);
    if (ChildThread* e = find_child(c, glibc_self())) {
      e->ident = rt::identity();
      e->asked = &cancel_asked;
    }
    rt::parking_lot::kernel_cancel_due.store(&kernel_cancel_due, std::memory_order_release);
  }
  struct Ends {  // (a destructor: pthread_exit and cancellation unwind through here)
    ~Ends() { child_thread_ended(); }
  } ends;
  return s.start(s.arg);
}

// pthread_create in the child: glibc's, with the program's attribute turned
// into glibc's (detach state, and the stack size if one was set: otherwise
// glibc's default); the rest is kept in loom's attribute, as on fibres.
// glibc's attribute for what loom's says (a glibc attribute initialised
// by the caller): detach state, stack, guard, signal mask, affinity.
void to_glibc_attr(const Attr* r, pthread_attr_t* ga) {
  const Glibc& g = glibc();
  g.attr_setdetachstate(ga, detach_of(r));
  if (r->flags & kFlagStackAddr) {
    const std::size_t size = r->stacksize ? r->stacksize : glibc_default_stack();
    g.attr_setstack(ga, static_cast<char*>(r->stackaddr) - size, size);
  } else if (r->stacksize) {
    g.attr_setstacksize(ga, r->stacksize);
  }
  g.attr_setguardsize(ga, r->guardsize);
  if ((r->sigmask & kHasSigmask) && g.attr_setsigmask_np) {
    std::uint64_t m = r->sigmask & ~kHasSigmask;
    sigset_t set;
    sigemptyset(&set);
    std::memcpy(&set, &m, sizeof m);
    g.attr_setsigmask_np(ga, &set);
  }
  if (r->ext && r->ext->cpuset && g.attr_setaffinity_np) g.attr_setaffinity_np(ga, r->ext->cpusetsize, r->ext->cpuset);
}

int child_create(pthread_t* thread, const Attr* r, void* (*start)(void*), void* arg) {
  const Glibc& g = glibc();
  pthread_attr_t ga;
  g.attr_init(&ga);
  to_glibc_attr(r, &ga);
  auto* s = new (std::nothrow) ChildStart{start, arg};
  ChildThreads& c = child_threads();
  int e = s ? 0 : EAGAIN;
  if (!e) {
    // Listed before it runs (child_start waits for `listed`), so that its
    // own pthread_detach(pthread_self()) finds it.
    c.live.fetch_add(1, std::memory_order_relaxed);
    pthread_t t{};
    e = g.create(&t, &ga, &child_start, s);
    if (e) {
      c.live.fetch_sub(1, std::memory_order_relaxed);
      delete s;
    } else {
      {
        rt::SpinGuard guard(c.lock);
        ChildThread n{t, detach_of(r) == PTHREAD_CREATE_DETACHED, ++c.made};
        if (ChildThread* old = find_child(c, t))
          *old = n;  // a detached thread's that ended: glibc reuses its handle
        else
          c.handles.push_back(n);
      }
      *thread = t;
      s->listed.store(true, std::memory_order_release);  // (then s is the thread's)
    }
  }
  g.attr_destroy(&ga);
  return e;
}

// glibc ends the forking thread itself when its cancellation acts there
// (the child's threads are glibc's): the unwinding lands in glibc's
// outermost buffer, which runs glibc's key destructors and exits the kernel
// thread. A key of glibc's, set on that thread, tells loom's record, so
// that a thread joining it gets PTHREAD_CANCELED (glibc's tst-cancel21: the
// joiner waited for ever). After a pthread_exit there, loom's, the record
// already holds its value.
void forking_thread_gone(void*) {
  fork_self_ended.store(true, std::memory_order_release);
  record_exit_value(fork_self, PTHREAD_CANCELED);
}

void watch_forking_thread() {
  static pthread_key_t key;
  static bool made = false;  // (per process image: a child of a child inherits it)
  if (!made) {
    if (!glibc().key_create || glibc().key_create(&key, &forking_thread_gone) != 0) return;
    made = true;
  }
  glibc().setspecific(key, &key);
}

// Runs in the child, before the program's own child handlers (registered by
// this library's constructor, which runs before the program's; a library
// initialised earlier may have registered one before it).
void after_fork_in_child() {
  // Its pthread_self() from before the fork (in a child of a child, the
  // one it had in the first child, not a handle made anew).
  const pthread_t before = pthread_self();
  forked_child.store(true, std::memory_order_relaxed);
  if (rt::Processor* p = rt::tls_processor) rt::tls::forget_kernel_rseq(p->kernel_tcb());
  rt::tls::forget_glibc_lists();
  keys_after_fork_in_child();  // the registry's lock may have been held by a processor at the fork
  keys_move_to_kernel_thread(rt::this_fibre_or_null());
  fork_self = before;  // while it is still the fibre that forked
  fork_glibc = glibc_self();
  fork_self_ended.store(false, std::memory_order_relaxed);
  watch_forking_thread();
  rt::tls_processor = nullptr;
  // Waiters queued in the parking lot are the parent's, and a bucket lock
  // may have been held by one of its processors at the fork.
  rt::parking_lot::forget_after_fork();
  ChildThreads& c = child_threads();
  new (&c.lock) rt::SpinLock();
  c.handles.clear();  // a child of a child: its parent's threads are not here
  c.live.store(0, std::memory_order_relaxed);
  is_child_thread = false;
  is_forking_thread = true;
  fork_child_thread_end = &forking_thread_ends;
}

}  // namespace
}  // namespace loom::capi::pthread_lib

// A thread of glibc's: made in a fork child, or the caller itself when it
// is a kernel thread loom did not make (glibc's own helper threads, such as
// SIGEV_THREAD timers', which its pthread_create makes without the PLT), or
// another such thread whose pthread_self() handed out its handle.
bool loom::capi::pthread_signal::glibc_thread_of_fork_child(pthread_t t) noexcept {
  using namespace loom::capi::pthread_lib;
  return child_handle(t) || (foreign_caller() && t == glibc_self()) || known_foreign(t);
}

pthread_t loom::capi::pthread_signal::forking_thread_in_child(pthread_t t) noexcept {
  using namespace loom::capi::pthread_lib;
  return forked_child.load(std::memory_order_relaxed) && fork_self != 0 && t == fork_self &&
                 !fork_self_ended.load(std::memory_order_acquire)
             ? fork_glibc
             : 0;
}

void loom::capi::pthread_signal::wake_fork_child_thread(pthread_t t) noexcept {
  using namespace loom::capi::pthread_lib;
  const void* ident = nullptr;
  {
    ChildThreads& c = child_threads();
    rt::SpinGuard g(c.lock);  // (its thread-locals live while it is listed with them)
    if (ChildThread* e = find_child(c, t); e && e->asked) {
      e->asked->store(true, std::memory_order_seq_cst);  // before the look: a wait queued after it sees this
      ident = e->ident;
    }
  }
  if (ident) rt::parking_lot::cancel_kernel(ident);
}

namespace loom::capi::pthread_lib {
namespace {

__attribute__((constructor(110))) void register_fork_handler() {
  initial_thread = glibc_self();  // (before thread-locals are per fibre, just below)
  child_threads();
  __register_atfork(nullptr, nullptr, &after_fork_in_child, &__dso_handle);
}

// Every thread the program creates gets its own thread-locals (sched/tls.hpp):
// on from here, on main(), before the program's constructors run.
__attribute__((constructor(111))) void enable_thread_locals() { rt::tls::enable(); }

// ---- signals ----------------------------------------------------------------------------

// Runs a call that reports failure in errno and returns the error number
// instead, errno left as it was: glibc's pthread_* functions return errors
// and do not touch errno.
template <class F>
int errno_as_result(F&& call) {
  ErrnoKeeper k;
  int e = call() == 0 ? 0 : errno;
  k.done();
  return e;
}

bool exists(pthread_t t) {
  loom_attr_t a;
  int e = loom_getattr_np(t, &a);
  if (e == 0) loom_attr_destroy(&a);
  return e == 0;
}


// What pthread_create refuses in an attribute, as glibc's does: a priority
// outside its policy's range (EINVAL: the policy changed after the
// priority was set), a realtime policy asked for explicitly (EPERM, as for
// pthread_setschedparam), an affinity set with no CPU the process may use
// (EINVAL, the kernel's answer to glibc).
int check_create_attr(const Attr* r) {
  if (r->flags & kFlagExplicitSched) {
    if (r->priority < sched_get_priority_min(r->policy) || r->priority > sched_get_priority_max(r->policy))
      return EINVAL;
    if (r->policy != SCHED_OTHER) return EPERM;
  }
  if (r->ext && r->ext->cpuset) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 0;
    const auto* want = reinterpret_cast<const unsigned char*>(r->ext->cpuset);
    const auto* have = reinterpret_cast<const unsigned char*>(&allowed);
    const std::size_t n = r->ext->cpusetsize < sizeof allowed ? r->ext->cpusetsize : sizeof allowed;
    bool any = false;
    for (std::size_t i = 0; i < n && !any; ++i) any = (want[i] & have[i]) != 0;
    if (!any) return EINVAL;
  }
  return 0;
}

}  // namespace
}  // namespace loom::capi::pthread_lib

using namespace loom;
using namespace loom::capi;
using namespace loom::capi::pthread_lib;

extern "C" {

// ---- attributes --------------------------------------------------------------------------

int pthread_attr_init(pthread_attr_t* a) {
  if (!a) return EINVAL;
  init_attr(reinterpret_cast<Attr*>(a));
  return 0;
}

int pthread_attr_destroy(pthread_attr_t* a) {
  Attr* r = attr_of(a);
  if (!r) return EINVAL;
  if (r->ext) {
    std::free(r->ext->cpuset);
    std::free(r->ext);
  }
  r->magic = 0;
  return 0;
}

int pthread_attr_setdetachstate(pthread_attr_t* a, int state) {
  Attr* r = attr_of(a);
  if (!r || (state != PTHREAD_CREATE_JOINABLE && state != PTHREAD_CREATE_DETACHED)) return EINVAL;
  set_flag(r, kFlagDetached, state == PTHREAD_CREATE_DETACHED);
  return 0;
}

int pthread_attr_getdetachstate(const pthread_attr_t* a, int* state) {
  const Attr* r = attr_of(a);
  if (!r || !state) return EINVAL;
  *state = detach_of(r);
  return 0;
}

int pthread_attr_setstacksize(pthread_attr_t* a, size_t size) {
  Attr* r = attr_of(a);
  if (!r || size < std::size_t(PTHREAD_STACK_MIN) || size > (std::size_t(1) << 30)) return EINVAL;
  r->stacksize = size;
  return 0;
}

int pthread_attr_getstacksize(const pthread_attr_t* a, size_t* size) {
  const Attr* r = attr_of(a);
  if (!r || !size) return EINVAL;
  *size = r->stacksize ? r->stacksize : thread_default_stack();
  return 0;
}

int pthread_attr_setguardsize(pthread_attr_t* a, size_t size) {
  Attr* r = attr_of(a);
  if (!r) return EINVAL;
  r->guardsize = size;
  return 0;
}

int pthread_attr_getguardsize(const pthread_attr_t* a, size_t* size) {
  const Attr* r = attr_of(a);
  if (!r || !size) return EINVAL;
  *size = r->guardsize;
  return 0;
}

// A caller's stack: the thread's fibre runs on it (loom_attr_setstack);
// glibc's checks (a size below PTHREAD_STACK_MIN: EINVAL).
int pthread_attr_setstack(pthread_attr_t* a, void* addr, size_t size) {
  Attr* r = attr_of(a);
  if (!r || size < std::size_t(PTHREAD_STACK_MIN) || size > (std::size_t(1) << 30)) return EINVAL;
  r->stacksize = size;
  r->stackaddr = static_cast<char*>(addr) + size;
  r->flags |= kFlagStackAddr;
  return 0;
}

int pthread_attr_getstack(const pthread_attr_t* a, void** addr, size_t* size) {
  const Attr* r = attr_of(a);
  if (!r || !addr || !size) return EINVAL;
  *size = r->stacksize ? r->stacksize : thread_default_stack();
  *addr = r->flags & kFlagStackAddr ? static_cast<char*>(r->stackaddr) - *size : nullptr;
  return 0;
}

// The deprecated pair speaks of the top of the stack (the stack grows down).
int pthread_attr_setstackaddr(pthread_attr_t* a, void* addr) {
  Attr* r = attr_of(a);
  if (!r) return EINVAL;
  r->stackaddr = addr;
  r->flags |= kFlagStackAddr;
  return 0;
}

int pthread_attr_getstackaddr(const pthread_attr_t* a, void** addr) {
  const Attr* r = attr_of(a);
  if (!r || !addr) return EINVAL;
  *addr = r->stackaddr;
  return 0;
}

int pthread_attr_setscope(pthread_attr_t* a, int scope) {
  Attr* r = attr_of(a);
  if (!r) return EINVAL;
  if (scope == PTHREAD_SCOPE_PROCESS) return ENOTSUP;  // as glibc
  if (scope != PTHREAD_SCOPE_SYSTEM) return EINVAL;
  return 0;
}

int pthread_attr_getscope(const pthread_attr_t* a, int* scope) {
  const Attr* r = attr_of(a);
  if (!r || !scope) return EINVAL;
  *scope = PTHREAD_SCOPE_SYSTEM;
  return 0;
}

int pthread_attr_setinheritsched(pthread_attr_t* a, int inherit) {
  Attr* r = attr_of(a);
  if (!r || (inherit != PTHREAD_INHERIT_SCHED && inherit != PTHREAD_EXPLICIT_SCHED)) return EINVAL;
  set_flag(r, kFlagExplicitSched, inherit == PTHREAD_EXPLICIT_SCHED);
  return 0;
}

int pthread_attr_getinheritsched(const pthread_attr_t* a, int* inherit) {
  const Attr* r = attr_of(a);
  if (!r || !inherit) return EINVAL;
  *inherit = r->flags & kFlagExplicitSched ? PTHREAD_EXPLICIT_SCHED : PTHREAD_INHERIT_SCHED;
  return 0;
}

int pthread_attr_setschedpolicy(pthread_attr_t* a, int policy) {
  Attr* r = attr_of(a);
  if (!r || (policy != SCHED_OTHER && policy != SCHED_FIFO && policy != SCHED_RR)) return EINVAL;
  r->policy = policy;
  return 0;
}

int pthread_attr_getschedpolicy(const pthread_attr_t* a, int* policy) {
  const Attr* r = attr_of(a);
  if (!r || !policy) return EINVAL;
  *policy = r->policy;
  return 0;
}

// As glibc: checked against the policy the attribute has now; a later
// policy change is checked by pthread_create.
int pthread_attr_setschedparam(pthread_attr_t* a, const struct sched_param* p) {
  Attr* r = attr_of(a);
  if (!r || !p) return EINVAL;
  int lo = sched_get_priority_min(r->policy), hi = sched_get_priority_max(r->policy);
  if (p->sched_priority < lo || p->sched_priority > hi) return EINVAL;
  r->priority = p->sched_priority;
  return 0;
}

int pthread_attr_getschedparam(const pthread_attr_t* a, struct sched_param* p) {
  const Attr* r = attr_of(a);
  if (!r || !p) return EINVAL;
  std::memset(p, 0, sizeof *p);
  p->sched_priority = r->priority;
  return 0;
}

// Affinity: kept (a copy, as glibc keeps it) and reported back; a thread
// made with it runs on its cluster's processors wherever they are, but a
// set with no CPU the process may use is refused by pthread_create with
// EINVAL, as the kernel makes glibc's refuse it.
int pthread_attr_setaffinity_np(pthread_attr_t* a, size_t n, const cpu_set_t* set) {
  Attr* r = attr_of(a);
  if (!r) return EINVAL;
  if (!set || n == 0) {
    if (r->ext) {
      std::free(r->ext->cpuset);
      r->ext->cpuset = nullptr;
      r->ext->cpusetsize = 0;
    }
    return 0;
  }
  if (!r->ext && !(r->ext = static_cast<AttrExt*>(std::calloc(1, sizeof(AttrExt))))) return ENOMEM;
  auto* copy = static_cast<cpu_set_t*>(std::malloc(n));
  if (!copy) return ENOMEM;
  std::memcpy(copy, set, n);
  std::free(r->ext->cpuset);
  r->ext->cpuset = copy;
  r->ext->cpusetsize = n;
  return 0;
}

int pthread_attr_getaffinity_np(const pthread_attr_t* a, size_t n, cpu_set_t* set) {
  const Attr* r = attr_of(a);
  if (!r || !set) return EINVAL;
  if (!r->ext || !r->ext->cpuset) {
    std::memset(set, 0xff, n);  // every CPU, as glibc says of an attribute without a set
    return 0;
  }
  const std::size_t have = r->ext->cpusetsize;
  const auto* from = reinterpret_cast<const unsigned char*>(r->ext->cpuset);
  for (std::size_t i = n; i < have; ++i)
    if (from[i]) return EINVAL;  // a CPU beyond the caller's buffer is set
  std::memcpy(set, from, n < have ? n : have);
  if (n > have) std::memset(reinterpret_cast<unsigned char*>(set) + have, 0, n - have);
  return 0;
}

// The new thread's mask (glibc's: SIGCANCEL and SIGSETXID left out when it
// starts, kept in the attribute as given); null clears it.
int pthread_attr_setsigmask_np(pthread_attr_t* a, const sigset_t* set) {
  Attr* r = attr_of(a);
  if (!r) return EINVAL;
  if (!set) {
    r->sigmask = 0;
    return 0;
  }
  std::uint64_t m;
  std::memcpy(&m, set, sizeof m);
  r->sigmask = (m & ~(kHasSigmask | (kHasSigmask << 1))) | kHasSigmask;
  return 0;
}

int pthread_attr_getsigmask_np(const pthread_attr_t* a, sigset_t* set) {
  const Attr* r = attr_of(a);
  if (!r || !set) return EINVAL;
  sigemptyset(set);
  if (!(r->sigmask & kHasSigmask)) return PTHREAD_ATTR_NO_SIGMASK_NP;
  std::uint64_t m = r->sigmask & ~kHasSigmask;
  std::memcpy(set, &m, sizeof m);
  return 0;
}

// The default's affinity set into an attribute made from it (a copy of its
// own, freed by pthread_attr_destroy).
static int default_affinity_into(pthread_attr_t* a) {
  if (!has_default_cpuset.load(std::memory_order_acquire)) return 0;
  rt::SpinGuard g(default_lock);
  return default_cpuset ? pthread_attr_setaffinity_np(a, default_cpusetsize, default_cpuset) : 0;
}

int pthread_getattr_default_np(pthread_attr_t* a) {
  if (int e = pthread_attr_init(a)) return e;
  attr_of(a)->sigmask = default_sigmask.load(std::memory_order_relaxed);
  if (default_detached.load(std::memory_order_relaxed)) reinterpret_cast<Attr*>(a)->flags |= kFlagDetached;
  if (int e = default_affinity_into(a)) {
    pthread_attr_destroy(a);
    return e;
  }
  return 0;
}

// Kept for loom's threads, and given to glibc's default too: the threads
// glibc makes itself (C11 threads, SIGEV_THREAD timers, mq_notify; a fork
// child's threads are made with an attribute of their own) start with it.
int pthread_setattr_default_np(const pthread_attr_t* a) {
  const Attr* r = attr_of(a);
  if (!r) return EINVAL;
  if (r->flags & kFlagStackAddr) return EINVAL;  // glibc: no stack address in the default
  cpu_set_t* copy = nullptr;
  const std::size_t n = r->ext && r->ext->cpuset ? r->ext->cpusetsize : 0;
  if (n && !(copy = static_cast<cpu_set_t*>(std::malloc(n)))) return ENOMEM;
  if (n) std::memcpy(copy, r->ext->cpuset, n);
  const Glibc& gl = glibc();
  if (gl.setattr_default_np) {
    pthread_attr_t ga;
    gl.attr_init(&ga);
    to_glibc_attr(r, &ga);
    gl.attr_setdetachstate(&ga, PTHREAD_CREATE_JOINABLE);  // (glibc's own threads detach themselves)
    int e = gl.setattr_default_np(&ga);
    gl.attr_destroy(&ga);
    if (e) {
      std::free(copy);
      return e;
    }
  }
  default_stacksize.store(r->stacksize, std::memory_order_relaxed);
  default_guardsize.store(r->guardsize, std::memory_order_relaxed);
  default_sigmask.store(r->sigmask, std::memory_order_relaxed);
  default_detached.store(r->flags & kFlagDetached, std::memory_order_relaxed);
  {
    rt::SpinGuard g(default_lock);
    std::swap(copy, default_cpuset);
    default_cpusetsize = n;
    has_default_cpuset.store(default_cpuset != nullptr, std::memory_order_release);
  }
  std::free(copy);  // the old one
  return 0;
}

// ---- create, join, detach, exit -------------------------------------------------------------

int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*), void* arg) {
  Attr defaults;
  struct DefaultsExt {  // the default's affinity set, when it has one: a copy for this call
    Attr* a = nullptr;
    ~DefaultsExt() {
      if (a) pthread_attr_destroy(reinterpret_cast<pthread_attr_t*>(a));
    }
  } defaults_ext;
  const Attr* r = attr ? attr_of(attr) : nullptr;
  if (attr && !r) return EINVAL;
  if (!r) {
    init_attr(&defaults);
    defaults.sigmask = default_sigmask.load(std::memory_order_relaxed);  // only without an attribute (glibc)
    if (default_detached.load(std::memory_order_relaxed)) defaults.flags |= kFlagDetached;
    if (has_default_cpuset.load(std::memory_order_relaxed)) {
      defaults_ext.a = &defaults;
      if (int e = default_affinity_into(reinterpret_cast<pthread_attr_t*>(&defaults))) return e;
    }
    r = &defaults;
  }
  if (int e = check_create_attr(r)) return e;
  if (forked_child.load(std::memory_order_relaxed)) return child_create(thread, r, start, arg);
  loom_attr_t la;
  loom_attr_init(&la);
  loom_attr_setdetachstate(&la, r->flags & kFlagDetached ? LOOM_CREATE_DETACHED : LOOM_CREATE_JOINABLE);
  const std::size_t size = r->stacksize ? r->stacksize : thread_default_stack();
  int e = r->flags & kFlagStackAddr ? loom_attr_setstack(&la, static_cast<char*>(r->stackaddr) - size, size)
                                    : loom_attr_setstacksize(&la, size);
  loom_attr_setguardsize(&la, r->guardsize);
  std::uint64_t mask = r->sigmask & ~kHasSigmask;
  if (!e && (r->sigmask & kHasSigmask)) next_thread_mask(&mask);  // taken by loom_create
  if (!e) e = loom_create(thread, &la, start, arg);
  if (r->sigmask & kHasSigmask) next_thread_mask(nullptr);
  loom_attr_destroy(&la);
  return e;
}

// A thread made in a fork child is glibc's (see "fork" above); every other
// handle is loom's.


int pthread_join(pthread_t t, void** retval) {
  return join_either(t, [&] { return glibc().join(t, retval); }, [&] { return loom_join(t, retval); });
}
int pthread_tryjoin_np(pthread_t t, void** retval) {
  return join_either(t, [&] { return glibc().tryjoin_np(t, retval); }, [&] { return loom_tryjoin_np(t, retval); });
}
int pthread_timedjoin_np(pthread_t t, void** retval, const struct timespec* abstime) {
  return join_either(
      t, [&] { return glibc().timedjoin_np(t, retval, abstime); },
      [&] { return loom_timedjoin_np(t, retval, abstime); });
}
int pthread_clockjoin_np(pthread_t t, void** retval, clockid_t clock, const struct timespec* abstime) {
  return join_either(
      t, [&] { return glibc().clockjoin_np(t, retval, clock, abstime); },
      [&] { return loom_clockjoin_np(t, retval, clock, abstime); });
}
int pthread_detach(pthread_t t) { return child_handle(t) ? detach_child(t) : loom_detach(t); }
// A fibre's handle is loom's; the forking thread of a fork child keeps its
// own; any other kernel thread (a thread made in the child, glibc's own
// helper threads) is glibc's and answers with glibc's handle.
pthread_t pthread_self(void) {
  if (on_fibre()) return loom_self();
  if (!foreign_caller()) return fork_self;
  pthread_t g = glibc_self();
  note_foreign(g);
  return g;
}
int pthread_equal(pthread_t a, pthread_t b) { return a == b; }

void pthread_exit(void* retval) {
  if (forked_child.load(std::memory_order_relaxed)) {
    // A thread made in the child: glibc's, its cleanup handlers are glibc's.
    if (!is_forking_thread) glibc().exit(retval);  // (one made in the child unwinds through child_start: child_thread_ended)
    // The forking thread (cleanup handlers pushed before the fork are not
    // run there): a thread joining it gets retval; the process ends with the
    // last of the child's threads.
    keys_run_kernel_thread_destructors();  // as a thread's exit does (glibc's tst-tsd5: one unlocks a mutex)
    fork_self_ended.store(true, std::memory_order_release);
    record_exit_value(fork_self, retval);
    forking_thread_ends();
    std::exit(0);
  }
  // A fibre: loom_exit unwinds its stack, running glibc's cleanup buffers
  // (cancel.cpp), loom's cleanup frames and C++ destructors in stack order;
  // a fibre loom_create did not make: loom_exit says so.
  if (on_fibre()) loom_exit(retval);
  glibc().exit(retval);               // a kernel thread of the system's
}

// ---- names, concurrency -------------------------------------------------------

static int getattr_np(pthread_t t, pthread_attr_t* a);

int pthread_getattr_np(pthread_t t, pthread_attr_t* a) {
  if (!a) return EINVAL;
  int e = getattr_np(t, a);
  if (e == 0) {
    // The CPUs it may run on, as glibc's reports them: its cluster's
    // processors move about the process's.
    cpu_set_t cpus;
    if (sched_getaffinity(0, sizeof cpus, &cpus) == 0) pthread_attr_setaffinity_np(a, sizeof cpus, &cpus);
  }
  return e;
}

static int getattr_np(pthread_t t, pthread_attr_t* a) {
  const bool main_thread = is_main_thread(t) && initial_thread;
  if (main_thread || pthread_signal::glibc_thread_of_fork_child(t)) {
    // glibc's answer, in loom's attribute object: for main, glibc's of the
    // initial thread, whose stack main's fibre runs on (its top from
    // __libc_stack_end, its size from RLIMIT_STACK as it is now).
    pthread_attr_t ga;
    if (int e = glibc().getattr_np(main_thread ? initial_thread : t, &ga)) return e;
    Attr* r = reinterpret_cast<Attr*>(a);
    init_attr(r);
    void* addr = nullptr;
    size_t size = 0;
    if (glibc().attr_getstack(&ga, &addr, &size) == 0) {
      r->stackaddr = static_cast<char*>(addr) + size;
      r->stacksize = size;
      r->flags |= kFlagStackAddr;
    }
    glibc().attr_getguardsize(&ga, &r->guardsize);
    int detach = PTHREAD_CREATE_JOINABLE;
    glibc().attr_getdetachstate(&ga, &detach);
    set_flag(r, kFlagDetached, detach == PTHREAD_CREATE_DETACHED);
    glibc().attr_destroy(&ga);
    return 0;
  }
  loom_attr_t la;
  int e = loom_getattr_np(t, &la);
  if (e) return e;
  Attr* r = reinterpret_cast<Attr*>(a);
  init_attr(r);
  int detach = LOOM_CREATE_JOINABLE;
  loom_attr_getdetachstate(&la, &detach);
  set_flag(r, kFlagDetached, detach == LOOM_CREATE_DETACHED);
  loom_attr_getguardsize(&la, &r->guardsize);
  void* addr = nullptr;
  std::size_t size = 0;
  if (loom_attr_getstack(&la, &addr, &size) == 0) {
    r->stackaddr = static_cast<char*>(addr) + size;
    r->stacksize = size;
    r->flags |= kFlagStackAddr;
  } else {
    loom_attr_getstacksize(&la, &r->stacksize);
  }
  loom_attr_destroy(&la);
  return 0;
}

int pthread_setname_np(pthread_t t, const char* name) {
  if (pthread_signal::glibc_thread_of_fork_child(t)) return glibc().setname_np(t, name);
  int e = loom_setname_np(t, name);
  // A thread naming itself names its kernel thread too, as glibc's does
  // (/proc/self/task/TID/comm): a fibre's is its processor's, until the
  // next fibre there names itself — except processor 0's, the initial
  // thread, whose name is the process's (ps, pgrep, killall): only main
  // names that one, wherever it runs (its comm file), and its processor's.
  if (e == 0 && t == pthread_self()) {
    if (is_main_thread(t)) {
      int saved = errno;  // (raw calls: not this library's open and write)
      long fd = ::syscall(SYS_openat, AT_FDCWD, "/proc/self/comm", O_WRONLY | O_CLOEXEC);
      if (fd >= 0) {
        ::syscall(SYS_write, fd, name, std::strlen(name));
        ::syscall(SYS_close, fd);
      }
      errno = saved;
    }
    if (::syscall(SYS_gettid) != ::getpid()) prctl(PR_SET_NAME, name);
  }
  return e;
}
int pthread_getname_np(pthread_t t, char* name, size_t len) {
  if (pthread_signal::glibc_thread_of_fork_child(t)) return glibc().getname_np(t, name, len);
  if (name && unnamed_main(t)) {
    // glibc's initial thread is named after the process (its comm); loom's
    // listing keeps calling it "main".
    char comm[16] = {};
    if (int e = errno_as_result([&] { return prctl(PR_GET_NAME, comm); })) return e;
    if (len <= std::strlen(comm)) return ERANGE;
    std::memcpy(name, comm, std::strlen(comm) + 1);
    return 0;
  }
  return loom_getname_np(t, name, len);
}
int pthread_getconcurrency(void) { return loom_getconcurrency(); }
int pthread_setconcurrency(int level) { return loom_setconcurrency(level); }

// ---- scheduling, affinity, clocks ----------------------------------------------------------

int pthread_setschedparam(pthread_t t, int policy, const struct sched_param* p) {
  if (!p) return EINVAL;
  if (!exists(t)) return ESRCH;
  if (policy == SCHED_FIFO || policy == SCHED_RR) return EPERM;
  if (policy != SCHED_OTHER && policy != SCHED_BATCH && policy != SCHED_IDLE) return EINVAL;
  return p->sched_priority == 0 ? 0 : EINVAL;
}

int pthread_getschedparam(pthread_t t, int* policy, struct sched_param* p) {
  if (!policy || !p) return EINVAL;
  if (!exists(t)) return ESRCH;
  *policy = SCHED_OTHER;
  std::memset(p, 0, sizeof *p);
  return 0;
}

int pthread_setschedprio(pthread_t t, int prio) {
  if (!exists(t)) return ESRCH;
  return prio == 0 ? 0 : EINVAL;
}

int pthread_setaffinity_np(pthread_t t, size_t n, const cpu_set_t* set) {
  if (pthread_signal::glibc_thread_of_fork_child(t)) return glibc().setaffinity_np(t, n, set);
  if (!exists(t)) return ESRCH;
  if (!set) return EFAULT;
  Attr probe;  // the same check as pthread_create's
  init_attr(&probe);
  AttrExt ext{const_cast<cpu_set_t*>(set), n, {}, false};
  probe.ext = &ext;
  return check_create_attr(&probe);  // accepted, not applied: the fibre keeps its cluster's processors
}

int pthread_getaffinity_np(pthread_t t, size_t n, cpu_set_t* set) {
  if (!exists(t)) return ESRCH;
  return errno_as_result([&] { return sched_getaffinity(0, n, set); });
}

// A thread of loom's: a clock of its fibre's own CPU time (clock.cpp); a
// thread of glibc's (a fork child's, glibc's helpers): glibc's.
int pthread_getcpuclockid(pthread_t t, clockid_t* clock) {
  if (!clock) return EINVAL;
  if (pthread_signal::glibc_thread_of_fork_child(t)) return glibc().getcpuclockid(t, clock);
  if (joins_itself(t)) return glibc().getcpuclockid(glibc_self(), clock);  // the forking thread, now a kernel thread
  return thread_cpu_clock(t, clock);
}

// ---- signals -------------------------------------------------------------------------------
// pthread_kill, pthread_sigqueue and pthread_sigmask: sigthread.cpp.

// Seen by the runtime (io/offload.cpp, a weak reference): on the link and
// preload routes loom changes no signal disposition the program did not
// change itself — SIGPIPE keeps its default (the native API ignores it).
__attribute__((visibility("default"))) extern const int loom_pthread_routes = 1;

void pthread_kill_other_threads_np(void) {}  // a no-op in glibc too

// ---- fork ------------------------------------------------------------------------------------
// (sched_yield and pthread_yield, a delivery point of signals: io.cpp.)

// In glibc >= 2.34 the program's own pthread_atfork (from libc_nonshared.a)
// calls __register_atfork itself; this definition serves the link route and
// older binaries. glibc's fork runs prepare handlers in reverse order of
// registration, parent and child handlers in order.
int pthread_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  return __register_atfork(prepare, parent, child, &__dso_handle);
}

// ---- keys ------------------------------------------------------------------------------------

// glibc gives setspecific's value an access attribute: GCC then warns that a
// pointer it cannot see into "may be used uninitialized"; it is only stored.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

int pthread_key_create(pthread_key_t* key, void (*destructor)(void*)) { return loom_key_create(key, destructor); }
int pthread_key_delete(pthread_key_t key) { return loom_key_delete(key); }
void* pthread_getspecific(pthread_key_t key) { return loom_getspecific(key); }
int pthread_setspecific(pthread_key_t key, const void* value) { return loom_setspecific(key, value); }
// glibc exports these aliases too (some libraries call them).
int __pthread_key_create(pthread_key_t* key, void (*destructor)(void*)) { return loom_key_create(key, destructor); }
void* __pthread_getspecific(pthread_key_t key) { return loom_getspecific(key); }
int __pthread_setspecific(pthread_key_t key, const void* value) { return loom_setspecific(key, value); }

// C11's thread-specific storage is glibc's pthread keys under other names;
// glibc calls its own inside, which would reach glibc's keys (where loom's
// own key for kernel threads is key 0), so they are loom's here too.
int tss_create(tss_t* key, tss_dtor_t destructor) {
  pthread_key_t k = 0;
  if (loom_key_create(&k, destructor) != 0) return thrd_error;
  *key = k;
  return thrd_success;
}
void* tss_get(tss_t key) { return loom_getspecific(key); }
int tss_set(tss_t key, void* value) { return loom_setspecific(key, value) == 0 ? thrd_success : thrd_error; }
void tss_delete(tss_t key) { loom_key_delete(key); }

}  // extern "C"
