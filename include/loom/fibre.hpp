// loom/fibre.hpp — fibres: user-level threads with their own stacks.
//
//   loom::Fibre f([] { ... });   // runs on a processor of the current cluster
//   f.join();                    // or detach(); the destructor joins
//   loom::this_fibre::yield();
//
// Semantics follow std::thread where it has any, with two differences: the
// destructor of a joinable Fibre joins (as std::jthread) rather than calling
// std::terminate, and returning from main() ends the process without waiting
// for other fibres, as with pthreads. An exception escaping a fibre's
// function calls std::terminate.
//
// Every call here may be made from a fibre or from any kernel thread. From a
// kernel thread that is not a loom processor, join() blocks that thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

#include "loom/cluster.hpp"

namespace loom {

namespace rt {
class Fibre;
struct FibreMaker;
}

namespace detail {
// For its scope, the calling fibre's waits in loom's timed forms are stop
// points: a Fibre::request_stop pending or made while one waits ends it, as
// its deadline would. The timed members use it; nothing on a kernel thread
// that is not a fibre.
class StopPoint {
 public:
  explicit StopPoint(bool on = true) noexcept;
  ~StopPoint();
  StopPoint(const StopPoint&) = delete;
  StopPoint& operator=(const StopPoint&) = delete;

 private:
  rt::Fibre* f_;
};
}  // namespace detail

// Static priority levels: every ready queue is an array of FIFO queues, one
// per level, searched from `high` down.
enum class Priority : unsigned char { high = 0, normal = 1, low = 2 };
inline constexpr unsigned kPriorities = 3;

struct FibreAttr {
  std::size_t stack_size = 0;  // 0: the cluster's default (64 KiB); else kStackMin..kStackMax (16 KiB..1 GiB),
                               // or the constructor throws std::invalid_argument (C: EINVAL)
  Priority priority = Priority::normal;
  Cluster* cluster = nullptr;  // nullptr: the creating fibre's cluster
  bool background = false;     // place in the cluster's background queue
  const char* name = nullptr;  // shown in diagnostics; must outlive the fibre
  // A colored fibre (loom/color.hpp) waits for its color before it starts
  // and holds it until it exits, also while blocked; 0: uncolored.
  std::uint32_t color = 0;
  bool color_shared = false;   // hold the color shared (overlaps other shared work)
  // A thread control block of its own, with every module's thread-locals,
  // as glibc gives a new thread: set by the C API's loom_create (so by
  // libloom-pthread's pthread_create); takes effect only once per-fibre TLS
  // is on (libloom-pthread turns it on; docs/DESIGN.md).
  bool own_tls = false;
  // With own_tls: the block is built on the heap, not at the top of the
  // stack, so the fibre may rest (io::rest moves its control block, not
  // its thread-locals, whose addresses must not change: C++ thread_local
  // destructors are registered by address). A malloc of the block's size
  // per fibre; set by loom_attr_setrestable_np.
  bool tls_on_heap = false;
  // Born detached: the constructed handle is not joinable, and the fibre is
  // detached before it can run, so it may io::rest from its first line (a
  // fibre made and then detach()ed may run first on another processor and
  // find itself joinable: rest refuses it with EINVAL).
  bool detached = false;
  // A stack of the caller's (pthread_attr_setstack): the fibre runs on
  // [stack_addr, stack_addr + stack_size), which must stay mapped until it
  // has ended (joined, or its exit seen). No guard page is added; its own
  // thread-locals go on the heap (own_tls), the block at the top; it may not
  // rest. stack_size must be set (at least kStackMin).
  void* stack_addr = nullptr;
};

class Fibre {
 public:
  Fibre() noexcept = default;
  template <typename F, typename... Args,
            typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FibreAttr> && !std::is_same_v<std::decay_t<F>, Fibre>>>
  explicit Fibre(F&& f, Args&&... args) : Fibre(FibreAttr{}, std::forward<F>(f), std::forward<Args>(args)...) {}
  // The callable and its arguments are stored on the new fibre's own stack:
  // creating a fibre allocates nothing else.
  template <typename F, typename... Args>
  Fibre(const FibreAttr& attr, F&& f, Args&&... args) {
    using Call = std::tuple<std::decay_t<F>, std::decay_t<Args>...>;
    void* mem = nullptr;
    f_ = prepare(attr, sizeof(Call), alignof(Call), &mem);
    try {
      new (mem) Call(std::forward<F>(f), std::forward<Args>(args)...);
    } catch (...) {
      abandon();
      throw;
    }
    launch(&Fibre::invoke<Call>, mem);
    if (attr.detached) f_ = nullptr;  // (detached: the handle lets go without a join)
  }
  // The C-style entry: fn(arg) runs on the new fibre.
  Fibre(const FibreAttr& attr, void (*fn)(void*), void* arg) {
    f_ = prepare(attr, 0, 1, nullptr);
    launch(fn, arg);
    if (attr.detached) f_ = nullptr;
  }

