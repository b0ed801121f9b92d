// micro_loom — loom's micro rows, measured the same way as the peers
// (micro_boostfiber, micro_pthread, micro_fcontext; see harness.hpp).
//
// One processor for yield and create_join: each row makes its own
// loom::Cluster(1) and runs the timed loop inside a fibre on it. That is
// chosen over LOOM_PROCESSORS=1 because it does not depend on the
// environment or on the affinity mask the default cluster is sized from, and
// it keeps main's processor out of the measurement (main only waits in
// join(), asleep). The cluster still takes its SchedConfig from LOOM_*
// variables, and a non-default one is named in the row's `variant`.
//
//   yield        two fibres on that processor each call this_fibre::yield()
//                n times while the timing fibre waits in join(); ns per
//                yield = time / 2n (the same shape as the Boost.Fiber and
//                pthread rows).
//   create_join  loom::Fibre with an empty lambda, then join(); ns per pair.
//   migrate      two clusters of 1 processor each; a fibre does
//                migrate(b); migrate(a) n times; ns per round trip. Under
//                scripts/bench both processors share CPU 1, so a round trip
//                includes the kernel switches between the two processors'
//                threads (each one sleeps when its fibre leaves).
//
//   mutex_handoff  two fibres on that processor pass a turn back and forth
//                through a loom::Mutex (default policy) and a loom::CondVar:
//                each waits for its turn, gives it to the other and calls
//                notify_one(); ns per handoff = time / 2n. Peers: the same
//                with boost::fibers::mutex + condition_variable, and with
//                pthread_mutex_t + pthread_cond_t on two pinned threads.
//   sem_pingpong two fibres on that processor ping-pong through two
//                loom::Semaphore (release one, acquire the other); ns per
//                one-way pass = time / 2n. Peers: Boost.Fiber has no
//                semaphore, so a mutex + condvar counter; pthreads: sem_t.
#include <cstdio>
#include <cstdlib>

#include "harness.hpp"
#include "loom/loom.hpp"
#include "loom_variant.hpp"

