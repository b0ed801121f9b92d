// epoll_echo — the I/O benchmark's hand-written event-loop peer: the echo
// server of apps/bench/io_common.hpp as one thread running one
// edge-triggered epoll loop over non-blocking sockets. It is meant to be
// the honest lower bound for a server's CPU per request on this kernel, so
// it does what a careful event loop does and nothing more:
//
//   - listener and connections in one epoll set, EPOLLET; accept4 with
//     SOCK_NONBLOCK until EAGAIN on every listener event;
//   - a connection is registered once, at accept, for EPOLLIN | EPOLLRDHUP;
//     EPOLLOUT is added (EPOLL_CTL_MOD) only while a reply could not be
//     written in full, and dropped when it has been;
//   - input is read into one buffer shared by all connections (--buffer
//     bytes) and written back at once; only the part a full socket did not
//     take is copied into a per-connection buffer, and that connection
//     reads no more until it has drained (back pressure, as a blocking
//     writer gets);
//   - reading stops at a short read: for a stream socket it means the
//     receive queue was empty, and the next arrival raises a new edge
//     (epoll(7)), so no read is spent on EAGAIN — unless the event says the
//     peer half-closed (EPOLLRDHUP), when it reads on to the EOF;
//   - close() without EPOLL_CTL_DEL (closing the last descriptor of the
//     file removes it from the set);
//   - SIGPIPE ignored, as in every server (loom does the same by default).
//
// Same command line and driver protocol as io_loom and io_pthread (see
// apps/bench/io_common.hpp): --port, --buffer, --backlog; one JSON line
// {"listening":PORT,...} on stdout; "stats" on stdin prints counters, EOF
// on stdin ends it. stdin is in the same epoll set (level-triggered).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

struct Conn {
  std::unique_ptr<char[]> pending;  // bytes a full socket did not take
  std::uint32_t off = 0, len = 0;   // pending[off, len)
  bool open = false;
  bool want_out = false;  // EPOLLOUT in the registration
};

struct Server {
  int ep = -1;
  int lfd = -1;
  std::size_t bufsize = 16384;
  std::unique_ptr<char[]> buf;
  std::vector<Conn> conns;  // indexed by fd
  bool listener_stalled = false;  // accept4 hit a resource limit: retry on a timer
  std::uint64_t accepted = 0, accept_errors = 0, epoll_waits = 0, events = 0, reads = 0, writes = 0,
                partial_writes = 0;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr, "epoll_echo: %s (try --help)\n", msg);
  std::exit(2);
}

long parse_num(const char* flag, const char* s, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  long v = (s && *s) ? std::strtol(s, &end, 10) : 0;
  if (!s || !*s || *end != '\0' || errno != 0 || v < lo || v > hi)
    usage((std::string("bad value '") + (s ? s : "") + "' for " + flag + " (" + std::to_string(lo) + " to " +
           std::to_string(hi) + ")")
              .c_str());
  return v;
}

void set_events(Server& s, int fd, bool out) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET | (out ? EPOLLOUT : 0u);
  ev.data.fd = fd;
  epoll_ctl(s.ep, EPOLL_CTL_MOD, fd, &ev);
  s.conns[fd].want_out = out;
}

void close_conn(Server& s, int fd) {
  Conn& c = s.conns[fd];
  c.pending.reset();
  c.off = c.len = 0;
  c.open = false;
  c.want_out = false;
  ::close(fd);
}

// Writes what is pending: 1 when nothing is left, 0 when the socket is full
// again, -1 on an error.
int flush(Server& s, int fd) {
  Conn& c = s.conns[fd];
  while (c.off < c.len) {
    ssize_t w = ::write(fd, c.pending.get() + c.off, c.len - c.off);
    ++s.writes;
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN ? 0 : -1;
    }
    c.off += static_cast<std::uint32_t>(w);
  }
  c.off = c.len = 0;
  return 1;
}

// Reads and echoes until the input is exhausted, the peer is gone, or a reply
// could not be written in full. Returns false when the connection was closed.
bool serve(Server& s, int fd, bool rdhup) {
  Conn& c = s.conns[fd];
  for (;;) {
    ssize_t n = ::read(fd, s.buf.get(), s.bufsize);
    ++s.reads;
    if (n > 0) {
      std::size_t done = 0;
      while (done < static_cast<std::size_t>(n)) {
        ssize_t w = ::write(fd, s.buf.get() + done, static_cast<std::size_t>(n) - done);
        ++s.writes;
        if (w < 0) {
          if (errno == EINTR) continue;
          if (errno != EAGAIN) {
            close_conn(s, fd);
            return false;
          }
          break;
        }
        done += static_cast<std::size_t>(w);
      }
      if (done < static_cast<std::size_t>(n)) {
        // The socket is full: keep the rest and wait for EPOLLOUT. Input may
        // be left in the socket; it is read after the drain.
        ++s.partial_writes;
        std::size_t rest = static_cast<std::size_t>(n) - done;
        if (!c.pending) c.pending.reset(new char[s.bufsize]);
        std::memcpy(c.pending.get(), s.buf.get() + done, rest);
        c.off = 0;
        c.len = static_cast<std::uint32_t>(rest);
        if (!c.want_out) set_events(s, fd, true);
        return true;
      }
      if (static_cast<std::size_t>(n) < s.bufsize && !rdhup) return true;  // queue empty; next data = new edge
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    close_conn(s, fd);  // EOF or error
    return false;
  }
}

void accept_all(Server& s) {
  for (;;) {
    int fd = ::accept4(s.lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN) return;
      ++s.accept_errors;
      // EMFILE and the like: the pending connections raise no new edge, so
      // the loop retries on a 1 ms timeout until accept4 works again.
      s.listener_stalled = true;
      return;
    }
    ++s.accepted;
    if (static_cast<std::size_t>(fd) >= s.conns.size()) s.conns.resize(static_cast<std::size_t>(fd) * 2 + 1);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Conn& c = s.conns[fd];
    c.open = true;
    c.off = c.len = 0;
    c.want_out = false;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.fd = fd;
    if (epoll_ctl(s.ep, EPOLL_CTL_ADD, fd, &ev) != 0) close_conn(s, fd);
  }
}

