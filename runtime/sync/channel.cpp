// sync/channel.cpp — the type-erased core of loom::Channel<T> (loom/channel.hpp)
// on the wait protocol of sync/wait.hpp.
//
// State under lock_: a ring of slots (count_ values from head_), the
// pushers that wait (only while the ring is full: capacity_ values, so all
// of them for an unbuffered channel) and the poppers that wait (only while
// it is empty). Each waiter's record carries, in `tag`, the address of its
// value (a pusher) or of its raw out-slot (a popper).
//
// Direct hand-off, as Go's channels: the side that finds a waiter of the
// other kind claims it (signal_one, so a waiter that timed out is skipped
// and keeps its value), moves the value itself — into the popper's slot, or
// from the pusher's value into the ring (a pop that freed a slot of a full
// ring) or straight out (unbuffered) — marks it handed_over and wakes it
// after unlocking. A woken waiter without handed_over was woken by close().
// So nobody retries, the queue order is served FIFO, and a value is never
// both in the ring and with a waiter.
//
// Rejected: waking a waiter to retry (a semaphore pair or condvars). A woken
// pusher may then lose its slot to a newcomer and sleep again, and each
// message costs two lock rounds; Boost.Fiber's buffered_channel does that.
//
// The ring grows by doubling (up to capacity_) outside the lock: the pusher
// allocates, relocks, and installs the bigger ring only if it still needs it.
// The lock is the last touch of every operation that lets a waiter through:
// the waiter may destroy the channel once woken.
#include "loom/channel.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "base/chaos.hpp"
#include "sync/wait.hpp"

