// close_reuse_test — a descriptor closed while a fibre is on its way to
// wait on it, and its number handed out again at once (issue 25, bug 4).
//
// The reader records the number's close count, registers, and parks; a
// close between the first and the last posts a token, and a new descriptor
// under the number (socketpair or dup2 here, accept alike) clears that token in
// FdEntry::describe. The reader must still see the close (EBADF), not wait
// for an edge of the old file that never comes (here: its receive timeout,
// then EAGAIN) nor for the new file's. A read that begins after the reuse
// reads the new descriptor, which has a byte waiting: 1.
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <gtest/gtest.h>

#include "base/futex.hpp"
#include "io/fd_table.hpp"
#include "loom/loom.hpp"
#include "test_util.hpp"

namespace io = loom::io;
using namespace std::chrono_literals;

namespace {

__attribute__((noinline)) int err() { return errno; }

// The stall: SIGUSR1 on the reader's kernel thread holds the reader up
// wherever it is for a while (~50 us), long enough for the closer's close
// and reuse; landing between its count read and its park, it opens the
// window every run found in 20 rounds in the program.
void stall(int) {
  for (volatile int i = 0; i < 20000; i = i + 1) loom::detail::cpu_relax();
}

constexpr long kSpread = 400;  // pauses between the reader's start and the stall

// The same interleaving, made deterministic by doing the reader's steps by
// hand in one fibre: read the count, then the close and the reuse, then the
// wait that io.cpp's slow path makes with that count.
TEST(CloseReuse, TheWaitAfterACloseAndReuseDoesNotSleep) {
  loom::Cluster c(1);
  loom::FibreAttr on_c;
  on_c.cluster = &c;
  loom::Fibre(on_c, [&] {
    int sv[2], nv[2];
    ASSERT_EQ(io::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    const int fd = sv[0];
    loom::rt::FdEntry* e = loom::rt::FdTable::instance().get(fd);
    const std::uint32_t gen = e->gen.load();  // the reader's count, before it registers
    io::close(fd);                           // posts a token for the reader ...
    ASSERT_EQ(io::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, nv), 0);
    ASSERT_TRUE(nv[0] == fd || nv[1] == fd) << "the number was not reused";
    // ... which the new descriptor's describe() cleared: without the gate
    // nothing would wake the reader (the old file's edges are gone).
    EXPECT_FALSE(e->in.ready.has_token());
    int rc = e->in.ready.wait(loom::rt::now_ns() + 2'000'000'000, &e->gen, gen);
    EXPECT_EQ(rc, 0) << "the wait slept until its deadline";
    EXPECT_NE(e->gen.load(), gen);  // so wait_and_retry returns EBADF
    io::close(sv[1]);
    io::close(nv[0]);
    io::close(nv[1]);
  }).join();
}

// The real thing, racing: a reader fibre and a closer on a kernel thread.
// (On a loaded 2-core machine the reader nearly always parks before the
// closer acts; the deterministic test above pins the interleaving.)
TEST(CloseReuse, AReaderOnItsWayToParkSeesTheClose) {
  const long rounds = loom::test::scaled(3000);
  long ebadf = 0, fresh = 0, late = 0, missed = 0;
  // The reader is a fibre; the closer a kernel thread, so that it runs
  // beside the reader whatever the placement.
  struct sigaction sa {};
  sa.sa_handler = stall;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  loom::Cluster c(1);
  loom::FibreAttr on_c;
  on_c.cluster = &c;
  for (long round = 0; round < rounds && missed == 0; ++round) {
    int sv[2];
    ASSERT_EQ(io::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    const int fd = sv[0];
    int spare[2];
    ASSERT_EQ(io::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, spare), 0);
    if (round % 2) {
      io::close(spare[0]);
      io::close(spare[1]);
    }
    io::set_timeouts(fd, 500ms, 0ns);  // a missed close ends in EAGAIN, not a hang
    std::atomic<bool> started{false};
    std::atomic<pthread_t> where{};
    std::chrono::steady_clock::time_point done_at, closed_at;
    long got = 0;
    int e = 0;
    loom::Fibre reader(on_c, [&] {
      char b;
      where.store(pthread_self());
      started.store(true);
      got = io::read(fd, &b, 1);
      e = err();
      done_at = std::chrono::steady_clock::now();
    });
    while (!started.load()) loom::detail::cpu_relax();
    // Somewhere in the reader's way from its EAGAIN to its park.
    for (long spin = (round * 37) % kSpread; spin > 0; --spin) loom::detail::cpu_relax();
    pthread_kill(where.load(), SIGUSR1);
    for (int spin = 0; spin < 100; ++spin) loom::detail::cpu_relax();
    int nv[2];
    if (round % 2) {
      io::close(fd);
      ASSERT_EQ(io::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, nv), 0);
      ASSERT_TRUE(nv[0] == fd || nv[1] == fd) << "the number was not reused";
    } else {
      // dup2: the close and the reuse in one call (the new number is
      // described as a copy of the spare's).
      ASSERT_EQ(io::dup2(spare[0], fd), fd);
      nv[0] = fd;
      nv[1] = spare[1];
    }
    closed_at = std::chrono::steady_clock::now();
    ASSERT_EQ(::write(nv[0] == fd ? nv[1] : nv[0], "x", 1), 1);
    reader.join();
    if (got == 1) {
      ++fresh;
    } else if (got == -1 && e == EBADF) {
      ++ebadf;
    } else if (got == -1 && e == EAGAIN && done_at - closed_at < 200ms) {
      ++late;  // the closer itself came too late (a loaded machine): the reader's own timeout
    } else {
      ++missed;
      ADD_FAILURE() << "round " << round << ": read returned " << got << " (" << std::strerror(e) << ") "
                    << std::chrono::duration_cast<std::chrono::milliseconds>(done_at - closed_at).count()
                    << " ms after the close and the reuse";
    }
    io::close(sv[1]);
    io::close(nv[0]);
    io::close(nv[1]);
    if (!(round % 2)) io::close(spare[0]);
  }
  std::printf("close then reuse: %ld EBADF, %ld read the new descriptor, %ld timed out before the close came, %ld missed it\n",
              ebadf, fresh, late, missed);
  EXPECT_EQ(missed, 0);
}

}  // namespace
