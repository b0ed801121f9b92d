// io/offload.cpp — the offload cluster, for calls that can only block.
//
// A fibre that must make such a call migrates to a cluster of its own
// processors (LOOM_OFFLOAD_PROCESSORS, default 2) and back: only those
// kernel threads ever block in the kernel, and the caller's processors keep
// running its other fibres. It comes back to the processor it left (woken
// there, if that one sleeps), not to whichever the cluster would place a new
// fibre on: a program that never creates a thread keeps running on one
// kernel thread, as it would on glibc.
#include <signal.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/options.hpp"
#include "io/poller.hpp"
#include "loom/io.hpp"
#include "sched/cluster.hpp"
#include "sched/processor.hpp"

namespace loom::rt {

namespace {

loom::Cluster& offload_cluster() {
  static loom::Cluster* c = [] {
    SchedConfig cfg;  // the defaults: the offload cluster is not a variant under test
    cfg.stack_size = SchedConfig::from_env().stack_size;
    auto* off = new loom::Cluster(env_size("LOOM_OFFLOAD_PROCESSORS", 2, 1, 64), cfg);
    off->impl().set_thread_prefix("loom/off");
    return off;
  }();
  return *c;
}

}  // namespace

void* offload_enter(WaitKind kind, const void* object) {
  Processor* p = this_processor();
  if (!p) return nullptr;
  Fibre* self = p->current();
  Cluster* home = self->cluster;
  loom::Cluster& off = offload_cluster();
  if (home == &off.impl()) return nullptr;
  p->counters.add(Stat::offloads);
  // The processor it leaves, if it belongs to the fibre's own cluster (a
  // fibre visiting another cluster returns to its cluster's placement).
  Processor* from = &p->cluster() == home ? p : nullptr;
  this_fibre::migrate(off);
  // On the offload cluster now: listed as blocked in the call, at home
  // (plain stores, read by the listing; the migration's switch cleared the
  // wait mark, so it is set here).
  self->offload_proc.store(from ? int(from->index()) : -1, std::memory_order_relaxed);
  self->offload_home.store(home, std::memory_order_relaxed);
  note_wait(kind, object);
  // The token: the processor with its low bit set (a Processor is 64-byte
  // aligned), or the cluster's facade.
  if (from) return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(from) | 1);
  return home->facade;
}

void* offload_enter() { return offload_enter(WaitKind::offload, "a function (loom::offload)"); }

namespace {
void post_return(Processor&, Fibre* prev, void* arg) {
  auto* to = static_cast<Processor*>(arg);
  prev->cluster->fibres.fetch_sub(1, std::memory_order_relaxed);
  to->cluster().fibres.fetch_add(1, std::memory_order_relaxed);
  prev->cluster = &to->cluster();
  __atomic_store_n(&prev->affinity, to, __ATOMIC_RELEASE);
  to->push(prev);
}
}  // namespace

void offload_leave(void* token) noexcept {
  if (!token) return;
  Fibre* self = this_fibre_or_null();
  self->offload_home.store(nullptr, std::memory_order_relaxed);
  self->wait_kind.store(WaitKind::none, std::memory_order_relaxed);
  auto bits = reinterpret_cast<std::uintptr_t>(token);
  if (bits & 1) {
    this_processor()->suspend(&post_return, reinterpret_cast<void*>(bits & ~std::uintptr_t(1)));
    return;
  }
  this_fibre::migrate(*static_cast<loom::Cluster*>(token));
}

// Defined by libloom-pthread (capi/pthread/thread.cpp): a program run on
// the link or preload route is an unmodified pthread program, whose signal
// dispositions loom must not change (a weak reference: null without it).
extern "C" __attribute__((weak)) const int loom_pthread_routes;

void io_boot() {
  if (&loom_pthread_routes != nullptr) return;  // SIGPIPE stays the program's
  if (env_choice("LOOM_SIGPIPE", {"ignore", "keep"}, 0) == 1) return;
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
}

}  // namespace loom::rt
