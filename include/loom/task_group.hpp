// loom/task_group.hpp — structured concurrency: fibres spawned into a group,
// joined together.
//
//   loom::TaskGroup g;
//   for (auto& c : conns) g.spawn([&c] { serve(c); });
//   g.join();   // waits for all; rethrows the first exception any of them threw
//
// spawn() starts a fibre with the group's FibreAttr and keeps its handle;
// handles of finished fibres are dropped as the group grows (try_join at each
// doubling), so a long-lived group that spawns millions stays the size of
// what runs. join() returns once every fibre has exited (a Cluster may be
// destroyed right after). An exception escaping a spawned function
// is caught (it does not std::terminate, as in a plain Fibre): the first is
// kept, later ones are dropped, and join() rethrows it once every fibre has
// finished. join() also waits for fibres spawned while it waits (from inside
// the group); join_for/join_until return false at the deadline, having
// rethrown nothing (call again). The destructor joins, dropping an exception
// nobody collected (a destructor must not throw). Calling join() from a
// fibre of the same group waits for itself: a deadlock, as a self-join.
//
// The first failure asks every other fibre of the group, running or spawned
// later, to stop (Fibre::request_stop: their waits in loom's I/O fail with
// ECANCELED, their sleeps and timed waits end as at their deadline,
// this_fibre::stop_requested() says so), so that join() does not
// wait for work nobody wants any more; what a fibre does then is its own.
//
// spawn, join and the queries may be called from fibres and from kernel
// threads that are not loom processors.
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/fibre.hpp"
#include "loom/sync.hpp"

namespace loom {

class TaskGroup {
 public:
  TaskGroup() = default;
  // attr for every spawned fibre (cluster, priority, stack size, name...);
  // attr.detached is ignored: the group keeps each fibre's handle.
  explicit TaskGroup(const FibreAttr& attr) : attr_(attr) { attr_.detached = false; }
  TaskGroup(const TaskGroup&) = delete;
  TaskGroup& operator=(const TaskGroup&) = delete;
  ~TaskGroup() { wait_all(nullptr); }

  template <class F, class... Args>
  void spawn(F&& f, Args&&... args) {
    using Call = std::tuple<std::decay_t<F>, std::decay_t<Args>...>;
    Fibre fibre(attr_, [this, call = Call(std::forward<F>(f), std::forward<Args>(args)...)]() mutable {
      // The group's lock is taken after the handler has ended: a fibre that
      // blocks inside a catch block leaves the exception in the C++
      // runtime's handling state of its kernel thread (per kernel thread
      // under the native API), where another fibre's exception on that
      // thread meets it (LeakSanitizer: two exceptions leaked).
      std::exception_ptr failure;
      try {
        std::apply([](auto& fn, auto&... as) { std::invoke(std::move(fn), std::move(as)...); }, call);
      } catch (...) {
        failure = std::current_exception();
      }
      if (failure) failed_with(std::move(failure));
    });
    add(std::move(fibre));
  }

  // Waits for every fibre of the group, then rethrows the first exception
  // (once: a second join() after it returns normally).
  void join() {
    wait_all(nullptr);
    rethrow();
  }
  // false at the deadline, rethrowing nothing.
  bool join_until(Clock::time_point t) {
    if (!wait_all(&t)) return false;
    rethrow();
    return true;
  }
  template <class R, class P>
  bool join_for(std::chrono::duration<R, P> d) {
    return join_until(Clock::now() + std::chrono::ceil<Clock::duration>(d));
  }

  // Fibres spawned and not yet joined that are still running (those a
  // concurrent join() is waiting for are not counted).
  std::size_t running() {
    m_.lock();
    reap();
    std::size_t n = fibres_.size();
    m_.unlock();
    return n;
  }
  // An exception was kept (and not yet rethrown).
  bool failed() const {
    m_.lock();
    bool f = first_ != nullptr;
    m_.unlock();
    return f;
  }

 private:
  void add(Fibre&& f) {
    m_.lock();
    if (fibres_.size() >= reap_at_) {  // finished ones go, so a long-lived group stays small
      reap();
      reap_at_ = fibres_.size() * 2 > 64 ? fibres_.size() * 2 : 64;
    }
    std::exception_ptr no_room;
    try {
      fibres_.push_back(std::move(f));
      if (first_) fibres_.back().request_stop();  // spawned after a failure
    } catch (...) {
      no_room = std::current_exception();  // (joined outside the handler: no wait inside one)
    }
    m_.unlock();
    if (no_room) {
      f.join();
      std::rethrow_exception(no_room);
    }
  }
  void reap() {  // m_ held
    std::size_t k = 0;
    for (auto& f : fibres_)
      if (!f.try_join()) fibres_[k++] = std::move(f);
    fibres_.resize(k);
  }
  void failed_with(std::exception_ptr ex) {
    m_.lock();
    if (!first_) {
      first_ = std::move(ex);
      for (auto& f : fibres_) f.request_stop();
      for (Joining* j = joining_; j; j = j->next) j->fibre->request_stop();
    }
    m_.unlock();
  }
  // Joins until none is left (also those spawned meanwhile); false at *t.
  bool wait_all(const Clock::time_point* t) {
    m_.lock();
    while (!fibres_.empty()) {
      Fibre f = std::move(fibres_.back());
      fibres_.pop_back();
      if (first_) f.request_stop();
      Joining me{&f, joining_};  // a failure meanwhile asks it to stop too
      joining_ = &me;
      m_.unlock();
      bool ended = true;
      if (!t)
        f.wait_ended();
      else
        ended = f.wait_ended_until(*t);
      m_.lock();
      for (Joining** j = &joining_; *j; j = &(*j)->next)  // (from here no request_stop can reach f: it may go)
        if (*j == &me) {
          *j = me.next;
          break;
        }
      if (!ended) {
        fibres_.push_back(std::move(f));  // (no allocation: its slot is still there)
        m_.unlock();
        return false;
      }
      f.join();  // ended: this only frees it
    }
    m_.unlock();
    return true;
  }
  void rethrow() {
    m_.lock();
    std::exception_ptr ex = std::move(first_);
    first_ = nullptr;
    m_.unlock();
    if (ex) std::rethrow_exception(ex);
  }

  FibreAttr attr_;
  mutable Mutex m_;
  std::vector<Fibre> fibres_;  // guarded by m_
  // The fibres concurrent wait_alls join outside m_, one entry on each
  // joiner's stack (guarded by m_).
  struct Joining {
    Fibre* fibre;
    Joining* next;
  };
  Joining* joining_ = nullptr;
  std::size_t reap_at_ = 64;
  std::exception_ptr first_;
};

}  // namespace loom
