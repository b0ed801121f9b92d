// chan_boostfiber — Boost.Fiber's channels, the peer of chan_loom (its header
// says the rows). Debian's 1.74, the default round_robin scheduler on the
// main thread. A buffered_channel's capacity must be a power of two and it
// holds one less than that: capacity 2 holds the one value of loom's
// Channel<int>(1) and Go's make(chan int, 1); 64 holds 63 for the fan-in
// (loom and Go: 64; the difference is within one message in 64).
#include <boost/fiber/all.hpp>
#include <vector>

#include "harness.hpp"

namespace {

constexpr int kProducers = 4;

template <class Chan>
double pingpong(std::uint64_t n, Chan& ping, Chan& pong) {
  std::uint64_t t0 = bench::now_ns();
  boost::fibers::fiber a([&, n] {
    int v = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      ping.push(v);
      pong.pop(v);
    }
  });
  boost::fibers::fiber b([&, n] {
    int v = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      ping.pop(v);
      pong.push(v + 1);
    }
  });
  a.join();
  b.join();
  return double(bench::now_ns() - t0) / 2;
}

double buffered_pingpong(std::uint64_t n) {
  boost::fibers::buffered_channel<int> ping(2), pong(2);
  return pingpong(n, ping, pong);
}

double unbuffered_pingpong(std::uint64_t n) {
  boost::fibers::unbuffered_channel<int> ping, pong;
  return pingpong(n, ping, pong);
}

double fanin(std::uint64_t n) {
  boost::fibers::buffered_channel<int> ch(64);
  const std::uint64_t per = (n + kProducers - 1) / kProducers;
  std::uint64_t t0 = bench::now_ns();
  std::vector<boost::fibers::fiber> ps;
  for (int p = 0; p < kProducers; ++p)
    ps.emplace_back([&ch, per] {
      for (std::uint64_t i = 0; i < per; ++i) ch.push(int(i));
    });
  long sum = 0;
  int v;
  for (std::uint64_t i = 0; i < per * kProducers; ++i) {
    ch.pop(v);
    sum += v;
  }
  for (auto& f : ps) f.join();
  asm volatile("" : : "r"(sum));
  return double(bench::now_ns() - t0) * double(n) / double(per * kProducers);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<bench::RowInfo> rows = {
      {"chan_pingpong", "two fibers, two buffered_channel<int>(2), passing a value back and forth; ns per message"},
      {"chan_rendezvous", "the same through two unbuffered_channel<int>; ns per message"},
      {"chan_fanin", "4 producer fibers into one buffered_channel<int>(64), one consumer; ns per message"},
  };
  bench::Options o = bench::parse_micro("chan_boostfiber", "Boost.Fiber (round_robin, one thread)", argc, argv, rows);
  if (o.wants("chan_pingpong")) {
    bench::Measurement m = bench::measure(o, buffered_pingpong);
    bench::micro_row("chan_pingpong", "boost.fiber", "", m, "buffered_channel<int>(2) push+pop").print();
  }
  if (o.wants("chan_rendezvous")) {
    bench::Measurement m = bench::measure(o, unbuffered_pingpong);
    bench::micro_row("chan_rendezvous", "boost.fiber", "", m, "unbuffered_channel<int> push+pop").print();
  }
  if (o.wants("chan_fanin")) {
    bench::Measurement m = bench::measure(o, fanin);
    bench::micro_row("chan_fanin", "boost.fiber", "", m, "buffered_channel<int>(64), 4 producers").print();
  }
}
