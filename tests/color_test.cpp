// Colors: mutual exclusion per color under every steal policy, per-color
// FIFO, nothing lost or run twice while colors move (and colors do move,
// away from a processor and back), shared work, colored fibres that keep
// their color while blocked, the time-left rule, the batch threshold, and
// the penalty's say in which color a thief takes.
#include "color/color.hpp"
#include "sched/processor.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "loom/color.hpp"
#include "loom/loom.hpp"
#include "test_util.hpp"

namespace {

using loom::Cluster;
using loom::Color;
using loom::test::scaled;

void spin_for(std::chrono::microseconds d) {
  auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

// Waits (from a fibre or main) until `n` reaches `want`, or `limit`.
bool wait_for(const std::atomic<long>& n, long want, std::chrono::seconds limit = std::chrono::seconds(60)) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (n.load() < want) {
    if (std::chrono::steady_clock::now() > end) return false;
    loom::this_fibre::yield();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Per color: how many run now (exclusive adds 1000, shared 1), the next
// sequence number expected, and violations seen.
struct ColorState {
  std::atomic<int> inflight{0};
  std::atomic<int> max_shared{0};
  std::atomic<long> next{0};
  // Exclusive events only (they run one at a time): how many finished, and
  // where the last ran. A color's queue is freed when it empties and made
  // again by a later post, perhaps on another processor (local placement
  // from a fibre that moved since): only an event appended while its
  // predecessor had not finished (Checker::behind) is known to be in the
  // same queue, so that a change of processor between the two is a steal.
  std::atomic<long> finished{0};
  std::atomic<int> last_proc{-1};
  std::atomic<unsigned> moves{0};  // steals seen so, between two events of one queue
};

struct Checker {
  explicit Checker(unsigned colors, long events) : state(colors), runs(events), behind(events) {}
  std::vector<ColorState> state;
  std::vector<std::atomic<unsigned char>> runs;
  std::vector<std::atomic<unsigned char>> behind;  // per event id, see ColorState
  std::atomic<long> done{0}, violations{0}, out_of_order{0};
};

struct Ev {
  Checker* ck;
  unsigned color;  // index into ck->state
  long id;
  long seq;  // per color, for exclusive events
  bool shared;
  unsigned spin_ns;
};

// Posts an exclusive event (from the color's only poster). Whether its
// predecessor had still not finished once it was appended is known only
// after the post; the handler may read `behind` before it is set, and then
// does not count a steal (never a wrong one).
void post_exclusive(Checker& ck, Color c, unsigned color, long id, long seq, void (*fn)(void*), Cluster* cl) {
  loom::post(c, fn, new Ev{&ck, color, id, seq, false, 0}, cl);
  if (ck.state[color].finished.load() < seq) ck.behind[id].store(1);
}

void run_event(void* p) {
  std::unique_ptr<Ev> e(static_cast<Ev*>(p));
  ColorState& s = e->ck->state[e->color];
  int add = e->shared ? 1 : 1000;
  int before = s.inflight.fetch_add(add);
  if (e->shared ? before >= 1000 : before != 0) e->ck->violations.fetch_add(1);
  if (e->shared) {
    int now = before + 1, m = s.max_shared.load();
    while (now > m && !s.max_shared.compare_exchange_weak(m, now)) {
    }
  } else {
    long want = s.next.load();
    if (want != e->seq) e->ck->out_of_order.fetch_add(1);
    s.next.store(e->seq + 1);
    int here = loom::this_fibre::processor_index();
    if (s.last_proc.exchange(here) != here && e->ck->behind[e->id].load()) s.moves.fetch_add(1);
  }
  if (e->spin_ns) spin_for(std::chrono::microseconds(e->spin_ns / 1000));
  if (loom::current_color() == loom::kUncolored) e->ck->violations.fetch_add(1);
  s.inflight.fetch_sub(add);
  if (!e->shared) s.finished.store(e->seq + 1);
  e->ck->runs[e->id].fetch_add(1);
  e->ck->done.fetch_add(1);
}

// A dear event: run_event under a handler of its own, so that the runtime
// measures its cost apart from the cheap events' (the handler key is the
// function). Its 20 us are tens of thousands of cycles, far above a steal's
// measured cost (hundreds to a few thousand cycles, in the same build), so
// a color with one queued is worth a steal also to time-left.
void run_dear_event(void* p) {
  static_cast<Ev*>(p)->spin_ns = 20000;
  run_event(p);
}

// A relay of steals, which leaves nothing to chance: whatever the run
// before it did, it makes colors move away from a processor and then away
// from the one they moved to. A hop is an event that, on whatever processor
// P it runs, posts kRelayColors fresh colors there (local placement) and
// holds P's runner until one of their events has run on another processor,
// which an idle processor's steal of that color from P is the only way to
// do; that event makes the next hop from where it runs. Each color has
// kRelayEvents dear events (worth a steal to time-left, each under half
// its victim's events for libasync-smp's rule).
constexpr unsigned kRelayHops = 2, kRelayColors = 3, kRelayEvents = 40;

struct Relay {
  Color base = loom::allocate_colors(kRelayHops * kRelayColors + 2);
  std::atomic<unsigned> done{0};  // hops whose colors moved
  std::atomic<int> from[kRelayHops], to[kRelayHops];
  std::atomic<long> ran{0};
};

struct RelayEv {
  Relay* r;
  unsigned hop;
  int origin;  // the processor the hop posted it on; -1: teaching the runtime its cost
};

void relay_event(void* p);

void relay_hop(Relay& r, unsigned hop) {
  int here = loom::this_fibre::processor_index();
  for (unsigned c = 0; c < kRelayColors; ++c)
    for (unsigned k = 0; k < kRelayEvents; ++k)
      loom::post(r.base + hop * kRelayColors + c, &relay_event, new RelayEv{&r, hop, here});
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (r.done.load() <= hop && std::chrono::steady_clock::now() < end) {
  }
}

void relay_event(void* p) {
  std::unique_ptr<RelayEv> e(static_cast<RelayEv*>(p));
  Relay& r = *e->r;
  spin_for(std::chrono::microseconds(20));
  int here = loom::this_fibre::processor_index();
  unsigned hop = e->hop;
  if (e->origin >= 0 && here != e->origin && r.done.compare_exchange_strong(hop, e->hop + 1)) {
    r.from[e->hop] = e->origin;
    r.to[e->hop] = here;
    if (e->hop + 1 < kRelayHops) relay_hop(r, e->hop + 1);
  }
  r.ran.fetch_add(1);
}

// Runs the relay on `cl` (placement set to local) and checks that each hop's
// colors moved: on two processors, away from one and back to it.
void expect_relay(Cluster& cl) {
  ASSERT_TRUE(loom::set_color_placement(cl, "local"));
  Relay r;
  // Teach the runtime the handler's cost first (before its first run a
  // handler counts as 1,000 cycles an event).
  for (int i = 0; i < 4; ++i) loom::post(r.base + kRelayHops * kRelayColors, &relay_event, new RelayEv{&r, 0, -1}, &cl);
  ASSERT_TRUE(wait_for(r.ran, 4));
  loom::post(
      r.base + kRelayHops * kRelayColors + 1,
      [&r] {
        relay_hop(r, 0);
        r.ran.fetch_add(1);
      },
      &cl);
  ASSERT_TRUE(wait_for(r.ran, 5 + long(kRelayHops * kRelayColors * kRelayEvents)))
      << "relay stuck at hop " << r.done.load() << "; steals paused " << loom::steal_payoff(cl).paused
      << ", paid share " << loom::steal_payoff(cl).paid_share << ", looks held " << loom::steal_payoff(cl).looks_held;
  ASSERT_EQ(r.done.load(), kRelayHops) << "hop " << r.done.load() << "'s colors never left their processor";
  for (unsigned h = 0; h < kRelayHops; ++h) {
    EXPECT_NE(r.from[h].load(), r.to[h].load()) << h;
    if (h) {
      EXPECT_EQ(r.from[h].load(), r.to[h - 1].load()) << h;
    }
  }
  if (cl.processors() == 2) {
    EXPECT_EQ(r.to[1].load(), r.from[0].load()) << "colors moved from processor " << r.from[0] << " and back";
  }
}

struct Case {
  std::string policy;
  unsigned processors;
};

// The cluster's color statistics once `total` events have been counted. A
// runner counts an event after its handler returned (the handler is what
// counted it done): give the last count a moment.
loom::ColorStats settled_stats(Cluster& cl, long total) {
  loom::ColorStats st = loom::color_stats(cl);
  for (int i = 0; i < 2000 && st.events_run < std::uint64_t(total); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    st = loom::color_stats(cl);
  }
  return st;
}

// What a run says about stealing: under "none" or on one processor nothing
// moves; under every other policy the relay moves colors away from a
// processor and on (back, on two), and where the workload makes stealing
// sure (`workload_steals`), colors were stolen during it, some while their
// events were being checked (a move within one queue's life).
void expect_stealing(const Case& c, Cluster& cl, long total, const Checker& ck, bool workload_steals) {
  loom::ColorStats st = settled_stats(cl, total);
  EXPECT_GE(st.events_run, std::uint64_t(total));
  unsigned moves = 0;
  for (const ColorState& s : ck.state) moves += s.moves.load();
  std::string what = "colors_stolen " + std::to_string(st.colors_stolen) + ", steal cost " +
                     std::to_string(st.steal_cost_cycles) + " cycles, moves seen " + std::to_string(moves);
  if (c.policy == "none" || c.processors == 1) {
    EXPECT_EQ(st.colors_stolen, 0u) << what;
    EXPECT_EQ(moves, 0u) << what;
    return;
  }
  // Under the sanitizers the workload is short (LOOM_TEST_SCALE: 2,000
  // events under TSan) and every thread many times slower: one steal, or
  // none seen within a queue, is all it may show (TSan: 1 steal, no move
  // seen, once). The relay's steals do not depend on the workload.
  if (workload_steals && !loom::test::sanitized()) {
    EXPECT_GT(st.colors_stolen, 0u) << what;
    EXPECT_GT(moves, 0u) << what;
  }
  expect_relay(cl);
}

class ColorPolicies : public ::testing::TestWithParam<Case> {};

// Posters (one per group of colors, so per-color submission order is
// defined) post exclusive events; every color's events must never overlap,
// run in order, and run exactly once, while idle processors steal colors.
// One poster is a fibre whose colors all start on its processor (local
// placement: the imbalance stealing exists for); the others are kernel
// threads, whose colors are hashed over the processors. Each poster posts
// its colors in turn, 256 events at a time (queues long enough to be
// stolen while they hold events), every 97th event a dear one (so that
// time-left too finds colors worth a steal).
TEST_P(ColorPolicies, ExclusiveColorsNeverOverlapRunInOrderAndOnce) {
  const Case& c = GetParam();
  Cluster cl(c.processors, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, c.policy));
  loom::set_color_placement(cl, "local");
  const unsigned kColors = 64, kPosters = 4;
  const long per_poster = std::max(2000L, scaled(400000)) / kPosters;
  const long total = per_poster * kPosters;
  Checker ck(kColors, total);
  auto poster = [&](unsigned p) {
    std::vector<long> seq(kColors, 0);
    for (long i = 0; i < per_poster; ++i) {
      unsigned color = p + kPosters * unsigned(i / 256 % (kColors / kPosters));
      post_exclusive(ck, Color(color + 1), color, p * per_poster + i, seq[color]++,
                     i % 97 == 0 ? &run_dear_event : &run_event, &cl);
      if (i % 512 == 0) loom::this_fibre::yield();
    }
  };
  {
    loom::FibreAttr a;
    a.cluster = &cl;
    loom::Fibre local(a, poster, 0u);
    std::vector<std::thread> outside;
    for (unsigned p = 1; p < kPosters; ++p) outside.emplace_back(poster, p);
    for (auto& t : outside) t.join();
  }
  ASSERT_TRUE(wait_for(ck.done, total)) << ck.done.load() << " of " << total;
  EXPECT_EQ(ck.violations.load(), 0);
  EXPECT_EQ(ck.out_of_order.load(), 0);
  long twice = 0;
  for (auto& r : ck.runs) twice += r.load() != 1;
  EXPECT_EQ(twice, 0);
  expect_stealing(c, cl, total, ck, true);
}

// Shared and exclusive work on the same colors: shared may overlap shared,
// never exclusive.
TEST_P(ColorPolicies, SharedWorkNeverOverlapsExclusiveWork) {
  const Case& c = GetParam();
  Cluster cl(c.processors, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, c.policy));
  const unsigned kColors = 8;
  const long total = std::max(1000L, scaled(40000));
  Checker ck(kColors, total);
  loom::FibreAttr a;
  a.cluster = &cl;
  {
    loom::Fibre poster(a, [&] {
      std::vector<long> seq(kColors, 0);
      for (long i = 0; i < total; ++i) {
        unsigned color = unsigned(i % kColors);
        bool shared = (i / kColors) % 8 != 0;  // runs of shared, then one exclusive
        if (shared)
          loom::post_shared(Color(color + 100), &run_event, new Ev{&ck, color, i, 0, true, 5000u});
        else
          post_exclusive(ck, Color(color + 100), color, i, seq[color]++, &run_event, nullptr);
      }
    });
  }
  ASSERT_TRUE(wait_for(ck.done, total));
  EXPECT_EQ(ck.violations.load(), 0);
  EXPECT_EQ(ck.out_of_order.load(), 0);
  for (auto& r : ck.runs) EXPECT_EQ(r.load(), 1);
  // One poster, colors hashed over the processors: a processor need not
  // fall idle while another holds queued colors (2 runs in 140 on two
  // processors stole nothing); the relay still moves colors here.
  expect_stealing(c, cl, total, ck, false);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const char* p : {"none", "libasync-smp", "mely:base", "mely:time-left", "mely:penalty", "mely:locality", "mely"})
    for (unsigned n : {1u, 2u, 4u, 8u})
      if (!loom::test::sanitized() || n != 8) v.push_back({p, n});
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, ColorPolicies, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string s = info.param.policy + "_" + std::to_string(info.param.processors);
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
});

