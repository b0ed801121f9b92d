// sched/checks.hpp — the scheduler's invariant checks (issue 25; moved out
// of base/chaos.hpp, which knows no fibres).
//
// In a build with LOOM_CHECKS (on with LOOM_CHAOS, or alone with
// -DLOOM_CHECKS=ON), invariants of docs/DESIGN.md are checked where they can
// break and reported with the fibre and processor named, then abort():
//   LOOM_CHECK_SWITCH(next, proc)  a pinned fibre runs only on its affinity;
//   LOOM_CHECK_OWNER(proc, what)   owner-only operations of a processor's
//                                  queue run on that processor's thread;
//   LOOM_CHECK(cond, fmt, ...)     any other (base/check.hpp);
// and a watchdog thread (started at the first checked switch) that reports
// a ready fibre waiting behind a processor that has not switched for
// LOOM_CHECK_WAIT_MS (default 2000; 0 turns it off) while another processor
// of the cluster, which steals, slept all that time. In the default build
// the macros expand to nothing.
#pragma once

#include "base/check.hpp"

namespace loom::rt {

class Fibre;
class Processor;

#if defined(LOOM_CHECKS)
#define LOOM_CHECKS_ON 1
namespace check {
void on_switch(const Fibre* next, const Processor& p) noexcept;
void on_owner(const Processor& p, const char* what) noexcept;
}  // namespace check
#define LOOM_CHECK_SWITCH(next, proc) ::loom::rt::check::on_switch((next), (proc))
#define LOOM_CHECK_OWNER(proc, what) ::loom::rt::check::on_owner((proc), (what))
#else
#define LOOM_CHECK_SWITCH(next, proc) ((void)0)
#define LOOM_CHECK_OWNER(proc, what) ((void)0)
#endif

}  // namespace loom::rt
