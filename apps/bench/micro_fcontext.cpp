// micro_fcontext — the floor under every fibre switch: Boost.Context's raw
// jump_fcontext, with no scheduler, no queue and no bookkeeping.
//
// Row `yield` (system "fcontext"): one round trip = jump from the main
// context to a second context and back = two jumps. loom's yield is one
// switch plus the queue work, so the goal "loom yield <= 2 x this"
// allows a yield the price of about four bare jumps.
#include <sys/mman.h>

#include <boost/context/detail/fcontext.hpp>
#include <cstdio>
#include <cstdlib>

#include "harness.hpp"

namespace ctx = boost::context::detail;

namespace {

// The second context: forever hand control straight back to whoever jumped in.
[[noreturn]] void bounce(ctx::transfer_t t) {
  for (;;) t = ctx::jump_fcontext(t.fctx, nullptr);
}

constexpr std::size_t kStack = 64 * 1024;  // loom's default stack size

}  // namespace

int main(int argc, char** argv) {
  const std::vector<bench::RowInfo> rows = {
      {"yield", "jump_fcontext to a context that jumps straight back; ns per round trip (2 jumps)"},
  };
  bench::Options o = bench::parse_micro("micro_fcontext", "Boost.Context's raw jump_fcontext", argc, argv, rows);

  void* stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (stack == MAP_FAILED) {
    std::perror("micro_fcontext: mmap of the stack");
    return 1;
  }
  ctx::fcontext_t other = ctx::make_fcontext(static_cast<char*>(stack) + kStack, kStack, bounce);

  if (o.wants("yield")) {
    bench::Measurement m = bench::measure(o, [&](std::uint64_t n) {
      std::uint64_t t0 = bench::now_ns();
      for (std::uint64_t i = 0; i < n; ++i) other = ctx::jump_fcontext(other, nullptr).fctx;
      return double(bench::now_ns() - t0);
    });
    bench::micro_row("yield", "fcontext", "", m, "round trip (2 jumps)")
        .add("stack_bytes", std::uint64_t(kStack))
        .print();
  }
  // The bounce context is abandoned, never finished: nothing on its stack
  // needs unwinding.
  munmap(stack, kStack);
  return 0;
}
