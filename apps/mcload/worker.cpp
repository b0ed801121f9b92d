// apps/mcload/worker.cpp — see worker.hpp.
#include "worker.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace mcload {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

Worker::Worker(const Options& o, unsigned index, unsigned connections)
    : o_(o), index_(index), rng_(o.seed * 1000003ULL + index), conns_(connections) {}

Worker::~Worker() {
  for (auto& c : conns_)
    if (c.fd >= 0) close(c.fd);
  if (ep_ >= 0) close(ep_);
}

bool Worker::connect_all(const sockaddr_in& addr, std::string& err) {
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  if (ep_ < 0) {
    err = std::string("epoll_create1: ") + std::strerror(errno);
    return false;
  }
  for (auto& c : conns_) {
    c.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c.fd < 0) {
      err = std::string("socket: ") + std::strerror(errno);
      return false;
    }
    if (connect(c.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      err = std::string("connect: ") + std::strerror(errno);
      return false;
    }
    int one = 1;
    setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(c.fd, F_SETFL, fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &c;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, c.fd, &ev) != 0) {
      err = std::string("epoll_ctl: ") + std::strerror(errno);
      return false;
    }
  }
  return true;
}

void Worker::note_error(const std::string& e) {
  if (error_samples.size() < 5) error_samples.push_back(e);
}

void Worker::issue(Conn& c, uint64_t now) {
  if (o_.write_ratio > 0 && rng_.uniform() < o_.write_ratio) {
    unsigned size = o_.etc ? etc_value_size(rng_) : o_.value_size;
    append_set(c.out, rng_.below(o_.keys), size, o_);
    c.pending.push_back(Req{true, 0, now});
    ++sets_sent;
    return;
  }
  uint64_t keys[100];
  for (unsigned i = 0; i < o_.multiget; ++i) {
    keys[i] = rng_.below(o_.keys);
    c.keys.push_back(keys[i]);
  }
  append_get(c.out, keys, o_.multiget, o_);
  c.pending.push_back(Req{false, o_.multiget, now});
  get_keys_sent += o_.multiget;
}

void Worker::flush(Conn& c) {
  while (c.out_off < c.out.size()) {
    ssize_t n = send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_off += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!c.want_out) {
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLOUT;
        ev.data.ptr = &c;
        epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
        c.want_out = true;
      }
      return;
    }
    kill(c, std::string("send: ") + std::strerror(errno));
    return;
  }
  c.out.clear();
  c.out_off = 0;
  if (c.want_out) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &c;
    epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
    c.want_out = false;
  }
}

void Worker::kill(Conn& c, const std::string& why) {
  if (c.dead) return;
  c.dead = true;
  ++broken_conns;
  ++total.errors;
  note_error(why);
  unanswered += c.pending.size();
  c.pending.clear();
  epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
  close(c.fd);
  c.fd = -1;
}

