// loom/future.hpp — one-shot results between fibres: Promise<T> / Future<T>.
//
//   loom::Promise<int> p;
//   loom::Future<int> f = p.get_future();
//   loom::Fibre t([&p] { p.set_value(42); });
//   int v = f.get();   // blocks this fibre (or kernel thread), not its processor
//
// std::promise/std::future's contract, with loom's waits: get() waits, then
// returns the value (moved out: a Future is read once, as std::future) or
// rethrows what set_exception stored; wait_for/wait_until return
// std::future_status::ready or ::timeout (never ::deferred: nothing here is
// lazy); ready() never blocks. Errors are std::future_error with std's
// codes: no_state (a default-constructed or already-read Future, a moved-from
// Promise), promise_already_satisfied (a second set_*),
// future_already_retrieved (a second get_future), broken_promise (stored in
// the Future when its Promise is destroyed unsatisfied). Promise<void> has
// set_value() with no argument; Future<void>::get() returns nothing.
//
// when_all / when_any take a std::vector<Future<T>> (std::experimental's
// concurrency TS shapes, homogeneous only: a variadic, mixed-type form needs
// tuples of futures and was left out for want of a user):
//   when_all(v) → Future<std::vector<Future<T>>>, ready once every input is,
//                 holding them all (each ready: read each with get());
//   when_any(v) → Future<WhenAnyResult<T>>, ready once one input is: its
//                 index, and all inputs (the others may still be pending).
// Neither spawns a fibre: each input's state runs a continuation, in the
// setter's fibre or thread, after the value is stored.
//
// Waiting uses loom::Mutex and loom::CondVar, so every call may come from a
// fibre or from a kernel thread that is not a loom processor. The shared
// state is reference counted: either side may be destroyed first.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/sync.hpp"

namespace loom {

template <class T>
class Future;
template <class T>
class Promise;

namespace detail {

class FutureStateBase {
 public:
  bool ready() const {
    m_.lock();
    bool r = done_;
    m_.unlock();
    return r;
  }
  void wait() const {
    m_.lock();
    while (!done_) cv_.wait(m_);
    m_.unlock();
  }
  // The timed forms' wait: a stop point (Fibre::request_stop ends it as
  // the deadline would). Only the condvar's wait: not the mutex's.
  bool wait_until(Deadline d) const {
    m_.lock();
    while (!done_) {
      detail::StopPoint stop;
      if (cv_.wait_errno(m_, d) != 0) break;
    }
    bool r = done_;
    m_.unlock();
    return r;
  }
  void set_exception(std::exception_ptr e) {
    finish([&] { ex_ = std::move(e); });
  }
  // Runs fn once the state is ready: now, on this thread, if it already is.
  void on_ready(std::function<void()> fn) {
    m_.lock();
    if (!done_) {
      then_.push_back(std::move(fn));
      m_.unlock();
      return;
    }
    m_.unlock();
    fn();
  }
  bool satisfied_locked() const { return done_; }
  bool retrieved = false;  // get_future was called (the Promise's business only)

 protected:
  template <class Store>
  void finish(Store&& store) {
    m_.lock();
    if (done_) {
      m_.unlock();
      throw std::future_error(std::future_errc::promise_already_satisfied);
    }
    try {
      store();  // a value whose construction throws: the state stays as it was, unlocked
    } catch (...) {
      m_.unlock();
      throw;
    }
    done_ = true;
    std::vector<std::function<void()>> then = std::move(then_);
    cv_.notify_all();
    m_.unlock();
    for (auto& fn : then) fn();
  }
  void rethrow_if_failed() const {
    if (ex_) std::rethrow_exception(ex_);
  }
  mutable Mutex m_;
  mutable CondVar cv_;
  bool done_ = false;
  std::exception_ptr ex_;
  std::vector<std::function<void()>> then_;
};

template <class T>
class FutureState : public FutureStateBase {
 public:
  template <class... A>
  void set_value(A&&... a) {
    finish([&] { value_.emplace(std::forward<A>(a)...); });
  }
  T take() {
    wait();
    rethrow_if_failed();
    return std::move(*value_);
  }

 private:
  std::optional<T> value_;
};

template <>
class FutureState<void> : public FutureStateBase {
 public:
  void set_value() {
    finish([] {});
  }
  void take() {
    wait();
    rethrow_if_failed();
  }
};

[[noreturn]] inline void no_state() { throw std::future_error(std::future_errc::no_state); }

}  // namespace detail

template <class T>
class Future {
 public:
  Future() noexcept = default;
  Future(Future&&) noexcept = default;
  Future& operator=(Future&&) noexcept = default;
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;

