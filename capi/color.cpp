// capi/color.cpp — colors and stages in C: loom/color.hpp and loom/stage.hpp
// behind include/loom/loom.h's "colors" and "stages" sections, and the color
// fields of loom_attr_t (loom_create hands them to FibreAttr).
//
// A loom_stage_t is a loom::Stage. Nothing here keeps state of its own.
#include "loom/color.hpp"

#include <cmath>
#include <cstring>
#include <new>
#include <stdexcept>

#include "capi.hpp"
#include "loom/cluster.hpp"
#include "loom/stage.hpp"

using namespace loom;
using namespace loom::capi;

static_assert(sizeof(void*) != 8 || sizeof(loom_attr_t) == 64, "loom.h: loom_attr_t changed size (an ABI break)");
static_assert(LOOM_STAGE_PARTITIONS_MAX == kStagePartitionsMax, "loom.h and loom/stage.hpp disagree");

namespace {

constexpr unsigned kAttrMagic = 0x6c6f6174;  // "loat", as capi/thread.cpp

Cluster& cluster_of(loom_cluster_t* c) { return c ? *reinterpret_cast<Cluster*>(c) : Cluster::current(); }
Stage* of(loom_stage_t* s) { return reinterpret_cast<Stage*>(s); }
const Stage* of(const loom_stage_t* s) { return reinterpret_cast<const Stage*>(s); }

bool valid_attr(const loom_attr_t* a) { return a && a->_loom_magic == kAttrMagic; }
bool is_flag(int v) { return v == 0 || v == 1; }

// True when the caller runs as one of s's operations: waiting for s to
// drain would wait for itself.
bool inside(const Stage& s) {
  const Color c = current_color();
  return c >= s.first_color() && c - s.first_color() < s.partitions();
}

// A stage post from C: EINVAL for a null stage or function, ENOMEM when the
// operation cannot be queued.
template <class Post>
int stage_post(loom_stage_t* s, void (*fn)(void*), Post&& post) {
  if (!s || !fn) return EINVAL;
  try {
    post();
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
  return 0;
}

int post(loom_cluster_t* cluster, std::uint32_t color, int shared, void (*fn)(void*), void* arg) {
  if (!fn || !is_flag(shared)) return EINVAL;
  detail::post_event(cluster ? reinterpret_cast<Cluster*>(cluster) : nullptr, color, shared != 0, fn, arg, nullptr);
  return 0;
}

}  // namespace

extern "C" {

// ---- attributes ------------------------------------------------------------------

int loom_attr_setcolor(loom_attr_t* a, uint32_t color, int shared) {
  if (!valid_attr(a) || !is_flag(shared) || (shared && color == kUncolored)) return EINVAL;
  a->_loom_color = color;
  a->_loom_color_shared = shared;
  return 0;
}

int loom_attr_getcolor(const loom_attr_t* a, uint32_t* color, int* shared) {
  if (!valid_attr(a) || !color || !shared) return EINVAL;
  *color = a->_loom_color;
  *shared = a->_loom_color_shared;
  return 0;
}

// ---- colors ----------------------------------------------------------------------

int loom_event_post(uint32_t color, void (*fn)(void*), void* arg) { return post(nullptr, color, 0, fn, arg); }

int loom_event_post_shared(uint32_t color, void (*fn)(void*), void* arg) { return post(nullptr, color, 1, fn, arg); }

int loom_event_post_to(loom_cluster_t* cluster, uint32_t color, int shared, void (*fn)(void*), void* arg) {
  return post(cluster, color, shared, fn, arg);
}

uint32_t loom_current_color(void) { return current_color(); }

uint32_t loom_color_allocate(uint32_t n) {
  if (n == 0) return 0;
  try {
    return allocate_colors(n);
  } catch (...) {
    return 0;
  }
}

int loom_color_set_policy(loom_cluster_t* cluster, const char* policy) {
  if (!policy) return EINVAL;
  try {
    return set_color_policy(cluster_of(cluster), policy) ? 0 : EINVAL;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
}

int loom_color_get_policy(loom_cluster_t* cluster, char* buf, size_t len) {
  if (!buf) return EINVAL;
  try {
    const std::string p = color_policy(cluster_of(cluster));
    if (len <= p.size()) return ERANGE;
    std::memcpy(buf, p.c_str(), p.size() + 1);
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
  return 0;
}

int loom_color_set_batch(loom_cluster_t* cluster, unsigned batch) {
  if (batch == 0) return EINVAL;
  set_color_batch(cluster_of(cluster), batch);
  return 0;
}

int loom_color_set_placement(loom_cluster_t* cluster, const char* placement) {
  if (!placement) return EINVAL;
  try {
    return set_color_placement(cluster_of(cluster), placement) ? 0 : EINVAL;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
}

int loom_color_set_penalty(void (*fn)(void*), double penalty) {
  if (!fn || std::isnan(penalty) || (penalty != 0 && penalty < 1)) return EINVAL;
  set_penalty(fn, penalty);
  return 0;
}

int loom_color_stats(loom_cluster_t* cluster, loom_color_stats_t* out) {
  if (!out) return EINVAL;
  const ColorStats s = color_stats(cluster_of(cluster));
  out->events_run = s.events_run;
  out->fibres_started = s.fibres_started;
  out->steal_attempts = s.steal_attempts;
  out->colors_stolen = s.colors_stolen;
  out->events_stolen = s.events_stolen;
  out->steal_cost_cycles = s.steal_cost_cycles;
  out->stolen_work_cycles = s.stolen_work_cycles;
  out->colors_live = s.colors_live;
  return 0;
}

// ---- stages ----------------------------------------------------------------------

int loom_stage_create(const char* name, int policy, unsigned partitions, loom_stage_t** out) {
  if (!name || !out) return EINVAL;
  StagePolicy p;
  switch (policy) {
    case LOOM_STAGE_EXCLUSIVE:
      p = StagePolicy::exclusive;
      break;
    case LOOM_STAGE_PARTITIONED:
      p = StagePolicy::partitioned;
      break;
    case LOOM_STAGE_SHARED:
      p = StagePolicy::shared;
      break;
    default:
      return EINVAL;
  }
  try {
    *out = reinterpret_cast<loom_stage_t*>(new Stage(name, p, partitions));
  } catch (const std::invalid_argument&) {
    return EINVAL;
  } catch (...) {
    return ENOMEM;
  }
  return 0;
}

int loom_stage_post(loom_stage_t* s, void (*fn)(void*), void* arg) {
  return stage_post(s, fn, [&] { of(s)->post(fn, arg); });
}

int loom_stage_post_key(loom_stage_t* s, uint64_t key, void (*fn)(void*), void* arg) {
  return stage_post(s, fn, [&] { of(s)->post(key, fn, arg); });
}

int loom_stage_post_exclusive(loom_stage_t* s, void (*fn)(void*), void* arg) {
  return stage_post(s, fn, [&] { of(s)->post_exclusive(fn, arg); });
}

int loom_stage_drain(loom_stage_t* s) {
  if (!s) return EINVAL;
  if (inside(*of(s))) return EDEADLK;
  ErrnoKeeper k;
  of(s)->drain();
  k.done();
  return 0;
}

int loom_stage_stats(const loom_stage_t* s, loom_stage_stats_t* out) {
  if (!s || !out) return EINVAL;
  const StageStats st = of(s)->stats();
  out->posted = st.posted;
  out->completed = st.completed;
  out->queued = st.queued;
  out->running = st.running;
  out->queued_max = st.queued_max;
  out->wait_mean_ns = st.wait_mean_ns;
  out->wait_max_ns = st.wait_max_ns;
  out->run_mean_ns = st.run_mean_ns;
  out->run_max_ns = st.run_max_ns;
  return 0;
}

int loom_stage_print(const loom_stage_t* s, FILE* out) {
  if (!s || !out) return EINVAL;
  of(s)->print(out);
  return 0;
}

int loom_stage_print_all(FILE* out) {
  if (!out) return EINVAL;
  print_stages(out);
  return 0;
}

int loom_stage_destroy(loom_stage_t* s) {
  if (!s) return EINVAL;
  if (inside(*of(s))) return EDEADLK;
  ErrnoKeeper k;
  delete of(s);
  k.done();
  return 0;
}

}  // extern "C"
