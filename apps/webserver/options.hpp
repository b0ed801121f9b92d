// options.hpp — the web server's command line.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace web {

struct Options {
  enum class Runtime { loom, pthread, events };
  Runtime runtime = Runtime::loom;
  unsigned processors = 0;    // loom, events: processors in all; 0 = the CPUs this process may use
  unsigned cluster_size = 0;  // loom: processors per cluster; 0 = all in one cluster
  std::string poller;         // loom, events: SchedConfig::poller by name; empty = LOOM_POLLER or the default
  unsigned port = 8080;       // 0: any free port (printed)
  std::string address = "127.0.0.1";
  std::string root;  // static files; empty = none
  std::chrono::milliseconds read_timeout{10000};
  std::size_t max_connections = 0;     // 0: the open-files limit less a reserve
  std::size_t stack_size = 16 * 1024;  // loom fibres; kernel threads get at least 64 KiB
  int backlog = 4096;
  bool defer_accept = false;
  bool rest = true;           // loom: a connection's fibre gives its stack back between requests (loom::io::rest)  // TCP_DEFER_ACCEPT: accept a connection once its first bytes are in
  bool quiet = false;
};

inline constexpr const char* kPollerNames[] = {"idle",       "fibre",         "loop",
                                               "loop-sleep", "opportunistic", "opportunistic-timeout"};

// Parses argv into o. Returns -1 to go on, 0 after printing --help, or 2
// after printing an error (the exit status for a bad command line).
int parse_options(int argc, char** argv, Options& o);

const char* usage();

}  // namespace web
