// loom/color.hpp — event colors: mutual exclusion by number (libasync-smp),
// stolen by Mely's heuristics.
//
// A color is a 32-bit mutual-exclusion domain of a cluster; color 0 means
// "uncolored" (plain fibres, never serialised). Work of one color never runs
// on two processors at once and starts in the order it was submitted:
//
//   loom::post(42, [] { ... });            // a colored event
//   loom::post_shared(42, [] { ... });     // may overlap other shared work of 42
//   loom::FibreAttr a; a.color = 42;       // a colored fibre: holds 42 from
//   loom::Fibre f(a, [] { ... });          // start to exit, also while blocked
//
// Events are run-to-completion callbacks. They run on a per-processor event
// runner fibre, in batches of up to `batch` events of one color before the
// runner moves to the next color (Mely §4.1). An event may block (on a loom
// mutex, on loom I/O): it then holds its color, and the runner of its
// processor, until it returns; the processor's other colors wait for it or
// are stolen by idle processors. Shared work may overlap other shared work of
// its color, never exclusive work of it (a reader-writer lock by number).
//
// Colors are per cluster: color 42 of one cluster and color 42 of another are
// different domains. A post goes to the calling fibre's cluster (kernel
// threads that are not processors: the default cluster), or to the cluster
// given. A new color is placed on a processor chosen by hashing the color
// (ColorConfig::placement "hash", the default, as libasync-smp dispatches)
// or on the posting processor ("local"); after that it stays where it is
// until an idle processor steals it.
//
// Stealing, per cluster, chosen at run time (ColorConfig, LOOM_COLOR_STEAL,
// set_color_policy):
//   none           colors never move;
//   libasync-smp   the victim with most queued events first, then the ones
//                  after it by index; steal the first color that is not
//                  running and holds less than half the victim's events;
//   mely[:h,...]   Mely's base algorithm on color queues, with heuristics
//                  `locality` (victims nearest first by the machine's
//                  caches, runtime/topo), `time-left` (a color moves only if
//                  its queued work exceeds the measured cost of a steal) and
//                  `penalty` (a handler's penalty divides its apparent work).
//                  `mely` alone enables all three; `mely:base` none.
// Handler run times are measured by the runtime with the TSC (a smoothed
// mean per handler); the penalty is measured too (how much slower a handler
// runs right after its color moved than when it stays), and a programmer may
// override it with set_penalty().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "loom/cluster.hpp"

namespace loom {

using Color = std::uint32_t;
inline constexpr Color kUncolored = 0;

struct ColorConfig {
  std::string steal = "mely";  // none | libasync-smp | mely[:locality,time-left,penalty|base]
  unsigned batch = 10;         // events of one color run before the next color
  // Where a new color goes: "hash" (color hashed over the processors, as
  // libasync-smp dispatches) or "local" (the posting processor, when it is
  // one of the cluster's).
  std::string placement = "hash";

