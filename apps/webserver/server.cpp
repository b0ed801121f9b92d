// server.cpp — see server.hpp.
#include "server.hpp"

#include <signal.h>
#include <sys/resource.h>

#include <cstdio>

namespace web {

std::size_t setup_process() {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    if (rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
      getrlimit(RLIMIT_NOFILE, &rl);
    }
  } else {
    rl.rlim_cur = 1024;
  }
  // A write to a connection the peer has closed must fail with EPIPE, not
  // kill the server (loom does this too when it starts; kernel threads
  // need it as well).
  signal(SIGPIPE, SIG_IGN);
  std::size_t n = rl.rlim_cur == RLIM_INFINITY ? (1u << 20) : static_cast<std::size_t>(rl.rlim_cur);
  return n > (1u << 20) ? (1u << 20) : n;
}

void fill_context(ServerContext& ctx, const Options& o, std::size_t nofile) {
  ctx.timeout_ms = o.read_timeout.count();
  ctx.stack_size = o.stack_size;
  ctx.rest = o.rest && o.runtime == Options::Runtime::loom;
  // Descriptors beyond connections: listeners, static files, stdio, loom's
  // epoll and event descriptors.
  std::size_t reserve = 64;
  std::size_t limit = nofile > reserve ? nofile - reserve : 1;
  ctx.max_connections = o.max_connections ? o.max_connections : limit;
}

bool parse_address(const std::string& address, unsigned port, sockaddr_storage& ss, socklen_t& len) {
  std::memset(&ss, 0, sizeof ss);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  std::string a = address;
  if (a.size() > 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  if (inet_pton(AF_INET, a.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof *v4;
    return true;
  }
  if (inet_pton(AF_INET6, a.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof *v6;
    return true;
  }
  return false;
}

unsigned local_port(int fd) {
  sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

void print_listening(const char* prog, const Options& o, unsigned port, const std::string& details) {
  if (o.quiet) return;
  bool v6 = o.address.find(':') != std::string::npos && o.address.front() != '[';
  std::printf("%s: listening on http://%s%s%s:%u/ (%s)\n", prog, v6 ? "[" : "", o.address.c_str(), v6 ? "]" : "", port,
              details.c_str());
  std::fflush(stdout);
}

}  // namespace web
