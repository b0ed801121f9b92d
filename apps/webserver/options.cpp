// options.cpp — see options.hpp.
#include "options.hpp"

#include <arpa/inet.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace web {

const char* usage() {
  return "usage: webserver [options]\n"
         "  --runtime=loom|pthread|events\n"
         "                           one fibre (loom, default) or one kernel thread per connection,\n"
         "                           or events: loom colored events, one color per connection\n"
         "  --processors N           loom processors in all (default: the CPUs this process may use);\n"
         "                           events: the size of its one cluster\n"
         "  --cluster-size N         processors per cluster (default: all in one); each cluster has\n"
         "                           its own listening socket (SO_REUSEPORT) and acceptor fibre\n"
         "  --poller MODE            idle, fibre, loop, loop-sleep, opportunistic or\n"
         "                           opportunistic-timeout (default: LOOM_POLLER, else idle)\n"
         "  --port N                 TCP port (default 8080; 0: any free port, printed)\n"
         "  --address A              IPv4 or IPv6 address to listen on (default 127.0.0.1)\n"
         "  --root DIR               serve the files under DIR (GET /plaintext still answers)\n"
         "  --read-timeout SECONDS   close a connection that has not sent a whole request, or not\n"
         "                           taken a response, within this time (default 10; fractions ok)\n"
         "  --max-connections N      answer 503 and close beyond N open connections\n"
         "                           (default: the open-files limit less 64)\n"
         "  --stack-size BYTES       fibre stack size, suffix K or M allowed (default 16K, the\n"
         "                           minimum); kernel threads get at least 64K\n"
         "  --backlog N              listen(2) backlog (default 4096)\n"
         "  --defer-accept           TCP_DEFER_ACCEPT: accept connections only once their first\n"
         "                           bytes have arrived (a client that sends nothing is accepted\n"
         "                           after about a second, then timed out as usual)\n"
         "  --rest, --no-rest        loom: a connection's fibre starts at rest and gives its stack\n"
         "                           back between requests (loom::io::rest), its state on the\n"
         "                           heap (default: --rest; --no-rest: blocking reads)\n"
         "  --quiet                  do not print the listening line\n"
         "  --help\n"
         "Routes: GET|HEAD /plaintext and / (without --root) answer \"Hello, World!\".\n";
}

namespace {

int bad(const char* fmt, const char* a, const char* b = "") {
  std::fprintf(stderr, "webserver: ");
  std::fprintf(stderr, fmt, a, b);
  std::fprintf(stderr, "\n%s", usage());
  return 2;
}

bool parse_uint(const char* s, unsigned long long lo, unsigned long long hi, unsigned long long& out) {
  if (!*s || *s == '-' || *s == '+') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  out = v;
  return true;
}

bool parse_size(const char* s, unsigned long long& out) {
  std::string v(s);
  unsigned long long mult = 1;
  if (!v.empty() && (v.back() == 'K' || v.back() == 'k'))
    mult = 1024, v.pop_back();
  else if (!v.empty() && (v.back() == 'M' || v.back() == 'm'))
    mult = 1024 * 1024, v.pop_back();
  unsigned long long n;
  if (!parse_uint(v.c_str(), 1, 1ull << 32, n)) return false;
  out = n * mult;
  return true;
}

}  // namespace

int parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage(), stdout);
      return 0;
    }
    if (arg == "--quiet") {
      o.quiet = true;
      continue;
    }
    if (arg == "--rest") {
      o.rest = true;
      continue;
    }
    if (arg == "--no-rest") {
      o.rest = false;
      continue;
    }
    if (arg == "--defer-accept") {
      o.defer_accept = true;
      continue;
    }
    std::string name = arg, value;
    bool has_value = false;
    std::size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    static const char* const kWithValue[] = {
        "--runtime", "--processors",   "--cluster-size",    "--poller",     "--port",   "--address",
        "--root",    "--read-timeout", "--max-connections", "--stack-size", "--backlog"};
    bool known = false;
    for (const char* k : kWithValue) known = known || name == k;
    if (!known) return bad("unknown option '%s'", arg.c_str());
    if (!has_value) {
      if (i + 1 >= argc) return bad("%s needs a value", name.c_str());
      value = argv[++i];
    }
    const char* v = value.c_str();
    unsigned long long n = 0;
    if (name == "--runtime") {
      if (value == "loom")
        o.runtime = Options::Runtime::loom;
      else if (value == "pthread")
        o.runtime = Options::Runtime::pthread;
      else if (value == "events")
        o.runtime = Options::Runtime::events;
      else
        return bad("--runtime: '%s' is not loom, pthread or events", v);
    } else if (name == "--processors") {
      if (!parse_uint(v, 1, 1024, n)) return bad("--processors: '%s' is not a number from 1 to 1024", v);
      o.processors = static_cast<unsigned>(n);
    } else if (name == "--cluster-size") {
      if (!parse_uint(v, 1, 1024, n)) return bad("--cluster-size: '%s' is not a number from 1 to 1024", v);
      o.cluster_size = static_cast<unsigned>(n);
    } else if (name == "--poller") {
      bool ok = false;
      for (const char* p : kPollerNames) ok = ok || value == p;
      if (!ok)
        return bad("--poller: '%s' is not one of idle, fibre, loop, loop-sleep, opportunistic, opportunistic-timeout",
                   v);
      o.poller = value;
    } else if (name == "--port") {
      if (!parse_uint(v, 0, 65535, n)) return bad("--port: '%s' is not a port number (0 to 65535)", v);
      o.port = static_cast<unsigned>(n);
    } else if (name == "--address") {
      std::string a =
          value.size() > 2 && value.front() == '[' && value.back() == ']' ? value.substr(1, value.size() - 2) : value;
      unsigned char addr[16];
      if (inet_pton(AF_INET, a.c_str(), addr) != 1 && inet_pton(AF_INET6, a.c_str(), addr) != 1)
        return bad("--address: '%s' is not an IPv4 or IPv6 address", v);
      o.address = value;
    } else if (name == "--root") {
      if (value.empty()) return bad("--root: empty%s", "");
      o.root = value;
    } else if (name == "--read-timeout") {
      char* end = nullptr;
      errno = 0;
      double s = std::strtod(v, &end);
      if (errno || end == v || *end || !(s > 0) || s > 86400 || std::isnan(s))
        return bad("--read-timeout: '%s' is not a number of seconds (above 0, at most 86400)", v);
      o.read_timeout = std::chrono::milliseconds(static_cast<long long>(std::ceil(s * 1000)));
    } else if (name == "--max-connections") {
      if (!parse_uint(v, 1, 100000000, n)) return bad("--max-connections: '%s' is not a positive number", v);
      o.max_connections = n;
    } else if (name == "--stack-size") {
      if (!parse_size(v, n) || n < 16 * 1024 || n > 64 * 1024 * 1024)
        return bad("--stack-size: '%s' is not a size from 16K to 64M", v);
      o.stack_size = n;
    } else if (name == "--backlog") {
      if (!parse_uint(v, 1, 1 << 20, n)) return bad("--backlog: '%s' is not a positive number", v);
      o.backlog = static_cast<int>(n);
    }
  }
  if (o.runtime == Options::Runtime::pthread && (!o.poller.empty() || o.cluster_size))
    return bad("%s applies to --runtime=loom (and --poller to events) only",
               !o.poller.empty() ? "--poller" : "--cluster-size");
  if (o.runtime == Options::Runtime::events && o.cluster_size)
    return bad("--cluster-size applies to --runtime=loom only (events run in one cluster of --processors)%s", "");
  return -1;
}

}  // namespace web
