// epoll_web.cpp — the web benchmark's event-driven peer: a hand-written
// edge-triggered epoll loop, one per thread, each with its own listening
// socket on the same port (SO_REUSEPORT).
//
//   epoll-web [--threads N] [--port P] [--address A] [--defer-accept] [--quiet]
//
// Kept as lean as we know how, and honest: the same request parser and the
// same response bytes as the loom server (apps/webserver's http_parser and
// http_response, linked from loom_web_core), the same routes for the
// benchmark (GET|HEAD /plaintext and /, 404 otherwise, errors answered and
// closed), pipelined answers batched into one write. What it does not have:
// static files and read timeouts (the benchmark does not exercise them; the
// loom server's timeouts cost one store per request).
//
// Per loop: one 64 KiB input and one 64 KiB output buffer, shared by all its
// connections (a request is answered before the next read). Per connection:
// the parser state, and heap copies only of what is left over — a partial
// request, or output the socket did not take.
//
// Edge-triggered reading stops at the first short read rather than at
// EAGAIN: a read that did not fill the buffer emptied the socket, and data
// arriving later raises a new edge. That saves a system call per request
// over the textbook loop (the loom server pays it, since its read blocks).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "http_parser.hpp"
#include "http_response.hpp"
#include "server.hpp"
#include "timeouts.hpp"