// Shared work of one color does overlap when processors are idle.
TEST(Colors, SharedWorkOverlaps) {
  Cluster cl(4, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, "libasync-smp"));
  const long total = 400;
  Checker ck(1, total);
  for (long i = 0; i < total; ++i) loom::post_shared(7, &run_event, new Ev{&ck, 0, i, 0, true, 2000000u}, &cl);
  ASSERT_TRUE(wait_for(ck.done, total));
  EXPECT_EQ(ck.violations.load(), 0);
  EXPECT_GT(ck.state[0].max_shared.load(), 1);
}

// A colored fibre holds its color from start to exit, also while blocked on a
// mutex and on I/O: events of its color wait for it.
TEST(Colors, ColoredFibreKeepsItsColorWhileBlocked) {
  Cluster cl(2, loom::SchedConfig{});
  loom::Mutex m;
  int sv[2];
  ASSERT_EQ(loom::io::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::atomic<int> stage{0};
  std::atomic<long> events_ran{0};
  std::atomic<int> ran_early{0};
  m.lock();
  loom::FibreAttr a;
  a.cluster = &cl;
  a.color = 55;
  loom::Fibre f(a, [&] {
    EXPECT_EQ(loom::current_color(), 55u);
    stage = 1;
    m.lock();  // blocks: main holds it
    m.unlock();
    stage = 2;
    char c;
    EXPECT_EQ(loom::io::read(sv[0], &c, 1), 1);  // blocks on I/O
    stage = 3;
  });
  while (stage.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int i = 0; i < 20; ++i)
    loom::post(
        55,
        [&] {
          if (stage.load() != 3) ran_early.fetch_add(1);
          events_ran.fetch_add(1);
        },
        &cl);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(events_ran.load(), 0);
  m.unlock();
  while (stage.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(events_ran.load(), 0);
  ASSERT_EQ(::write(sv[1], "x", 1), 1);
  f.join();
  ASSERT_TRUE(wait_for(events_ran, 20));
  EXPECT_EQ(ran_early.load(), 0);
  loom::io::close(sv[0]);
  ::close(sv[1]);
  EXPECT_GE(loom::color_stats(cl).fibres_started, 1u);
}

// Colored fibres of one color run one after the other, in creation order.
TEST(Colors, ColoredFibresOfOneColorTakeTurns) {
  Cluster cl(4, loom::SchedConfig{});
  const int kFibres = 40;
  std::atomic<int> inside{0}, overlaps{0};
  std::vector<int> order;
  loom::Mutex om;
  std::vector<std::unique_ptr<loom::Fibre>> fs;
  loom::FibreAttr a;
  a.cluster = &cl;
  a.color = 9;
  for (int i = 0; i < kFibres; ++i)
    fs.push_back(std::make_unique<loom::Fibre>(a, [&, i] {
      if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
      loom::this_fibre::yield();
      spin_for(std::chrono::microseconds(100));
      {
        std::lock_guard<loom::Mutex> g(om);
        order.push_back(i);
      }
      inside.fetch_sub(1);
    }));
  fs.clear();
  EXPECT_EQ(overlaps.load(), 0);
  ASSERT_EQ(order.size(), std::size_t(kFibres));
  for (int i = 0; i < kFibres; ++i) EXPECT_EQ(order[i], i);
}

// Events posted from kernel threads that are not processors, with no cluster
// named, go to the default cluster and run.
TEST(Colors, PostFromAKernelThread) {
  std::atomic<long> ran{0};
  std::thread t([&] {
    for (int i = 0; i < 100; ++i) loom::post(Color(1 + i % 3), [&] { ran.fetch_add(1); });
  });
  t.join();
  ASSERT_TRUE(wait_for(ran, 100));
}

// time-left: a color whose queued work is below the cost of a steal stays
// with its (busy) processor; one whose work exceeds it is taken by the idle
// processor.
struct Cheap {
  std::atomic<long>* n;
  std::atomic<long>* on1;
  void operator()() {
    if (loom::this_fibre::processor_index() == 1) on1->fetch_add(1);
    n->fetch_add(1);
  }
};
struct Dear {
  std::atomic<long>* n;
  std::atomic<long>* on1;
  void operator()() {
    spin_for(std::chrono::microseconds(500));
    if (loom::this_fibre::processor_index() == 1) on1->fetch_add(1);
    n->fetch_add(1);
  }
};

TEST(Colors, TimeLeftStealsOnlyColorsWorthTheSteal) {
  Cluster cl(2, loom::SchedConfig{});
  loom::set_color_placement(cl, "local");
  std::atomic<long> n{0}, on1{0}, dummy{0};
  // Teach the runtime the handlers' costs (events run where they are posted:
  // stealing is off for this warm-up).
  ASSERT_TRUE(loom::set_color_policy(cl, "none"));
  for (int i = 0; i < 200; ++i) loom::post(Color(1000 + i), Cheap{&n, &dummy}, &cl);
  for (int i = 0; i < 50; ++i) loom::post(Color(2000 + i), Dear{&n, &dummy}, &cl);
  ASSERT_TRUE(wait_for(n, 250));
  ASSERT_TRUE(loom::set_color_policy(cl, "mely:time-left"));
  std::uint64_t stolen0 = loom::color_stats(cl).colors_stolen;

  // Dear colors on a busy processor are worth the steal. (These steals also
  // measure the steal cost in this build's cycles: an instrumented build's
  // steals and handlers are both slower, and the comparison stays fair.)
  const long kDear = 40;
  loom::Fibre holder(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
    // Runs on some processor; the events it posts stay there (local).
    for (long i = 0; i < kDear; ++i) loom::post(Color(4000 + i), Dear{&n, &on1});
    spin_for(std::chrono::milliseconds(30));  // the idle processor has time to steal
  });
  holder.join();
  ASSERT_TRUE(wait_for(n, 250 + kDear));
  std::uint64_t stolen1 = loom::color_stats(cl).colors_stolen;
  EXPECT_GT(stolen1, stolen0) << "no dear color was stolen";

  // Processor 0 is kept busy by one long event that posts cheap colors on
  // its own processor; processor 1 is idle and must leave them alone. The
  // policy weighs the handler's smoothed estimate against the measured
  // steal cost, and a loaded machine can blur both: a cheap event preempted
  // or missing the cache lifts its estimate (the quick suite on a loaded
  // machine: 17 stolen; in CI once all 300, the estimates unknown). A round
  // is judged only when the cheap handler measured under a steal before
  // and after it; else it is taught again (run where posted) and retried.
  // A policy that does not weigh colors takes most of them (mely:base and
  // libasync-smp stole 229-298 of the 300), and its steals lift the
  // handler's estimate (contended counters): it fails either way.
  const long kCheap = 300;
  const auto cheap_warm = [] { return loom::handler_times(loom::handler_key<Cheap>()).warm_cycles; };
  std::ostringstream seen;
  bool judged = false;
  for (int round = 0; round < 5 && !judged; ++round) {
    if (round > 0) {
      ASSERT_TRUE(loom::set_color_policy(cl, "none"));
      n = 0;
      for (int i = 0; i < 400; ++i) loom::post(Color(5000 + i), Cheap{&n, &dummy}, &cl);
      ASSERT_TRUE(wait_for(n, 400));
      ASSERT_TRUE(loom::set_color_policy(cl, "mely:time-left"));
    }
    const std::uint64_t w0 = cheap_warm(), c0 = loom::color_stats(cl).steal_cost_cycles;
    const std::uint64_t before = loom::color_stats(cl).colors_stolen;
    n = 0;
    loom::Fibre holder2(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
      for (long i = 0; i < kCheap; ++i) loom::post(Color(10000 + round * kCheap + i), Cheap{&n, &on1});
      spin_for(std::chrono::milliseconds(30));
    });
    holder2.join();
    ASSERT_TRUE(wait_for(n, kCheap));
    const std::uint64_t stolen = loom::color_stats(cl).colors_stolen - before;
    const std::uint64_t w1 = cheap_warm(), c1 = loom::color_stats(cl).steal_cost_cycles;
    seen << " [round " << round << ": " << stolen << " stolen, cheap handler " << w0 << "->" << w1
         << " cycles, steal cost " << c0 << "->" << c1 << "]";
    if (std::max(w0, w1) < std::min(c0, c1)) {
      judged = true;
      EXPECT_LE(stolen, std::uint64_t(kCheap / 10)) << "cheap colors were stolen:" << seen.str();
    }
  }
  EXPECT_TRUE(judged) << "the cheap handler never measured under a steal:" << seen.str();
}

