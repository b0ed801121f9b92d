// chan_loom — loom::Channel<T> (loom/channel.hpp) against its peers
// (chan_boostfiber, apps/baselines/chanbench-go; scripts/bench chan).
// Same rows, same shapes, one processor each (loom::Cluster(1); Boost.Fiber
// on one thread; Go with GOMAXPROCS=1), pinned to one CPU by the driver:
//
//   chan_pingpong    two fibres pass an int back and forth through two
//                    channels holding one value each; ns per one-way
//                    message = time / 2n.
//   chan_rendezvous  the same through two unbuffered channels (capacity 0:
//                    Go's make(chan int), Boost's unbuffered_channel).
//   chan_fanin       four producers push n/4 ints each into one channel of
//                    capacity 64, one consumer pops them all; ns per
//                    message = time / n.
#include <vector>

#include "harness.hpp"
#include "loom/loom.hpp"
#include "loom_variant.hpp"

namespace {

constexpr int kProducers = 4;
constexpr std::size_t kFanInCapacity = 64;

template <typename F>
double in_fibre(loom::Cluster& c, F timed) {
  loom::FibreAttr attr;
  attr.cluster = &c;
  double ns = 0;
  loom::Fibre f(attr, [&ns, &timed] { ns = timed(); });
  f.join();
  return ns;
}

double pingpong(loom::Cluster& c, std::uint64_t n, std::size_t capacity) {
  return in_fibre(c, [n, capacity] {
    loom::Channel<int> ping(capacity), pong(capacity);
    std::uint64_t t0 = bench::now_ns();
    loom::Fibre a([&, n] {
      int v = 0;
      for (std::uint64_t i = 0; i < n; ++i) {
        ping.push(v);
        pong.pop(v);
      }
    });
    loom::Fibre b([&, n] {
      int v = 0;
      for (std::uint64_t i = 0; i < n; ++i) {
        ping.pop(v);
        pong.push(v + 1);
      }
    });
    a.join();
    b.join();
    return double(bench::now_ns() - t0) / 2;
  });
}

double fanin(loom::Cluster& c, std::uint64_t n) {
  return in_fibre(c, [n] {
    loom::Channel<int> ch(kFanInCapacity);
    const std::uint64_t per = (n + kProducers - 1) / kProducers;
    std::uint64_t t0 = bench::now_ns();
    std::vector<loom::Fibre> ps;
    for (int p = 0; p < kProducers; ++p)
      ps.emplace_back([&ch, per] {
        for (std::uint64_t i = 0; i < per; ++i) ch.push(int(i));
      });
    long sum = 0;
    int v = 0;
    for (std::uint64_t i = 0; i < per * kProducers; ++i) {
      ch.pop(v);
      sum += v;
    }
    for (auto& f : ps) f.join();
    asm volatile("" : : "r"(sum));
    return double(bench::now_ns() - t0) * double(n) / double(per * kProducers);
  });
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<bench::RowInfo> rows = {
      {"chan_pingpong", "two fibres, two Channel<int>(1), passing a value back and forth; ns per message"},
      {"chan_rendezvous", "the same through two unbuffered Channel<int>(0); ns per message"},
      {"chan_fanin", "4 producer fibres into one Channel<int>(64), one consumer; ns per message"},
  };
  bench::Options o = bench::parse_micro("chan_loom", "loom", argc, argv, rows);
  const loom::SchedConfig config = loom::SchedConfig::from_env();
  const std::string variant = bench::loom_variant(config);
  loom::Cluster c(1, config);
  if (o.wants("chan_pingpong")) {
    bench::Measurement m = bench::measure(o, [&c](std::uint64_t n) { return pingpong(c, n, 1); });
    bench::micro_row("chan_pingpong", "loom", variant, m, "Channel<int>(1) push+pop").add("processors", 1u).print();
  }
  if (o.wants("chan_rendezvous")) {
    bench::Measurement m = bench::measure(o, [&c](std::uint64_t n) { return pingpong(c, n, 0); });
    bench::micro_row("chan_rendezvous", "loom", variant, m, "Channel<int>(0) push+pop").add("processors", 1u).print();
  }
  if (o.wants("chan_fanin")) {
    bench::Measurement m = bench::measure(o, [&c](std::uint64_t n) { return fanin(c, n); });
    bench::micro_row("chan_fanin", "loom", variant, m, "Channel<int>(64), 4 producers").add("processors", 1u).print();
  }
}
