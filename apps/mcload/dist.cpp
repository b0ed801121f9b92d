// apps/mcload/dist.cpp — see dist.hpp.
#include "dist.hpp"

#include <algorithm>
#include <cmath>

namespace mcload {

Rng::Rng(uint64_t seed) {
  // splitmix64 spreads a small seed over both words (never both zero).
  auto mix = [](uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  s0 = mix(seed);
  s1 = mix(seed) | 1;
}

uint64_t Rng::next() {
  uint64_t a = s0, b = s1;
  s0 = b;
  a ^= a << 23;
  s1 = a ^ b ^ (a >> 17) ^ (b >> 26);
  return s1 + b;
}

double Rng::uniform() { return (double(next() >> 11) + 0.5) / 9007199254740992.0; }

double gev_quantile(double mu, double sigma, double k, double u) {
  if (k == 0) return mu - sigma * std::log(-std::log(u));
  return mu + sigma * (std::pow(-std::log(u), -k) - 1) / k;
}

double gpareto_quantile(double theta, double sigma, double k, double u) {
  if (k == 0) return theta - sigma * std::log(1 - u);
  return theta + sigma * (std::pow(1 - u, -k) - 1) / k;
}

unsigned etc_key_size(uint64_t index) {
  Rng r(index * 2654435761ULL + 17);
  double v = gev_quantile(EtcParams::key_mu, EtcParams::key_sigma, EtcParams::key_k, r.uniform());
  return unsigned(std::clamp(std::lround(v), 1L, long(kMaxKey)));
}

unsigned etc_value_size(Rng& rng) {
  double v = gpareto_quantile(EtcParams::value_theta, EtcParams::value_sigma, EtcParams::value_k, rng.uniform());
  return unsigned(std::clamp(std::ceil(v), 1.0, double(kMaxValue)));
}

double etc_gap_us(Rng& rng) {
  return gpareto_quantile(EtcParams::gap_theta, EtcParams::gap_sigma_us, EtcParams::gap_k, rng.uniform());
}

}  // namespace mcload
