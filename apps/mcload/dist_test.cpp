// apps/mcload/dist_test.cpp — the ETC draws against their distributions'
// closed forms: a million draws each, means within 1 % (the value size also
// by its median, which the 512 KiB clamp does not touch). A wrong sign or
// parameter in an inverse CDF moves these by far more.
#include "dist.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

using namespace mcload;

static int failures = 0;

static void near(const char* what, double got, double want, double rel) {
  bool ok = std::fabs(got - want) <= rel * want;
  std::printf("%s %-28s %10.3f, expected %10.3f (within %.0f%%)\n", ok ? "ok  " : "FAIL", what, got, want, rel * 100);
  if (!ok) ++failures;
}

int main() {
  using P = EtcParams;
  const int n = 1000000;
  Rng rng(12345);
  double keys = 0, values = 0, gaps = 0;
  std::vector<unsigned> v(n);
  for (int i = 0; i < n; ++i) {
    keys += etc_key_size(uint64_t(i));
    v[i] = etc_value_size(rng);
    values += v[i];
    gaps += etc_gap_us(rng);
  }
  std::nth_element(v.begin(), v.begin() + n / 2, v.end());
  // GEV mean: mu + sigma (Gamma(1 - k) - 1) / k; generalized Pareto (location 0):
  // mean sigma / (1 - k), median sigma (2^k - 1) / k. Sizes are whole bytes
  // (keys rounded, values rounded up): half a byte of bias at most.
  near("key size mean (bytes)", keys / n, P::key_mu + P::key_sigma * (std::tgamma(1 - P::key_k) - 1) / P::key_k, 0.01);
  near("value size mean (bytes)", values / n - 0.5, P::value_sigma / (1 - P::value_k), 0.01);
  near("value size median (bytes)", v[n / 2], P::value_sigma * (std::pow(2, P::value_k) - 1) / P::value_k, 0.01);
  near("inter-arrival mean (us)", gaps / n, P::gap_sigma_us / (1 - P::gap_k), 0.01);
  // The same key index always has the same size (gets name stored keys).
  bool same = etc_key_size(42) == etc_key_size(42) && etc_key_size(7) == etc_key_size(7);
  std::printf("%s key size is a function of the index\n", same ? "ok  " : "FAIL");
  if (!same) ++failures;
  return failures ? 1 : 0;
}
