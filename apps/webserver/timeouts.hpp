// timeouts.hpp — read/write deadlines of every connection, enforced from
// outside the connection.
//
// Why not a timeout on each read: a client sending one byte per second
// satisfies any per-read timeout longer than a second, and a timer armed and
// cancelled around every blocking read costs the fast path (a timer-heap
// insert and removal per request on loom, a setsockopt or a poll per read on
// kernel threads). Instead each connection stores a coarse deadline in its
// slot — one relaxed store per request, from a clock the ticker publishes —
// and the ticker scans the slots a few times a second and shuts down
// (shutdown(2), SHUT_RDWR) any connection past its deadline. The blocked read
// or write then returns (0 or EPIPE) on whichever runtime the connection is
// on, and the connection closes itself as if the peer had gone.
//
// The deadline a connection arms is "now + read timeout" whenever it starts
// waiting for a new request, and again before each blocking write; bytes
// that trickle in do not extend it. A connection is therefore closed at most
// one tick (period()) after its deadline.
//
// Slots are indexed by descriptor. The race between the ticker shutting
// down descriptor N and the connection closing N (after which an unrelated
// new connection may get N) is settled by a per-slot lock: release() clears
// the slot under the lock before the caller closes N, and the ticker calls
// shutdown() only while holding the lock on a slot that is still armed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

namespace web {

class ConnTable {
 public:
  // Slots for descriptors 0 .. max_fd-1; descriptors beyond are not tracked
  // (arm/release ignore them).
  explicit ConnTable(std::size_t max_fd);

  // Coarse monotonic time, published by the ticker (ms).
  std::int64_t now_ms() const { return now_ms_.load(std::memory_order_relaxed); }
  void publish_now(std::int64_t ms) { now_ms_.store(ms, std::memory_order_relaxed); }

  // The connection on fd must be done (or make progress) by `deadline_ms`.
  void arm(int fd, std::int64_t deadline_ms) {
    if (static_cast<std::size_t>(fd) < size_) slots_[fd].deadline.store(deadline_ms, std::memory_order_relaxed);
  }
  // Before the connection closes fd: the ticker no longer touches it.
  void release(int fd);
  // Shuts down every armed connection whose deadline is before now_ms;
  // returns how many.
  std::size_t reap(std::int64_t now_ms);

 private:
  struct Slot {
    std::atomic<std::int64_t> deadline{0};  // 0: not armed; -1: reaped
    std::atomic<bool> lock{false};
  };
  void lock(Slot& s);
  std::size_t size_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<std::int64_t> now_ms_{0};
};

std::int64_t monotonic_ms();

// A kernel thread that, every period, publishes the time, refreshes the
// cached Date and reaps expired connections. Off the request path: a few
// wake-ups a second.
class Ticker {
 public:
  Ticker(ConnTable* table, std::chrono::milliseconds period);
  ~Ticker();
  std::chrono::milliseconds period() const { return period_; }

 private:
  void run();
  ConnTable* table_;
  std::chrono::milliseconds period_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The tick for a read timeout: a quarter of it, between 10 ms and 250 ms.
std::chrono::milliseconds tick_for(std::chrono::milliseconds timeout);

}  // namespace web
