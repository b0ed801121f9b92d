// loom/channel.hpp — channels: FIFO queues between fibres (and kernel threads)
// that block the pusher when full and the popper when empty.
//
//   loom::Channel<std::string> ch(16);        // buffered: at most 16 queued
//   loom::Channel<Job> jobs(loom::kUnbounded); // push never blocks
//   loom::Channel<int> rv(0);                 // unbuffered: push waits for a pop (Go's make(chan int))
//   ch.push("hello");                         // ChannelStatus::success, or closed
//   while (auto s = ch.pop()) use(*s);        // std::nullopt once closed and drained
//   ch.close();
//
// What Go and Boost.Fiber users expect, with Boost.Fiber's names
// (channel_op_status → ChannelStatus): push/pop block; try_push/try_pop
// never block (full / empty); push_for/push_until, pop_for/pop_until give
// up at, never before, the deadline (timeout). close() is idempotent and
// never blocks: pushes after it report closed (the value is not taken),
// pops drain what is queued and then report closed, and every waiter is
// woken. Unlike Go, pushing on a closed channel is an answer, not a panic.
//
// Ordering: FIFO per channel; blocked pushers and poppers are served in the
// order they arrived (a value is handed straight to the oldest waiting
// popper, and a pop from a full channel takes the oldest waiting pusher's
// value into the buffer), as Go's channels do. A push or pop that returns
// success has moved exactly one value; one that does not has left the
// caller's value untouched (a failed push of an rvalue does not move from it).
//
// T must be move-constructible without throwing (values are moved under the
// channel's spin lock); move-only types are fine. Capacity 0 is a rendezvous:
// a push returns once a pop has taken its value. A bounded channel's buffer
// grows by doubling up to its capacity, so a large capacity costs memory only
// when used; kUnbounded grows without limit (push may throw std::bad_alloc).
//
// Every call may come from a fibre or from a kernel thread that is not a loom
// processor (which then blocks itself, on a futex), with the wait protocol of
// every loom primitive (runtime/sync/wait.hpp). Destroying a channel with
// waiters is undefined, as for a mutex; queued values are destroyed with it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>

#include "loom/detail/spinlock.hpp"
#include "loom/sync.hpp"

namespace loom {

// stopped: a timed push or pop ended by Fibre::request_stop (fibre.hpp).
enum class ChannelStatus { success, empty, full, closed, timeout, stopped };
const char* to_string(ChannelStatus s);

inline constexpr std::size_t kUnbounded = SIZE_MAX;

namespace detail {

// What the type-erased core needs of T.
struct ChannelOps {
  void (*move_construct)(void* dst, void* src) noexcept;  // new (dst) T(std::move(*src))
  void (*destroy)(void* p) noexcept;
  std::size_t size;  // sizeof(T) rounded up to alignof(T)
  std::size_t align;
};

template <class T>
inline constexpr ChannelOps channel_ops{
    [](void* dst, void* src) noexcept { ::new (dst) T(std::move(*static_cast<T*>(src))); },
    [](void* p) noexcept { static_cast<T*>(p)->~T(); }, (sizeof(T) + alignof(T) - 1) / alignof(T) * alignof(T),
    alignof(T)};

// The channel without its type (runtime/sync/channel.cpp): a ring of slots,
// the pushers and poppers that wait, and the closed mark, under one spin lock.
class ChannelCore {
 public:
  ChannelCore(std::size_t capacity, const ChannelOps& ops);
  ~ChannelCore();
  ChannelCore(const ChannelCore&) = delete;
  ChannelCore& operator=(const ChannelCore&) = delete;
  // item: a T moved from only on success. kNow: full (or closed), never waits.
  // stop: the wait (only it, not the moves) is a stop point.
  ChannelStatus push(void* item, Deadline d, bool stop = false);
  // out: raw storage where a T is move-constructed on success (only then).
  ChannelStatus pop(void* out, Deadline d, bool stop = false);
  void close() noexcept;
  bool closed() const noexcept;
  std::size_t size() const noexcept;
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  void* slot(std::size_t i) const noexcept;
  mutable SpinLock lock_;
  const ChannelOps* ops_;
  std::size_t capacity_;
  char* buf_ = nullptr;
  std::size_t slots_ = 0;  // allocated, <= capacity_
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  bool closed_ = false;
  WaitQueue pushers_;  // wait only while the buffer is full (all of it, for capacity 0)
  WaitQueue poppers_;  // wait only while the buffer is empty
};

}  // namespace detail

template <class T>
class Channel {
  static_assert(std::is_nothrow_move_constructible_v<T>, "loom::Channel<T>: T must be nothrow move-constructible");
  static_assert(!std::is_reference_v<T>, "loom::Channel<T>: T must be a value type");

