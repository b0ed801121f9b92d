// connection.hpp — one connection as blocking code, for both threaded
// runtimes, and the acceptor loop every runtime shares.
//
// serve_connection<Io>(ctx, fd) is the whole life of a connection: the
// Session (session.hpp) says what it needs next, and this loop does it with
// calls that block — read, write everything pending in one call before the
// next read would block, repeat. Io is a policy of static functions with the
// signatures and blocking semantics of the system calls (io_pthread.hpp:
// the system calls themselves on a kernel thread per connection;
// io_loom.hpp: loom::io on a fibre per connection):
//
//   ssize_t read(int, void*, size_t);   ssize_t write(int, const void*, size_t);
//   ssize_t writev(int, const iovec*, int);   ssize_t pread(int, void*, size_t, off_t);
//   int close(int);   auto blocking(F) -> F's result  (code that may block on a disk)
//
// The connection object, buffers included, lives on the stack of its thread
// or fibre (16 KiB for fibres by default) — or, with --rest (loom), on the
// heap: there the fibre gives its stack back between requests. When a read
// came up short (the socket is drained) and the connection would read
// again, it calls Io::rest(fd, resume, this) instead (loom::io::rest): the
// fibre ends, and is continued at resume() on a warm stack once the next
// request's bytes arrive. Nothing on the stack is live there (the loop's
// state is the Session, in the object). Io::rest returns only if it could
// not rest (a pthread, a fibre not yet detached...): the read then blocks.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstddef>
#include <new>

#include "session.hpp"

namespace web {

template <class Io, bool Lean = false>
class Connection {
 public:
  Connection(ServerContext& ctx, int fd, bool rest = false) : s_(ctx, fd), rest_(rest) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // A resting connection's continuation (on the heap: deleted at its end),
  // also its start: the acceptor starts it at rest (loom::io::rest_start),
  // so a burst of new connections that have not sent yet takes no stacks.
  static void resume(void* p) {
    auto* c = static_cast<Connection*>(p);
    c->drained_ = false;  // its input is there: read it
    c->s_.acquire_buffers();
    c->run();
    delete c;
  }

  // Its first deadline, for a connection that starts at rest (it runs, and
  // arms one itself, only once its first bytes arrive).
  void arm_first_deadline() { s_.arm(); }

  void run() {
    using Next = typename Session<Io, Lean>::Next;
    for (;;) {
      switch (s_.advance()) {
        case Next::read:
          if (rest_ && drained_) {
            drained_ = false;
            s_.release_buffers();
            Io::rest(s_.fd(), &Connection::resume, this);  // returns only if it could not rest
            s_.acquire_buffers();
          }
          if (!read()) return finish(false);  // EOF, error, or shut down by the ticker
          break;
        case Next::write:
          if (!flush()) return finish(false);
          break;
        case Next::close:
          return finish(false);
        case Next::linger:
          return finish(true);
      }
    }
  }

 private:
  bool read() {
    s_.make_room();
    for (;;) {
      ssize_t n = Io::read(s_.fd(), s_.read_at(), s_.read_room());
      if (n > 0) {
        drained_ = !s_.did_read(static_cast<std::size_t>(n));
        return true;
      }
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
  }

  // Writes everything pending (the answers, a file); false if the
  // connection broke (the answer is then cut short: the caller must close).
  bool flush() {
    iovec iov[2];
    int cnt;
    while ((cnt = s_.pending(iov)) > 0) {
      s_.arm();  // before the first write, and after progress: a new deadline for the rest
      ssize_t n = cnt == 1 ? Io::write(s_.fd(), iov[0].iov_base, iov[0].iov_len) : Io::writev(s_.fd(), iov, cnt);
      if (n < 0) {
        if (errno == EINTR) continue;
        s_.drop_output();
        return false;
      }
      s_.wrote(static_cast<std::size_t>(n));
    }
    if (cnt < 0) {
      s_.drop_output();
      return false;
    }
    return true;
  }

  void finish(bool linger) {
    flush();  // the final answer
    if (linger && !s_.broken()) {
      s_.start_linger();
      std::size_t drained = 0;
      while (drained < kMaxLingerBytes) {
        ssize_t n = Io::read(s_.fd(), s_.scratch(), s_.scratch_size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        drained += static_cast<std::size_t>(n);
      }
    }
    s_.close();
  }

  Session<Io, Lean> s_;
  bool rest_;
  bool drained_ = false;  // the last read came up short: the next waits for an edge
};

template <class Io>
void serve_connection(ServerContext& ctx, int fd) {
  Connection<Io> c(ctx, fd);
  c.run();
}

// The acceptor: accepts, enforces --max-connections, and starts a
// connection with Io::spawn(ctx, fd). Never returns.
template <class Io>
void accept_loop(ServerContext& ctx, int listener) {
  for (;;) {
    int fd = Io::accept4(listener, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors or memory: the listener stays readable, so back
      // off instead of spinning until a connection closes.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) Io::sleep_ms(10);
      continue;
    }
    if (ctx.active.load(std::memory_order_relaxed) >= ctx.max_connections) {
      char buf[kMaxResponseHead + 64];
      std::size_t n = format_error(buf, ctx.server_name, 503, ConnHeader::close);
      ::send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
      Io::close(fd);
      continue;
    }
    ctx.active.fetch_add(1, std::memory_order_relaxed);
    if (!Io::spawn(ctx, fd)) {
      ctx.active.fetch_sub(1, std::memory_order_relaxed);
      Io::close(fd);
    }
  }
}

}  // namespace web
