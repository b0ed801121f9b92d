// apps/mcload/worker.hpp — one client thread: its connections, an epoll set,
// and the closed loop (each reply lets its connection send the next
// request, so every connection keeps --depth requests outstanding), or with
// --arrivals etc a paced loop (a request is due every ETC gap x threads;
// a due request waits for a free slot on some connection).
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "dist.hpp"
#include "options.hpp"
#include "protocol.hpp"

namespace mcload {

// The run's phases, set by the main thread, read by the workers.
enum Phase : int { kWarmup = 0, kMeasure = 1, kDrain = 2, kStop = 3 };

struct Counts {
  uint64_t gets = 0;      // get requests completed
  uint64_t sets = 0;      // set requests completed
  uint64_t get_keys = 0;  // keys asked for by completed gets
  uint64_t hits = 0, misses = 0;
  uint64_t errors = 0;  // error replies and broken streams
  void add(const Counts& c) {
    gets += c.gets, sets += c.sets, get_keys += c.get_keys, hits += c.hits, misses += c.misses, errors += c.errors;
  }
};

class Worker {
 public:
  Worker(const Options& o, unsigned index, unsigned connections);
  ~Worker();
  // Opens the connections (blocking connect, then non-blocking); false with
  // the reason in `err` when one fails.
  bool connect_all(const sockaddr_in& addr, std::string& err);
  void run(const std::atomic<int>& phase);

  Counts total;                               // every reply, warm-up to drain
  Counts measured;                            // replies that arrived while measuring
  uint64_t get_keys_sent = 0, sets_sent = 0;  // what went out, answered or not
  uint64_t unanswered = 0;                    // requests without a reply when the run stopped
  uint64_t broken_conns = 0;
  uint64_t late = 0;              // paced requests sent > 1 ms after they were due
  std::vector<uint32_t> latency;  // measured replies, in 0.1 µs
  std::vector<std::string> error_samples;

 private:
  struct Req {
    bool set;
    unsigned nkeys;
    uint64_t t_ns;
  };
  struct Conn {
    int fd = -1;
    std::string out, in;
    size_t out_off = 0, in_off = 0;
    std::deque<Req> pending;
    std::deque<uint64_t> keys;  // the keys of the pending gets, in order
    ReplyState st;
    bool want_out = false, dead = false;
  };

  void issue(Conn& c, uint64_t now);
  void flush(Conn& c);
  void on_readable(Conn& c, int phase, uint64_t now);
  void kill(Conn& c, const std::string& why);
  void note_error(const std::string& e);

  const Options& o_;
  unsigned index_;
  Rng rng_;
  int ep_ = -1;
  std::vector<Conn> conns_;
  std::deque<Conn*> free_slots_;  // paced mode: connections with a slot free
  int phase_seen_ = kWarmup;
};

uint64_t now_ns();

}  // namespace mcload
