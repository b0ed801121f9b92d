#include "io/rest.hpp"

#include <fcntl.h>

#include <cerrno>
#include <new>

#include "base/chaos.hpp"
#include "base/sys.hpp"
#include "io/fd_table.hpp"
#include "io/poller.hpp"
#include "sched/cluster.hpp"
#include "sched/in_handler.hpp"
#include "sched/processor.hpp"
#include "loom/cluster.hpp"

namespace loom::rt {

namespace {

void free_block(Fibre* f) { delete RestBlock::of(f); }
// Installed at load, before any thread (the only blocks are this file's).
[[maybe_unused]] const bool free_installed = (rest_block_free = &free_block, true);

// What to do meanwhile while the other side finishes a short step (see
// ready_word.cpp: its kernel thread may have been preempted there).
void wait_published(RestBlock* b) {
  for (int spins = 0; !b->published.load(std::memory_order_acquire); ++spins) {
    if (spins < 64)
      cpu_relax();
    else
      sys::sched_yield();
  }
}

// Makes the fibre runnable at b->fn. It has no stack yet: the processor
// that runs it gives it one from its own cache as it switches to it
// (give_stack, sched/fibre.hpp), so that a batch of restarts delivered
// together does not take a stack each before the first has run, and each
// runs on the stack its processor's last rest just left warm.
void restart(RestBlock* b, int status) {
  Fibre* f = &b->fibre;
  b->status = status;
  // The edge that continues it is spent: a drained-stream hint would make
  // the next read wait for another one, and a yield before it would only
  // delay a read that finds the request (a hint for this number; harmless
  // if it was closed meanwhile).
  if (status == 0) {
    FdEntry& e = *b->entry;
    if (e.in_drained.load(std::memory_order_relaxed)) e.in_drained.store(false, std::memory_order_relaxed);
    if (!e.in_full.load(std::memory_order_relaxed)) e.in_full.store(true, std::memory_order_relaxed);
  }
  f->fn = b->fn;
  f->arg = b->arg;
  LOOM_CHAOS_POINT(rest_restart);
  schedule(f);
}

// The readiness callback: an edge, a hang-up, or a close (after close(2)).
void on_ready(void* arg) {
  auto* b = static_cast<RestBlock*>(arg);
  wait_published(b);
  if (b->timer.deadline != kNoDeadline) b->fibre.cluster->timers.remove(&b->timer);
  restart(b, 0);
}

bool on_deadline(TimerNode* n) { return static_cast<RestTimer*>(n)->owner->entry->in.ready.disarm(); }

void after_deadline(TimerNode* n) {
  RestBlock* b = static_cast<RestTimer*>(n)->owner;
  wait_published(b);
  restart(b, ETIMEDOUT);
}

// Arms the callback on fd's input word and the deadline's timer, then
// publishes: from here on a post, a close or the timer continues the fibre.
void arm_rest(RestBlock* b) {
  LOOM_CHAOS_POINT(rest_arm);
  Fibre* f = &b->fibre;
  FdEntry& e = *b->entry;
  int r = b->input_now || e.hup.load(std::memory_order_relaxed) ? 1 : e.in.ready.arm(&on_ready, b);
  if (r == 0) {
    io_arm(b->fd, e, false);
    // A close since rest() read the count may have found nothing armed
    // (and a new descriptor under the number would never post ours): the
    // close counts (seq_cst) before it takes the callback.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (e.gen.load(std::memory_order_seq_cst) != b->gen && e.in.ready.disarm()) r = 1;
  }
  if (r == 0 && b->timer.deadline != kNoDeadline) f->cluster->add_timer(&b->timer);
  b->published.store(true, std::memory_order_release);
  // A pending edge or a hang-up (the read finds the end at once), or a
  // fibre somehow waiting there already (EBUSY: its turn mutex makes that
  // a bug of the caller's): continue now.
  if (r != 0) restart(b, 0);
}

// On the next fibre, once the resting one's context is saved (invariant 1):
// its stack goes to the cache, the block into the listing, the callback
// and the timer are armed.
void post_rest(Processor& here, Fibre* prev, void* arg) {
  auto* b = static_cast<RestBlock*>(arg);
  Fibre* f = &b->fibre;
  context_destroy(prev->ctx);
  Stack s = prev->stack;
  if (prev == f) {
    // Under the list's lock: a listing reads the stack (its use, its high
    // water mark) while it holds it, and the stack may be unmapped once in
    // the cache (outside review: TSan, the listing against this store).
    SpinGuard g(f->live_in->lock);
    __atomic_store_n(&f->stack.base, nullptr, __ATOMIC_RELAXED);
  }
  if (prev != f) {
    // The first rest: the block on the stack gives its place in the live
    // list to the one on the heap.
    LiveFibres* l = prev->live_in;
    SpinGuard g(l->lock);
    f->live_in = l;
    f->live_prev = prev->live_prev;
    f->live_next = prev->live_next;
    if (f->live_prev)
      f->live_prev->live_next = f;
    else
      l->head = f;
    if (f->live_next) f->live_next->live_prev = f;
    prev->live_in = nullptr;
  }
  if (prev != f) prev->~Fibre();
  here.stacks().put(s);
  arm_rest(b);
}

// What both rest() and rest_start() ask of fd: a pollable descriptor,
// registered, whose input nobody waits for. 0 or an error number; *fresh:
// registered just now (the registration reports what is queued already).
int check_fd(int fd, Cluster& c, FdEntry*& e, std::uint32_t& gen, bool* fresh = nullptr) {
  e = FdTable::instance().get(fd);
  if (!e) return EBADF;
  std::uint8_t kind = e->kind.load(std::memory_order_acquire);
  if (kind == kFdUnknown) kind = classify(fd, *e);
  if (kind == kFdUnknown) return EBADF;  // not open
  if (kind != kFdPollable) return EPERM;  // what epoll says of a regular file
  gen = e->gen.load(std::memory_order_acquire);
  if (!e->registered.load(std::memory_order_acquire)) {
    if (!io_register(io_state(c), fd, *e)) return errno;
    if (fresh) *fresh = true;
  }
  if (e->in.ready.has_waiter()) return EBUSY;
  return 0;
}

// An edge is what continues a resting fibre. Unless the last read proved
// the queue empty (drained: a short read; a registration just made, which
// reports what is queued; a pending edge or hang-up, which continue it
// anyway), bytes may wait whose edge was spent before that read (one that
// filled its buffer: memcached reads at most its buffer, then waits as
// libevent does, level-triggered): look, as poll does (one poll(2)). Both
// rest() and rest_start() (a descriptor handed over after such a read:
// outside review, RestStartLook) ask. True: input is queued now.
bool look(int fd, FdEntry& e, bool fresh) {
  if (fresh || e.in_drained.load(std::memory_order_relaxed) || e.hup.load(std::memory_order_relaxed) ||
      e.in.ready.has_token())
    return false;
  pollfd q{fd, POLLIN, 0};
  return sys::poll(&q, 1, 0) > 0;
}

// A new heap block (the first rest, or a fibre started at rest).
RestBlock* new_block() {
  auto* b = new (std::nothrow) RestBlock;
  if (!b) return nullptr;
  b->fibre.join.store(kJoinDetached, std::memory_order_relaxed);
  b->fibre.rest_block = true;
  b->timer.owner = b;
  b->timer.expire = &on_deadline;
  b->timer.complete = &after_deadline;
  return b;
}

void set_rest(RestBlock* b, int fd, void (*fn)(void*), void* arg, FdEntry* e, std::uint32_t gen, Deadline d,
              bool input_now) {
  b->fn = fn;
  b->arg = arg;
  b->fd = fd;
  b->entry = e;
  b->gen = gen;
  b->timer.deadline = d == kForever ? kNoDeadline : d;
  b->published.store(false, std::memory_order_relaxed);
  b->input_now = input_now;
  b->fibre.wait_object.store(fd_object(fd), std::memory_order_relaxed);
  b->fibre.wait_kind.store(WaitKind::rest, std::memory_order_relaxed);
}

}  // namespace

int rest(int fd, void (*fn)(void*), void* arg, Deadline d) {
  if (!fn) return EINVAL;
  Processor* p = this_processor_at_entry();
  if (!p || in_signal_handler()) return EPERM;  // a kernel thread: nothing to give back
  Fibre* self = p->current();
  // Native fibres (main, the idle loop) have no stack to give; a joinable
  // fibre's handle points at its block; a fibre with a thread control block
  // of its own at its stack's top, or a color hold, carries state there
  // that is not moved (a block on the heap, FibreAttr::tls_on_heap, stays
  // where it is and goes with the fibre).
  if (!self->stack || self->join.load(std::memory_order_acquire) != kJoinDetached ||
      (self->c_handle && !self->rest_block))  // (a heap block stays put: its id too)
    return EINVAL;
  if ((self->tcb && !self->tcb_heap) || self->held || self->offload_home.load(std::memory_order_relaxed) ||
      self->stack.caller)  // (the program's stack is not loom's to give back)
    return ENOTSUP;
  FdEntry* e;
  std::uint32_t gen;
  bool fresh = false;
  if (int err = check_fd(fd, p->cluster(), e, gen, &fresh)) return err;
  const bool input_now = look(fd, *e, fresh);
  RestBlock* b;
  if (self->rest_block) {
    b = RestBlock::of(self);
  } else {
    b = new_block();
    if (!b) return ENOMEM;
    Fibre& n = b->fibre;
    n.affinity = self->affinity;
    n.cluster = self->cluster;
    n.priority = self->priority;
    n.background = self->background;
    n.id = self->id;
    n.name = self->name;
    n.specific = self->specific;
    n.pinned = self->pinned;
    n.stack.size = self->stack.size;  // no base: the next run's processor gives it one of that size
    n.tcb = self->tcb;                // (on the heap: it stays where it is)
    n.tcb_heap = self->tcb_heap;
    if (rest_block_moved) rest_block_moved(self, &n);
  }
  set_rest(b, fd, fn, arg, e, gen, d, input_now);
  p->counters.add(Stat::rests);
  Fibre* next = p->next_ready();
  p->switch_to(next ? next : &p->idle_fibre(), &post_rest, b, /*dying=*/true);
  __builtin_unreachable();
}

int rest_start(int fd, void (*fn)(void*), void* arg, const FibreAttr& attr, Deadline d) {
  if (!fn || static_cast<unsigned>(attr.priority) >= kPriorities) return EINVAL;
  if (attr.color) return ENOTSUP;  // a color hold is taken as a fibre starts, on its stack's side
  if (attr.stack_size && (attr.stack_size < kStackMin || attr.stack_size > kStackMax)) return EINVAL;
  if (attr.stack_addr) return EINVAL;  // a fibre started at rest has no stack to run on yet
  Processor* here = this_processor();
  Cluster* c = attr.cluster ? &attr.cluster->impl()
               : here       ? &here->cluster()
                            : &loom::Cluster::default_cluster().impl();
  FdEntry* e;
  std::uint32_t gen;
  bool fresh = false;
  if (int err = check_fd(fd, *c, e, gen, &fresh)) return err;
  const bool input_now = look(fd, *e, fresh);
  RestBlock* b = new_block();
  if (!b) return ENOMEM;
  Fibre& n = b->fibre;
  n.cluster = c;
  // Where place_new would push a new fibre (no affinity where it would
  // queue it on a shared queue).
  if (!attr.background && c->config().queue != QueueKind::shared && c->config().placement != Placement::share)
    n.affinity = c->next_home();
  n.priority = static_cast<unsigned char>(attr.priority);
  n.background = attr.background;
  n.id = next_fibre_id();
  n.name = attr.name;
  n.stack.size = attr.stack_size ? attr.stack_size : c->config().stack_size;
  set_rest(b, fd, fn, arg, e, gen, d, input_now);
  c->fibres.fetch_add(1, std::memory_order_relaxed);
  count(*c, Stat::fibres_created);
  count(*c, Stat::rests);
  live_add(&n);
  arm_rest(b);
  // From outside the cluster: its processors may all sleep on their
  // futexes, not in the poller (the cluster's I/O may be new), and nothing
  // would ever look at fd: one goes round its idle loop again.
  if (!here || &here->cluster() != c) c->wake_one();
  return 0;
}

int rest_status() noexcept {
  Fibre* f = this_fibre_or_null();
  return f && f->rest_block ? RestBlock::of(f)->status : 0;
}

}  // namespace loom::rt
