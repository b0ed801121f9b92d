// sched/processor.hpp — a processor: one kernel thread running fibres.
//
// Switching. Every switch goes through Processor::switch_to(next, post, arg):
// the running fibre stops, `next` runs, and the first thing `next` does is
// run post(prev, arg) — on the processor that made the switch, after prev's
// context has been saved. Anything that makes prev visible to other
// processors (putting it in a ready queue, registering it as a waiter,
// unlocking the lock that guards a wait list, freeing a dead fibre's stack)
// is such a post action. That is DESIGN.md invariant 1, "publish after
// save": a processor that finds prev can always resume it, because by then
// its registers are on its stack.
//
// Finding work, in order: local ready queue → cluster staging → steal from
// busy processors (longest busy first, or as the cluster's StealPolicy says)
// → cluster background queue → sleep. Every 64th pick looks at staging first
// so that new fibres and arrivals are not starved by two fibres that keep
// yielding to each other.
//
// Idle (invariant 3, "no lost wake-up"): a processor that found nothing
// marks itself idle (seq_cst) *before* its last look at the queues; whoever
// pushes work marks the queue (seq_cst) *before* checking the idle mark.
// One of the two sees the other; WakeFlag keeps a wake that arrives before
// the sleep.
//
// Thread-locals (invariant 4): the running processor is a thread-local, and
// a fibre may resume on another kernel thread after any switch. It is read
// only through this_processor(), an out-of-line function, so the compiler
// cannot keep its address from before a switch.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "base/futex.hpp"
#include "context/stack.hpp"
#include "sched/fibre.hpp"
#include "sched/ready_queue.hpp"
#include "sched/stats.hpp"

namespace loom::rt {

struct StallProbe;

class Cluster;
class Extension;
// Runs on `here`, the processor that made the switch, right after it.
using PostFn = void (*)(Processor& here, Fibre* prev, void* arg);

enum class ListState : unsigned char { none, busy, idle };

class Processor {
 public:
  // adopt: the calling thread becomes this processor and keeps running its
  // current code as a fibre; otherwise a new kernel thread is started.
  // spare: one of the cluster's spare processors (Cluster::activate_spare),
  // started wanted.
  Processor(Cluster& cluster, unsigned index, bool adopt, bool spare = false);
  // A spare whose kernel thread could not be made (the error): it is on no
  // list and never runs (Cluster::activate_spare keeps it aside).
  int start_error() const noexcept { return start_error_; }

  Cluster& cluster() const { return *cluster_; }
  unsigned index() const { return index_; }
  // The logical PU of topo::machine() this processor was given (round robin
  // in creation order); its thread is pinned there when config().pin.
  unsigned pu() const { return pu_; }
  Fibre* current() const { return current_; }

  // Switches to `next`, which runs post(prev, arg) first.
  void switch_to(Fibre* next, PostFn post, void* arg, bool dying = false);
  // The running fibre stops; post(self, arg) publishes it wherever it must
  // wait. Runs the next ready fibre, or the idle loop; on every 16th pick
  // with timers pending, that fibre fires them once post() has run (post
  // releases the primitive's lock that a firing timer may take).
  void suspend(PostFn post, void* arg);
  // The resumed side of a switch: the timers suspend() left to it.
  void fire_timers_left();
  void yield();
  // The next fibre to run without sleeping or stealing (local, staging);
  // fires due timers on every 16th call unless told not to (a caller that
  // holds a primitive's lock must not: timers take those locks).
  Fibre* next_ready(unsigned max_level = kPriorities - 1, bool fire_timers = true);
  // Pushes onto this processor's ready queue and wakes it if it sleeps.
  void push(Fibre* f);
  // push() by the processor itself: nobody to wake.
  void push_local(Fibre* f);
  ReadyQueue& ready_queue() { return *rq_; }

  StackCache& stacks() { return stacks_; }
  std::uint64_t stack_cache_hits() const { return stacks_.hits(); }
  std::uint64_t stack_cache_misses() const { return stacks_.misses(); }
  Fibre& idle_fibre() { return idle_; }
  void request_stop();
  void join_thread();
  void retire();  // after join_thread: frees the stacks and signal stack

  // The processor's counters (sched/stats.hpp), written only by its own
  // thread, except wakes (below): per processor, so that counting costs no
  // shared cache line.
  alignas(64) Counters counters;
  // The fibre running now, for the stall detector (sched/stall.cpp): its id
  // (0 for the idle loop) and name, stored at every switch by the owner.
  std::atomic<std::uint64_t> running_id{0};
  std::atomic<const char*> running_name{nullptr};
  std::atomic<pid_t> tid{0};  // the kernel thread's id (read by the monitor)
  std::atomic<StallProbe*> stall_probe{nullptr};  // made by the detector
  LiveFibres live;  // fibres this processor started (sched/stats.hpp)
  unsigned placed = 0;  // new fibres it placed round-robin in its cluster (Cluster::place_new)

