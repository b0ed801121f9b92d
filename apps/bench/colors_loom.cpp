// colors_loom — Mely's three microbenchmarks of color stealing (Mely report
// §5.2: unbalanced, penalty, cache-efficient) on loom's color layer
// (loom/color.hpp). Driven by scripts/bench colors (scripts/bench_colors.py).
//
// One process measures one stealing variant (--variant) on one or more
// benchmarks (--bench), each on a cluster of --processors (2) made here, and
// prints one JSON object per benchmark. Every benchmark is a fork/join loop
// of rounds: a driver fibre on the cluster posts the round's first events
// from the processor it runs on — a new color is placed on the posting
// processor, so each round starts unbalanced, all of its work on one
// processor and the others idle, which is what the heuristics are about —
// then waits on a semaphore that the round's last event releases, and starts
// the next round; --warmup seconds of rounds, then --seconds of whole rounds
// measured. Every round uses colors no earlier round used.
//
//   unbalanced       --events (50,000) independent events per round, each of
//                    its own color; 98 % spin ~100 TSC cycles, 2 % spin
//                    10,000-50,000. The two kinds are two handlers
//                    (short_event, long_event), so the runtime's per-handler
//                    run times can tell them apart, as Mely's annotations did.
//   penalty          --chains (32) events A of distinct colors. A writes an
//                    array of the L2's size (the "allocation": arrays come from
//                    a pool faulted in at start, so the kernel's page faults
//                    are not what is measured) and posts an event B of its
//                    color; each B read-modify-writes the next of --slices (32)
//                    slices of the array and posts the next B, until the array
//                    is walked. A thief should take A colors (their array is
//                    not made yet), not B colors (their array is in the
//                    victim's cache). B's penalty is set to --penalty (1000)
//                    in the variants that weigh penalties (mely:penalty,
//                    mely); mely-measured is `mely` with the runtime's
//                    measured penalty (no set_penalty).
//   cache-efficient  --sorts (100) events A per round on one processor (Mely:
//                    half the processors; here one of two). A fills an array
//                    (--array-kib, 64: fits the L2 with its merge buffer) and
//                    posts two events B of two new colors, each sorting one
//                    half; each B posts C of A's color; the second C posts M
//                    (A's color), which merges the halves and checks the result.
//                    C's join count needs no atomics: color A serialises it.
//
//   event-cost       --events (50,000) events per round, each of its own color,
//                    whose handler does nothing but count itself: the
//                    runtime's cost of a one-event color (post, dispatch,
//                    the color's queue made and freed), as TSC cycles per
//                    event over whole rounds. Meant for `none` on one
//                    processor (scripts/bench colors runs it so); not in the
//                    default --bench list.
//
// Every row also gives the runtime's measured run times of the benchmark's
// handlers (loom::handler_times: warm and cold smoothed means, and the
// penalty a thief weighs them by) as this variant left them.
//
// Checks (the program exits 1 and says why): every event records the round
// it ran in, so an event run twice is seen; an event that never runs leaves
// its round unfinished after --round-timeout seconds; events check
// current_color() and, where a color has several events, that no other event
// of the color runs at the same time (a busy flag per color); the merge sort's
// output must be sorted and hold the same values.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "harness.hpp"
#include "loom/color.hpp"
#include "loom/loom.hpp"
#include "loom_variant.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
inline std::uint64_t cycles() { return __rdtsc(); }
#else
inline std::uint64_t cycles() { return bench::now_ns(); }  // no TSC: ns stand in for cycles
#endif

