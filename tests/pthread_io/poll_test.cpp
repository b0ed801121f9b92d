// poll_test — loom::io::poll, ppoll, select, pselect, epoll_wait and
// epoll_pwait (runtime/io/poll.cpp) in libloom directly: many descriptors
// polled by one fibre while others run on the same single processor, revents
// compared with the kernel's own, timeouts never early. Every case runs
// under each kind of poller (the wake-up comes through the cluster's epoll
// set, whoever polls it).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "loom/loom.hpp"
#include "test_util.hpp"

namespace io = loom::io;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

__attribute__((noinline)) int err() { return errno; }

// Descriptors for the big cases: the soft limit up to the hard one.
void raise_fd_limit() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
}

std::size_t fd_limit() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  return rl.rlim_cur;
}

// Socket pairs made through loom (so that, like a program's, they are
// non-blocking underneath) — [i][0] is polled, [i][1] is the peer.
struct Pairs {
  std::vector<std::array<int, 2>> fd;
  explicit Pairs(std::size_t n) : fd(n) {
    for (auto& p : fd) EXPECT_EQ(io::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p.data()), 0) << err();
  }
  ~Pairs() {
    for (auto& p : fd)
      for (int f : p)
        if (f >= 0) io::close(f);
  }
};

// A fibre that counts while the others wait: proof that the processor is
// not blocked (on a one-processor cluster a blocked processor gives 0 ticks;
// a loaded machine may give few, hence the low bounds below).
class Ticker {
 public:
  explicit Ticker(loom::Cluster& c) {
    loom::FibreAttr a;
    a.cluster = &c;
    fibre_ = loom::Fibre(a, [this] {
      while (!stop_.load()) {
        ticks_.fetch_add(1);
        loom::this_fibre::sleep_for(1ms);
      }
    });
  }
  ~Ticker() {
    stop_.store(true);
    fibre_.join();
  }
  long ticks() const { return ticks_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<long> ticks_{0};
  loom::Fibre fibre_;
};

class PollTest : public ::testing::TestWithParam<loom::PollerKind> {
 protected:
  void SetUp() override { raise_fd_limit(); }
  loom::SchedConfig config() const {
    loom::SchedConfig c = loom::SchedConfig::from_env();
    c.poller = GetParam();
    return c;
  }
  // Runs fn on a fibre of a one-processor cluster of the test's poller.
  template <class F>
  void on_cluster(F&& fn) {
    loom::Cluster c(1, config());
    loom::FibreAttr a;
    a.cluster = &c;
    a.stack_size = 256 * 1024;
    loom::Fibre(a, [&] { fn(c); }).join();
  }
};

long ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

TEST_P(PollTest, ManyDescriptorsOneWakesThePollerWhileTheProcessorRuns) {
  const std::size_t n = loom::test::sanitized() ? 500 : 2000;
  ASSERT_GT(fd_limit(), 2 * n + 64);
  on_cluster([&](loom::Cluster& c) {
    Pairs pairs(n);
    Ticker ticker(c);
    std::vector<pollfd> pfd(n);
    for (std::size_t i = 0; i < n; ++i) pfd[i] = pollfd{pairs.fd[i][0], POLLIN, 0};
    for (std::size_t which : {n - 1, std::size_t(0), n / 2, std::size_t(7)}) {
      loom::FibreAttr a;
      a.cluster = &c;
      loom::Fibre writer(a, [&] {
        loom::this_fibre::sleep_for(30ms);
        ASSERT_EQ(io::write(pairs.fd[which][1], "x", 1), 1);
      });
      long before = ticker.ticks();
      auto t0 = Clock::now();
      int r = io::poll(pfd.data(), pfd.size(), -1);
      ASSERT_EQ(r, 1) << err();
      EXPECT_GE(ms_since(t0), 25);
      EXPECT_GE(ticker.ticks() - before, 2) << "the processor was blocked";
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(pfd[i].revents, i == which ? POLLIN : 0) << i;
      writer.join();
      char ch;
      ASSERT_EQ(io::read(pairs.fd[which][0], &ch, 1), 1);
    }
  });
}

TEST_P(PollTest, ReventsAreTheKernels) {
  on_cluster([&](loom::Cluster&) {
    Pairs p(3);
    int closed_fd = io::dup(p.fd[2][0]);
    ASSERT_GE(closed_fd, 0);
    io::close(closed_fd);  // POLLNVAL
    ASSERT_EQ(io::write(p.fd[0][1], "ab", 2), 2);
    io::close(p.fd[1][1]);  // POLLHUP (and POLLIN: end of file) on [1][0]
    p.fd[1][1] = -1;
    std::vector<pollfd> a = {
        {p.fd[0][0], POLLIN | POLLOUT, 0}, {p.fd[0][0], POLLIN, 0}, {p.fd[1][0], POLLIN | POLLRDHUP, 0},
        {p.fd[2][0], POLLIN, 0},           {closed_fd, POLLIN, 0},  {-1, POLLIN, 0},
        {p.fd[2][0], POLLOUT, 0},          {p.fd[2][0], 0, 0}};
    std::vector<pollfd> b = a;
    int rl = io::poll(a.data(), a.size(), -1);
    int rk = ::poll(b.data(), b.size(), 0);
    ASSERT_EQ(rl, rk);
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].revents, b[i].revents) << i;
    EXPECT_EQ(a[0].revents, POLLIN | POLLOUT);
    EXPECT_EQ(a[2].revents & (POLLIN | POLLHUP | POLLRDHUP), POLLIN | POLLHUP | POLLRDHUP);
    EXPECT_EQ(a[4].revents, POLLNVAL);
    EXPECT_EQ(a[5].revents, 0);
    EXPECT_EQ(a[6].revents, POLLOUT);
  });
}

