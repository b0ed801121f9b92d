// session.hpp — one HTTP connection's state, apart from how it waits.
//
// Session<Io> is what a connection is between two system calls: the input
// buffer and the parser, the output buffer, a static file on its way out,
// the body bytes still to skip. advance() answers every complete request
// buffered while the output has room, and says what the connection needs
// next; the driver reads, writes, or ends it, in its own way of waiting:
//
//   connection.hpp      blocking calls — a fibre (loom) or a kernel thread
//                       (pthread) per connection;
//   server_events.cpp   non-blocking calls and one-shot readiness callbacks
//                       — colored events (--runtime=events).
//
// The driver's loop, the same for both:
//   1. write what pending() gives (the answers, then the file's next chunk)
//      until it gives nothing (0), reporting each write to wrote(); -1 means
//      the file failed under us (the answer is cut short: end the
//      connection); a failed write: drop_output(), then end it;
//   2. advance(): read  -> make_room(), read into read_at()/read_room(),
//                          did_read(n); EOF or an error ends the connection
//                 write -> back to 1 (the output is full, or a file or the
//                          last answers before a read must go out)
//                 close, linger -> write what is pending (1), then end:
//                          linger shuts our side down first (start_linger)
//                          and reads what the peer still sends (bounded),
//                          so that closing does not reset the connection
//                          before the peer has read the answer;
//   3. close() once, at the end.
// Io supplies what may block on a disk: blocking(f) (the file's open),
// pread() and close() (the file's; also the connection's own descriptor).
//
// Memory. The session is inline buffers of a few hundred bytes' use each:
// on a fibre's stack (16 KiB by default) for connection.hpp, on the heap for
// events; a lean session (Session<Io, true>, resting connections) holds them
// on the heap only while it runs. A request head longer than kInlineIn, or a read that fills the
// buffer (pipelining), moves input to a heap buffer of kBigIn; pipelined
// answers that outgrow kInlineOut move output to one of kBigOut.
//
// Timeouts are the ConnTable's (timeouts.hpp): arm() is one store, made when
// the connection starts waiting for a new request and by the drivers before
// a write may wait.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <type_traits>

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
  bool rest = false;  // --rest: connections on the heap, fibres give their stacks back between requests
  std::atomic<std::size_t> active{0};
};

inline constexpr std::size_t kInlineIn = 1024;
inline constexpr std::size_t kBigIn = 16384;  // > kMaxHead: a head of the limit fits, with room to read past it
inline constexpr std::size_t kInlineOut = 1024;
inline constexpr std::size_t kBigOut = 16384;
inline constexpr std::size_t kMaxAnswer = kMaxResponseHead + 64;  // room one answer (head, short body) needs
inline constexpr std::uint64_t kMaxDiscardedBody = 1 << 20;       // GET/HEAD bodies we read past
inline constexpr std::size_t kFileChunk = 32 * 1024;
inline constexpr std::size_t kMaxLingerBytes = 256 * 1024;
inline constexpr std::int64_t kMaxLingerMs = 2000;

static_assert(kBigIn > kMaxHead, "the parser needs kMaxHead bytes in the buffer to see the limit");
static_assert(kInlineOut >= kMaxAnswer, "one answer must fit in the inline output buffer");
static_assert(kHelloBody.size() <= kMaxAnswer - kMaxResponseHead, "the plaintext answer must fit in kMaxAnswer");

// The two small buffers: inline (on a fibre's or thread's stack, or in an
// event connection), or — a lean session, for resting connections (--rest) —
// on the heap only while the connection runs: a resting connection with
// nothing buffered gives them back (release_buffers), so that what it holds
// between requests is its parser and a few words (docs/BENCHMARKS.md,
// 2026-11-28: 2.6 KiB per connection with the buffers kept).
struct InlineBuffers {
  char* in() { return in_; }
  char* out() { return out_; }
  void acquire() {}
  void release() {}
  char out_[kInlineOut];
  char in_[kInlineIn];
};
// A lean session takes its pair of buffers when it runs and gives it back
// when it rests: once per request. malloc keeps nothing of that size in its
// per-thread cache (2 KiB; tcache stops at 1 KiB), so each request paid
// _int_malloc and _int_free (about 300 instructions, callgrind). Spare
// pairs wait in a LIFO per kernel thread instead — a processor's, for
// loom's fibres, which do not switch between taking a pair and using it —
// so the next request runs on the pair the last rest there gave back, warm
// as the stack from the processor's stack cache is.
class SparePairs {
 public:
  static constexpr std::size_t kKeep = 64;  // 128 KiB a thread at most
  char* get() { return n_ ? spare_[--n_] : new char[kInlineIn + kInlineOut]; }
  void put(char* p) {
    if (n_ < kKeep)
      spare_[n_++] = p;
    else
      delete[] p;
  }
  ~SparePairs() {
    while (n_) delete[] spare_[--n_];
  }

