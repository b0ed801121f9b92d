// api.cpp — the public C++ API (loom/fibre.hpp, loom/cluster.hpp) and
// the runtime's start-up. It sits above every layer (it boots the I/O
// layer too), which is why it is not in sched/.
//
// Start-up: a constructor in the library turns the thread that loads it —
// the main thread — into processor 0 of the default cluster before main()
// runs, and starts the cluster's other processors. Runtime objects are never
// destroyed: main() returning ends the process while other processors may
// still be running fibres, as with pthreads, and no destructor may pull the
// scheduler from under them.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "base/options.hpp"
#include "base/sys.hpp"
#include "color/color.hpp"
#include "io/poller.hpp"
#include "loom/cluster.hpp"
#include "loom/fibre.hpp"
#include "sched/cancel.hpp"
#include "sched/cluster.hpp"
#include "sched/overflow.hpp"
#include "sched/processor.hpp"

namespace loom {

namespace {
std::atomic<unsigned> cluster_ids{0};
Cluster* default_facade = nullptr;
}  // namespace

void rt::boot_runtime() {
  rt::install_overflow_handler();
  rt::io_boot();
  rt::stats_boot();
  loom::SchedConfig config = loom::SchedConfig::from_env();
  std::size_t n = rt::env_size("LOOM_PROCESSORS", rt::usable_cpus(), 1, rt::Cluster::kMaxProcessors);
  auto* c = new rt::Cluster(config, cluster_ids.fetch_add(1));
  default_facade = new loom::Cluster(loom::Cluster::Adopt{}, c);
  c->add_processors(n, /*adopt=*/true);
}

namespace {

// C++ rejects what C's loom_cluster_create and loom_attr_setstacksize reject
// with EINVAL, with std::invalid_argument, instead of clamping it.
std::size_t checked_processors(std::size_t n) {
  if (n == 0 || n > rt::Cluster::kMaxProcessors)
    throw std::invalid_argument("loom: a cluster has 1 to " + std::to_string(rt::Cluster::kMaxProcessors) +
                                " processors, not " + std::to_string(n));
  return n;
}

void check_stack_size(std::size_t size, const char* what) {
  if (size != 0 && (size < kStackMin || size > kStackMax))
    throw std::invalid_argument(std::string("loom: ") + what + " " + std::to_string(size) +
                                " is outside [16 KiB, 1 GiB] (loom::kStackMin, loom::kStackMax)");
}

const SchedConfig& checked(const SchedConfig& config) {
  check_stack_size(config.stack_size, "SchedConfig::stack_size");
  if (config.handoff_us && config.handoff_us < 100)
    throw std::invalid_argument("loom: SchedConfig::handoff_us is 0 (off) or at least 100, not " +
                                std::to_string(config.handoff_us));
  return config;
}

void ensure_runtime() {
  // Not std::call_once: that is pthread_once, which libloom-pthread
  // defines on top of this very runtime (base/sys.hpp).
  static std::atomic<int> state{0};  // 0 not booted, 1 booting, 2 booted
  if (state.load(std::memory_order_acquire) == 2) return;
  int expected = 0;
  if (state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    rt::boot_runtime();
    state.store(2, std::memory_order_release);
    return;
  }
  while (state.load(std::memory_order_acquire) != 2) rt::sys::sched_yield();
}

__attribute__((constructor(101))) void start_runtime_before_main() { ensure_runtime(); }

}  // namespace

// ---- Cluster -------------------------------------------------------------------

Cluster::Cluster(Adopt, rt::Cluster* adopted) : impl_(adopted), owned_(false) {
  __atomic_store_n(&impl_->facade, this, __ATOMIC_RELEASE);  // (rt::Cluster::alive)
}

Cluster::Cluster(std::size_t processors, const SchedConfig& config)
    : impl_((checked_processors(processors), new rt::Cluster(checked(config), (ensure_runtime(), cluster_ids.fetch_add(1))))),
      owned_(true) {
  __atomic_store_n(&impl_->facade, this, __ATOMIC_RELEASE);
  impl_->add_processors(processors);
}

Cluster::~Cluster() {
  if (!owned_) return;
  rt::Fibre* self = rt::this_fibre_or_null();
  if (self && self->cluster == impl_) {
    // It would wait for its processors, one of which runs this very fibre.
    std::fprintf(stderr,
                 "loom: cluster %u destroyed by fibre %llu%s%s%s, which runs on it: move the fibre off first, e.g. "
                 "loom::this_fibre::migrate(loom::Cluster::default_cluster()), or destroy the cluster from another one\n",
                 impl_->id(), (unsigned long long)self->id, self->name ? " \"" : "", self->name ? self->name : "",
                 self->name ? "\"" : "");
    std::abort();
  }
  impl_->shutdown_extensions();  // e.g. the I/O layer's poller fibre is not the program's
  if (long n = impl_->fibres.load(std::memory_order_acquire)) {
    std::fprintf(stderr, "loom: cluster %u destroyed while it still holds %ld fibre(s)\n", impl_->id(), n);
    std::abort();
  }
  __atomic_store_n(&impl_->facade, static_cast<Cluster*>(nullptr), __ATOMIC_RELEASE);
  impl_->shutdown();  // the rt::Cluster is kept: see rt::Cluster::shutdown
}

Cluster& Cluster::default_cluster() {
  ensure_runtime();
  return *default_facade;
}

Cluster& Cluster::current() {
  if (rt::Fibre* f = rt::this_fibre_or_null()) return *f->cluster->facade;
  return default_cluster();
}

std::size_t Cluster::add_processors(std::size_t n) { return impl_->add_processors(n); }
std::size_t Cluster::processors() const { return impl_->size(); }
unsigned Cluster::id() const { return impl_->id(); }
const SchedConfig& Cluster::config() const { return impl_->config(); }
ClusterStats Cluster::stats() const { return impl_->stats(); }
ClusterStats Cluster::processor_stats(std::size_t i) const { return impl_->processor_stats(i); }

// ---- Fibre ---------------------------------------------------------------------

rt::Fibre* Fibre::prepare(const FibreAttr& attr, std::size_t size, std::size_t align, void** mem) {
  ensure_runtime();
  check_stack_size(attr.stack_size, "FibreAttr::stack_size");
  rt::Fibre* f = rt::create_fibre(attr, size, align, mem);
  if (attr.detached) f->join.store(rt::kJoinDetached, std::memory_order_relaxed);  // before it can run
  if (attr.color != kUncolored) rt::color_attach(f, attr.color, attr.color_shared);  // waits for its color when launched
  return f;
}

void Fibre::launch(void (*fn)(void*), void* arg) { rt::start_fibre(f_, fn, arg); }

void Fibre::abandon() noexcept {
  rt::release_fibre(f_);
  f_ = nullptr;
}

Fibre& Fibre::operator=(Fibre&& o) noexcept {
  if (this != &o) {
    if (f_) rt::join_fibre(f_);
    f_ = std::exchange(o.f_, nullptr);
  }
  return *this;
}

Fibre::~Fibre() {
  if (f_) rt::join_fibre(f_);
}

void Fibre::join() {
  if (!f_) throw std::invalid_argument("loom: join of a fibre that is not joinable");
  if (f_ == rt::this_fibre_or_null()) throw std::invalid_argument("loom: a fibre cannot join itself");
  // The handle stays set while it waits (as join_until's does): a
  // request_stop made meanwhile (TaskGroup's, on the fibre it is joining)
  // reaches the fibre instead of an empty handle.
  rt::join_fibre(f_);
  f_ = nullptr;
}

void Fibre::wait_ended() {
  if (!f_) throw std::invalid_argument("loom: join of a fibre that is not joinable");
  if (f_ == rt::this_fibre_or_null()) throw std::invalid_argument("loom: a fibre cannot join itself");
  rt::wait_fibre(f_);
}

void Fibre::detach() {
  if (!f_) throw std::invalid_argument("loom: detach of a fibre that is not joinable");
  rt::detach_fibre(std::exchange(f_, nullptr));
}

std::uint64_t Fibre::id() const noexcept { return f_ ? f_->id : 0; }

void Fibre::request_stop() noexcept {
  if (f_) rt::request_cancel(f_);  // (joinable: its control block stays until the join)
}

// The mark the C API's cancellation points set too (CancellableWait): the
// next wait_on, or each of a mutex's waits, is cancellable; a wait that
// never came leaves it set, so it is cleared here.
detail::StopPoint::StopPoint(bool on) noexcept
    : f_(on && rt::this_processor() ? rt::this_processor()->current() : nullptr) {
  if (f_) f_->cancel_wait = true;
}

detail::StopPoint::~StopPoint() {
  if (f_) f_->cancel_wait = false;
}

// ---- this_fibre ------------------------------------------------------------------

namespace this_fibre {

bool stop_requested() noexcept {
  rt::Fibre* f = rt::this_fibre_or_null();
  return f && (f->cancel.load(std::memory_order_relaxed) & rt::kCancelRequested);
}

void yield() {
  if (rt::Processor* p = rt::this_processor_at_entry())
    p->yield();
  else
    rt::sys::sched_yield();
}

std::uint64_t id() {
  rt::Fibre* f = rt::this_fibre_or_null();
  return f ? f->id : 0;
}

Priority priority() {
  rt::Fibre* f = rt::this_fibre_or_null();
  return f ? static_cast<Priority>(f->priority) : Priority::normal;
}

void set_priority(Priority p) {
  if (static_cast<unsigned>(p) >= kPriorities) throw std::invalid_argument("loom: fibre priority out of range");
  if (rt::Fibre* f = rt::this_fibre_or_null()) f->priority = static_cast<unsigned char>(p);
}

namespace {
void post_migrate(rt::Processor&, rt::Fibre* prev, void* arg) {
  auto* to = static_cast<rt::Cluster*>(arg);
  prev->cluster->fibres.fetch_sub(1, std::memory_order_relaxed);
  to->fibres.fetch_add(1, std::memory_order_relaxed);
  prev->cluster = to;
  __atomic_store_n(&prev->affinity, nullptr, __ATOMIC_RELEASE);
  to->place_new(prev);
}
}  // namespace

void migrate(Cluster& to) {
  rt::Processor* p = rt::this_processor();
  if (!p) throw std::logic_error("loom: migrate called from a kernel thread that is not a loom processor");
  rt::Cluster* target = &to.impl();
  if (p->current()->cluster == target) return;
  p->suspend(&post_migrate, target);
}

int processor_index() {
  rt::Processor* p = rt::this_processor();
  if (p && p->spare()) return int(p->cluster().size() + (p->index() - rt::Cluster::kMaxProcessors));
  return p ? int(p->index()) : -1;
}

}  // namespace this_fibre

}  // namespace loom
