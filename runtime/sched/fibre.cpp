#include "sched/fibre.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>

#include "base/futex.hpp"
#include "sched/cluster.hpp"
#include "sched/processor.hpp"
#include "sched/tls.hpp"

namespace loom::rt {

namespace {

std::atomic<std::uint64_t> fibre_ids{1};

// Each kernel thread takes ids in blocks: a locked add on one shared line
// per fibre was 6 % of create+join. Ids stay unique; across threads they are
// only roughly in creation order.
constexpr std::uint64_t kIdBlock = 64;
thread_local std::uint64_t tls_id_next __attribute__((tls_model("initial-exec"))) = 0;
thread_local std::uint64_t tls_id_end __attribute__((tls_model("initial-exec"))) = 0;

inline char* align_down(char* p, std::size_t a) {
  return reinterpret_cast<char*>(reinterpret_cast<std::uintptr_t>(p) & ~(std::uintptr_t(a) - 1));
}

// A joiner registers itself after its context is saved (see fibre.hpp).
void post_register_joiner(Processor&, Fibre* joiner, void* arg) {
  auto* f = static_cast<Fibre*>(arg);
  std::uintptr_t expected = kJoinRunning;
  if (!f->join.compare_exchange_strong(expected, reinterpret_cast<std::uintptr_t>(joiner), std::memory_order_acq_rel))
    schedule(joiner);  // it finished meanwhile: nobody else will wake us
}

// A stack from p's cache, or a new one; when the kernel refuses a new one
// (RLIMIT_AS, vm.max_map_count), the cache's stacks of other sizes are given
// back first and the mapping tried once more.
Stack cached_stack(Processor& p, std::size_t size) {
  try {
    return p.stacks().get(size);
  } catch (const std::bad_alloc&) {
    p.stacks().trim(0);
    return p.stacks().get(size);
  }
}

}  // namespace

void (*fibre_exit_hook)(Fibre*) = nullptr;
void (*fibre_held_start_hook)(Fibre*) = nullptr;
void (*fibre_held_exit_hook)(Fibre*) = nullptr;

std::uint64_t next_fibre_id() noexcept {
  if (tls_id_next == tls_id_end) {
    tls_id_next = fibre_ids.fetch_add(kIdBlock, std::memory_order_relaxed);
    tls_id_end = tls_id_next + kIdBlock;
  }
  return tls_id_next++;
}

Fibre* create_fibre(const FibreAttr& attr, std::size_t payload, std::size_t align, void** payload_out) {
  if (static_cast<unsigned>(attr.priority) >= kPriorities) throw std::invalid_argument("loom: fibre priority out of range");
  Cluster* c;
  if (attr.cluster) {
    c = &attr.cluster->impl();
  } else if (Fibre* self = this_fibre_or_null()) {
    c = self->cluster;
  } else {
    c = &loom::Cluster::default_cluster().impl();
  }
  const bool caller_stack = attr.stack_addr != nullptr;
  std::size_t size = attr.stack_size ? attr.stack_size : c->config().stack_size;
  if (caller_stack && size < kStackMin) throw std::invalid_argument("loom: a caller's stack smaller than kStackMin");
  if (size < kStackMin) size = kStackMin;
  if (payload > size / 2) throw std::length_error("loom: fibre function object larger than half its stack");

  Processor* p = this_processor();
  if (!p) count(*c, Stat::stack_misses);
  const std::size_t tls_bytes = attr.own_tls ? tls::reserve() : 0;
  const bool heap_tls = tls_bytes && (attr.tls_on_heap || caller_stack);  // (the caller's size is all its own)
  if (tls_bytes && !heap_tls) size += tls_bytes;
  Stack s = caller_stack ? stack_adopt(attr.stack_addr, size) : p ? cached_stack(*p, size) : stack_allocate(size);
  auto* f = new (align_down(s.hi() - sizeof(Fibre), 64)) Fibre;
  char* below = reinterpret_cast<char*>(f);
  if (tls_bytes) {
    try {
      if (heap_tls) {
        f->tcb_heap = ::operator new(tls_bytes);
        f->tcb = tls::make(static_cast<char*>(f->tcb_heap) + tls_bytes);
      } else {
        f->tcb = tls::make(below);
      }
    } catch (...) {
      ::operator delete(f->tcb_heap);
      f->~Fibre();
      // No memory for the thread block (RLIMIT_AS): the cache's stacks are
      // what this processor can give back, before the caller tries again
      // (a creator that retried on one processor found 36 cached 16 MiB
      // stacks holding the address space the heap needed, for good).
      if (s.caller) {
        stack_forget(s);
      } else if (p) {
        stack_release(s);
        p->stacks().trim(0);
      } else {
        stack_release(s);
      }
      throw;
    }
    if (!heap_tls) below -= tls_bytes;
    tls::set_stack(f->tcb, s.lo(), s.hi());
  }
  if (payload) {
    below = align_down(below - payload, align < 16 ? 16 : align);
    *payload_out = below;
  }
  f->stack = s;
  f->cluster = c;
  f->priority = static_cast<unsigned char>(attr.priority);
  f->background = attr.background;
  f->name = attr.name;
  f->id = next_fibre_id();
  below = align_down(below, 64);
  start_fibre_context(f, s.lo(), std::size_t(below - s.lo()));
  return f;
}

void start_fibre(Fibre* f, void (*fn)(void*), void* arg) {
  f->fn = fn;
  f->arg = arg;
  f->cluster->fibres.fetch_add(1, std::memory_order_relaxed);
  count(*f->cluster, Stat::fibres_created);
  if (stack_watermark) stack_paint(*f);
  live_add(f);  // before it can run (and exit)
  if (f->held) f->wait_kind.store(WaitKind::color, std::memory_order_relaxed);  // until the layer starts it
  if (f->held && fibre_held_start_hook)
    fibre_held_start_hook(f);
  else
    f->cluster->place_new(f);
}

void (*rest_block_free)(Fibre*) = nullptr;
void (*rest_block_moved)(Fibre*, Fibre*) = nullptr;

void give_stack(Processor& p, Fibre& f) {
  Stack s;
  try {
    s = p.stacks().get(f.stack.size);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "loom: cannot map a %zu KiB stack to continue fibre %llu after its rest\n",
                 f.stack.size / 1024, (unsigned long long)f.id);
    std::abort();
  }
  start_fibre_context(&f, s.lo(), s.size);
  if (f.stack.size != s.size) f.stack.size = s.size;  // (the cache's are of the size asked)
  f.stack.valgrind_id = s.valgrind_id;
  __atomic_store_n(&f.stack.base, s.base, __ATOMIC_RELEASE);  // after the context: the listing reads both
  if (stack_watermark) stack_paint(f);
}