void Worker::on_readable(Conn& c, int phase, uint64_t now) {
  char buf[65536];
  bool eof = false;
  for (;;) {
    ssize_t n = recv(c.fd, buf, sizeof buf, 0);
    if (n > 0) {
      c.in.append(buf, size_t(n));
      if (size_t(n) < sizeof buf) break;
      continue;
    }
    if (n == 0) {
      eof = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    kill(c, std::string("recv: ") + std::strerror(errno));
    return;
  }
  uint64_t kbuf[100];
  while (!c.pending.empty()) {
    Req& r = c.pending.front();
    Parse p;
    if (r.set) {
      p = parse_set(c.in.data(), c.in.size(), c.in_off, c.st, o_);
    } else {
      for (unsigned i = 0; i < r.nkeys; ++i) kbuf[i] = c.keys[i];
      p = parse_get(c.in.data(), c.in.size(), c.in_off, kbuf, r.nkeys, c.st, o_);
    }
    if (p == Parse::more) break;
    if (p == Parse::broken) {
      kill(c, "bad reply: " + c.st.error);
      return;
    }
    Counts d;
    if (r.set) {
      d.sets = 1;
    } else {
      d.gets = 1;
      d.get_keys = r.nkeys;
      d.hits = c.st.hits;
      // An error reply answers no key: the server counted neither hit nor miss.
      d.misses = c.st.error.empty() ? r.nkeys - c.st.hits : 0;
      c.keys.erase(c.keys.begin(), c.keys.begin() + r.nkeys);
    }
    if (!c.st.error.empty()) {
      d.errors = 1;
      note_error(c.st.error);
    }
    total.add(d);
    if (phase == kMeasure) {
      measured.add(d);
      uint64_t t = (now - r.t_ns) / 100;
      latency.push_back(t > UINT32_MAX ? UINT32_MAX : uint32_t(t));
    }
    c.pending.pop_front();
    c.st = ReplyState{};
    if (phase < kDrain) {
      if (o_.etc_arrivals)
        free_slots_.push_back(&c);
      else
        issue(c, now);
    }
  }
  if (c.pending.empty() && c.in_off < c.in.size()) {
    // Bytes nobody asked for: memcached's "ERROR Too many open connections"
    // on a connection over its -c limit, or a confused server.
    size_t e = c.in.find('\n', c.in_off);
    std::string what = c.in.substr(c.in_off, std::min<size_t>(e == std::string::npos ? 80 : e - c.in_off, 80));
    while (!what.empty() && (what.back() == '\r' || what.back() == '\n')) what.pop_back();
    kill(c, "the server sent '" + what + "' with no request outstanding");
    return;
  }
  if (c.in_off == c.in.size()) {
    c.in.clear();
    c.in_off = 0;
  } else if (c.in_off > 65536) {
    c.in.erase(0, c.in_off);
    c.in_off = 0;
  }
  if (eof) {
    if (!c.pending.empty() || phase < kDrain) kill(c, "the server closed the connection");
    return;
  }
  if (!c.out.empty()) flush(c);
}

void Worker::run(const std::atomic<int>& phase) {
  uint64_t start = now_ns();
  for (auto& c : conns_) {
    for (unsigned i = 0; i < o_.depth; ++i) {
      if (o_.etc_arrivals)
        free_slots_.push_back(&c);
      else
        issue(c, start);
    }
    if (!o_.etc_arrivals) flush(c);
  }
  double gap_scale_ns = 1000.0 * o_.threads;  // each thread carries 1/T of the arrivals
  uint64_t next_due = start;
  epoll_event evs[256];
  for (;;) {
    int ph = phase.load(std::memory_order_acquire);
    if (ph == kStop) break;
    bool all_idle = true;
    if (ph >= kDrain) {
      for (auto& c : conns_)
        if (!c.dead && !c.pending.empty()) all_idle = false;
      if (all_idle) break;
    }
    uint64_t now = now_ns();
    int timeout_ms = 20;
    if (o_.etc_arrivals && ph < kDrain) {
      while (now >= next_due && !free_slots_.empty()) {
        Conn* c = free_slots_.front();
        free_slots_.pop_front();
        if (c->dead) continue;
        if (now - next_due > 1000000) ++late;
        issue(*c, now);
        flush(*c);
        next_due += uint64_t(etc_gap_us(rng_) * gap_scale_ns);
      }
      if (next_due > now)
        timeout_ms = int((next_due - now) / 1000000);
      else if (!free_slots_.empty())
        timeout_ms = 0;
      if (timeout_ms > 20) timeout_ms = 20;
    }
    int n = epoll_wait(ep_, evs, 256, timeout_ms);
    if (n < 0 && errno != EINTR) {
      note_error(std::string("epoll_wait: ") + std::strerror(errno));
      ++total.errors;
      break;
    }
    now = now_ns();
    ph = phase.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      Conn& c = *static_cast<Conn*>(evs[i].data.ptr);
      if (c.dead) continue;
      if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) on_readable(c, ph, now);
      if (!c.dead && (evs[i].events & EPOLLOUT)) flush(c);
    }
  }
  for (auto& c : conns_) {
    unanswered += c.pending.size();
    c.pending.clear();
  }
}

}  // namespace mcload