TEST_P(PollTest, PeerCloseWakesAWaitWithPollhup) {
  on_cluster([&](loom::Cluster& c) {
    Pairs p(2);
    loom::FibreAttr a;
    a.cluster = &c;
    loom::Fibre closer(a, [&] {
      loom::this_fibre::sleep_for(20ms);
      io::close(p.fd[1][1]);
      p.fd[1][1] = -1;
    });
    pollfd f[2] = {{p.fd[0][0], POLLIN, 0}, {p.fd[1][0], 0, 0}};  // no events asked: hang-up still reported
    ASSERT_EQ(io::poll(f, 2, 5000), 1);
    EXPECT_EQ(f[0].revents, 0);
    EXPECT_EQ(f[1].revents, POLLHUP);
    closer.join();
  });
}

// One number twice, asking different things: a wait for either.
TEST_P(PollTest, RepeatedDescriptor) {
  on_cluster([&](loom::Cluster& c) {
    Pairs p(1);
    loom::FibreAttr a;
    a.cluster = &c;
    loom::Fibre writer(a, [&] {
      loom::this_fibre::sleep_for(15ms);
      io::write(p.fd[0][1], "r", 1);
    });
    pollfd f[3] = {{p.fd[0][0], POLLPRI, 0}, {p.fd[0][0], POLLIN, 0}, {p.fd[0][0], POLLPRI, 0}};
    ASSERT_EQ(io::poll(f, 3, 5000), 1);
    EXPECT_EQ(f[0].revents, 0);
    EXPECT_EQ(f[1].revents, POLLIN);
    EXPECT_EQ(f[2].revents, 0);
    writer.join();
  });
}

TEST_P(PollTest, WritabilityWakesAWait) {
  on_cluster([&](loom::Cluster& c) {
    Pairs p(1);
    int s = p.fd[0][0];
    int fl = io::fcntl(s, F_GETFL);
    io::fcntl(s, F_SETFL, fl | O_NONBLOCK);
    std::vector<char> junk(65536, 'j');
    while (io::write(s, junk.data(), junk.size()) > 0) {
    }
    ASSERT_EQ(err(), EAGAIN);
    loom::FibreAttr a;
    a.cluster = &c;
    loom::Fibre drainer(a, [&] {
      loom::this_fibre::sleep_for(20ms);
      std::vector<char> b(1 << 20);
      while (io::recv(p.fd[0][1], b.data(), b.size(), MSG_DONTWAIT) > 0) {
      }
    });
    pollfd f{s, POLLOUT, 0};
    auto t0 = Clock::now();
    ASSERT_EQ(io::poll(&f, 1, -1), 1);
    EXPECT_GE(ms_since(t0), 15);
    EXPECT_EQ(f.revents, POLLOUT);
    drainer.join();
  });
}

