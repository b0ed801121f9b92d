// timeouts.cpp — see timeouts.hpp.
#include "timeouts.hpp"

#include <sched.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <ctime>

#include "http_response.hpp"

namespace web {

std::int64_t monotonic_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

ConnTable::ConnTable(std::size_t max_fd) : size_(max_fd), slots_(new Slot[max_fd]) {
  now_ms_.store(monotonic_ms(), std::memory_order_relaxed);
}

void ConnTable::lock(Slot& s) {
  // Held only around one shutdown(2) or one store: short.
  while (s.lock.exchange(true, std::memory_order_acquire))
    while (s.lock.load(std::memory_order_relaxed)) sched_yield();
}

void ConnTable::release(int fd) {
  if (static_cast<std::size_t>(fd) >= size_) return;
  Slot& s = slots_[fd];
  lock(s);
  s.deadline.store(0, std::memory_order_relaxed);
  s.lock.store(false, std::memory_order_release);
}

std::size_t ConnTable::reap(std::int64_t now) {
  // Every slot, every tick: arm() stays one store (no highest-descriptor
  // bookkeeping), and 20,000 slots are a few microseconds to scan.
  std::size_t reaped = 0;
  for (std::size_t fd = 0; fd < size_; ++fd) {
    Slot& s = slots_[fd];
    std::int64_t d = s.deadline.load(std::memory_order_relaxed);
    if (d <= 0 || d > now) continue;
    lock(s);
    d = s.deadline.load(std::memory_order_relaxed);
    if (d > 0 && d <= now) {
      ::shutdown(static_cast<int>(fd), SHUT_RDWR);
      s.deadline.store(-1, std::memory_order_relaxed);
      ++reaped;
    }
    s.lock.store(false, std::memory_order_release);
  }
  return reaped;
}

std::chrono::milliseconds tick_for(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(250));
}

Ticker::Ticker(ConnTable* table, std::chrono::milliseconds period)
    : table_(table), period_(period), thread_([this] { run(); }) {}

Ticker::~Ticker() {
  stop_.store(true);
  thread_.join();
}

void Ticker::run() {
  while (!stop_.load(std::memory_order_relaxed)) {
    std::this_thread::sleep_for(period_);
    std::int64_t now = monotonic_ms();
    date_cache().refresh(std::time(nullptr));
    if (table_) {
      table_->publish_now(now);
      table_->reap(now);
    }
  }
}

}  // namespace web
