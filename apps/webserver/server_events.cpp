// server_events.cpp — --runtime=events: the web server as colored events
// (loom/color.hpp), libasync-smp's SWS style, on the same HTTP code as the
// fibre server (session.hpp).
//
// One color per connection: every step of a connection is a run-to-
// completion event of its color, so its steps never overlap and run in
// order, while different connections' events run on any processor of the
// cluster (colors move to idle processors: the cluster's color stealing,
// LOOM_COLOR_STEAL). A step does what it can without waiting — read what
// is there (the socket is non-blocking: SOCK_NONBLOCK, so loom::io's calls
// return EAGAIN rather than block), answer every complete request, write —
// and ends by arming a one-shot readiness callback (loom::io::when_ready)
// for the one direction it needs. The callback runs wherever the edge is
// delivered (a poller thread, the poller fibre, or a processor between two
// fibres) and only posts the connection's next event. Exactly one event of a
// connection is pending or running at any time, so a step owns the
// connection: no locks.
//
// Colors are numbered by descriptor (fd + 1, below 2^31 as loom/color.hpp
// asks of numbered colors): unique among open connections. A number's next
// connection may start while the last event of the previous one is still
// returning; sharing the color then only serialises the two.
//
// The acceptor is one fibre in the cluster's background queue, the fibre
// server's accept_loop (connection.hpp): the same admission (it accepts
// only when no event or fibre of the cluster is ready to run, so established
// connections are served before new ones are admitted), the same 503 beyond
// --max-connections and the same back-off when out of descriptors; it posts
// each new connection's first event. An acceptor made of events would be a
// second copy of that loop for no gain: accepting is a blocking loop by
// nature, and a fibre is what loom offers for that.
//
// Read timeouts: the ConnTable's ticker shuts an overdue connection down;
// the shutdown is an edge like any other (the callback fires, the read
// returns 0, the connection ends). Static files (--root): the file is
// opened and read in the event itself (no loom::offload: an event that
// blocks holds its processor's runner, and offload would migrate the
// runner fibre away from its processor); files in the page cache cost a
// system call, a cold disk stalls the processor for the read.
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <loom/color.hpp>
#include <loom/io.hpp>
#include <loom/loom.hpp>
#include <memory>
#include <new>
#include <string>

#include "io_loom.hpp"
#include "server.hpp"
#include "session.hpp"

namespace web {

namespace {

struct EventIo {
  static int socket(int d, int t, int p) { return loom::io::socket(d, t, p); }
  static int bind(int fd, const sockaddr* a, socklen_t n) { return loom::io::bind(fd, a, n); }
  static int listen(int fd, int backlog) { return loom::io::listen(fd, backlog); }
  // The listener blocks the acceptor fibre; connections are non-blocking.
  static int accept4(int l, int flags) { return loom::io::accept4(l, nullptr, nullptr, flags | SOCK_NONBLOCK); }
  static ssize_t pread(int fd, void* b, std::size_t n, off_t off) { return ::pread(fd, b, n, off); }
  static int close(int fd) { return loom::io::close(fd); }
  template <class F>
  static auto blocking(F&& f) -> decltype(std::forward<F>(f)()) {
    return std::forward<F>(f)();  // in the event (see the top of the file)
  }
  static void sleep_ms(int ms) { loom::this_fibre::sleep_for(std::chrono::milliseconds(ms)); }
  static bool spawn(ServerContext& ctx, int fd);
};

// Reads one event makes before it posts the rest of its work as a new one.
constexpr unsigned kReadsPerStep = 8;

class EventConn {
 public:
  // The connection's first event, posted by the acceptor.
  static void start(ServerContext& ctx, loom::Cluster* cluster, int fd) {
    auto* c = new EventConn(ctx, cluster, fd);
    loom::post(c->color_, &EventConn::on_event, c, cluster);
  }

 private:
  using Next = Session<EventIo>::Next;
  enum class Phase : std::uint8_t { serve, ending, lingering };

  EventConn(ServerContext& ctx, loom::Cluster* cluster, int fd)
      : s_(ctx, fd), cluster_(cluster), color_(static_cast<loom::Color>(fd) + 1) {}

  // The readiness callback: in the poller's context, short.
  static void on_ready(void* p) {
    auto* c = static_cast<EventConn*>(p);
    loom::post(c->color_, &EventConn::on_event, c, c->cluster_);
  }
  static void on_event(void* p) { static_cast<EventConn*>(p)->step(); }