  bool valid() const noexcept { return s_ != nullptr; }
  bool ready() const { return state().ready(); }
  void wait() const { state().wait(); }
  template <class R, class P>
  std::future_status wait_for(std::chrono::duration<R, P> d) const {
    return state().wait_until(deadline_after(d)) ? std::future_status::ready : std::future_status::timeout;
  }
  std::future_status wait_until(Clock::time_point t) const {
    return state().wait_until(to_deadline(t)) ? std::future_status::ready : std::future_status::timeout;
  }
  // Waits, then returns the value or rethrows; the Future is no longer valid.
  T get() {
    std::shared_ptr<detail::FutureState<T>> s = std::move(s_);
    if (!s) detail::no_state();
    return s->take();
  }

 private:
  friend class Promise<T>;
  template <class U>
  friend std::shared_ptr<detail::FutureStateBase> state_of(const Future<U>& f);
  explicit Future(std::shared_ptr<detail::FutureState<T>> s) : s_(std::move(s)) {}
  detail::FutureState<T>& state() const {
    if (!s_) detail::no_state();
    return *s_;
  }
  std::shared_ptr<detail::FutureState<T>> s_;
};

template <class T>
class Promise {
 public:
  Promise() : s_(std::make_shared<detail::FutureState<T>>()) {}
  Promise(Promise&&) noexcept = default;
  Promise& operator=(Promise&& o) noexcept {
    if (this != &o) {
      abandon();
      s_ = std::move(o.s_);
    }
    return *this;
  }
  Promise(const Promise&) = delete;
  Promise& operator=(const Promise&) = delete;
  // An unsatisfied state gets std::future_error(broken_promise).
  ~Promise() { abandon(); }

  Future<T> get_future() {
    if (!s_) detail::no_state();
    if (std::exchange(s_->retrieved, true)) throw std::future_error(std::future_errc::future_already_retrieved);
    return Future<T>(s_);
  }
  template <class... A>
  void set_value(A&&... a) {
    if (!s_) detail::no_state();
    s_->set_value(std::forward<A>(a)...);
  }
  void set_exception(std::exception_ptr e) {
    if (!s_) detail::no_state();
    s_->set_exception(std::move(e));
  }

 private:
  void abandon() noexcept {
    if (!s_) return;
    try {
      s_->set_exception(std::make_exception_ptr(std::future_error(std::future_errc::broken_promise)));
    } catch (const std::future_error&) {
      // satisfied already: nothing broken
    }
    s_.reset();
  }
  std::shared_ptr<detail::FutureState<T>> s_;
};

template <class U>
std::shared_ptr<detail::FutureStateBase> state_of(const Future<U>& f) {
  if (!f.s_) detail::no_state();
  return f.s_;
}

template <class T>
struct WhenAnyResult {
  std::size_t index;
  std::vector<Future<T>> futures;
};

// Ready when every future in v is (at once for an empty v).
template <class T>
Future<std::vector<Future<T>>> when_all(std::vector<Future<T>> v) {
  struct Ctx {
    Promise<std::vector<Future<T>>> p;
    std::vector<Future<T>> futures;
    std::atomic<std::size_t> left;
  };
  std::vector<std::shared_ptr<detail::FutureStateBase>> states;
  for (auto& f : v) states.push_back(state_of(f));  // no_state for an invalid one, before anything is moved
  auto ctx = std::make_shared<Ctx>();
  auto result = ctx->p.get_future();
  ctx->left.store(v.size() + 1, std::memory_order_relaxed);
  ctx->futures = std::move(v);
  auto one_done = [ctx] {
    if (ctx->left.fetch_sub(1, std::memory_order_acq_rel) == 1) ctx->p.set_value(std::move(ctx->futures));
  };
  for (auto& s : states) s->on_ready(one_done);
  one_done();  // the +1: no input can finish the set before all are registered
  return result;
}

// Ready when any future in v is; its index is the first found ready.
// std::invalid_argument for an empty v (nothing could ever be ready).
template <class T>
Future<WhenAnyResult<T>> when_any(std::vector<Future<T>> v) {
  if (v.empty()) throw std::invalid_argument("loom::when_any: no futures");
  struct Ctx {
    Promise<WhenAnyResult<T>> p;
    std::vector<Future<T>> futures;
    std::atomic<bool> fired{false};
  };
  std::vector<std::shared_ptr<detail::FutureStateBase>> states;
  for (auto& f : v) states.push_back(state_of(f));
  auto ctx = std::make_shared<Ctx>();
  auto result = ctx->p.get_future();
  ctx->futures = std::move(v);
  // Until the first fires, ctx owns the inputs; the continuations left on the
  // others own ctx until their inputs are ready (or their promises go).
  for (std::size_t i = 0; i < states.size(); ++i)
    states[i]->on_ready([ctx, i] {
      if (!ctx->fired.exchange(true, std::memory_order_acq_rel))
        ctx->p.set_value(WhenAnyResult<T>{i, std::move(ctx->futures)});
    });
  return result;
}

}  // namespace loom
