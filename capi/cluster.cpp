// capi/cluster.cpp — clusters and processors in C: a loom_cluster_t is a
// loom::Cluster (loom/cluster.hpp).
#include "loom/cluster.hpp"

#include <new>
#include <stdexcept>

#include "capi.hpp"
#include "sched/cluster.hpp"
#include "sched/processor.hpp"

using namespace loom;
using namespace loom::capi;

namespace {
Cluster* of(loom_cluster_t* c) { return reinterpret_cast<Cluster*>(c); }
const Cluster* of(const loom_cluster_t* c) { return reinterpret_cast<const Cluster*>(c); }
loom_cluster_t* to_c(Cluster& c) { return reinterpret_cast<loom_cluster_t*>(&c); }
}  // namespace

extern "C" {

int loom_cluster_create(loom_cluster_t** out, size_t processors) {
  if (!out || processors == 0 || processors > rt::Cluster::kMaxProcessors) return EINVAL;
  try {
    *out = to_c(*new Cluster(processors));
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  } catch (...) {
    return EAGAIN;
  }
  return 0;
}

int loom_cluster_destroy(loom_cluster_t* c) {
  if (!c || of(c) == &Cluster::default_cluster()) return EINVAL;
  rt::Cluster& impl = of(c)->impl();
  rt::Fibre* self = rt::this_fibre_or_null();
  if (self && self->cluster == &impl) return EDEADLK;
  // The C++ destructor aborts on a cluster that still holds fibres; a C
  // caller gets EBUSY instead (a fibre migrating in meanwhile is a race the
  // program must not have).
  if (impl.fibres.load(std::memory_order_acquire) != 0) return EBUSY;
  ErrnoKeeper k;
  delete of(c);
  k.done();
  return 0;
}

loom_cluster_t* loom_cluster_default(void) { return to_c(Cluster::default_cluster()); }

loom_cluster_t* loom_cluster_self(void) { return to_c(Cluster::current()); }

int loom_cluster_add_processors(loom_cluster_t* c, size_t n, size_t* total) {
  if (!c || n == 0 || n > rt::Cluster::kMaxProcessors - of(c)->processors()) return EINVAL;
  size_t now = 0;
  try {
    now = of(c)->add_processors(n);
  } catch (...) {
    return EAGAIN;
  }
  if (total) *total = now;
  return 0;
}

size_t loom_cluster_processors(const loom_cluster_t* c) { return c ? of(c)->processors() : 0; }

unsigned int loom_cluster_id(const loom_cluster_t* c) { return c ? of(c)->id() : 0; }

int loom_migrate(loom_cluster_t* to) {
  if (!to) return EINVAL;
  if (!rt::this_processor()) return EPERM;
  ErrnoKeeper k;
  this_fibre::migrate(*of(to));
  k.done();
  return 0;
}

int loom_processor_index(void) { return this_fibre::processor_index(); }

}  // extern "C"

int loom_stats_get(const loom_cluster_t* c, int processor, loom_stats_t* out) {
  if (!out) return EINVAL;
  const Cluster& cl = c ? *of(c) : Cluster::current();
  if (processor < -1 || (processor >= 0 && std::size_t(processor) >= cl.processors())) return EINVAL;
  ClusterStats s = processor < 0 ? cl.stats() : cl.processor_stats(std::size_t(processor));
#define LOOM_STATS_COPY(field, description) out->field = s.field;
  LOOM_STATS_FIELDS(LOOM_STATS_COPY)
#undef LOOM_STATS_COPY
  out->stack_bytes = s.stack_bytes;
  return 0;
}

void loom_stats_print(FILE* out) { print_stats(out ? out : stderr); }
void loom_dump_fibres(FILE* out) { dump_fibres(out ? out : stderr); }