 private:
  char* spare_[kKeep];
  std::size_t n_ = 0;
};
inline thread_local SparePairs spare_pairs;

struct LeanBuffers {
  LeanBuffers() = default;
  LeanBuffers(const LeanBuffers&) = delete;
  LeanBuffers& operator=(const LeanBuffers&) = delete;
  ~LeanBuffers() { release(); }
  char* in() { return p_; }
  char* out() { return p_ ? p_ + kInlineIn : nullptr; }
  void acquire() {
    if (!p_) p_ = spare_pairs.get();
  }
  void release() {
    if (p_) spare_pairs.put(p_);
    p_ = nullptr;
  }
  char* p_ = nullptr;
};

template <class Io, bool Lean = false>
class Session {
 public:
  enum class Next : std::uint8_t { read, write, close, linger };

  // (A lean session starts without its buffers: acquire_buffers().)
  Session(ServerContext& ctx, int fd) : ctx_(ctx), fd_(fd) {
    in_ = bufs_.in();
    out_ = bufs_.out();
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() { end_file(); }

  int fd() const { return fd_; }
  bool broken() const { return broken_; }

  // Answers what is buffered; what the connection needs next (see above).
  // Call it only once pending() has nothing left.
  Next advance() {
    if (need_input_) return out_len_ ? Next::write : Next::read;
    for (;;) {
      if (discard_) {  // the body of a GET/HEAD we answered already
        std::size_t take = std::min<std::uint64_t>(discard_, end_ - start_);
        start_ += take;
        discard_ -= take;
        if (discard_) return wait_for_input();
      }
      if (start_ == end_) start_ = end_ = 0;
      if (out_cap_ - out_len_ < kMaxAnswer) {
        // Pipelining (more requests are waiting behind this batch's first):
        // the big buffer; otherwise write what we have first.
        if (out_ == bufs_.out() && batch_ > 0)
          grow_out();
        else
          return Next::write;
      }
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
          return (end_ > start_ || discard_ || unread_) ? Next::linger : Next::close;
        }
        if (file_fd_ >= 0) return Next::write;  // the file goes out before any later answer
        continue;
      }
      if (st == RequestParser::Status::error) {
        append_error(parser_.error_status(), true);
        return Next::linger;
      }
      return wait_for_input();
    }
  }

  // ---- input ----

  // Room to read into, at read_at(): the buffer moved or grown if needed.
  void make_room() {
    if (end_ == cap_ || want_big_) {
      if (start_) {  // move the partial request to the front (parser offsets are relative to it)
        std::memmove(in_, in_ + start_, end_ - start_);
        end_ -= start_;
        start_ = 0;
      }
      if ((end_ == cap_ || want_big_) && in_ == bufs_.in()) {
        big_in_.reset(new char[kBigIn]);
        std::memcpy(big_in_.get(), in_, end_);
        in_ = big_in_.get();
        cap_ = kBigIn;
      }
      want_big_ = false;
    }
  }
  char* read_at() { return in_ + end_; }
  std::size_t read_room() const { return cap_ - end_; }
  // n > 0 bytes arrived at read_at(). True if they filled the room: more is
  // probably queued (pipelining); false: a stream socket is drained.
  bool did_read(std::size_t n) {
    bool full = n == cap_ - end_;
    if (full && in_ == bufs_.in()) want_big_ = true;
    end_ += n;
    need_input_ = false;
    return full;
  }

  // ---- output ----

  // The bytes to write next, as 1 or 2 iovecs (the answers, then the file's
  // next chunk, read here through Io::pread); 0 when nothing is left; -1 if
  // the file failed (shrank, or a read error).
  int pending(iovec iov[2]) {
    int n = 0;
    if (out_off_ < out_len_) iov[n++] = {out_ + out_off_, out_len_ - out_off_};
    if (file_fd_ >= 0) {
      if (chunk_off_ == chunk_len_) {
        if (file_off_ == file_size_) {
          end_file();
          return n;
        }
        if (!next_chunk()) return -1;
      }
      iov[n++] = {chunk_.get() + chunk_off_, chunk_len_ - chunk_off_};
    }
    return n;
  }
  // n bytes of what pending() gave were written.
  void wrote(std::size_t n) {
    std::size_t a = std::min(n, out_len_ - out_off_);
    out_off_ += a;
    if (out_off_ == out_len_) out_off_ = out_len_ = 0;
    chunk_off_ += n - a;
  }
  // A write failed: the peer is gone; nothing more will be written.
  void drop_output() {
    broken_ = true;
    out_off_ = out_len_ = 0;
    end_file();
  }

  // ---- deadlines and the end ----

  void arm() { ctx_.table->arm(fd_, ctx_.table->now_ms() + ctx_.timeout_ms); }

  // Stops sending (our answer is out) and gives the peer a short while to
  // stop; the driver then reads into scratch() until EOF, an error, the
  // deadline (the ticker shuts the socket down) or kMaxLingerBytes.
  void start_linger() {
    ::shutdown(fd_, SHUT_WR);
    ctx_.table->arm(fd_, ctx_.table->now_ms() + std::min(ctx_.timeout_ms, kMaxLingerMs));
  }
  char* scratch() { return in_; }
  std::size_t scratch_size() const { return cap_; }

  // A lean session about to rest: gives its small buffers back if nothing
  // is buffered in them (a partial request, or the big buffers of a
  // pipelining peer, keep them); acquire_buffers() before it runs again.
  void release_buffers() {
    if constexpr (Lean) {
      if (start_ == end_ && out_len_ == 0 && in_ == bufs_.in() && out_ == bufs_.out()) {
        bufs_.release();
        in_ = out_ = nullptr;
        start_ = end_ = 0;
      }
    }
  }
  void acquire_buffers() {
    if constexpr (Lean) {
      if (!in_) {
        bufs_.acquire();
        in_ = bufs_.in();
        out_ = bufs_.out();
      }
    }
  }

  void close() {
    end_file();
    ctx_.table->release(fd_);
    Io::close(fd_);
    ctx_.active.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  // No complete request is buffered: read, after writing what the batch
  // produced.
  Next wait_for_input() {
    batch_ = 0;
    need_input_ = true;
    if (out_len_) {
      fresh_ = false;  // the write arms the deadline
      return Next::write;
    }
    if (fresh_) {
      arm();
      fresh_ = false;
    }
    return Next::read;
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
    if (ctx_.root && r.path != "/plaintext") {
      serve_file(r, head_only, closing);
      return !closing;
    }
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

  // Static files (slow path, kept out of the request loop's frame): the head
  // now, the body through pending().
  __attribute__((noinline)) void serve_file(const Request& r, bool head_only, bool closing) {
    StaticRoot::File f = Io::blocking([&] { return ctx_.root->open(r.path); });
    if (f.status != 200) {
      append_error(f.status, closing, {}, head_only, r.minor);
      return;
    }
    char* p = reserve(kMaxResponseHead);
    out_len_ += format_head(p, ctx_.server_name, 200, f.mime, f.size, conn_header(closing, r.minor));
    if (head_only || !f.size) {
      Io::close(f.fd);
      return;
    }
    if (!nodelay_) {  // the file's last segment must not wait for an ACK (Nagle)
      int one = 1;
      ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      nodelay_ = true;
    }
    file_fd_ = f.fd;
    file_size_ = f.size;
    file_off_ = 0;
    chunk_.reset(new char[kFileChunk]);
    chunk_off_ = chunk_len_ = 0;
  }

  bool next_chunk() {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kFileChunk, file_size_ - file_off_));
    ssize_t n = Io::pread(file_fd_, chunk_.get(), want, static_cast<off_t>(file_off_));
    if (n <= 0) return false;  // the file shrank or failed under us
    file_off_ += static_cast<std::uint64_t>(n);
    chunk_off_ = 0;
    chunk_len_ = static_cast<std::size_t>(n);
    return true;
  }

  void end_file() {
    if (file_fd_ < 0) return;
    Io::close(file_fd_);
    file_fd_ = -1;
    chunk_.reset();
    chunk_off_ = chunk_len_ = 0;
  }

  // advance() made room for one answer before parsing its request.
  char* reserve(std::size_t n) {
    assert(out_cap_ - out_len_ >= n);
    (void)n;
    return out_ + out_len_;
  }

  void grow_out() {
    big_out_.reset(new char[kBigOut]);
    std::memcpy(big_out_.get(), out_, out_len_);
    out_ = big_out_.get();
    out_cap_ = kBigOut;
  }

  ServerContext& ctx_;
  int fd_;
  RequestParser parser_;
  char* in_ = nullptr;
  std::size_t cap_ = kInlineIn, start_ = 0, end_ = 0;
  char* out_ = nullptr;
  std::size_t out_cap_ = kInlineOut, out_len_ = 0, out_off_ = 0;
  std::uint64_t discard_ = 0;
  int file_fd_ = -1;  // a file being sent: [file_off_, file_size_) still to read
  std::uint64_t file_size_ = 0, file_off_ = 0;
  std::size_t chunk_off_ = 0, chunk_len_ = 0;
  unsigned batch_ = 0;       // requests answered since the last read
  bool fresh_ = true;        // at a request boundary: the next wait gets a new deadline
  bool need_input_ = false;  // nothing complete is buffered: read before parsing again
  bool want_big_ = false;
  bool broken_ = false;  // a write failed, or the answer was cut short
  bool unread_ = false;  // the peer may still be sending a body we will not read
  bool nodelay_ = false;
  std::unique_ptr<char[]> big_in_, big_out_, chunk_;
  std::conditional_t<Lean, LeanBuffers, InlineBuffers> bufs_;
};

}  // namespace web
