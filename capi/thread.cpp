// capi/thread.cpp — loom_t: fibres as POSIX threads (create, join, detach,
// exit, attributes, names, cancel state, cleanup handlers, keys).
//
// Each fibre made by loom_create has a record, Thread, in a slot of a table
// that only grows (records are reused, never freed), and loom_t names the
// slot and its generation: (generation << 32) | ((slot + 1) << 3). A slot's
// generation is odd while a record lives in it and goes up by one when the
// record is made and when it is freed, so a stale handle (joined, or
// detached and finished) no longer matches and join/detach return ESRCH, as
// glibc does — without ever reading freed memory. The fibre runs
// `trampoline` with the record as its argument, so loom_self() finds the
// record from the running rt::Fibre (fn, arg) without any per-fibre storage
// of its own. main() has a record too; other callers (C++ loom::Fibre,
// kernel threads) get a tagged id (low bits 1 or 3: never a slot handle)
// that only loom_equal and loom_getattr_np understand. A new record's
// signal state (capi.hpp) starts with its creator's mask, or the one
// pthread_attr_setsigmask_np gave (next_thread_mask).
//
// Who frees a record. The state word has three bits: kClaimed (a join or
// detach took it), kDetached, kExited (the trampoline is done with it). The
// joiner frees it after rt::join_fibre; otherwise whichever of detach and
// the trampoline sets its bit second frees it — exactly one sees the other's.
//
// loom_exit unwinds the fibre's stack as glibc's pthread_exit does: a forced
// unwind (_Unwind_ForcedUnwind) that the trampoline stops, so C++
// destructors and C's cleanup attributes run, `catch (...)` sees it (and
// must rethrow: one that swallows it aborts the process, as glibc's
// "exception not rethrown"), and `catch (abi::__forced_unwind&)` matches it;
// C frames are passed through (x86-64 compilers emit unwind tables for C).
// Cleanup frames (loom_cleanup_push) and glibc's cleanup buffers
// (libloom-pthread) run from the stop function in stack order with those
// frames: each when the unwinding reaches the frame that holds it.
//
// Cancellation (loom_cancel, loom_testcancel, the cancel state and type;
// docs/DESIGN.md "Cancellation"): a request sets the fibre's word
// (runtime/sched/cancel.hpp), which wakes it if it waits at a cancellation
// point; it acts at its next cancellation point with cancellation enabled
// (cancel_point) by unwinding as loom_exit(LOOM_CANCELED). A thread that has
// not started yet keeps the request in its record and takes it when it
// starts. Asynchronous cancellation is accepted but acts only at
// cancellation points and when the state or type changes (a fibre running
// user code is never interrupted); a thread blocked in loom_join, or in one
// of loom.h's own mutex/condvar/rwlock/barrier waits, is not woken by the
// request (it acts when that wait ends and it reaches the next point).
#include <setjmp.h>
#include <pthread.h>  // the system's: kernel threads that are not processors
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cxxabi.h>
#include <unwind.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/options.hpp"
#include "base/spinlock.hpp"
#include "base/sys.hpp"
#include "capi.hpp"
#include "loom/cluster.hpp"
#include "loom/fibre.hpp"
#include "sched/cancel.hpp"
#include "sched/cluster.hpp"
#include "sched/cpu_clock.hpp"
#include "sched/in_handler.hpp"
#include "sched/processor.hpp"
#include "sched/tls.hpp"

#if defined(__x86_64__)
// Entered by a longjmp, with the stack pointer of a call site: aligned as a
// callee expects, then the landing proper (redirect_main_landing).
extern "C" void loom_capi_main_glibc_landing();
asm(".text\n"
    ".globl loom_capi_main_glibc_landing\n"
    ".hidden loom_capi_main_glibc_landing\n"
    ".type loom_capi_main_glibc_landing, @function\n"
    "loom_capi_main_glibc_landing:\n"
    "  and $-16, %rsp\n"
    "  call loom_capi_main_glibc_landed\n"
    "  ud2\n"
    ".size loom_capi_main_glibc_landing, .-loom_capi_main_glibc_landing\n");
#endif

// A handle made in two steps, so that the C API can record the fibre's id
// before the fibre can run (and detach itself through that handle).
namespace loom::rt {
struct FibreMaker {
  static std::uint64_t prepare(loom::Fibre& h, const FibreAttr& attr) {
    h.f_ = loom::Fibre::prepare(attr, 0, 1, nullptr);
    return h.f_->id;
  }
  static void launch(loom::Fibre& h, void (*fn)(void*), void* arg) { h.launch(fn, arg); }
};
}  // namespace loom::rt

namespace loom::capi {

namespace {

constexpr unsigned kAttrMagic = 0x6c6f6174;  // "loat"
// Tags of ids that are not records (records are 8-aligned).
constexpr loom_t kTagFibre = 1, kTagThread = 3, kTagMask = 7;

enum : unsigned { kClaimed = 1, kDetached = 2, kExited = 4 };

// A handle that names a slot (it may be stale); ids of fibres and kernel
// threads that loom_create did not make carry a tag in the low bits.
bool is_slot_handle(loom_t id) { return id != 0 && !(id & kTagMask) && (id & 0xffffffffu) != 0; }

struct Thread {
  loom_t id = 0;  // this record's handle (slot and generation)
  std::atomic<unsigned> state{0};
  void* (*start)(void*) = nullptr;
  void* arg = nullptr;
  // Set by loom_rest: where the thread continues after a rest (instead of
  // start, whose return value a detached thread has no use for).
  void (*rest_fn)(void*) = nullptr;
  void* rest_arg = nullptr;
  void* retval = nullptr;
  std::atomic<rt::Fibre*> fibre{nullptr};  // set by the fibre when it starts
  // The fibre id the listing, stall reports and gdb print (loom_getid_np):
  // set by loom_create for a joinable thread, by the fibre when it starts.
  std::atomic<std::uint64_t> fibre_id{0};
  Semaphore finished{0, 1};                // released once it has exited
  std::size_t guardsize = 0;
  // The stack size asked for: what getattr reports (loom's stack holds the
  // thread's own thread-locals on top of it, as glibc's does, but is larger
  // by them).
  std::size_t stack_asked = 0;
  int priority = LOOM_PRIORITY_NORMAL;
  bool main = false;
  bool named = false;  // loom_setname_np was called
  std::atomic<bool> cpu_clock_wanted{false};  // its CPU clock was asked for before it started
  int cancel_state = LOOM_CANCEL_ENABLE;
  int cancel_type = LOOM_CANCEL_DEFERRED;
  loom_cleanup_frame* cleanup = nullptr;  // innermost first
  GlibcCleanup glibc;                     // libloom-pthread's (capi.hpp)
  // loom_exit's unwinding met frames without unwind tables and went on at
  // the landing (unwind_stop): its value is the thread's, not LOOM_CANCELED.
  bool landed_by_exit = false;
  // Cancellation: a request made before the fibre started (taken by the
  // trampoline); cancel_lock orders a canceller's use of `fibre` before the
  // fibre's end (cancel_closed, set by the trampoline as it finishes).
  std::atomic<bool> cancel_early{false};
  detail::SpinLock cancel_lock;
  bool cancel_closed = false;
  // loom_exit's forced unwind (one at a time per thread; a cleanup buffer's
  // handler continues it with a new one).
  _Unwind_Exception unwind{};
  char name[16] = {};
  alignas(loom::Fibre) unsigned char handle_mem[sizeof(loom::Fibre)];

