// io_loom.hpp — the Io policy of connection.hpp for one loom fibre per
// connection: loom::io, which blocks the fibre and never the processor, and
// loom::offload for code that may block on a disk; and the set-up both loom
// runtimes (fibres, events) share.
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <new>
#include <loom/io.hpp>
#include <loom/loom.hpp>
#include <utility>

#include "connection.hpp"
#include "options.hpp"

namespace web {

// The loom runtimes' common set-up (server_loom.cpp): the scheduler's
// configuration from LOOM_* and the options (--poller, --stack-size), and
// the processors in all (--processors, or the CPUs this process may use).
loom::SchedConfig sched_config(const Options& o);
unsigned processor_count(const Options& o);

struct LoomIo {
  static int socket(int d, int t, int p) { return loom::io::socket(d, t, p); }
  static int bind(int fd, const sockaddr* a, socklen_t n) { return loom::io::bind(fd, a, n); }
  static int listen(int fd, int backlog) { return loom::io::listen(fd, backlog); }
  static int accept4(int l, int flags) { return loom::io::accept4(l, nullptr, nullptr, flags); }
  static ssize_t read(int fd, void* b, std::size_t n) { return loom::io::read(fd, b, n); }
  static ssize_t write(int fd, const void* b, std::size_t n) { return loom::io::write(fd, b, n); }
  static ssize_t writev(int fd, const iovec* iov, int cnt) { return loom::io::writev(fd, iov, cnt); }
  static ssize_t pread(int fd, void* b, std::size_t n, off_t off) { return loom::io::pread(fd, b, n, off); }
  static int close(int fd) { return loom::io::close(fd); }
  template <class F>
  static auto blocking(F&& f) -> decltype(std::forward<F>(f)()) {
    return loom::offload(std::forward<F>(f));
  }
  static void sleep_ms(int ms) { loom::this_fibre::sleep_for(std::chrono::milliseconds(ms)); }
  static int rest(int fd, void (*fn)(void*), void* arg) { return loom::io::rest(fd, fn, arg); }

  // A detached fibre in the acceptor's cluster; with --rest, one that
  // starts at rest, its state (a lean connection) on the heap.
  static bool spawn(ServerContext& ctx, int fd) {
    loom::FibreAttr a;
    a.stack_size = ctx.stack_size;
    a.name = "connection";
    if (ctx.rest) {
      using Resting = Connection<LoomIo, true>;
      auto* c = new (std::nothrow) Resting(ctx, fd, true);
      if (!c) return false;
      c->arm_first_deadline();  // (the ticker shuts a silent one down: an edge)
      if (loom::io::rest_start(fd, &Resting::resume, c, a) == 0) return true;
      ctx.table->release(fd);  // (before the acceptor closes the number)
      delete c;
      return false;
    }
    try {
      loom::Fibre(a, [&ctx, fd] { serve_connection<LoomIo>(ctx, fd); }).detach();
    } catch (const std::exception&) {
      return false;
    }
    return true;
  }
};

}  // namespace web
