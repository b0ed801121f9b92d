// micro_boostfiber — Boost.Fiber (Debian's 1.74) as users get it: the
// default round_robin scheduler on the main thread, the default stack
// allocator (fixedsize_stack, Boost's default size — recorded in the output).
//
//   yield        two fibers each call boost::this_fiber::yield() n times while
//                main waits in join(); ns per yield = time / 2n.
//   create_join  boost::fibers::fiber with an empty lambda, then join().
#include <boost/context/stack_traits.hpp>
#include <boost/fiber/all.hpp>

#include "harness.hpp"

namespace {

double yield_pair(std::uint64_t n) {
  auto loop = [n] {
    for (std::uint64_t i = 0; i < n; ++i) boost::this_fiber::yield();
  };
  std::uint64_t t0 = bench::now_ns();
  boost::fibers::fiber a(loop), b(loop);
  a.join();
  b.join();
  return double(bench::now_ns() - t0) / 2;  // per yield: 2n yields
}

double create_join(std::uint64_t n) {
  std::uint64_t t0 = bench::now_ns();
  for (std::uint64_t i = 0; i < n; ++i) {
    boost::fibers::fiber f([] {});
    f.join();
  }
  return double(bench::now_ns() - t0);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<bench::RowInfo> rows = {
      {"yield", "two fibers on one thread ping-ponging with this_fiber::yield(); ns per yield"},
      {"create_join", "create a fiber with an empty lambda and join it; ns per pair"},
  };
  bench::Options o = bench::parse_micro("micro_boostfiber", "Boost.Fiber (round_robin, one thread)", argc, argv, rows);
  const std::uint64_t stack = boost::context::stack_traits::default_size();
  if (o.wants("yield")) {
    bench::Measurement m = bench::measure(o, yield_pair);
    bench::micro_row("yield", "boost.fiber", "", m, "this_fiber::yield").add("stack_bytes", stack).print();
  }
  if (o.wants("create_join")) {
    bench::Measurement m = bench::measure(o, create_join);
    bench::micro_row("create_join", "boost.fiber", "", m, "fiber+join").add("stack_bytes", stack).print();
  }
  return 0;
}