  loom::Fibre& handle() { return *std::launder(reinterpret_cast<loom::Fibre*>(handle_mem)); }
};

// ---- the table of records ------------------------------------------------------------
//
// Chunks of kChunkSize slots, allocated on demand and never freed, so that a
// lookup with any handle reads only memory that stays valid; free slots are
// a list under one spin lock (create and reap take it once each: cheap next
// to a fibre's stack). kChunks * kChunkSize = 16 Mi threads alive at once.
struct Slot {
  std::atomic<std::uint32_t> gen{0};  // odd: holds a live record
  std::uint32_t index = 0;
  Slot* next_free = nullptr;
  SignalState signals;  // outlives the record (capi.hpp)
  alignas(Thread) unsigned char mem[sizeof(Thread)];
  Thread* thread() { return std::launder(reinterpret_cast<Thread*>(mem)); }
};
constexpr std::uint32_t kChunkBits = 8, kChunkSize = 1u << kChunkBits, kChunks = 1u << 16;
std::atomic<Slot*> chunks[kChunks];  // zero-initialised: usable before constructors
std::uint32_t slots_used = 0;        // under table_lock
Slot* free_slots = nullptr;          // under table_lock
detail::SpinLock table_lock;

loom_t handle_of(std::uint32_t gen, std::uint32_t index) { return (loom_t(gen) << 32) | (loom_t(index + 1) << 3); }

Slot* slot_at(std::uint32_t index) {
  if (index >= kChunks * kChunkSize) return nullptr;
  Slot* c = chunks[index >> kChunkBits].load(std::memory_order_acquire);
  return c ? &c[index & (kChunkSize - 1)] : nullptr;
}

std::atomic<Thread*> main_record{nullptr};  // main_thread(), once made: for signal handlers
SignalState* made_signal_state() noexcept;

thread_local std::uint64_t next_mask = 0;  // next_thread_mask's, for new_record
thread_local bool next_mask_set = false;

// A fresh record in a free slot; nullptr when out of memory or slots.
Thread* new_record() {
  Slot* s = nullptr;
  {
    rt::SpinGuard g(table_lock);
    if ((s = free_slots)) {
      free_slots = s->next_free;
    } else if (slots_used < kChunks * kChunkSize) {
      std::uint32_t i = slots_used;
      if (!(s = slot_at(i))) {
        auto* c = new (std::nothrow) Slot[kChunkSize];
        if (!c) return nullptr;
        for (std::uint32_t k = 0; k < kChunkSize; ++k) c[k].index = i + k;
        chunks[i >> kChunkBits].store(c, std::memory_order_release);
        s = c;
      }
      ++slots_used;
    } else {
      return nullptr;
    }
  }
  auto* t = new (s->mem) Thread;
  // Signals: the creator's mask (POSIX), or the kernel thread's for main
  // and callers without a record, or the attribute's; nothing pending.
  std::uint64_t mask = 0;
  if (next_mask_set) {
    mask = next_mask;
    next_mask_set = false;
  } else if (SignalState* c = made_signal_state()) {
    mask = c->mask.load(std::memory_order_relaxed);
  } else {
    sigset_t k;
    if (::syscall(SYS_rt_sigprocmask, SIG_BLOCK, nullptr, &k, _NSIG / 8) == 0) std::memcpy(&mask, &k, sizeof mask);
  }
  s->signals.mask.store(mask, std::memory_order_relaxed);
  s->signals.pending.store(0, std::memory_order_relaxed);
  s->signals.waits.store(0, std::memory_order_relaxed);
  s->signals.parked_key.store(nullptr, std::memory_order_relaxed);  // the slot's last thread's
  s->signals.interrupt.store(false, std::memory_order_relaxed);
  s->signals.ended.store(false, std::memory_order_relaxed);
  s->signals.routed.store(0, std::memory_order_relaxed);
  s->signals.alt_sp = nullptr;  // a new thread has no alternate stack (Linux, POSIX)
  s->signals.alt_size = 0;
  s->signals.alt_flags = SS_DISABLE;
  // The siginfo of what is posted to it (sigqueue's value, a sender's pid):
  // made here, once per slot (kept with it), since a poster may be a signal
  // handler, which cannot allocate; without it a post keeps no siginfo.
  if (!s->signals.info.load(std::memory_order_relaxed))
    s->signals.info.store(new (std::nothrow) SignalInfo[64](), std::memory_order_release);
  std::uint32_t gen = s->gen.load(std::memory_order_relaxed) + 1;  // odd: live
  t->id = handle_of(gen, s->index);
  s->gen.store(gen, std::memory_order_release);
  return t;
}

Slot* slot_of(Thread* t) { return reinterpret_cast<Slot*>(reinterpret_cast<unsigned char*>(t) - offsetof(Slot, mem)); }

void destroy(Thread* t) {
  Slot* s = slot_of(t);
  t->~Thread();
  s->gen.fetch_add(1, std::memory_order_acq_rel);  // even: every handle of it is stale
  rt::SpinGuard g(table_lock);
  s->next_free = free_slots;
  free_slots = s;
}

std::atomic<long> live_threads{0};     // fibres of loom_create still running
std::atomic<long> threads_created{0};  // fibres loom_create made (LOOM_PTHREAD_STATS)

// Released when live_threads reaches 0. In static storage, not the heap:
// it is first wanted by the last thread to end, and a program short of
// memory (glibc's tst-create-detached under RLIMIT_AS) got bad_alloc there,
// out of a detached thread's end. Never destroyed: threads may still end
// while the process exits.
BinarySemaphore& all_done() {
  alignas(BinarySemaphore) static unsigned char storage[sizeof(BinarySemaphore)];
  static auto* s = new (storage) BinarySemaphore(false);
  return *s;
}

Thread& main_thread() {
  static Thread* t = [] {
    Thread* m = new_record();
    if (!m) std::abort();
    m->main = true;
    std::strcpy(m->name, "main");
    main_record.store(m, std::memory_order_release);
    return m;
  }();
  return *t;
}

detail::SpinLock names_lock;  // names are rare: one lock for all
std::atomic<int> concurrency{0};

struct alignas(8) Anchor {
  char c;
};
thread_local Anchor thread_anchor;  // ids of kernel threads that are not processors
// Cancel state of callers without a record (kept; nothing ever cancels).
thread_local int other_cancel_state = LOOM_CANCEL_ENABLE;
thread_local int other_cancel_type = LOOM_CANCEL_DEFERRED;
// Cleanup frames of kernel threads that are not processors (loom_exit runs
// them before the system's pthread_exit); a frame's owner is then this
// chain's address. A fibre without a record (a C++ loom::Fibre) registers
// none: it may change kernel threads between push and pop.
thread_local loom_cleanup_frame* other_cleanup = nullptr;

void trampoline(void* p);

bool is_main_fibre(const rt::Fibre* f) { return f->fn == nullptr && !f->stack; }

// The caller's signal state, without making main's record (new_record and
// signal handlers call it; libloom-pthread makes main's at start-up).
SignalState* made_signal_state() noexcept {
  rt::Fibre* f = rt::this_fibre_or_null();
  if (!f) return nullptr;
  Thread* t = nullptr;
  if (f->fn == &trampoline)
    t = static_cast<Thread*>(f->arg);
  else if (is_main_fibre(f))
    t = main_record.load(std::memory_order_acquire);
  return t ? &slot_of(t)->signals : nullptr;
}

// The caller's record: its own for fibres of loom_create, main's on main.
Thread* current_record() {
  rt::Fibre* f = rt::this_fibre_or_null();
  if (!f) return nullptr;
  if (f->fn == &trampoline) return static_cast<Thread*>(f->arg);
  if (is_main_fibre(f)) {
    Thread& m = main_thread();
    if (!m.fibre.load(std::memory_order_relaxed)) {
      m.fibre_id.store(f->id, std::memory_order_relaxed);
      slot_of(&m)->signals.fibre_id.store(f->id, std::memory_order_release);
      m.fibre.store(f, std::memory_order_relaxed);
    }
    return &m;
  }
  return nullptr;
}

// The live record `id` names; nullptr for a stale handle, one that is not a
// slot handle, or one never handed out.
Thread* record_of(loom_t id) {
  if (!is_slot_handle(id)) return nullptr;
  Slot* s = slot_at(std::uint32_t((id & 0xffffffffu) >> 3) - 1);
  if (!s || s->gen.load(std::memory_order_acquire) != std::uint32_t(id >> 32)) return nullptr;
  return s->thread();
}

// ---- loom_exit's unwinding -----------------------------------------------------------

constexpr _Unwind_Exception_Class kUnwindClass = 0x4c4f4f4d45584954ull;  // "LOOMEXIT"

// A catch (...) ended without rethrowing loom_exit's unwinding: the thread
// would go on after its exit. glibc aborts there too.
void not_rethrown(_Unwind_Reason_Code, _Unwind_Exception*) {
  std::fprintf(stderr, "loom: a thread's exit or cancellation was caught and not rethrown\n");
  std::abort();
}

[[noreturn]] void exit_main(Thread* m);
[[noreturn]] void unwind_thread(Thread* t);

// ---- glibc's cancelhandling word (capi.hpp, GlibcCancel) ---------------------------
using rt::tls::kGlibcAsync;
using rt::tls::kGlibcCanceled;
using rt::tls::kGlibcExiting;
using rt::tls::kGlibcStateDisabled;

// f's word, when glibc's checks are to see loom's requests.
int* glibc_word(rt::Fibre* f) noexcept {
  return (glibc_cancel && f) ? rt::tls::cancelhandling(f->tcb) : nullptr;
}
// Returns the word as it was (0 without one).
int glibc_word_set(rt::Fibre* f, int bits) noexcept {
  if (int* w = glibc_word(f)) return __atomic_fetch_or(w, bits, __ATOMIC_SEQ_CST);
  return 0;
}

// main's outermost buffer is glibc's own (__libc_start_call_main's, around
// main()): landing there, glibc ends the kernel thread — a processor. So
// before main's word tells glibc's checks of a request (only when main
// cancels itself: then this runs on main, whose chain holds no dead buffer),
// that buffer's resumption address becomes ours (below: main ends as
// loom_exit's unwinding past main() ends it), its stack and registers kept.
// Once; false if main's chain has no outermost buffer (main() not called by
// glibc's start), and then glibc's checks are not told.
}  // namespace

void* glibc_innermost_buffer() noexcept {
  __pthread_unwind_buf_t probe;
  std::memset(&probe, 0, sizeof probe);
  glibc_cancel->reg(&probe);
  glibc_cancel->unreg(&probe);
  return probe.__pad[0];
}

namespace {

bool redirect_main_landing() noexcept {
#if defined(__x86_64__)
  static bool done = false, ok = false;
  if (done) return ok;
  done = true;
  auto* b = static_cast<__pthread_unwind_buf_t*>(glibc_innermost_buffer());
  while (b && b->__pad[0]) b = static_cast<__pthread_unwind_buf_t*>(b->__pad[0]);
  if (!b) return false;
  std::uintptr_t guard;  // glibc's PTR_MANGLE: xor with the pointer guard, rotate left by 17
  asm("mov %%fs:0x30, %0" : "=r"(guard));
  std::uintptr_t pc = reinterpret_cast<std::uintptr_t>(&loom_capi_main_glibc_landing) ^ guard;
  b->__cancel_jmp_buf[0].__cancel_jmp_buf[7] = long((pc << 17) | (pc >> 47));  // JB_PC
  ok = true;
  return true;
#else
  return false;
#endif
}

// Called before each frame is unwound. A cleanup frame or glibc buffer
// below the frame's CFA lives in it (or in a frame already gone): it runs
// now, innermost first, so handlers and destructors run in stack order.
_Unwind_Reason_Code unwind_stop(int, _Unwind_Action actions, _Unwind_Exception_Class, _Unwind_Exception*,
                                struct _Unwind_Context* ctx, void* arg) {
  auto* t = static_cast<Thread*>(arg);
  auto cfa = (actions & _UA_END_OF_STACK) ? ~std::uintptr_t(0) : std::uintptr_t(_Unwind_GetCFA(ctx));
  for (;;) {
    auto* f = t->cleanup;
    auto* g = static_cast<char*>(t->glibc.chain);
    bool frame = f && reinterpret_cast<std::uintptr_t>(f) < cfa;
    bool buffer = g && reinterpret_cast<std::uintptr_t>(g) < cfa;
    if (buffer && (!frame || g < reinterpret_cast<char*>(f))) {
      run_glibc_cleanup(&t->glibc);  // longjmps into the buffer's frame; its handler continues the unwinding
    } else if (frame) {
      t->cleanup = f->_loom_prev;
      f->_loom_fn(f->_loom_arg);
    } else {
      break;
    }
  }
  if (actions & _UA_END_OF_STACK) {
    if (t->main) exit_main(t);  // past main(): the thread ends, the process goes on
    // Frames without unwind tables (C built with -fno-asynchronous-unwind-
    // tables) end the unwinder's walk early. glibc assumes only such C
    // frames lie between there and its next buffer, and jumps to it; the
    // handlers are all run by now, so the next is the thread's landing.
    if (glibc_cancel && t->glibc.chain == nullptr) {
      if (auto* landing = static_cast<__pthread_unwind_buf_t*>(glibc_innermost_buffer())) {
        t->landed_by_exit = true;
        longjmp(reinterpret_cast<__jmp_buf_tag*>(landing->__cancel_jmp_buf), 1);
      }
    }
    std::fprintf(stderr, "loom: loom_exit's unwinding found no way back to its thread's start\n");
    std::abort();
  }
  return _URC_NO_REASON;
}

[[noreturn]] void unwind_thread(Thread* t) {
  t->unwind.exception_class = kUnwindClass;
  t->unwind.exception_cleanup = &not_rethrown;
  _Unwind_ForcedUnwind(&t->unwind, &unwind_stop, t);
  std::fprintf(stderr, "loom: loom_exit could not unwind its thread's stack\n");
  std::abort();
}

// The calling fibre acts on its cancellation request: no second request,
// no cancellation point acts again while the handlers run (glibc's rule).
[[noreturn]] void act_on_cancel(Thread* t, rt::Fibre* f) {
  f->cancel.fetch_or(rt::kCancelActing, std::memory_order_relaxed);
  glibc_word_set(f, kGlibcExiting);
  t->cancel_state = LOOM_CANCEL_DISABLE;
  loom_exit(LOOM_CANCELED);
  __builtin_unreachable();
}

void destroy_keys(rt::Fibre* self) {
  if (self->specific && rt::fibre_exit_hook) rt::fibre_exit_hook(self);
}

void finish(Thread* t, rt::Fibre* self) {
  destroy_keys(self);  // while loom_self() still names t (POSIX)
  if (signal_thread_end) signal_thread_end(slot_of(t)->signals);
  t->finished.release_errno();
  if (live_threads.fetch_sub(1, std::memory_order_acq_rel) == 1) all_done().release_errno();
  if (t->state.fetch_or(kExited, std::memory_order_acq_rel) & kDetached) destroy(t);
  // From here on t may be gone.
}

// main's value for its joiner, once: on its exit, or in a fork child when
// the forking thread ends there (record_exit_value).
void main_ended(Thread* m, void* retval) {
  if (m->state.load(std::memory_order_acquire) & kExited) return;
  m->retval = retval;
  m->state.fetch_or(kExited, std::memory_order_acq_rel);
  m->finished.release_errno();
}

// What glibc's start_thread does for its own threads: the outermost buffer
// of the block's chain, where glibc's unwinding ends when a glibc
// cancellation point acted and no buffer of the program's is left (C++
// destructors ran as their frames went). From there it ends as loom's own
// cancellation does: the handlers left (loom_cleanup_push's frames, which
// glibc does not know) run, and the thread ends with LOOM_CANCELED.
// Also around a continuation after loom_rest: a restable thread's block
// stays (on the heap) while its stack changes, so the landing of the stack
// before would be a dead frame.
[[gnu::noinline]] void start_with_landing(Thread* t) {
  __pthread_unwind_buf_t landing;
  std::memset(&landing, 0, sizeof landing);
  if (__sigsetjmp(reinterpret_cast<__jmp_buf_tag*>(landing.__cancel_jmp_buf), 0)) {
    Thread* me = current_record();
    if (!me) return;  // a fork child's forking thread (no fibres there): it ends as the child's (trampoline)
    if (!me->landed_by_exit) glibc_acted();  // (retval: LOOM_CANCELED)
    while (loom_cleanup_frame* c = me->cleanup) {
      me->cleanup = c->_loom_prev;
      c->_loom_fn(c->_loom_arg);
    }
    me->glibc.chain = nullptr;
    return;
  }
  glibc_cancel->reg(&landing);
  if (void (*fn)(void*) = t->rest_fn)
    fn(t->rest_arg);  // continued after loom_rest
  else
    t->retval = t->start(t->arg);
  glibc_cancel->unreg(&landing);
}

void trampoline(void* p) {
  auto* t = static_cast<Thread*>(p);
  rt::Fibre* self = rt::this_fibre_or_null();
  t->fibre_id.store(self->id, std::memory_order_relaxed);
  slot_of(t)->signals.fibre_id.store(self->id, std::memory_order_release);
  t->fibre.store(self, std::memory_order_seq_cst);  // then cancel_early: loom_cancel does the converse
  if (__builtin_expect(t->cancel_early.load(std::memory_order_seq_cst), 0)) {
    self->cancel.fetch_or(rt::kCancelRequested, std::memory_order_relaxed);
    glibc_word_set(self, kGlibcCanceled);
  }
  // (No fence for the clock on this path of every thread: an ask that races
  // the start and misses takes effect at the clock's next read, which starts
  // it too.)
  if (t->cpu_clock_wanted.load(std::memory_order_acquire)) rt::cpu_clock_start(self);
  try {
    if (glibc_cancel)
      start_with_landing(t);
    else if (void (*fn)(void*) = t->rest_fn)
      fn(t->rest_arg);  // continued after loom_rest
    else
      t->retval = t->start(t->arg);
  } catch (abi::__forced_unwind&) {
    // loom_exit's (or another forced unwinding that reached the thread's
    // start, which ends it too): retval is set and the handlers have run.
    if (t->unwind.exception_class == kUnwindClass) t->unwind.exception_cleanup = nullptr;  // caught where meant
  }
  rt::Fibre* now = rt::this_fibre_or_null();
  // No processor under a fibre of loom_create: this is the child of a fork
  // (libloom-pthread makes its one kernel thread a plain one). When the
  // threads made there have ended too, the process ends with status 0, as
  // POSIX says of the last thread.
  if (!now) {
    if (fork_child_thread_end) fork_child_thread_end();
    std::exit(0);
  }
  // The thread is ending: glibc's cancellation points in its thread_local
  // and key destructors act no more (the landing is gone, and glibc's
  // unwinding found an empty chain: outside review, a key destructor's
  // write with a request pending crashed). glibc would act once more there
  // and end the thread cancelled; here it ends with the value it returned.
  glibc_word_set(now, kGlibcExiting);
  if (now->tcb) rt::tls::run_tls_destructors();  // C++ thread_locals: before the keys, as glibc
  t->cancel_lock.lock();  // no canceller still holds the fibre
  t->cancel_closed = true;
  t->cancel_lock.unlock();
  finish(t, now);
}

// main ends with loom_exit (pthread_exit): its key destructors run, a thread
// joining it gets the value, and the process lives on until the last thread
// ends, as on glibc.
// main's end by loom_exit (its unwinding's end): retval to main's joiner,
// then the process waits for its threads and exits with status 0.
[[noreturn]] void exit_main(Thread* m) {
  destroy_keys(rt::this_fibre_or_null());
  if (signal_thread_end) signal_thread_end(slot_of(m)->signals);
  main_ended(m, m->retval);
  while (live_threads.load(std::memory_order_acquire) != 0) all_done().acquire();
  std::exit(0);
}

// Takes the right to join or detach t: EINVAL if already taken.
int claim(Thread* t) {
  unsigned s = t->state.load(std::memory_order_acquire);
  do {
    if (s & (kClaimed | kDetached)) return EINVAL;
  } while (!t->state.compare_exchange_weak(s, s | kClaimed, std::memory_order_acq_rel));
  return 0;
}

void reap(Thread* t, void** retval, bool waited = false) {
  if (t->main) {  // no fibre to join: main's record stays (main_thread() holds it)
    if (!waited) t->finished.acquire();
    if (retval) *retval = t->retval;
    return;
  }
  t->handle().join();
  t->handle().~Fibre();
  if (retval) *retval = t->retval;
  destroy(t);
}

// ESRCH: a null or stale handle (joined, or detached and finished); EINVAL:
// an id loom_create did not make; EDEADLK: the caller itself. main may be
// joined: it ends with loom_exit (pthread_exit), as glibc allows.
int check_joinable(loom_t id, Thread** out) {
  if (id == 0) return ESRCH;
  Thread* t = record_of(id);
  if (!t) return is_slot_handle(id) ? ESRCH : EINVAL;
  // A detached thread joining itself: EINVAL before EDEADLK, as glibc.
  if (t->state.load(std::memory_order_acquire) & kDetached) return EINVAL;
  if (t == current_record()) return EDEADLK;
  *out = t;
  return 0;
}

const loom_attr_t* valid_attr(const loom_attr_t* a) { return a && a->_loom_magic == kAttrMagic ? a : nullptr; }
loom_attr_t* valid_attr(loom_attr_t* a) { return a && a->_loom_magic == kAttrMagic ? a : nullptr; }

std::size_t page_size() {
  static const std::size_t n = std::size_t(sysconf(_SC_PAGESIZE));
  return n;
}

std::size_t default_stack(const loom_attr_t* a) {
  auto* c = reinterpret_cast<loom::Cluster*>(a->_loom_cluster);
  return (c ? *c : loom::Cluster::default_cluster()).config().stack_size;
}

// The original stack of the main thread, which main()'s fibre runs on: the
// "[stack]" mapping's top and the stack size limit, as glibc reports it.
void main_stack(void** addr, std::size_t* size) {
  struct Stack {
    void* a = nullptr;
    std::size_t n = 0;
  };
  // A function-local static (__cxa_guard), not std::call_once: that is
  // pthread_once, which libloom-pthread defines (base/sys.hpp).
  static const Stack st = [] {
    Stack s;
    void*& a = s.a;
    std::size_t& n = s.n;
    rlimit rl{};
    getrlimit(RLIMIT_STACK, &rl);
    n = rl.rlim_cur == RLIM_INFINITY ? std::size_t(8) << 20 : std::size_t(rl.rlim_cur);
    if (FILE* f = std::fopen("/proc/self/maps", "r")) {
      char line[512];
      unsigned long lo = 0, hi = 0;
      while (std::fgets(line, sizeof line, f)) {
        if (std::strstr(line, "[stack]") && std::sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
          a = reinterpret_cast<void*>(hi - n);
          break;
        }
      }
      std::fclose(f);
    }
    return s;
  }();
  *addr = st.a;
  *size = st.n;
}

void print_stats() {
  std::fprintf(stderr, "loom: %ld threads ran as fibres\n", threads_created.load(std::memory_order_relaxed));
}

// After the runtime's constructor (101): LOOM_PTHREAD_STATS=1 prints the
// count at exit (capi.hpp).
__attribute__((constructor(102))) void stats_at_exit() {
  if (rt::env_bool("LOOM_PTHREAD_STATS", false)) std::atexit(print_stats);
}

}  // namespace

void (*run_glibc_cleanup)(GlibcCleanup*) = nullptr;
const GlibcCancel* glibc_cancel = nullptr;

void glibc_acted() noexcept {
  Thread* t = current_record();
  rt::Fibre* f = rt::this_fibre_or_null();
  if (!t || !f) return;
  f->cancel.fetch_or(rt::kCancelActing, std::memory_order_relaxed);
  t->cancel_state = LOOM_CANCEL_DISABLE;
  t->retval = LOOM_CANCELED;
}

// main's landing (redirect_main_landing), entered by glibc's longjmp with
// __libc_start_call_main's stack pointer: the frames below are gone.
extern "C" [[noreturn]] __attribute__((visibility("hidden"), used)) void loom_capi_main_glibc_landed() {
  Thread* m = current_record();
  glibc_acted();
  while (loom_cleanup_frame* c = m->cleanup) {
    m->cleanup = c->_loom_prev;
    c->_loom_fn(c->_loom_arg);
  }
  m->glibc.chain = nullptr;
  exit_main(m);
}

void kernel_testcancel() {
  static void (*testcancel)() = [] {
    void (*fn)() = nullptr;
    rt::sys::find_symbol(fn, "libc.so.6", "pthread_testcancel");
    return fn;
  }();
  testcancel();
}

void cancel_point() {
  rt::Fibre* f = rt::this_fibre_or_null();
  if (__builtin_expect(f == nullptr, 0)) return kernel_testcancel();
  if (__builtin_expect(!rt::cancel_pending(f), 1)) return;
  if (Thread* t = current_record()) act_on_cancel(t, f);
}

// (current_record's test, without making main's record: whoever cancels
// main made it, by main's loom_self.)
bool cancel_acts_here() noexcept {
  rt::Fibre* f = rt::this_fibre_or_null();
  return f && (f->fn == &trampoline || is_main_fibre(f));
}

CancellableWait::CancellableWait() noexcept : fibre(cancel_acts_here() ? rt::this_fibre_or_null() : nullptr) {
  if (fibre) static_cast<rt::Fibre*>(fibre)->cancel_wait = true;
}
CancellableWait::~CancellableWait() {
  if (fibre) static_cast<rt::Fibre*>(fibre)->cancel_wait = false;  // (a wait that never blocked left it)
}

void continue_exit() {
  if (Thread* t = current_record()) unwind_thread(t);
}

GlibcCleanup* glibc_cleanup() noexcept {
  Thread* t = current_record();
  return t ? &t->glibc : nullptr;
}

SignalState* signal_state() noexcept { return made_signal_state(); }

void next_thread_mask(const std::uint64_t* mask) noexcept {
  if (mask) next_mask = *mask & ~((std::uint64_t(1) << 31) | (std::uint64_t(1) << 32));  // glibc's own two
  next_mask_set = mask != nullptr;
}

SignalState* signal_state(loom_t id) noexcept {
  Thread* t = record_of(id);
  return t ? &slot_of(t)->signals : nullptr;
}

bool any_signal_state(bool (*fn)(SignalState&, void*), void* arg) noexcept {
  for (std::uint32_t i = 0; i < kChunks * kChunkSize; i += kChunkSize) {
    Slot* c = chunks[i >> kChunkBits].load(std::memory_order_acquire);
    if (!c) return false;
    for (std::uint32_t k = 0; k < kChunkSize; ++k)
      if ((c[k].gen.load(std::memory_order_acquire) & 1) && fn(c[k].signals, arg)) return true;
  }
  return false;
}

long fibres_created() noexcept { return threads_created.load(std::memory_order_relaxed); }

void (*fork_child_thread_end)() = nullptr;
void (*signal_thread_end)(SignalState&) = nullptr;

// A thread's CPU clock: a clock id the kernel would take for a thread's
// (negative, per thread, CPUCLOCK_SCHED) of a thread id no kernel thread
// can have (above PID_MAX_LIMIT), carrying the record's slot. A clock of a
// thread that ended reads the slot's next thread (no generation fits).
namespace {
constexpr std::uint32_t kClockTid = 0x08000000u;  // (slots < 2^24: ~tid * 8 fits an int)
constexpr clockid_t kClockPerThreadSched = 6;
}  // namespace

int thread_cpu_clock(loom_t id, clockid_t* out) noexcept {
  Thread* t = record_of(id);
  if (!t) return ESRCH;
  if (t->main) current_record();  // (main's record learns its fibre on its first use)
  std::uint32_t index = std::uint32_t((id & 0xffffffffu) >> 3) - 1;
  // Against the trampoline's store of its fibre, then load of this flag:
  // both may miss (no fence there), and then the clock's first read starts
  // the timing (fibre_cpu_clock).
  t->cpu_clock_wanted.store(true, std::memory_order_seq_cst);
  if (rt::Fibre* f = t->fibre.load(std::memory_order_seq_cst)) rt::cpu_clock_start(f);
  *out = clockid_t(~std::int32_t(kClockTid | index) * 8) | kClockPerThreadSched;
  return 0;
}

bool fibre_cpu_clock(clockid_t c, std::uint64_t* ns) noexcept {
  rt::Fibre* f = nullptr;
  if (c == CLOCK_THREAD_CPUTIME_ID) {
    Thread* t = current_record();
    if (!t) return false;  // a kernel thread's own: the kernel's
    f = t->fibre.load(std::memory_order_relaxed);
    if (f) rt::cpu_clock_start(f);  // the first read starts it
  } else {
    if (c >= 0 || (c & 7) != kClockPerThreadSched) return false;
    std::uint32_t tid = ~std::uint32_t(c >> 3);
    if (!(tid & kClockTid)) return false;
    Slot* s = slot_at(tid & ~kClockTid);
    if (!s || !(s->gen.load(std::memory_order_acquire) & 1)) {
      *ns = ~std::uint64_t(0);  // no such thread (now)
      return true;
    }
    f = s->thread()->fibre.load(std::memory_order_acquire);
    // Reading it wants it kept (a thread whose clock was asked for as it
    // started may have missed the ask: see thread_cpu_clock).
    if (f) rt::cpu_clock_start(f);
  }
  *ns = f ? rt::cpu_clock_ns(f) : 0;
  return true;
}

bool is_main_thread(loom_t id) noexcept {
  Thread* t = record_of(id);
  return t && t->main;
}

bool unnamed_main(loom_t id) noexcept {
  Thread* t = record_of(id);
  return t && t->main && !t->named;
}

void record_exit_value(loom_t id, void* retval) noexcept {
  if (Thread* t = record_of(id))
    if (t->main) main_ended(t, retval);
}

}  // namespace loom::capi

