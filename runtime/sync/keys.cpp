// sync/keys.cpp — fibre-local keys (pthread_key_* semantics, per fibre).
//
// A fibre's values live in a table allocated on its first set_specific; at
// its exit the scheduler calls keys_at_exit (through fibre_exit_hook), which
// runs destructors of non-null values in rounds, as POSIX says. Kernel
// threads that are not fibres get a table of their own, cleaned at thread
// exit (without malloc: see thread_table below). The key registry is
// process-wide (keys are process-wide in POSIX).
#include "sync/keys.hpp"

#include <pthread.h>
#include <sys/mman.h>

#include <cerrno>
#include <new>

#include "base/spinlock.hpp"
#include "base/sys.hpp"
#include "sched/processor.hpp"
#include "sync/wait.hpp"

namespace loom {

namespace {

// A slot's generation changes with every key_create, so a value set under
// a deleted key is never seen through a new key that reuses its slot (POSIX:
// a new key starts null in every thread).
struct KeySlot {
  std::atomic<bool> used{false};
  std::atomic<unsigned> generation{0};
  std::atomic<void (*)(void*)> destructor{nullptr};
};
KeySlot keys[kKeysMax];
rt::SpinLock registry;  // key_create/delete only (a spin lock: see base/sys.hpp)

// A table of `size` slots. A fibre's grows with the highest key it sets
// (kFibreSlots at a time: 72 bytes for the first four keys): most set one
// or two of the first keys, and a full table (kKeysMax slots: 1.5 KiB when
// there were 128, 16 KiB for glibc's 1,024 now) was
// half of an idle loom-memcached connection's memory, whose thread sets
// one key. A kernel thread's is full-size from the start (mapped, never
// grown: see below; 16 KiB of address space, touched as keys are set).
struct Slot {
  void* value = nullptr;
  unsigned generation = 0;
};
struct alignas(Slot) Table {
  unsigned size;  // slots, which follow the header