void print_stats(const Server& s) {
  std::printf(
      "{\"accepted\":%llu,\"accept_errors\":%llu,\"epoll_waits\":%llu,\"events\":%llu,\"reads\":%llu,"
      "\"writes\":%llu,\"partial_writes\":%llu}\n",
      (unsigned long long)s.accepted, (unsigned long long)s.accept_errors, (unsigned long long)s.epoll_waits,
      (unsigned long long)s.events, (unsigned long long)s.reads, (unsigned long long)s.writes,
      (unsigned long long)s.partial_writes);
  std::fflush(stdout);
}

// stdin: "stats" lines; false at EOF.
bool serve_stdin(const Server& s, std::string& line) {
  char tmp[256];
  ssize_t n = ::read(0, tmp, sizeof tmp);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  for (ssize_t i = 0; i < n; ++i) {
    if (tmp[i] != '\n') {
      line += tmp[i];
      continue;
    }
    if (line == "stats") print_stats(s);
    line.clear();
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0, backlog = 4096;
  std::size_t bufsize = 16384;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string v;
    auto eq = a.find('=');
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: epoll_echo [--port N] [--buffer BYTES] [--backlog N]\n"
          "One-thread edge-triggered epoll echo server on 127.0.0.1 (scripts/bench io's peer).\n"
          "  --port N        default 0: any free port (printed on stdout)\n"
          "  --buffer BYTES  read size (default 16384)\n"
          "  --backlog N     listen backlog (default 4096)\n"
          "stdin: a line \"stats\" prints counters as JSON; EOF ends the server.\n");
      return 0;
    }
    if (eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (a.rfind("--", 0) == 0) {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      v = argv[++i];
    }
    if (a == "--port")
      port = static_cast<int>(parse_num("--port", v.c_str(), 0, 65535));
    else if (a == "--buffer")
      bufsize = static_cast<std::size_t>(parse_num("--buffer", v.c_str(), 1, 1 << 20));
    else if (a == "--backlog")
      backlog = static_cast<int>(parse_num("--backlog", v.c_str(), 1, 65535));
    else
      usage(("unknown flag '" + a + "'").c_str());
  }

  std::signal(SIGPIPE, SIG_IGN);  // a write to a reset peer fails with EPIPE instead
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }

  Server s;
  s.bufsize = bufsize;
  s.buf.reset(new char[bufsize]);
  s.conns.resize(1024);
  s.lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(s.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (s.lfd < 0 || bind(s.lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(s.lfd, backlog) != 0) {
    std::perror("epoll_echo: listen");
    return 1;
  }
  socklen_t len = sizeof addr;
  getsockname(s.lfd, reinterpret_cast<sockaddr*>(&addr), &len);

  s.ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.fd = s.lfd;
  epoll_ctl(s.ep, EPOLL_CTL_ADD, s.lfd, &ev);
  ev.events = EPOLLIN;  // stdin: the driver's control pipe, level-triggered
  ev.data.fd = 0;
  epoll_ctl(s.ep, EPOLL_CTL_ADD, 0, &ev);

  std::printf("{\"listening\":%d,\"pid\":%d,\"system\":\"epoll\",\"variant\":\"\"}\n", ntohs(addr.sin_port),
              static_cast<int>(getpid()));
  std::fflush(stdout);

  std::string line;
  constexpr int kEvents = 256;
  epoll_event evs[kEvents];
  for (;;) {
    int n = epoll_wait(s.ep, evs, kEvents, s.listener_stalled ? 1 : -1);
    ++s.epoll_waits;
    if (n < 0) {
      if (errno == EINTR) continue;
      std::perror("epoll_echo: epoll_wait");
      return 1;
    }
    if (s.listener_stalled) {
      s.listener_stalled = false;
      accept_all(s);
    }
    s.events += static_cast<std::uint64_t>(n);
    for (int i = 0; i < n; ++i) {
      const int fd = evs[i].data.fd;
      const std::uint32_t e = evs[i].events;
      if (fd == s.lfd) {
        accept_all(s);
        continue;
      }
      if (fd == 0) {
        if (!serve_stdin(s, line)) return 0;
        continue;
      }
      Conn& c = s.conns[fd];
      if (!c.open) continue;  // closed earlier in this batch
      if (c.len > 0) {
        // Waiting to drain: only EPOLLOUT (or an error) moves it on.
        if (!(e & (EPOLLOUT | EPOLLERR | EPOLLHUP))) continue;
        int f = flush(s, fd);
        if (f < 0) {
          close_conn(s, fd);
          continue;
        }
        if (f == 0) continue;
        set_events(s, fd, false);
        // Drained: read what arrived meanwhile (no new edge may come for it).
        serve(s, fd, true);
        continue;
      }
      if (e & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) serve(s, fd, (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0);
    }
  }
}
