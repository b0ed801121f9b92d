// micro_boostfiber — Boost.Fiber (Debian's 1.74) as users get it: the
// default round_robin scheduler on the main thread, the default stack
// allocator (fixedsize_stack, Boost's default size — recorded in the output).
//
//   yield        two fibers each call boost::this_fiber::yield() n times while
//                main waits in join(); ns per yield = time / 2n.
//   create_join  boost::fibers::fiber with an empty lambda, then join().
//   mutex_handoff  two fibers pass a turn back and forth through a
//                boost::fibers::mutex and condition_variable; ns per handoff
//                (one wait + notify_one), time / 2n.
//   sem_pingpong two fibers ping-pong through two semaphores. Boost.Fiber has
//                no semaphore: each is a counter guarded by a
//                boost::fibers::mutex with a condition_variable (the usual
//                way to write one there); ns per one-way pass, time / 2n.
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

// A turn passed between two fibers: each waits for its turn, gives the turn
// to the other and notifies it.
double mutex_handoff(std::uint64_t n) {
  boost::fibers::mutex m;
  boost::fibers::condition_variable cv;
  int turn = 0;
  auto player = [&, n](int me) {
    for (std::uint64_t i = 0; i < n; ++i) {
      std::unique_lock<boost::fibers::mutex> lk(m);
      cv.wait(lk, [&] { return turn == me; });
      turn = 1 - me;
      cv.notify_one();
    }
  };
  std::uint64_t t0 = bench::now_ns();
  boost::fibers::fiber a(player, 0), b(player, 1);
  a.join();
  b.join();
  return double(bench::now_ns() - t0) / 2;  // per handoff: 2n handoffs
}

// Boost.Fiber's missing counting semaphore, as it is usually written.
class Semaphore {
 public:
  void release() {
    {
      std::lock_guard<boost::fibers::mutex> lk(m_);
      ++count_;
    }
    cv_.notify_one();
  }
  void acquire() {
    std::unique_lock<boost::fibers::mutex> lk(m_);
    cv_.wait(lk, [this] { return count_ > 0; });
    --count_;
  }

 private:
  boost::fibers::mutex m_;
  boost::fibers::condition_variable cv_;
  std::uint64_t count_ = 0;
};

double sem_pingpong(std::uint64_t n) {
  Semaphore ping, pong;
  std::uint64_t t0 = bench::now_ns();
  boost::fibers::fiber a([&, n] {
    for (std::uint64_t i = 0; i < n; ++i) {
      ping.release();
      pong.acquire();
    }
  });
  boost::fibers::fiber b([&, n] {
    for (std::uint64_t i = 0; i < n; ++i) {
      ping.acquire();
      pong.release();
    }
  });
  a.join();
  b.join();
  return double(bench::now_ns() - t0) / 2;  // per one-way pass: 2n passes
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<bench::RowInfo> rows = {
      {"yield", "two fibers on one thread ping-ponging with this_fiber::yield(); ns per yield"},
      {"create_join", "create a fiber with an empty lambda and join it; ns per pair"},
      {"mutex_handoff", "two fibers passing a turn through a fibers::mutex + condition_variable; ns per handoff"},
      {"sem_pingpong", "two fibers ping-ponging through two mutex+condvar counting semaphores; ns per pass"},
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
  if (o.wants("mutex_handoff")) {
    bench::Measurement m = bench::measure(o, mutex_handoff);
    bench::micro_row("mutex_handoff", "boost.fiber", "", m, "fibers::mutex+condition_variable handoff").print();
  }
  if (o.wants("sem_pingpong")) {
    bench::Measurement m = bench::measure(o, sem_pingpong);
    bench::micro_row("sem_pingpong", "boost.fiber", "", m, "semaphore pass (mutex+condvar counter)")
        .add("semaphore", "count + boost::fibers::mutex + condition_variable (Boost.Fiber has none)")
        .print();
  }
  return 0;
}
