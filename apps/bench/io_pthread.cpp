// io_pthread — the I/O benchmark's echo server (io_common.hpp) on one kernel
// thread per connection with blocking system calls: the same program as
// io_loom, with pthreads where io_loom has fibres and plain read/write where
// it has loom::io.
//
// main accepts (blocking accept4) and starts one detached thread per
// connection, with a 64 KiB stack (loom's default fibre stack; glibc caches
// the stacks of exited threads); the thread reads up to --buffer bytes into
// a buffer on its stack, writes them all back, and closes on EOF or error.
// A second thread reads stdin for the driver ("stats", EOF = exit).
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "io_common.hpp"

namespace {

constexpr std::size_t kStack = 64 * 1024;

std::size_t g_buffer = 16384;
std::atomic<std::uint64_t> g_accepted{0};
std::atomic<std::uint64_t> g_threads_failed{0};
std::atomic<std::uint64_t> g_accept_errors{0};

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

void* connection(void* arg) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(arg));
  char* buf = static_cast<char*>(__builtin_alloca(g_buffer));
  for (;;) {
    ssize_t n = ::read(fd, buf, g_buffer);
    if (n > 0) {
      if (!write_all(fd, buf, static_cast<std::size_t>(n))) break;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // EOF or error
    }
  }
  ::close(fd);
  return nullptr;
}

void monitor() {
  std::string line;
  char c;
  for (;;) {
    ssize_t n = ::read(0, &c, 1);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      std::_Exit(0);
    }
    if (c != '\n') {
      line += c;
      continue;
    }
    if (line == "stats") {
      bench::Json j;
      j.add("accepted", static_cast<std::uint64_t>(g_accepted.load()))
          .add("threads_failed", static_cast<std::uint64_t>(g_threads_failed.load()))
          .add("accept_errors", static_cast<std::uint64_t>(g_accept_errors.load()));
      j.print();
    }
    line.clear();
  }
}

}  // namespace

int main(int argc, char** argv) {
  iobench::ServerOptions o = iobench::parse_server(
      "io_pthread", argc, argv, "One kernel thread per connection, blocking system calls.\n",
      [](const std::string&, bench::ArgWalker&) { return false; });
  g_buffer = o.buffer;
  if (g_buffer + 16 * 1024 > kStack) {
    std::fprintf(stderr, "io_pthread: --buffer %zu does not fit the %zu-byte thread stack\n", g_buffer, kStack);
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);  // a write to a reset peer fails with EPIPE (loom's default too)
  iobench::raise_nofile();

  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = iobench::loopback(o.port);
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, o.backlog) != 0) {
    std::perror("io_pthread: listen");
    return 1;
  }
  std::thread(monitor).detach();
  iobench::print_listening(iobench::bound_port(lfd), "pthread", "");

  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kStack);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  for (;;) {
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      g_accept_errors.fetch_add(1, std::memory_order_relaxed);
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) usleep(1000);
      continue;
    }
    g_accepted.fetch_add(1, std::memory_order_relaxed);
    iobench::set_nodelay(fd);
    pthread_t t;
    if (pthread_create(&t, &attr, connection, reinterpret_cast<void*>(static_cast<intptr_t>(fd))) != 0) {
      g_threads_failed.fetch_add(1, std::memory_order_relaxed);
      ::close(fd);
    }
  }
}
