// io_loom — the I/O benchmark's echo server (io_common.hpp) on loom: one
// fibre per connection, written as blocking code with loom::io.
//
// An acceptor fibre (in the cluster's background queue by default, so that
// connection fibres that are ready run first; --acceptor normal puts it in
// the ordinary queue) loops on loom::io::accept4 and starts one detached
// fibre per connection; that fibre reads up to --buffer bytes into a buffer
// on its own stack, writes them all back, and closes on EOF or error. main
// (a fibre on processor 0 of the default cluster) serves the driver's stdin
// through loom::io::read, so the server is nothing but fibres.
//
// The scheduler and I/O variants come from LOOM_* variables (config.hpp):
// LOOM_POLLER, LOOM_POLLER_SLEEP, LOOM_LAZY_REGISTER, LOOM_YIELD_BEFORE_READ,
// LOOM_WAIT_FIRST,
// and the default cluster's size from LOOM_PROCESSORS or the affinity mask
// (taskset -c 1: one processor). The row's variant names every setting that
// differs from the default ("" for the default configuration).
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "io_common.hpp"
#include "loom/io.hpp"
#include "loom/loom.hpp"
#include "loom_variant.hpp"

namespace {

std::size_t g_buffer = 16384;
bool g_background_acceptor = true;
std::uint64_t g_accepted = 0;  // the acceptor fibre's own counter
std::uint64_t g_accept_errors = 0;

std::string io_variant(const loom::SchedConfig& c) {
  const loom::SchedConfig d;
  std::string v = bench::loom_variant(c);
  auto add = [&v](const std::string& kv) {
    std::string key = kv.substr(0, kv.find('=') + 1);
    if (v.find(key) == std::string::npos) v += (v.empty() ? "" : " ") + kv;  // loom_variant may name it already
  };
  if (c.poller != d.poller) add(std::string("poller=") + loom::to_string(c.poller));
  if (c.poller_sleep_us != d.poller_sleep_us) add("poller_sleep_us=" + std::to_string(c.poller_sleep_us));
  if (c.lazy_register != d.lazy_register) add(std::string("lazy_register=") + (c.lazy_register ? "on" : "off"));
  if (c.yield_before_read != d.yield_before_read)
    add(std::string("yield_before_read=") + (c.yield_before_read ? "on" : "off"));
  if (c.wait_first != d.wait_first) add(std::string("wait_first=") + (c.wait_first ? "on" : "off"));
  if (c.io != d.io) add(std::string("io=") + loom::to_string(c.io));
  if (!g_background_acceptor) add("acceptor=normal");
  return v;
}

void connection(int fd) {
  char* buf = static_cast<char*>(__builtin_alloca(g_buffer));
  for (;;) {
    ssize_t n = loom::io::read(fd, buf, g_buffer);
    if (n > 0) {
      const char* p = buf;
      std::size_t left = static_cast<std::size_t>(n);
      while (left > 0) {
        ssize_t w = loom::io::write(fd, p, left);
        if (w < 0) {
          if (errno == EINTR) continue;
          goto done;
        }
        p += w;
        left -= static_cast<std::size_t>(w);
      }
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // EOF or error
    }
  }
done:
  loom::io::close(fd);
}

void acceptor(int lfd) {
  loom::FibreAttr attr;
  // Room for the buffer on top of the default stack's own needs.
  if (g_buffer + 16 * 1024 > loom::kStackDefault) attr.stack_size = g_buffer + 32 * 1024;
  for (;;) {
    int fd = loom::io::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      ++g_accept_errors;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        loom::this_fibre::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    ++g_accepted;
    iobench::set_nodelay(fd);
    loom::Fibre(attr, connection, fd).detach();
  }
}

// main's loop: "stats" lines on stdin, EOF = exit.
[[noreturn]] void monitor() {
  std::string line;
  char c;
  for (;;) {
    ssize_t n = loom::io::read(0, &c, 1);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      std::fflush(stdout);
      std::_Exit(0);
    }
    if (c != '\n') {
      line += c;
      continue;
    }
    if (line == "stats") {
      const loom::io::Stats s = loom::io::stats();
      const loom::ClusterStats cs = loom::Cluster::current().stats();
      bench::Json j;
      j.add("accepted", g_accepted)
          .add("accept_errors", g_accept_errors)
          .add("registrations", static_cast<std::uint64_t>(s.registrations))
          .add("blocks", static_cast<std::uint64_t>(s.blocks))
          .add("polls", static_cast<std::uint64_t>(s.polls))
          .add("events", static_cast<std::uint64_t>(s.events))
          .add("sleeps", static_cast<std::uint64_t>(cs.sleeps))
          .add("wakes", static_cast<std::uint64_t>(cs.wakes));
      j.print();
    }
    line.clear();
  }
}

}  // namespace

int main(int argc, char** argv) {
  iobench::ServerOptions o = iobench::parse_server(
      "io_loom", argc, argv,
      "  --acceptor background|normal  queue of the acceptor fibre (default background)\n"
      "One loom fibre per connection, loom::io calls; variants from LOOM_* variables (loom/config.hpp).\n",
      [](const std::string& flag, bench::ArgWalker& w) {
        if (flag != "--acceptor") return false;
        std::string v = w.value();
        if (v == "background")
          g_background_acceptor = true;
        else if (v == "normal")
          g_background_acceptor = false;
        else
          bench::usage_error("io_loom", "bad value '" + v + "' for --acceptor (want background or normal)");
        return true;
      });
  g_buffer = o.buffer;
  iobench::raise_nofile();

  int lfd = loom::io::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  loom::io::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = iobench::loopback(o.port);
  if (lfd < 0 || loom::io::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      loom::io::listen(lfd, o.backlog) != 0) {
    std::perror("io_loom: listen");
    return 1;
  }
  iobench::print_listening(iobench::bound_port(lfd), "loom", io_variant(loom::SchedConfig::from_env()));

  loom::FibreAttr attr;
  attr.background = g_background_acceptor;
  attr.name = "acceptor";
  loom::Fibre(attr, acceptor, lfd).detach();
  monitor();
}
