// connection.hpp — one connection, written once for both runtimes.
//
// serve_connection<Io>(ctx, fd) is the whole life of a connection as
// blocking code: read, parse every complete request in the buffer, append
// each answer to the output buffer, write them all in one call before the
// next read would block, repeat. Io is a policy of static functions with the
// signatures and blocking semantics of the system calls (io_pthread.hpp:
// the system calls themselves on a kernel thread per connection;
// io_loom.hpp: loom::io on a fibre per connection):
//
//   ssize_t read(int, void*, size_t);   ssize_t write(int, const void*, size_t);
//   ssize_t writev(int, const iovec*, int);   ssize_t pread(int, void*, size_t, off_t);
//   int close(int);   auto blocking(F) -> F's result  (code that may block on a disk)
//
// Memory. The connection object lives on the stack of its thread or fibre
// (16 KiB for fibres by default), so its buffers are small and inline: the
// common case — requests and answers of a few hundred bytes — touches well
// under a page of each. A request head longer than kInlineIn, or a read that
// fills the buffer (pipelining), moves input to a heap buffer of kBigIn;
// pipelined answers that outgrow kInlineOut move output to one of kBigOut.
//
// Timeouts are the ConnTable's (timeouts.hpp): one store per flush.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

#include "http_parser.hpp"
#include "http_response.hpp"
#include "static_files.hpp"
#include "timeouts.hpp"

namespace web {

// What every connection of one server shares.
struct ServerContext {
  std::string_view server_name = "loom";
  const StaticRoot* root = nullptr;  // --root, or none
  ConnTable* table = nullptr;
  std::int64_t timeout_ms = 10000;
  std::size_t max_connections = 0;
  std::size_t stack_size = 16 * 1024;
  std::atomic<std::size_t> active{0};
};

inline constexpr std::size_t kInlineIn = 1024;
inline constexpr std::size_t kBigIn = 16384;  // > kMaxHead: a head of the limit fits, with room to read past it
inline constexpr std::size_t kInlineOut = 1024;
inline constexpr std::size_t kBigOut = 16384;
inline constexpr std::uint64_t kMaxDiscardedBody = 1 << 20;  // GET/HEAD bodies we read past
inline constexpr std::size_t kFileChunk = 32 * 1024;
inline constexpr std::size_t kMaxLingerBytes = 256 * 1024;
inline constexpr std::int64_t kMaxLingerMs = 2000;

static_assert(kBigIn > kMaxHead, "the parser needs kMaxHead bytes in the buffer to see the limit");
static_assert(kInlineOut >= kMaxResponseHead + 64, "one answer must fit in the inline output buffer");

template <class Io>
class Connection {
 public:
  Connection(ServerContext& ctx, int fd) : ctx_(ctx), fd_(fd) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void run() {
    End how = serve();
    finish(how);
  }

 private:
  enum class End : std::uint8_t { close, linger };  // linger: shut down our side, drain, then close

  End serve() {
    for (;;) {
      if (discard_) {  // the body of a GET/HEAD we answered already
        std::size_t take = std::min<std::uint64_t>(discard_, end_ - start_);
        start_ += take;
        discard_ -= take;
        if (discard_) {
          if (!make_room_and_read()) return End::close;
          continue;
        }
      }
      if (start_ == end_) start_ = end_ = 0;
      auto st = parser_.parse(in_ + start_, end_ - start_);
      if (st == RequestParser::Status::done) {
        Request r = parser_.request(in_ + start_);
        std::size_t head = parser_.head_length();
        ++batch_;
        bool keep = handle(r);
        start_ += head;
        parser_.reset();
        fresh_ = true;
        if (!keep) {
          // Bytes after a final request, or an unread body, mean the peer is
          // still sending: a plain close could reset the connection before
          // it reads our answer.
          return (end_ > start_ || discard_ || unread_) ? End::linger : End::close;
        }
        continue;
      }
      if (st == RequestParser::Status::error) {
        append_error(parser_.error_status(), true);
        return End::linger;
      }
      // Incomplete: flush what the batch produced, then wait for more.
      batch_ = 0;
      if (out_len_) {
        if (!flush()) return End::close;
      } else if (fresh_) {
        arm();
      }
      fresh_ = false;
      if (!make_room_and_read()) return End::close;
    }
  }