// ---- the batch threshold ---------------------------------------------------------

// A runner with several colors ready runs at most `batch` events of one, then
// moves it to the back of its list and goes on with the next (Mely §4.1):
// round robin, `batch` at a time, each color in its order. One processor
// (the order is its runner's), no stealing; a gate event holds the runner
// until every color is queued. 0: the default (ColorConfig, 10 unless
// LOOM_COLOR_BATCH says otherwise).
class ColorBatch : public ::testing::TestWithParam<unsigned> {};

TEST_P(ColorBatch, RunsAtMostBatchEventsOfAColorBeforeTheNext) {
  const unsigned configured = GetParam();
  Cluster cl(1, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, "none"));
  if (configured) loom::set_color_batch(cl, configured);
  const unsigned batch = configured ? configured : loom::ColorConfig::from_env().batch;
  if (!configured) {
    EXPECT_EQ(loom::ColorConfig{}.batch, 10u);
  }
  const std::vector<int> counts{25, 7, 31, 10, 1};
  const Color base = loom::allocate_colors(unsigned(counts.size()) + 1);
  std::atomic<bool> open{false};
  std::atomic<long> ran{0};
  std::vector<std::pair<int, int>> order;  // (color, sequence) as run: one runner writes, main reads after `ran`
  loom::post(
      base,
      [&] {
        while (!open.load()) {
        }
      },
      &cl);
  long total = 0;
  for (int c = 0; c < int(counts.size()); ++c)
    for (int k = 0; k < counts[c]; ++k, ++total)
      loom::post(
          base + 1 + Color(c),
          [&, c, k] {
            order.emplace_back(c, k);
            ran.fetch_add(1);
          },
          &cl);
  open = true;
  ASSERT_TRUE(wait_for(ran, total));

  std::vector<std::pair<int, int>> want;
  std::vector<int> left(counts), next(counts.size(), 0);
  std::vector<int> turn;  // the runner's list: colors in the order they became ready
  for (int c = 0; c < int(counts.size()); ++c) turn.push_back(c);
  for (std::size_t i = 0; i < turn.size(); ++i) {
    int c = turn[i];
    for (unsigned k = 0; k < batch && left[c] > 0; ++k, --left[c]) want.emplace_back(c, next[c]++);
    if (left[c] > 0) turn.push_back(c);
  }
  EXPECT_EQ(order, want) << "batch " << batch;
}