namespace loom {

const char* to_string(ChannelStatus s) {
  switch (s) {
    case ChannelStatus::success:
      return "success";
    case ChannelStatus::empty:
      return "empty";
    case ChannelStatus::full:
      return "full";
    case ChannelStatus::closed:
      return "closed";
    case ChannelStatus::timeout:
      return "timeout";
    case ChannelStatus::stopped:
      return "stopped";
  }
  return "?";
}

namespace detail {

namespace {
constexpr std::size_t kFirstSlots = 8;

char* allocate(std::size_t slots, const ChannelOps& ops) {
  std::size_t align = ops.align < alignof(std::max_align_t) ? alignof(std::max_align_t) : ops.align;
  return static_cast<char*>(::operator new(slots* ops.size, std::align_val_t(align)));
}
void deallocate(char* p, const ChannelOps& ops) {
  if (!p) return;
  std::size_t align = ops.align < alignof(std::max_align_t) ? alignof(std::max_align_t) : ops.align;
  ::operator delete(p, std::align_val_t(align));
}
}  // namespace

ChannelCore::ChannelCore(std::size_t capacity, const ChannelOps& ops) : ops_(&ops), capacity_(capacity) {}

ChannelCore::~ChannelCore() {
  for (std::size_t i = 0; i < count_; ++i) ops_->destroy(slot(i));
  deallocate(buf_, *ops_);
  rt::dead_object(this, sizeof *this);
}

void* ChannelCore::slot(std::size_t i) const noexcept {
  std::size_t k = head_ + i;
  if (k >= slots_) k -= slots_;
  return buf_ + k * ops_->size;
}

namespace {
// A wait that was not signalled: a timed form's stop point ended it, or its
// deadline.
ChannelStatus ended_early() { return this_fibre::stop_requested() ? ChannelStatus::stopped : ChannelStatus::timeout; }
}  // namespace

ChannelStatus ChannelCore::push(void* item, Deadline d, bool stop) {
  char* spare = nullptr;  // a ring allocated outside the lock, or the one it replaced
  rt::lock_object(lock_, this, "loom::Channel");
  for (;;) {
    if (closed_) {
      lock_.unlock();
      deallocate(spare, *ops_);
      return ChannelStatus::closed;
    }
    if (rt::Waiter* r = rt::WaitList::signal_one(poppers_)) {
      // The ring is empty (poppers wait only then): straight to the popper.
      ops_->move_construct(reinterpret_cast<void*>(r->tag), item);
      r->handed_over = true;
      lock_.unlock();  // the last touch
      LOOM_CHAOS_POINT(sync_release);
      rt::wake(r);
      deallocate(spare, *ops_);
      return ChannelStatus::success;
    }
    if (count_ < slots_) {
      ops_->move_construct(slot(count_), item);
      ++count_;
      lock_.unlock();
      deallocate(spare, *ops_);
      return ChannelStatus::success;
    }
    if (slots_ < capacity_) {
      // Room in principle, not in the ring: grow it (outside the lock).
      std::size_t want = slots_ ? slots_ * 2 : kFirstSlots;
      if (want > capacity_ || want < slots_) want = capacity_;
      if (!spare) {
        lock_.unlock();
        deallocate(spare, *ops_);
        spare = allocate(want, *ops_);  // may throw: nothing is held
        rt::lock_object(lock_, this, "loom::Channel");
        // Install it only if the ring is still that small and still full.
        if (slots_ < want && count_ == slots_ && !closed_) {
          for (std::size_t i = 0; i < count_; ++i) {
            ops_->move_construct(spare + i * ops_->size, slot(i));
            ops_->destroy(slot(i));
          }
          std::swap(buf_, spare);
          slots_ = want;
          head_ = 0;
        }
        continue;  // re-decide: a popper may have come, or the ring may have room
      }
      // A spare from an earlier round that lost the race: retry with a new one.
      lock_.unlock();
      deallocate(spare, *ops_);
      spare = nullptr;
      rt::lock_object(lock_, this, "loom::Channel");
      continue;
    }
    break;  // full
  }
  if (rt::expired(d)) {
    lock_.unlock();
    deallocate(spare, *ops_);
    return d == kNow ? ChannelStatus::full : ChannelStatus::timeout;
  }
  rt::Waiter w;
  w.tag = reinterpret_cast<std::uintptr_t>(item);
  rt::note_wait(rt::WaitKind::channel, this);
  bool signalled;
  {
    detail::StopPoint mark(stop);  // (wait_on takes it)
    signalled = rt::wait_on(pushers_, lock_, w, d);
  }
  deallocate(spare, *ops_);
  if (!signalled) return ended_early();
  return w.handed_over ? ChannelStatus::success : ChannelStatus::closed;
}

ChannelStatus ChannelCore::pop(void* out, Deadline d, bool stop) {
  rt::lock_object(lock_, this, "loom::Channel");
  if (count_ > 0) {
    void* h = slot(0);
    ops_->move_construct(out, h);
    ops_->destroy(h);
    head_ = head_ + 1 == slots_ ? 0 : head_ + 1;
    --count_;
    // A slot is free: the oldest waiting pusher's value fills it.
    rt::Waiter* s = rt::WaitList::signal_one(pushers_);
    if (s) {
      ops_->move_construct(slot(count_), reinterpret_cast<void*>(s->tag));
      ++count_;
      s->handed_over = true;
    }
    lock_.unlock();  // the last touch
    if (s) {
      LOOM_CHAOS_POINT(sync_release);
      rt::wake(s);
    }
    return ChannelStatus::success;
  }
  // Empty: a pusher waits here only when the channel is unbuffered.
  if (rt::Waiter* s = rt::WaitList::signal_one(pushers_)) {
    ops_->move_construct(out, reinterpret_cast<void*>(s->tag));
    s->handed_over = true;
    lock_.unlock();
    LOOM_CHAOS_POINT(sync_release);
    rt::wake(s);
    return ChannelStatus::success;
  }
  if (closed_) {
    lock_.unlock();
    return ChannelStatus::closed;
  }
  if (rt::expired(d)) {
    lock_.unlock();
    return d == kNow ? ChannelStatus::empty : ChannelStatus::timeout;
  }
  rt::Waiter w;
  w.tag = reinterpret_cast<std::uintptr_t>(out);
  rt::note_wait(rt::WaitKind::channel, this);
  detail::StopPoint mark(stop);  // (wait_on takes it)
  if (!rt::wait_on(poppers_, lock_, w, d)) return ended_early();
  return w.handed_over ? ChannelStatus::success : ChannelStatus::closed;
}

void ChannelCore::close() noexcept {
  rt::WakeBatch batch;
  rt::lock_object(lock_, this, "loom::Channel");
  closed_ = true;
  while (rt::Waiter* w = rt::WaitList::signal_one(pushers_)) batch.add(w);
  while (rt::Waiter* w = rt::WaitList::signal_one(poppers_)) batch.add(w);
  lock_.unlock();  // the last touch
  LOOM_CHAOS_POINT(sync_release);
  batch.wake_all();
}

bool ChannelCore::closed() const noexcept {
  rt::lock_object(lock_, this, "loom::Channel");
  bool c = closed_;
  lock_.unlock();
  return c;
}

std::size_t ChannelCore::size() const noexcept {
  rt::lock_object(lock_, this, "loom::Channel");
  std::size_t n = count_;
  lock_.unlock();
  return n;
}

}  // namespace detail
}  // namespace loom