 public:
  using value_type = T;
  // capacity: how many values may wait in the channel; 0 = unbuffered
  // (rendezvous), kUnbounded = no limit.
  explicit Channel(std::size_t capacity) : core_(capacity, detail::channel_ops<T>) {}

  ChannelStatus push(T&& v) { return core_.push(&v, kForever); }
  ChannelStatus push(const T& v) { return push_copy(v, kForever); }
  ChannelStatus try_push(T&& v) { return core_.push(&v, kNow); }
  ChannelStatus try_push(const T& v) { return push_copy(v, kNow); }
  template <class R, class P>
  ChannelStatus push_for(T&& v, std::chrono::duration<R, P> d) {
    return core_.push(&v, deadline_after(d), true);
  }
  template <class R, class P>
  ChannelStatus push_for(const T& v, std::chrono::duration<R, P> d) {
    return push_copy(v, deadline_after(d), true);
  }
  ChannelStatus push_until(T&& v, Clock::time_point t) { return core_.push(&v, to_deadline(t), true); }
  ChannelStatus push_until(const T& v, Clock::time_point t) { return push_copy(v, to_deadline(t), true); }

  // success, or closed once the channel is closed and drained.
  ChannelStatus pop(T& out) { return pop_into(out, kForever); }
  // The value, or std::nullopt once the channel is closed and drained.
  std::optional<T> pop() {
    std::optional<T> r;
    Slot s;
    if (core_.pop(s.raw(), kForever) == ChannelStatus::success) r.emplace(s.take());
    return r;
  }
  ChannelStatus try_pop(T& out) { return pop_into(out, kNow); }  // empty when nothing is queued
  template <class R, class P>
  ChannelStatus pop_for(T& out, std::chrono::duration<R, P> d) {
    return pop_into(out, deadline_after(d), true);
  }
  ChannelStatus pop_until(T& out, Clock::time_point t) { return pop_into(out, to_deadline(t), true); }

  void close() noexcept { core_.close(); }
  bool is_closed() const noexcept { return core_.closed(); }
  std::size_t size() const noexcept { return core_.size(); }  // queued now (a hint under concurrency)
  std::size_t capacity() const noexcept { return core_.capacity(); }

  // Range-for pops until closed and drained: for (auto& v : ch) ...
  class iterator {
   public:
    explicit iterator(Channel* ch = nullptr) : ch_(ch) { next(); }
    T& operator*() { return *v_; }
    iterator& operator++() {
      next();
      return *this;
    }
    bool operator==(const iterator& o) const { return ch_ == o.ch_; }
    bool operator!=(const iterator& o) const { return ch_ != o.ch_; }

   private:
    void next() {
      if (!ch_) return;
      v_ = ch_->pop();
      if (!v_) ch_ = nullptr;
    }
    Channel* ch_;
    std::optional<T> v_;
  };
  iterator begin() { return iterator(this); }
  iterator end() { return iterator(); }

 private:
  struct Slot {
    alignas(T) unsigned char bytes[sizeof(T)];
    void* raw() { return bytes; }
    T take() {
      T* p = std::launder(reinterpret_cast<T*>(bytes));
      T v(std::move(*p));
      p->~T();
      return v;
    }
  };
  // stop: the timed forms, whose waits are stop points.
  ChannelStatus push_copy(const T& v, Deadline d, bool stop = false) {
    T copy(v);
    return core_.push(&copy, d, stop);
  }
  ChannelStatus pop_into(T& out, Deadline d, bool stop = false) {
    Slot s;
    ChannelStatus st = core_.pop(s.raw(), d, stop);
    if (st == ChannelStatus::success) out = s.take();
    return st;
  }
  detail::ChannelCore core_;
};

}  // namespace loom
