// io_client — the load generator of scripts/bench io: one kernel thread, one
// level/edge-triggered epoll loop, N connections to an echo server on
// 127.0.0.1 (io_loom, io_pthread, epoll_echo; io_common.hpp). The driver pins
// it to CPU 0 and the server to CPU 1.
//
//   --mode pingpong  N connections; each sends one --size-byte message
//                    (64), waits for its whole echo, checks it, sends the
//                    next. One request = one message echoed.
//   --mode stream    N connections; each keeps up to --window chunks of
//                    --size bytes (16384) in flight, writing whenever the
//                    window has room and reading whatever comes back; the
//                    stream's bytes follow a pattern checked at both ends of
//                    every read. One request = --size bytes echoed.
//   --mode short     N connections in flight at any time; each: non-blocking
//                    connect, one --size-byte message written at once (or at
//                    EPOLLOUT if the connect is still in progress), shutdown(SHUT_WR)
//                    (the server's next read sees EOF: one request per
//                    connection), read the echo, close with SO_LINGER 0 (an
//                    RST, so no TIME_WAIT piles up on either side), and a new
//                    connection takes its place. One request = one
//                    connection served; latency from connect to the echo.
//
// Window: --warmup seconds of load first (1), then --duration seconds (10)
// measured; the load stops by itself. At the window's two edges the client
// samples its own counters, its CPU (CLOCK_PROCESS_CPUTIME_ID), the machine's
// CPU (/proc/stat) and, with --server-pid, the server's CPU: utime + stime
// from /proc/PID/stat (ticks) and the same sum at ns resolution from the
// process's CPU clock (clock_getcpuclockid), which is the figure used when
// it is available. Output: one JSON line (see the keys at the end of main).
// Exit status 0 when the run was clean, 1 when any request failed (errors are
// counted and reported in the row too), 2 for a bad command line.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "io_common.hpp"

namespace {

using bench::now_ns;

enum class Mode { pingpong, stream, short_conn };

struct Options {
  Mode mode = Mode::pingpong;
  int port = 0;
  unsigned connections = 100;
  std::size_t size = 0;  // 0: the mode's default
  unsigned window = 4;
  double warmup_s = 1.0;
  double duration_s = 10.0;
  int server_pid = 0;
};

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::pingpong:
      return "pingpong";
    case Mode::stream:
      return "stream";
    case Mode::short_conn:
      return "short";
  }
  return "?";
}

// ---- CPU figures -------------------------------------------------------------