  Fibre(Fibre&& o) noexcept : f_(std::exchange(o.f_, nullptr)) {}
  Fibre& operator=(Fibre&& o) noexcept;
  Fibre(const Fibre&) = delete;
  Fibre& operator=(const Fibre&) = delete;
  ~Fibre();

  bool joinable() const noexcept { return f_ != nullptr; }
  // Waits for the fibre to finish. Precondition: joinable() and not self.
  void join();
  // Timed and try forms (C: loom_timedjoin_np, loom_tryjoin_np): true once
  // joined (the handle is then empty); false at the deadline or, for
  // try_join, while it runs (the handle stays joinable). Same preconditions
  // as join (std::invalid_argument otherwise). A fibre joiner waits on a
  // timer, a kernel thread on a futex with a timeout; neither costs a fibre
  // that nobody joins this way anything (runtime/sync/join.cpp).
  bool join_until(std::chrono::steady_clock::time_point t);
  template <class R, class P>
  bool join_for(std::chrono::duration<R, P> d) {
    return join_until(std::chrono::steady_clock::now() + std::chrono::ceil<std::chrono::steady_clock::duration>(d));
  }
  bool try_join();
  void detach();
  // A process-unique id, never reused; 0 for a non-joinable handle.
  std::uint64_t id() const noexcept;
  // Asks the fibre to stop (the mechanism under loom_cancel and
  // pthread_cancel, without their unwinding): from then on
  // this_fibre::stop_requested() is true in it, and every wait of loom's
  // that can say it ended early ends, or fails at once; it decides what to
  // do:
  //  - I/O (read, write, accept, connect, poll, select, epoll_wait,
  //    wait_signal): -1 and ECANCELED. A call that need not wait (an
  //    accept4 with a connection queued, a write with room) is made as
  //    usual. io::rest fails at once (ECANCELED); a fibre that already
  //    rests is detached, so no handle can ask it to stop: wake it through
  //    its descriptor (shutdown(2) gives it a hang-up; README, "Shutdown").
  //  - Sleeps (this_fibre::sleep_for/sleep_until): return false.
  //  - The timed forms, as at their deadline: Mutex/RWLock try_lock*_until
  //    and _for, Semaphore::try_acquire_until/_for, CondVar::wait_until/
  //    wait_for (the predicate forms return p()), Barrier's timed arrival
  //    (withdrawn), call_once_until, join_until/join_for of a Fibre or a
  //    TaskGroup, Future::wait_until/wait_for (timeout), and a Channel's
  //    push/pop _until and _for (ChannelStatus::stopped). Pass
  //    Clock::time_point::max() to wait with no deadline but until a stop.
  // The untimed forms (lock, acquire, wait, arrive_and_wait, join, push,
  // pop) cannot say so and wait on. Nothing for a handle that is not
  // joinable; a request to a fibre that has ended does nothing.
  void request_stop() noexcept;

 private:
  template <typename Call>
  static void invoke(void* p) {
    Call& call = *static_cast<Call*>(p);
    std::apply([](auto& fn, auto&... args) { std::invoke(std::move(fn), std::move(args)...); }, call);
    call.~Call();
  }
  // Reserves a fibre and `size` bytes (aligned to `align`) on its stack.
  static rt::Fibre* prepare(const FibreAttr& attr, std::size_t size, std::size_t align, void** mem);
  void launch(void (*fn)(void*), void* arg);  // makes the prepared fibre runnable
  void abandon() noexcept;                    // releases a prepared, unlaunched fibre
  // join_until on a loom::Deadline; with release false the ended fibre is
  // kept (the handle stays joinable and a join() then only frees it).
  bool join_deadline(std::int64_t d, bool release = true);
  // TaskGroup waits for a fibre's end with these, then clears what points
  // at the handle under its lock, then joins: a request_stop made
  // meanwhile through that pointer never reaches a freed fibre.
  void wait_ended();
  bool wait_ended_until(std::chrono::steady_clock::time_point t);
  friend class TaskGroup;
  friend struct rt::FibreMaker;  // the C API: a handle whose id is known before the fibre runs
  rt::Fibre* f_ = nullptr;
};

namespace this_fibre {
// Lets other ready fibres of equal or higher priority run first.
void yield();
// The calling fibre's id (kernel threads that are not processors: 0).
std::uint64_t id();
Priority priority();
void set_priority(Priority p);
// Moves the calling fibre to a processor of `to`; returns once it runs there.
void migrate(Cluster& to);
// Index of the processor running the caller within its cluster, or -1 on a
// kernel thread that is not a loom processor. On a spare kernel thread the
// monitor started beside the processors (DESIGN.md, "Lost processors"):
// processors() + its number among the spares.
int processor_index();
// Whether Fibre::request_stop was called for the calling fibre (false on a
// kernel thread that is not a fibre).
bool stop_requested() noexcept;
}  // namespace this_fibre

}  // namespace loom