INSTANTIATE_TEST_SUITE_P(Batch, ColorBatch, ::testing::Values(0u, 1u, 3u, 40u), [](const auto& info) {
  return info.param ? "batch_" + std::to_string(info.param) : std::string("default");
});

// ---- the penalty heuristic -------------------------------------------------------

// mely:penalty weighs a color's queued work divided by its handlers'
// penalties. Two colors wait behind a gate event on one processor P of
// two: A with 20 events, B with 1 to 10 (the rest are posted as the thief
// looks), of handlers the runtime believes equally costly. The idle
// processor takes A, unless A's handler has a penalty above 20 — given by
// the programmer (set_penalty, 100) or measured by the runtime (A's handler
// runs about 100 times slower right after its color moved) — and then B.
// White-box: the handlers' measured costs are set (loom::rt::HandlerStats)
// so that the estimates of both are equal and known.
enum class PenaltyFrom { nothing, programmer, measurement };

struct PenaltyRun {
  std::atomic<int> gate_proc{-1};
  std::atomic<int> first_stolen{-1};  // 0: A, 1: B
  std::atomic<int> a_last{-1};        // where A's handler last ran
  std::atomic<long> ran{0};
};

struct PenaltyEv {
  PenaltyRun* r;
  int which;
};

void penalty_ran(PenaltyEv& e) {
  int none = -1;
  if (loom::this_fibre::processor_index() != e.r->gate_proc.load())
    e.r->first_stolen.compare_exchange_strong(none, e.which);
  e.r->ran.fetch_add(1);
}

