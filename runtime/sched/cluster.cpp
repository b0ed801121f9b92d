#include "sched/cluster.hpp"
#include "sched/monitor.hpp"
#include "base/sys.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace loom::rt {

// Every cluster ever made, newest first (they are type-stable). Named, not in
// an anonymous namespace: the gdb extension (scripts/gdb/loom.py) starts
// here.
std::atomic<Cluster*> every_cluster{nullptr};

namespace {
Counters off_processors;  // counted on kernel threads that are not processors, no cluster named
}  // namespace

Cluster* Cluster::first() { return every_cluster.load(std::memory_order_acquire); }

Cluster::Cluster(const SchedConfig& config, unsigned id)
    : config_(config), id_(id), staging_(QueueKind::nemesis), background_(QueueKind::nemesis), shared_(QueueKind::locked) {
  Cluster* head = every_cluster.load(std::memory_order_relaxed);
  do next_made_ = head;
  while (!every_cluster.compare_exchange_weak(head, this, std::memory_order_release, std::memory_order_relaxed));
  policy_ = make_steal_policy(config_.steal_policy);
  if (!policy_) {
    std::fprintf(stderr, "loom: cluster %u: unknown steal policy '%s'; using longest-busy\n", id, config_.steal_policy.c_str());
    config_.steal_policy = "longest-busy";
    policy_ = make_steal_policy(config_.steal_policy);
  }
  if (config_.stall_ms) stall_watch();
  handoff_on_ = config_.handoff_us != 0;
  if (config_.handoff_us) monitor_start();
  own_prefix_ = id == 0 ? "loom/P" : "loom/c" + std::to_string(id) + "/P";
  thread_prefix_.store(own_prefix_.c_str(), std::memory_order_seq_cst);
}

void Cluster::set_thread_prefix(const char* prefix) {
  // Against a processor thread naming itself with the old prefix: it reads
  // the prefix again after naming itself (Processor::name_thread), and this
  // renames it after the store; whichever runs last writes the new name.
  thread_prefix_.store(prefix, std::memory_order_seq_cst);
  for (std::size_t i = 0; i < size(); ++i)
    if (Processor* p = processor(i)) p->name_thread(false);
  for (std::size_t i = 0; i < spare_count(); ++i) spare(i)->name_thread(false);
}

namespace {
// Retired clusters stay reachable (for LeakSanitizer, and for debuggers).
std::atomic<Cluster*> retired{nullptr};
}  // namespace

void Cluster::shutdown() {
  Cluster* head = retired.load(std::memory_order_relaxed);
  do next_retired_ = head;
  while (!retired.compare_exchange_weak(head, this, std::memory_order_release, std::memory_order_relaxed));
  std::size_t n = size();
  std::size_t k = spare_count();
  for (std::size_t i = 0; i < n; ++i) processor(i)->request_stop();
  for (std::size_t i = 0; i < k; ++i) spare(i)->request_stop();
  for (std::size_t i = 0; i < n; ++i) processor(i)->join_thread();
  for (std::size_t i = 0; i < k; ++i) spare(i)->join_thread();
  for (std::size_t i = 0; i < n; ++i) processor(i)->retire();
  for (std::size_t i = 0; i < k; ++i) spare(i)->retire();
}

Processor* Cluster::runner_of(const Fibre* f) const noexcept { return runner_of_id(f->id); }

Processor* Cluster::runner_of_id(std::uint64_t id) const noexcept {
  for (std::size_t i = 0, n = size(); i < n; ++i)
    if (processor(i)->running_id.load(std::memory_order_acquire) == id) return processor(i);
  for (std::size_t i = 0, n = spare_count(); i < n; ++i)
    if (spare(i)->running_id.load(std::memory_order_acquire) == id) return spare(i);
  return nullptr;
}

