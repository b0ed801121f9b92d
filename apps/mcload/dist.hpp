// apps/mcload/dist.hpp — the request mix: key and value sizes, inter-arrival
// gaps. Fixed sizes by default; --dist etc draws them from the Facebook ETC
// pool's fitted distributions (Atikoglu, Xu, Frachtenberg, Jiang, Paleczny,
// "Workload Analysis of a Large-Scale Key-Value Store", SIGMETRICS 2012:
// the fits for the ETC pool):
//   key size    generalized extreme value, location 30.7984, scale 8.20449,
//               shape 0.078688 (bytes)
//   value size  generalized Pareto, location 0, scale 214.476,
//               shape 0.348238 (bytes)
//   inter-arrival gap  generalized Pareto, location 0, scale 16.0292,
//               shape 0.154971 (µs, between requests arriving at a server)
// Draws are by inversion of the CDF from a uniform variate. Sizes are clamped
// to what the memcached text protocol accepts: keys 1..250 bytes, values
// 1..kMaxValue (below memcached's default 1 MiB item size, so a drawn value
// is stored instead of refused with SERVER_ERROR).
#pragma once

#include <cstdint>

namespace mcload {

// xorshift128+: fast, per-thread, seeded; statistical quality far beyond
// what choosing keys and sizes needs.
struct Rng {
  uint64_t s0, s1;
  explicit Rng(uint64_t seed);
  uint64_t next();
  double uniform();  // in (0, 1): never 0 nor 1, so logarithms stay finite
  uint64_t below(uint64_t n) { return next() % n; }
};

constexpr unsigned kMaxKey = 250;
constexpr unsigned kMaxValue = 512 * 1024;

// Inverse CDFs at u in (0, 1).
double gev_quantile(double mu, double sigma, double k, double u);
double gpareto_quantile(double theta, double sigma, double k, double u);

struct EtcParams {
  static constexpr double key_mu = 30.7984, key_sigma = 8.20449, key_k = 0.078688;
  static constexpr double value_theta = 0, value_sigma = 214.476, value_k = 0.348238;
  static constexpr double gap_theta = 0, gap_sigma_us = 16.0292, gap_k = 0.154971;
};

// The size of key number `index`: the same key always has the same length,
// so every get names a key that the warm-up stored.
unsigned etc_key_size(uint64_t index);
unsigned etc_value_size(Rng& rng);
double etc_gap_us(Rng& rng);

}  // namespace mcload
