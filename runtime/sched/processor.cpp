#include "sched/processor.hpp"
#include "sched/cpu_clock.hpp"
#include "base/check.hpp"
#include "base/chaos.hpp"
#include "sched/checks.hpp"
#include "base/sys.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <x86intrin.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "sched/cluster.hpp"
#include "sched/extension.hpp"
#include "sched/overflow.hpp"
#include "sched/signals.hpp"
#include "sched/tls.hpp"
#include "topo/topo.hpp"

namespace loom::rt {

// initial-exec: one %fs-relative load, no __tls_get_addr call through the
// shared library (a profile of libfibre found 11% of yield in such lookups).
thread_local Processor* tls_processor __attribute__((tls_model("initial-exec"))) = nullptr;

namespace {

// What a switching fibre leaves for the next one: lives on the old fibre's
// stack, which stays frozen until the post action has published it.
struct SwitchNote {
  Fibre* prev;
  PostFn post;
  void* arg;
  Processor* here;  // the switching processor, which also runs post
};

// Returns the processor the switch happened on (the note lives on prev's
// stack, which post may free).
inline Processor* after_switch(transfer_t t) {
  auto* note = static_cast<SwitchNote*>(t.data);
  Fibre* prev = note->prev;
  PostFn post = note->post;
  void* arg = note->arg;
  Processor* here = note->here;
  // Saved: from here on prev may be published. (Atomic, relaxed: a plain
  // store; the fibre listing reads it from another thread for "used".)
  __atomic_store_n(&prev->ctx.fctx, t.fctx, __ATOMIC_RELAXED);
  if (post) post(*here, prev, arg);
  return here;
}

// A yielding fibre goes to the back of the queue it would be placed in if it
// were new: under work sharing that is the staging queue, or two fibres that
// yield to each other through the local queue would starve staged ones.
void post_requeue(Processor& here, Fibre* prev, void*) {
  if (prev->pinned)
    here.push_local(prev);  // never to staging: another processor would take it
  else if (prev->background)
    prev->cluster->push_background(prev);
  else if (prev->cluster->config().placement == Placement::share)
    prev->cluster->push_staging(prev);
  else
    here.push_local(prev);
}

}  // namespace

__attribute__((noinline)) Processor* this_processor() noexcept {
  Processor* p = tls_processor;
  asm volatile("" ::: "memory");
  return p;
}

void note_wait(WaitKind kind, const void* object) noexcept {
  Processor* p = tls_processor;
  if (!p) return;
  Fibre* f = p->current();
  f->wait_object.store(object, std::memory_order_relaxed);
  f->wait_deadline.store(kForever, std::memory_order_relaxed);
  f->wait_kind.store(kind, std::memory_order_relaxed);
}

__attribute__((noinline)) Fibre* this_fibre_or_null() noexcept {
  Processor* p = tls_processor;
  return p ? p->current() : nullptr;
}

void pin_this_fibre() noexcept {
  Processor* p = this_processor();
  if (!p) return;
  Fibre* f = p->current();
  if (f == &p->idle_fibre() || f->pinned) return;
  f->affinity = p;  // (running: no waker reads it until it waits)
  f->pinned = true;
}

// ---- fibre start and exit --------------------------------------------------

namespace {

[[noreturn]] void fibre_exit();

void post_exit(Processor&, Fibre* prev, void*) {
  prev->cluster->fibres.fetch_sub(1, std::memory_order_relaxed);
  context_destroy(prev->ctx);
  LOOM_CHAOS_POINT(post_exit);
  std::uintptr_t w = prev->join.exchange(kJoinDone, std::memory_order_acq_rel);
  if (w == kJoinDetached) {
    release_fibre(prev);
  } else if (w == kJoinForeign) {
    // The joiner unmaps the stack as soon as it sees `done`: touch nothing
    // of prev after this store. A wake that finds the page gone fails with
    // EFAULT, harmlessly.
    std::atomic<int>* word = &prev->done;
    word->store(1, std::memory_order_release);
    futex_wake(word, 1);
  } else if (w & kJoinTimedTag) {
    wake_timed_joiner(w);  // (sync/join.cpp)
  } else if (w != kJoinRunning) {
    schedule(reinterpret_cast<Fibre*>(w));
  }
}

void post_exit_to_joiner(Processor&, Fibre* prev, void*) {
  prev->cluster->fibres.fetch_sub(1, std::memory_order_relaxed);
  context_destroy(prev->ctx);
  prev->join.store(kJoinDone, std::memory_order_release);
}

void fibre_entry(transfer_t t) {
  Fibre* self = this_processor()->current();
  self->wait_kind.store(WaitKind::none, std::memory_order_relaxed);
  context_arrived(self->ctx);
  after_switch(t)->fire_timers_left();
  // (Not again when a rested fibre is continued: its block was started.)
  if (self->tcb && !self->rest_block) tls::thread_start(self);
  try {
    self->fn(self->arg);
  } catch (...) {
    std::fprintf(stderr, "loom: exception escaped fibre %llu%s%s\n", (unsigned long long)self->id,
                 self->name ? " " : "", self->name ? self->name : "");
    std::terminate();
  }
  if (self->specific && fibre_exit_hook) fibre_exit_hook(self);
  if (self->held && fibre_held_exit_hook) fibre_held_exit_hook(self);
  if (stack_watermark) report_high_water(*self);
  live_remove(self);
  if (self->tcb) tls::thread_end(self);  // last: nothing after it may malloc on this fibre
  fibre_exit();
}

[[noreturn]] void fibre_exit() {
  Processor* p = this_processor();
  Fibre* self = p->current();
  p->counters.add(Stat::fibres_finished);
  std::uintptr_t w = self->join.load(std::memory_order_acquire);
  auto* joiner = reinterpret_cast<Fibre*>(w);
  LOOM_CHAOS_POINT(exit_handover);
  // A pinned joiner (a color runner) is never handed a foreign processor:
  // it would run on this kernel thread while it serves its own processor's
  // color core, and push colored fibres onto a queue it does not own (issue
  // 25, bug 1). post_exit schedules it on its own processor instead.
  if (w > kJoinForeign && !(w & kJoinTimedTag) && joiner->cluster == &p->cluster() && !joiner->background &&
      (!joiner->pinned || joiner->affinity == p)) {
    // The joiner is parked (it registered after its context was saved):
    // hand the processor straight to it.
    __atomic_store_n(&joiner->affinity, p, __ATOMIC_RELEASE);
    p->switch_to(joiner, &post_exit_to_joiner, nullptr, true);
  } else {
    Fibre* next = p->next_ready();
    p->switch_to(next ? next : &p->idle_fibre(), &post_exit, nullptr, true);
  }
  __builtin_unreachable();
}

}  // namespace

void processor_idle_entry(transfer_t t) {
  Processor* p = this_processor();
  context_arrived(p->idle_.ctx);
  after_switch(t);
  p->idle_loop();
  std::fprintf(stderr, "loom: the main thread's processor cannot stop\n");
  std::abort();
}

void start_fibre_context(Fibre* f, void* lo, std::size_t size) { context_make(f->ctx, lo, size, &fibre_entry); }

// ---- Processor ----------------------------------------------------------------

Processor::Processor(Cluster& cluster, unsigned index, bool adopt, bool spare)
    : cluster_(&cluster), index_(index), spare_(spare), pu_(spare ? 0 : topo::assign_pu()), own_rq_(cluster.config().queue, /*owned=*/true, cluster.config().steal_fence) {
  rq_ = cluster.shared_queue() ? cluster.shared_queue() : &own_rq_;
  spin_max_ns_ = spin_budget_ns_ = std::int64_t(cluster.config().spin_us) * 1000;
  idle_.cluster = &cluster;
  idle_.affinity = this;
  idle_.name = "idle loop";
  if (adopt) {
    enter_thread();
    context_adopt_thread(main_.ctx);
    main_.cluster = &cluster;
    main_.affinity = this;
    main_.name = "main";
    main_.id = next_fibre_id();
    cluster.fibres.fetch_add(1, std::memory_order_relaxed);
    current_ = &main_;
    running_id.store(main_.id, std::memory_order_relaxed);
    running_name.store(main_.name, std::memory_order_relaxed);
    live_add(&main_);
    idle_stack_ = stack_allocate(kStackDefault);
    context_make(idle_.ctx, idle_stack_.lo(), idle_stack_.size, &processor_idle_entry);
    cluster.go_busy(*this);
  } else {
    // Busy from birth: work may be pushed to it before its thread runs, and
    // a thief only looks at processors on the busy list.
    cluster.go_busy(*this);
    if (spare) {
      wanted.store(true, std::memory_order_relaxed);
      active_since_.store(now_ns(), std::memory_order_relaxed);
    }
    // Born with the process's signals blocked (signals_to_main): a thread
    // inherits its creator's mask, and one the kernel had not yet run when
    // a signal came, still with main's mask from before main(), took it —
    // the default action killed the process (native_signals, 10-45 % of
    // runs on 2 processors). thread_main sets the rest of its mask.
    sigset_t old;
    const bool shield = signals_to_main();
    if (shield) {
      sigset_t born;
      (sys::pthread().sigmask)(SIG_SETMASK, nullptr, &born);
      block_process_signals(born);
      (sys::pthread().sigmask)(SIG_SETMASK, &born, &old);
    }
    const int created = sys::create_thread(&thread_, &Processor::thread_main, this);
    if (shield) (sys::pthread().sigmask)(SIG_SETMASK, &old, nullptr);
    if (int e = created) {
      if (spare) {
        // No kernel thread to spare (out of memory or threads: RLIMIT_AS,
        // RLIMIT_NPROC): the cluster goes on without it (start_failed).
        cluster.leave(*this);
        start_error_ = e;
        return;
      }
      std::fprintf(stderr, "loom: cannot start a processor thread for cluster %u: error %d\n", cluster.id(), e);
      std::abort();
    }
    has_thread_ = true;
    // Now, not when the thread first runs: the name is there once the
    // cluster is. Not a spare's: naming another thread opens its /proc
    // file, and a spare starts at any moment of a program's run (a number
    // the program counted on, taken for that moment: stall.cpp's files).
    // It names itself (thread_main), by prctl.
    if (!spare) name_thread(false);
  }
}

void Processor::retire() {
  stacks_.clear();
  leave_signal_stack(altstack_);
  altstack_ = nullptr;
}

void Processor::enter_thread() {
  tls_processor = this;
  LOOM_CHAOS_NAME_THREAD((std::uint64_t(cluster_->id()) << 16) | index_);
  home_tcb_ = installed_tcb_ = kernel_tcb_ = tls::current();
  tid.store(pid_t(::syscall(SYS_gettid)), std::memory_order_relaxed);
  altstack_ = enter_signal_stack();
  if (cluster_->config().pin && !spare_) topo::pin_current_thread(pu_);  // (a spare shares the CPUs)
}

void Processor::name_thread(bool own) {
  if (!own && !has_thread_) return;
  for (;;) {
    const char* prefix = cluster_->thread_prefix();
    char name[16];  // the kernel's limit, with the NUL
    // A spare: the prefix, '+' and its number among the spares ("loom/P+0").
    if (spare_)
      std::snprintf(name, sizeof name, "%s+%u", prefix, index_ - unsigned(Cluster::kMaxProcessors));
    else
      std::snprintf(name, sizeof name, "%s%u", prefix, index_);
    sys::pthread().setname_np(own ? sys::pthread().self() : thread_, name);
    if (!own || cluster_->thread_prefix() == prefix) return;
  }
}

void* Processor::thread_main(void* self) {
  auto* p = static_cast<Processor*>(self);
  // A spare is started by the monitor, whose thread blocks every signal:
  // it takes the mask the cluster's processors started with (an outside
  // review: a program's SIGSEGV handler never ran for a fault on a spare).
  // Under the native API a processor's own thread also blocks the signals
  // sent to the process (signals_to_main): the main thread takes them.
  sigset_t mask;
  if (p->spare_)
    mask = p->cluster_->processor_mask();
  else
    (sys::pthread().sigmask)(SIG_SETMASK, nullptr, &mask);
  if (signals_to_main()) block_process_signals(mask);
  if (p->spare_ || signals_to_main()) (sys::pthread().sigmask)(SIG_SETMASK, &mask, nullptr);
  p->name_thread(true);
  p->enter_thread();
  context_adopt_thread(p->idle_.ctx);
  p->current_ = &p->idle_;
  p->idle_loop();
  p->cluster_->leave(*p);
  tls_processor = nullptr;
  return nullptr;
}

void Processor::adopt_home_tcb(void* home, void* main_tcb) noexcept {
  main_.tcb = main_tcb;
  home_tcb_ = home;
  installed_tcb_ = main_tcb;
}

void Processor::request_stop() {
  stop_.store(true, std::memory_order_seq_cst);
  wake_up();
}

void Processor::join_thread() {
  if (has_thread_) sys::pthread().join(thread_, nullptr);
  has_thread_ = false;
}

void Processor::switch_to(Fibre* next, PostFn post, void* arg, bool dying) {
  Fibre* self = current_;
  // A fibre continued after a rest has no stack yet (io/rest.hpp): it runs
  // on one from this processor's cache, the one a rest here left last.
  if (__builtin_expect(next->ctx.fctx == nullptr, 0)) give_stack(*this, *next);
  SwitchNote note{self, post, arg, this};
  LOOM_CHECK_SWITCH(next, *this);
#if defined(LOOM_SLOW_SWITCH_NS)
  // The deliberately slowed build (CMakeLists.txt): the gate must fail it.
  for (std::int64_t until = now_ns() + LOOM_SLOW_SWITCH_NS; now_ns() < until;) cpu_relax();
#endif
  current_ = next;
  counters.add(Stat::switches);
  running_id.store(next->id, std::memory_order_relaxed);
  running_name.store(next->name, std::memory_order_relaxed);
  if (__builtin_expect(tls::switching, 0)) {
    void* want = next->tcb ? next->tcb : home_tcb_;
    if (want != installed_tcb_) {
      tls::install(want, this);
      installed_tcb_ = want;
    }
  }
  if (__builtin_expect(self->cpu_timed.load(std::memory_order_relaxed) | next->cpu_timed.load(std::memory_order_relaxed), 0))
    cpu_clock_switch(self, next, tid.load(std::memory_order_relaxed));
  transfer_t t = context_jump(self->ctx, next->ctx, &note, dying);
  // Resumed, perhaps on another kernel thread: `this` is stale from here.
  self->wait_kind.store(WaitKind::none, std::memory_order_relaxed);
  context_arrived(self->ctx);
  after_switch(t)->fire_timers_left();
}

Fibre* Processor::next_ready(unsigned max_level, bool fire_timers) {
  Fibre* f;
  ++tick_;
  if (fire_timers && (tick_ & 15) == 0) {
    if (cluster_->timers.pending()) cluster_->fire_timers();
    // Extensions look outside now and then (the idle poller: a
    // non-blocking epoll_wait): every 128 picks, or sooner once 2^18 cycles
    // (about 0.1 ms) have passed, so that a few fibres that yield often
    // (memcached's reqs_per_event) cannot keep a waiting socket unseen.
    std::uint64_t now = __rdtsc();
    if ((tick_ & 127) == 0 || now - last_look_ >= (1u << 18)) {
      last_look_ = now;
      for (unsigned i = 0, n = cluster_->extension_count(); i < n; ++i) cluster_->extension(i)->busy_pick(*this);
    }
  }
  if ((tick_ & 63) == 0 && (f = cluster_->pop_staging(*this))) return f;
  if ((f = rq_->pop(max_level))) return f;
  return cluster_->pop_staging(*this);
}

void Processor::fire_timers_left() {
  if (__builtin_expect(timers_due_, 0)) {
    timers_due_ = false;
    cluster_->fire_timers();
  }
}

void Processor::suspend(PostFn post, void* arg) {
  // No timers here: a blocking caller may still hold the lock of the
  // primitive it waits on (released by `post`), and a firing timer takes
  // that lock to unqueue its waiter.
  Fibre* next = next_ready(kPriorities - 1, /*fire_timers=*/false);
  // Left to the fibre that runs next, after post: fibres that only block
  // and wake each other never yield nor idle, and a sleeper among them
  // would never wake (timer_test, SleeperAmongFibresThatOnlyBlockWakes).
  if ((tick_ & 15) == 0 && next && cluster_->timers.pending()) timers_due_ = true;
  switch_to(next ? next : &idle_, post, arg);
}

namespace {
void post_leave_queue(Processor& here, Fibre*, void*) { here.ready_queue().consumer_leave(); }
}  // namespace

void Processor::yield() {
  Fibre* self = current_;
  counters.add(Stat::yields);
  // Fast path, for a plain fibre on its own Nemesis queue: queue self on
  // the local FIFO and take the next in one consumer section that stays open
  // across the switch (the next fibre's post action closes it). No thief can
  // take self before its context is saved, so a yield costs one consumer
  // lock (plain stores under steal_fence=membarrier) and one jump.
  if ((tick_ & 15) != 15 && !self->background && rq_ == &own_rq_ && own_rq_.has_local() &&
      cluster_->config().placement == Placement::push) {
    if (!own_rq_.maybe_nonempty()) {
      // Nothing else to run: still count the pick, so that every 16th
      // yield takes the slow path below, whose next_ready() fires timers and
      // lets the extensions look outside. A fibre alone on its processor
      // that spins on yield (sched_yield under libloom-pthread) otherwise
      // kept a fibre blocked on I/O or a sleep from ever waking.
      if (!cluster_->staging_nonempty()) {
        ++tick_;
        return;
      }
    } else {
      ++tick_;
      own_rq_.consumer_enter();
      own_rq_.push_owned(self);
      Fibre* next = own_rq_.pop_nemesis(self->priority);  // self at worst
      if (next == self) return own_rq_.consumer_leave();
      return switch_to(next, &post_leave_queue, nullptr);
    }
  }
  Fibre* next = next_ready(self->priority);
  if (next) switch_to(next, &post_requeue, nullptr);
}

void Processor::push(Fibre* f) {
  if (rq_ != &own_rq_) {
    rq_->push(f);
    cluster_->wake_one();
  } else if (this_processor() == this) {
    // f would wait behind the fibre running here, which may not reach a
    // scheduling point for long: it may busy-wait for f's work, as redis's
    // main thread waits for its I/O threads (issue 25, bug 3: a livelock
    // with the other processor asleep). The rule (DESIGN.md, "No waiting
    // behind a running fibre"): a ready fibre never waits behind a running
    // one while a processor of its cluster sleeps. So:
    //  - a sibling spinning for work (spin_for_work) is given f at once, on
    //    its own queue, which it is polling: no steal, no wake-up (a lock
    //    convoy's hand-over: issue 34);
    //  - else f is queued here, and if some processor sleeps one is woken
    //    to steal — one thief at a time (wake_thief).
    // Then, for the spinner, what any push onto another processor's queue
    // does (Cluster::wake): it may have stopped spinning before it saw f,
    // and either sleeps (it is woken), looks again in its idle loop
    // (nothing to do), or runs other work (a thief is woken for f). For a
    // local push, the fence and the look at the idle count: a processor
    // going idle announces itself, then looks at the queues (invariant 3).
    // With all busy it costs a fence and a load; with one processor, one
    // load. (Handing f over without the wake lost it: the spinner's last
    // look could come before the push, then it slept — a hang in the
    // lock benchmark within seconds.)
    // (09a3b57 woke a thief on every local push, without the one-thief
    // gate and the idle count, and tripled the lock benchmark's overhead.)
    // Not from the idle loop (the poller delivering to its own fibres as
    // its sleep ends): nothing runs here that f would wait behind, and a
    // thief woken for each delivery would be a wake-up per request.
    // Nor for a pinned fibre (a color runner): no thief may take it.
    // Queued behind the running fibre: the monitor, if it watches this
    // cluster and naps, looks soon (the running one may be blocked in a
    // call loom cannot see: announce_queued, two loads).
    if (cluster_->several() && current_ != &idle_ && !f->pinned) {
      if (Processor* q = spinning_sibling()) {
        q->own_rq_.push(f);
        cluster_->wake(*q);
        return;
      }
      push_local(f);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (cluster_->idle_processors_relaxed() > 0) cluster_->wake_thief();
      cluster_->announce_queued();
    } else {
      push_local(f);
      if (current_ != &idle_) cluster_->announce_queued();
    }
  } else {
    // Read before the push: once queued, f may run here, finish and its
    // memory be reused before the wake (TSan, mutex_test: a new fibre's
    // constructor against this read, on a stack just given back).
    const bool stealable = !f->pinned;
    own_rq_.push(f);
    LOOM_CHAOS_POINT(push_wake);
    if (WakeDefer* d = tls_wake_defer)
      d->add(this);
    else
      cluster_->wake(*this, stealable);
  }
}

Processor* Processor::spinning_sibling() const {
  if (cluster_->spinning_relaxed() == 0) return nullptr;
  for (std::size_t i = 1, n = cluster_->size(); i < n; ++i) {
    Processor* q = cluster_->processor(unsigned((index_ + i) % n));
    if (q && q->spinning.load(std::memory_order_relaxed)) return q;
  }
  return nullptr;
}

void Processor::push_local(Fibre* f) {
  LOOM_CHECK_OWNER(*this, "push_local");  // before f is touched: it names the thread, not the fibre
  LOOM_CHECK(!f->pinned || f->affinity == this, "pinned fibre %llu (%s) queued on processor %u, not its own",
             (unsigned long long)f->id, f->name ? f->name : "unnamed", index_);
  if (rq_ == &own_rq_ && own_rq_.has_local()) return push_owned(f);
  rq_->push(f);
  if (rq_ != &own_rq_) cluster_->wake_one();
}

void Processor::push_owned(Fibre* f) {
  LOOM_CHECK_OWNER(*this, "push_owned");
  own_rq_.push_by_owner(f);
}

Fibre* Processor::find_work(bool last_look) {
  cluster_->fire_timers();
  if (Fibre* f = next_ready()) return f;
  // The last look, after announcing idle, must see any work pushed behind a
  // busy processor before the announcement (its pusher saw no sleeper to
  // wake): a steal that gave up on a busy consumer lock would leave that
  // work to its owner alone (CI under TSan, where the owner takes the same
  // lock, caught it).
  // (With stealing off, only from a processor the monitor found lost.)
  if (cluster_->stealing() || cluster_->lost_relaxed() > 0)
    if (Fibre* f = cluster_->steal(*this, last_look)) return f;
  for (unsigned i = 0, n = cluster_->extension_count(); i < n; ++i)
    if (Fibre* f = cluster_->extension(i)->find_work(*this, last_look)) return f;
  return cluster_->pop_background(*this);
}

void Processor::run(Fibre* f) {
  LOOM_CHECK(!f->pinned || f->affinity == this, "pinned fibre %llu (%s) of processor %d about to run on processor %u",
             (unsigned long long)f->id, f->name ? f->name : "unnamed", f->affinity ? int(f->affinity->index()) : -1,
             index_);
  switch_to(f, nullptr, nullptr);
}

namespace {
constexpr std::int64_t kTrimAfterNs = 50'000'000;  // 50 ms idle: the burst is over
}  // namespace

// Spin before sleeping (DESIGN.md, "Spinning before sleeping"): with
// siblings to steal from, an idle processor keeps looking for up to its
// budget before it announces itself idle. A spinner is awake: a pusher that
// sees one wakes no sleeper to steal (Cluster::wake_thief), so work made
// behind a busy processor costs no futex wake and no sleep. The budget
// adapts, per processor: a spin that finds work keeps it at the maximum
// (SchedConfig::spin_us); one that times out halves it (under 1 µs: no
// spin); a sibling's wake that ends the sleep within the maximum of the
// idle period's start restores it (a full spin would have caught that
// work: idle_loop). So a processor whose work comes from its siblings soon
// enough (a lock convoy) spins, and one whose work comes later, or from
// outside, stops spinning after a few idle periods (at most about twice the
// maximum spent in vain, until a sibling's work comes soon again).
Fibre* Processor::spin_for_work() {
  if (spin_budget_ns_ < 1000 || cluster_->size() < 2 || !cluster_->stealing()) return nullptr;
  // Nothing to spin for in a cluster of one fibre: a spinner would only
  // steal it from its processor as that processor wakes for it — main() of
  // a program that never creates a thread, back from an offloaded read,
  // moved to another kernel thread so (tls_real_programs, 1 run in 6 on
  // CI). (A thief that passed over processors in their idle loop instead
  // hung the echo test on io_uring.)
  if (cluster_->fibres.load(std::memory_order_relaxed) < 2) return nullptr;
  cluster_->spin_enter();
  spinning.store(true, std::memory_order_relaxed);
  const std::int64_t until = now_ns() + spin_budget_ns_;
  Fibre* f = nullptr;
  // Most of what a spinner gets is handed to it (Processor::push): between
  // looks at the queues and a steal (a few hundred ns, and lines of other
  // processors read), only its own queue's hint. The looks are picks
  // (next_ready: due timers every 16th, the extensions' busy_pick — the
  // idle poller's non-blocking epoll_wait — every 128th or 0.1 ms), not
  // find_work: no extension's find_work, since the color layer wakes its
  // own thieves for colors worth stealing (a spinner that took every color
  // it saw cost time-left stealing its edge over base: 1.54 → 1.39 in the
  // colors benchmark). The look after the spin, before sleeping, is whole.
  unsigned looks = 0;
  do {
    cpu_relax();
    if (own_rq_.maybe_nonempty() || (++looks & 7) == 0) {
      f = next_ready();
      if (!f) f = cluster_->steal(*this);
    }
  } while (!f && now_ns() < until && !stop_.load(std::memory_order_relaxed));
  counters.add(Stat::spins);
  if (f) {
    counters.add(Stat::spin_hits);
    spin_budget_ns_ = spin_max_ns_;
  } else {
    spin_budget_ns_ /= 2;
  }
  spinning.store(false, std::memory_order_relaxed);
  cluster_->spin_leave(f != nullptr);
  return f;
}

void Processor::idle_loop() {
  // Runs on the idle fibre; every switch back here returns into run().
  // Re-read `this` is not needed: the idle fibre never leaves its processor.
  for (;;) {
    Fibre* f = find_work();
    if (!f && spare_ && !wanted.load(std::memory_order_acquire) && !stop_.load(std::memory_order_acquire)) {
      park();
      continue;
    }
    // When this idle period began: a sibling's wake within the maximum
    // spin of it is work a full spin would have caught (spin_for_work).
    const std::int64_t idle_start = !f && spin_max_ns_ ? now_ns() : 0;
    if (!f) f = spin_for_work();
    if (!f) {
      if (stop_.load(std::memory_order_acquire)) return;
      LOOM_CHAOS_POINT(idle_announce);
      cluster_->go_idle(*this);
      LOOM_CHAOS_POINT(idle_last_look);
      f = find_work(/*last_look=*/true);  // after announcing idle
      bool hand_off = false;  // a keeper's timers pending when it woke
      if (!f && !stop_.load(std::memory_order_acquire)) {
        LOOM_CHAOS_POINT(idle_sleep);
        counters.add(Stat::sleeps);
        // One idle processor (the keeper) sleeps only until the earliest
        // timer; the others sleep until woken.
        unsigned n_ext = cluster_->extension_count();
        for (unsigned i = 0; i < n_ext; ++i) cluster_->extension(i)->before_sleep(*this);
        bool keeper = cluster_->claim_keeper(*this);
        std::int64_t deadline = keeper ? cluster_->timers.next() : kNoDeadline;
        // A burst is over when the processor stays idle for kTrimAfterNs: only
        // then are cached stacks given back. Trimming at every sleep made a
        // server between bursts unmap and map stacks all the time (the web
        // benchmark's short connections: 0.3 mmap+mprotect+munmap each).
        std::int64_t trim_at = -1;
        if (stacks_.over_idle()) {
          trim_at = now_ns() + kTrimAfterNs;
          if (deadline == kNoDeadline || trim_at < deadline) deadline = trim_at;
        }
        const std::uint64_t wakes_before = wakes.load(std::memory_order_relaxed);
        bool slept = false;
        for (unsigned i = 0; i < n_ext && !slept; ++i) slept = cluster_->extension(i)->sleep(*this, deadline);
        if (slept) {
          // slept inside an extension (the idle poller: in epoll_wait, and
          // delivered what it saw)
        } else if (deadline == kNoDeadline) {
          wake_flag.wait();
        } else if (deadline > now_ns()) {
          wake_flag.wait(deadline);
        }
        // A sibling's wake within the maximum spin of the idle period's
        // start: a full spin would have caught that work without the sleep
        // (spin_for_work). (Measured from the sleep's start, it restored
        // the budget after every spin that had just failed, for work that
        // came between one and two maxima after the period began: a full
        // spin in vain for every wake, never decaying — an outside review.)
        if (idle_start && wakes.load(std::memory_order_relaxed) != wakes_before &&
            now_ns() - idle_start < spin_max_ns_)
          spin_budget_ns_ = spin_max_ns_;
        if (keeper) {
          cluster_->release_keeper(*this);
          // Timers still pending: a sleeper takes over the keeping. This
          // processor may be woken for work that runs long with no
          // scheduling point (an event that spins until a thief takes a
          // color), and a sleeper without a deadline would then leave the
          // timers to it (the color layer's pause timer: color_test's relay
          // hung under LOOM_CHAOS, every seed).
          hand_off = cluster_->timers.pending();
        }
        if (trim_at >= 0 && now_ns() >= trim_at) stacks_.trim_idle();
      }
      cluster_->go_busy(*this);
      // Off the idle list first: a keeper whose sleep ended at a deadline
      // or at add_timer's re-arm wake is still on it, and wake_one() would
      // pick it, post its own wake flag, and its next sleep would return at
      // once, for as long as any timer is pending (one processor spun so).
      if (hand_off) cluster_->wake_one();
      if (!f) f = find_work();
      // Also when the last look found work: a thief woken just then would
      // otherwise keep every other sleeper from being woken to steal until
      // it next went idle.
      cluster_->thief_done();
      if (!f) continue;
    }
    // Work left queued behind f, with a processor asleep: a thief for it
    // (the rule of Processor::push; Cluster::wake leaves a processor in its
    // idle loop, running_id 0, to find its own work). The store of f's id,
    // a fence, then the look at the queue; a pusher pushes, fences, then
    // reads running_id: one of the two sees the other.
    if (cluster_->several()) {
      running_id.store(f->id, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (rq_->maybe_nonempty() && cluster_->idle_processors_relaxed() > 0) cluster_->wake_thief();
    }
    run(f);
  }
}

void Processor::park() {
  // Off both lists: no thief is woken here, no steal looks here, and
  // wake_one never picks it. Then parked, fenced, before the look at the
  // queue: a pusher that pushed before reading `parked` false had its
  // fibre seen by the look; one that reads it true wakes this thread
  // (Cluster::wake), which looks again.
  cluster_->leave(*this);
  for (unsigned i = 0, n = cluster_->extension_count(); i < n; ++i) cluster_->extension(i)->before_park(*this);
  cluster_->spare_parks();
  // A parked spare's stacks are of no use until it is wanted again (and
  // under RLIMIT_AS they were the memory the processors' creators lacked).
  stacks_.trim(0);
  // Its last sleep may have held a role one sleeper holds for the cluster
  // — the keeping of the timers, the idle poller's place in epoll_wait or
  // the ring — which a processor already asleep did not take: a sleeper is
  // woken to sleep again and take them. (An outside review: a sleep that
  // never ended once the spares parked; the echo test on io_uring hung with
  // nobody in the ring.)
  cluster_->wake_one();
  counters.add(Stat::spare_us, std::uint64_t(now_ns() - active_since_.load(std::memory_order_relaxed)) / 1000);
  parked.store(true, std::memory_order_seq_cst);
  for (;;) {
    // What still waits here (fibres whose affinity is this spare: ones it
    // stole stickily, a joiner it was handed, an offloaded call coming
    // back) goes to the cluster's processors, for good.
    if (rq_ == &own_rq_)
      while (Fibre* f = own_rq_.pop(kPriorities - 1)) {
        Processor* home = cluster_->next_home();
        __atomic_store_n(&f->affinity, home, __ATOMIC_RELEASE);
        home->push(f);
      }
    if (stop_.load(std::memory_order_acquire) || wanted.load(std::memory_order_acquire)) break;
    wake_flag.wait();
  }
  active_since_.store(now_ns(), std::memory_order_relaxed);
  parked.store(false, std::memory_order_relaxed);
  cluster_->spare_unparks();
  counters.add(Stat::spare_activations);
  cluster_->go_busy(*this);
}

void Processor::wake_up() noexcept {
  wake_flag.post();
  // seq_cst post, then this load; the sleeper stores sleeping_in, then
  // looks at the flag: one of the two sees the other.
  if (Extension* e = sleeping_in.load(std::memory_order_seq_cst)) e->interrupt(*this);
}

thread_local WakeDefer* tls_wake_defer = nullptr;

WakeDefer::WakeDefer() noexcept : outer_(tls_wake_defer) { tls_wake_defer = this; }

WakeDefer::~WakeDefer() {
  tls_wake_defer = outer_;
  for (unsigned i = 0; i < n_; ++i) procs_[i]->cluster().wake(*procs_[i]);
}

void WakeDefer::add(Processor* p) {
  for (unsigned i = 0; i < n_; ++i)
    if (procs_[i] == p) return;
  if (n_ < kMax)
    procs_[n_++] = p;
  else
    p->cluster().wake(*p);
}

void schedule(Fibre* f) {
  // Woken: the listing shows it ready from now on, not still blocked on what
  // woke it (that looked like a lost wake-up while its processor was busy).
  // Its waiter set the mark before publishing itself, so this comes after.
  f->wait_kind.store(WaitKind::none, std::memory_order_relaxed);
  if (f->background) {
    f->cluster->push_background(f);
  } else if (Processor* a = f->affinity; a && &a->cluster() == f->cluster) {
    a->push(f);
  } else {
    f->cluster->push_staging(f);
  }
}

}  // namespace loom::rt