// A's handler: 20 us, and 2 ms on its first run on a processor (a cold cache).
void penalty_a(void* p) {
  std::unique_ptr<PenaltyEv> e(static_cast<PenaltyEv*>(p));
  int here = loom::this_fibre::processor_index();
  spin_for(std::chrono::microseconds(e->r->a_last.exchange(here) != here ? 2000 : 20));
  penalty_ran(*e);
}

void penalty_b(void* p) {
  std::unique_ptr<PenaltyEv> e(static_cast<PenaltyEv*>(p));
  spin_for(std::chrono::microseconds(20));
  penalty_ran(*e);
}

loom::rt::HandlerStats& stats_of(void (*fn)(void*)) {
  return *loom::rt::handler_stats(reinterpret_cast<loom::HandlerKey>(fn));
}

// On the processor of a gate event: all but one of A's events and B's
// first, the policy switched from none to mely:penalty (from then on every
// color is on the list), the rest (whose first post wakes the idle
// processor); then the gate holds its processor until an event ran on the
// other one.
void penalty_round(Cluster& cl, PenaltyRun& r, int a_events, int b_events) {
  Color c = loom::allocate_colors(3);
  r.gate_proc = -1;
  r.first_stolen = -1;
  long ran0 = r.ran.load();
  ASSERT_TRUE(loom::set_color_policy(cl, "none"));
  loom::post(
      c,
      [&] {
        r.gate_proc = loom::this_fibre::processor_index();
        for (int i = 1; i < a_events; ++i) loom::post(c + 1, &penalty_a, new PenaltyEv{&r, 0});
        if (b_events) loom::post(c + 2, &penalty_b, new PenaltyEv{&r, 1});
        EXPECT_TRUE(loom::set_color_policy(cl, "mely:penalty"));
        loom::post(c + 1, &penalty_a, new PenaltyEv{&r, 0});
        for (int i = 1; i < b_events; ++i) loom::post(c + 2, &penalty_b, new PenaltyEv{&r, 1});
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (r.first_stolen.load() < 0 && std::chrono::steady_clock::now() < end) {
        }
        r.ran.fetch_add(1);  // the next round resets first_stolen: not before this gate is done with it
      },
      &cl);
  ASSERT_TRUE(wait_for(r.ran, ran0 + 1 + a_events + b_events));
}

class ColorPenalty : public ::testing::TestWithParam<PenaltyFrom> {};

TEST_P(ColorPenalty, PenaltyDecidesWhichColorIsStolen) {
  const PenaltyFrom from = GetParam();
  Cluster cl(2, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_placement(cl, "local"));
  loom::rt::HandlerStats &a = stats_of(&penalty_a), &b = stats_of(&penalty_b);
  loom::set_penalty(&penalty_a, 0);
  PenaltyRun r;
  const std::uint64_t kCycles = 50000;  // about 20 us
  a.warm = kCycles;
  a.cold = 0;
  if (from == PenaltyFrom::measurement) {
    // A runs on the thief first, slowly: a cold sample 100 times the warm ones.
    // A loaded machine stretches the warm samples too (preempted spins: an
    // ASan run in CI measured 9.6): up to three rounds of it, the samples
    // smoothed together, A's first run on the thief slow again in each.
    a.warm = 0;
    for (int round = 0; round < 3; ++round) {
      r.a_last = -1;
      penalty_round(cl, r, 20, 0);
      ASSERT_EQ(r.first_stolen.load(), 0);
      if (a.penalty() > 20.0) break;
    }
    // B then needs one event queued to outweigh A's 20.
    ASSERT_GT(a.penalty(), 20.0) << "cold " << a.cold.load() << " warm " << a.warm.load();
  } else if (from == PenaltyFrom::programmer) {
    loom::set_penalty(&penalty_a, 100);
  }
  b.warm = a.warm.load();
  b.cold = 0;
  penalty_round(cl, r, 20, 10);
  loom::set_penalty(&penalty_a, 0);
  EXPECT_EQ(r.first_stolen.load(), from == PenaltyFrom::nothing ? 0 : 1)
      << "0: A (20 events), 1: B (10); A's penalty " << a.penalty();
}

INSTANTIATE_TEST_SUITE_P(Penalty, ColorPenalty,
                         ::testing::Values(PenaltyFrom::nothing, PenaltyFrom::programmer, PenaltyFrom::measurement),
                         [](const auto& info) {
                           return std::string(info.param == PenaltyFrom::nothing      ? "none"
                                              : info.param == PenaltyFrom::programmer ? "programmer"
                                                                                      : "measured");
                         });

// Issue 25, bug 1: a color runner that joins a fibre stays on its own
// processor. An event on processor 0's runner starts fibres (round robin:
// one lands on processor 1) and joins them while they sleep; the one that
// exits on processor 1 used to hand that processor to the parked runner,
// which then served processor 0's color core from processor 1's kernel
// thread and queued the next colored fibre on processor 0 unwoken (it
// stalled while processor 0 slept). Deterministic: the runner reports
// where it runs after each join.
struct JoinRound {
  std::atomic<int> runner_moved{0};
  std::atomic<int> children_on_1{0};
  std::atomic<long> colored_ran{0};
  std::atomic<long> events_done{0};
  // The colored fibres, joined before the cluster goes: one that counted
  // itself may not have exited yet (make chaos, seed 3: "cluster destroyed
  // while it still holds 1 fibre").
  std::mutex m;
  std::vector<loom::Fibre> colored;
};

