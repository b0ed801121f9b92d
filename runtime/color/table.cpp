// color/table.cpp — the color table's shards and the per-processor pools of
// color queues and items (structures and rules: color/color.hpp).
//
// Why not std::unordered_map and new/delete: a one-event color used to cost
// a map node, a queue and an item from malloc and three frees (the 2026-11-26
// profile of the unbalanced benchmark: hash map 14 %, reaping 15 %, malloc
// and free 16 % of the CPU). The chains here run through the queues, and the
// queues and items come back from the pool of the processor that made them.
#include <cstdlib>
#include <cstring>

#include "base/futex.hpp"
#include "color/color.hpp"
#include "sched/processor.hpp"

namespace loom::rt {

namespace {
constexpr std::uint32_t kFirstBuckets = 16;
constexpr std::uint64_t kPoolKeep = 1024;  // spares a processor keeps when its pool goes unused
// A pool unused for this long is trimmed: not at every sleep, or a program
// whose bursts alternate between processors (the colors benchmark's driver
// posting each round from whichever processor woke it) would give its
// queues back to malloc between two bursts and take them again.
constexpr std::int64_t kPoolIdleNs = 1'000'000'000;
// The most spares a pool keeps at any time: a burst deeper than this gives
// the rest back to malloc as it drains.
constexpr std::uint64_t kPoolMax = 65536;
}  // namespace

// ---- ColorShard ------------------------------------------------------------------

ColorQueue* ColorShard::find(Color c, std::uint32_t h) const noexcept {
  if (!buckets) return nullptr;
  for (ColorQueue* q = buckets[h & mask]; q; q = q->hash_next)
    if (q->color == c) return q;
  return nullptr;
}

void ColorShard::insert(ColorQueue* q, std::uint32_t h) {
  if (!buckets || 2 * count >= mask + 1) {
    std::uint32_t n = buckets ? 2 * (mask + 1) : kFirstBuckets;
    auto** b = static_cast<ColorQueue**>(std::calloc(n, sizeof(ColorQueue*)));
    if (!b) throw std::bad_alloc();
    if (buckets) {
      for (std::uint32_t i = 0; i <= mask; ++i) {
        while (ColorQueue* x = buckets[i]) {
          buckets[i] = x->hash_next;
          ColorQueue** head = &b[color_hash(x->color) & (n - 1)];
          x->hash_next = *head;
          if (*head) (*head)->hash_pprev = &x->hash_next;
          x->hash_pprev = head;
          *head = x;
        }
      }
      std::free(buckets);
    }
    buckets = b;
    mask = n - 1;
  }
  ColorQueue** head = &buckets[h & mask];
  q->hash_next = *head;
  if (*head) (*head)->hash_pprev = &q->hash_next;
  q->hash_pprev = head;
  *head = q;
  ++count;
}

// O(1): the chain is doubly linked through hash_pprev (erasing by a walk
// from the bucket touched every queue before q in the chain, each a likely
// cache miss with tens of thousands of live colors).
void ColorShard::erase(ColorQueue* q, std::uint32_t) noexcept {
  *q->hash_pprev = q->hash_next;
  if (q->hash_next) q->hash_next->hash_pprev = q->hash_pprev;
  q->hash_next = nullptr;
  q->hash_pprev = nullptr;
  --count;
}

// ---- pools -----------------------------------------------------------------------

namespace {

template <typename T>
T* pool_take(ColorCore* mine, Pool<T> ColorCore::*pool) {
  if (!mine) return new T;
  Pool<T>& p = mine->*pool;
  if (!p.local && p.remote.load(std::memory_order_relaxed)) {
    // The remote list, all at once: a push may race, never a second taker.
    T* r = p.remote.exchange(nullptr, std::memory_order_acquire);
    for (; r; ++p.size) {
      T* next = r->pool_next;
      r->pool_next = p.local;
      p.local = r;
      r = next;
    }
  }
  T* x = p.local;
  if (!x) {
    x = new T;
    x->home = mine;
    return x;
  }
  p.local = x->pool_next;
  --p.size;
  ++p.drawn;
  return x;
}

template <typename T>
void pool_give(T* x, ColorCore* mine, Pool<T> ColorCore::*pool) {
  // Made by a thread that is no processor: back to the heap. Adopting it
  // into the freeing processor's pool grew that pool without bound when
  // outside threads posted to a processor that never sleeps (outside
  // review, ReviewPools.ExternalPostsToABusyProcessorKeepMemoryBounded).
  ColorCore* home = x->home;
  if (!home) {
    delete x;
    return;
  }
  Pool<T>& p = home->*pool;
  if (home == mine) {
    if (p.size >= kPoolMax) {
      delete x;
      return;
    }
    x->pool_next = p.local;
    p.local = x;
    ++p.size;
    return;
  }
  T* head = p.remote.load(std::memory_order_relaxed);
  do {
    x->pool_next = head;
  } while (!p.remote.compare_exchange_weak(head, x, std::memory_order_release, std::memory_order_relaxed));
}

// Every spare, local and remote, back to the heap.
template <typename T>
void pool_empty(Pool<T>& p) {
  T* lists[2] = {p.local, p.remote.exchange(nullptr, std::memory_order_acquire)};
  for (T* x : lists)
    while (x) {
      T* next = x->pool_next;
      delete x;
      x = next;
    }
  p.local = nullptr;
  p.size = 0;
}

template <typename T>
void pool_trim(Pool<T>& p, std::int64_t now) {
  if (p.drawn != 0 || p.used_ns == 0) {
    p.used_ns = now;
    p.drawn = 0;
    return;
  }
  if (now - p.used_ns < kPoolIdleNs) return;
  while (p.size > kPoolKeep) {
    T* x = p.local;
    p.local = x->pool_next;
    --p.size;
    delete x;
  }
}

}  // namespace

ColorItem* ColorLayer::new_item(ColorCore* mine) {
  ColorItem* it = pool_take(mine, &ColorCore::item_pool);
  ColorCore* home = it->home;
  *it = ColorItem{};
  it->home = home;
  return it;
}

void ColorLayer::free_item(ColorItem* it, ColorCore* mine) { pool_give(it, mine, &ColorCore::item_pool); }

ColorQueue* ColorLayer::new_queue(ColorCore* mine) {
  ColorQueue* q = pool_take(mine, &ColorCore::queues);
  ColorCore* home = q->home;
  q->owner.store(nullptr, std::memory_order_relaxed);
  q->hash_next = nullptr;
  q->hash_pprev = nullptr;
  q->head = q->tail = nullptr;
  q->count = q->work = q->apparent = 0;
  q->prev = q->next = q->wprev = q->wnext = nullptr;
  q->linked = q->worthy = q->exclusive = q->moved = q->reaping = q->transit = false;
  q->shared = 0;
  q->reap_next = q->pool_next = nullptr;
  q->home = home;
  return q;
}

void ColorLayer::free_queue(ColorQueue* q, ColorCore* mine) { pool_give(q, mine, &ColorCore::queues); }

ColorCore* ColorLayer::my_core() const noexcept {
  Processor* p = this_processor();
  if (!p || &p->cluster() != cluster_) return nullptr;
  return core_if_made(p->index());
}

void ColorLayer::before_sleep(Processor& p) {
  // On p's own thread, from its idle loop: no fibre of p is inside a pool.
  // Under the core's lock only against shutdown's empty_pools.
  ColorCore* me = core_if_made(p.index());
  if (!me) return;
  me->lock.lock();
  if (!me->stopping && (me->queues.size > kPoolKeep || me->item_pool.size > kPoolKeep)) {
    std::int64_t now = now_ns();
    pool_trim(me->queues, now);
    pool_trim(me->item_pool, now);
  }
  me->lock.unlock();
}

void ColorLayer::empty_pools(ColorCore& c) {
  c.lock.lock();
  pool_empty(c.queues);
  pool_empty(c.item_pool);
  c.lock.unlock();
}

}  // namespace loom::rt