  // One event: as far as the connection gets without waiting.
  void step() {
    if (phase_ == Phase::lingering) return linger();
    unsigned reads = 0;
    for (;;) {
      iovec iov[2];
      int cnt;
      bool armed = false;
      while ((cnt = s_.pending(iov)) > 0) {
        if (!armed) {  // as connection.hpp's flush: the peer must take it in time
          s_.arm();
          armed = true;
        }
        ssize_t n =
            cnt == 1 ? loom::io::write(s_.fd(), iov[0].iov_base, iov[0].iov_len) : loom::io::writev(s_.fd(), iov, cnt);
        if (n >= 0) {
          s_.wrote(static_cast<std::size_t>(n));
          continue;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return wait(POLLOUT);  // the next step arms a new deadline
        break;                                      // the peer is gone
      }
      if (cnt != 0) {
        s_.drop_output();
        return end(false);
      }
      if (phase_ == Phase::ending) return end(linger_);
      Next next = s_.advance();
      switch (next) {
        case Next::write:
          continue;
        case Next::read: {
          // A short read drained the socket: whatever arrives later raises
          // an edge, so wait for it rather than spend a read on EAGAIN.
          if (drained_) {
            drained_ = false;
            return wait(POLLIN);
          }
          // A peer that keeps sending (pipelining) must not keep the
          // processor's runner: after a few reads, the rest is a new event
          // of the color, behind the other colors' events.
          if (++reads > kReadsPerStep) return loom::post(color_, &EventConn::on_event, this, cluster_);
          s_.make_room();
          ssize_t n = loom::io::read(s_.fd(), s_.read_at(), s_.read_room());
          if (n > 0) {
            drained_ = !s_.did_read(static_cast<std::size_t>(n));
            continue;
          }
          if (n < 0 && errno == EINTR) continue;
          if (n < 0 && errno == EAGAIN) return wait(POLLIN);
          return end(false);  // EOF, error, or shut down by the ticker
        }
        case Next::close:
        case Next::linger:
          // The last answers go out first (the loop's top), then the end.
          phase_ = Phase::ending;
          linger_ = next == Next::linger;
          continue;
      }
    }
  }

  void end(bool linger) {
    if (!linger || s_.broken()) return finish();
    s_.start_linger();
    phase_ = Phase::lingering;
    this->linger();
  }

  // Reads what the peer still sends, bounded, until EOF (see session.hpp).
  void linger() {
    while (lingered_ < kMaxLingerBytes) {
      ssize_t n = loom::io::read(s_.fd(), s_.scratch(), s_.scratch_size());
      if (n > 0) {
        lingered_ += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return wait(POLLIN);
      break;
    }
    finish();
  }

  // The last thing a step does: the callback posts the next step (maybe at
  // once, from inside when_ready; it runs after this one returns).
  void wait(short direction) {
    if (loom::io::when_ready(s_.fd(), direction, &EventConn::on_ready, this) != 0) finish();
  }

  void finish() {
    s_.close();  // nothing is armed: this step runs because the last callback fired
    delete this;
  }

  Session<EventIo> s_;
  loom::Cluster* cluster_;
  loom::Color color_;
  Phase phase_ = Phase::serve;
  bool linger_ = false;
  bool drained_ = false;
  std::size_t lingered_ = 0;
};

bool EventIo::spawn(ServerContext& ctx, int fd) {
  try {
    EventConn::start(ctx, &loom::Cluster::current(), fd);
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

}  // namespace

int run_events(const Options& o) {
  std::size_t nofile = setup_process();
  // Everything here lives for the life of the process (events and the
  // acceptor use it; main never returns).
  auto* ctx = new ServerContext;
  if (!o.root.empty()) {
    std::unique_ptr<StaticRoot> root(new StaticRoot(o.root));
    if (!root->ok()) {
      std::fprintf(stderr, "webserver: --root %s\n", root->error().c_str());
      delete ctx;
      return 2;
    }
    ctx->root = root.release();
  }
  fill_context(*ctx, o, nofile);
  ctx->table = new ConnTable(nofile);

  loom::SchedConfig cfg = sched_config(o);
  unsigned processors = processor_count(o);
  std::string err;
  int l = open_listener<EventIo>(o, o.port, false, err);
  if (l < 0) {
    std::fprintf(stderr, "webserver: %s\n", err.c_str());
    return 1;
  }
  auto* cluster = new loom::Cluster(processors, cfg);
  new Ticker(ctx->table, tick_for(o.read_timeout));

  loom::FibreAttr a;
  a.cluster = cluster;
  a.background = true;
  a.name = "acceptor";
  loom::Fibre acceptor(a, [ctx, l] { accept_loop<EventIo>(*ctx, l); });
  print_listening("webserver", o, local_port(l),
                  "runtime=events, processors=" + std::to_string(processors) +
                      ", one color per connection, color stealing " + loom::color_policy(*cluster) + ", " +
                      cfg.describe());
  acceptor.join();  // never: the acceptor does not return
  return 0;
}

}  // namespace web
