// Bad arguments to the C++ API: rejected with std::invalid_argument where C
// returns EINVAL (issue 26, item 5), and a cluster destroyed by its own fibre
// says what to do (item 1).
#include <gtest/gtest.h>

#include <cerrno>
#include <stdexcept>

#include "loom/loom.h"
#include "loom/loom.hpp"

namespace {

TEST(Arguments, StackSizeOutsideTheLimitsIsRejected) {
  for (std::size_t bad : {std::size_t(1), loom::kStackMin - 1, loom::kStackMax + 1, std::size_t(1) << 40}) {
    loom::FibreAttr a;
    a.stack_size = bad;
    bool ran = false;
    EXPECT_THROW(loom::Fibre(a, [&] { ran = true; }), std::invalid_argument) << bad;
    EXPECT_FALSE(ran);
    loom_attr_t ca;  // C says the same
    loom_attr_init(&ca);
    EXPECT_EQ(loom_attr_setstacksize(&ca, bad), EINVAL) << bad;
    loom_attr_destroy(&ca);
  }
  for (std::size_t good : {std::size_t(0), loom::kStackMin, std::size_t(1) << 20}) {
    loom::FibreAttr a;
    a.stack_size = good;
    bool ran = false;
    loom::Fibre(a, [&] { ran = true; }).join();
    EXPECT_TRUE(ran) << good;
  }
  EXPECT_EQ(LOOM_STACK_MIN, loom::kStackMin);
  EXPECT_EQ(LOOM_STACK_MAX, loom::kStackMax);
}

TEST(Arguments, ClusterOfNoProcessorsIsRejected) {
  EXPECT_THROW(loom::Cluster(0), std::invalid_argument);
  EXPECT_THROW(loom::Cluster(100000), std::invalid_argument);
  loom_cluster_t* c = nullptr;
  EXPECT_EQ(loom_cluster_create(&c, 0), EINVAL);
  loom::SchedConfig cfg;
  cfg.stack_size = 1;
  EXPECT_THROW(loom::Cluster(1, cfg), std::invalid_argument);
  loom::Cluster one(1);  // still fine
  EXPECT_EQ(one.processors(), 1u);
}

// The README's first snippet without its last line: main left on `io` when
// `io` is destroyed. The process still aborts (the cluster would wait for the
// processor running the destructor), but the message says how to avoid it.
TEST(ArgumentsDeathTest, ClusterDestroyedByItsOwnFibreSaysWhatToDo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        loom::Cluster io(2);
        loom::this_fibre::migrate(io);
      },
      "loom: cluster [0-9]+ destroyed by fibre [0-9]+.*, which runs on it: move the fibre off first, e\\.g\\. "
      "loom::this_fibre::migrate\\(loom::Cluster::default_cluster\\(\\)\\)");
  // Moving home first, as the README's snippet does, is fine.
  {
    loom::Cluster io(2);
    loom::this_fibre::migrate(io);
    loom::this_fibre::migrate(loom::Cluster::default_cluster());
  }
}

}  // namespace
