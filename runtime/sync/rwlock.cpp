// sync/rwlock.cpp — readers-writer lock on the wait protocol.
//
// Writer preference (default): a new reader waits while a writer holds or
// waits for the lock, so a stream of readers cannot starve writers. When a
// writer leaves, the readers that queued meanwhile all enter before the next
// writer (phase alternation), so a stream of writers cannot starve readers
// either. Reader preference: a reader enters whenever no writer holds the
// lock; writers wait for the last reader.
// Ownership is handed over with the wake-up (the waker counts readers in or
// names the writer), so a woken waiter never has to compete again.
#include <cerrno>
#include <system_error>

#include "base/chaos.hpp"
#include "sync/wait.hpp"

namespace loom {

namespace {

enum : std::uintptr_t { kReader = 1, kWriter = 2 };

[[noreturn]] void fail(int e, const char* what) { throw std::system_error(e, std::generic_category(), what); }

}  // namespace

// Friend-free access to RWLock internals for the timeout hook.
struct RWLockAccess {
  static void on_writer_timeout(rt::Waiter* w, rt::WakeBatch& batch) {
    auto* l = static_cast<RWLock*>(w->owner_object);
    --l->writers_waiting_;
    l->wake_after_release_into(batch, false);
  }
};

RWLock::~RWLock() { rt::dead_object(this, sizeof *this); }

bool RWLock::writer_may_enter() const { return writer_ == nullptr && readers_ == 0; }

int RWLock::lock_shared_errno(Deadline d) {
  const void* self = rt::identity();
  rt::lock_object(lock_, this, "loom::RWLock");
  if (writer_ == self) {
    lock_.unlock();
    return EDEADLK;
  }
  bool blocked = writer_ != nullptr || (pref_ == RWPreference::writer && writers_waiting_ > 0);
  if (!blocked) {
    if (readers_ == ~0u) {
      lock_.unlock();
      return EAGAIN;
    }
    ++readers_;
    lock_.unlock();
    return 0;
  }
  if (rt::expired(d)) {
    lock_.unlock();
    return d == kNow ? EBUSY : ETIMEDOUT;
  }
  rt::Waiter w;
  w.tag = kReader;
  rt::note_wait(rt::WaitKind::rwlock_read, this);
  return rt::wait_on(readers_q_, lock_, w, d) ? 0 : ETIMEDOUT;
}

int RWLock::lock_errno(Deadline d) {
  const void* self = rt::identity();
  rt::lock_object(lock_, this, "loom::RWLock");
  if (writer_ == self) {
    lock_.unlock();
    return EDEADLK;
  }
  if (writer_may_enter()) {
    writer_ = self;
    lock_.unlock();
    return 0;
  }
  if (rt::expired(d)) {
    lock_.unlock();
    return d == kNow ? EBUSY : ETIMEDOUT;
  }
  ++writers_waiting_;
  rt::Waiter w;
  w.tag = kWriter;
  w.ident = self;
  w.owner_object = this;
  w.on_timeout = &RWLockAccess::on_writer_timeout;
  rt::note_wait(rt::WaitKind::rwlock_write, this);
  return rt::wait_on(writers_q_, lock_, w, d) ? 0 : ETIMEDOUT;
}

// Decides who enters after a release (or a waiting writer's timeout), and
// hands them the lock; lock_ held.
void RWLock::wake_after_release_into(rt::WakeBatch& batch, bool writer_left) {
  if (writer_) return;
  bool readers_next = pref_ == RWPreference::reader || writer_left || writers_waiting_ == 0;
  if (readers_next && !rt::WaitList::empty(readers_q_)) {
    while (rt::Waiter* r = rt::WaitList::signal_one(readers_q_)) {
      ++readers_;
      batch.add(r);
    }
    if (readers_ > 0) return;
  }
  if (readers_ == 0) {
    if (rt::Waiter* wr = rt::WaitList::signal_one(writers_q_)) {
      --writers_waiting_;
      writer_ = wr->ident;
      batch.add(wr);
    }
  }
}

int RWLock::unlock_errno() {
  const void* self = rt::identity();
  rt::WakeBatch batch;
  rt::lock_object(lock_, this, "loom::RWLock");
  bool writer_left = writer_ == self;
  if (writer_left) {
    writer_ = nullptr;
  } else if (readers_ > 0 && writer_ == nullptr) {
    --readers_;
  } else {
    lock_.unlock();
    return EPERM;
  }
  wake_after_release_into(batch, writer_left);
  lock_.unlock();  // the last touch
  LOOM_CHAOS_POINT(sync_release);
  batch.wake_all();
  return 0;
}

void RWLock::lock_shared() {
  if (int e = lock_shared_errno(kForever)) fail(e, "loom::RWLock::lock_shared");
}
bool RWLock::try_lock_shared() { return lock_shared_errno(kNow) == 0; }
bool RWLock::try_lock_shared_until(Clock::time_point t) {
  detail::StopPoint stop;
  return lock_shared_errno(to_deadline(t)) == 0;
}
void RWLock::unlock_shared() { unlock(); }
void RWLock::lock() {
  if (int e = lock_errno(kForever)) fail(e, "loom::RWLock::lock");
}
bool RWLock::try_lock() { return lock_errno(kNow) == 0; }
bool RWLock::try_lock_until(Clock::time_point t) {
  detail::StopPoint stop;
  return lock_errno(to_deadline(t)) == 0;
}
void RWLock::unlock() {
  if (int e = unlock_errno()) fail(e, "loom::RWLock::unlock");
}

}  // namespace loom