using namespace loom;
using namespace loom::capi;

extern "C" {

// ---- attributes ------------------------------------------------------------------

int loom_attr_init(loom_attr_t* a) {
  if (!a) return EINVAL;
  std::memset(a, 0, sizeof *a);
  a->_loom_magic = kAttrMagic;
  a->_loom_detachstate = LOOM_CREATE_JOINABLE;
  a->_loom_guardsize = page_size();
  a->_loom_priority = LOOM_PRIORITY_NORMAL;
  a->_loom_scope = LOOM_SCOPE_PROCESS;
  return 0;
}

int loom_attr_destroy(loom_attr_t* a) {
  if (!valid_attr(a)) return EINVAL;
  a->_loom_magic = 0;
  return 0;
}

int loom_attr_setdetachstate(loom_attr_t* a, int state) {
  if (!valid_attr(a) || (state != LOOM_CREATE_JOINABLE && state != LOOM_CREATE_DETACHED)) return EINVAL;
  a->_loom_detachstate = state;
  return 0;
}

int loom_attr_getdetachstate(const loom_attr_t* a, int* state) {
  if (!valid_attr(a) || !state) return EINVAL;
  *state = a->_loom_detachstate;
  return 0;
}

int loom_attr_setstacksize(loom_attr_t* a, size_t size) {
  if (!valid_attr(a) || size < LOOM_STACK_MIN || size > LOOM_STACK_MAX) return EINVAL;
  a->_loom_stacksize = size;
  return 0;
}

int loom_attr_getstacksize(const loom_attr_t* a, size_t* size) {
  if (!valid_attr(a) || !size) return EINVAL;
  *size = a->_loom_stacksize ? a->_loom_stacksize : default_stack(a);
  return 0;
}

int loom_attr_setguardsize(loom_attr_t* a, size_t size) {
  if (!valid_attr(a)) return EINVAL;
  a->_loom_guardsize = size;
  return 0;
}

int loom_attr_getguardsize(const loom_attr_t* a, size_t* size) {
  if (!valid_attr(a) || !size) return EINVAL;
  *size = a->_loom_guardsize;
  return 0;
}

int loom_attr_setstack(loom_attr_t* a, void* addr, size_t size) {
  if (!valid_attr(a) || !addr || size < LOOM_STACK_MIN || size > LOOM_STACK_MAX) return EINVAL;
  a->_loom_stackaddr = addr;
  a->_loom_stacksize = size;
  return 0;
}

int loom_attr_getstack(const loom_attr_t* a, void** addr, size_t* size) {
  if (!valid_attr(a) || !addr || !size || !a->_loom_stackaddr) return EINVAL;
  *addr = a->_loom_stackaddr;
  *size = a->_loom_stacksize;
  return 0;
}

int loom_attr_setscope(loom_attr_t* a, int scope) {
  if (!valid_attr(a)) return EINVAL;
  if (scope == LOOM_SCOPE_SYSTEM) return ENOTSUP;
  if (scope != LOOM_SCOPE_PROCESS) return EINVAL;
  a->_loom_scope = scope;
  return 0;
}

int loom_attr_getscope(const loom_attr_t* a, int* scope) {
  if (!valid_attr(a) || !scope) return EINVAL;
  *scope = a->_loom_scope;
  return 0;
}

int loom_attr_setcluster(loom_attr_t* a, loom_cluster_t* c) {
  if (!valid_attr(a)) return EINVAL;
  a->_loom_cluster = c;
  return 0;
}

int loom_attr_getcluster(const loom_attr_t* a, loom_cluster_t** c) {
  if (!valid_attr(a) || !c) return EINVAL;
  *c = a->_loom_cluster;
  return 0;
}

int loom_attr_setrestable_np(loom_attr_t* a, int restable) {
  if (!valid_attr(a) || (restable != 0 && restable != 1)) return EINVAL;
  a->_loom_restable = restable;
  return 0;
}

int loom_attr_getrestable_np(const loom_attr_t* a, int* restable) {
  if (!valid_attr(a) || !restable) return EINVAL;
  *restable = a->_loom_restable;
  return 0;
}

int loom_attr_setpriority(loom_attr_t* a, int p) {
  if (!valid_attr(a) || p < LOOM_PRIORITY_HIGH || p > LOOM_PRIORITY_LOW) return EINVAL;
  a->_loom_priority = p;
  return 0;
}

int loom_attr_getpriority(const loom_attr_t* a, int* p) {
  if (!valid_attr(a) || !p) return EINVAL;
  *p = a->_loom_priority;
  return 0;
}

// ---- create, join, detach, exit ----------------------------------------------------

int loom_create(loom_t* thread, const loom_attr_t* attr, void* (*start)(void*), void* arg) {
  loom_attr_t defaults;
  if (!attr) {
    loom_attr_init(&defaults);
    attr = &defaults;
  }
  if (!thread || !start || !valid_attr(attr)) return EINVAL;
  if (attr->_loom_stackaddr && attr->_loom_restable) return EINVAL;  // the caller's stack stays
  Thread* t = new_record();
  if (!t) return EAGAIN;
  t->start = start;
  t->arg = arg;
  t->guardsize = attr->_loom_guardsize;
  t->stack_asked = attr->_loom_stacksize ? attr->_loom_stacksize : default_stack(attr);
  t->priority = attr->_loom_priority;
  FibreAttr fa;
  fibre_attr_of(attr, &fa);  // (valid: see above)
  fa.own_tls = true;  // a thread of the program's: its own thread-locals, where they are on
  fa.tls_on_heap = attr->_loom_restable != 0;
  // loom_setname_np (and pthread_setname_np) write the record's name: the
  // listing, the stall report, gdb and the overflow message read it there.
  // The slot's memory is never freed, so the pointer stays readable.
  fa.name = t->name;
  const bool detached = attr->_loom_detachstate == LOOM_CREATE_DETACHED;
  if (detached) t->state.store(kClaimed | kDetached, std::memory_order_relaxed);
  *thread = t->id;  // before the fibre can run (POSIX)
  live_threads.fetch_add(1, std::memory_order_relaxed);
  threads_created.fetch_add(1, std::memory_order_relaxed);
  bool made = true;
  try {
    // The C-style constructor (fn, void* arg), not the template one: the
    // fibre's fn and arg must be trampoline and t for current_record().
    void* arg = t;
    if (detached) {
      // Detached before it can run: a detached thread that rests at once
      // must find itself detached (made and then detached, one that ran
      // first on another processor got EINVAL: tls_rest, 1 run in 20).
      fa.detached = true;
      loom::Fibre(fa, &trampoline, arg);  // the trampoline frees t
    } else {
      // Built in place: the handle is complete before the fibre can run and
      // call loom_detach(loom_self()); its id is recorded before then too
      // (a colored fibre may wait long for its color before it starts, and
      // once it runs it may detach itself, clearing the handle, and end).
      loom::Fibre* h = new (t->handle_mem) loom::Fibre();
      t->fibre_id.store(rt::FibreMaker::prepare(*h, fa), std::memory_order_relaxed);
      rt::FibreMaker::launch(*h, &trampoline, arg);
    }
  } catch (...) {
    made = false;
  }
  if (!made) {
    live_threads.fetch_sub(1, std::memory_order_relaxed);
    threads_created.fetch_sub(1, std::memory_order_relaxed);
    destroy(t);
    // No memory for its stack: the threads whose end would give some back
    // may be waiting behind the caller, which is likely to try again at
    // once (glibc's would be preempted): let them run first. Outside the
    // handler: a fibre must not switch inside a catch block (the C++
    // runtime's handling state is its kernel thread's where thread-locals
    // are not per fibre: another fibre's exception meets this one).
    if (rt::this_processor()) this_fibre::yield();
    return EAGAIN;
  }
  return 0;
}

// How long a kernel thread's join waits before it looks for glibc's
// cancellation request again.
constexpr Deadline kKernelCancelSliceNs = 50 * 1000 * 1000;

int loom_join(loom_t id, void** retval) {
  Thread* t = nullptr;
  if (int e = check_joinable(id, &t)) return e;
  for (;;) {
    cancel_point();  // a cancellation point, on entry and when a request ended the wait
    if (int e = claim(t)) return e;
    ErrnoKeeper k;
    int e;
    {
      CancellableWait c;  // a request ends the wait (as a timeout would)
      // A kernel thread (a fork child's, whose cancellation is glibc's)
      // looks for a request between slices, as its semaphore waits do.
      e = t->finished.acquire_errno(rt::this_fibre_or_null() ? kForever : rt::now_ns() + kKernelCancelSliceNs);
    }
    if (e == 0) {
      reap(t, retval, true);
      k.done();
      return 0;
    }
    // Not joined: t stays joinable (glibc's rule for a cancelled joiner).
    t->state.fetch_and(~unsigned(kClaimed), std::memory_order_acq_rel);
    k.done();
  }
}

int loom_tryjoin_np(loom_t id, void** retval) {
  Thread* t = nullptr;
  if (int e = check_joinable(id, &t)) return e;
  if (!(t->state.load(std::memory_order_acquire) & kExited)) return EBUSY;
  if (int e = claim(t)) return e;
  ErrnoKeeper k;
  reap(t, retval);  // it has left the trampoline: at most a moment's wait
  k.done();
  return 0;
}

int loom_clockjoin_np(loom_t id, void** retval, clockid_t clock, const struct timespec* abstime) {
  // No time: wait as long as it takes (glibc), on a clock a time could use.
  if (!abstime) return clock == CLOCK_REALTIME || clock == CLOCK_MONOTONIC ? loom_join(id, retval) : EINVAL;
  Thread* t = nullptr;
  if (int e = check_joinable(id, &t)) return e;
  for (;;) {
    cancel_point();  // on entry, and when a request ended the wait (as loom_join)
    if (int e = claim(t)) return e;
    ErrnoKeeper k;
    int e = timed(clock, abstime, EAGAIN, [t](Deadline d) {
      CancellableWait c;
      bool slice = false;  // (a kernel thread's, as loom_join's)
      if (!rt::this_fibre_or_null() && d != kNow) {
        Deadline s = rt::now_ns() + kKernelCancelSliceNs;
        if (d == kForever || s < d) d = s, slice = true;
      }
      int r = t->finished.acquire_errno(d);
      if (r == ETIMEDOUT && (slice || (c.fibre && rt::cancel_pending(static_cast<rt::Fibre*>(c.fibre)))))
        return ECANCELED;  // look for a request, then wait again
      return r;
    });
    if (e == 0) {
      reap(t, retval, true);
      k.done();
      return 0;
    }
    t->state.fetch_and(~unsigned(kClaimed), std::memory_order_acq_rel);  // someone may join later
    k.done();
    if (e != ECANCELED) return e;
  }
}

int loom_timedjoin_np(loom_t id, void** retval, const struct timespec* abstime) {
  return loom_clockjoin_np(id, retval, CLOCK_REALTIME, abstime);
}

int loom_detach(loom_t id) {
  if (id == 0) return ESRCH;
  Thread* t = record_of(id);
  if (!t) return is_slot_handle(id) ? ESRCH : EINVAL;
  if (t->main) return EINVAL;
  if (int e = claim(t)) return e;
  t->handle().detach();
  t->handle().~Fibre();
  if (t->state.fetch_or(kDetached, std::memory_order_acq_rel) & kExited) destroy(t);
  return 0;
}

}  // extern "C"

