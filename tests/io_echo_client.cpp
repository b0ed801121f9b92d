// io_echo_client PORT CONNECTIONS BYTES — the client side of io_test's echo
// test, in its own process (10,000 connections need 20,000 descriptors in
// all; one process may have fewer). Each connection has a writer fibre that
// sends BYTES of a pattern unique to the connection and offset, and a reader
// fibre that checks every byte comes back in order. Exit 0 when all did.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "loom/loom.hpp"

namespace {

// 16 KiB stacks; sanitizers' frames are bigger.
#if defined(LOOM_ASAN) || defined(LOOM_TSAN)
constexpr std::size_t kStack = 4 * loom::kStackMin;
#else
constexpr std::size_t kStack = loom::kStackMin;
#endif

std::atomic<long> failures{0};

unsigned char pattern(long conn, long off) { return static_cast<unsigned char>((conn * 131 + off * 7 + (off >> 9)) & 0xff); }

void connection(int port, long id, long bytes) {
  int fd = loom::io::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || loom::io::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    std::fprintf(stderr, "client %ld: connect: %s\n", id, std::strerror(errno));
    failures++;
    if (fd >= 0) loom::io::close(fd);
    return;
  }
  // The writer stays at most kWindow bytes ahead of the reader: in-flight
  // data per connection is bounded, as with a real protocol, so 10,000
  // connections do not exhaust the kernel's socket memory (tcp_mem).
  constexpr long kWindow = 32 << 10;
  loom::Semaphore credit(kWindow / 4096);
  loom::FibreAttr attr;
  attr.stack_size = kStack;
  loom::Fibre writer(attr, [fd, id, bytes, &credit] {
    unsigned char buf[4096];
    for (long off = 0; off < bytes;) {
      long n = std::min<long>(sizeof buf, bytes - off);
      credit.acquire();
      for (long i = 0; i < n; ++i) buf[i] = pattern(id, off + i);
      ssize_t w = loom::io::write(fd, buf, n);
      if (w <= 0) {
        std::fprintf(stderr, "client %ld: write: %s\n", id, std::strerror(errno));
        failures++;
        return;
      }
      if (w < n) credit.release();  // the rest goes out again with a new credit
      off += w;  // a short write: the rest is rebuilt from the pattern
    }
    shutdown(fd, SHUT_WR);
  });
  unsigned char buf[4096];
  long off = 0;
  for (;;) {
    ssize_t r = loom::io::read(fd, buf, sizeof buf);
    if (r < 0) {
      std::fprintf(stderr, "client %ld: read at %ld: %s\n", id, off, std::strerror(errno));
      failures++;
      break;
    }
    if (r == 0) break;
    for (ssize_t i = 0; i < r; ++i)
      if (buf[i] != pattern(id, off + i)) {
        std::fprintf(stderr, "client %ld: wrong byte at %ld\n", id, off + i);
        failures++;
        r = -1;
        break;
      }
    if (r < 0) break;
    for (long k = (off + r) / 4096 - off / 4096; k > 0; --k) credit.release();
    off += r;
  }
  if (off != bytes && failures == 0) {
    std::fprintf(stderr, "client %ld: %ld of %ld bytes came back\n", id, off, bytes);
    failures++;
  }
  writer.join();
  loom::io::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: io_echo_client PORT CONNECTIONS BYTES\n");
    return 2;
  }
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  int port = std::atoi(argv[1]);
  long conns = std::atol(argv[2]), bytes = std::atol(argv[3]);
  std::vector<loom::Fibre> fibres;
  fibres.reserve(conns);
  loom::FibreAttr attr;
  attr.stack_size = kStack;
  for (long i = 0; i < conns; ++i) fibres.emplace_back(attr, connection, port, i, bytes);
  for (auto& f : fibres) f.join();
  if (failures) {
    std::fprintf(stderr, "%ld connection(s) failed\n", failures.load());
    return 1;
  }
  return 0;
}