  Slot* slots() { return reinterpret_cast<Slot*>(this + 1); }
  const Slot* slots() const { return reinterpret_cast<const Slot*>(this + 1); }
  static constexpr std::size_t bytes(unsigned n) { return sizeof(Table) + n * sizeof(Slot); }
  static Table* make(void* m, unsigned n) {
    auto* t = new (m) Table{n};
    for (unsigned k = 0; k < n; ++k) new (&t->slots()[k]) Slot;
    return t;
  }
};
constexpr unsigned kFibreSlots = 4;

[[gnu::always_inline]] inline bool current(const Table* t, unsigned k) {
  return k < t->size && keys[k].used.load(std::memory_order_acquire) &&
         t->slots()[k].generation == keys[k].generation.load(std::memory_order_acquire);
}

// *tp: the table's owner's pointer, read again after each destructor (which
// may set a value under a higher key and so grow a fibre's table).
void run_destructors(void* const* tp) {
  for (unsigned round = 0; round < kKeyDestructorRounds; ++round) {
    bool again = false;
    for (unsigned k = 0; k < static_cast<Table*>(*tp)->size; ++k) {
      auto* t = static_cast<Table*>(*tp);
      void* v = t->slots()[k].value;
      if (!v) continue;
      t->slots()[k].value = nullptr;
      auto d = keys[k].destructor.load(std::memory_order_acquire);
      if (d && current(t, k)) {
        d(v);  // may set values again (in this same table): another round
        again = true;
      }
    }
    if (!again) break;
  }
}

// A kernel thread's table: no malloc on the way to it. Allocators call
// pthread_setspecific from inside their own initialisation (jemalloc's
// tsd_boot, for the first malloc of the process, from the loader), where
// glibc's does not allocate; a malloc here re-entered that initialisation,
// and jemalloc, initialised twice over, registered its fork handlers twice:
// the second prefork run then waited for the locks the first had taken
// (redis' BGSAVE hung in fork). So the table is mapped, not allocated, and a
// key of glibc's own (glibc's pthread_setspecific does not allocate for its
// first 32 keys) runs its destructors when the thread exits, where a C++
// thread_local's destructor is registered through __cxa_thread_atexit,
// which callocs. Looking glibc's key functions up allocates too (dlopen),
// so the key is made by this file's constructor, and a table made before
// that (in the loader, by another library's constructor) is registered at
// the thread's next use of a key; a thread that exits before then has its
// values' destructors not run.
thread_local Table* thread_table = nullptr;  // trivially destructible
thread_local bool thread_registered = false;
pthread_key_t glibc_key;
std::atomic<bool> glibc_key_made{false};

constexpr std::size_t kTableBytes = (Table::bytes(kKeysMax) + 4095) & ~std::size_t(4095);

void thread_exit(void* p) {
  run_destructors(&p);  // still attached: destructors may set values (full-size: t stays)
  thread_table = nullptr;
  thread_registered = false;
  munmap(p, kTableBytes);
}

__attribute__((constructor)) void make_glibc_key() {
  if (rt::sys::pthread().key_create(&glibc_key, &thread_exit) == 0)
    glibc_key_made.store(true, std::memory_order_release);
}

Table* thread_table_of(bool create) {
  if (!thread_table && create) {
    void* m = mmap(nullptr, kTableBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    thread_table = Table::make(m, kKeysMax);
  }
  if (thread_table && !thread_registered && glibc_key_made.load(std::memory_order_acquire)) {
    rt::sys::pthread().setspecific(glibc_key, thread_table);
    thread_registered = true;
  }
  return thread_table;
}

void keys_at_exit(rt::Fibre* f) {
  run_destructors(&f->specific);  // the table stays attached: destructors may set values
  ::operator delete(f->specific);
  f->specific = nullptr;
}

// The calling fibre's table, grown to hold key k if `create` (nullptr when
// there is none, or no memory).
// A fibre's table grown to hold key k (t: its table now, maybe none).
__attribute__((noinline)) Table* grow_fibre_table(rt::Fibre* f, Table* t, unsigned k) {
  unsigned n = (k / kFibreSlots + 1) * kFibreSlots;
  void* m = ::operator new(Table::bytes(n), std::nothrow);
  if (!m) return nullptr;
  Table* g = Table::make(m, n);
  if (t) {
    for (unsigned i = 0; i < t->size; ++i) g->slots()[i] = t->slots()[i];
    ::operator delete(t);
  }
  f->specific = g;
  return g;
}

// Inline, as current() is: get_specific's whole path. With current() and
// the fibre's table as calls of their own a lookup took ~63 instructions
// (glibc's pthread_getspecific: about 10); now ~30 (callgrind,
// loom-memcached, whose port looks a key up twice a request).
[[gnu::always_inline]] inline Table* fibre_table(rt::Fibre* f, unsigned k, bool create) {
  auto* t = static_cast<Table*>(f->specific);
  if (!create || (t && k < t->size)) return t;
  return grow_fibre_table(f, t, k);
}

[[gnu::always_inline]] inline Table* table(unsigned k, bool create) {
  if (rt::Fibre* f = rt::this_fibre_or_null()) return fibre_table(f, k, create);
  return thread_table_of(create);
}

}  // namespace

void keys_move_to_kernel_thread(rt::Fibre* f) noexcept {
  if (!f || !f->specific) return;
  auto* from = static_cast<Table*>(f->specific);
  if (Table* t = thread_table_of(true))
    for (unsigned k = 0; k < kKeysMax; ++k) t->slots()[k] = k < from->size ? from->slots()[k] : Slot{};
}

void keys_after_fork_in_child() noexcept { new (&registry) rt::SpinLock(); }

void keys_run_kernel_thread_destructors() noexcept {
  void* p = thread_table;
  if (p) run_destructors(&p);  // the table stays: thread_exit runs them again, finding none
}

int key_create(Key* key, void (*destructor)(void*)) {
  rt::SpinGuard g(registry);
  rt::fibre_exit_hook = &keys_at_exit;
  for (unsigned k = 0; k < kKeysMax; ++k) {
    if (!keys[k].used.load(std::memory_order_relaxed)) {
      keys[k].destructor.store(destructor, std::memory_order_relaxed);
      keys[k].generation.fetch_add(1, std::memory_order_relaxed);
      keys[k].used.store(true, std::memory_order_release);
      *key = k;
      return 0;
    }
  }
  return EAGAIN;
}

int key_delete(Key key) {
  rt::SpinGuard g(registry);
  if (key >= kKeysMax || !keys[key].used.load(std::memory_order_relaxed)) return EINVAL;
  keys[key].used.store(false, std::memory_order_release);
  keys[key].destructor.store(nullptr, std::memory_order_relaxed);
  return 0;
}

void* get_specific(Key key) {
  if (key >= kKeysMax) return nullptr;
  const Table* t = table(key, false);
  return t && current(t, key) ? t->slots()[key].value : nullptr;
}

int set_specific(Key key, const void* value) {
  if (key >= kKeysMax || !keys[key].used.load(std::memory_order_acquire)) return EINVAL;
  Table* t = table(key, true);
  if (!t) return ENOMEM;
  t->slots()[key].value = const_cast<void*>(value);
  t->slots()[key].generation = keys[key].generation.load(std::memory_order_acquire);
  return 0;
}

}  // namespace loom