bool Cluster::activate_spare() {
  SpinGuard g(grow_lock_);
  std::size_t k = nspares_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < k; ++i) {
    Processor* s = spare(i);
    // Parked, or on its way there (not wanted): wanted again. One that
    // has not parked yet sees it and stays; a parked one is woken.
    if (!s->wanted.exchange(true, std::memory_order_acq_rel)) {
      s->wake_up();
      return true;
    }
  }
  if (k == kMaxSpares) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true))
      std::fprintf(stderr,
                   "loom: cluster %u: all %zu spare kernel threads are lost too (blocked where loom cannot see); "
                   "threads that wait behind them wait until one returns\n",
                   id_, kMaxSpares);
    return false;
  }
  // After a failure to make one, no new try for a second (each try keeps
  // its Processor: threads may still hold its address).
  static std::atomic<std::int64_t> failed_at{0};
  if (std::int64_t f = failed_at.load(std::memory_order_relaxed); f && now_ns() - f < 1000000000) return false;
  Processor* s = nullptr;
  int e = ENOMEM;
  try {
    s = new Processor(*this, unsigned(kMaxProcessors + k), /*adopt=*/false, /*spare=*/true);
    e = s->start_error();
  } catch (const std::bad_alloc&) {  // (the monitor's thread: nothing above it would catch it)
    s = nullptr;
  }
  if (!s || e) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true))
      std::fprintf(stderr,
                   "loom: cluster %u: cannot start a spare kernel thread (error %d); threads that wait behind a lost "
                   "processor wait until it returns\n",
                   id_, e);
    failed_at.store(now_ns(), std::memory_order_relaxed);
    return false;
  }
  active_spares_.fetch_add(1, std::memory_order_relaxed);
  spares_[k].store(s, std::memory_order_release);
  nspares_.store(k + 1, std::memory_order_release);
  shared_counters.add_shared(Stat::spares_started, 1);
  return true;
}

void Cluster::retire_spares() {
  for (std::size_t i = 0, k = spare_count(); i < k; ++i) {
    Processor* s = spare(i);
    // Woken: asleep on the idle list it would stay an idle processor.
    if (s->wanted.exchange(false, std::memory_order_acq_rel)) s->wake_up();
  }
}

bool Cluster::outside_ready() {
  for (unsigned i = 0, n = extension_count(); i < n; ++i)
    if (extension(i)->outside_ready()) return true;
  return false;
}

std::size_t Cluster::add_processors(std::size_t n, bool adopt) {
  SpinGuard g(grow_lock_);
  std::size_t have = nprocs_.load(std::memory_order_relaxed);
  if (have == 0) (sys::pthread().sigmask)(SIG_SETMASK, nullptr, &processor_mask_);
  if (have + n > kMaxProcessors) {
    std::fprintf(stderr, "loom: cluster %u: at most %zu processors\n", id_, kMaxProcessors);
    n = kMaxProcessors - have;
  }
  for (std::size_t i = 0; i < n; ++i) {
    // Publish before the thread starts: it may look itself up at once.
    auto* p = new Processor(*this, unsigned(have + i), adopt && i == 0);
    procs_[have + i].store(p, std::memory_order_release);
    nprocs_.store(have + i + 1, std::memory_order_release);
  }
  // The processor went busy in its constructor, before it was counted: a
  // monitor that looked in between saw no processor awake and may sleep
  // (an outside review: a one-processor program hung so in 7-14 % of runs).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  monitor_busy();
  return nprocs_.load(std::memory_order_relaxed);
}

void Cluster::place_new(Fibre* f) {
  if (f->background) {
    push_background(f);
  } else if (config_.queue == QueueKind::shared) {
    shared_.push(f);  // the cluster's one ready queue
    if (!wake_one()) announce_queued();  // every processor busy: one may be lost
  } else if (config_.placement == Placement::share) {
    push_staging(f);
  } else {
    Processor* p = next_home();
    __atomic_store_n(&f->affinity, p, __ATOMIC_RELEASE);  // (the listing reads it)
    p->push(f);
  }
}

Processor* Cluster::next_home() {
  Processor* here = this_processor();
  std::size_t i = here && &here->cluster() == this ? here->index() + here->placed++
                                                  : rr_.fetch_add(1, std::memory_order_relaxed);
  Processor* p = processor(unsigned(i % size()));
  // Not onto a processor the monitor found lost, while another is not (a
  // hint: a load of the monitor's count, and of the flag only then).
  if (__builtin_expect(lost_relaxed() > 0, 0))
    for (std::size_t k = 1, n = size(); k < n && p->lost.load(std::memory_order_relaxed); ++k)
      p = processor(unsigned((i + k) % n));
  return p;
}

