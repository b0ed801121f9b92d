// server.hpp — what both runtimes' servers do alike: the process set-up,
// the listening sockets, the listening line.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "connection.hpp"
#include "options.hpp"

namespace web {

// Raises the open-files limit to its hard limit, ignores SIGPIPE; returns
// the open-files limit now in force.
std::size_t setup_process();

// Fills ctx from the options (max connections from the open-files limit).
void fill_context(ServerContext& ctx, const Options& o, std::size_t nofile);

bool parse_address(const std::string& address, unsigned port, sockaddr_storage& ss, socklen_t& len);
unsigned local_port(int fd);

// A listening TCP socket made through Io; -1 with `err` set on failure.
template <class Io>
int open_listener(const Options& o, unsigned port, bool reuseport, std::string& err) {
  sockaddr_storage ss;
  socklen_t len;
  if (!parse_address(o.address, port, ss, len)) {
    err = "--address " + o.address + ": not an IPv4 or IPv6 address";
    return -1;
  }
  int fd = Io::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (reuseport) ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (o.defer_accept) {
    // The first read of a new connection then finds its request: on loom
    // it neither fails with EAGAIN nor registers the socket with epoll.
    int secs = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &secs, sizeof secs);
  }
  if (Io::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || Io::listen(fd, o.backlog) != 0) {
    err = o.address + ":" + std::to_string(port) + ": " + std::strerror(errno);
    Io::close(fd);
    return -1;
  }
  return fd;
}

// "PROG: listening on http://ADDR:PORT/ (...)" on stdout, flushed:
// tests and scripts wait for it (and read the port from it).
void print_listening(const char* prog, const Options& o, unsigned port, const std::string& details);

int run_pthread(const Options& o);
int run_loom(const Options& o);
int run_events(const Options& o);

}  // namespace web