double own_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// utime + stime of pid from /proc/PID/stat, in seconds; < 0 if unreadable.
double proc_cpu_s(int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  std::ifstream f(path);
  std::string s;
  if (!std::getline(f, s)) return -1;
  std::size_t p = s.rfind(')');  // comm may hold spaces
  if (p == std::string::npos) return -1;
  std::istringstream in(s.substr(p + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  // After comm: state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt
  // majflt cmajflt utime(14) stime(15).
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The server's whole CPU time (every thread, dead ones included) at ns
// resolution; < 0 if the clock is not available.
double clock_cpu_s(clockid_t id, bool ok) {
  if (!ok) return -1;
  timespec ts{};
  if (clock_gettime(id, &ts) != 0) return -1;
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

long rss_kib(int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/status", pid);
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

// The machine's busy CPU time (all CPUs) so far, in seconds, from /proc/stat.
double machine_busy_s() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  unsigned long long v[10] = {};
  if (!(f >> cpu)) return -1;
  for (auto& x : v) f >> x;
  // user nice system idle iowait irq softirq steal guest guest_nice; guest
  // time is already inside user.
  unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  return static_cast<double>(busy) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// ---- latency histogram: 16 sub-buckets per power of two (~6 % wide) ----------

class Histogram {
 public:
  void add(std::uint64_t ns) {
    ++buckets_[index(ns)];
    ++n_;
  }
  std::uint64_t count() const { return n_; }
  double percentile_us(double p) const {
    if (n_ == 0) return -1;
    std::uint64_t target = static_cast<std::uint64_t>(p / 100.0 * static_cast<double>(n_ - 1)) + 1, seen = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      seen += buckets_[i];
      if (seen >= target) return midpoint(i) / 1000.0;
    }
    return midpoint(kBuckets - 1) / 1000.0;
  }
  void clear() {
    std::fill(std::begin(buckets_), std::end(buckets_), 0);
    n_ = 0;
  }

 private:
  static constexpr std::size_t kBuckets = 64 * 16;
  static std::size_t index(std::uint64_t ns) {
    if (ns < 16) return static_cast<std::size_t>(ns);
    int msb = 63 - __builtin_clzll(ns);
    return static_cast<std::size_t>((msb - 3) * 16 + ((ns >> (msb - 4)) & 15));
  }
  static double midpoint(std::size_t i) {
    if (i < 16) return static_cast<double>(i);
    int msb = static_cast<int>(i / 16) + 3;
    double lo = std::ldexp(16.0 + static_cast<double>(i % 16), msb - 4);
    return lo + std::ldexp(0.5, msb - 4);
  }
  std::uint64_t buckets_[kBuckets] = {};
  std::uint64_t n_ = 0;
};

// ---- the load ------------------------------------------------------------------

struct Conn {
  int fd = -1;
  std::uint32_t got = 0;     // pingpong/short: bytes of the echo so far
  std::uint64_t t0 = 0;      // when the request (short: the connect) started
  std::uint64_t sent = 0;    // stream: bytes written
  std::uint64_t recvd = 0;   // stream: bytes read back
  bool connected = false;    // short: request written
};

struct Counters {
  std::uint64_t requests = 0;
  std::uint64_t bytes = 0;
  std::uint64_t errors = 0;          // requests that failed (reset, EOF early, bad echo)
  std::uint64_t connect_errors = 0;  // connect failed (short mode retries)
  std::uint64_t verify_errors = 0;   // echoed bytes differ from what was sent
};

class Client {
 public:
  explicit Client(const Options& o) : o_(o) {
    size_ = o.size ? o.size : (o.mode == Mode::stream ? 16384 : 64);
    msg_.resize(size_);
    for (std::size_t i = 0; i < size_; ++i) msg_[i] = static_cast<char>('a' + i % 26);
    if (o.mode == Mode::stream) {
      wbuf_.resize(size_ + kPattern);
      for (std::size_t i = 0; i < wbuf_.size(); ++i) wbuf_[i] = static_cast<char>(i % kPattern);
      rbuf_.resize(std::max<std::size_t>(64 * 1024, size_));
    }
    addr_ = iobench::loopback(o.port);
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    conns_.resize(1024);
  }

  int run();

 private:
  static constexpr std::size_t kPattern = 251;  // stream byte at offset o is o % 251

  Conn& at(int fd) {
    if (static_cast<std::size_t>(fd) >= conns_.size()) conns_.resize(static_cast<std::size_t>(fd) * 2 + 1);
    return conns_[fd];
  }
  void drop(int fd) {
    linger l{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::close(fd);
    at(fd) = Conn{};
  }
  bool open_persistent();
  void on_pingpong(int fd);
  void on_stream(int fd);
  void short_start();
  void short_event(int fd, std::uint32_t ev);
  void short_send(int fd);

  const Options o_;
  std::size_t size_;
  std::string msg_, wbuf_, rbuf_;
  sockaddr_in addr_;
  int ep_;
  std::vector<Conn> conns_;
  unsigned live_ = 0;       // connections open (short: in flight)
  unsigned to_start_ = 0;   // short: slots waiting for a new connection
  std::uint64_t retry_at_ = 0;  // short: when to try them again
  bool measuring_ = false;
  Counters c_;
  Histogram lat_;
  char small_[4096];
};

bool Client::open_persistent() {
  for (unsigned i = 0; i < o_.connections; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&addr_), sizeof addr_) != 0) {
      std::fprintf(stderr, "io_client: connection %u of %u: %s\n", i + 1, o_.connections, std::strerror(errno));
      return false;
    }
    iobench::set_nodelay(fd);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    Conn& c = at(fd);
    c = Conn{};
    c.fd = fd;
    epoll_event ev{};
    // pingpong: level-triggered input (one read per echo, no drain-to-EAGAIN);
    // stream: edge-triggered in and out, drained each time.
    ev.events = o_.mode == Mode::stream ? (EPOLLIN | EPOLLOUT | EPOLLET) : EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
    ++live_;
  }
  return true;
}

void Client::on_pingpong(int fd) {
  Conn& c = at(fd);
  if (c.fd < 0) return;
  // Each read is checked against the part of the message it should hold, so
  // one scratch buffer serves every connection even if an echo comes in
  // pieces.
  ssize_t n = ::read(fd, small_, size_ - c.got);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    ++c_.errors;
    drop(fd);
    --live_;
    return;
  }
  if (std::memcmp(small_, msg_.data() + c.got, static_cast<std::size_t>(n)) != 0) ++c_.verify_errors;
  c.got += static_cast<std::uint32_t>(n);
  if (c.got < size_) return;  // the rest comes with the next event (rare)
  const std::uint64_t now = now_ns();
  if (measuring_) {
    ++c_.requests;
    lat_.add(now - c.t0);
  }
  c.got = 0;
  c.t0 = now;
  ssize_t w = ::write(fd, msg_.data(), size_);
  if (w != static_cast<ssize_t>(size_)) {
    ++c_.errors;
    drop(fd);
    --live_;
  }
}

void Client::on_stream(int fd) {
  Conn& c = at(fd);
  if (c.fd < 0) return;
  const std::uint64_t win = static_cast<std::uint64_t>(o_.window) * size_;
  for (;;) {
    ssize_t n = ::read(fd, rbuf_.data(), rbuf_.size());
    if (n > 0) {
      if (static_cast<unsigned char>(rbuf_[0]) != c.recvd % kPattern ||
          static_cast<unsigned char>(rbuf_[n - 1]) != (c.recvd + n - 1) % kPattern)
        ++c_.verify_errors;
      c.recvd += static_cast<std::uint64_t>(n);
      if (measuring_) c_.bytes += static_cast<std::uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    ++c_.errors;
    drop(fd);
    --live_;
    return;
  }
  while (c.sent - c.recvd < win) {
    std::size_t len = std::min<std::uint64_t>(size_, win - (c.sent - c.recvd));
    ssize_t w = ::write(fd, wbuf_.data() + c.sent % kPattern, len);
    if (w > 0) {
      c.sent += static_cast<std::uint64_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) break;
    ++c_.errors;
    drop(fd);
    --live_;
    return;
  }
}

void Client::short_start() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ++c_.connect_errors;
    if (to_start_++ == 0) retry_at_ = now_ns() + 1000000;
    return;
  }
  const std::uint64_t t0 = now_ns();
  int r = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr_), sizeof addr_);
  if (r != 0 && errno != EINPROGRESS) {
    ++c_.connect_errors;  // e.g. EADDRNOTAVAIL: no free port; retried 1 ms later
    ::close(fd);
    if (to_start_++ == 0) retry_at_ = now_ns() + 1000000;
    return;
  }
  Conn& c = at(fd);
  c = Conn{};
  c.fd = fd;
  c.t0 = t0;
  ++live_;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
  ev.data.fd = fd;
  epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
  // On loopback the handshake has normally completed by the time connect()
  // returns EINPROGRESS: the request goes out at once, as a client that
  // writes right after connecting does. If the socket is not connected yet
  // the write fails with EAGAIN and EPOLLOUT sends it.
  short_send(fd);
}