namespace {

const char* const kProg = "colors_loom";
const char* const kBenches[] = {"unbalanced", "penalty", "cache-efficient", "event-cost"};
const unsigned kDefaultBenches = 3;  // event-cost only when asked for
const char* const kVariants[] = {"none",           "libasync-smp", "mely:base", "mely:locality",
                                 "mely:time-left", "mely:penalty", "mely",      "mely-measured"};

// Spins until `n` TSC cycles have passed (no pause: a pause costs about as
// much as a whole short event on recent Intel cores).
void spin_cycles(std::uint64_t n) {
  const std::uint64_t end = cycles() + n;
  while (cycles() < end) {
  }
}

// The L2's size: sysconf, else /sys, else 1 MiB.
std::size_t l2_bytes() {
  long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (v > 0) return static_cast<std::size_t>(v);
  for (int i = 0; i < 8; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(dir + "level"), size(dir + "size");
    int l = 0;
    std::string s;
    if (level >> l && l == 2 && size >> s && !s.empty()) {
      std::size_t n = std::strtoull(s.c_str(), nullptr, 10);
      if (s.back() == 'K') n <<= 10;
      if (s.back() == 'M') n <<= 20;
      if (n) return n;
    }
  }
  return std::size_t(1) << 20;
}

struct Options {
  std::vector<std::string> benches;
  std::string variant = "mely";
  double seconds = 5, warmup = 1, round_timeout = 30;
  unsigned processors = 2, batch = 10;
  std::uint64_t events = 50000;                               // unbalanced
  std::uint64_t chains = 32, slices = 32, penalty_bytes = 0;  // penalty (0: the L2's size)
  double penalty = 1000;
  std::uint64_t sorts = 100, sort_bytes = 64 * 1024;  // cache-efficient
};

// Fresh colors for every round (below 2^31, as color.hpp asks of programs
// that number their own), so each round's colors start where they are posted.
loom::Color fresh_colors(std::uint32_t n) {
  static loom::Color next = 1;
  if (next + std::uint64_t(n) >= (std::uint64_t(1) << 31)) next = 1;
  loom::Color c = next;
  next += n;
  return c;
}

// ---- what every benchmark shares ---------------------------------------------

class Bench {
 public:
  virtual ~Bench() = default;
  virtual const char* name() const = 0;
  // Posts round `round`'s first events from the calling fibre; returns how
  // many events the round runs in all. Arms the gate first: events may finish
  // while the rest are still being posted.
  virtual std::uint64_t start_round(std::uint32_t round) = 0;
  virtual void describe(bench::Json& j) const = 0;
  // The handlers whose measured run times the row reports.
  virtual std::vector<std::pair<const char*, void (*)(void*)>> handlers() const = 0;

  // One per event, at its end: counts where it ran; the round's last one
  // wakes the driver.
  void done() {
    const int p = loom::this_fibre::processor_index();
    if (p >= 0 && p < kMaxProcessors) ran_on_[p].n.fetch_add(1, std::memory_order_relaxed);
    if (left_.fetch_sub(1, std::memory_order_acq_rel) == 1) round_over_.release();
  }
  // Events run so far on each of the first `n` processors.
  std::vector<double> ran_on(unsigned n) const {
    std::vector<double> v;
    for (unsigned i = 0; i < n && i < kMaxProcessors; ++i) v.push_back(double(ran_on_[i].n.load()));
    return v;
  }
  bool wait_round(double timeout_s) {
    return round_over_.try_acquire_for(std::chrono::nanoseconds(std::int64_t(timeout_s * 1e9)));
  }
  std::int64_t left() const { return left_.load(std::memory_order_acquire); }
  std::uint64_t errors() const { return errors_.load(); }

  // A failed check: counted; the first few are said on stderr.
  void fail(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    if (errors_.fetch_add(1) >= 10) return;
    char buf[300];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "%s: %s: %s\n", kProg, name(), buf);
  }

  // The checks an event of color `c` makes when it starts: the runtime says
  // it runs as `c`, and (with `busy`, the color's flag) nothing else of `c`
  // runs now. leave() clears the flag as the handler returns.
  void enter(loom::Color c, std::atomic<int>* busy) {
    loom::Color cur = loom::current_color();
    if (cur != c) fail("an event of color %u runs as color %u", c, cur);
    if (busy && busy->exchange(1, std::memory_order_acquire) != 0)
      fail("two events of color %u run at the same time", c);
  }
  static void leave(std::atomic<int>* busy) { busy->store(0, std::memory_order_release); }

 protected:
  void arm(std::uint64_t events) { left_.store(static_cast<std::int64_t>(events), std::memory_order_release); }
  std::atomic<std::uint32_t> round_{0};

 private:
  static constexpr int kMaxProcessors = 256;
  struct alignas(64) Counter {
    std::atomic<std::uint64_t> n{0};
  };
  Counter ran_on_[kMaxProcessors];
  alignas(64) std::atomic<std::int64_t> left_{0};
  alignas(64) std::atomic<std::uint64_t> errors_{0};
  loom::Semaphore round_over_{0};
};

