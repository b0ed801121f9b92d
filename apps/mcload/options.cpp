// apps/mcload/options.cpp — see options.hpp.
#include "options.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dist.hpp"

namespace mcload {
namespace {

const char kUsage[] =
    "usage: mcload --server HOST:PORT [options]\n"
    "Closed-loop memcached load generator (text or meta protocol). Prints one JSON line.\n"
    "  --server HOST:PORT     memcached to load (IPv4 address or name; default 127.0.0.1:11211)\n"
    "  --connections N        connections (default 10)\n"
    "  --threads T            client threads, connections spread over them (default 1)\n"
    "  --depth D              requests outstanding per connection, pipelined (default 1)\n"
    "  --write-ratio R        share of requests that are sets, 0..1 (default 0.1)\n"
    "  --keys K               key space; every key is stored before the warm-up (default 10000)\n"
    "  --key-size B           key length in bytes, 8..250 (default 16)\n"
    "  --value-size S         value length in bytes, 1..524288 (default 32)\n"
    "  --multiget M           keys per get, 1..100 (default 1)\n"
    "  --warmup SEC           load before measuring (default 1)\n"
    "  --duration SEC         measured time (default 5)\n"
    "  --dist fixed|etc       key/value sizes: fixed, or Facebook ETC's (SIGMETRICS 2012)\n"
    "  --arrivals closed|etc  closed loop (default), or requests paced by ETC's inter-arrival gaps\n"
    "  --protocol text|meta   get/set, or mg/ms (default text)\n"
    "  --no-validate          skip the check against the server's stats counters\n"
    "  --seed N               random seed (default 1)\n"
    "Exit status: 0 ok; 1 errors in the replies, a failed validation or no server; 2 bad command line.\n";

[[noreturn]] void bad(const char* fmt, const char* a, const char* b = "") {
  std::fprintf(stderr, "mcload: ");
  std::fprintf(stderr, fmt, a, b);
  std::fprintf(stderr, "\n%s", kUsage);
  std::exit(2);
}

uint64_t parse_uint(const char* flag, const char* v, uint64_t lo, uint64_t hi) {
  if (!*v || *v == '-' || *v == '+') bad("bad value '%s' for %s (a whole number)", v, flag);
  errno = 0;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (errno || *end) bad("bad value '%s' for %s (a whole number)", v, flag);
  if (x < lo || x > hi) {
    char range[64];
    std::snprintf(range, sizeof range, "%llu..%llu", (unsigned long long)lo, (unsigned long long)hi);
    bad("%s is out of range (%s)", (std::string(flag) + " " + v).c_str(), range);
  }
  return x;
}

double parse_double(const char* flag, const char* v, double lo, double hi) {
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v, &end);
  if (!*v || errno || *end || !std::isfinite(x)) bad("bad value '%s' for %s (a number)", v, flag);
  if (x < lo || x > hi) {
    char range[64];
    std::snprintf(range, sizeof range, "%g..%g", lo, hi);
    bad("%s is out of range (%s)", (std::string(flag) + " " + v).c_str(), range);
  }
  return x;
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (!std::strcmp(a, "--no-validate")) {
      o.validate = false;
      continue;
    }
    if (std::strncmp(a, "--", 2) != 0) bad("unexpected argument '%s'%s", a);
    if (i + 1 >= argc) bad("missing value after %s%s", a);
    const char* v = argv[++i];
    if (!std::strcmp(a, "--server")) {
      const char* colon = std::strrchr(v, ':');
      if (!colon || colon == v) bad("bad value '%s' for --server (HOST:PORT)%s", v);
      o.host.assign(v, colon - v);
      o.port = uint16_t(parse_uint("--server's port", colon + 1, 1, 65535));
    } else if (!std::strcmp(a, "--connections")) {
      o.connections = unsigned(parse_uint(a, v, 1, 1000000));
    } else if (!std::strcmp(a, "--threads")) {
      o.threads = unsigned(parse_uint(a, v, 1, 1024));
    } else if (!std::strcmp(a, "--depth")) {
      o.depth = unsigned(parse_uint(a, v, 1, 4096));
    } else if (!std::strcmp(a, "--write-ratio")) {
      o.write_ratio = parse_double(a, v, 0, 1);
    } else if (!std::strcmp(a, "--keys")) {
      o.keys = parse_uint(a, v, 1, 100000000);
    } else if (!std::strcmp(a, "--key-size")) {
      o.key_size = unsigned(parse_uint(a, v, 8, kMaxKey));
    } else if (!std::strcmp(a, "--value-size")) {
      o.value_size = unsigned(parse_uint(a, v, 1, kMaxValue));
    } else if (!std::strcmp(a, "--multiget")) {
      o.multiget = unsigned(parse_uint(a, v, 1, 100));
    } else if (!std::strcmp(a, "--warmup")) {
      o.warmup_s = parse_double(a, v, 0, 3600);
    } else if (!std::strcmp(a, "--duration")) {
      o.duration_s = parse_double(a, v, 0.01, 3600);
    } else if (!std::strcmp(a, "--dist")) {
      if (!std::strcmp(v, "etc"))
        o.etc = true;
      else if (!std::strcmp(v, "fixed"))
        o.etc = false;
      else
        bad("bad value '%s' for --dist (fixed or etc)%s", v);
    } else if (!std::strcmp(a, "--arrivals")) {
      if (!std::strcmp(v, "etc"))
        o.etc_arrivals = true;
      else if (!std::strcmp(v, "closed"))
        o.etc_arrivals = false;
      else
        bad("bad value '%s' for --arrivals (closed or etc)%s", v);
    } else if (!std::strcmp(a, "--protocol")) {
      if (!std::strcmp(v, "text"))
        o.protocol = Protocol::text;
      else if (!std::strcmp(v, "meta"))
        o.protocol = Protocol::meta;
      else
        bad("bad value '%s' for --protocol (text or meta)%s", v);
    } else if (!std::strcmp(a, "--seed")) {
      o.seed = parse_uint(a, v, 0, UINT64_MAX);
    } else {
      bad("unknown option '%s'%s", a);
    }
  }
  if (o.threads > o.connections)
    bad("--threads %s is more than --connections %s", std::to_string(o.threads).c_str(),
        std::to_string(o.connections).c_str());
  // Keys are "mcl:" and the decimal index, padded: the index must fit.
  if (!o.etc && std::to_string(o.keys - 1).size() + 4 > o.key_size)
    bad("--key-size %s is too short for %s keys (\"mcl:\" and the index)", std::to_string(o.key_size).c_str(),
        std::to_string(o.keys).c_str());
  return o;
}

}  // namespace mcload