namespace {

constexpr std::string_view kServer = "epoll";
constexpr std::size_t kBuf = 64 * 1024;
constexpr int kEvents = 256;

struct Conn {
  int fd;
  web::RequestParser parser;
  char* pending_in = nullptr;  // a partial request (malloc'd)
  std::size_t pending_in_len = 0;
  char* pending_out = nullptr;  // output the socket did not take (malloc'd)
  std::size_t out_len = 0, out_off = 0;
  std::uint64_t discard = 0;  // body bytes of a GET/HEAD still to skip
  bool closing = false;       // close once pending output is written
};

struct Loop {
  int ep = -1;
  int listener = -1;
  char in[kBuf];
  char out[kBuf];
  std::size_t out_len = 0;
  bool defer_accept = false;
};

void close_conn(Conn* c) {
  ::close(c->fd);  // also leaves the epoll set
  std::free(c->pending_in);
  std::free(c->pending_out);
  delete c;
}

// Writes loop.out; keeps what the socket does not take. False: the
// connection is broken.
bool flush(Loop& l, Conn* c) {
  std::size_t off = 0;
  while (off < l.out_len) {
    ssize_t n = ::send(c->fd, l.out + off, l.out_len - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      std::size_t rest = l.out_len - off;
      c->pending_out = static_cast<char*>(std::realloc(c->pending_out, c->out_len - c->out_off + rest));
      std::memmove(c->pending_out, c->pending_out + c->out_off, c->out_len - c->out_off);
      c->out_len -= c->out_off;
      c->out_off = 0;
      std::memcpy(c->pending_out + c->out_len, l.out + off, rest);
      c->out_len += rest;
      break;
    }
    l.out_len = 0;
    return false;
  }
  l.out_len = 0;
  return true;
}

// Output the socket did not take earlier. True when all of it is written.
bool write_pending(Conn* c, bool& broken) {
  while (c->out_off < c->out_len) {
    ssize_t n = ::send(c->fd, c->pending_out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
    if (n > 0) {
      c->out_off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return false;
    broken = true;
    return false;
  }
  std::free(c->pending_out);
  c->pending_out = nullptr;
  c->out_len = c->out_off = 0;
  return true;
}

// Room for one answer in loop.out.
bool reserve(Loop& l, Conn* c, std::size_t n) {
  if (kBuf - l.out_len >= n) return true;
  return flush(l, c);
}

// Answers every complete request in buf[0, len); returns the bytes used.
// Sets c->closing for a final answer.
std::size_t answer(Loop& l, Conn* c, const char* buf, std::size_t len) {
  std::size_t used = 0;
  while (used < len && !c->closing) {
    if (c->discard) {
      std::size_t take = std::min<std::uint64_t>(c->discard, len - used);
      used += take;
      c->discard -= take;
      continue;
    }
    auto st = c->parser.parse(buf + used, len - used);
    if (st == web::RequestParser::Status::incomplete) break;
    if (!reserve(l, c, web::kMaxResponseHead + 64)) {
      c->closing = true;
      break;
    }
    if (st == web::RequestParser::Status::error) {
      l.out_len += web::format_error(l.out + l.out_len, kServer, c->parser.error_status(), web::ConnHeader::close);
      c->closing = true;
      break;
    }
    web::Request r = c->parser.request(buf + used);
    used += c->parser.head_length();
    c->parser.reset();
    bool closing = !r.keep_alive;
    bool head_only = r.method == web::Method::head;
    if (r.method != web::Method::get && r.method != web::Method::head) {
      bool body = r.has_transfer_encoding || r.content_length;
      l.out_len += web::format_error(l.out + l.out_len, kServer, 405, web::conn_header(closing || body, r.minor), false,
                                     "Allow: GET, HEAD\r\n");
      c->closing = closing || body;
    } else if (r.has_transfer_encoding || r.content_length > (1u << 20)) {
      int status = r.has_transfer_encoding ? 501 : 413;
      l.out_len += web::format_error(l.out + l.out_len, kServer, status, web::ConnHeader::close, head_only);
      c->closing = true;
    } else {
      c->discard = r.content_length;
      web::ConnHeader ch = web::conn_header(closing, r.minor);
      if (r.path == "/plaintext" || r.path == "/")
        l.out_len += web::format_hello(l.out + l.out_len, kServer, ch, head_only);
      else
        l.out_len += web::format_error(l.out + l.out_len, kServer, 404, ch, head_only);
      c->closing = closing;
    }
  }
  return used;
}

// Reads and answers until the socket is drained. False: close now.
bool on_readable(Loop& l, Conn* c) {
  for (;;) {
    // A partial request from last time goes first, so that the parser sees
    // one contiguous request.
    std::size_t have = 0;
    if (c->pending_in) {
      std::memcpy(l.in, c->pending_in, c->pending_in_len);
      have = c->pending_in_len;
      std::free(c->pending_in);
      c->pending_in = nullptr;
      c->pending_in_len = 0;
    }
    ssize_t n = ::read(c->fd, l.in + have, kBuf - have);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) {
        if (have) {  // put the partial request back
          c->pending_in = static_cast<char*>(std::malloc(have));
          std::memcpy(c->pending_in, l.in, have);
          c->pending_in_len = have;
        }
        return true;
      }
      return false;  // EOF or error
    }
    std::size_t len = have + static_cast<std::size_t>(n);
    std::size_t used = answer(l, c, l.in, len);
    if (!c->closing && used < len) {
      c->pending_in = static_cast<char*>(std::malloc(len - used));
      std::memcpy(c->pending_in, l.in + used, len - used);
      c->pending_in_len = len - used;
    }
    if (l.out_len && !flush(l, c)) return false;
    if (c->closing) return c->pending_out != nullptr;            // close once the rest is written
    if (c->pending_out) return true;                             // wait for EPOLLOUT before reading more
    if (static_cast<std::size_t>(n) < kBuf - have) return true;  // drained
  }
}

// One readiness event of a connection: write what is pending, read and
// answer, close when broken or done.
void on_event(Loop& l, Conn* c, std::uint32_t e) {
  bool broken = false;
  if ((e & EPOLLOUT) && c->pending_out) {
    if (write_pending(c, broken) && c->closing) broken = true;       // final answer written
    if (!broken && !c->pending_out && !(e & EPOLLIN)) e |= EPOLLIN;  // resume reading what we left
  }
  if (!broken && (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && !c->pending_out && !c->closing)
    broken = !on_readable(l, c);
  if (!broken && c->closing && !c->pending_out) broken = true;
  if (broken) close_conn(c);
}

void accept_all(Loop& l) {
  for (;;) {
    int fd = ::accept4(l.listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN, or out of descriptors: try again at the next event
    }
    auto* c = new Conn{fd, {}};
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = c;
    if (epoll_ctl(l.ep, EPOLL_CTL_ADD, fd, &ev) != 0)
      close_conn(c);
    else if (l.defer_accept)
      on_event(l, c, EPOLLIN);  // TCP_DEFER_ACCEPT: the request is here; answer it now
  }
}

void run_loop(Loop* lp) {
  Loop& l = *lp;
  epoll_event evs[kEvents];
  for (;;) {
    int n = epoll_wait(l.ep, evs, kEvents, -1);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.ptr == nullptr) {
        accept_all(l);
        continue;
      }
      on_event(l, static_cast<Conn*>(evs[i].data.ptr), evs[i].events);
    }
  }
}