  // Appends the answer to one request; false if the connection must close
  // after it.
  bool handle(const Request& r) {
    bool closing = !r.keep_alive;
    if (r.method != Method::get && r.method != Method::head) {
      bool body = r.has_transfer_encoding || (r.has_content_length && r.content_length);
      append_error(405, closing || body, "Allow: GET, HEAD\r\n", false, r.minor);
      unread_ = body;
      return !(closing || body);
    }
    bool head_only = r.method == Method::head;
    if (r.has_transfer_encoding) {  // chunked request bodies are not supported
      append_error(501, true, {}, head_only, r.minor);
      unread_ = true;
      return false;
    }
    if (r.has_content_length && r.content_length) {
      if (r.content_length > kMaxDiscardedBody) {
        append_error(413, true, {}, head_only, r.minor);
        unread_ = true;
        return false;
      }
      discard_ = r.content_length;
    }
    if (ctx_.root && r.path != "/plaintext") return serve_file(r, head_only, closing) && !closing;
    if (r.path == "/plaintext" || r.path == "/") {
      char* p = reserve(kMaxResponseHead + kHelloBody.size());
      out_len_ += format_hello(p, ctx_.server_name, conn_header(closing, r.minor), head_only);
    } else {
      append_error(404, closing, {}, head_only, r.minor);
    }
    return !closing;
  }

  void append_error(int status, bool closing, std::string_view extra = {}, bool head_only = false, unsigned minor = 1) {
    char* p = reserve(kMaxResponseHead + 64);
    out_len_ += format_error(p, ctx_.server_name, status, conn_header(closing, minor), head_only, extra);
  }

  // Static files (slow path, kept out of the request loop's frame).
  __attribute__((noinline)) bool serve_file(const Request& r, bool head_only, bool closing) {
    StaticRoot::File f = Io::blocking([&] { return ctx_.root->open(r.path); });
    if (f.status != 200) {
      append_error(f.status, closing, {}, head_only, r.minor);
      return true;
    }
    char* p = reserve(kMaxResponseHead);
    out_len_ += format_head(p, ctx_.server_name, 200, f.mime, f.size, conn_header(closing, r.minor));
    bool ok = true;
    if (!head_only && f.size) {
      if (!nodelay_) {  // the file's last segment must not wait for an ACK (Nagle)
        int one = 1;
        ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        nodelay_ = true;
      }
      ok = send_file(f);
    }
    Io::close(f.fd);
    if (!ok) broken_ = true;
    return ok;
  }