// ---- unbalanced (Mely §5.2, tables 3 and 4) ------------------------------------

class Unbalanced final : public Bench {
 public:
  explicit Unbalanced(const Options& o) : n_(o.events), slots_(new Slot[o.events]) {
    // Exactly 2 % long, spread over the round by a fixed shuffle (the same
    // order every round and every run).
    std::mt19937_64 rng(12345);
    std::uniform_int_distribution<std::uint32_t> long_cycles(10000, 50000);
    std::vector<std::uint32_t> c(n_, 100);
    const std::uint64_t n_long = (n_ * 2 + 50) / 100;
    for (std::uint64_t i = 0; i < n_long; ++i) c[i] = long_cycles(rng);
    std::shuffle(c.begin(), c.end(), rng);
    for (std::uint64_t i = 0; i < n_; ++i) {
      slots_[i].self = this;
      slots_[i].cycles = c[i];
      long_ += c[i] > 100;
    }
  }
  const char* name() const override { return "unbalanced"; }
  std::vector<std::pair<const char*, void (*)(void*)>> handlers() const override {
    return {{"short", &short_event}, {"long", &long_event}};
  }
  void describe(bench::Json& j) const override {
    j.add("events_per_round", n_)
        .add("long_events_per_round", long_)
        .add("short_cycles", 100u)
        .add("long_cycles_min", 10000u)
        .add("long_cycles_max", 50000u);
  }
  std::uint64_t start_round(std::uint32_t round) override {
    round_.store(round, std::memory_order_relaxed);
    arm(n_);
    const loom::Color base = fresh_colors(static_cast<std::uint32_t>(n_));
    for (std::uint64_t i = 0; i < n_; ++i) {
      Slot& s = slots_[i];
      s.color = base + static_cast<loom::Color>(i);
      loom::post(s.color, s.cycles > 100 ? &long_event : &short_event, &s);
    }
    return n_;
  }

 private:
  struct alignas(32) Slot {
    Unbalanced* self;
    std::uint32_t cycles;
    loom::Color color;
    std::atomic<std::uint32_t> ran_in{0};  // the round it last ran in
  };
  static void short_event(void* p) { static_cast<Slot*>(p)->self->run(*static_cast<Slot*>(p)); }
  static void long_event(void* p) { static_cast<Slot*>(p)->self->run(*static_cast<Slot*>(p)); }
  void run(Slot& s) {
    spin_cycles(s.cycles);
    enter(s.color, nullptr);
    const std::uint32_t r = round_.load(std::memory_order_relaxed);
    const std::uint32_t before = s.ran_in.exchange(r, std::memory_order_relaxed);
    if (before != r - 1) fail("event of color %u ran in round %u after running in round %u", s.color, r, before);
    done();
  }

  std::uint64_t n_, long_ = 0;
  std::unique_ptr<Slot[]> slots_;
};

// ---- penalty (Mely §5.2, table 5) ------------------------------------------------