namespace {
// rt::rest's news that the calling fibre's block moved to the heap (its
// first rest): the thread's record must name the block that stays, not the
// one at the top of the stack it gives back (outside review: getattr of a
// resting thread read another fibre's block, or unmapped memory).
void record_moved(rt::Fibre* from, rt::Fibre* to) {
  if (Thread* t = current_record())
    if (t->fibre.load(std::memory_order_relaxed) == from) t->fibre.store(to, std::memory_order_release);
}
[[maybe_unused]] const bool moved_installed = (rt::rest_block_moved = &record_moved, true);
}  // namespace

int loom::capi::fibre_attr_of(const loom_attr_t* a, FibreAttr* out) noexcept {
  if (!valid_attr(a)) return EINVAL;
  out->stack_size = a->_loom_stacksize;
  out->stack_addr = a->_loom_stackaddr;
  out->priority = static_cast<Priority>(a->_loom_priority);
  out->cluster = reinterpret_cast<loom::Cluster*>(a->_loom_cluster);
  out->color = a->_loom_color;  // loom_attr_setcolor (capi/color.cpp)
  out->color_shared = a->_loom_color_shared != 0;
  return 0;
}

void loom::capi::rest_as_thread(void (*&fn)(void*), void*& arg) noexcept {
  Thread* t = current_record();
  if (!t || t->main || !fn) return;  // (main: rt::rest refuses it)
  t->rest_fn = fn;
  t->rest_arg = arg;
  fn = &trampoline;
  arg = t;
}