namespace {

// Runs `timed` (which returns nanoseconds) in a fibre on `c`, waits for it
// from main, and returns what it measured.
template <typename F>
double in_fibre(loom::Cluster& c, F timed) {
  loom::FibreAttr attr;
  attr.cluster = &c;
  double ns = 0;
  loom::Fibre f(attr, [&ns, &timed] { ns = timed(); });
  f.join();
  return ns;
}

double yield_pair(loom::Cluster& c, std::uint64_t n) {
  return in_fibre(c, [n] {
    auto loop = [n] {
      for (std::uint64_t i = 0; i < n; ++i) loom::this_fibre::yield();
    };
    std::uint64_t t0 = bench::now_ns();
    loom::Fibre a(loop), b(loop);
    a.join();
    b.join();
    return double(bench::now_ns() - t0) / 2;  // per yield: 2n yields
  });
}

double create_join(loom::Cluster& c, std::uint64_t n) {
  return in_fibre(c, [n] {
    std::uint64_t t0 = bench::now_ns();
    for (std::uint64_t i = 0; i < n; ++i) {
      loom::Fibre f([] {});
      f.join();
    }
    return double(bench::now_ns() - t0);
  });
}

double migrate_round_trip(loom::Cluster& a, loom::Cluster& b, std::uint64_t n) {
  return in_fibre(a, [n, &a, &b] {
    std::uint64_t t0 = bench::now_ns();
    for (std::uint64_t i = 0; i < n; ++i) {
      loom::this_fibre::migrate(b);
      loom::this_fibre::migrate(a);
    }
    double ns = double(bench::now_ns() - t0);
    if (loom::Cluster::current().id() != a.id()) {
      std::fprintf(stderr, "micro_loom: migrate: fibre is on cluster %u after migrate(cluster %u)\n",
                   loom::Cluster::current().id(), a.id());
      std::exit(1);
    }
    return ns;
  });
}

double mutex_handoff(loom::Cluster& c, std::uint64_t n) {
  return in_fibre(c, [n] {
    loom::Mutex m;
    loom::CondVar cv;
    int turn = 0;
    auto player = [&m, &cv, &turn, n](int me) {
      for (std::uint64_t i = 0; i < n; ++i) {
        m.lock();
        cv.wait(m, [&turn, me] { return turn == me; });
        turn = 1 - me;
        cv.notify_one();
        m.unlock();
      }
    };
    std::uint64_t t0 = bench::now_ns();
    loom::Fibre a(player, 0), b(player, 1);
    a.join();
    b.join();
    return double(bench::now_ns() - t0) / 2;  // per handoff: 2n handoffs
  });
}

double sem_pingpong(loom::Cluster& c, std::uint64_t n) {
  return in_fibre(c, [n] {
    loom::Semaphore ping(0), pong(0);
    std::uint64_t t0 = bench::now_ns();
    loom::Fibre a([&ping, &pong, n] {
      for (std::uint64_t i = 0; i < n; ++i) {
        ping.release();
        pong.acquire();
      }
    });
    loom::Fibre b([&ping, &pong, n] {
      for (std::uint64_t i = 0; i < n; ++i) {
        ping.acquire();
        pong.release();
      }
    });
    a.join();
    b.join();
    return double(bench::now_ns() - t0) / 2;  // per one-way pass: 2n passes
  });
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<bench::RowInfo> rows = {
      {"yield", "two fibres on one processor ping-ponging with this_fibre::yield(); ns per yield"},
      {"create_join", "create a fibre with an empty lambda and join it, on one processor; ns per pair"},
      {"migrate", "a fibre migrating between two clusters of 1 processor each; ns per round trip"},
      {"mutex_handoff", "two fibres on one processor passing a turn through a Mutex + CondVar; ns per handoff"},
      {"sem_pingpong", "two fibres on one processor ping-ponging through two Semaphores; ns per pass"},
  };
  bench::Options o = bench::parse_micro(
      "micro_loom", "loom", argc, argv, rows,
      "The scheduler configuration comes from LOOM_* variables (loom/config.hpp); a non-default one\n"
      "is named in each row's variant.\n");
  const loom::SchedConfig config = loom::SchedConfig::from_env();
  const std::string variant = bench::loom_variant(config);

  if (o.wants("yield") || o.wants("create_join")) {
    loom::Cluster c(1, config);
    const char* setup = "loom::Cluster(1); timed inside a fibre on it; main waits in join()";
    if (o.wants("yield")) {
      bench::Measurement m = bench::measure(o, [&c](std::uint64_t n) { return yield_pair(c, n); });
      bench::micro_row("yield", "loom", variant, m, "this_fibre::yield")
          .add("processors", 1u)
          .add("setup", setup)
          .add("config", config.describe())
          .print();
    }
    if (o.wants("create_join")) {
      bench::Measurement m = bench::measure(o, [&c](std::uint64_t n) { return create_join(c, n); });
      bench::micro_row("create_join", "loom", variant, m, "Fibre+join")
          .add("processors", 1u)
          .add("stack_bytes", std::uint64_t(config.stack_size))
          .add("setup", setup)
          .add("config", config.describe())
          .print();
    }
  }
  if (o.wants("migrate")) {
    loom::Cluster a(1, config), b(1, config);
    bench::Measurement m = bench::measure(o, [&a, &b](std::uint64_t n) { return migrate_round_trip(a, b, n); });
    bench::micro_row("migrate", "loom", variant, m, "migrate(b)+migrate(a)")
        .add("processors", 1u)
        .add("setup", "two loom::Cluster(1); one fibre migrating a->b->a")
        .add("config", config.describe())
        .print();
  }
  if (o.wants("mutex_handoff") || o.wants("sem_pingpong")) {
    loom::Cluster c(1, config);
    const char* setup = "loom::Cluster(1); two fibres on it; main waits in join()";
    if (o.wants("mutex_handoff")) {
      bench::Measurement m = bench::measure(o, [&c](std::uint64_t n) { return mutex_handoff(c, n); });
      bench::micro_row("mutex_handoff", "loom", variant, m, "Mutex+CondVar handoff")
          .add("processors", 1u)
          .add("policy", loom::to_string(loom::default_mutex_policy()))
          .add("setup", setup)
          .add("config", config.describe())
          .print();
    }
    if (o.wants("sem_pingpong")) {
      bench::Measurement m = bench::measure(o, [&c](std::uint64_t n) { return sem_pingpong(c, n); });
      bench::micro_row("sem_pingpong", "loom", variant, m, "Semaphore release+acquire pass")
          .add("processors", 1u)
          .add("setup", setup)
          .add("config", config.describe())
          .print();
    }
  }
  return 0;
}