class Penalty final : public Bench {
 public:
  explicit Penalty(const Options& o)
      : n_(o.chains),
        slices_(o.slices),
        words_((o.penalty_bytes ? o.penalty_bytes : l2_bytes()) / 8),
        chains_(new Chain[o.chains]) {
    if (words_ < slices_) bench::usage_error(kProg, "penalty: the array is smaller than --slices words");
    for (std::uint64_t i = 0; i < n_; ++i) {
      chains_[i].self = this;
      chains_[i].data.reset(new std::uint64_t[words_]);
      std::memset(chains_[i].data.get(), 0, words_ * 8);  // faulted in now, not in a round
    }
  }
  const char* name() const override { return "penalty"; }
  std::vector<std::pair<const char*, void (*)(void*)>> handlers() const override {
    return {{"A", &event_a}, {"B", &event_b}};
  }
  void describe(bench::Json& j) const override {
    j.add("chains_per_round", n_)
        .add("slices", slices_)
        .add("array_bytes", words_ * 8)
        .add("events_per_round", n_ * (1 + slices_));
  }
  std::uint64_t start_round(std::uint32_t round) override {
    round_.store(round, std::memory_order_relaxed);
    const std::uint64_t events = n_ * (1 + slices_);
    arm(events);
    const loom::Color base = fresh_colors(static_cast<std::uint32_t>(n_));
    for (std::uint64_t i = 0; i < n_; ++i) {
      chains_[i].color = base + static_cast<loom::Color>(i);
      loom::post(chains_[i].color, &event_a, &chains_[i]);
    }
    return events;
  }
  static void event_a(void* p) {
    Chain& c = *static_cast<Chain*>(p);
    Penalty& self = *c.self;
    self.enter(c.color, &c.busy);
    const std::uint64_t v = self.round_.load(std::memory_order_relaxed);
    std::uint64_t* d = c.data.get();
    for (std::uint64_t i = 0; i < self.words_; ++i) d[i] = v;
    c.slice = 0;
    loom::post(c.color, &event_b, &c);
    leave(&c.busy);
    self.done();
  }
  static void event_b(void* p) {
    Chain& c = *static_cast<Chain*>(p);
    Penalty& self = *c.self;
    self.enter(c.color, &c.busy);
    if (c.slice >= self.slices_) {  // a B run once more than posted
      self.fail("color %u: a B event after the array was walked", c.color);
      leave(&c.busy);
      return;
    }
    const std::uint64_t per = self.words_ / self.slices_;
    const std::uint64_t lo = c.slice * per, hi = c.slice + 1 == self.slices_ ? self.words_ : lo + per;
    std::uint64_t* d = c.data.get();
    for (std::uint64_t i = lo; i < hi; ++i) d[i] += 1;
    const std::uint64_t want = self.round_.load(std::memory_order_relaxed) + 1;
    if (d[lo] != want || d[hi - 1] != want)
      self.fail("color %u: slice %llu holds %llu, not %llu (walked twice, or not after its A)", c.color,
                (unsigned long long)c.slice, (unsigned long long)d[lo], (unsigned long long)want);
    if (++c.slice < self.slices_) loom::post(c.color, &event_b, &c);
    leave(&c.busy);
    self.done();
  }

 private:
  struct alignas(64) Chain {
    Penalty* self;
    std::unique_ptr<std::uint64_t[]> data;
    loom::Color color;
    std::uint64_t slice;  // the next B's slice; guarded by the color
    std::atomic<int> busy{0};
  };
  std::uint64_t n_, slices_, words_;
  std::unique_ptr<Chain[]> chains_;
};

// ---- cache-efficient (Mely §5.2, table 6) ----------------------------------------

class CacheEfficient final : public Bench {
 public:
  explicit CacheEfficient(const Options& o) : n_(o.sorts), len_(o.sort_bytes / 4), jobs_(new Job[o.sorts]) {
    if (len_ < 2) bench::usage_error(kProg, "cache-efficient: --array-kib too small");
    for (std::uint64_t i = 0; i < n_; ++i) {
      Job& j = jobs_[i];
      j.self = this;
      j.data.reset(new std::uint32_t[len_]());
      j.out.reset(new std::uint32_t[len_]());
      for (int h = 0; h < 2; ++h) j.half[h].job = &j, j.half[h].which = h;
    }
  }
  const char* name() const override { return "cache-efficient"; }
  std::vector<std::pair<const char*, void (*)(void*)>> handlers() const override {
    return {{"A", &event_a}, {"B", &event_b}, {"C", &event_c}, {"M", &event_m}};
  }
  void describe(bench::Json& j) const override {
    j.add("sorts_per_round", n_).add("array_bytes", len_ * 4).add("events_per_round", n_ * 6);
  }
  std::uint64_t start_round(std::uint32_t round) override {
    round_.store(round, std::memory_order_relaxed);
    arm(n_ * 6);  // A, 2 B, 2 C, M
    const loom::Color base = fresh_colors(static_cast<std::uint32_t>(3 * n_));
    for (std::uint64_t i = 0; i < n_; ++i) {
      Job& j = jobs_[i];
      j.color = base + static_cast<loom::Color>(3 * i);
      j.half[0].color = j.color + 1;
      j.half[1].color = j.color + 2;
      j.seed = (std::uint64_t(round) << 32) ^ (i * 0x9e3779b97f4a7c15ull) ^ 1;
      loom::post(j.color, &event_a, &j);
    }
    return n_ * 6;
  }