// (Every processor busy: one of them may be lost; the monitor looks.)
void Cluster::push_staging(Fibre* f) {
  staging_.push(f);
  if (!wake_one()) announce_queued();
}

void Cluster::push_background(Fibre* f) {
  background_.push(f);
  if (!wake_one()) announce_queued();
}

// (Atomic stores of affinity, release, a plain move on x86: the fibre
// listing reads it from another thread, acquire, and may dereference it.)
Fibre* Cluster::pop_staging(Processor& p) {
  Fibre* f = staging_.pop();
  if (f) __atomic_store_n(&f->affinity, &p, __ATOMIC_RELEASE);
  return f;
}

Fibre* Cluster::pop_background(Processor& p) {
  Fibre* f = background_.pop();
  if (f) __atomic_store_n(&f->affinity, &p, __ATOMIC_RELEASE);
  return f;
}

Fibre* Cluster::steal(Processor& thief, bool wait) {
  Processor* victims[64];
  std::size_t n = 0;
  {
    SpinGuard g(list_lock_);
    // With stealing off, a thief takes only from a processor the monitor
    // found lost (sched/monitor.cpp).
    const bool any = stealing();
    for (Processor* p = busy_head_; p && n < 64; p = p->list_next)
      if (p != &thief && (any || p->lost.load(std::memory_order_relaxed)) && p->ready_queue().maybe_nonempty())
        victims[n++] = p;
  }
  if (n == 0) return nullptr;
  n = policy_->order(thief, victims, n);
  thief.counters.add(Stat::steal_tries);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t length = 0, k = 0, taken;
    Fibre* got[kStealBatch];
    // Pinned fibres (the color layer's runners) go back to their owner, which
    // is woken if it went to sleep meanwhile — but no thief is woken for
    // them: the thief woke itself so (wake_one finds it on the idle list in
    // its last look) and never slept while the runner was queued, 1.5 M
    // looks in 2 s of the unbalanced benchmark, with the color layer's
    // thieves paused because their steals did not pay. A steal that took
    // only pinned fibres looks again before it gives them back: a steal
    // takes half the queue from its highest priority, and a runner queued
    // above a lower-priority fibre was all it ever took, so that fibre
    // waited behind the victim's running one while the thief slept
    // (Colors.AFibreQueuedBehindARunnerOfHigherPriorityIsStolen).
    Fibre* pinned[kStealBatch];
    std::size_t n_pinned = 0;
    do {
      taken = victims[i]->ready_queue().steal(got, kStealBatch - n_pinned, &length, wait);
      for (std::size_t j = 0; j < taken; ++j)
        if (got[j]->pinned)
          pinned[n_pinned++] = got[j];
        else
          got[k++] = got[j];
    } while (k == 0 && taken > 0 && n_pinned < kStealBatch);
    for (std::size_t j = 0; j < n_pinned; ++j) victims[i]->push(pinned[j]);
    if (!k) continue;
    thief.counters.add(Stat::steal_hits);
    thief.counters.add(Stat::steals, k);
    // Transient by default: the fibres keep their affinity and go home when
    // they next block. Past the threshold the victim is overloaded: stay.
    if (config_.sticky_threshold && length >= config_.sticky_threshold) {
      for (std::size_t j = 0; j < k; ++j) __atomic_store_n(&got[j]->affinity, &thief, __ATOMIC_RELEASE);
      thief.counters.add(Stat::sticky_steals, k);
    }
    for (std::size_t j = 1; j < k; ++j) thief.push_local(got[j]);
    return got[0];
  }
  return nullptr;
}

// ---- extensions ------------------------------------------------------------------

void Cluster::add_extension(Extension* e) {
  SpinGuard g(grow_lock_);
  unsigned i = next_ext_.load(std::memory_order_relaxed);
  if (i == kMaxExtensions) {
    std::fprintf(stderr, "loom: cluster %u: more than %u scheduler extensions\n", id_, kMaxExtensions);
    std::abort();
  }
  ext_[i].store(e, std::memory_order_release);
  next_ext_.store(i + 1, std::memory_order_release);
}

