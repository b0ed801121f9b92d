// io_callback_test — loom::io::when_ready, the one-shot readiness callback
// (loom/io.hpp), over real TCP sockets on 127.0.0.1: one invocation per
// arming, edges that collapse into a pending token, arming before and after
// the data, close with a callback armed, POLLOUT, many descriptors, and the
// errors. Every test runs under each kind of poller context that invokes
// callbacks: a processor (idle), the poller fibre, a poller thread (loop).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "loom/loom.hpp"
#include "sched/processor.hpp"
#include "test_util.hpp"

namespace io = loom::io;
using namespace std::chrono_literals;

namespace {

__attribute__((noinline)) int err() { return errno; }

// A counter a callback bumps, with the thread it ran on.
struct Hits {
  std::atomic<int> n{0};
  std::atomic<std::thread::id> last{};
};

void hit(void* p) {
  auto* h = static_cast<Hits*>(p);
  h->last.store(std::this_thread::get_id());
  h->n.fetch_add(1);
}

// Waits (as a fibre: the processor stays free to poll) until h reaches
// `want`; false after 5 s.
bool reach(const Hits& h, int want) {
  auto end = std::chrono::steady_clock::now() + 5s;
  while (h.n.load() < want) {
    if (std::chrono::steady_clock::now() > end) return false;
    loom::this_fibre::sleep_for(1ms);
  }
  return true;
}

// Gives a wrongly armed callback the chance to fire: the poller polls.
void settle() { loom::this_fibre::sleep_for(30ms); }

// A connected TCP pair on 127.0.0.1: [0] loom's, non-blocking (as an event
// server's accepted socket); [1] the peer, a plain blocking socket.
void tcp_pair(int fds[2]) {
  int l = io::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(io::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(io::listen(l, 64), 0);
  socklen_t len = sizeof a;
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  fds[1] = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::connect(fds[1], reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  fds[0] = io::accept4(l, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  ASSERT_GE(fds[0], 0);
  io::close(l);
}

void put(int fd, const char* s) { ASSERT_EQ(::send(fd, s, std::strlen(s), MSG_NOSIGNAL), ssize_t(std::strlen(s))); }

// Arms, again if the arming found a pending edge and invoked h at once (an
// edge that came with bytes a drain already read: "ready" may be stale, and
// the owner tries, finds EAGAIN, and arms again). h's count afterwards.
int arm_quiet(int fd, short dir, Hits& h) {
  for (int i = 0; i < 3; ++i) {
    int before = h.n.load();
    EXPECT_EQ(io::when_ready(fd, dir, &hit, &h), 0);
    if (h.n.load() == before) return before;
  }
  ADD_FAILURE() << "when_ready invoked at once three times in a row";
  return h.n.load();
}

// Reads until EAGAIN; the bytes read.
std::size_t drain(int fd) {
  char buf[4096];  // on a fibre's stack
  std::size_t total = 0;
  for (;;) {
    ssize_t n = io::read(fd, buf, sizeof buf);
    if (n <= 0) return total;
    total += std::size_t(n);
  }
}

class WhenReady : public ::testing::TestWithParam<loom::PollerKind> {
 protected:
  // Runs fn on a fibre of a fresh 1-processor cluster with the poller kind.
  template <class F>
  void run(F fn) {
    loom::SchedConfig cfg = loom::SchedConfig::from_env();
    cfg.poller = GetParam();
    loom::Cluster c(1, cfg);
    loom::FibreAttr a;
    a.cluster = &c;
    loom::Fibre f(a, fn);
    f.join();
  }
};

TEST_P(WhenReady, FiresOncePerArmingAndEdge) {
  run([] {
    int p[2];
    tcp_pair(p);
    Hits h;
    ASSERT_EQ(io::when_ready(p[0], POLLIN, &hit, &h), 0);
    settle();
    EXPECT_EQ(h.n.load(), 0) << "fired with nothing to read";
    put(p[1], "a");
    ASSERT_TRUE(reach(h, 1));
    put(p[1], "b");  // a second edge, with nothing armed: one-shot
    settle();
    EXPECT_EQ(h.n.load(), 1);
    EXPECT_EQ(drain(p[0]), 2u);
    // Re-armed after draining ("b"'s edge may still be pending: stale):
    // the next edge, once.
    int n = arm_quiet(p[0], POLLIN, h);
    settle();
    EXPECT_EQ(h.n.load(), n);
    put(p[1], "c");
    ASSERT_TRUE(reach(h, n + 1));
    settle();
    EXPECT_EQ(h.n.load(), n + 1);
    io::close(p[0]);
    ::close(p[1]);
  });
}

TEST_P(WhenReady, EdgesWithNobodyArmedCollapseIntoOneImmediateCall) {
  run([] {
    int p[2];
    tcp_pair(p);
    Hits h;
    ASSERT_EQ(io::when_ready(p[0], POLLIN, &hit, &h), 0);  // registers
    put(p[1], "x");
    ASSERT_TRUE(reach(h, 1));
    drain(p[0]);
    for (int i = 0; i < 3; ++i) {  // three edges, nothing armed
      put(p[1], "y");
      settle();
    }
    EXPECT_EQ(h.n.load(), 1);
    ASSERT_EQ(io::when_ready(p[0], POLLIN, &hit, &h), 0);
    if (std::string(io::backend()) == "uring") {
      // No token is kept while nothing waits: the arming's poll finds the
      // bytes there and the delivery invokes the callback, once.
      ASSERT_TRUE(reach(h, 2));
    } else {
      // The pending token: the callback runs at once, on this thread.
      EXPECT_EQ(h.n.load(), 2) << "a pending edge must make when_ready invoke the callback before returning";
      EXPECT_EQ(h.last.load(), std::this_thread::get_id());
    }
    EXPECT_EQ(drain(p[0]), 3u);
    // The three edges were one token: nothing more.
    ASSERT_EQ(io::when_ready(p[0], POLLIN, &hit, &h), 0);
    settle();
    EXPECT_EQ(h.n.load(), 2) << "edges that arrived while nothing was armed must collapse into one";
    put(p[1], "z");
    ASSERT_TRUE(reach(h, 3));
    io::close(p[0]);
    ::close(p[1]);
  });
}

TEST_P(WhenReady, DataBeforeTheFirstArmingIsSeen) {
  run([] {
    int p[2];
    tcp_pair(p);
    put(p[1], "early");  // before the descriptor is registered at all
    settle();
    Hits h;
    ASSERT_EQ(io::when_ready(p[0], POLLIN, &hit, &h), 0);
    ASSERT_TRUE(reach(h, 1)) << "registration must report data that was already there";
    EXPECT_EQ(drain(p[0]), 5u);
    io::close(p[0]);
    ::close(p[1]);
  });
}

TEST_P(WhenReady, PeerHangUpAfterADrainingReadNeedsNoNewEdge) {
  run([] {
    int p[2];
    tcp_pair(p);
    Hits h;
    ASSERT_EQ(io::when_ready(p[0], POLLIN, &hit, &h), 0);
    put(p[1], "bye");
    ::shutdown(p[1], SHUT_WR);  // data and FIN: maybe one edge for both
    ASSERT_TRUE(reach(h, 1));
    char buf[16];
    ASSERT_EQ(io::read(p[0], buf, sizeof buf), 3);  // a short read: "drained"
    ASSERT_EQ(io::when_ready(p[0], POLLIN, &hit, &h), 0);
    ASSERT_TRUE(reach(h, 2)) << "an event server that waits after a short read must still see the end";
    EXPECT_EQ(io::read(p[0], buf, sizeof buf), 0);
    io::close(p[0]);
    ::close(p[1]);
  });
}

TEST_P(WhenReady, WritableAfterThePeerReads) {
  run([] {
    int p[2];
    tcp_pair(p);
    int small = 4096;
    ::setsockopt(p[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    ::setsockopt(p[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    Hits h;
    // Registers; the initial "writable" edge may or may not come before the
    // fill below, so the first callback is allowed to be that one.
    ASSERT_EQ(io::when_ready(p[0], POLLOUT, &hit, &h), 0);
    ASSERT_TRUE(reach(h, 1));
    std::vector<char> chunk(65536, 'w');
    std::size_t sent = 0;
    int full_hits;
    for (;;) {  // fill until EAGAIN, and arm until the arming does not fire at once
      ssize_t n = io::write(p[0], chunk.data(), chunk.size());
      if (n > 0) {
        sent += std::size_t(n);
        continue;
      }
      ASSERT_EQ(err(), EAGAIN);
      full_hits = h.n.load();
      ASSERT_EQ(io::when_ready(p[0], POLLOUT, &hit, &h), 0);
      if (h.n.load() == full_hits) break;  // armed, not fired: the socket is full
    }
    settle();
    if (h.n.load() != full_hits && std::string(io::backend()) == "uring") {
      // io_uring reports the readiness a wake-up carried, which may be gone
      // by the time it is delivered (when_ready's contract: stale, never
      // lost): the socket is still full, and the owner arms again.
      EXPECT_EQ(h.n.load(), full_hits + 1);
      EXPECT_LT(io::write(p[0], chunk.data(), chunk.size()), 0);
      EXPECT_EQ(err(), EAGAIN) << "a stale invocation only";
      full_hits = h.n.load();
      ASSERT_EQ(io::when_ready(p[0], POLLOUT, &hit, &h), 0);
      settle();
    }
    EXPECT_EQ(h.n.load(), full_hits) << "fired while the socket was full";
    std::size_t got = 0;
    std::vector<char> in(1 << 20);
    while (got < sent) {
      ssize_t n = ::recv(p[1], in.data(), in.size(), 0);
      ASSERT_GT(n, 0);
      got += std::size_t(n);
    }
    ASSERT_TRUE(reach(h, full_hits + 1));
    settle();
    EXPECT_EQ(h.n.load(), full_hits + 1);
    io::close(p[0]);
    ::close(p[1]);
  });
}

// Close with a callback armed: invoked once, by close, after close(2); never
// again (the number may be reused at once).
struct CloseProbe {
  int fd = -1;
  std::atomic<int> n{0};
  std::atomic<int> errno_seen{0};
  std::atomic<std::thread::id> thread{};
};

void on_close_probe(void* p) {
  auto* c = static_cast<CloseProbe*>(p);
  c->thread.store(std::this_thread::get_id());
  c->errno_seen.store(::fcntl(c->fd, F_GETFD) < 0 ? errno : 0);
  c->n.fetch_add(1);
}

TEST_P(WhenReady, CloseInvokesAnArmedCallbackOnceAfterClosing) {
  run([] {
    for (short dir : {short(POLLIN), short(POLLOUT)}) {
      int p[2];
      tcp_pair(p);
      CloseProbe c;
      c.fd = p[0];
      if (dir == POLLOUT) {  // take the initial writable edge first
        Hits h;
        ASSERT_EQ(io::when_ready(p[0], POLLOUT, &hit, &h), 0);
        ASSERT_TRUE(reach(h, 1));
        std::vector<char> chunk(1 << 16, 'w');
        while (io::write(p[0], chunk.data(), chunk.size()) > 0) {
        }
      }
      int r;
      do {  // until armed rather than invoked at once (a stale writable edge)
        c.n.store(0);
        r = io::when_ready(p[0], dir, &on_close_probe, &c);
        ASSERT_EQ(r, 0);
      } while (c.n.load() != 0);
      EXPECT_EQ(io::close(p[0]), 0);
      EXPECT_EQ(c.n.load(), 1) << "close must invoke the armed callback before it returns";
      EXPECT_EQ(c.errno_seen.load(), EBADF) << "the callback must run after close(2)";
      EXPECT_EQ(c.thread.load(), std::this_thread::get_id());
      put(p[1], "late");  // would be an edge, had the descriptor stayed registered
      ::close(p[1]);
      settle();
      EXPECT_EQ(c.n.load(), 1) << "invoked again after close";
    }
  });
}

// Issue 25, bug 7: a callback that closes its own descriptor runs inside
// the poller's delivery (on io_uring with the reaper's flag held, so its
// close cannot reap the completions it would wait for). The close must not
// switch fibres there: the callback may run on the idle loop, inside a
// busy processor's look for work, or on a poller thread. The descriptor has
// a write-side poll still on (its send buffer full), which on io_uring the
// close removes and used to wait for, yielding and sleeping up to 200 ms.
struct CloseInCallback {
  int fd = -1;
  std::atomic<int> rc{1};
  std::atomic<int> switched{-1};
  std::atomic<int> n{0};
};

void close_in_callback(void* p) {
  auto* c = static_cast<CloseInCallback*>(p);
  loom::rt::Processor* proc = loom::rt::this_processor();
  loom::rt::Fibre* self = loom::rt::this_fibre_or_null();
  std::uint64_t s0 = proc ? proc->counters.get(loom::rt::Stat::switches) : 0;
  c->rc.store(io::close(c->fd));
  bool moved = loom::rt::this_processor() != proc || loom::rt::this_fibre_or_null() != self ||
               (proc && proc->counters.get(loom::rt::Stat::switches) != s0);
  c->switched.store(moved ? 1 : 0);
  c->n.fetch_add(1);
}

TEST_P(WhenReady, CloseFromItsOwnCallbackDoesNotSwitchFibres) {
  run([] {
    for (int round = 0; round < 3; ++round) {
      int p[2];
      tcp_pair(p);
      int small = 4096;
      ::setsockopt(p[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
      ::setsockopt(p[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
      Hits out;
      std::vector<char> chunk(65536, 'w');
      for (;;) {  // full, with a write-side callback armed (not fired): its poll stays on
        while (io::write(p[0], chunk.data(), chunk.size()) > 0) {
        }
        int before = out.n.load();
        ASSERT_EQ(io::when_ready(p[0], POLLOUT, &hit, &out), 0);
        if (out.n.load() == before) break;
      }
      CloseInCallback c;
      c.fd = p[0];
      ASSERT_EQ(io::when_ready(p[0], POLLIN, &close_in_callback, &c), 0);
      ASSERT_EQ(c.n.load(), 0);
      put(p[1], "x");
      auto end = std::chrono::steady_clock::now() + 5s;
      while (c.n.load() == 0 && std::chrono::steady_clock::now() < end) loom::this_fibre::sleep_for(1ms);
      ASSERT_EQ(c.n.load(), 1) << "round " << round;
      EXPECT_EQ(c.rc.load(), 0);
      EXPECT_EQ(c.switched.load(), 0) << "round " << round << ": the close switched fibres inside the callback";
      ASSERT_TRUE(reach(out, 1)) << "the close invokes the armed write-side callback";
      // The peer sees the end (a reset: it did not read what was sent).
      pollfd pf{p[1], POLLIN, 0};
      EXPECT_EQ(::poll(&pf, 1, 5000), 1);
      ::close(p[1]);
    }
  });
}

TEST_P(WhenReady, Errors) {
  run([] {
    int p[2];
    tcp_pair(p);
    Hits h;
    errno = 0;
    EXPECT_EQ(io::when_ready(p[0], POLLIN | POLLOUT, &hit, &h), -1);
    EXPECT_EQ(err(), EINVAL);
    EXPECT_EQ(io::when_ready(p[0], POLLIN, nullptr, &h), -1);
    EXPECT_EQ(err(), EINVAL);
    EXPECT_EQ(io::when_ready(-1, POLLIN, &hit, &h), -1);
    EXPECT_EQ(err(), EBADF);
    ASSERT_EQ(io::when_ready(p[0], POLLIN, &hit, &h), 0);
    EXPECT_EQ(io::when_ready(p[0], POLLIN, &hit, &h), -1) << "armed twice";
    EXPECT_EQ(err(), EBUSY);
    char path[] = "/tmp/loom-io-callback-XXXXXX";
    int f = mkstemp(path);
    ASSERT_GE(f, 0);
    unlink(path);
    EXPECT_EQ(io::when_ready(f, POLLIN, &hit, &h), -1);
    EXPECT_EQ(err(), EPERM);
    ::close(f);
    io::forget(f);
    put(p[1], "x");
    ASSERT_TRUE(reach(h, 1));
    io::close(p[0]);
    ::close(p[1]);
  });
}

// Many descriptors, many rounds: each arming is invoked exactly once, by its
// own edge, and the re-arming after a drain never loses one.
struct Conn {
  int fd[2];
  Hits h;
  int armed_at = 0;  // h's count once armed this round (stale edges included)
};

TEST_P(WhenReady, ManyDescriptorsManyRounds) {
  run([] {
    const int kConns = int(loom::test::scaled(200)) + 10;
    const int kRounds = 20;
    std::vector<std::unique_ptr<Conn>> cs;
    for (int i = 0; i < kConns; ++i) {
      cs.emplace_back(new Conn);
      tcp_pair(cs.back()->fd);
    }
    for (int round = 1; round <= kRounds; ++round) {
      // A stale edge may fire an arming at once (on loopback an ACK can
      // re-raise EPOLLIN for bytes not yet drained); arm_quiet arms again,
      // so from here on exactly one more invocation is owed.
      for (auto& c : cs) c->armed_at = arm_quiet(c->fd[0], POLLIN, c->h);
      // Only every other connection gets data in odd rounds.
      for (int i = 0; i < kConns; ++i)
        if (round % 2 == 0 || i % 2 == 0) put(cs[i]->fd[1], "r");
      for (int i = 0; i < kConns; ++i) {
        Conn& c = *cs[i];
        if (round % 2 == 0 || i % 2 == 0) {
          ASSERT_TRUE(reach(c.h, c.armed_at + 1)) << "connection " << i << " round " << round;
          EXPECT_EQ(drain(c.fd[0]), 1u);
        }
      }
      settle();
      for (int i = 0; i < kConns; ++i) {
        Conn& c = *cs[i];
        if (round % 2 == 1 && i % 2 == 1) {
          // Not fired: still armed. Give it its byte so the counts match.
          EXPECT_EQ(c.h.n.load(), c.armed_at) << "connection " << i << " fired without data";
          put(c.fd[1], "s");
          ASSERT_TRUE(reach(c.h, c.armed_at + 1));
          EXPECT_EQ(drain(c.fd[0]), 1u);
        }
        EXPECT_EQ(c.h.n.load(), c.armed_at + 1) << "connection " << i << " invoked twice for one arming";
      }
    }
    for (auto& c : cs) {
      io::close(c->fd[0]);
      ::close(c->fd[1]);
    }
  });
}

// The ReadyWord alone: a post racing with arming never loses the callback
// nor invokes it twice (posters on kernel threads, as the poller threads).
std::string name(const ::testing::TestParamInfo<loom::PollerKind>& i) {
  std::string s = loom::to_string(i.param);
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Pollers, WhenReady,
                         ::testing::Values(loom::PollerKind::idle, loom::PollerKind::fibre, loom::PollerKind::loop),
                         name);

}  // namespace