  // Writes the pending output and then the file; false if the connection
  // broke (its answer is then cut short: the caller must close).
  bool send_file(const StaticRoot::File& f) {
    std::unique_ptr<char[]> chunk(new char[kFileChunk]);
    std::uint64_t off = 0;
    while (off < f.size) {
      std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kFileChunk, f.size - off));
      ssize_t n = Io::pread(f.fd, chunk.get(), want, static_cast<off_t>(off));
      if (n <= 0) return false;  // the file shrank or failed under us
      off += static_cast<std::uint64_t>(n);
      iovec iov[2] = {{out_, out_len_}, {chunk.get(), static_cast<std::size_t>(n)}};
      if (!write_all(iov[0].iov_len ? iov : iov + 1, iov[0].iov_len ? 2 : 1)) return false;
      out_len_ = 0;
    }
    return true;
  }

  // Room for n more bytes of output: flushes first, or (pipelining: more
  // requests are waiting behind this one) takes the big buffer.
  char* reserve(std::size_t n) {
    if (out_cap_ - out_len_ < n) {
      if (out_ == out_inline_ && batch_ > 1) {
        grow_out();
      } else if (!flush()) {
        broken_ = true;
        out_len_ = 0;  // the peer is gone: what we format is dropped
      }
    }
    return out_ + out_len_;
  }

  void grow_out() {
    big_out_.reset(new char[kBigOut]);
    std::memcpy(big_out_.get(), out_, out_len_);
    out_ = big_out_.get();
    out_cap_ = kBigOut;
  }

  bool flush() {
    if (!out_len_) return !broken_;
    if (broken_) {
      out_len_ = 0;
      return false;
    }
    iovec iov{out_, out_len_};
    bool ok = write_all(&iov, 1);
    out_len_ = 0;
    if (!ok) broken_ = true;
    return ok;
  }

  bool write_all(iovec* iov, int cnt) {
    arm();
    while (cnt) {
      ssize_t n = cnt == 1 ? Io::write(fd_, iov->iov_base, iov->iov_len) : Io::writev(fd_, iov, cnt);
      if (n < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      std::size_t left = static_cast<std::size_t>(n);
      while (cnt && left >= iov->iov_len) {
        left -= iov->iov_len;
        ++iov;
        --cnt;
      }
      if (cnt) {
        iov->iov_base = static_cast<char*>(iov->iov_base) + left;
        iov->iov_len -= left;
        arm();  // progress: a new deadline for the rest
      }
    }
    return true;
  }

  bool make_room_and_read() {
    if (end_ == cap_ || want_big_) {
      if (start_) {  // move the partial request to the front (parser offsets are relative to it)
        std::memmove(in_, in_ + start_, end_ - start_);
        end_ -= start_;
        start_ = 0;
      }
      if ((end_ == cap_ || want_big_) && in_ == in_inline_) {
        big_in_.reset(new char[kBigIn]);
        std::memcpy(big_in_.get(), in_, end_);
        in_ = big_in_.get();
        cap_ = kBigIn;
      }
      want_big_ = false;
    }
    for (;;) {
      ssize_t n = Io::read(fd_, in_ + end_, cap_ - end_);
      if (n > 0) {
        // A read that filled the buffer: more is probably queued (pipelining).
        if (static_cast<std::size_t>(n) == cap_ - end_ && in_ == in_inline_) want_big_ = true;
        end_ += static_cast<std::size_t>(n);
        return true;
      }
      if (n < 0 && errno == EINTR) continue;
      return false;  // EOF, error, or shut down by the ticker
    }
  }

  void arm() { ctx_.table->arm(fd_, ctx_.table->now_ms() + ctx_.timeout_ms); }

  void finish(End how) {
    flush();
    if (how == End::linger && !broken_) {
      // Our answer is written; stop sending, then read what the peer still
      // sends (bounded) so that closing does not reset the connection
      // before it has read the answer.
      ::shutdown(fd_, SHUT_WR);
      ctx_.table->arm(fd_, ctx_.table->now_ms() + std::min(ctx_.timeout_ms, kMaxLingerMs));
      std::size_t drained = 0;
      while (drained < kMaxLingerBytes) {
        ssize_t n = Io::read(fd_, in_, cap_);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        drained += static_cast<std::size_t>(n);
      }
    }
    ctx_.table->release(fd_);
    Io::close(fd_);
    ctx_.active.fetch_sub(1, std::memory_order_relaxed);
  }

  ServerContext& ctx_;
  int fd_;
  RequestParser parser_;
  char* in_ = in_inline_;
  std::size_t cap_ = kInlineIn, start_ = 0, end_ = 0;
  char* out_ = out_inline_;
  std::size_t out_cap_ = kInlineOut, out_len_ = 0;
  std::uint64_t discard_ = 0;
  unsigned batch_ = 0;  // requests answered since the last read
  bool fresh_ = true;   // at a request boundary: the next wait gets a new deadline
  bool want_big_ = false;
  bool broken_ = false;  // a write failed, or the answer was cut short
  bool unread_ = false;  // the peer may still be sending a body we will not read
  bool nodelay_ = false;
  std::unique_ptr<char[]> big_in_, big_out_;
  char out_inline_[kInlineOut];
  char in_inline_[kInlineIn];
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
