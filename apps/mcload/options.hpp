// apps/mcload/options.hpp — mcload's command line.
#pragma once

#include <cstdint>
#include <string>

namespace mcload {

enum class Protocol { text, meta };

struct Options {
  std::string host = "127.0.0.1";
  uint16_t port = 11211;
  unsigned connections = 10;
  unsigned threads = 1;
  unsigned depth = 1;        // requests outstanding per connection
  double write_ratio = 0.1;  // share of requests that are sets
  uint64_t keys = 10000;     // key space, all stored before the warm-up
  unsigned key_size = 16;    // bytes (fixed sizes; --dist etc draws them)
  unsigned value_size = 32;  // bytes
  unsigned multiget = 1;     // keys per get
  double warmup_s = 1;
  double duration_s = 5;
  bool etc = false;           // --dist etc: ETC key and value sizes
  bool etc_arrivals = false;  // --arrivals etc: pace requests by ETC's gaps
  Protocol protocol = Protocol::text;
  bool validate = true;  // compare with the server's stats
  uint64_t seed = 1;
  double drain_timeout_s = 10;  // after the run, how long replies may take
};

// Parses argv. On a bad command line prints the reason and the usage on
// stderr and exits with status 2; on --help prints the usage and exits 0.
Options parse_options(int argc, char** argv);

}  // namespace mcload