 private:
  struct Job;
  struct Half {
    Job* job;
    int which;
    loom::Color color;
    std::atomic<int> busy{0};
  };
  struct alignas(64) Job {
    CacheEfficient* self;
    std::unique_ptr<std::uint32_t[]> data, out;
    loom::Color color;
    std::uint64_t seed, sum = 0;
    int joined = 0;  // the C events seen; guarded by the color
    std::atomic<int> busy{0};
    Half half[2];
  };

  static void event_a(void* p) {
    Job& j = *static_cast<Job*>(p);
    CacheEfficient& self = *j.self;
    self.enter(j.color, &j.busy);
    std::uint64_t x = j.seed, sum = 0;
    std::uint32_t* d = j.data.get();
    for (std::uint64_t i = 0; i < self.len_; ++i) {  // xorshift64
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      d[i] = static_cast<std::uint32_t>(x >> 32);
      sum += d[i];
    }
    j.sum = sum;
    j.joined = 0;
    loom::post(j.half[0].color, &event_b, &j.half[0]);
    loom::post(j.half[1].color, &event_b, &j.half[1]);
    leave(&j.busy);
    self.done();
  }
  static void event_b(void* p) {
    Half& h = *static_cast<Half*>(p);
    Job& j = *h.job;
    CacheEfficient& self = *j.self;
    self.enter(h.color, &h.busy);
    const std::uint64_t mid = self.len_ / 2;
    std::uint32_t* d = j.data.get();
    if (h.which == 0)
      std::sort(d, d + mid);
    else
      std::sort(d + mid, d + self.len_);
    loom::post(j.color, &event_c, &j);
    leave(&h.busy);
    self.done();
  }
  static void event_c(void* p) {
    Job& j = *static_cast<Job*>(p);
    CacheEfficient& self = *j.self;
    self.enter(j.color, &j.busy);
    if (++j.joined == 2) loom::post(j.color, &event_m, &j);
    if (j.joined > 2) self.fail("color %u: %d sorted halves joined", j.color, j.joined);
    leave(&j.busy);
    self.done();
  }
  static void event_m(void* p) {
    Job& j = *static_cast<Job*>(p);
    CacheEfficient& self = *j.self;
    self.enter(j.color, &j.busy);
    const std::uint64_t mid = self.len_ / 2;
    std::uint32_t* d = j.data.get();
    std::uint32_t* o = j.out.get();
    std::merge(d, d + mid, d + mid, d + self.len_, o);
    std::uint64_t sum = o[0];
    bool sorted = true;
    for (std::uint64_t i = 1; i < self.len_; ++i) {
      sorted &= o[i - 1] <= o[i];
      sum += o[i];
    }
    if (!sorted || sum != j.sum)
      self.fail("color %u: the merged array is %s", j.color, sorted ? "not the input" : "not sorted");
    leave(&j.busy);
    self.done();
  }

  std::uint64_t n_, len_;
  std::unique_ptr<Job[]> jobs_;
};

// ---- event-cost: the runtime's cost of a one-event color -----------------------

class EventCost final : public Bench {
 public:
  explicit EventCost(const Options& o) : n_(o.events), slots_(new Slot[o.events]) {
    for (std::uint64_t i = 0; i < n_; ++i) slots_[i].self = this;
  }
  const char* name() const override { return "event-cost"; }
  std::vector<std::pair<const char*, void (*)(void*)>> handlers() const override { return {{"empty", &event}}; }
  void describe(bench::Json& j) const override { j.add("events_per_round", n_); }
  std::uint64_t start_round(std::uint32_t round) override {
    round_.store(round, std::memory_order_relaxed);
    arm(n_);
    const loom::Color base = fresh_colors(static_cast<std::uint32_t>(n_));
    for (std::uint64_t i = 0; i < n_; ++i) {
      slots_[i].color = base + static_cast<loom::Color>(i);
      loom::post(slots_[i].color, &event, &slots_[i]);
    }
    return n_;
  }

 private:
  struct Slot {
    EventCost* self;
    loom::Color color;
  };
  static void event(void* p) {
    Slot& s = *static_cast<Slot*>(p);
    if (loom::current_color() != s.color) s.self->fail("an event of color %u runs as color %u", s.color, loom::current_color());
    s.self->done();
  }
  std::uint64_t n_;
  std::unique_ptr<Slot[]> slots_;
};

// ---- the driver ----------------------------------------------------------------

