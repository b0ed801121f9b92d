// io_test — loom/io.hpp over real sockets on 127.0.0.1.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "loom/loom.hpp"
#include "sched/cluster.hpp"
#include "test_util.hpp"

namespace io = loom::io;
using namespace std::chrono_literals;

namespace {

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A listening socket on an ephemeral port.
int listener(int* port, int backlog = 4096) {
  int fd = io::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = loopback(0);
  EXPECT_EQ(io::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(io::listen(fd, backlog), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int connect_to(int port) {
  int fd = io::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(port);
  if (io::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    int e = errno;
    io::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// A connected pair of TCP sockets.
void tcp_pair(int fds[2]) {
  int port;
  int l = listener(&port);
  fds[0] = connect_to(port);
  fds[1] = io::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(fds[0], 0);
  ASSERT_GE(fds[1], 0);
  io::close(l);
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

void raise_fd_limit() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
}

// ---- echo: every byte back, in order, for every I/O variant ------------------------

struct EchoVariant {
  loom::PollerKind poller;
  bool lazy;
  bool ybr;
  long connections;
  long bytes;
};

std::string name_of(const EchoVariant& v) {
  std::string s = loom::to_string(v.poller);
  for (auto& c : s)
    if (c == '-') c = '_';
  return s + (v.lazy ? "_lazy" : "_eager") + (v.ybr ? "_ybr" : "_noybr") + "_" + std::to_string(v.connections) + "x" +
         std::to_string(v.bytes >> 10) + "KiB";
}

class Echo : public ::testing::TestWithParam<EchoVariant> {};

// Reads until EOF, writing everything back.
void echo_connection(int fd, std::atomic<long>* echoed) {
  char buf[4096];  // on a 16 KiB stack
  for (;;) {
    ssize_t r = io::read(fd, buf, sizeof buf);
    if (r < 0) std::fprintf(stderr, "echo server: read: %s\n", std::strerror(errno));
    if (r <= 0) break;
    for (ssize_t off = 0; off < r;) {
      ssize_t w = io::write(fd, buf + off, r - off);
      if (w <= 0) {
        std::fprintf(stderr, "echo server: write: %s\n", std::strerror(errno));
        io::close(fd);
        return;
      }
      off += w;
    }
    *echoed += r;
  }
  io::close(fd);
}

TEST_P(Echo, EveryByteComesBackInOrder) {
  const EchoVariant& v = GetParam();
  raise_fd_limit();
  loom::SchedConfig cfg = loom::SchedConfig::from_env();
  cfg.poller = v.poller;
  cfg.lazy_register = v.lazy;
  cfg.yield_before_read = v.ybr;
  cfg.poller_sleep_us = 200;
  long conns = v.connections, bytes = loom::test::scaled(v.bytes);
  std::atomic<long> echoed{0};
  int status = -1;
  {
    loom::Cluster server(2, cfg);
    loom::FibreAttr on_server;
    on_server.cluster = &server;
    loom::Fibre(on_server, [&] {
      int port;
      int l = listener(&port);
      std::string cmd = std::string(IO_ECHO_CLIENT) + " " + std::to_string(port) + " " + std::to_string(conns) + " " +
                        std::to_string(bytes);
      // The client runs as a child process; a kernel thread waits for it.
      std::thread client([&] { status = std::system(cmd.c_str()); });
      loom::FibreAttr attr;
      attr.stack_size = loom::kStackMin;
      attr.cluster = &server;
      for (long i = 0; i < conns; ++i) {
        int fd = io::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
        ASSERT_GE(fd, 0) << std::strerror(errno);
        loom::Fibre(attr, echo_connection, fd, &echoed).detach();
      }
      io::close(l);
      client.join();
      while (echoed.load() < conns * bytes && WIFEXITED(status) && WEXITSTATUS(status) == 0) loom::this_fibre::sleep_for(1ms);
    }).join();
    // Let detached echo fibres finish before the cluster goes.
    while (server.impl().fibres.load() > 0) std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(echoed.load(), conns * bytes);
}

std::vector<EchoVariant> echo_variants() {
  std::vector<EchoVariant> v;
  // The figure for the default: 10,000 connections, 1 MiB each.
  v.push_back({loom::SchedConfig{}.poller, true, true, 10000, 1 << 20});
  for (auto p : {loom::PollerKind::fibre, loom::PollerKind::loop, loom::PollerKind::loop_sleep,
                 loom::PollerKind::opportunistic, loom::PollerKind::opportunistic_timeout})
    for (bool lazy : {true, false})
      for (bool ybr : {true, false}) v.push_back({p, lazy, ybr, 10000, 64 << 10});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Io, Echo, ::testing::ValuesIn(echo_variants()),
                         [](const auto& info) { return name_of(info.param); });

}  // namespace