TEST_P(PollTest, TimeoutsAreNeverEarly) {
  on_cluster([&](loom::Cluster& c) {
    Pairs p(4);
    Ticker ticker(c);
    pollfd f[2] = {{p.fd[0][0], POLLIN, 0}, {p.fd[1][0], POLLIN, 0}};
    for (int ms : {1, 7, 30}) {
      auto t0 = Clock::now();
      ASSERT_EQ(io::poll(f, 2, ms), 0);
      EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(ms));
    }
    timespec ts{0, 12'345'678};
    auto t0 = Clock::now();
    ASSERT_EQ(io::ppoll(f, 2, &ts, nullptr), 0);
    EXPECT_GE(Clock::now() - t0, std::chrono::nanoseconds(12'345'678));
    EXPECT_EQ(ts.tv_nsec, 12'345'678);  // ppoll leaves it

    fd_set r;
    FD_ZERO(&r);
    FD_SET(p.fd[2][0], &r);
    timeval tv{0, 20'000};
    t0 = Clock::now();
    ASSERT_EQ(io::select(p.fd[2][0] + 1, &r, nullptr, nullptr, &tv), 0);
    EXPECT_GE(Clock::now() - t0, 20ms);
    EXPECT_FALSE(FD_ISSET(p.fd[2][0], &r));
    EXPECT_EQ(tv.tv_sec, 0);
    EXPECT_EQ(tv.tv_usec, 0);  // Linux: the time not slept

    int ep = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = p.fd[3][0];
    ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, p.fd[3][0], &ev), 0);
    t0 = Clock::now();
    ASSERT_EQ(io::epoll_wait(ep, &ev, 1, 15), 0);
    EXPECT_GE(Clock::now() - t0, 15ms);
    // Nothing to watch: a sleep (poll(NULL, 0, ms) and select(0, ...) idioms).
    t0 = Clock::now();
    EXPECT_EQ(io::poll(nullptr, 0, 12), 0);
    EXPECT_GE(Clock::now() - t0, 12ms);
    tv = timeval{0, 9'000};
    t0 = Clock::now();
    EXPECT_EQ(io::select(0, nullptr, nullptr, nullptr, &tv), 0);
    EXPECT_GE(Clock::now() - t0, 9ms);
    // Zero: a look, no wait.
    t0 = Clock::now();
    EXPECT_EQ(io::poll(f, 2, 0), 0);
    EXPECT_EQ(io::epoll_wait(ep, &ev, 1, 0), 0);
    EXPECT_LT(Clock::now() - t0, 5ms);
    io::close(ep);  // loom knows the set now: close it through loom
    EXPECT_GE(ticker.ticks(), 10);
  });
}

TEST_P(PollTest, SelectUpToFdSetsize) {
  ASSERT_GE(fd_limit(), std::size_t(FD_SETSIZE));
  on_cluster([&](loom::Cluster& c) {
    Pairs p(3);
    // The highest numbers fd_set holds.
    int hi[3] = {FD_SETSIZE - 1, FD_SETSIZE - 2, FD_SETSIZE - 3};
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(io::dup2(p.fd[i][0], hi[i]), hi[i]) << err();
    }
    Ticker ticker(c);
    loom::FibreAttr a;
    a.cluster = &c;
    loom::Fibre writer(a, [&] {
      loom::this_fibre::sleep_for(20ms);
      io::write(p.fd[1][1], "y", 1);
    });
    fd_set r, w;
    FD_ZERO(&r);
    FD_ZERO(&w);
    for (int f : hi) FD_SET(f, &r);
    long before = ticker.ticks();
    ASSERT_EQ(io::select(FD_SETSIZE, &r, nullptr, nullptr, nullptr), 1);
    EXPECT_GE(ticker.ticks() - before, 2) << "the processor was blocked";
    EXPECT_FALSE(FD_ISSET(hi[0], &r));
    EXPECT_TRUE(FD_ISSET(hi[1], &r));
    EXPECT_FALSE(FD_ISSET(hi[2], &r));
    writer.join();
    // Readable and writable at once: counted per set, as the kernel does.
    FD_ZERO(&r);
    for (int f : hi) FD_SET(f, &r), FD_SET(f, &w);
    ASSERT_EQ(io::select(FD_SETSIZE, &r, &w, nullptr, nullptr), 4);
    // A closed number: EBADF; a negative count: EINVAL; a bad timeout: EINVAL.
    FD_ZERO(&r);
    FD_SET(hi[0], &r);
    io::close(hi[0]);
    EXPECT_EQ(io::select(FD_SETSIZE, &r, nullptr, nullptr, nullptr), -1);
    EXPECT_EQ(err(), EBADF);
    EXPECT_EQ(io::select(-1, nullptr, nullptr, nullptr, nullptr), -1);
    EXPECT_EQ(err(), EINVAL);
    timeval bad{0, -1};
    EXPECT_EQ(io::select(0, nullptr, nullptr, nullptr, &bad), -1);
    EXPECT_EQ(err(), EINVAL);
    timespec badts{0, 1'000'000'000};
    EXPECT_EQ(io::pselect(0, nullptr, nullptr, nullptr, &badts, nullptr), -1);
    EXPECT_EQ(err(), EINVAL);
    EXPECT_EQ(io::ppoll(nullptr, 0, &badts, nullptr), -1);
    EXPECT_EQ(err(), EINVAL);
    io::close(hi[1]);
    io::close(hi[2]);
  });
}