TEST(Colors, RunnerThatJoinsAFibreStaysOnItsProcessor) {
  Cluster cl(2, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, "none"));  // colors stay where hashed
  // Hash placement: (c * odd) % 2 keeps c's parity, so even colors are
  // processor 0's.
  constexpr Color kEvent = 2, kColored = 4;
  JoinRound r;
  const long kRounds = 10;
  for (long round = 0; round < kRounds; ++round) {
    loom::post(
        kEvent,
        [&r] {
          EXPECT_EQ(loom::this_fibre::processor_index(), 0);
          std::vector<loom::Fibre> kids;
          for (int i = 0; i < 2; ++i)
            kids.emplace_back([&r, i] {
              loom::this_fibre::sleep_for(std::chrono::milliseconds(5 * (i + 1)));  // the runner parks in join first
              if (loom::this_fibre::processor_index() == 1) r.children_on_1.fetch_add(1);
            });
          for (auto& k : kids) {
            k.join();
            if (loom::this_fibre::processor_index() != 0) r.runner_moved.fetch_add(1);
          }
          // A colored fibre of a color of processor 0: the runner starts it
          // after this event, from its own processor.
          loom::FibreAttr a;
          a.color = kColored;
          loom::Fibre f(a, [&r] { r.colored_ran.fetch_add(1); });
          {
            std::lock_guard<std::mutex> g(r.m);
            r.colored.push_back(std::move(f));
          }
          r.events_done.fetch_add(1);
        },
        &cl);
    ASSERT_TRUE(wait_for(r.events_done, round + 1));
    ASSERT_TRUE(wait_for(r.colored_ran, round + 1, std::chrono::seconds(5)))
        << "round " << round << ": the colored fibre stalled";
  }
  for (auto& f : r.colored) f.join();
  EXPECT_GT(r.children_on_1.load(), 0) << "no child ran on processor 1: the test did not test";
  EXPECT_EQ(r.runner_moved.load(), 0) << "the runner moved to another processor after a join";
}

// ---- issue 22: pools, and what a thief decides from ------------------------------

// A color's queue and items come from the pool of the processor that made
// them and go back there, also when a thief ran (and freed) the color: the
// queues processor `home` made and the other stole wait on home's remote
// list (the thief keeps none: its pool would grow while home's drained). A
// second wave on the same color numbers then runs on recycled queues and
// items, with FIFO and exclusion kept while colors move.
TEST(Colors, StolenQueuesGoHomeAndRecycledQueuesKeepOrderAndExclusion) {
  Cluster cl(2, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, "mely:base"));
  ASSERT_TRUE(loom::set_color_placement(cl, "local"));
  loom::rt::ColorLayer& layer = loom::rt::color_layer(cl.impl());
  std::atomic<long> n{0}, on1{0};
  std::atomic<int> home{-1};
  const long kColors = 40;
  const loom::ColorStats st0 = loom::color_stats(cl);
  {
    loom::Fibre holder(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
      home = loom::this_fibre::processor_index();
      for (long i = 0; i < kColors; ++i) loom::post(Color(7000 + i), Dear{&n, &on1});
      // Its processor's runner waits behind this fibre: the other steals.
      auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (loom::color_stats(cl).colors_stolen == st0.colors_stolen && std::chrono::steady_clock::now() < end) {
      }
    });
  }
  ASSERT_TRUE(wait_for(n, kColors));
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (loom::color_stats(cl).colors_live != 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const loom::ColorStats st1 = loom::color_stats(cl);
  ASSERT_GT(st1.colors_stolen, st0.colors_stolen) << "nothing was stolen: the test did not test";
  EXPECT_EQ(st1.colors_live, 0u);
  loom::rt::ColorCore* h = layer.core_if_made(unsigned(home.load()));
  loom::rt::ColorCore* thief = layer.core_if_made(unsigned(1 - home.load()));
  ASSERT_NE(h, nullptr);
  ASSERT_NE(thief, nullptr);
  EXPECT_GT(thief->freed.load(), 0u) << "the thief freed no stolen queue";
  EXPECT_NE(h->queues.remote.load(), nullptr) << "stolen queues did not go back to their home pool";
  EXPECT_NE(h->item_pool.remote.load(), nullptr) << "stolen items did not go back to their home pool";
  EXPECT_EQ(thief->queues.remote.load(), nullptr);

  // Wave 2: the same colors again, from a fibre (local placement) and a
  // kernel thread (hashed), each with its own colors, in order.
  const unsigned kWave = 8;
  const long per = std::max(1000L, scaled(40000)) / 2;
  Checker ck(2 * kWave, 2 * per);
  auto poster = [&](unsigned p) {
    std::vector<long> seq(kWave, 0);
    for (long i = 0; i < per; ++i) {
      unsigned color = unsigned(i % kWave);
      post_exclusive(ck, Color(7000 + p * kWave + color), p * kWave + color, p * per + i, seq[color]++,
                     i % 97 == 0 ? &run_dear_event : &run_event, &cl);
      if (i % 512 == 0) loom::this_fibre::yield();
    }
  };
  {
    loom::FibreAttr a;
    a.cluster = &cl;
    loom::Fibre local(a, poster, 0u);
    std::thread outside(poster, 1u);
    outside.join();
  }
  ASSERT_TRUE(wait_for(ck.done, 2 * per));
  EXPECT_EQ(ck.violations.load(), 0);
  EXPECT_EQ(ck.out_of_order.load(), 0);
  long twice = 0;
  for (auto& r : ck.runs) twice += r.load() != 1;
  EXPECT_EQ(twice, 0);
}

// time-left publishes what a thief may take: a core's stealing queue holds
// exactly its listed colors worth a steal, so that a thief that finds its
// count at zero need not lock the core. White-box, one processor (no
// thief): the handlers' costs are set, the runner is held behind the
// posting fibre.
void cheap_handler(void* p) { static_cast<std::atomic<long>*>(p)->fetch_add(1); }
void dear_handler(void* p) { static_cast<std::atomic<long>*>(p)->fetch_add(1); }

TEST(Colors, TimeLeftPublishesOnlyColorsWorthASteal) {
  Cluster cl(1, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, "mely:time-left"));
  loom::rt::ColorLayer& layer = loom::rt::color_layer(cl.impl());
  loom::rt::HandlerStats &cheap = stats_of(&cheap_handler), &dear = stats_of(&dear_handler);
  std::atomic<long> ran{0};
  const std::uint64_t cost = layer.steal_cost();
  std::uint32_t listed = 0, worthy_cheap = 0, worthy_dear = 0, worthy_grown = 0;
  bool stealable_cheap = true, stealable_dear = false;
  Color c = loom::allocate_colors(12);
  loom::Fibre poster(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
    cheap.warm = cost / 4;
    cheap.cold = 0;
    dear.warm = cost * 100;
    dear.cold = 0;
    for (int i = 0; i < 10; ++i) loom::post(c + i, &cheap_handler, &ran);
    loom::rt::ColorCore* core = layer.core_if_made(0);
    listed = core->listed.load();
    worthy_cheap = core->worthy.load();
    stealable_cheap = loom::rt::color_layer(cl.impl()).steal_cost() > 0 && core->worthy.load() > 0;
    loom::post(c + 10, &dear_handler, &ran);
    worthy_dear = core->worthy.load();
    stealable_dear = core->worthy.load() > 0;
    // A cheap color grows worth a steal as its work queues up.
    for (int i = 0; i < 8; ++i) loom::post(c + 11, &cheap_handler, &ran);
    worthy_grown = core->worthy.load();
  });
  poster.join();
  ASSERT_TRUE(wait_for(ran, 19));
  EXPECT_EQ(listed, 10u);
  EXPECT_EQ(worthy_cheap, 0u);
  EXPECT_FALSE(stealable_cheap);
  EXPECT_EQ(worthy_dear, 1u);
  EXPECT_TRUE(stealable_dear);
  EXPECT_EQ(worthy_grown, 2u);
  loom::HandlerTimes t = loom::handler_times(&dear_handler);
  EXPECT_GT(t.warm_cycles, 0u);
  EXPECT_GE(t.penalty, 1.0);
}