  // LOOM_COLOR_STEAL, LOOM_COLOR_BATCH and LOOM_COLOR_PLACEMENT over the defaults above; malformed
  // values are reported on stderr and the default kept.
  static ColorConfig from_env();
};

// A handler's identity for the runtime's measurements: the function a C-style
// post names, or one per callable type for the template posts.
using HandlerKey = const void*;

namespace detail {
template <typename F>
void invoke_event(void* p) {
  std::unique_ptr<F> f(static_cast<F*>(p));
  (*f)();
}
// One event's submission: fn(arg) runs as handler `key` (fn if null).
void post_event(Cluster* cluster, Color c, bool shared, void (*fn)(void*), void* arg, HandlerKey key) noexcept;
}  // namespace detail

// The handler key of callables of type F posted through the templates.
template <typename F>
HandlerKey handler_key() {
  return reinterpret_cast<HandlerKey>(&detail::invoke_event<std::decay_t<F>>);
}

// C-style posts: fn(arg) runs as a colored event of the calling fibre's
// cluster (or `cluster`). Never block the poster; safe from any thread.
inline void post(Color c, void (*fn)(void*), void* arg, Cluster* cluster = nullptr) {
  detail::post_event(cluster, c, false, fn, arg, nullptr);
}
inline void post_shared(Color c, void (*fn)(void*), void* arg, Cluster* cluster = nullptr) {
  detail::post_event(cluster, c, true, fn, arg, nullptr);
}
// Callable posts (the callable is moved to the heap until it runs).
template <typename F, typename = std::enable_if_t<std::is_invocable_v<std::decay_t<F>&>>>
void post(Color c, F&& f, Cluster* cluster = nullptr) {
  using D = std::decay_t<F>;
  detail::post_event(cluster, c, false, &detail::invoke_event<D>, new D(std::forward<F>(f)), handler_key<D>());
}
template <typename F, typename = std::enable_if_t<std::is_invocable_v<std::decay_t<F>&>>>
void post_shared(Color c, F&& f, Cluster* cluster = nullptr) {
  using D = std::decay_t<F>;
  detail::post_event(cluster, c, true, &detail::invoke_event<D>, new D(std::forward<F>(f)), handler_key<D>());
}

// The color the calling code runs under (an event's or a colored fibre's), 0
// for uncolored fibres and kernel threads.
Color current_color() noexcept;

// `n` consecutive colors nobody else gets from this call (from the top half
// of the color space; programs that number their own colors should stay
// below 2^31). For stages and other libraries.
Color allocate_colors(std::uint32_t n);

// Policy and batch of a cluster's color layer, at run time. set_color_policy
// returns false (and changes nothing) for an unknown or malformed name.
bool set_color_policy(Cluster& cluster, const std::string& policy);
std::string color_policy(Cluster& cluster);
void set_color_batch(Cluster& cluster, unsigned batch);  // >= 1
// "hash" or "local" (see ColorConfig); false for anything else. Applies to
// colors created from then on.
bool set_color_placement(Cluster& cluster, const std::string& placement);

// A handler's stealing penalty: its queued work counts as work / penalty when
// a thief weighs colors (>= 1; 0 returns the handler to the measured value).
void set_penalty(HandlerKey handler, double penalty);
void set_penalty(void (*fn)(void*), double penalty);

// The runtime's measurements of a handler (process-wide, smoothed means in
// TSC cycles; 0: no sample yet): its warm runs, its cold runs (the first of
// a color after the color moved to another processor), and the penalty a
// thief weighs it by (cold / warm, >= 1, or the set_penalty override).
struct HandlerTimes {
  std::uint64_t warm_cycles = 0;
  std::uint64_t cold_cycles = 0;
  double penalty = 1;
};
HandlerTimes handler_times(HandlerKey handler);
HandlerTimes handler_times(void (*fn)(void*));

// Counters of a cluster's color layer (sums over its processors).
struct ColorStats {
  std::uint64_t events_run = 0;       // events that ran to completion
  std::uint64_t fibres_started = 0;   // colored fibres that got their color
  std::uint64_t steal_attempts = 0;   // thieves that looked at victims
  std::uint64_t colors_stolen = 0;    // color queues that moved
  std::uint64_t events_stolen = 0;    // events in those queues
  std::uint64_t steal_cost_cycles = 0;     // smoothed TSC cycles of one steal
  std::uint64_t stolen_work_cycles = 0;    // mean measured work per stolen color
  std::uint64_t colors_live = 0;      // color queues allocated now
};
ColorStats color_stats(Cluster& cluster);

// Whether steals pay (issue 22): the smoothed work a steal moved less what
// moving it cost the thief (TSC cycles), the share of recent steals that
// paid (under 0.5: thieves are paused), and the looks thieves skipped while
// paused. Apart from ColorStats, whose size is part of the library's ABI.
struct StealPayoff {
  std::int64_t payoff_cycles = 0;
  double paid_share = 1;
  std::uint64_t looks_held = 0;
  bool paused = false;
};
StealPayoff steal_payoff(Cluster& cluster);

}  // namespace loom