int usage_error(const char* msg, const char* arg) {
  std::fprintf(
      stderr,
      "epoll-web: %s '%s'\nusage: epoll-web [--threads N] [--port P] [--address A] [--defer-accept] [--quiet]\n", msg,
      arg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  web::Options o;  // only port, address, backlog are used
  unsigned threads = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      std::string n(name);
      if (a.rfind(n + "=", 0) == 0) return argv[i] + n.size() + 1;
      if (a == n && i + 1 < argc) return argv[++i];
      return nullptr;
    };
    const char* v;
    char* end = nullptr;
    if (a == "--quiet") {
      o.quiet = true;
    } else if (a == "--defer-accept") {
      o.defer_accept = true;
    } else if (a == "--help" || a == "-h") {
      std::printf("usage: epoll-web [--threads N] [--port P] [--address A] [--defer-accept] [--quiet]\n");
      return 0;
    } else if ((v = value("--threads"))) {
      unsigned long t = std::strtoul(v, &end, 10);
      if (*end || t < 1 || t > 256) return usage_error("--threads: not a number from 1 to 256:", v);
      threads = static_cast<unsigned>(t);
    } else if ((v = value("--port"))) {
      unsigned long p = std::strtoul(v, &end, 10);
      if (*end || !*v || p > 65535) return usage_error("--port: not a port number:", v);
      o.port = static_cast<unsigned>(p);
    } else if ((v = value("--address"))) {
      o.address = v;
    } else {
      return usage_error("unknown option or missing value:", argv[i]);
    }
  }
  web::setup_process();
  static web::Ticker ticker(nullptr, std::chrono::milliseconds(250));  // the Date

  std::vector<Loop*> loops;
  unsigned port = o.port;
  for (unsigned t = 0; t < threads; ++t) {
    auto* l = new Loop;
    std::string err;
    struct Sys {
      static int socket(int d, int ty, int p) { return ::socket(d, ty, p); }
      static int bind(int fd, const sockaddr* a, socklen_t n) { return ::bind(fd, a, n); }
      static int listen(int fd, int b) { return ::listen(fd, b); }
      static int close(int fd) { return ::close(fd); }
    };
    l->listener = web::open_listener<Sys>(o, port, true, err);
    if (l->listener < 0) {
      std::fprintf(stderr, "epoll-web: %s\n", err.c_str());
      return 1;
    }
    if (t == 0) port = web::local_port(l->listener);
    if (::fcntl(l->listener, F_SETFL, O_NONBLOCK) != 0) return 1;
    l->ep = epoll_create1(EPOLL_CLOEXEC);
    l->defer_accept = o.defer_accept;
    epoll_event ev{};
    ev.events = EPOLLIN;  // level-triggered: accept_all may stop early (EMFILE)
    ev.data.ptr = nullptr;
    epoll_ctl(l->ep, EPOLL_CTL_ADD, l->listener, &ev);
    loops.push_back(l);
  }
  web::print_listening("epoll-web", o, port,
                       "epoll, " + std::to_string(threads) + " loop(s), edge-triggered, SO_REUSEPORT");
  std::vector<std::thread> ts;
  for (unsigned t = 1; t < threads; ++t) ts.emplace_back(run_loop, loops[t]);
  run_loop(loops[0]);
}