void release_fibre(Fibre* f) noexcept {
  if (f->tcb) tls::destroy(f->tcb);
  ::operator delete(f->tcb_heap);
  Stack s = f->stack;
  if (f->rest_block)
    rest_block_free(f);  // (io/rest.cpp; the only way a block gets there)
  else
    f->~Fibre();
  if (s.caller)
    stack_forget(s);
  else if (Processor* p = this_processor())
    p->stacks().put(s);
  else
    stack_release(s);
}

void wait_fibre(Fibre* f) {
  if (f->join.load(std::memory_order_acquire) != kJoinDone) {
    if (Processor* p = this_processor()) {
      note_wait(WaitKind::join, reinterpret_cast<const void*>(std::uintptr_t(f->id)));
      p->suspend(&post_register_joiner, f);
    } else {
      // A kernel thread that is not a processor blocks on the futex.
      std::uintptr_t expected = kJoinRunning;
      if (f->join.compare_exchange_strong(expected, kJoinForeign, std::memory_order_acq_rel)) {
        while (f->done.load(std::memory_order_acquire) == 0) futex_wait(&f->done, 0);
      }
    }
  }
}

void join_fibre(Fibre* f) {
  wait_fibre(f);
  release_fibre(f);
}

void detach_fibre(Fibre* f) noexcept {
  std::uintptr_t expected = kJoinRunning;
  if (!f->join.compare_exchange_strong(expected, kJoinDetached, std::memory_order_acq_rel)) release_fibre(f);
}

}  // namespace loom::rt
