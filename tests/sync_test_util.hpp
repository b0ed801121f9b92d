// tests/sync_test_util.hpp — helpers shared by the tests of loom/sync.hpp
// (sync_test, mutex_test, rwlock_test, key_test, timer_test).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.hpp"
#include "test_util.hpp"

namespace loom::test {

inline constexpr MutexPolicy kPolicies[] = {MutexPolicy::blocking, MutexPolicy::spin, MutexPolicy::baton,
                                            MutexPolicy::hybrid};
inline constexpr MutexType kTypes[] = {MutexType::normal, MutexType::recursive, MutexType::errorcheck};

inline const char* to_string(MutexType t) {
  switch (t) {
    case MutexType::normal: return "normal";
    case MutexType::recursive: return "recursive";
    default: return "errorcheck";
  }
}

// scaled(n), but never below lo: sanitizer runs divide by up to 1000.
inline long scaled_at_least(long lo, long n) { return std::max(lo, scaled(n)); }

inline FibreAttr on(Cluster& c) {
  FibreAttr a;
  a.cluster = &c;
  return a;
}

// Runs fn on a fibre of c and waits for it.
inline void run_in(Cluster& c, const std::function<void()>& fn) { Fibre(on(c), fn).join(); }

// Aborts the process, naming the test, when the scope is not left in time,
// so that a lost wake-up reads as such rather than as ctest's timeout.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit = std::chrono::seconds(sanitized() ? 300 : 60))
      : name_(std::string(testing::UnitTest::GetInstance()->current_test_info()->test_suite_name()) + "." +
              testing::UnitTest::GetInstance()->current_test_info()->name()),
        thread_([this, limit] { watch(limit); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> l(m_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void watch(std::chrono::seconds limit) {
    std::unique_lock<std::mutex> l(m_);
    if (!cv_.wait_for(l, limit, [this] { return done_; })) {
      std::fprintf(stderr, "loom test: %s still blocked after %lld s (a lost wake-up?)\n", name_.c_str(),
                   static_cast<long long>(limit.count()));
      std::abort();
    }
  }
  std::string name_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// A mutex policy on a cluster of some processors: the parameter of the
// tests that run every policy on 1, 2 and 4 processors.
struct PolicyOnProcessors {
  MutexPolicy policy;
  std::size_t processors;
};

inline std::vector<PolicyOnProcessors> policies_on_1_2_4() {
  std::vector<PolicyOnProcessors> v;
  for (MutexPolicy p : kPolicies)
    for (std::size_t n : {1, 2, 4}) v.push_back({p, n});
  return v;
}

inline std::string policy_on_processors_name(const testing::TestParamInfo<PolicyOnProcessors>& i) {
  return std::string(loom::to_string(i.param.policy)) + "_" + std::to_string(i.param.processors) + "p";
}

}  // namespace loom::test