// Steals must pay (issue 22). Under a policy that cannot weigh a color
// (mely:base), an idle processor that steals one-event colors of no work
// from a busy one loses on every steal: what a steal moved is far below
// what it cost the thief. The cluster's share of steals that paid falls
// under half and its thieves are paused (their looks held); every event
// still runs exactly once. Then colors worth a steal come: the paused
// thieves' probes pay and they steal again (no stuck state: time-left's
// steal cost once rose above every color's work and never sampled again).
// Fails without the pauses: no look is ever held.
TEST(Colors, StealsThatDoNotPayPauseTheThievesUntilStealsPayAgain) {
  Cluster cl(2, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, "mely:base"));
  ASSERT_TRUE(loom::set_color_placement(cl, "local"));
  std::atomic<long> n{0}, on1{0};
  long posted = 0;
  const long kWave = std::max(200L, scaled(5000));
  loom::StealPayoff pay = loom::steal_payoff(cl);
  EXPECT_EQ(pay.looks_held, 0u);
  EXPECT_FALSE(pay.paused);
  // Waves of cheap colors posted by a fibre that then keeps its processor
  // busy (its runner waits behind it: the other processor steals), until
  // thieves were held back; bounded.
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  Color base = loom::allocate_colors(std::uint32_t(kWave * 200));
  for (int wave = 0; wave < 200 && std::chrono::steady_clock::now() < end; ++wave) {
    loom::Fibre holder(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
      for (long i = 0; i < kWave; ++i) loom::post(base + Color(wave * kWave + i), Cheap{&n, &on1});
      spin_for(std::chrono::milliseconds(5));
    });
    holder.join();
    posted += kWave;
    ASSERT_TRUE(wait_for(n, posted));
    pay = loom::steal_payoff(cl);
    if (pay.looks_held > 0 && pay.paid_share < 0.5) break;
  }
  const loom::ColorStats st = loom::color_stats(cl);
  EXPECT_GT(st.colors_stolen, 0u) << "nothing was stolen: the test did not test";
  EXPECT_LT(pay.paid_share, 0.5) << "stealing colors of no work paid (payoff " << pay.payoff_cycles << " cycles)";
  EXPECT_GT(pay.looks_held, 0u) << "thieves were never paused after " << st.colors_stolen << " steals that lost";
  EXPECT_EQ(n.load(), posted);

  // Colors worth a steal: a paused thief probes, the probes pay, it steals.
  const std::uint64_t stolen0 = loom::color_stats(cl).colors_stolen;
  const long kDear = 40;
  long dear_posted = 0;
  Color dear = loom::allocate_colors(std::uint32_t(kDear * 50));
  for (int wave = 0; wave < 50 && std::chrono::steady_clock::now() < end; ++wave) {
    loom::Fibre holder(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
      for (long i = 0; i < kDear; ++i) loom::post(dear + Color(wave * kDear + i), Dear{&n, &on1});
      spin_for(std::chrono::milliseconds(30));
    });
    holder.join();
    dear_posted += kDear;
    ASSERT_TRUE(wait_for(n, posted + dear_posted));
    if (loom::steal_payoff(cl).paid_share >= 0.5) break;
  }
  pay = loom::steal_payoff(cl);
  EXPECT_GT(loom::color_stats(cl).colors_stolen, stolen0) << "no color worth a steal was stolen";
  EXPECT_GE(pay.paid_share, 0.5) << "steals of dear colors did not pay (payoff " << pay.payoff_cycles << ")";
  EXPECT_FALSE(pay.paused);
}

// A runner queued behind a busy fibre wakes no thief: it is pinned, no thief
// may take it. A thief woken for it took it from the queue, gave it back,
// and so woke itself (wake_one found it on the idle list in its last look):
// it never slept while the runner waited (a third of a processor in the
// unbalanced benchmark; 1.5 M looks held in 2 s under mely:base).
TEST(Colors, ARunnerQueuedBehindABusyFibreWakesNoThief) {
  Cluster cl(2, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, "none"));
  std::atomic<int> where{-1};
  std::atomic<bool> stop{false};
  std::atomic<long> ran{0};
  loom::Fibre busy(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
    where.store(int(loom::rt::this_processor()->index()));
    while (!stop.load()) {
    }
  });
  while (where.load() < 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const unsigned other = 1 - unsigned(where.load());
  const std::uint64_t wakes = cl.processor_stats(other).wakes;
  // Even colors are placed on processor 0, odd ones on 1 (hash placement):
  // the color's runner is the busy fibre's processor's, queued behind it.
  loom::post(Color(2 + where.load()), [&] { ran.fetch_add(1); }, &cl);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::uint64_t woken = cl.processor_stats(other).wakes - wakes;
  stop.store(true);
  busy.join();
  ASSERT_TRUE(wait_for(ran, 1));
  EXPECT_LE(woken, 2u) << "the other processor was woken " << woken << " times in 50 ms for a runner it may not take";
}

// ... but its colors may be stolen, and a thief is woken for them. A runner
// that was parked, scheduled for a color worth a steal behind a fibre that
// spins until the event ran (as redis's main thread waits for its I/O
// threads): the other processor, asleep, must be woken to steal the color.
// 3cbab0e's runner push woke no thief, and the color layer woke one only
// for a runner already busy: the event waited for ever (the busy fibre's
// 5 s). Posted by the spinning fibre itself (a local push) and by a kernel
// thread (a remote one).
struct Heavy {
  std::atomic<long> ran{0};
};