extern "C" {

loom_t loom_self(void) {
  if (Thread* t = current_record()) return t->id;
  if (rt::Fibre* f = rt::this_fibre_or_null()) {
    f->c_handle = true;  // the id is the block's address: it may not move (rest refuses)
    return reinterpret_cast<loom_t>(f) | kTagFibre;
  }
  return reinterpret_cast<loom_t>(&thread_anchor) | kTagThread;
}

int loom_equal(loom_t a, loom_t b) { return a == b; }

int loom_yield(void) {
  ErrnoKeeper k;
  this_fibre::yield();
  k.done();
  return 0;
}

void loom_exit(void* retval) {
  if (Thread* t = current_record()) {
    t->retval = retval;
    if (rt::in_signal_handler()) rt::leave_handler_mask();  // it unwinds out of a handler: no sigreturn
    // No cancellation acts while it unwinds (glibc's pthread_exit disables it too).
    if (rt::Fibre* f = rt::this_fibre_or_null()) {
      f->cancel.fetch_or(rt::kCancelActing, std::memory_order_relaxed);
      glibc_word_set(f, kGlibcExiting);  // nor glibc's checks
    }
    unwind_thread(t);  // cleanup handlers and destructors, to the trampoline (main: then exit_main)
  }
  if (rt::Fibre* f = rt::this_fibre_or_null()) {
    std::fprintf(stderr, "loom: loom_exit called by fibre %llu, which loom_create did not make\n",
                 static_cast<unsigned long long>(f->id));
    std::abort();
  }
  while (loom_cleanup_frame* f = other_cleanup) {  // a kernel thread of the system's pthreads
    other_cleanup = f->_loom_prev;
    f->_loom_fn(f->_loom_arg);
  }
  rt::sys::pthread().exit(retval);
}

int loom_once(loom_once_t* once, void (*init)(void)) {
  if (!once || !init) return EINVAL;
  if (__atomic_load_n(&once->_loom_done, __ATOMIC_ACQUIRE)) return 0;
  OnceFlag* flag = object<OnceFlag>(once, [](void* w) { new (w) OnceFlag; });
  ErrnoKeeper k;
  call_once(*flag, [init] { init(); });
  __atomic_store_n(&once->_loom_done, 1, __ATOMIC_RELEASE);
  k.done();
  return 0;
}

int loom_getattr_np(loom_t id, loom_attr_t* a) {
  if (!a) return EINVAL;
  if (id == 0) return ESRCH;
  loom_attr_init(a);
  rt::Fibre* f = nullptr;
  if (Thread* t = record_of(id)) {
    if (t->main) {
      main_stack(&a->_loom_stackaddr, &a->_loom_stacksize);
      a->_loom_guardsize = 0;  // the initial thread has none (glibc)
      f = t->fibre.load(std::memory_order_relaxed);
      if (f) a->_loom_cluster = reinterpret_cast<loom_cluster_t*>(f->cluster->facade);
      return 0;
    }
    a->_loom_detachstate =
        t->state.load(std::memory_order_acquire) & kDetached ? LOOM_CREATE_DETACHED : LOOM_CREATE_JOINABLE;
    a->_loom_guardsize = t->guardsize;
    f = t->fibre.load(std::memory_order_acquire);
  } else if ((id & kTagMask) == kTagFibre) {
    f = reinterpret_cast<rt::Fibre*>(id & ~kTagMask);
  } else {
    return ESRCH;  // a kernel thread's stack is the system's business
  }
  if (f) {
    // A resting fibre has no stack (io::rest): no address, its size kept.
    rt::Stack s = f->stack.loaded();
    a->_loom_stackaddr = s ? s.lo() : nullptr;
    a->_loom_stacksize = f->stack.size;
    if (Thread* t = record_of(id); t && t->stack_asked && t->stack_asked < s.size) {
      // The top stack_asked bytes: the thread's frames and its blocks.
      a->_loom_stacksize = t->stack_asked;
      if (s) a->_loom_stackaddr = s.hi() - t->stack_asked;
    }
    a->_loom_priority = f->priority;
    a->_loom_cluster = reinterpret_cast<loom_cluster_t*>(f->cluster->facade);
  }
  return 0;
}

int loom_setname_np(loom_t id, const char* name) {
  Thread* t = record_of(id);
  if (!t) return ESRCH;
  if (!name) return EINVAL;
  std::size_t n = std::strlen(name);
  if (n >= sizeof t->name) return ERANGE;
  rt::SpinGuard g(names_lock);
  std::memcpy(t->name, name, n + 1);
  t->named = true;
  return 0;
}

int loom_getid_np(loom_t id, uint64_t* out) {
  if (!out) return EINVAL;
  if ((id & kTagMask) == kTagFibre) {  // a fibre loom_create did not make (loom_self's tagged id)
    *out = reinterpret_cast<rt::Fibre*>(id & ~kTagMask)->id;
    return 0;
  }
  for (;;) {
    Thread* t = record_of(id);
    if (!t) return ESRCH;  // null, stale, or a kernel thread's: no fibre id
    std::uint64_t v = t->fibre_id.load(std::memory_order_relaxed);
    // The slot's memory is never freed: a value read from a record that was
    // reaped meanwhile is refused by the generation check.
    if (record_of(id) != t) return ESRCH;
    if (v) {
      *out = v;
      return 0;
    }
    // A detached thread that has not started yet (loom_create returned, or
    // is returning): its fibre sets the id first thing.
    this_fibre::yield();
  }
}

int loom_getname_np(loom_t id, char* name, size_t len) {
  Thread* t = record_of(id);
  if (!t) return ESRCH;
  if (!name) return EINVAL;
  rt::SpinGuard g(names_lock);
  std::size_t n = std::strlen(t->name);
  if (len <= n) return ERANGE;
  std::memcpy(name, t->name, n + 1);
  return 0;
}

int loom_getconcurrency(void) { return concurrency.load(std::memory_order_relaxed); }

int loom_setconcurrency(int level) {
  if (level < 0) return EINVAL;
  concurrency.store(level, std::memory_order_relaxed);
  return 0;
}

// ---- cancellation state, cleanup handlers ------------------------------------------

// The fibre's word follows the record's state (kCancelDisabled); with the
// asynchronous type, a request already pending acts at once when the state
// or type allows it (glibc's rule), else at the next cancellation point.
int loom_setcancelstate(int state, int* old) {
  if (state != LOOM_CANCEL_ENABLE && state != LOOM_CANCEL_DISABLE) return EINVAL;
  Thread* t = current_record();
  int& s = t ? t->cancel_state : other_cancel_state;
  if (old) *old = s;
  rt::Fibre* f = t ? rt::this_fibre_or_null() : nullptr;
  if (f && (f->cancel.load(std::memory_order_relaxed) & rt::kCancelActing)) return 0;  // stays disabled
  s = state;
  if (f) {
    int* w = glibc_word(f);  // glibc's checks follow the state too
    if (state == LOOM_CANCEL_DISABLE) {
      f->cancel.fetch_or(rt::kCancelDisabled, std::memory_order_relaxed);
      if (w) __atomic_fetch_or(w, kGlibcStateDisabled, __ATOMIC_RELAXED);
    } else {
      f->cancel.fetch_and(~rt::kCancelDisabled, std::memory_order_relaxed);
      if (w) __atomic_fetch_and(w, ~kGlibcStateDisabled, __ATOMIC_RELAXED);
      if (t->cancel_type == LOOM_CANCEL_ASYNCHRONOUS && rt::cancel_pending(f)) act_on_cancel(t, f);
    }
  }
  return 0;
}

int loom_setcanceltype(int type, int* old) {
  if (type != LOOM_CANCEL_DEFERRED && type != LOOM_CANCEL_ASYNCHRONOUS) return EINVAL;
  Thread* t = current_record();
  int& s = t ? t->cancel_type : other_cancel_type;
  if (old) *old = s;
  s = type;
  rt::Fibre* f = t ? rt::this_fibre_or_null() : nullptr;
  if (f) {  // (the fibre's own bit: its waits that are no cancellation point read it)
    if (type == LOOM_CANCEL_ASYNCHRONOUS)
      f->cancel.fetch_or(rt::kCancelAsync, std::memory_order_relaxed);
    else
      f->cancel.fetch_and(~rt::kCancelAsync, std::memory_order_relaxed);
  }
  if (f && type == LOOM_CANCEL_ASYNCHRONOUS && rt::cancel_pending(f)) act_on_cancel(t, f);
  return 0;
}

// glibc's rules: ESRCH for a handle that names no thread (joined, or
// detached and ended); a thread that has ended but is not yet joined, a
// detached one, one not yet started and main may all be cancelled (0).
int loom_cancel(loom_t id) {
  Thread* t = record_of(id);
  if (!t) return ESRCH;
  // (main's record knows its fibre from main's first loom_self, which is how
  // its handle reached the canceller.)
  t->cancel_early.store(true, std::memory_order_seq_cst);  // then fibre: the trampoline does the converse
  t->cancel_lock.lock();
  if (!t->cancel_closed)
    if (rt::Fibre* f = t->fibre.load(std::memory_order_seq_cst)) {
      rt::request_cancel(f);
      // glibc's own cancellation points see it too. Main only when it asks
      // itself: glibc's outermost buffer on main is its own (its main's
      // caller), which ends the kernel thread; on main it is redirected first.
      // One already inside such a call, blocked in the kernel (its word's
      // asynchronous bit set before ours landed, so glibc's own check on
      // entry came too early), is interrupted there as glibc would.
      if (glibc_cancel && (!t->main || (f == rt::this_fibre_or_null() && redirect_main_landing()))) {
        int was = glibc_word_set(f, kGlibcCanceled);
        if ((was & (kGlibcStateDisabled | kGlibcAsync | kGlibcCanceled | kGlibcExiting)) == kGlibcAsync &&
            f != rt::this_fibre_or_null())
          glibc_cancel->interrupt(f);
      }
    }
  t->cancel_lock.unlock();
  if (t == current_record()) {
    rt::Fibre* f = rt::this_fibre_or_null();
    if (t->cancel_type == LOOM_CANCEL_ASYNCHRONOUS && rt::cancel_pending(f)) act_on_cancel(t, f);
  }
  return 0;
}

void loom_testcancel(void) { cancel_point(); }

void loom_cleanup_push_frame(struct loom_cleanup_frame* f, void (*fn)(void*), void* arg) {
  Thread* t = current_record();
  f->_loom_fn = fn;
  f->_loom_arg = arg;
  f->_loom_owner = t;
  f->_loom_prev = t ? t->cleanup : nullptr;
  if (t) {
    t->cleanup = f;
  } else if (!rt::this_fibre_or_null()) {
    f->_loom_owner = &other_cleanup;
    f->_loom_prev = other_cleanup;
    other_cleanup = f;
  }
}

void loom_cleanup_pop_frame(struct loom_cleanup_frame* f, int execute) {
  if (f->_loom_owner == &other_cleanup) {
    other_cleanup = f->_loom_prev;
  } else if (auto* t = static_cast<Thread*>(f->_loom_owner)) {
    t->cleanup = f->_loom_prev;
  }
  if (execute) f->_loom_fn(f->_loom_arg);
}

// ---- keys ---------------------------------------------------------------------------

int loom_key_create(loom_key_t* key, void (*destructor)(void*)) {
  if (!key) return EINVAL;
  Key k = 0;
  int e = key_create(&k, destructor);
  if (e == 0) *key = k;
  return e;
}

int loom_key_delete(loom_key_t key) { return key_delete(key); }

void* loom_getspecific(loom_key_t key) { return get_specific(key); }

int loom_setspecific(loom_key_t key, const void* value) { return set_specific(key, value); }

}  // extern "C"