struct Result {
  std::uint64_t rounds = 0, events = 0, warmup_rounds = 0, all_events = 0;
  double seconds = 0, tsc_ghz = 0;
  std::uint64_t cycles = 0;  // TSC cycles of the measured rounds
  loom::ColorStats s0, s1;
  loom::StealPayoff p0, p1;
  std::vector<double> poster;  // rounds posted from each processor
  std::vector<double> ran_on;  // events of the measured rounds run on each processor
};

// The driver fibre: warm-up rounds, then measured rounds.
void drive(Bench& b, const Options& o, loom::Cluster& cluster, Result& r) {
  r.poster.assign(o.processors, 0);
  std::uint32_t round = 1;
  auto one = [&] {
    const int p = loom::this_fibre::processor_index();
    if (p >= 0 && unsigned(p) < r.poster.size()) r.poster[p] += 1;
    const std::uint64_t n = b.start_round(round);
    if (!b.wait_round(o.round_timeout)) {
      std::fprintf(stderr, "%s: %s [%s]: round %u: %lld of its %llu events still not run after %g s (lost events)\n",
                   kProg, b.name(), o.variant.c_str(), round, (long long)b.left(), (unsigned long long)n,
                   o.round_timeout);
      std::fflush(stderr);
      std::_Exit(1);  // the cluster cannot be torn down with its events pending
    }
    ++round;
    r.all_events += n;
    return n;
  };
  if (o.warmup > 0) {
    const std::uint64_t end = bench::now_ns() + std::uint64_t(o.warmup * 1e9);
    do {
      one();
      ++r.warmup_rounds;
    } while (bench::now_ns() < end);
  }
  r.s0 = loom::color_stats(cluster);
  r.p0 = loom::steal_payoff(cluster);
  const std::vector<double> ran0 = b.ran_on(o.processors);
  const std::uint64_t t0 = bench::now_ns(), c0 = cycles();
  do {
    r.events += one();
    ++r.rounds;
  } while (bench::now_ns() - t0 < o.seconds * 1e9);
  const std::uint64_t t1 = bench::now_ns(), c1 = cycles();
  r.s1 = loom::color_stats(cluster);
  r.p1 = loom::steal_payoff(cluster);
  r.ran_on = b.ran_on(o.processors);
  for (std::size_t i = 0; i < r.ran_on.size(); ++i) r.ran_on[i] -= ran0[i];
  r.seconds = (t1 - t0) / 1e9;
  r.cycles = c1 - c0;
  r.tsc_ghz = double(c1 - c0) / double(t1 - t0);
}

std::unique_ptr<Bench> make_bench(const std::string& name, const Options& o) {
  if (name == "unbalanced") return std::make_unique<Unbalanced>(o);
  if (name == "penalty") return std::make_unique<Penalty>(o);
  if (name == "event-cost") return std::make_unique<EventCost>(o);
  return std::make_unique<CacheEfficient>(o);
}

