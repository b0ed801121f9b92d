#include "sched/tls.hpp"

#include <asm/prctl.h>
#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <bits/types/res_state.h>  // struct __res_state (resolv.h would rename p_type)
#include <sys/auxv.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "base/futex.hpp"
#include "base/options.hpp"
#include "base/spinlock.hpp"
#include "sched/fibre.hpp"
#include "sched/processor.hpp"

namespace loom::rt::tls {

bool switching = false;

namespace {

// The glibc this contract was read from and tested against. Another one may
// lay out its thread control block differently: per-fibre TLS stays off.
constexpr const char* kVerifiedGlibc = "2.36";

// tcbhead_t, the start of glibc's struct pthread on x86-64 (sysdeps/x86_64/
// nptl/tls.h): the fields a new thread copies from its creator are the ones
// between `multiple_threads` and `feature_1`.
constexpr std::size_t kTcbSelf0 = 0;          // void* tcb: the block itself
constexpr std::size_t kTcbSelf16 = 16;        // void* self: the block itself
constexpr std::size_t kCopyFrom = 24;         // multiple_threads ...
constexpr std::size_t kGscopeFlag = 28;       // int: must start unused (0)
constexpr std::size_t kCopyTo = 80;           // ... feature_1 and its padding
constexpr std::size_t kStackGuard = 40;       // checked: the creator's value
constexpr std::size_t kPointerGuard = 48;

struct Contract {
  void* (*allocate_tls)(void*) = nullptr;
  void (*deallocate_tls)(void*, bool) = nullptr;
  void (*static_info)(std::size_t*, std::size_t*) = nullptr;
  void (*call_tls_dtors)() = nullptr;
  void (*ctype_init)() = nullptr;
  std::size_t tcb_size = 0;      // sizeof(struct pthread)
  std::size_t tid_off = 0;       // struct pthread's tid
  std::size_t list_off = 0;      // struct pthread's list (glibc's list of threads)
  std::ptrdiff_t cancel_off = -1;  // struct pthread's cancelhandling; -1: unknown
  std::ptrdiff_t stackblock_off = -1;  // struct pthread's stackblock, stackblock_size; -1: unknown
  std::ptrdiff_t rseq_off = 0;   // the rseq area, from the thread pointer
  unsigned rseq_size = 0;        // 0: glibc registered none
  std::ptrdiff_t resp_off = 0;   // __resp, the thread's resolver state pointer
  std::ptrdiff_t proc_off = 0;   // tls_processor
  std::ptrdiff_t tcache_off = 0;  // malloc's per-thread cache pointer (static TLS: below the
  bool tcache_known = false;     // thread pointer, so negative), when known
  std::size_t static_size = 0;   // static TLS blocks + struct pthread
  std::size_t static_align = 0;
  bool wrfsbase = false;
  void* main_tcb = nullptr;      // main()'s block: the initial kernel thread's, which glibc lists
  // glibc's list of threads on stacks it did not allocate (GL(dl_stack_user)),
  // and the lock of its stack lists (GL(dl_stack_cache_lock)): every block
  // loom makes is linked there (see "On glibc's list", below); null: not.
  void** user_list = nullptr;
  int* list_lock = nullptr;
};
Contract g;

std::atomic<std::size_t> made{0};
std::atomic<int> fake_tids{0};

// Thread ids a kernel never hands out (pid_max is at most 2^22): a fibre's
// struct pthread needs one of its own, because glibc's recursive locks (the
// dynamic linker's among them) take the owner's tid as its identity.
constexpr int kFakeTidBase = 1 << 30;

// malloc caches handed back by finished threads, for the next one.
SpinLock pool_lock;
std::vector<void*>* pool = nullptr;

template <class T>
T at(void* base, std::ptrdiff_t off) {
  return *reinterpret_cast<T*>(static_cast<char*>(base) + off);
}
template <class T>
void put(void* base, std::ptrdiff_t off, T v) {
  *reinterpret_cast<T*>(static_cast<char*>(base) + off) = v;
}

inline char* align_down(char* p, std::size_t a) {
  return reinterpret_cast<char*>(reinterpret_cast<std::uintptr_t>(p) & ~(std::uintptr_t(a) - 1));
}

void say(const char* why) {
  std::fprintf(stderr, "loom: per-fibre thread-local storage is off (%s): thread-locals stay per kernel thread\n", why);
}

template <class F>
bool find(F& slot, const char* name, const char* version) {
  slot = reinterpret_cast<F>(dlvsym(RTLD_DEFAULT, name, version));
  return slot != nullptr;
}

// The resolver state a new thread's __resp points at (glibc's is inside
// struct pthread; this one sits just below the static TLS blocks).
struct __res_state* res_of(void* tp) {
  char* lo = static_cast<char*>(tp) - (g.static_size - g.tcb_size);
  return reinterpret_cast<struct __res_state*>(align_down(lo - sizeof(struct __res_state), 64));
}

// ---- On glibc's list -------------------------------------------------------------------
//
// glibc walks its lists of threads when it must reach every thread's block:
// a module loaded by dlopen whose TLS is static (initial-exec) has its
// initial image copied into each listed block (_dl_init_static_tls), the
// setuid family signals each listed thread, dlclose waits for each one
// inside a symbol lookup (THREAD_GSCOPE_WAIT). A fibre's block is linked
// on GL(dl_stack_user), the list of threads whose stacks glibc did not
// allocate, as it is made, and unlinked as it is freed, under glibc's own
// lock of those lists (a futex lock as glibc's lll_lock: 0 free, 1 held,
// 2 held with waiters; the kernel's futex, never loom's parking lot, which
// glibc's unlock does not wake: an outside review's programs hung a thread
// for good as it was made or ended while glibc held the lock). Where the list lies comes from libthread_db's
// descriptors (_thread_db_rtld_global__dl_stack_user: its offset in
// _rtld_global), checked at enable by finding main()'s block on it; the
// lock follows the list in struct rtld_global, after the cache list, its
// size and the in-flight word (ldsodefs.h of glibc 2.36). For the setuid
// family a fibre's block names a tid no kernel thread has (kFakeTidBase),
// so glibc's signal to it fails and it is passed by, as an exited thread.
// Not GL(dl_stack_used), which would also make a fibre's stack executable
// for a module that asks for it: in a fork child glibc moves that list's
// blocks into its stack cache, to reuse or unmap (left: tst-execstack).
// A fork child resets the list (its own thread alone on the other), so
// there nothing is unlinked again (forget_glibc_lists).
void list_lock() noexcept {
  int c = 0;
  if (__atomic_compare_exchange_n(g.list_lock, &c, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return;
  if (c != 2) c = __atomic_exchange_n(g.list_lock, 2, __ATOMIC_ACQUIRE);
  while (c != 0) {
    raw_syscall(SYS_futex, reinterpret_cast<long>(g.list_lock), FUTEX_WAIT_PRIVATE, 2, 0, 0, 0);
    c = __atomic_exchange_n(g.list_lock, 2, __ATOMIC_ACQUIRE);
  }
}
void list_unlock() noexcept {
  if (__atomic_exchange_n(g.list_lock, 0, __ATOMIC_RELEASE) > 1)
    raw_syscall(SYS_futex, reinterpret_cast<long>(g.list_lock), FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
}

void link_block(void* tp) noexcept {
  if (!g.user_list) return;
  void** node = reinterpret_cast<void**>(static_cast<char*>(tp) + g.list_off);
  void** head = g.user_list;
  list_lock();
  void** first = static_cast<void**>(head[0]);
  node[0] = first;
  node[1] = head;
  first[1] = node;
  __atomic_store_n(&head[0], static_cast<void*>(node), __ATOMIC_RELEASE);
  list_unlock();
}
void unlink_block(void* tp) noexcept {
  void** node = reinterpret_cast<void**>(static_cast<char*>(tp) + g.list_off);
  if (!g.user_list || node[0] == node) return;
  list_lock();
  void** next = static_cast<void**>(node[0]);
  void** prev = static_cast<void**>(node[1]);
  next[1] = prev;
  prev[0] = next;
  node[0] = node;
  node[1] = node;
  list_unlock();
}

// Where glibc's list and lock lie, checked: main()'s block must be on the
// list, every node's neighbours must point back, and the lock and the
// in-flight word must read as an idle lock and no operation.
void find_glibc_lists(void* main_tp) {
  void* rtld = nullptr;
  const std::uint32_t* used = nullptr;
  const std::uint32_t* user = nullptr;
  if (!env_bool("LOOM_TLS_LIST", true) || !find(rtld, "_rtld_global", "GLIBC_PRIVATE") ||
      !find(used, "_thread_db_rtld_global__dl_stack_used", "GLIBC_PRIVATE") ||
      !find(user, "_thread_db_rtld_global__dl_stack_user", "GLIBC_PRIVATE") || used[0] != 128 || user[0] != 128 ||
      user[2] != used[2] + 16)
    return;
  auto** head = reinterpret_cast<void**>(static_cast<char*>(rtld) + user[2]);
  char* after = reinterpret_cast<char*>(head) + 16;  // the cache list, its size, the in-flight word, the lock
  auto* lock = reinterpret_cast<int*>(after + 16 + sizeof(std::size_t) + sizeof(std::uintptr_t));
  const std::uintptr_t in_flight = *reinterpret_cast<std::uintptr_t*>(after + 16 + sizeof(std::size_t));
  if (in_flight != 0 || *lock < 0 || *lock > 2) return;
  void* main_node = static_cast<char*>(main_tp) + g.list_off;
  bool found = false;
  void** n = static_cast<void**>(head[0]);
  for (int k = 0; n != head && k < 4096; ++k, n = static_cast<void**>(n[0])) {
    if (static_cast<void**>(static_cast<void**>(n[0])[1]) != n) return;
    found |= n == main_node;
  }
  if (!found || n != head) return;
  g.user_list = head;
  g.list_lock = lock;
}

}  // namespace

void forget_glibc_lists() noexcept { g.user_list = nullptr; }

namespace {

void init_header(void* tp) {
  char* cur = static_cast<char*>(current());
  char* b = static_cast<char*>(tp);
  std::memcpy(b + kCopyFrom, cur + kCopyFrom, kCopyTo - kCopyFrom);
  put<int>(b, kGscopeFlag, 0);
  put<void*>(b, kTcbSelf0, tp);
  put<void*>(b, kTcbSelf16, tp);
  put<pid_t>(b, std::ptrdiff_t(g.tid_off), kFakeTidBase + fake_tids.fetch_add(1, std::memory_order_relaxed));
  // On no list of glibc's, but a list node that links to itself: the child
  // of a fork unlinks the forking thread's node from glibc's list of
  // threads and adds it anew (a zeroed node would be followed to null).
  void** node = reinterpret_cast<void**>(b + g.list_off);
  node[0] = node;
  node[1] = node;
  if (g.rseq_size) {
    // No rseq area is registered for this block: sched_getcpu then asks the
    // kernel (RSEQ_CPU_ID_UNINITIALIZED, -1).
    put<std::uint32_t>(b, g.rseq_off, 0);
    put<std::int32_t>(b, g.rseq_off + 4, -1);
  }
}

// The malloc cache pool.
void* pool_take() noexcept {
  SpinGuard guard(pool_lock);
  if (!pool || pool->empty()) return nullptr;
  void* t = pool->back();
  pool->pop_back();
  return t;
}

void pool_give(void* t) noexcept {
  SpinGuard guard(pool_lock);
  if (!pool) return;  // enable() made it: never null once blocks exist
  if (pool->size() == pool->capacity()) {
    // Grow outside the lock's hot path only rarely: doubling.
    try {
      pool->reserve(pool->capacity() * 2 + 64);
    } catch (...) {
      return;  // keep it out of the pool: the cache is lost, nothing breaks
    }
  }
  pool->push_back(t);
}

// Runs fn with `tp` installed on the calling kernel thread, then puts back
// what was there.
template <class F>
void with_installed(void* tp, Processor* p, F&& fn) {
  void* was = current();
  install(tp, p);
  fn();
  install(was, p);
}

// Which word of libc's static TLS is malloc's per-thread cache pointer:
// found by letting a fresh block make its cache and looking for the word
// that points at a cache holding the chunk just freed. Exactly one match,
// or the offset stays unknown (caches of finished threads are then lost, as
// a leak the README states).
struct LibcTls {
  std::ptrdiff_t off = 0;
  std::size_t size = 0;
};

int find_libc_tls(dl_phdr_info* info, std::size_t, void* data) {
  auto* out = static_cast<LibcTls*>(data);
  if (!info->dlpi_name || !std::strstr(info->dlpi_name, "libc.so.6") || !info->dlpi_tls_data) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_TLS) {
      out->off = static_cast<char*>(info->dlpi_tls_data) - static_cast<char*>(current());
      out->size = info->dlpi_phdr[i].p_memsz;
      return 1;
    }
  return 0;
}

void* (*volatile malloc_fn)(std::size_t) = &std::malloc;
void (*volatile free_fn)(void*) = &std::free;

// glibc's malloc is the process's malloc (not jemalloc's, tcmalloc's...).
// Only then is there a glibc cache to hand on, and only then may a scratch
// block run malloc: another allocator may record the calling thread's
// block in lists of its own (jemalloc links every thread's state), which a
// freed scratch block would leave dangling.
bool glibc_malloc() {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libc) return false;
  void* theirs = dlsym(libc, "malloc");
  dlclose(libc);
  return theirs && theirs == dlsym(RTLD_DEFAULT, "malloc");
}

// struct pthread's stackblock and stackblock_size (a pointer and a size,
// side by side), which no table of glibc's names: in the main thread's
// block they hold (NULL, __libc_stack_end) (glibc 2.36,
// sysdeps/nptl/dl-tls_init_tp.c), looked for there and found once only.
// -1: not found, or not on the main thread.
std::ptrdiff_t find_stackblock(void* main_tp) {
  if (at<pid_t>(main_tp, std::ptrdiff_t(g.tid_off)) != ::getpid()) return -1;
  auto* end = static_cast<void* const*>(dlsym(RTLD_DEFAULT, "__libc_stack_end"));
  if (!end || !*end) return -1;
  std::ptrdiff_t found = -1;
  for (std::size_t off = 0; off + 2 * sizeof(void*) <= g.tcb_size; off += sizeof(void*)) {
    if (at<void*>(main_tp, std::ptrdiff_t(off)) != nullptr ||
        at<std::uintptr_t>(main_tp, std::ptrdiff_t(off + sizeof(void*))) != reinterpret_cast<std::uintptr_t>(*end))
      continue;
    if (found >= 0) return -1;  // not one place: none
    found = std::ptrdiff_t(off);
  }
  return found;
}

bool discover_tcache(Processor* p, std::ptrdiff_t* off) {
  if (!glibc_malloc()) return false;
  LibcTls libc;
  dl_iterate_phdr(&find_libc_tls, &libc);
  if (!libc.size || libc.size > 65536) return false;
  void* tp = g.allocate_tls(nullptr);
  if (!tp) return false;
  init_header(tp);
  const std::size_t words = libc.size / sizeof(void*);
  std::vector<std::uintptr_t> before(words), after(words);
  auto* block = reinterpret_cast<std::uintptr_t*>(static_cast<char*>(tp) + libc.off);
  std::memcpy(before.data(), block, words * sizeof(void*));
  void* chunk = nullptr;
  with_installed(tp, p, [&] {
    g.ctype_init();
    chunk = malloc_fn(40);
    free_fn(chunk);
  });
  std::memcpy(after.data(), block, words * sizeof(void*));
  std::ptrdiff_t found = 0;
  int matches = 0;
  for (std::size_t i = 0; i < words; ++i) {
    if (after[i] == before[i] || after[i] < 4096 || (after[i] & 7)) continue;
    // A cache is a few hundred bytes of counts then entries: look for the
    // freed chunk among its first 128 words.
    auto* w = reinterpret_cast<const std::uintptr_t*>(after[i]);
    for (int k = 0; k < 128; ++k)
      if (w[k] == reinterpret_cast<std::uintptr_t>(chunk)) {
        found = libc.off + std::ptrdiff_t(i * sizeof(void*));
        ++matches;
        break;
      }
  }
  if (matches == 1) {
    // The scratch block's cache is the pool's first.
    void* t = at<void*>(tp, found);
    put<void*>(tp, found, nullptr);
    pool_give(t);
  }
  g.deallocate_tls(tp, true);
  *off = found;
  return matches == 1;
}

// glibc's setuid family (setuid, setgid, setgroups, ...) changes every
// kernel thread's credentials: it signals each thread on its list
// (SIGSETXID, glibc's second real-time signal) and waits until each
// thread's handler has cleared a flag in that thread's own block. The
// handler finds "its own block" through %fs, which on a processor is the
// running fibre's: the flag of the block glibc waits on would never clear
// and the caller would signal forever. So the handler runs inside a
// trampoline that installs the kernel thread's own block around it (no
// tls_processor written: for processor 0 that block is main()'s, which may
// be running on another processor). Installed once by enable(), over
// glibc's handler, with glibc's flags, mask and restorer.
constexpr int kSigSetxid = 33;  // __SIGRTMIN + 1
struct KernelSigaction {
  void (*handler)(int, siginfo_t*, void*);
  unsigned long flags;
  void (*restorer)();
  unsigned long mask;
};
KernelSigaction glibc_setxid{};

inline void set_fs(void* tp) noexcept {
  if (g.wrfsbase)
    asm volatile("wrfsbase %0" ::"r"(tp) : "memory");
  else
    ::syscall(SYS_arch_prctl, ARCH_SET_FS, tp);
}

void setxid_trampoline(int sig, siginfo_t* si, void* ctx) {
  void* was = current();
  Processor* p = tls_processor;
  void* own = p ? p->kernel_tcb() : nullptr;
  if (own && own != was) set_fs(own);
  glibc_setxid.handler(sig, si, ctx);
  if (own && own != was) set_fs(was);
}

void wrap_setxid_handler() {
  KernelSigaction old{};
  if (::syscall(SYS_rt_sigaction, kSigSetxid, nullptr, &old, sizeof(unsigned long)) != 0 || !old.handler ||
      !(old.flags & SA_SIGINFO) || reinterpret_cast<void*>(old.handler) == reinterpret_cast<void*>(SIG_IGN))
    return;  // none installed (no thread was ever made by glibc): nothing to wrap
  glibc_setxid = old;
  KernelSigaction ours = old;
  ours.handler = &setxid_trampoline;
  ::syscall(SYS_rt_sigaction, kSigSetxid, &ours, nullptr, sizeof(unsigned long));
}

}  // namespace

void* current() noexcept { return __builtin_thread_pointer(); }

void install(void* tp, Processor* p) noexcept {
  put<Processor*>(tp, g.proc_off, p);
  set_fs(tp);
}

std::size_t reserve() noexcept {
  if (!switching) return 0;
  return g.static_size + g.static_align + sizeof(struct __res_state) + 64;
}

void* make(char* top) {
  char* tp = align_down(top - g.tcb_size, g.static_align);
  struct __res_state* res = res_of(tp);
  std::memset(tp, 0, g.tcb_size);
  std::memset(static_cast<void*>(res), 0, sizeof *res);
  if (!g.allocate_tls(tp)) throw std::bad_alloc();
  init_header(tp);
  link_block(tp);
  made.fetch_add(1, std::memory_order_relaxed);
  return tp;
}

void destroy(void* tp) noexcept {
  if (g.tcache_known) {
    // A thread that never ran (or whose cache was not handed back).
    if (void* t = at<void*>(tp, g.tcache_off)) {
      put<void*>(tp, g.tcache_off, nullptr);
      pool_give(t);
    }
  }
  unlink_block(tp);
  g.deallocate_tls(tp, false);
}

void thread_start(Fibre* self) noexcept {
  void* tp = self->tcb;
  put<struct __res_state*>(tp, g.resp_off, res_of(tp));
  if (g.tcache_known) put<void*>(tp, g.tcache_off, pool_take());
  g.ctype_init();
}

void run_tls_destructors() noexcept {
  if (switching && g.call_tls_dtors) g.call_tls_dtors();
}

void thread_end(Fibre* self) noexcept {
  void* tp = self->tcb;
  if (!g.tcache_known) return;
  if (void* t = at<void*>(tp, g.tcache_off)) {
    put<void*>(tp, g.tcache_off, nullptr);
    pool_give(t);
  }
}

void set_stack(void* tp, void* lo, void* hi) noexcept {
  if (!switching || g.stackblock_off < 0) return;
  put<void*>(tp, g.stackblock_off, lo);
  put<std::size_t>(tp, g.stackblock_off + std::ptrdiff_t(sizeof(void*)),
                   std::size_t(static_cast<char*>(hi) - static_cast<char*>(lo)));
}

void* make_home(Processor* p) {
  void* tp = g.allocate_tls(nullptr);
  if (!tp) throw std::bad_alloc();
  init_header(tp);
  link_block(tp);
  // Its resolver state: glibc's global one, as in a block fresh from the
  // image (__resp starts as &_res); its ctype tables set up on it.
  with_installed(tp, p, [] { g.ctype_init(); });
  made.fetch_add(1, std::memory_order_relaxed);
  return tp;
}

namespace {
// errno of the block installed now. glibc declares __errno_location()
// const, so a compiler may keep &errno from before an install() and write
// the other block's (as KernelIdentity's did: a failed call's errno landed
// in the kernel thread's block, main() read 0): noinline, and the asm makes
// it impure, so each use looks the slot up again (capi::errno_slot's way).
__attribute__((noinline)) int* errno_of_installed() noexcept {
  int* p = __errno_location();
  asm volatile("" : "+r"(p) : : "memory");
  return p;
}
}  // namespace

KernelIdentity::KernelIdentity() noexcept {
  if (!switching) return;
  Processor* p = tls_processor;
  if (!p || current() != g.main_tcb || p->kernel_tcb() == g.main_tcb) return;
  proc_ = p;
  int e = *errno_of_installed();  // main()'s: a call that succeeds leaves it
  install(p->kernel_tcb(), p);
  int* kernel = errno_of_installed();
  kernel_errno_ = *kernel;
  *kernel = e;
}

KernelIdentity::~KernelIdentity() {
  if (!proc_) return;
  int* kernel = errno_of_installed();
  int e = *kernel;  // the call's, set (if at all) in the kernel thread's block
  *kernel = kernel_errno_;
  install(g.main_tcb, proc_);
  *errno_of_installed() = e;
}

std::size_t blocks_made() noexcept { return made.load(std::memory_order_relaxed); }

bool enable() noexcept {
  static bool tried = false;
  if (tried) return switching;
  tried = true;
  if (!env_bool("LOOM_TLS", true)) return false;
#if defined(LOOM_ASAN) || defined(LOOM_TSAN)
  constexpr bool kSanitizer = true;
#else
  constexpr bool kSanitizer = false;
#endif
  if (kSanitizer) {
    if (env_bool("LOOM_VERBOSE", false)) say("a sanitizer build");
    return false;
  }
  Processor* p = this_processor();
  if (!p || p->current() == &p->idle_fibre()) {
    say("not started from a fibre");
    return false;
  }
  if (std::strcmp(gnu_get_libc_version(), kVerifiedGlibc) != 0) {
    char why[96];
    std::snprintf(why, sizeof why, "glibc %s, verified only on %s", gnu_get_libc_version(), kVerifiedGlibc);
    say(why);
    return false;
  }
  const std::uint32_t* sizeof_pthread = nullptr;
  const std::uint32_t* tid_field = nullptr;
  const std::uint32_t* list_field = nullptr;
  const std::ptrdiff_t* rseq_offset = nullptr;
  const unsigned* rseq_size = nullptr;
  void* resp = nullptr;
  if (!find(g.allocate_tls, "_dl_allocate_tls", "GLIBC_PRIVATE") ||
      !find(g.deallocate_tls, "_dl_deallocate_tls", "GLIBC_PRIVATE") ||
      !find(g.static_info, "_dl_get_tls_static_info", "GLIBC_PRIVATE") ||
      !find(g.call_tls_dtors, "__call_tls_dtors", "GLIBC_PRIVATE") ||
      !find(g.ctype_init, "__ctype_init", "GLIBC_PRIVATE") ||
      !find(sizeof_pthread, "_thread_db_sizeof_pthread", "GLIBC_PRIVATE") ||
      !find(tid_field, "_thread_db_pthread_tid", "GLIBC_PRIVATE") ||
      !find(list_field, "_thread_db_pthread_list", "GLIBC_PRIVATE") ||
      !find(rseq_offset, "__rseq_offset", "GLIBC_2.35") || !find(rseq_size, "__rseq_size", "GLIBC_2.35") ||
      !find(resp, "__resp", "GLIBC_PRIVATE")) {
    say("a private glibc entry point is missing");
    return false;
  }
  g.tcb_size = *sizeof_pthread;
  // Optional: glibc's own cancellation checks see loom's requests through it
  // (capi/pthread/cancel.cpp).
  const std::uint32_t* cancel_field = nullptr;
  if (find(cancel_field, "_thread_db_pthread_cancelhandling", "GLIBC_PRIVATE") && cancel_field[0] == 32 &&
      cancel_field[2] + 4 <= *sizeof_pthread)
    g.cancel_off = cancel_field[2];
  g.tid_off = tid_field[2];
  g.list_off = list_field[2];
  g.rseq_off = *rseq_offset;
  g.rseq_size = *rseq_size;
  g.static_info(&g.static_size, &g.static_align);
  void* tp = current();
  g.main_tcb = tp;
  g.resp_off = static_cast<char*>(resp) - static_cast<char*>(tp);
  g.proc_off = reinterpret_cast<char*>(&tls_processor) - static_cast<char*>(tp);
  // Check what was read against the running thread's own block.
  if (tid_field[0] != 32 || list_field[0] != 128 || g.list_off + 16 > g.tcb_size || g.tcb_size < kCopyTo || g.tcb_size > 16384 || g.static_size <= g.tcb_size ||
      (g.static_align & (g.static_align - 1)) != 0 || at<void*>(tp, kTcbSelf16) != tp ||
      at<pid_t>(tp, std::ptrdiff_t(g.tid_off)) != pid_t(::syscall(SYS_gettid)) || at<std::uintptr_t>(tp, kStackGuard) == 0 ||
      at<std::uintptr_t>(tp, kPointerGuard) == 0) {
    say("glibc's thread control block is not laid out as expected");
    return false;
  }
  g.stackblock_off = find_stackblock(tp);
  find_glibc_lists(tp);
  g.wrfsbase = (getauxval(AT_HWCAP2) & 2) != 0;  // HWCAP2_FSGSBASE: the kernel allows wrfsbase
  {
    SpinGuard guard(pool_lock);
    pool = new std::vector<void*>();
    pool->reserve(256);
  }
  g.tcache_known = discover_tcache(p, &g.tcache_off);
  if (!g.tcache_known && env_bool("LOOM_VERBOSE", false))
    std::fprintf(stderr, "loom: glibc malloc's per-thread cache not found (or another malloc runs): not handed on\n");
  void* home = make_home(p);
  p->adopt_home_tcb(home, tp);
  wrap_setxid_handler();
  switching = true;
  if (env_bool("LOOM_VERBOSE", false))
    std::fprintf(stderr, "loom: per-fibre thread-local storage on (%zu bytes a thread, switched by %s)\n", g.static_size,
                 g.wrfsbase ? "wrfsbase" : "arch_prctl");
  return true;
}

int* cancelhandling(void* tp) noexcept {
  if (!switching || !tp || g.cancel_off < 0) return nullptr;
  return reinterpret_cast<int*>(static_cast<char*>(tp) + g.cancel_off);
}

void* cancelled_stand_in() noexcept {
  alignas(64) static char block[4096];
  if (!switching || g.cancel_off < 0 || g.tid_off == 0 || std::size_t(g.cancel_off) + sizeof(int) > sizeof block ||
      g.tid_off + sizeof(pid_t) > sizeof block)
    return nullptr;
  put<pid_t>(block, std::ptrdiff_t(g.tid_off), kFakeTidBase - 1);
  put<int>(block, g.cancel_off, kGlibcCanceling | kGlibcCanceled);
  return block;
}

bool glibc_exiting(void* tp) noexcept {
  const int* w = cancelhandling(tp);
  return w && (__atomic_load_n(w, __ATOMIC_RELAXED) & kGlibcExiting) != 0;
}

// The kernel registered the rseq area glibc gave the kernel thread, in that
// thread's own block; the child of a fork inherits the registration. But
// there glibc takes the forking fibre's block for the thread's (it is the
// one installed), and puts the stack holding the kernel thread's block in
// its cache of free stacks, for a thread the child creates to reuse or
// unmap: the kernel's next update of the area then wrote into another
// thread's block, or met no memory and killed the process with SIGSEGV.
// glibc registers the area with the length of its struct (32 bytes on
// x86-64), which __rseq_size (the features' size) may be smaller than; the
// kernel unregisters only with the length it was given.
void forget_kernel_rseq(void* kernel_tcb) noexcept {
  if (!switching || !g.rseq_size || !kernel_tcb) return;
  constexpr int kUnregister = 1;         // RSEQ_FLAG_UNREGISTER
  constexpr unsigned kSig = 0x53053053;  // RSEQ_SIG on x86
  void* area = static_cast<char*>(kernel_tcb) + g.rseq_off;
  for (unsigned len : {32u, g.rseq_size})
    if (syscall(SYS_rseq, area, len, kUnregister, kSig) == 0) return;
}

}  // namespace loom::rt::tls