// The program's own system call (syscall(2)) on a fibre whose cancellation
// is enabled and asynchronous: glibc's window for its own cancellation
// points (__pthread_enable_asynccancel, __pthread_disable_asynccancel)
// around it, in the fibre's word. A request then finds the bit and
// interrupts the kernel thread running the fibre (loom_cancel below; cancel.
// cpp's on_sigcancel unwinds from inside the call). Setting and clearing
// the bit are atomic against the request's setting of kGlibcCanceled, so
// one side sees the other: a request that came first acts on entry, one
// whose signal the call's end outran acts on leaving.
int* loom::capi::async_call_enter() {
  rt::Fibre* f = rt::this_fibre_or_null();
  if (!f || (f->cancel.load(std::memory_order_relaxed) & (rt::kCancelAsync | rt::kCancelDisabled | rt::kCancelActing)) !=
                rt::kCancelAsync)
    return nullptr;
  Thread* t = current_record();
  int* w = t ? glibc_word(f) : nullptr;
  if (!w) return nullptr;
  int was = __atomic_fetch_or(w, kGlibcAsync, __ATOMIC_SEQ_CST);
  if (was & kGlibcCanceled) {
    __atomic_fetch_and(w, ~kGlibcAsync, __ATOMIC_SEQ_CST);
    if (rt::cancel_pending(f)) act_on_cancel(t, f);
    return nullptr;
  }
  return w;
}

void loom::capi::async_call_leave(int* w) {
  int was = __atomic_fetch_and(w, ~kGlibcAsync, __ATOMIC_SEQ_CST);
  if (!(was & kGlibcCanceled)) return;
  rt::Fibre* f = rt::this_fibre_or_null();
  Thread* t = current_record();
  if (t && rt::cancel_pending(f)) act_on_cancel(t, f);
}