// One benchmark under one variant on a new cluster; false when a check failed.
bool run_one(const std::string& name, const Options& o) {
  const loom::SchedConfig config = loom::SchedConfig::from_env();
  const std::string policy = o.variant == "mely-measured" ? "mely" : o.variant;
  std::unique_ptr<Bench> b = make_bench(name, o);
  Result r;
  std::uint64_t stats_events = 0;
  {
    loom::Cluster cluster(o.processors, config);
    if (!loom::set_color_policy(cluster, policy)) {
      std::fprintf(stderr, "%s: loom refused the color policy '%s'\n", kProg, policy.c_str());
      std::exit(2);
    }
    loom::set_color_batch(cluster, o.batch);
    // New colors start on the processor that posts them: Mely's rounds start
    // with all their events on one processor (loom's default hashes colors
    // over the processors, which would balance the rounds before any steal).
    if (!loom::set_color_placement(cluster, "local")) {
      std::fprintf(stderr, "%s: loom refused color placement 'local'\n", kProg);
      std::exit(2);
    }
    // B's penalty: the programmer's where the variant weighs penalties (as
    // Mely did), else the runtime's measured one (0 restores it).
    const bool set = name == "penalty" && (o.variant == "mely:penalty" || o.variant == "mely");
    if (name == "penalty") loom::set_penalty(&Penalty::event_b, set ? o.penalty : 0);
    const std::uint64_t before = loom::color_stats(cluster).events_run;

    loom::FibreAttr attr;
    attr.cluster = &cluster;
    attr.name = "colors_loom driver";
    loom::Fibre driver(attr, [&] { drive(*b, o, cluster, r); });
    driver.join();
    // The last event releases the driver before the runtime counts it: give
    // the counter a moment to catch up.
    for (int i = 0; i < 1000; ++i) {
      stats_events = loom::color_stats(cluster).events_run - before;
      if (stats_events >= r.all_events) break;
      usleep(1000);
    }
    if (name == "penalty") loom::set_penalty(&Penalty::event_b, 0);
  }
  if (stats_events != r.all_events)
    std::fprintf(stderr, "%s: %s [%s]: loom's color_stats counted %llu events, the program ran %llu\n", kProg,
                 name.c_str(), o.variant.c_str(), (unsigned long long)stats_events, (unsigned long long)r.all_events);

  const double stolen = double(r.s1.colors_stolen - r.s0.colors_stolen);
  bench::Json j;
  j.add("bench", name)
      .add("system", "loom")
      .add("variant", o.variant)
      .add("policy", policy)
      .add("events_per_s", r.seconds > 0 ? r.events / r.seconds : 0.0)
      .add("events", r.events)
      .add("rounds", r.rounds)
      .add("seconds", r.seconds)
      .add("warmup_rounds", r.warmup_rounds)
      .add("steal_cost_cycles", r.s1.steal_cost_cycles)
      .add("stolen_work_cycles", r.s1.stolen_work_cycles)
      .add("steal_payoff_cycles", double(r.p1.payoff_cycles))
      .add("steals_paid_share", r.p1.paid_share)
      .add("steal_looks_held", r.p1.looks_held - r.p0.looks_held)
      .add("colors_stolen", r.s1.colors_stolen - r.s0.colors_stolen)
      .add("events_stolen", r.s1.events_stolen - r.s0.events_stolen)
      .add("steal_attempts", r.s1.steal_attempts - r.s0.steal_attempts)
      .add("colors_stolen_per_round", r.rounds ? stolen / r.rounds : 0.0)
      .add("colors_live", r.s1.colors_live)
      .add("cycles_per_event", r.events ? double(r.cycles) / double(r.events) : 0.0)
      .add("stats_events_run", stats_events)
      .add("program_events_run", r.all_events)
      .add("penalty_set",
           name == "penalty" && (o.variant == "mely:penalty" || o.variant == "mely") ? o.penalty : std::nan(""));
  b->describe(j);
  std::string handlers = "{";
  for (const auto& [hname, fn] : b->handlers()) {
    const loom::HandlerTimes t = loom::handler_times(fn);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s\"%s\": {\"warm_cycles\": %llu, \"cold_cycles\": %llu, \"penalty\": %.4g}",
                  handlers.size() > 1 ? ", " : "", hname, (unsigned long long)t.warm_cycles,
                  (unsigned long long)t.cold_cycles, t.penalty);
    handlers += buf;
  }
  j.raw("handlers", handlers + "}");
  j.add("processors", o.processors)
      .add("batch", o.batch)
      .add("poster_rounds_by_processor", r.poster)
      .add("events_by_processor", r.ran_on)
      .add("tsc_ghz", r.tsc_ghz)
      .add("sched_config", bench::loom_variant(config))
      .add("cpus", bench::allowed_cpus())
      .add("max_rss_kib", bench::max_rss_kib());
  j.print();
  if (b->errors()) {
    std::fprintf(stderr, "%s: %s [%s]: %llu failed check(s)\n", kProg, name.c_str(), o.variant.c_str(),
                 (unsigned long long)b->errors());
    return false;
  }
  return true;
}