void Client::short_send(int fd) {
  Conn& c = at(fd);
  ssize_t w = ::write(fd, msg_.data(), size_);
  if (w < 0 && (errno == EAGAIN || errno == ENOTCONN)) return;  // still connecting: EPOLLOUT follows
  if (w != static_cast<ssize_t>(size_)) {
    if (w < 0 && errno == ECONNREFUSED) ++c_.connect_errors; else ++c_.errors;
    drop(fd);
    --live_;
    short_start();
    return;
  }
  ::shutdown(fd, SHUT_WR);
  c.connected = true;
}

void Client::short_event(int fd, std::uint32_t ev) {
  Conn& c = at(fd);
  if (c.fd < 0) return;
  if (!c.connected) {
    if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) short_send(fd);
    return;
  }
  for (;;) {
    ssize_t n = ::read(fd, small_, size_ - c.got);
    if (n > 0) {
      if (std::memcmp(small_, msg_.data() + c.got, static_cast<std::size_t>(n)) != 0) ++c_.verify_errors;
      c.got += static_cast<std::uint32_t>(n);
      if (c.got < size_) continue;
      if (measuring_) {
        ++c_.requests;
        lat_.add(now_ns() - c.t0);
      }
      break;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    ++c_.errors;  // EOF or reset before the whole echo
    break;
  }
  drop(fd);
  --live_;
  short_start();
}