void Cluster::shutdown_extensions() {
  for (unsigned i = 0, n = extension_count(); i < n; ++i) extension(i)->shutdown();
}

// ---- idle and busy lists ------------------------------------------------------

void Cluster::list_remove(Processor& p) {
  Processor*& head = p.list_state == ListState::busy ? busy_head_ : idle_head_;
  Processor*& tail = p.list_state == ListState::busy ? busy_tail_ : idle_tail_;
  if (p.list_state == ListState::none) return;
  (p.list_prev ? p.list_prev->list_next : head) = p.list_next;
  (p.list_next ? p.list_next->list_prev : tail) = p.list_prev;
  if (p.list_state == ListState::idle) idle_count_.fetch_sub(1, std::memory_order_relaxed);
  p.list_prev = p.list_next = nullptr;
  p.list_state = ListState::none;
}

void Cluster::list_append(Processor& p, ListState s) {
  Processor*& head = s == ListState::busy ? busy_head_ : idle_head_;
  Processor*& tail = s == ListState::busy ? busy_tail_ : idle_tail_;
  p.list_prev = tail;
  p.list_next = nullptr;
  (tail ? tail->list_next : head) = &p;
  tail = &p;
  p.list_state = s;
  if (s == ListState::idle) idle_count_.fetch_add(1, std::memory_order_relaxed);
}

