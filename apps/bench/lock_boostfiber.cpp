// lock_boostfiber — the lock benchmark (lock_harness.hpp) on Boost.Fiber
// (Debian's 1.74), M:N: T fibers spread over C kernel threads by Boost's own
// multi-thread scheduling algorithm, L boost::fibers::mutex.
//
//   --algo work_stealing (default)  boost::fibers::algo::work_stealing(C):
//                                   per-thread queues, idle threads steal
//                                   from random victims;
//   --algo shared_work              boost::fibers::algo::shared_work: one
//                                   queue for all C threads.
//   --suspend off (default) | on    the algorithms' `suspend` argument. Off
//                                   is Boost's default: a thread without
//                                   ready fibers keeps polling (spins);
//                                   on: it sleeps on a condition variable
//                                   until notified or the next timer.
//
// The main thread is one of the C scheduler threads: it creates the T
// fibers (work_stealing lets the others steal them; shared_work puts them in
// the shared queue) and joins them. The other C-1 threads park their main
// fiber on a fiber condition variable until the end, so they only run
// workers. The controller (warm-up, window, stop) is a plain std::thread
// outside the schedulers, asleep except when it samples.
#include <boost/fiber/algo/shared_work.hpp>
#include <boost/fiber/algo/work_stealing.hpp>
#include <boost/fiber/all.hpp>
#include <thread>

#include "lock_harness.hpp"

namespace {

struct alignas(64) FMutex {
  boost::fibers::mutex m;
  void lock() { m.lock(); }
  void unlock() { m.unlock(); }
};

bool g_shared_work = false;
bool g_suspend = false;

bool extra_flag(const char* prog, const std::string& flag, bench::ArgWalker& w) {
  if (flag == "--algo") {
    std::string v = w.value();
    if (v == "work_stealing")
      g_shared_work = false;
    else if (v == "shared_work")
      g_shared_work = true;
    else
      bench::usage_error(prog, "bad value '" + v + "' for --algo (want work_stealing or shared_work)");
    return true;
  }
  if (flag == "--suspend") {
    std::string v = w.value();
    if (v == "on")
      g_suspend = true;
    else if (v == "off")
      g_suspend = false;
    else
      bench::usage_error(prog, "bad value '" + v + "' for --suspend (want on or off)");
    return true;
  }
  return false;
}

void install_algorithm(unsigned threads) {
  if (g_shared_work)
    boost::fibers::use_scheduling_algorithm<boost::fibers::algo::shared_work>(g_suspend);
  else
    boost::fibers::use_scheduling_algorithm<boost::fibers::algo::work_stealing>(threads, g_suspend);
}

}  // namespace

int main(int argc, char** argv) {
  lockbench::Config c = lockbench::parse(
      "lock_boostfiber", "Boost.Fiber (boost::fibers::mutex, M:N)", argc, argv, extra_flag,
      "  --algo A           work_stealing (default) or shared_work, over C threads\n"
      "  --suspend on|off   the algorithm's suspend flag (default off, as Boost's: idle threads poll)\n");
  const double rate = lockbench::loop_rate(c);
  std::string variant;
  if (g_shared_work) variant = "algo=shared_work";
  if (g_suspend) variant += std::string(variant.empty() ? "" : " ") + "suspend=on";

  lockbench::Shared s(c, rate);
  std::unique_ptr<FMutex[]> locks(new FMutex[c.locks]);

  // Parking place of the extra scheduler threads' main fibers.
  boost::fibers::mutex park_m;
  boost::fibers::condition_variable park_cv;
  bool finished = false;

  std::vector<std::thread> helpers;
  for (unsigned i = 1; i < c.processors; ++i)
    helpers.emplace_back([&] {
      install_algorithm(c.processors);
      std::unique_lock<boost::fibers::mutex> lk(park_m);
      park_cv.wait(lk, [&] { return finished; });
    });
  install_algorithm(c.processors);  // work_stealing: returns once all C threads have installed it

  std::vector<boost::fibers::fiber> fibers;
  fibers.reserve(c.threads);
  for (unsigned i = 0; i < c.threads; ++i) fibers.emplace_back([&s, &locks, i] { lockbench::worker(s, locks, i); });

  lockbench::Window w;
  std::thread controller([&] { w = lockbench::control(s); });
  for (auto& f : fibers) f.join();
  controller.join();

  // The workers are gone; the schedulers of all C threads are still up.
  double idle = c.idle_s > 0 ? lockbench::idle_cpu_ms_per_s(c.idle_s) : 0;
  {
    std::unique_lock<boost::fibers::mutex> lk(park_m);
    finished = true;
  }
  park_cv.notify_all();
  for (auto& t : helpers) t.join();

  bench::Json j = lockbench::row("boost.fiber", variant, s, rate, w);
  j.add("algorithm", g_shared_work ? "shared_work" : "work_stealing")
      .add("suspend", g_suspend ? "on" : "off")
      .add("mutex", "boost::fibers::mutex");
  if (c.idle_s > 0) j.add("idle_cpu_ms_per_s", idle);
  j.print();
  return 0;
}
