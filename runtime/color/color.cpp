// color/color.cpp — color queues, runners, posting, color stealing, and the
// public API of loom/color.hpp. The structures and the lock order are in
// color/color.hpp.
#include "color/color.hpp"

#include <x86intrin.h>

#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>

#include "base/chaos.hpp"
#include "base/check.hpp"
#include "base/futex.hpp"
#include "base/options.hpp"
#include "loom/fibre.hpp"
#include "loom/sync.hpp"
#include "sched/cancel.hpp"
#include "sched/cluster.hpp"
#include "sched/fibre.hpp"
#include "sched/processor.hpp"
#include "sched/timer.hpp"

namespace loom::rt {

namespace {

inline std::uint64_t cycles() noexcept { return __rdtsc(); }

// Smoothed mean: 1/8 of each new sample; the first sample is taken whole.
inline void smooth(std::atomic<std::uint64_t>& mean, std::uint64_t sample) noexcept {
  std::uint64_t m = mean.load(std::memory_order_relaxed);
  mean.store(m == 0 ? (sample ? sample : 1) : m - m / 8 + sample / 8, std::memory_order_relaxed);
}

// The same for a time measured in cycles: a sample may include the kernel
// thread being preempted (or waiting for a busy lock), so it counts for at
// most 4x the mean. One preempted cheap handler then cannot make its colors
// look worth a steal for the next hundred runs, nor one slow steal lift the
// steal cost above every color's work (time-left would then refuse every
// steal and never sample again); a real change of cost still shows within
// a few samples.
inline void smooth_time(std::atomic<std::uint64_t>& mean, std::uint64_t sample) noexcept {
  std::uint64_t cap = 4 * mean.load(std::memory_order_relaxed);
  smooth(mean, cap && sample > cap ? cap : sample);
}

// A running median (a stochastic quantile estimator): each sample moves the
// estimate by 1/16 of itself toward it, however far it is. The steal cost
// is tracked so: a steal's samples include the thief's kernel thread being
// preempted or its runner waiting to be switched to, and on a loaded guest
// enough of those in a row lifted a smoothed mean (even one that caps each
// sample at 4x) above every color's work; time-left then refused every
// steal and never sampled again (the full benchmark of 2026-11-28: rounds
// with no steal at all). Outliers now move it as little as any sample, and
// a real change of cost shows within a few dozen steals.
inline void track_median(std::atomic<std::uint64_t>& est, std::uint64_t sample) noexcept {
  std::uint64_t m = est.load(std::memory_order_relaxed);
  std::uint64_t step = m / 16 ? m / 16 : 1;
  if (sample > m)
    m += sample - m < step ? sample - m : step;
  else if (sample < m)
    m -= m - sample < step ? m - sample : step;
  est.store(m ? m : 1, std::memory_order_relaxed);
}

constexpr std::uint64_t kDefaultEstimate = 1000;  // cycles, before a handler's first run
constexpr std::size_t kStackRunner = 256 * 1024;  // events run on it (mapped lazily)
constexpr unsigned kReapAt = 64;                  // empty queues kept before freeing them
// Thieves' pauses after steals that did not pay (ns). The longest is well
// under a round of the unbalanced benchmark (30-60 ms), so a workload that
// starts to pay is sampled again soon; the shortest is a few dozen short
// events.
constexpr std::int64_t kPauseMin = 50'000;
constexpr std::int64_t kPauseMax = 4'000'000;

// ---- handler table: open addressing on the handler's address, never shrinks
constexpr std::size_t kHandlers = 4096;
HandlerStats handlers[kHandlers];
HandlerStats overflow_handler;

}  // namespace

std::uint64_t HandlerStats::estimate() const noexcept {
  std::uint64_t w = warm.load(std::memory_order_relaxed);
  if (w) return w;
  std::uint64_t c = cold.load(std::memory_order_relaxed);
  return c ? c : kDefaultEstimate;
}

double HandlerStats::penalty() const noexcept {
  double o = penalty_override.load(std::memory_order_relaxed);
  if (o > 0) return o;
  std::uint64_t w = warm.load(std::memory_order_relaxed), c = cold.load(std::memory_order_relaxed);
  if (!w || !c || c <= w) return 1.0;
  return double(c) / double(w);
}

void HandlerStats::record(std::uint64_t dt, bool cold_run) noexcept { smooth_time(cold_run ? cold : warm, dt); }

HandlerStats* handler_stats(HandlerKey key) noexcept {
  std::size_t h = (reinterpret_cast<std::uintptr_t>(key) >> 4) * 0x9E3779B97F4A7C15ull >> 52;  // 12 bits
  for (std::size_t i = 0; i < 64; ++i) {
    HandlerStats& s = handlers[(h + i) & (kHandlers - 1)];
    HandlerKey k = s.key.load(std::memory_order_acquire);
    if (k == key) return &s;
    if (!k) {
      HandlerKey none = nullptr;
      if (s.key.compare_exchange_strong(none, key, std::memory_order_acq_rel) || none == key) return &s;
    }
  }
  return &overflow_handler;
}

// ---- ColorCore's dispatch list and stealing queue ------------------------------

void ColorCore::link(ColorQueue* q, bool worth, bool front) noexcept {
  if (front) {
    q->prev = nullptr;
    q->next = head;
    (head ? head->prev : tail) = q;
    head = q;
  } else {
    q->next = nullptr;
    q->prev = tail;
    (tail ? tail->next : head) = q;
    tail = q;
  }
  LOOM_CHECK(!q->transit && q->owner.load(std::memory_order_relaxed) == this, "color %u linked %s", q->color,
             q->transit ? "in transit" : "by a core not its owner");
  q->linked = true;
  listed.store(listed.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (worth) add_worthy(q);
}

void ColorCore::unlink(ColorQueue* q) noexcept {
  (q->prev ? q->prev->next : head) = q->next;
  (q->next ? q->next->prev : tail) = q->prev;
  q->prev = q->next = nullptr;
  q->linked = false;
  listed.store(listed.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  if (q->worthy) drop_worthy(q);
}

// The stealing queue keeps the list's order among its queues (a queue joins
// at the back when it is linked at the back, or when it becomes worth a
// steal while it waits): its tail is the worthy color that would wait
// longest on this core, Mely's "most time left".
void ColorCore::add_worthy(ColorQueue* q) noexcept {
  q->wnext = nullptr;
  q->wprev = wtail;
  (wtail ? wtail->wnext : whead) = q;
  wtail = q;
  q->worthy = true;
  worthy.store(worthy.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void ColorCore::drop_worthy(ColorQueue* q) noexcept {
  (q->wprev ? q->wprev->wnext : whead) = q->wnext;
  (q->wnext ? q->wnext->wprev : wtail) = q->wprev;
  q->wprev = q->wnext = nullptr;
  q->worthy = false;
  worthy.store(worthy.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

namespace {

// Locks the queue's current owner: the owner changes only under the old
// owner's lock, so once locked and re-checked it stays.
ColorCore* lock_owner(ColorQueue* q) noexcept {
  for (;;) {
    ColorCore* o = q->owner.load(std::memory_order_acquire);
    o->lock.lock();
    if (q->owner.load(std::memory_order_relaxed) == o) return o;
    o->lock.unlock();
  }
}

// Counters written under the core's lock only: a load and a store, no
// locked instruction (thieves read them without the lock).
inline void add(std::atomic<std::uint64_t>& a, std::uint64_t n) noexcept {
  a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
inline void sub(std::atomic<std::uint64_t>& a, std::uint64_t n) noexcept {
  a.store(a.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
}

// Takes q's head item for dispatch (under the owner's lock): q becomes held.
ColorItem* take(ColorCore& o, ColorQueue* q) noexcept {
  ColorItem* it = q->head;
  q->head = it->next;
  if (!q->head) q->tail = nullptr;
  --q->count;
  q->work -= it->work;
  q->apparent -= it->apparent;
  sub(o.items, 1);
  if (it->shared)
    ++q->shared;
  else
    q->exclusive = true;
  if (q->linked && !q->dispatchable()) o.unlink(q);
  return it;
}

void give_back(ColorQueue* q, bool shared) noexcept {
  if (shared)
    --q->shared;
  else
    q->exclusive = false;
}

void add_reap(ColorCore& o, ColorQueue* q) noexcept {
  if (q->reaping) return;
  q->reaping = true;
  q->reap_next = o.reap;
  o.reap = q;
  o.reap_count.store(o.reap_count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void runner_main(void* arg) {
  auto* me = static_cast<ColorCore*>(arg);
  me->layer->run(*me);
}

// The runner parks after its context is saved: whoever then finds it parked
// (a poster, a thief's find_work) may resume it at once.
void post_park(Processor& here, Fibre* runner, void* arg) {
  auto* me = static_cast<ColorCore*>(arg);
  me->lock.lock();
  bool work = me->head || me->stopping;
  if (!work) me->parked.store(true, std::memory_order_relaxed);
  me->lock.unlock();
  if (work) here.push_local(runner);
}

void held_start(Fibre* f) {
  auto* h = static_cast<ColorHold*>(f->held);
  h->layer->start_fibre(f);
}

void held_exit(Fibre* f) {
  auto* h = static_cast<ColorHold*>(f->held);
  if (h->runner) return;
  f->held = nullptr;
  h->layer->release(*h);
}

ColorConfig env_config() {
  static ColorConfig c = ColorConfig::from_env();
  return c;
}

}  // namespace

// ---- ColorLayer -------------------------------------------------------------------

bool pause_timer_expire(TimerNode*);
void pause_timer_complete(TimerNode* n);

ColorLayer::ColorLayer(Cluster& c, const ColorConfig& config)
    : cluster_(&c), batch_(config.batch < 1 ? 1 : config.batch) {
  pause_timer_.expire = &pause_timer_expire;
  pause_timer_.complete = &pause_timer_complete;
  pause_timer_.layer = this;
  local_placement_.store(config.placement == "local", std::memory_order_relaxed);
  if (!set_policy(config.steal)) {
    std::fprintf(stderr, "loom: cluster %u: unknown color steal policy '%s'; using mely\n", c.id(),
                 config.steal.c_str());
    set_policy("mely");
  }
}

ColorCore* ColorLayer::core(unsigned index) {
  ColorCore* c = cores_[index].load(std::memory_order_acquire);
  if (__builtin_expect(c != nullptr, 1)) return c;
  SpinGuard g(create_lock_);  // once per processor (not std::mutex: base/sys.hpp)
  c = cores_[index].load(std::memory_order_acquire);
  if (c || closing_) return c;  // a drained cluster being destroyed gets no new runner
  c = new ColorCore;            // type-stable: never freed
  c->proc = cluster_->processor(index);
  c->layer = this;
  c->hold.runner = true;
  c->hold.layer = this;
  loom::FibreAttr attr;
  attr.cluster = cluster_->facade;
  attr.stack_size = kStackRunner;
  attr.name = "color runner";
  Fibre* f = create_fibre(attr, 0, 1, nullptr);
  f->fn = &runner_main;
  f->arg = c;
  __atomic_store_n(&f->affinity, c->proc, __ATOMIC_RELEASE);
  f->pinned = true;
  f->held = &c->hold;
  cluster_->fibres.fetch_add(1, std::memory_order_relaxed);
  c->runner = f;
  cores_[index].store(c, std::memory_order_release);
  return c;
}

ColorCore* ColorLayer::place(Color c) {
  std::size_t n = cluster_->size();
  unsigned index = unsigned((c * 0x9E3779B1u) % n);
  if (local_placement_.load(std::memory_order_relaxed))
    if (Processor* p = this_processor(); p && &p->cluster() == cluster_ && !p->spare()) index = p->index();
  ColorCore* core_here = core(index);
  if (!core_here) {
    std::fprintf(stderr, "loom: color %u posted to cluster %u while it is being destroyed\n", c, cluster_->id());
    std::abort();
  }
  return core_here;
}

// Links q at o (under o's lock), onto the stealing queue too when the policy
// keeps one and q is worth a steal.
void ColorLayer::link(ColorCore& o, ColorQueue* q, ColorStealPolicy* pol, bool front) {
  o.link(q, pol->keeps_worthy && pol->worth(*q, steal_cost_.load(std::memory_order_relaxed)), front);
}

void ColorLayer::enqueue(Color c, ColorItem* it) {
  LOOM_CHAOS_POINT(color_enqueue);
  const std::uint32_t h = color_hash(c);
  ColorShard& s = shard(h);
  ColorStealPolicy* pol = policy_.load(std::memory_order_acquire);
  s.lock.lock();
  ColorQueue* q = s.find(c, h);
  ColorCore* o;
  if (!q) {
    q = new_queue(my_core());
    q->color = c;
    q->owner.store(place(c), std::memory_order_relaxed);
    s.insert(q, h);
    o = lock_owner(q);
    add(o->made, 1);
  } else {
    o = lock_owner(q);
  }
  // q cannot leave the table now: that takes its owner's lock, held here.
  s.lock.unlock();
  (q->tail ? q->tail->next : q->head) = it;
  q->tail = it;
  ++q->count;
  q->work += it->work;
  q->apparent += it->apparent;
  add(o->items, 1);
  add(o->posted, 1);
  bool became_worthy = false;
  if (!q->linked) {
    if (!q->transit && q->dispatchable()) {  // (in transit: the thief links it)
      link(*o, q, pol);
      became_worthy = q->worthy;
    }
  } else if (pol->keeps_worthy && !q->worthy && pol->worth(*q, steal_cost_.load(std::memory_order_relaxed))) {
    o->add_worthy(q);
    became_worthy = true;
  }
  bool wake_runner = false, busy = false;
  if (q->linked) {
    if (o->parked.load(std::memory_order_relaxed) && !o->stopping) {
      o->parked.store(false, std::memory_order_relaxed);
      wake_runner = true;
    } else if (pol->steals) {
      // Work waits behind a busy runner: a thief for it, if the policy
      // would take it (a policy with a stealing queue: if q just joined it).
      busy = (o->listed.load(std::memory_order_relaxed) > 1 || !o->parked.load(std::memory_order_relaxed)) &&
             (pol->keeps_worthy ? became_worthy : pol->worth(*q, steal_cost_.load(std::memory_order_relaxed)));
    }
  }
  o->lock.unlock();
  if (wake_runner)
    schedule_runner(*o);
  else if (busy)
    wake_thief();
}

// A parked runner scheduled while a fibre runs on its processor waits behind
// that fibre, which may not reach a scheduling point for long (it may spin
// until the events ran, as redis's main thread waits for its I/O threads).
// No thief may take the runner (it is pinned: its push wakes none,
// Cluster::wake), but one may take its colors: a thief is woken for them
// when the policy would take one there (its published counts). The push
// fenced before it read the processor's state (Cluster::wake), or is this
// processor's own; a processor that picks another fibre from its idle loop
// first stores its id, fences, then wakes a thief if its queue holds more
// (Processor::idle_loop): one of the two sees the other. Before, the
// runner's push woke a scheduler thief, which gave the runner back and
// stole a color in its find_work (ParkedRunnerBehindABusyFibre in
// color_test: the event waited for ever without it).
void ColorLayer::schedule_runner(ColorCore& o) {
  schedule(o.runner);
  Processor& p = *o.proc;
  if (p.running_id.load(std::memory_order_relaxed) != 0 && !p.idle.load(std::memory_order_relaxed) &&
      policy_.load(std::memory_order_acquire)->stealable(o))
    wake_thief();
}

void ColorLayer::post(Color c, bool shared, void (*fn)(void*), void* arg, HandlerKey key) {
  ColorItem* it = new_item(my_core());
  it->fn = fn;
  it->arg = arg;
  it->shared = shared || c == kUncolored;  // uncolored work is never serialised
  it->handler = handler_stats(key ? key : reinterpret_cast<HandlerKey>(fn));
  it->work = it->handler->estimate();
  double penalty = it->handler->penalty();
  it->apparent = penalty == 1.0 ? it->work : std::uint64_t(double(it->work) / penalty);
  enqueue(c, it);
}

void ColorLayer::start_fibre(Fibre* f) {
  auto* h = static_cast<ColorHold*>(f->held);
  ColorItem* it = reinterpret_cast<ColorItem*>(reinterpret_cast<char*>(h) - offsetof(ColorItem, hold));
  enqueue(h->color, it);
}

// Under o's lock, with q's hold given back: q goes to the back of o's list
// if it can be dispatched (the other colors get their turn); if it is empty
// and idle it leaves the table now when its shard is free (`dead` is set:
// the caller recycles it after unlocking), else it goes to the reap list.
// Returns whom the caller wakes after unlocking: o's runner, if parked and
// o is not the caller's core (whose idle loop finds it); a thief, if o's
// runner is busy (queued, running, or blocked in an event) and the policy
// would take q: a post behind a busy runner wakes one (enqueue), but a post
// to q while a colored fibre held it did not (q was on no list), and its
// events waited behind the runner's event with every other processor
// asleep (Colors.AColorReleasedBehindABusyRunnerIsStolen). (The runner's
// own requeue at a batch's end, o == &me in run(), wakes nobody: it goes on.)
ColorLayer::Wake ColorLayer::requeue(ColorCore* o, ColorQueue* q, ColorCore* mine, ColorQueue*& dead) {
  if (q->transit) return Wake::none;  // its thief links or reaps it when it takes its own lock
  if (q->dispatchable()) {
    if (q->linked) o->unlink(q);
    ColorStealPolicy* pol = policy_.load(std::memory_order_acquire);
    link(*o, q, pol);
    if (o->stopping) return Wake::none;
    if (o->parked.load(std::memory_order_relaxed)) {
      if (o == mine) return Wake::none;
      o->parked.store(false, std::memory_order_relaxed);
      return Wake::runner;
    }
    if (pol->keeps_worthy ? q->worthy : pol->worth(*q, steal_cost_.load(std::memory_order_relaxed)))
      return Wake::thief;
  } else if (q->idle()) {
    // A queue on the reap list stays for the reaper: the list points at it.
    if (!q->reaping) {
      const std::uint32_t h = color_hash(q->color);
      ColorShard& s = shard(h);
      // Shard after core is the wrong order, so only a try: a poster
      // holding the shard may be waiting for this core's lock.
      if (s.lock.try_lock()) {
        s.erase(q, h);
        s.lock.unlock();
        add(o->freed, 1);
        dead = q;
        return Wake::none;
      }
    }
    add_reap(*o, q);
  }
  return Wake::none;
}

void ColorLayer::wake_after_requeue(ColorCore& o, Wake w) {
  if (w == Wake::runner)
    schedule_runner(o);
  else if (w == Wake::thief)
    wake_thief();
}

void ColorLayer::release_queue(ColorQueue* q, bool shared, ColorCore* mine) {
  ColorCore* o = lock_owner(q);
  give_back(q, shared);
  ColorQueue* dead = nullptr;
  Wake wake = requeue(o, q, mine, dead);
  o->lock.unlock();
  wake_after_requeue(*o, wake);
  if (dead) free_queue(dead, mine);
}

void ColorLayer::release(ColorHold& h) {
  LOOM_CHAOS_POINT(color_release);
  ColorItem* it = reinterpret_cast<ColorItem*>(reinterpret_cast<char*>(&h) - offsetof(ColorItem, hold));
  ColorCore* mine = my_core();
  release_queue(h.queue, h.shared, mine);
  free_item(it, mine);
}

void ColorLayer::run(ColorCore& me) {
  // The lock is held from one batch's release to the next batch's take
  // (one lock round trip per batch less), except across the event itself.
  me.lock.lock();
  for (;;) {
    // The runner is pinned: it serves its own processor's core from that
    // processor's kernel thread only (DESIGN.md, "Runners").
    LOOM_CHECK(this_processor() == me.proc, "color runner of processor %u runs on processor %d", me.proc->index(),
               this_processor() ? int(this_processor()->index()) : -1);
    ColorQueue* q = me.head;
    if (!q) {
      bool stop = me.stopping;
      bool reap_now = me.reap != nullptr;
      me.lock.unlock();
      if (stop) return;
      if (reap_now) reap(me, &me);
      note_wait(WaitKind::runtime, nullptr);
      this_processor()->suspend(&post_park, &me);
      me.lock.lock();
      continue;
    }
    bool cold = q->moved;
    // The cost of a steal, as the thief pays it: from the moment it began to
    // look until the stolen color's first batch is released here, less the
    // batch's own run time (victim search, the two locks, waking and
    // switching to this runner, taking and releasing the color, freeing its
    // queue and items to their home pools). The locked part alone measured
    // about 200 cycles on this 2-vCPU guest and made every 100-cycle color
    // look worth a steal; stealing those made the victim slower than no
    // stealing at all (issue 22).
    std::uint64_t stolen_at = cold ? q->stolen_at : 0, ran = 0;
    // What this stolen color's first batch costs here, for the steal's
    // account (account_steal): from the look (the steal's first color) or
    // the take (the others) to the release, less the batch's run time.
    std::uint64_t from = cold ? (stolen_at ? stolen_at : cycles()) : 0;
    q->moved = false;
    ColorItem* it = take(me, q);
    // Shared work left on the list may overlap this item: an idle
    // processor may take it.
    bool help = q->linked;
    me.lock.unlock();
    if (help) wake_thief();
    unsigned batch = batch_.load(std::memory_order_relaxed);
    ColorQueue* dead = nullptr;
    for (unsigned k = 1;; ++k) {
      if (it->fibre) {
        // A colored fibre: it holds the color from now until it exits.
        it->hold.queue = q;
        me.fibres_started.store(me.fibres_started.load(std::memory_order_relaxed) + 1, std::memory_order_release);
        it->fibre->affinity = me.proc;
        me.proc->push(it->fibre);  // (on me.proc: the runner is pinned; a sleeper may steal it)
        me.lock.lock();
        break;
      }
      me.hold.color = q->color;
      me.hold.shared = it->shared;
      std::uint64_t t0 = cycles();
      it->fn(it->arg);
      std::uint64_t dt = cycles() - t0;
      ran += dt;
      // Warm runs are sampled one in four once the handler has a mean: the
      // handler's line is shared by every processor that runs it.
      if (cold || (++me.tick & 3) == 0 || it->handler->warm.load(std::memory_order_relaxed) == 0)
        it->handler->record(dt, cold);
      me.hold.color = kUncolored;
      cold = false;
      bool shared = it->shared;
      free_item(it, &me);
      me.events_run.store(me.events_run.load(std::memory_order_relaxed) + 1, std::memory_order_release);
      // Go on with the same color while the batch lasts and the color is
      // still here; else release it to the back of its owner's list.
      ColorCore* o = lock_owner(q);
      give_back(q, shared);
      if (o == &me && k < batch && q->dispatchable()) {
        it = take(me, q);
        me.lock.unlock();
        continue;
      }
      Wake wake = requeue(o, q, &me, dead);
      if (o != &me) {
        o->lock.unlock();
        wake_after_requeue(*o, wake);
        me.lock.lock();
      }
      break;
    }
    // (me.lock held)
    if (dead) free_queue(dead, &me);  // the runner's thread: its own pool
    if (stolen_at) {
      std::uint64_t spent = cycles() - stolen_at;
      track_median(steal_cost_, spent > ran ? spent - ran : 0);
    }
    if (from) account_steal(me, cycles() - from, ran);
    // Fibres made ready on this processor get their turn between batches;
    // reaping in bulk, when the reap list is long.
    bool reap_now = me.reap_count.load(std::memory_order_relaxed) >= kReapAt;
    Processor* p = this_processor();
    bool yield = p->ready_queue().maybe_nonempty();
    if (reap_now || yield) {
      me.lock.unlock();
      if (reap_now) reap(me, &me);
      if (yield) p->yield();
      me.lock.lock();
    }
  }
}

// Frees the queues of me's reap list that are still dead (any thread;
// `mine`: the caller's core, whose pool takes them, or nullptr). A queue
// whose shard is busy stays on the list for the next time (a reaper that
// waited there spun behind posters that wait for a core lock: 10 % of the
// thief's time in the unbalanced benchmark) unless `wait` (shutdown).
void ColorLayer::reap(ColorCore& me, ColorCore* mine, bool wait) {
  me.lock.lock();
  ColorQueue* list = me.reap;
  me.reap = nullptr;
  me.reap_count.store(0, std::memory_order_relaxed);
  me.lock.unlock();
  ColorQueue *keep = nullptr, *keep_tail = nullptr;
  unsigned kept = 0;
  while (ColorQueue* q = list) {
    list = q->reap_next;
    const std::uint32_t h = color_hash(q->color);
    ColorShard& s = shard(h);
    if (wait) {
      s.lock.lock();
    } else if (!s.lock.try_lock()) {
      // Still reaping (the flag stays set): back on the list below.
      q->reap_next = keep;
      keep = q;
      if (!keep_tail) keep_tail = q;
      ++kept;
      continue;
    }
    ColorCore* o = lock_owner(q);
    bool dead = q->idle() && !q->linked && !q->transit;
    q->reaping = false;
    if (dead) {
      s.erase(q, h);
      add(o->freed, 1);
    }
    o->lock.unlock();
    s.lock.unlock();
    if (dead) free_queue(q, mine);
  }
  if (keep) {
    me.lock.lock();
    keep_tail->reap_next = me.reap;
    me.reap = keep;
    me.reap_count.store(me.reap_count.load(std::memory_order_relaxed) + kept, std::memory_order_relaxed);
    me.lock.unlock();
  }
}

void ColorLayer::wake_thief() {
  ColorStealPolicy* pol = policy_.load(std::memory_order_acquire);
  if (!pol->steals || steals_paused()) return;
  // The work was published with plain stores under a core lock; a thief
  // announces idle, then reads the published counts (its last look): one
  // of the two must see the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (cluster_->idle_processors() == 0) return;
  if (!thief_waking_.exchange(true, std::memory_order_acq_rel))
    if (!cluster_->wake_one()) thief_waking_.store(false, std::memory_order_relaxed);
}

bool ColorLayer::steal(Processor& p, ColorCore& me, bool wait) {
  ColorStealPolicy* pol = policy_.load(std::memory_order_acquire);
  if (steals_paused()) {
    me.steals_held.store(me.steals_held.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return false;
  }
  std::uint64_t t0 = cycles();
  // Victims from their published counts: no lock is taken to find nothing.
  Processor* victims[64];
  std::size_t n = 0;
  for (std::size_t i = 0, size = cluster_->size(); i < size && n < 64; ++i) {
    if (i == p.index()) continue;
    ColorCore* c = core_if_made(unsigned(i));
    if (c && pol->stealable(*c)) victims[n++] = c->proc;
  }
  if (n == 0) return false;
  me.steal_attempts.store(me.steal_attempts.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  n = pol->order(p, victims, n);
  std::uint64_t cost = steal_cost_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < n; ++i) {
    ColorCore& v = *core_if_made(victims[i]->index());
    if (wait)
      v.lock.lock();
    else if (!v.lock.try_lock())
      continue;
    // Up to pol->max_colors colors in one visit, never half the victim's
    // items or more: one lock of the victim and one wake of this runner for
    // several small colors.
    ColorQueue* taken[kMaxStealColors];
    std::size_t got = 0;
    std::uint64_t count = 0, work = 0;
    const std::uint64_t total = v.items.load(std::memory_order_relaxed);
    while (got < pol->max_colors) {
      ColorQueue* q = pol->pick(v, cost);
      if (!q) break;
      v.unlink(q);
      count += q->count;
      work += q->work;
      sub(v.items, q->count);
      q->moved = true;
      q->stolen_at = got == 0 ? t0 : 0;  // the steal's cost is sampled on its first color
      // Between this unlock and the thief's lock the queue is unlinked and
      // may look idle: a reaper that locks its new owner first must not
      // free it under the thief. Nor may a poster or a releaser link it
      // there meanwhile: a second thief could then steal it from under
      // this one, and the two would write it under different locks.
      q->transit = true;
      q->owner.store(&me, std::memory_order_release);
      taken[got++] = q;
      if (2 * count >= total) break;
    }
    v.lock.unlock();
    if (got == 0) continue;
    me.steal_left = unsigned(got);
    me.steal_moved = work;
    me.steal_spent = me.steal_ran = 0;
    LOOM_CHAOS_POINT(color_transit);
    me.lock.lock();
    add(me.items, count);
    ColorStealPolicy* now = policy_.load(std::memory_order_acquire);
    for (std::size_t k = 0; k < got; ++k) {
      ColorQueue* q = taken[k];
      q->transit = false;
      if (!q->linked && q->dispatchable())
        link(me, q, now);
      else if (q->idle() && !q->linked)
        add_reap(me, q);  // (a reaper skipped it while in transit)
    }
    me.lock.unlock();
    smooth(stolen_work_, work / got);
    me.colors_stolen.store(me.colors_stolen.load(std::memory_order_relaxed) + got, std::memory_order_relaxed);
    me.events_stolen.store(me.events_stolen.load(std::memory_order_relaxed) + count, std::memory_order_relaxed);
    return true;
  }
  return false;
}

// Steals must pay. When the runner has released the first batch of every
// color of a steal, the steal's account is closed: it moved `moved` cycles
// of work (the colors' queued work, warm estimates) and cost the thief
// `spent - ran`: the look, both locks, waking and switching to the runner,
// each color's take and release and its queue and items sent home (the
// batches' run time, cold misses included, counts as work: a handler's
// penalty is the penalty heuristic's business), and about as much again to
// the victim. It paid if it moved more than that (time-left's test, on the
// whole steal, after the fact). Thief-side alone, blind steals of the
// unbalanced benchmark's short colors came out paying on some runs and not
// on others, and ran at 0.7-0.9x no stealing either way. The
// cluster keeps the share of its recent steals that paid (1/8 a steal);
// while under half, thieves are paused (no look, no wake) for a time that
// doubles at each steal that lost, from kPauseMin to kPauseMax (a steal that
// paid keeps it); the steal after a pause is a probe that samples again, and
// the pauses stop when the share is back at half.
// The share, not the mean payoff: a preempted thief's steal costs
// milliseconds on this loaded guest, and such outliers steered a mean.
// Policies keep their choices: this decides how often a thief may look,
// never what it takes. What it is for: policies that cannot weigh a color
// (libasync-smp, mely:base, mely:locality, mely:penalty alone) took 16
// one-event colors of ~250 cycles a visit, each of which cost the thief
// cross-core misses on all the poster wrote, and ran the unbalanced
// benchmark at 0.6-0.8x no stealing (issue 22).
void ColorLayer::account_steal(ColorCore& me, std::uint64_t spent, std::uint64_t ran) {
  if (me.steal_left == 0) return;  // an account dropped by a later steal
  me.steal_spent += spent;
  me.steal_ran += ran;
  if (--me.steal_left) return;
  // The work moved: the estimate, or what the first batches took when
  // that is more (a handler's first runs: its estimate is a default).
  std::uint64_t moved = me.steal_moved > me.steal_ran ? me.steal_moved : me.steal_ran;
  // What it cost, counted twice: the thief's part, and the victim's, which
  // the thief cannot time but mirrors it: every line the thief pulled from
  // the victim (queues, items, the table's buckets) goes back there, the
  // queues and items to their home pool for the victim's next posts.
  std::int64_t cost = std::int64_t(me.steal_spent) - std::int64_t(me.steal_ran);
  std::int64_t net = std::int64_t(moved) - 2 * (cost > 0 ? cost : 0);
  std::int64_t m = steal_payoff_.load(std::memory_order_relaxed);
  steal_payoff_.store(m - m / 8 + net / 8, std::memory_order_relaxed);
  const bool paid = net > 0;
  std::uint32_t share = steals_paid_.load(std::memory_order_relaxed);
  share = share - share / 8 + (paid ? kShareOne / 8 : 0);
  steals_paid_.store(share, std::memory_order_relaxed);
  std::int64_t len = pause_len_.load(std::memory_order_relaxed);
  if (2 * share >= kShareOne)
    len = 0;  // most steals pay: no pause
  else if (!paid)
    len = len ? (2 * len < kPauseMax ? 2 * len : kPauseMax) : kPauseMin;
  else if (!len)
    len = kPauseMin;
  pause_len_.store(len, std::memory_order_relaxed);
  std::int64_t until = len ? now_ns() + len : 0;
  pause_until_.store(until, std::memory_order_relaxed);
  paused_.store(until != 0, std::memory_order_relaxed);
  if (until) arm_pause_timer(until);
}

// A flag, not a look at the clock: posts ask on every post behind a busy
// runner (clock_gettime there cost the poster about 5 %), the idle
// thieves at every look. The pause's timer lowers it.
bool ColorLayer::steals_paused() const noexcept { return paused_.load(std::memory_order_relaxed); }

// A paused thief must look again when the pause ends if work waits, and
// nobody else may wake it then: posts do not while steals are paused, and a
// busy victim's runner may be inside one long event (the relay of
// color_test held it so, for ever). The pause's timer does: at its end a
// thief is woken (a pause lengthened meanwhile re-arms it).
bool pause_timer_expire(TimerNode*) { return true; }

void pause_timer_complete(TimerNode* n) {
  ColorLayer* l = static_cast<PauseTimer*>(n)->layer;
  l->pause_timer_fired();
}

void ColorLayer::arm_pause_timer(std::int64_t until) {
  if (pause_timer_armed_.exchange(true, std::memory_order_acq_rel)) return;  // it re-arms when it fires
  pause_timer_.deadline = until;
  cluster_->add_timer(&pause_timer_);
}

void ColorLayer::pause_timer_fired() {
  pause_timer_armed_.store(false, std::memory_order_release);
  std::int64_t until = pause_until_.load(std::memory_order_relaxed);
  if (until && now_ns() < until) {
    arm_pause_timer(until);  // lengthened meanwhile
    return;
  }
  // (A thief that set a new pause between the load and here keeps its
  // flag only until this store: one probe early, no lost wake.)
  paused_.store(false, std::memory_order_relaxed);
  wake_thief();
}

Fibre* ColorLayer::find_work(Processor& p, bool last_look) {
  // A spare (sched/monitor.cpp) has no color core: it takes no colors.
  if (p.spare()) return nullptr;
  if (thief_waking_.load(std::memory_order_relaxed)) thief_waking_.store(false, std::memory_order_relaxed);
  ColorCore* me = core_if_made(p.index());
  bool have = false;
  if (me) {
    // Without the lock: only this processor's thread parks its runner (the
    // post-switch action), so "not parked" read here is true (the runner is
    // queued, running or blocked in an event); a stale "parked" is checked
    // again under the lock below.
    if (!me->parked.load(std::memory_order_relaxed)) return nullptr;
    have = me->listed.load(std::memory_order_relaxed) > 0;
  }
  if (!have) {
    ColorStealPolicy* pol = policy_.load(std::memory_order_acquire);
    if (!pol->steals) return nullptr;
    if (!me) {
      // A processor that never had colors steals only if somebody has some.
      bool any = false;
      for (std::size_t i = 0, n = cluster_->size(); i < n && !any; ++i)
        if (ColorCore* c = core_if_made(unsigned(i))) any = pol->stealable(*c);
      if (!any) return nullptr;
      me = core(p.index());
      if (!me) return nullptr;  // the cluster is being destroyed
    }
    if (!steal(p, *me, last_look)) return nullptr;
  }
  me->lock.lock();
  Fibre* f = nullptr;
  if (me->parked.load(std::memory_order_relaxed) && me->head && !me->stopping) {
    me->parked.store(false, std::memory_order_relaxed);
    f = me->runner;
  }
  me->lock.unlock();
  return f;
}

// Runs first, then posts: an event counted as run had its own posts counted
// before it (release, then acquire); each core's count read under its lock.
bool ColorLayer::drained(std::uint64_t* ran, std::uint64_t* queued) {
  std::uint64_t done = 0, posted = 0;
  std::size_t n = cluster_->size();
  for (std::size_t i = 0; i < n; ++i)
    if (ColorCore* c = core_if_made(unsigned(i)))
      done += c->events_run.load(std::memory_order_acquire) + c->fibres_started.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i)
    if (ColorCore* c = core_if_made(unsigned(i))) {
      c->lock.lock();
      posted += c->posted.load(std::memory_order_relaxed);
      c->lock.unlock();
    }
  if (ran) *ran = done;
  if (queued) *queued = posted;
  return posted == done;
}

void ColorLayer::shutdown() {
  // Drain before stopping anything. A runner stops when its own list is
  // empty, and an event still running on another core may then post to a
  // color of a stopped one, where nobody would run it (outside review:
  // chained posts lost in 23 of 40 destroyed clusters). So every runner
  // runs on, as usual, until each item ever posted has run, seen twice
  // 100 µs apart; only then are they stopped, with nothing left to post.
  // As usual includes making a core: a chain may reach a processor that
  // never had a color (closing_ set first made that post abort the
  // program; color_drain_review_test).
  //
  // Items that cannot run are waited for for ever: behind a color held by a
  // colored fibre that stays blocked, or by an event blocked in it (the
  // program destroyed a cluster that still has work). That is said once,
  // after a second with no item run or posted, rather than hung in silence
  // (outside review: a blocked colored fibre with an event behind it used
  // to be reported by ~Cluster's count of fibres, after stopping runners
  // that then never ran the event).
  std::uint64_t last_ran = 0, last_posted = 0;
  std::int64_t still_since = now_ns();
  bool told = false;
  for (int quiet = 0; quiet < 2;) {
    std::uint64_t ran = 0, posted = 0;
    quiet = drained(&ran, &posted) ? quiet + 1 : 0;
    if (ran != last_ran || posted != last_posted || quiet) {
      last_ran = ran;
      last_posted = posted;
      still_since = now_ns();
    } else if (!told && now_ns() - still_since > 1'000'000'000) {
      std::fprintf(stderr,
                   "loom: cluster %u is being destroyed and waits for %llu color item(s): none has run for a "
                   "second (their colors are held by a colored fibre, or an event, still running or blocked)\n",
                   cluster_->id(), (unsigned long long)(posted - ran));
      told = true;
    }
    rt::sleep_until_ns(rt::now_ns() + 100'000);
  }
  {
    SpinGuard g(create_lock_);
    closing_ = true;  // every core made is seen by the loop below
  }
  for (std::size_t i = 0, n = cluster_->size(); i < n; ++i) {
    ColorCore* c = core_if_made(unsigned(i));
    if (!c) continue;
    c->lock.lock();
    c->stopping = true;
    bool wake = c->parked.load(std::memory_order_relaxed);
    c->parked.store(false, std::memory_order_relaxed);
    c->lock.unlock();
    if (wake) schedule(c->runner);
    join_fibre(c->runner);  // it drains its list first
    reap(*c, my_core(), true);
  }
  // No pause outlives the runners (their steals' accounts set them): the
  // cluster's timer heap is not to keep a node of a layer that is done.
  pause_until_.store(0, std::memory_order_relaxed);
  paused_.store(false, std::memory_order_relaxed);
  cluster_->timers.remove(&pause_timer_);
  // Cores outlive the layer (a late remote push stays safe), their spares
  // need not: a destroyed cluster kept its largest backlog's worth of queues
  // and items (outside review, ReviewPools.DestroyedClustersGiveTheirPoolsBack).
  for (std::size_t i = 0, n = cluster_->size(); i < n; ++i)
    if (ColorCore* c = core_if_made(unsigned(i))) empty_pools(*c);
}

bool ColorLayer::set_policy(const std::string& name) {
  std::unique_ptr<ColorStealPolicy> p = make_color_policy(name, *this);
  if (!p) return false;
  SpinGuard g(policy_lock_);
  policy_.store(p.get(), std::memory_order_release);
  policies_.push_back(std::move(p));
  // Whether steals pay is learnt anew: the new policy takes other colors.
  steals_paid_.store(kShareOne, std::memory_order_relaxed);
  steal_payoff_.store(0, std::memory_order_relaxed);
  pause_len_.store(0, std::memory_order_relaxed);
  pause_until_.store(0, std::memory_order_relaxed);
  paused_.store(false, std::memory_order_relaxed);
  return true;
}

std::string ColorLayer::policy_name() { return policy_.load(std::memory_order_acquire)->name(); }

ColorStats ColorLayer::stats() const {
  ColorStats s;
  std::uint64_t made = 0, freed = 0;
  for (std::size_t i = 0, n = cluster_->size(); i < n; ++i) {
    ColorCore* c = core_if_made(unsigned(i));
    if (!c) continue;
    s.events_run += c->events_run.load(std::memory_order_relaxed);
    s.fibres_started += c->fibres_started.load(std::memory_order_relaxed);
    s.steal_attempts += c->steal_attempts.load(std::memory_order_relaxed);
    s.colors_stolen += c->colors_stolen.load(std::memory_order_relaxed);
    s.events_stolen += c->events_stolen.load(std::memory_order_relaxed);
    made += c->made.load(std::memory_order_relaxed);
    freed += c->freed.load(std::memory_order_relaxed);
  }
  s.steal_cost_cycles = steal_cost_.load(std::memory_order_relaxed);
  s.stolen_work_cycles = stolen_work_.load(std::memory_order_relaxed);
  s.colors_live = made > freed ? made - freed : 0;  // (sums of counters read one after the other)
  return s;
}

ColorLayer& color_layer(Cluster& c) {
  ColorLayer* l = c.color.load(std::memory_order_acquire);
  if (__builtin_expect(l != nullptr, 1)) return *l;
  static SpinLock create_lock;
  SpinGuard g(create_lock);
  l = c.color.load(std::memory_order_acquire);
  if (l) return *l;
  fibre_held_start_hook = &held_start;
  fibre_held_exit_hook = &held_exit;
  l = new ColorLayer(c, env_config());  // type-stable, like the cluster
  c.color.store(l, std::memory_order_release);
  c.add_extension(l);
  return *l;
}

void color_attach(Fibre* f, Color c, bool shared) {
  ColorLayer& l = color_layer(*f->cluster);
  ColorItem* it = ColorLayer::new_item(l.my_core());
  it->fibre = f;
  it->shared = shared;
  it->hold.color = c;
  it->hold.shared = shared;
  it->hold.layer = &l;
  f->held = &it->hold;
}

}  // namespace loom::rt

// ---- public API (loom/color.hpp) ------------------------------------------------

namespace loom {

namespace {
rt::Cluster& target(Cluster* c) {
  if (c) return c->impl();
  if (rt::Fibre* f = rt::this_fibre_or_null()) return *f->cluster;
  return Cluster::default_cluster().impl();
}
std::atomic<std::uint32_t> next_color{0x80000000u};
}  // namespace

ColorConfig ColorConfig::from_env() {
  ColorConfig c;
  if (const char* s = std::getenv("LOOM_COLOR_STEAL"); s && *s) {
    if (rt::color_policy_valid(s))
      c.steal = s;
    else
      rt::env_complain("LOOM_COLOR_STEAL", s, "none, libasync-smp, mely[:locality,time-left,penalty|base]", c.steal);
  }
  c.batch = unsigned(rt::env_size("LOOM_COLOR_BATCH", c.batch, 1, 1u << 20));
  c.placement = rt::env_choice("LOOM_COLOR_PLACEMENT", {"hash", "local"}, 0) == 0 ? "hash" : "local";
  return c;
}

void detail::post_event(Cluster* cluster, Color c, bool shared, void (*fn)(void*), void* arg, HandlerKey key) noexcept {
  rt::color_layer(target(cluster)).post(c, shared, fn, arg, key);
}

Color current_color() noexcept {
  rt::Fibre* f = rt::this_fibre_or_null();
  if (!f || !f->held) return kUncolored;
  return static_cast<rt::ColorHold*>(f->held)->color;
}

Color allocate_colors(std::uint32_t n) {
  if (n == 0) throw std::invalid_argument("loom: allocate_colors(0)");
  std::uint32_t base = next_color.load(std::memory_order_relaxed);
  do {
    if (std::uint64_t(base) + n > 0xFFFFFFFFull) throw std::length_error("loom: no colors left to allocate");
  } while (!next_color.compare_exchange_weak(base, base + n, std::memory_order_relaxed));
  return base;
}

bool set_color_policy(Cluster& cluster, const std::string& policy) {
  return rt::color_layer(cluster.impl()).set_policy(policy);
}
std::string color_policy(Cluster& cluster) { return rt::color_layer(cluster.impl()).policy_name(); }
void set_color_batch(Cluster& cluster, unsigned batch) { rt::color_layer(cluster.impl()).set_batch(batch); }
bool set_color_placement(Cluster& cluster, const std::string& placement) {
  if (placement != "hash" && placement != "local") return false;
  rt::color_layer(cluster.impl()).set_local_placement(placement == "local");
  return true;
}

void set_penalty(HandlerKey handler, double penalty) {
  rt::handler_stats(handler)->penalty_override.store(penalty < 1 && penalty != 0 ? 1 : penalty,
                                                     std::memory_order_relaxed);
}
void set_penalty(void (*fn)(void*), double penalty) { set_penalty(reinterpret_cast<HandlerKey>(fn), penalty); }

HandlerTimes handler_times(HandlerKey handler) {
  const rt::HandlerStats* s = rt::handler_stats(handler);
  HandlerTimes t;
  t.warm_cycles = s->warm.load(std::memory_order_relaxed);
  t.cold_cycles = s->cold.load(std::memory_order_relaxed);
  t.penalty = s->penalty();
  return t;
}
HandlerTimes handler_times(void (*fn)(void*)) { return handler_times(reinterpret_cast<HandlerKey>(fn)); }

ColorStats color_stats(Cluster& cluster) { return rt::color_layer(cluster.impl()).stats(); }

StealPayoff steal_payoff(Cluster& cluster) {
  rt::ColorLayer& l = rt::color_layer(cluster.impl());
  StealPayoff p;
  p.payoff_cycles = l.steal_payoff();
  p.paid_share = l.steals_paid();
  p.paused = l.steals_paused();
  for (std::size_t i = 0, n = l.cluster().size(); i < n; ++i)
    if (rt::ColorCore* c = l.core_if_made(unsigned(i))) p.looks_held += c->steals_held.load(std::memory_order_relaxed);
  return p;
}

}  // namespace loom