void help() {
  std::printf(
      "usage: %s [--bench LIST] [--variant V] [--seconds S] [--warmup S] [--processors N] [--batch N]\n"
      "          [--events N] [--chains N] [--slices N] [--penalty-kib K] [--penalty P] [--sorts N]\n"
      "          [--array-kib K] [--round-timeout S]\n"
      "Mely's color-stealing microbenchmarks (report §5.2) on loom; one JSON object per benchmark.\n"
      "  --bench LIST       unbalanced, penalty, cache-efficient, event-cost (default: the first three, in\n"
      "                     that order; event-cost: the cost of a one-event color, cycles_per_event)\n"
      "  --variant V        none, libasync-smp, mely:base, mely:locality, mely:time-left, mely:penalty,\n"
      "                     mely, mely-measured (mely without set_penalty) (default mely)\n"
      "  --seconds S        measured time per benchmark, whole rounds (default 5)\n"
      "  --warmup S         rounds run before measuring (default 1; 0: none)\n"
      "  --processors N     processors of the benchmark's cluster (default 2)\n"
      "  --batch N          events of one color before the next color (default 10, Mely's)\n"
      "  --events N         unbalanced, event-cost: events per round (default 50000)\n"
      "  --chains N         penalty: A events per round (default 32)\n"
      "  --slices N         penalty: B events per A (default 32)\n"
      "  --penalty-kib K    penalty: array size (default: the L2's, %zu KiB here)\n"
      "  --penalty P        penalty: B's penalty in mely:penalty and mely (default 1000)\n"
      "  --sorts N          cache-efficient: A events per round (default 100)\n"
      "  --array-kib K      cache-efficient: array size (default 64)\n"
      "  --round-timeout S  a round not finished after S seconds has lost events: exit 1 (default 30)\n"
      "Exit status: 0, 1 when a check failed (lost, duplicated or overlapping events), 2 for a bad command line.\n",
      kProg, l2_bytes() >> 10);
}

Options parse(int argc, char** argv) {
  Options o;
  bench::ArgWalker w(kProg, argc, argv);
  auto count = [&](const char* flag) { return bench::parse_count(kProg, flag, w.value()); };
  while (const char* f = w.next()) {
    const std::string flag = f;
    if (flag == "--help" || flag == "-h") {
      help();
      std::exit(0);
    } else if (flag == "--bench") {
      o.benches.clear();
      for (const std::string& b : bench::split_commas(w.value())) {
        if (std::find(std::begin(kBenches), std::end(kBenches), b) == std::end(kBenches))
          bench::usage_error(kProg, "unknown bench '" + b + "' (unbalanced, penalty, cache-efficient, event-cost)");
        o.benches.push_back(b);
      }
    } else if (flag == "--variant") {
      o.variant = w.value();
      if (std::find(std::begin(kVariants), std::end(kVariants), o.variant) == std::end(kVariants))
        bench::usage_error(kProg, "unknown variant '" + o.variant + "'");
    } else if (flag == "--seconds") {
      o.seconds = bench::parse_seconds(kProg, "--seconds", w.value(), false);
    } else if (flag == "--warmup") {
      o.warmup = bench::parse_seconds(kProg, "--warmup", w.value(), true);
    } else if (flag == "--round-timeout") {
      o.round_timeout = bench::parse_seconds(kProg, "--round-timeout", w.value(), false);
    } else if (flag == "--processors") {
      std::uint64_t n = count("--processors");
      if (n > 256) bench::usage_error(kProg, "--processors: at most 256");
      o.processors = unsigned(n);
    } else if (flag == "--batch") {
      o.batch = unsigned(std::min<std::uint64_t>(count("--batch"), 1u << 20));
    } else if (flag == "--events") {
      o.events = count("--events");
    } else if (flag == "--chains") {
      o.chains = count("--chains");
    } else if (flag == "--slices") {
      o.slices = count("--slices");
    } else if (flag == "--penalty-kib") {
      o.penalty_bytes = count("--penalty-kib") << 10;
    } else if (flag == "--penalty") {
      o.penalty = double(count("--penalty"));
    } else if (flag == "--sorts") {
      o.sorts = count("--sorts");
    } else if (flag == "--array-kib") {
      o.sort_bytes = count("--array-kib") << 10;
    } else {
      bench::usage_error(kProg, "unknown flag '" + flag + "'");
    }
  }
  if (o.benches.empty()) o.benches.assign(std::begin(kBenches), std::begin(kBenches) + kDefaultBenches);
  if (o.events > (1u << 24) || o.chains > (1u << 20) || o.sorts > (1u << 20))
    bench::usage_error(kProg, "too many events per round (at most 2^24, chains and sorts 2^20)");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  bool ok = true;
  for (const std::string& b : o.benches) ok &= run_one(b, o);
  return ok ? 0 : 1;
}
