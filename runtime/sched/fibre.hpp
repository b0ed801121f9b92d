// sched/fibre.hpp — the fibre control block.
//
// A Fibre lives at the top of its own stack (so creating one maps nothing
// but the stack, and the stack comes from the processor's cache). Native
// fibres — main() and the processors' idle loops on their kernel threads'
// own stacks — have no mmap'ed stack and live elsewhere.
//
// Join protocol (the `join` word): 0 while running; a joiner stores itself
// there (kJoinForeign for a kernel thread) or detach() stores kJoinDetached.
// The fibre's exit is a post-switch action (it runs after the dying fibre is
// off its stack, DESIGN.md invariant 1) that exchanges kJoinDone in and acts
// on what it found: wakes the joiner, or frees a detached fibre's stack. A
// joiner registers itself also in a post-switch action, after its context
// is saved, so the exiting fibre can never resume a joiner that is still
// running. Whoever sees the other's mark second does the work: exactly one.
#pragma once

#include <atomic>
#include <cstdint>

#include "context/context.hpp"
#include "context/stack.hpp"
#include "loom/fibre.hpp"
#include "loom/sync.hpp"

namespace loom::rt {

class Processor;
class Cluster;
struct LiveFibres;

// What a blocked fibre waits for, for the fibre listing (loom::dump_fibres):
// noted by the fibre just before it suspends, cleared when it runs again.
enum class WaitKind : unsigned char {
  none,
  mutex,
  condvar,
  semaphore,
  rwlock_read,
  rwlock_write,
  barrier,
  sleep,
  join,      // object: the fibre it joins
  fd_in,     // object: the descriptor, as an integer
  fd_out,
  poll,      // poll/select/epoll_wait on the program's descriptors
  pthread,   // a pthread object of libloom-pthread (object: its address)
  pthread_mutex,  // libloom-pthread's pthread_mutex_t (object: its address; its holder is named)
  futex,     // a futex word of the program's (atomic::wait, std::latch...: libloom-pthread)
  color,     // a colored fibre waiting for its color
  runtime,   // the runtime's own fibres (event runner, poller) between jobs
  offload,   // a call made on the offload cluster (object: its name, a string literal);
             // fd_in, fd_out and poll are noted there too, with offload_home set
  rest,      // resting on a descriptor with no stack (io/rest.hpp; object: the descriptor)
  channel,   // a loom::Channel's push or pop (object: the channel)
};
const char* to_string(WaitKind k) noexcept;

inline constexpr std::uintptr_t kJoinRunning = 0;
inline constexpr std::uintptr_t kJoinDone = 1;
inline constexpr std::uintptr_t kJoinDetached = 2;
inline constexpr std::uintptr_t kJoinForeign = 3;
// A timed joiner (Fibre::join_until, sync/join.cpp) stores the address of
// its record with this bit set; above kJoinForeign, so never a Fibre*.
// Exit exchanges it out and calls wake_timed_joiner; the joiner's timer
// competes for it with a CAS back to kJoinRunning: one of them wins.
inline constexpr std::uintptr_t kJoinTimedTag = 1;
void wake_timed_joiner(std::uintptr_t w) noexcept;

class Fibre {
 public:
  std::atomic<Fibre*> next{nullptr};  // ready-queue link (intrusive)
  Context ctx;
  Stack stack;                 // empty for native fibres
  Processor* affinity = nullptr;  // where it runs and returns when unblocked
  Cluster* cluster = nullptr;
  unsigned char priority = 1;
  bool background = false;
  std::atomic<std::uintptr_t> join{kJoinRunning};
  std::atomic<int> done{0};  // futex word for a foreign (kernel-thread) joiner
  void (*fn)(void*) = nullptr;
  void* arg = nullptr;
  std::uint64_t id = 0;
  const char* name = nullptr;
  void* specific = nullptr;  // fibre-local key values (sync/keys.cpp)
  // What a layer above holds for this fibre (opaque here; the color layer's
  // color hold): if set when the fibre is started, fibre_held_start_hook
  // places it instead of the cluster; at exit fibre_held_exit_hook runs.
  void* held = nullptr;
  bool pinned = false;  // never stolen: stays on its affinity processor
  // The block lives on the heap, in a RestBlock (io/rest.hpp), not at the
  // top of its stack: the fibre has rested, and each restart gives it a
  // stack from the cache. Freed with the stack at exit.
  bool rest_block = false;
  // loom_self() handed out this block's address as the fibre's C id (a
  // fibre loom_create did not make): the block must not move, so it may
  // not rest (io/rest.cpp), as a joinable fibre may not.
  bool c_handle = false;
  // Its own CPU time is kept (sched/cpu_clock.hpp): switches into and out
  // of it read the kernel thread's CPU clock. cpu_mark: that clock when it
  // last came in (0: not since it was timed); cpu_ns: the total before.
  // cpu_tid: the kernel thread it came in on (another thread's read adds
  // the stretch it is running by that thread's clock).
  std::atomic<bool> cpu_timed{false};
  std::atomic<std::uint64_t> cpu_mark{0};
  std::atomic<std::uint64_t> cpu_ns{0};
  std::atomic<int> cpu_tid{0};
  // Its thread control block (sched/tls.hpp), installed whenever it runs;
  // null: it runs on its processor's home block.
  void* tcb = nullptr;
  // The heap allocation that holds tcb (FibreAttr::tls_on_heap), freed with
  // the fibre; null when the block sits at the top of the stack.
  void* tcb_heap = nullptr;