void heavy_event(void* arg) {
  spin_for(std::chrono::microseconds(200));
  static_cast<Heavy*>(arg)->ran.fetch_add(1);
}

class ParkedRunnerBehindABusyFibre : public ::testing::TestWithParam<bool> {};

TEST_P(ParkedRunnerBehindABusyFibre, ItsColorWorthASteal) {
  const bool from_busy = GetParam();
  Cluster cl(2, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, "mely"));  // time-left: one color of 200 µs is worth a steal
  // Both runners made and parked; the handler measured (a default estimate
  // is not worth a steal).
  Heavy warm, h;
  for (int i = 0; i < 8; ++i)
    for (Color c : {Color(2), Color(3)}) loom::post(c, &heavy_event, &warm, &cl);
  ASSERT_TRUE(wait_for(warm.ran, 16));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::atomic<int> where{-1};
  std::atomic<bool> stolen{false};
  // A color of p's core (hash placement keeps a color's parity).
  auto post_one = [&](int p) { loom::post(Color(4 + p), &heavy_event, &h, &cl); };
  loom::Fibre busy(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
    const int here = int(loom::rt::this_processor()->index());
    if (from_busy) post_one(here);
    where.store(here);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (h.ran.load() == 0 && std::chrono::steady_clock::now() < end) {
    }
    stolen.store(h.ran.load() > 0);
  });
  while (where.load() < 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!from_busy) post_one(where.load());
  busy.join();
  EXPECT_TRUE(stolen.load()) << "the color of the runner queued behind the busy fibre was not stolen in 5 s";
  ASSERT_TRUE(wait_for(h.ran, 1));
}

INSTANTIATE_TEST_SUITE_P(Colors, ParkedRunnerBehindABusyFibre, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "PostedByTheBusyFibre" : "PostedFromAKernelThread");
                         });

// A fibre queued behind a busy fibre is stolen also when a runner, queued on
// the same processor at a higher priority, is what a thief takes first: a
// steal takes half the queue from its highest priority, here the runner
// alone, which goes back to its owner; the thief must look again. Before,
// every steal took the runner and gave it back, for ever (before 3cbab0e
// the thief spun so; since, it sleeps), and the low-priority fibre waited
// behind the busy one while the other processor slept.
TEST(Colors, AFibreQueuedBehindARunnerOfHigherPriorityIsStolen) {
  Cluster cl(2, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, "none"));
  std::atomic<long> warm{0}, ran{0}, low_ran{0};
  for (Color c : {Color(2), Color(3)}) loom::post(c, [&] { warm.fetch_add(1); }, &cl);
  ASSERT_TRUE(wait_for(warm, 2));
  std::atomic<bool> all{false};
  loom::Fibre busy(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
    const int here = loom::this_fibre::processor_index();
    loom::post(Color(2 + here), [&] { ran.fetch_add(1); }, &cl);  // its runner: queued here
    // Placed round robin from here: one of the two is queued here, behind
    // the runner (the other runs on the other processor).
    std::vector<loom::Fibre> low;
    for (int i = 0; i < 2; ++i)
      low.emplace_back(loom::FibreAttr{0, loom::Priority::low, &cl}, [&] { low_ran.fetch_add(1); });
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (low_ran.load() < 2 && std::chrono::steady_clock::now() < end) {
    }
    all.store(low_ran.load() == 2);
    for (auto& f : low) f.detach();
  });
  busy.join();
  EXPECT_TRUE(all.load()) << "a low-priority fibre waited 5 s behind a busy fibre and a runner";
  ASSERT_TRUE(wait_for(low_ran, 2));
  ASSERT_TRUE(wait_for(ran, 1));
}

// A color released behind a busy runner gets a thief, as a post there does.
// A colored fibre F holds color c while an event E of c is posted (c is
// held: on no list, nobody woken); processor 0's runner is blocked in an
// event of color d until E ran; F exits. Its release links c behind the
// blocked runner, and the other processor, asleep, must be woken to steal
// c: it was not, and E waited (here until the test's 5 s ran out; for
// ever in a program whose event waits for E).
TEST(Colors, AColorReleasedBehindABusyRunnerIsStolen) {
  Cluster cl(2, loom::SchedConfig{});
  ASSERT_TRUE(loom::set_color_policy(cl, "mely"));
  constexpr Color c = 2, d = 4;  // both processor 0's (hash placement keeps the parity)
  Heavy warm, e;
  for (int i = 0; i < 8; ++i) loom::post(c, &heavy_event, &warm, &cl);  // E's handler measured: worth a steal
  ASSERT_TRUE(wait_for(warm.ran, 8));
  std::atomic<bool> holding{false}, in_l{false};
  loom::Semaphore go, done;  // posted by this kernel thread: no timer makes a processor look
  loom::Fibre joiner(loom::FibreAttr{0, loom::Priority::normal, &cl}, [&] {
    loom::FibreAttr a;
    a.cluster = &cl;
    a.color = c;
    loom::Fibre f(a, [&] {
      holding.store(true);
      go.acquire();
    });
    f.join();
  });
  while (!holding.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Dispatched after F: the runner blocks in it, holding d.
  loom::post(d, [&] {
    in_l.store(true);
    done.acquire();
  }, &cl);
  while (!in_l.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  loom::post(c, &heavy_event, &e, &cl);
  go.release();
  const bool stolen = wait_for(e.ran, 1, std::chrono::seconds(5));
  done.release();
  joiner.join();
  EXPECT_TRUE(stolen) << "E waited 5 s behind processor 0's blocked runner with the other processor asleep";
  ASSERT_TRUE(wait_for(e.ran, 1));
}

TEST(Colors, PolicyNamesAndBadInput) {
  Cluster cl(1, loom::SchedConfig{});
  for (const char* ok : {"none", "libasync-smp", "mely", "mely:base", "mely:locality,time-left", "mely:penalty"}) {
    EXPECT_TRUE(loom::set_color_policy(cl, ok)) << ok;
    EXPECT_EQ(loom::color_policy(cl), ok);
  }
  for (const char* bad : {"", "mely:", "mely:speed", "libasync", "MELY", "mely:base,locality,"}) {
    EXPECT_FALSE(loom::set_color_policy(cl, bad)) << bad;
    EXPECT_EQ(loom::color_policy(cl), "mely:penalty");
  }
  EXPECT_FALSE(loom::set_color_placement(cl, "round-robin"));
  Color a = loom::allocate_colors(10), b = loom::allocate_colors(5);
  EXPECT_GE(b, a + 10);
  EXPECT_THROW(loom::allocate_colors(0), std::invalid_argument);
}

}  // namespace