TEST_P(PollTest, EpollWaitOnTheProgramsOwnSet) {
  on_cluster([&](loom::Cluster& c) {
    const int n = 64;
    Pairs p(n);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    ASSERT_GE(ep, 0);
    for (int i = 0; i < n; ++i) {
      epoll_event ev{};
      ev.events = EPOLLIN;  // level-triggered, the program's choice
      ev.data.u32 = i;
      ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, p.fd[i][0], &ev), 0);
    }
    Ticker ticker(c);
    for (int which : {n - 1, 3}) {
      loom::FibreAttr a;
      a.cluster = &c;
      loom::Fibre writer(a, [&] {
        loom::this_fibre::sleep_for(20ms);
        io::write(p.fd[which][1], "z", 1);
      });
      epoll_event got[8];
      long before = ticker.ticks();
      ASSERT_EQ(io::epoll_wait(ep, got, 8, -1), 1) << err();
      EXPECT_GE(ticker.ticks() - before, 2) << "the processor was blocked";
      EXPECT_EQ(int(got[0].data.u32), which);
      EXPECT_EQ(got[0].events, unsigned(EPOLLIN));
      // Level-triggered: still there until read.
      ASSERT_EQ(io::epoll_pwait(ep, got, 8, -1, nullptr), 1);
      char ch;
      ASSERT_EQ(io::read(p.fd[which][0], &ch, 1), 1);
      writer.join();
    }
    epoll_event e;
    EXPECT_EQ(io::epoll_wait(ep, &e, 0, -1), -1);
    EXPECT_EQ(err(), EINVAL);
    EXPECT_EQ(io::epoll_wait(p.fd[0][0], &e, 1, -1), -1);  // not an epoll set
    EXPECT_EQ(err(), EINVAL);
    io::close(ep);  // loom knows the set now: close it through loom
    EXPECT_EQ(io::epoll_wait(ep, &e, 1, -1), -1);
    EXPECT_EQ(err(), EBADF);
  });
}

// Several fibres waiting on one set take turns; each event ends a wait.
TEST_P(PollTest, EpollWaitersShareASet) {
  on_cluster([&](loom::Cluster& c) {
    Pairs p(4);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < 4; ++i) {
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLET;
      ev.data.u32 = i;
      ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, p.fd[i][0], &ev), 0);
    }
    std::atomic<int> got{0};
    std::vector<loom::Fibre> waiters;
    for (int k = 0; k < 3; ++k) {
      loom::FibreAttr a;
      a.cluster = &c;
      waiters.emplace_back(a, [&] {
        epoll_event e;
        if (io::epoll_wait(ep, &e, 1, 5000) == 1) got.fetch_add(1);
      });
    }
    loom::this_fibre::sleep_for(10ms);
    for (int i = 0; i < 3; ++i) {
      io::write(p.fd[i][1], "w", 1);
      loom::this_fibre::sleep_for(5ms);
    }
    for (auto& w : waiters) w.join();
    EXPECT_EQ(got.load(), 3);
    io::close(ep);
  });
}