struct Snapshot {
  std::uint64_t t_ns;
  Counters c;
  double own_cpu, server_proc, server_clock, machine_busy;
};

int Client::run() {
  clockid_t server_clock{};
  bool have_clock = o_.server_pid > 0 && clock_getcpuclockid(o_.server_pid, &server_clock) == 0;
  auto snap = [&] {
    Snapshot s;
    s.t_ns = now_ns();
    s.c = c_;
    s.own_cpu = own_cpu_s();
    s.server_proc = o_.server_pid > 0 ? proc_cpu_s(o_.server_pid) : -1;
    s.server_clock = clock_cpu_s(server_clock, have_clock);
    s.machine_busy = machine_busy_s();
    return s;
  };

  const std::uint64_t t_setup = now_ns();
  if (o_.mode == Mode::short_conn) {
    for (unsigned i = 0; i < o_.connections; ++i) short_start();
  } else {
    if (!open_persistent()) return 1;
    for (int fd = 0; fd < static_cast<int>(conns_.size()); ++fd) {
      Conn& c = conns_[fd];
      if (c.fd < 0) continue;
      if (o_.mode == Mode::pingpong) {
        c.t0 = now_ns();
        if (::write(fd, msg_.data(), size_) != static_cast<ssize_t>(size_)) {
          ++c_.errors;
          drop(fd);
          --live_;
        }
      } else {
        on_stream(fd);
      }
    }
  }
  const double setup_s = (now_ns() - t_setup) / 1e9;

  const std::uint64_t start = now_ns();
  const std::uint64_t window_open = start + static_cast<std::uint64_t>(o_.warmup_s * 1e9);
  const std::uint64_t window_close = window_open + static_cast<std::uint64_t>(o_.duration_s * 1e9);
  Snapshot a{}, b{};
  std::vector<epoll_event> evs(512);
  for (;;) {
    const std::uint64_t now = now_ns();
    if (!measuring_ && now >= window_open) {
      a = snap();
      lat_.clear();
      measuring_ = true;
    }
    if (measuring_ && now >= window_close) {
      b = snap();
      break;
    }
    if (live_ == 0 && to_start_ == 0) {
      std::fprintf(stderr, "io_client: every connection failed\n");
      break;
    }
    int timeout = to_start_ ? 1 : 50;
    int n = epoll_wait(ep_, evs.data(), static_cast<int>(evs.size()), timeout);
    if (n < 0 && errno != EINTR) {
      std::perror("io_client: epoll_wait");
      return 1;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = evs[i].data.fd;
      switch (o_.mode) {
        case Mode::pingpong:
          on_pingpong(fd);
          break;
        case Mode::stream:
          on_stream(fd);
          break;
        case Mode::short_conn:
          short_event(fd, evs[i].events);
          break;
      }
    }
    if (to_start_ && now_ns() >= retry_at_) {
      unsigned k = to_start_;
      to_start_ = 0;
      for (unsigned i = 0; i < k; ++i) short_start();
    }
  }
  const long server_rss = o_.server_pid > 0 ? rss_kib(o_.server_pid) : -1;
  for (int fd = 0; fd < static_cast<int>(conns_.size()); ++fd)
    if (conns_[fd].fd >= 0) drop(fd);

  const bool window_ok = measuring_ && b.t_ns > a.t_ns;
  const double secs = window_ok ? (b.t_ns - a.t_ns) / 1e9 : 0;
  const std::uint64_t requests = window_ok ? (o_.mode == Mode::stream ? (b.c.bytes - a.c.bytes) / size_
                                                                      : b.c.requests - a.c.requests)
                                           : 0;
  const double own = window_ok ? b.own_cpu - a.own_cpu : -1;
  const double sproc = (window_ok && a.server_proc >= 0 && b.server_proc >= 0) ? b.server_proc - a.server_proc : -1;
  const double sclock =
      (window_ok && a.server_clock >= 0 && b.server_clock >= 0) ? b.server_clock - a.server_clock : -1;
  const double server = sclock >= 0 ? sclock : sproc;
  const double busy = (window_ok && a.machine_busy >= 0) ? b.machine_busy - a.machine_busy : -1;

  bench::Json j;
  j.add("mode", mode_name(o_.mode))
      .add("connections", o_.connections)
      .add("message_bytes", static_cast<std::uint64_t>(size_));
  if (o_.mode == Mode::stream) j.add("window_chunks", o_.window);
  j.add("requests", requests)
      .add("requests_per_s", secs > 0 ? requests / secs : 0.0)
      .add("window_s", secs)
      .add("warmup_s", o_.warmup_s)
      .add("setup_s", setup_s);
  if (o_.mode == Mode::stream) j.add("bytes_per_s", secs > 0 ? (b.c.bytes - a.c.bytes) / secs : 0.0);
  if (o_.mode != Mode::stream && lat_.count() > 0) {
    j.add("latency_p50_us", lat_.percentile_us(50))
        .add("latency_p99_us", lat_.percentile_us(99))
        .add("latency_p999_us", lat_.percentile_us(99.9));
  }
  if (server >= 0 && requests > 0) {
    j.add("server_cpu_s", server)
        .add("server_cpu_us_per_req", server * 1e6 / requests)
        .add("server_cpu_util", server / secs)
        .add("server_cpu_source", sclock >= 0 ? "clock_getcpuclockid" : "/proc/PID/stat");
    if (sproc >= 0) j.add("server_cpu_s_proc", sproc);
  }
  if (server_rss >= 0) j.add("server_rss_kib", static_cast<std::uint64_t>(server_rss));
  if (own >= 0 && requests > 0)
    j.add("client_cpu_us_per_req", own * 1e6 / requests).add("client_cpu_util", own / secs);
  if (busy >= 0 && secs > 0) {
    // The CPU the rest of the machine took meanwhile (other processes,
    // interrupts charged to none): the disturbance of this run.
    double others = (busy - own - std::max(0.0, server)) / secs;
    j.add("others_cpus", std::max(0.0, others));
  }
  if (secs > 0 && own >= 0 && server >= 0) {
    const bool s_sat = server / secs >= 0.9, c_sat = own / secs >= 0.9;
    j.add("saturated", s_sat && c_sat ? "both" : s_sat ? "server" : c_sat ? "client" : "neither");
  }
  const Counters d = window_ok ? Counters{b.c.requests - a.c.requests, b.c.bytes - a.c.bytes,
                                          b.c.errors - a.c.errors, b.c.connect_errors - a.c.connect_errors,
                                          b.c.verify_errors - a.c.verify_errors}
                               : c_;
  j.add("errors", d.errors)
      .add("connect_errors", d.connect_errors)
      .add("verify_errors", c_.verify_errors)
      .add("errors_total", c_.errors + c_.connect_errors)
      .add("cpus", bench::allowed_cpus());
  j.print();
  const bool clean = window_ok && requests > 0 && c_.errors == 0 && c_.verify_errors == 0;
  return clean ? 0 : 1;
}

