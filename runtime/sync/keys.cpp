// sync/keys.cpp — fibre-local keys (pthread_key_* semantics, per fibre).
//
// A fibre's values live in a table allocated on its first set_specific; at
// its exit the scheduler calls keys_at_exit (through fibre_exit_hook), which
// runs destructors of non-null values in rounds, as POSIX says. Kernel
// threads that are not fibres get a thread_local table, cleaned at thread
// exit. The key registry is process-wide (keys are process-wide in POSIX).
#include <cerrno>

#include "sched/processor.hpp"
#include "base/spinlock.hpp"
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

struct Table {
  void* values[kKeysMax] = {};
  unsigned generations[kKeysMax] = {};
};

bool current(const Table* t, unsigned k) {
  return keys[k].used.load(std::memory_order_acquire) &&
         t->generations[k] == keys[k].generation.load(std::memory_order_acquire);
}

void run_destructors(Table* t) {
  for (unsigned round = 0; round < kKeyDestructorRounds; ++round) {
    bool again = false;
    for (unsigned k = 0; k < kKeysMax; ++k) {
      void* v = t->values[k];
      if (!v) continue;
      t->values[k] = nullptr;
      auto d = keys[k].destructor.load(std::memory_order_acquire);
      if (d && current(t, k)) {
        d(v);  // may set values again (in this same table): another round
        again = true;
      }
    }
    if (!again) break;
  }
}

struct ThreadTable {
  Table* table = nullptr;
  ~ThreadTable() {
    if (table) {
      run_destructors(table);
      delete table;
    }
  }
};
thread_local ThreadTable thread_table;

void keys_at_exit(rt::Fibre* f) {
  auto* t = static_cast<Table*>(f->specific);
  run_destructors(t);  // the table stays attached: destructors may set values
  f->specific = nullptr;
  delete t;
}

Table* table(bool create) {
  if (rt::Fibre* f = rt::this_fibre_or_null()) {
    if (!f->specific && create) f->specific = new (std::nothrow) Table;
    return static_cast<Table*>(f->specific);
  }
  if (!thread_table.table && create) thread_table.table = new (std::nothrow) Table;
  return thread_table.table;
}

}  // namespace

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
  Table* t = table(false);
  return t && current(t, key) ? t->values[key] : nullptr;
}

int set_specific(Key key, const void* value) {
  if (key >= kKeysMax || !keys[key].used.load(std::memory_order_acquire)) return EINVAL;
  Table* t = table(true);
  if (!t) return ENOMEM;
  t->values[key] = const_cast<void*>(value);
  t->generations[key] = keys[key].generation.load(std::memory_order_acquire);
  return 0;
}

}  // namespace loom
