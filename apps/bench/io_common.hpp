// apps/bench/io_common.hpp — what the I/O benchmark's echo servers and its
// load client share (scripts/bench io, scripts/bench_io.py).
//
// The servers (io_loom, io_pthread; the epoll loop in
// apps/baselines/epoll-echo is self-contained on purpose) are one echo
// server written three ways: read up to --buffer bytes, write them all back,
// repeat until EOF or an error, close. The same program serves the three
// loads of the client (io_client.cpp): 64-byte ping-pong, streaming, and
// short connections (one request, then the client half-closes).
//
// Server protocol with the driver, identical for the three servers:
//   - argv: --port N (0: any free port, the default), --buffer BYTES
//     (16384), --backlog N (4096);
//   - once listening, one JSON line on stdout:
//       {"listening":PORT,"pid":PID,"system":"...","variant":"..."}
//   - a line "stats" on stdin prints one JSON line of the server's counters;
//     EOF on stdin ends the server (exit 0).
// Every server listens on 127.0.0.1 only, sets TCP_NODELAY on each accepted
// connection, raises its soft open-files limit to the hard one, and ignores
// SIGPIPE (loom does that by default; the others call signal()): the client
// resets the connections still in flight when its window ends.
//
// Header-only, no loom: io_pthread must not link loom.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "harness.hpp"

namespace iobench {

struct ServerOptions {
  int port = 0;
  std::size_t buffer = 16384;
  int backlog = 4096;
};

// Parses the servers' common flags; `extra` may take flags of its own
// (returns false for one it does not know). --help prints `help` and exits.
template <typename Extra>
ServerOptions parse_server(const char* prog, int argc, char** argv, const char* help, Extra extra) {
  ServerOptions o;
  bench::ArgWalker w(prog, argc, argv);
  while (const char* f = w.next()) {
    std::string flag = f;
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "usage: %s [--port N] [--buffer BYTES] [--backlog N]\n"
          "An echo server on 127.0.0.1 for scripts/bench io (see apps/bench/io_common.hpp).\n"
          "  --port N        port to listen on (default 0: any free port; printed on stdout)\n"
          "  --buffer BYTES  read size (default 16384)\n"
          "  --backlog N     listen backlog (default 4096)\n"
          "stdin: a line \"stats\" prints the server's counters as JSON; EOF ends the server.\n%s",
          prog, help ? help : "");
      std::exit(0);
    } else if (flag == "--port") {
      const char* v = w.value();
      if (std::string(v) == "0") {
        o.port = 0;
      } else {
        std::uint64_t p = bench::parse_count(prog, "--port", v);
        if (p > 65535) bench::usage_error(prog, "bad value for --port (0 to 65535)");
        o.port = static_cast<int>(p);
      }
    } else if (flag == "--buffer") {
      std::uint64_t b = bench::parse_count(prog, "--buffer", w.value());
      if (b > (1u << 20)) bench::usage_error(prog, "bad value for --buffer (at most 1 MiB)");
      o.buffer = static_cast<std::size_t>(b);
    } else if (flag == "--backlog") {
      std::uint64_t b = bench::parse_count(prog, "--backlog", w.value());
      if (b > 65535) bench::usage_error(prog, "bad value for --backlog (at most 65535)");
      o.backlog = static_cast<int>(b);
    } else if (!extra(flag, w)) {
      bench::usage_error(prog, "unknown flag '" + flag + "'");
    }
  }
  return o;
}

// Soft RLIMIT_NOFILE := hard; returns the new soft limit.
inline rlim_t raise_nofile() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 0;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
  getrlimit(RLIMIT_NOFILE, &r);
  return r.rlim_cur;
}

inline sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

inline int bound_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return -1;
  return ntohs(a.sin_port);
}

inline void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

inline void print_listening(int port, const char* system, const std::string& variant) {
  bench::Json j;
  j.add("listening", port).add("pid", static_cast<int>(getpid())).add("system", system).add("variant", variant);
  j.print();
}

}  // namespace iobench
