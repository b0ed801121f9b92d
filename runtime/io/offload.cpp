// io/offload.cpp — the offload cluster, for calls that can only block.
//
// A fibre that must make such a call migrates to a cluster of its own
// processors (LOOM_OFFLOAD_PROCESSORS, default 2) and back: only those
// kernel threads ever block in the kernel, and the caller's processors keep
// running its other fibres.
#include <signal.h>

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

void* offload_enter() {
  Processor* p = this_processor();
  if (!p) return nullptr;
  Cluster* home = p->current()->cluster;
  loom::Cluster& off = offload_cluster();
  if (home == &off.impl()) return nullptr;
  p->counters.add(Stat::offloads);
  this_fibre::migrate(off);
  return home;
}

void offload_leave(void* token) noexcept {
  if (!token) return;
  auto* home = static_cast<Cluster*>(token);
  this_fibre::migrate(*home->facade);
}

void io_boot() {
  if (env_choice("LOOM_SIGPIPE", {"ignore", "keep"}, 0) == 1) return;
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
}

}  // namespace loom::rt