void Cluster::go_idle(Processor& p) {
  {
    SpinGuard g(list_lock_);
    list_remove(p);
    list_append(p, ListState::idle);
    p.idle.store(true, std::memory_order_relaxed);
  }
  // Announce before the last look (invariant 3).
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void Cluster::go_busy(Processor& p) {
  {
    SpinGuard g(list_lock_);
    if (p.list_state != ListState::busy) {
      list_remove(p);
      list_append(p, ListState::busy);
    }
    p.idle.store(false, std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  monitor_busy();  // the monitor sleeps while every processor does
}

void Cluster::leave(Processor& p) {
  SpinGuard g(list_lock_);
  list_remove(p);
  p.idle.store(false, std::memory_order_relaxed);
}

void Cluster::wake(Processor& p, bool stealable) {
  // Publish the work before reading the idle mark (invariant 3).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!p.idle.load(std::memory_order_relaxed)) {
    // A parked spare (Processor::park): it hands what reached it on.
    if (__builtin_expect(p.parked.load(std::memory_order_relaxed), 0)) return p.wake_up();
    // Not asleep. In its idle loop (running_id 0) it is about to look at
    // its queue (it announces itself idle before its last look: invariant
    // 3), so the fibre runs where it blocked (an offloaded read comes back
    // to its own kernel thread) — a thief woken now would only take it
    // away. (If the loop finds another fibre first, it wakes a thief for
    // what it leaves queued: Processor::idle_loop.) Running a fibre, it may
    // not look for long: a thief.
    if (p.running_id.load(std::memory_order_relaxed) == 0) return;
    announce_queued();  // behind a running fibre (Processor::push)
    if (!stealable) return;
    return wake_thief();
  }
  {
    SpinGuard g(list_lock_);
    if (p.list_state != ListState::idle) return;  // somebody woke it already
    list_remove(p);
    list_append(p, ListState::busy);
    p.idle.store(false, std::memory_order_relaxed);
  }
  p.wakes.fetch_add(1, std::memory_order_relaxed);
  p.wake_up();
}

void Cluster::wake_thief() {
  // A busy processor's backlog grew: if a processor sleeps, wake one to
  // steal — but only one thief at a time, or every push would wake a
  // processor that finds nothing, and none while a processor spins: it
  // steals (spin_leave hands over when the last spinner leaves with other
  // work). (Callers have published the work and fenced.)
  if (stealing() && idle_count_.load(std::memory_order_relaxed) > 0 && spinning_.load(std::memory_order_relaxed) == 0 &&
      !thief_waking_.exchange(true))
    if (!wake_one()) thief_waking_.store(false, std::memory_order_relaxed);
}

void Cluster::spin_leave(bool found) {
  // (wake_thief looks at the idle count itself.)
  if (spinning_.fetch_sub(1, std::memory_order_seq_cst) == 1 && found) wake_thief();
}

bool Cluster::wake_one() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (idle_count_.load(std::memory_order_relaxed) == 0) return false;
  Processor* p;
  {
    SpinGuard g(list_lock_);
    p = idle_head_;
    if (!p) return false;
    list_remove(*p);
    list_append(*p, ListState::busy);
    p->idle.store(false, std::memory_order_relaxed);
  }
  // The caller itself, still on the idle list while it delivers what its
  // sleep in the poller found: it is awake and looks for work as soon as
  // the sleep returns. Waking it cost an eventfd write, then a return of
  // epoll_wait and a read at its next sleep (0.8 of each per request with
  // Connection: close at 1,000). Only inside that sleep (sleeping_in set):
  // a processor that makes work in its last look before sleeping, or in an
  // extension's before_sleep, must get the post that stops its sleep.
  if (p == this_processor() && p->sleeping_in.load(std::memory_order_relaxed)) return true;
  p->wakes.fetch_add(1, std::memory_order_relaxed);
  p->wake_up();
  return true;
}

void Cluster::add_timer(TimerNode* n) {
  if (!timers.add(n)) return;  // an earlier deadline is already armed
  if (Processor* k = keeper_.load(std::memory_order_seq_cst))
    k->wake_up();  // re-arm for the new, earlier deadline
  else if (!wake_one())  // it fires or becomes the keeper; if all are
    announce_queued();    // busy, they fire it at their next scheduling
                          // point, unless lost: the monitor looks
}

void Cluster::fire_timers() {
  if (timers.pending()) timers.fire(now_ns(), *this);
}

bool Cluster::claim_keeper(Processor& p) {
  Processor* none = nullptr;
  return keeper_.compare_exchange_strong(none, &p, std::memory_order_seq_cst);
}

void Cluster::release_keeper(Processor& p) {
  Processor* me = &p;
  keeper_.compare_exchange_strong(me, nullptr, std::memory_order_seq_cst);
}

namespace {

void add_up(ClusterStats& s, const Counters& c) {
#define LOOM_STATS_ADD(field, description) s.field += c.get(Stat::field);
  LOOM_STATS_FIELDS(LOOM_STATS_ADD)
#undef LOOM_STATS_ADD
}

void add_processor(ClusterStats& s, const Processor& p) {
  add_up(s, p.counters);
  s.wakes += p.wakes.load(std::memory_order_relaxed);
  s.stack_hits += p.stack_cache_hits();
  s.stack_misses += p.stack_cache_misses();
}

}  // namespace

ClusterStats Cluster::stats() const {
  ClusterStats s;
  add_up(s, shared_counters);
  if (id_ == 0) add_up(s, off_processors);  // the default cluster's
  for (std::size_t i = 0, n = size(); i < n; ++i) add_processor(s, *processor(i));
  for (std::size_t i = 0, n = spare_count(); i < n; ++i) {
    add_processor(s, *spare(i));
    // (A parked spare's time is counted; an active one's so far.)
    if (std::int64_t since = spare(i)->active_since()) s.spare_us += std::uint64_t(now_ns() - since) / 1000;
  }
  s.stack_bytes = stack_bytes_mapped();
  return s;
}

ClusterStats Cluster::processor_stats(std::size_t i) const {
  ClusterStats s;
  if (i < size()) add_processor(s, *processor(i));
  s.stack_bytes = stack_bytes_mapped();
  return s;
}

void count(Cluster& c, Stat s, std::uint64_t n) noexcept {
  Processor* p = this_processor();
  if (p && &p->cluster() == &c)
    p->counters.add(s, n);
  else
    c.shared_counters.add_shared(s, n);
}

void count(Stat s, std::uint64_t n) noexcept {
  if (Processor* p = this_processor())
    p->counters.add(s, n);
  else
    off_processors.add_shared(s, n);
}

}  // namespace loom::rt