// Descriptors loom did not make (a pipe from pipe(2), a regular file) keep
// their flags and are waited on all the same.
TEST_P(PollTest, TheProgramsOwnDescriptors) {
  on_cluster([&](loom::Cluster& c) {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    FILE* tmp = std::tmpfile();
    ASSERT_NE(tmp, nullptr);
    loom::FibreAttr a;
    a.cluster = &c;
    loom::Fibre writer(a, [&] {
      loom::this_fibre::sleep_for(20ms);
      ASSERT_EQ(::write(fds[1], "p", 1), 1);
    });
    pollfd f[2] = {{fds[0], POLLIN, 0}, {fileno(tmp), POLLPRI, 0}};  // a file never has POLLPRI
    ASSERT_EQ(io::poll(f, 2, -1), 1);
    EXPECT_EQ(f[0].revents, POLLIN);
    EXPECT_EQ(f[1].revents, 0);
    writer.join();
    EXPECT_EQ(::fcntl(fds[0], F_GETFL) & O_NONBLOCK, 0);
    // A regular file is always ready.
    pollfd g{fileno(tmp), POLLIN | POLLOUT, 0};
    EXPECT_EQ(io::poll(&g, 1, -1), 1);
    EXPECT_EQ(g.revents, POLLIN | POLLOUT);
    std::fclose(tmp);
    ::close(fds[0]);
    ::close(fds[1]);
  });
}

// Many fibres polling at once, each on its own descriptors, on one processor.
TEST_P(PollTest, ManyPollersAtOnce) {
  on_cluster([&](loom::Cluster& c) {
    const int fibres = 50, each = 20;
    Pairs p(fibres * each);
    std::atomic<int> woken{0};
    std::vector<loom::Fibre> pollers;
    for (int k = 0; k < fibres; ++k) {
      loom::FibreAttr a;
      a.cluster = &c;
      pollers.emplace_back(a, [&, k] {
        std::vector<pollfd> f(each);
        for (int i = 0; i < each; ++i) f[i] = pollfd{p.fd[k * each + i][0], POLLIN, 0};
        if (io::poll(f.data(), f.size(), 10'000) == 1 && f[k % each].revents == POLLIN) woken.fetch_add(1);
      });
    }
    loom::this_fibre::sleep_for(20ms);
    for (int k = 0; k < fibres; ++k) io::write(p.fd[k * each + k % each][1], "m", 1);
    for (auto& f : pollers) f.join();
    EXPECT_EQ(woken.load(), fibres);
  });
}

// A kernel thread that is not a processor: the system's call.
TEST_P(PollTest, KernelThreadIsTheSystemsCall) {
  Pairs p(1);
  std::thread t([&] {
    pollfd f{p.fd[0][0], POLLIN, 0};
    auto t0 = Clock::now();
    EXPECT_EQ(io::poll(&f, 1, 20), 0);
    EXPECT_GE(Clock::now() - t0, 20ms);
    io::write(p.fd[0][1], "k", 1);
    EXPECT_EQ(io::poll(&f, 1, -1), 1);
    EXPECT_EQ(f.revents, POLLIN);
  });
  t.join();
}

// A wait counts as a block in the cluster's I/O counters; a look does not.
TEST_P(PollTest, WaitsAreCounted) {
  on_cluster([&](loom::Cluster& c) {
    Pairs p(1);
    pollfd f{p.fd[0][0], POLLIN, 0};
    io::Stats s0 = io::stats();
    EXPECT_EQ(io::poll(&f, 1, 0), 0);
    EXPECT_EQ(io::stats().blocks, s0.blocks);
    loom::FibreAttr a;
    a.cluster = &c;
    loom::Fibre writer(a, [&] {
      loom::this_fibre::sleep_for(10ms);
      io::write(p.fd[0][1], "s", 1);
    });
    EXPECT_EQ(io::poll(&f, 1, -1), 1);
    EXPECT_GT(io::stats().blocks, s0.blocks);
    writer.join();
  });
}

std::string poller_name(const ::testing::TestParamInfo<loom::PollerKind>& i) {
  switch (i.param) {
    case loom::PollerKind::idle:
      return "idle";
    case loom::PollerKind::fibre:
      return "fibre";
    case loom::PollerKind::loop:
      return "loop";
    case loom::PollerKind::opportunistic:
      return "opportunistic";
    default:
      return "other";
  }
}

INSTANTIATE_TEST_SUITE_P(Pollers, PollTest,
                         ::testing::Values(loom::PollerKind::idle, loom::PollerKind::fibre, loom::PollerKind::loop,
                                           loom::PollerKind::opportunistic),
                         poller_name);

}  // namespace