  // Diagnostics: what it waits for (WaitKind) and the live-fibre list it is
  // on (sched/stats.hpp), from start to exit.
  std::atomic<WaitKind> wait_kind{WaitKind::none};
  std::atomic<const void*> wait_object{nullptr};
  // The wait's deadline (kForever: none), stored by wait_on after
  // note_wait reset it: the listing says how long is left, or how long
  // overdue a wait whose timer a busy processor has not run.
  std::atomic<Deadline> wait_deadline{kForever};
  // The loom::io call it made last (its function's name, a literal), for
  // a wait on a descriptor: "blocked: fd 7 (accept4)".
  std::atomic<const char*> wait_call{nullptr};
  // Cancellation (sched/cancel.hpp): kCancelRequested set by any thread,
  // kCancelDisabled and kCancelActing by the fibre itself. Read with one
  // load at each blocking point that is a cancellation point.
  std::atomic<unsigned> cancel{0};
  // Set by the C API just before a wait that is a cancellation point on a
  // loom::CondVar or Semaphore (sync/wait.hpp): the next wait_on takes it
  // and publishes its record in cancel_waiter while it waits.
  bool cancel_wait = false;
  std::atomic<void*> cancel_waiter{nullptr};
  // While it makes a call on the offload cluster (io/offload.cpp): the
  // cluster and processor it left, where the listing shows it, blocked in
  // that call (wait_kind) — not running on a processor of the offload
  // cluster. Null otherwise; -1: no processor of its own to return to.
  std::atomic<Cluster*> offload_home{nullptr};
  std::atomic<int> offload_proc{-1};
  Fibre* live_prev = nullptr;
  Fibre* live_next = nullptr;
  LiveFibres* live_in = nullptr;
};

// The calling fibre is about to suspend waiting for `kind` (no-op on a kernel
// thread that is not a processor).
void note_wait(WaitKind kind, const void* object) noexcept;

// The holder a mutex records, for the listing's "held by fibre N": a
// loom::Mutex's owner (rt::identity()), and, set by libloom-pthread
// (capi/pthread/sync.cpp), a pthread_mutex_t's — a fibre, or for the
// normal and adaptive kinds the holder's thread pointer (*is_tcb set),
// which is its fibre's own block where each thread has one. Read while the
// process runs: a moment's answer, never dereferenced as a fibre.
struct MutexHolder {
  static const void* of(const Mutex& m) noexcept;
};
extern const void* (*pthread_mutex_holder)(const void* m, bool* is_tcb);
// Whether a mutex is a descriptor's turn (io/fd_table.hpp: fibres sharing
// one descriptor in one direction take turns), and whose: the listing says
// "fd N (read), waiting its turn" instead of a mutex's address (set by
// io/fd_table.cpp; may be null).
extern bool (*fd_turn_of)(const void* m, int* fd, bool* out);

// Called at a fibre's exit, on the fibre, when it has key values.
extern void (*fibre_exit_hook)(Fibre*);
// A fibre with `held` set: started by the layer that set it (it makes the
// fibre runnable when it chooses), and its hold released at exit, on the
// fibre, after the key destructors.
extern void (*fibre_held_start_hook)(Fibre*);
extern void (*fibre_held_exit_hook)(Fibre*);

// Creates a fibre whose control block and `payload` bytes sit at the top of
// a fresh stack; *payload_out receives the payload's address. Not yet
// runnable: start_fibre() places it.
Fibre* create_fibre(const FibreAttr& attr, std::size_t payload, std::size_t align, void** payload_out);
void start_fibre(Fibre* f, void (*fn)(void*), void* arg);
// Frees a fibre that never started, or that finished and was joined.
void release_fibre(Fibre* f) noexcept;
// Frees a rest_block fibre's block (set by io/rest.cpp).
extern void (*rest_block_free)(Fibre*);
// Told, on the resting fibre, that its block moves from `from` (the top of
// its stack) to `to` (the heap) at its first rest, before the switch; the C
// API points its thread record there (set by capi/thread.cpp; may be null).
extern void (*rest_block_moved)(Fibre* from, Fibre* to);
// Waits for f to end (join's wait): it is not freed, and a later
// join_fibre only frees it.
void wait_fibre(Fibre* f);
void join_fibre(Fibre* f);  // wait_fibre, then release_fibre
void detach_fibre(Fibre* f) noexcept;
// A process-unique, never reused fibre id.
std::uint64_t next_fibre_id() noexcept;
// Prepares f's context to start in the runtime's fibre entry on [lo, lo+size).
void start_fibre_context(Fibre* f, void* lo, std::size_t size);
// A rested fibre made runnable with no stack (io/rest.hpp: no saved context)
// gets one of its stack.size from p's cache, and a context to start at its
// fn: by the processor about to switch to it.
void give_stack(Processor& p, Fibre& f);

}  // namespace loom::rt