  // What others write (wakers, and the cluster under its list lock), on
  // cache lines apart from the owner's counters above and its private state.
  alignas(64) std::atomic<std::uint64_t> wakes{0};  // by whoever wakes it
  ListState list_state = ListState::none;
  Processor* list_prev = nullptr;
  Processor* list_next = nullptr;
  std::atomic<bool> idle{false};  // on the idle list (read by pushers)
  std::atomic<bool> spinning{false};  // in spin_for_work
  WakeFlag wake_flag;
  // Wakes the processor from its sleep, on the futex or in an extension.
  void wake_up() noexcept;
  std::atomic<Extension*> sleeping_in{nullptr};  // the extension p sleeps in (sched/extension.hpp)
  // The monitor's (sched/monitor.cpp; DESIGN.md, "Lost processors"):
  // lost: its kernel thread has not passed through the scheduler for the
  // bound, blocked in the kernel or held by a fibre, while fibres wait
  // (thieves may take them even with stealing off). A spare's wanted: the
  // monitor wants it to take work; parked: off the lists, asleep, its queue
  // handed to the processors (pushes that reach it wake it: Cluster::wake).
  std::atomic<bool> lost{false};
  // ... the system call its kernel thread was in when the monitor found it
  // lost, from the kernel's record; -1 when on a CPU (for the listing).
  std::atomic<long> lost_call{-1};
  std::atomic<bool> wanted{false};
  std::atomic<bool> parked{false};
  bool spare() const { return spare_; }
  // A spare at work now: since when (now_ns()); 0 when parked.
  std::int64_t active_since() const {
    return parked.load(std::memory_order_relaxed) ? 0 : active_since_.load(std::memory_order_relaxed);
  }

  // Per-fibre TLS (sched/tls.hpp), on the adopted processor: from now on its
  // kernel thread's block `main_tcb` is main()'s, and `home` is the block of
  // its idle loop and the runtime's fibres.
  void adopt_home_tcb(void* home, void* main_tcb) noexcept;
  // The block glibc knows this kernel thread by (on its list of threads):
  // its own, or for processor 0 main()'s. Read by signal handlers.
  void* kernel_tcb() const noexcept { return kernel_tcb_; }

 private:
  void push_owned(Fibre* f);  // onto own_rq_'s local FIFO, in a section of its own
  friend void processor_idle_entry(transfer_t);
  static void* thread_main(void* self);
  void idle_loop();
  // A spare the monitor no longer wants: off the lists until it is wanted
  // again, its queue handed to the cluster's processors.
  void park();
  // Looks for work for up to spin_budget_ns_ before the processor sleeps.
  Fibre* spin_for_work();
  // Another processor of the cluster in spin_for_work, if any (a hint).
  Processor* spinning_sibling() const;
  Fibre* find_work(bool last_look = false);
  void run(Fibre* f);
  void enter_thread();  // per-thread set-up on the processor's kernel thread

 public:
  // Names its kernel thread Cluster::thread_prefix() + index: on the thread
  // itself (`own`), or from another one (a thread it started; never the
  // adopted main thread).
  void name_thread(bool own);

 private:

  alignas(64) Cluster* cluster_;
  unsigned index_;
  bool spare_;
  std::atomic<std::int64_t> active_since_{0};  // a spare: when it last took up work (read by the stats)
  unsigned pu_;
  ReadyQueue own_rq_;
  ReadyQueue* rq_;
  Fibre* current_ = nullptr;
  Fibre idle_;        // the idle loop's fibre
  Fibre main_;        // the adopted thread's original code (adopt only)
  Stack idle_stack_;  // adopt only: the idle loop needs a stack of its own
  StackCache stacks_;
  unsigned tick_ = 0;
  std::int64_t spin_max_ns_ = 0;     // SchedConfig::spin_us
  std::int64_t spin_budget_ns_ = 0;  // this idle period's spin (spin_for_work)
  bool timers_due_ = false;      // suspend() left due timers to the fibre it switched to
  std::uint64_t last_look_ = 0;  // TSC of the extensions' last busy_pick
  std::atomic<bool> stop_{false};
  pthread_t thread_{};
  bool has_thread_ = false;
  int start_error_ = 0;  // a spare whose kernel thread could not be made
  void* altstack_ = nullptr;
  void* home_tcb_ = nullptr;       // the block of fibres without one (sched/tls.hpp)
  void* installed_tcb_ = nullptr;  // the block installed on this kernel thread now
  void* kernel_tcb_ = nullptr;     // the kernel thread's own block, as glibc lists it
};

// The processor the calling kernel thread is, or nullptr (out of line: see
// invariant 4 above).
Processor* this_processor() noexcept;

extern thread_local Processor* tls_processor __attribute__((tls_model("initial-exec")));
// The same, inline: only for the first read in an entry point, before the
// function has switched (a compiler may keep this address across a switch
// later in the same function; this_processor() cannot be cached so).
inline Processor* this_processor_at_entry() noexcept { return tls_processor; }
// The running fibre, or nullptr on a kernel thread that is not a processor.
Fibre* this_fibre_or_null() noexcept;
// The calling fibre stays on the processor (so the kernel thread) it runs
// on now, for good: never stolen, always woken there. For a fibre the
// kernel ties to its kernel thread (a ptrace tracer: capi/pthread/
// setxid.cpp). A spare processor hands its fibres to the cluster's when it
// parks, pinned or not. No-op on a kernel thread that is not a processor.
void pin_this_fibre() noexcept;

// Wake-ups deferred while a batch of fibres is made ready (the poller): each
// processor that received work is woken once, when the batch ends.
class WakeDefer {
 public:
  WakeDefer() noexcept;
  ~WakeDefer();
  WakeDefer(const WakeDefer&) = delete;
  WakeDefer& operator=(const WakeDefer&) = delete;
  void add(Processor* p);

 private:
  static constexpr unsigned kMax = 32;
  WakeDefer* outer_;
  Processor* procs_[kMax];
  unsigned n_ = 0;
};
extern thread_local WakeDefer* tls_wake_defer;

// Makes a blocked or new fibre runnable where it belongs: its affinity
// processor, or the staging queue of its cluster, or the background queue.
void schedule(Fibre* f);

}  // namespace loom::rt