Options parse(int argc, char** argv) {
  const char* prog = "io_client";
  Options o;
  bench::ArgWalker w(prog, argc, argv);
  bool have_port = false;
  while (const char* f = w.next()) {
    std::string flag = f;
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "usage: io_client --port N [--mode pingpong|stream|short] [--connections N] [--size BYTES]\n"
          "                 [--window CHUNKS] [--warmup S] [--duration S] [--server-pid PID]\n"
          "Load for an echo server on 127.0.0.1 (scripts/bench io); prints one JSON line.\n"
          "  --mode M          pingpong (default): request/response of --size bytes on N connections;\n"
          "                    stream: --window chunks of --size bytes in flight per connection;\n"
          "                    short: N concurrent one-request connections (connect, request,\n"
          "                    half-close, echo, close), replaced as they finish\n"
          "  --connections N   default 100\n"
          "  --size BYTES      message (pingpong, short: 64) or chunk (stream: 16384) size\n"
          "  --window CHUNKS   stream: chunks in flight per connection (default 4)\n"
          "  --warmup S        load before the measured window (default 1)\n"
          "  --duration S      measured window (default 10)\n"
          "  --server-pid PID  the server, whose CPU and RSS are sampled at the window's edges\n");
      std::exit(0);
    } else if (flag == "--port") {
      std::uint64_t p = bench::parse_count(prog, "--port", w.value());
      if (p > 65535) bench::usage_error(prog, "bad value for --port (1 to 65535)");
      o.port = static_cast<int>(p);
      have_port = true;
    } else if (flag == "--mode") {
      std::string v = w.value();
      if (v == "pingpong")
        o.mode = Mode::pingpong;
      else if (v == "stream")
        o.mode = Mode::stream;
      else if (v == "short")
        o.mode = Mode::short_conn;
      else
        bench::usage_error(prog, "bad value '" + v + "' for --mode (want pingpong, stream or short)");
    } else if (flag == "--connections") {
      std::uint64_t n = bench::parse_count(prog, "--connections", w.value());
      if (n > 100000) bench::usage_error(prog, "bad value for --connections (at most 100000)");
      o.connections = static_cast<unsigned>(n);
    } else if (flag == "--size") {
      std::uint64_t n = bench::parse_count(prog, "--size", w.value());
      if (n > (1u << 20)) bench::usage_error(prog, "bad value for --size (at most 1 MiB)");
      o.size = static_cast<std::size_t>(n);
    } else if (flag == "--window") {
      std::uint64_t n = bench::parse_count(prog, "--window", w.value());
      if (n > 1024) bench::usage_error(prog, "bad value for --window (at most 1024)");
      o.window = static_cast<unsigned>(n);
    } else if (flag == "--warmup") {
      o.warmup_s = bench::parse_seconds(prog, "--warmup", w.value(), true);
    } else if (flag == "--duration") {
      o.duration_s = bench::parse_seconds(prog, "--duration", w.value(), false);
    } else if (flag == "--server-pid") {
      o.server_pid = static_cast<int>(bench::parse_count(prog, "--server-pid", w.value()));
    } else {
      bench::usage_error(prog, "unknown flag '" + flag + "'");
    }
  }
  if (!have_port) bench::usage_error(prog, "--port is required");
  if (o.mode != Mode::stream && o.size == 0) o.size = 64;
  if (o.mode != Mode::stream && o.size > 4096) bench::usage_error(prog, "--size above 4096 is for --mode stream");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  iobench::raise_nofile();
  Client c(o);
  return c.run();
}
