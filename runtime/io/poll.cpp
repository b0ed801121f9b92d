// io/poll.cpp — waits on many descriptors from a fibre: poll, ppoll,
// select, pselect, epoll_wait and epoll_pwait (loom/io.hpp).
//
// The answer always comes from the kernel's own call made with a zero
// timeout (a "look"): revents, POLLNVAL, fd_set bits, EBADF and EINVAL are
// exactly what the system call gives. Only the *waiting* is loom's:
//
//   look                           ready, or an error   → done (the fast path)
//   nothing, and the caller may wait on a fibre:
//     make a temporary epoll set: every descriptor, level-triggered, with
//     exactly the events asked (POLLIN and EPOLLIN... share their values);
//     give the set's own descriptor to the cluster's epoll set (edge-
//     triggered, like any descriptor loom waits on: io_register);
//     loop: look; ready → done; deadline passed → 0; else wait on the set's
//     readiness word until the poller posts it (or the deadline).
//
// Why a set of its own and not one readiness word per descriptor: a
// ReadyWord has one waiter (FdSide's turn), and a program's descriptor may
// already have a fibre blocked in read() on it; and the program's own
// descriptors (pipes from a parent, a terminal, its own epoll sets) are not
// loom's to make non-blocking. The set costs one epoll_ctl per descriptor
// per blocking call — none when the first look finds something ready — and
// the set is closed when the call returns.
//
// Why no lost wake-up: the set is in the cluster's set before the second
// look. An event after that look wakes the set's wait queue, which raises an
// edge in the cluster's set (epoll wakes a nested set's waiters on every
// event of its items, even one already on its ready list); events before it
// are seen by the look. A wake-up with nothing ready (another thread took
// the bytes first) just looks again — the level-triggered items of the set
// never raise an edge by themselves, so a descriptor the look does not count
// as ready (a write-only select on a hung-up pipe, say) cannot spin.
//
// Descriptors epoll refuses: EPERM (a regular file: poll reports it ready
// at once for input and output, so it can only be waited on for events it
// never has) is skipped; EBADF (closed since the look) is left for the next
// look to report; any other refusal (ELOOP, ENOMEM, ENOSPC of
// max_user_watches) makes the wait look again every kSliceNs, so the call
// is slower but still right. If the set itself cannot be made (EMFILE), the
// whole call is made as is on the offload cluster.
//
// Signal masks (ppoll, pselect, epoll_pwait). The kernel knows no fibre's
// mask (libloom-pthread keeps one per thread: capi/pthread/sigthread.cpp):
// signals go to whichever processor's kernel thread does not block them,
// and a fibre's wait ends with EINTR only for a handler that runs on it
// (libloom-pthread's, through parking_lot::SignalHooks: io_waiting for a
// set, the parking lot's for a poll with nothing to watch, a sleep).
// The mask is passed to every look — the kernel applies it for that
// zero-timeout call, so a signal the mask unblocks that is pending at a look
// is delivered then and the call fails with EINTR, as the system's would —
// but not to the waits between looks. A program that waits in pselect for
// a signal to interrupt it should also wake itself through a descriptor (a
// self-pipe or signalfd in the set). On a kernel thread that is not a
// processor, the call is the system's, mask and all.
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>

#include "base/futex.hpp"
#include "base/sys.hpp"
#include "io/fd_table.hpp"
#include "io/poller.hpp"
#include "loom/io.hpp"
#include "sched/cancel.hpp"
#include "sched/cluster.hpp"
#include "sched/processor.hpp"
#include "sync/parking_lot.hpp"

namespace loom::rt {
namespace {

// How often a wait looks again when some descriptor could not be watched.
constexpr std::int64_t kSliceNs = 5'000'000;

// ---- the kernel's calls (raw: see base/sys.hpp) -------------------------------------

struct Sigmask6 {  // pselect6's sixth argument
  const sigset_t* set;
  std::size_t size;
};

#if defined(LOOM_ASAN) || defined(LOOM_TSAN)
int k_ppoll(pollfd* f, nfds_t n, const timespec* t, const sigset_t* m) { return ::ppoll(f, n, t, m); }
int k_pselect(int n, fd_set* r, fd_set* w, fd_set* e, const timespec* t, const sigset_t* m) {
  return ::pselect(n, r, w, e, t, m);
}
int k_epoll_pwait(int ep, epoll_event* ev, int n, int ms, const sigset_t* m) { return ::epoll_pwait(ep, ev, n, ms, m); }
int k_epoll_create() { return ::epoll_create1(EPOLL_CLOEXEC); }
int k_epoll_ctl(int ep, int op, int fd, epoll_event* ev) { return ::epoll_ctl(ep, op, fd, ev); }
#else
int k_ppoll(pollfd* f, nfds_t n, const timespec* t, const sigset_t* m) {
  return int(::syscall(SYS_ppoll, f, n, t, m, _NSIG / 8));
}
int k_pselect(int n, fd_set* r, fd_set* w, fd_set* e, const timespec* t, const sigset_t* m) {
  // The kernel updates *t: always a copy of the caller's.
  timespec copy, *tp = nullptr;
  if (t) tp = &(copy = *t);
  Sigmask6 sm{m, _NSIG / 8};
  return int(::syscall(SYS_pselect6, n, r, w, e, tp, m ? &sm : nullptr));
}
int k_epoll_pwait(int ep, epoll_event* ev, int n, int ms, const sigset_t* m) {
  return int(::syscall(SYS_epoll_pwait, ep, ev, n, ms, m, _NSIG / 8));
}
int k_epoll_create() { return int(::syscall(SYS_epoll_create1, EPOLL_CLOEXEC)); }
int k_epoll_ctl(int ep, int op, int fd, epoll_event* ev) { return int(::syscall(SYS_epoll_ctl, ep, op, fd, ev)); }
#endif

// errno read on the kernel thread that made the call (io.cpp's rule).
__attribute__((noinline)) long neg_errno(long r) { return r < 0 ? -errno : r; }

__attribute__((noinline)) int finish(long r) {
  if (r < 0) {
    errno = int(-r);
    return -1;
  }
  return int(r);
}

constexpr timespec kZero{0, 0};

bool valid(const timespec* t) { return !t || (t->tv_sec >= 0 && t->tv_nsec >= 0 && t->tv_nsec < 1'000'000'000); }

Deadline deadline_ns(std::int64_t rel_ns) {
  if (rel_ns < 0) return kForever;
  std::int64_t now = now_ns();
  return rel_ns > INT64_MAX - now ? kForever : now + rel_ns;
}

Deadline deadline_of(const timespec* t) {
  if (!t) return kForever;
  if (t->tv_sec > (INT64_MAX - 999'999'999) / 1'000'000'000) return kForever;
  return deadline_ns(std::int64_t(t->tv_sec) * 1'000'000'000 + t->tv_nsec);
}

// The caller is a fibre on a processor (not the idle loop, not a callback
// the poller runs between fibres): it may wait.
bool on_fibre(Processor* p) { return p && p->current() != &p->idle_fibre(); }

// errno through calls the compiler can neither inline nor fold: this file's
// functions switch fibres, and a fibre may resume on another kernel thread
// (loom/io.hpp), so an errno address kept from before a switch would be
// another thread's.
__attribute__((noinline)) int errno_now() { return errno; }
__attribute__((noinline)) void set_errno(int e) { errno = e; }

// A look with a zero timeout (the caller's own: it will not wait) that
// found nothing: a scheduling point. An event loop that polls with timeout
// 0 while it waits for its own worker threads would otherwise keep them,
// ready behind it on its processor, from ever running (on the kernel they
// run meanwhile on other CPUs, or when the loop's time slice ends). The
// yield costs a few loads when nothing else is ready (Processor::yield's
// fast path). Not on a kernel thread that is not a processor.
long nothing_yet(Processor* p, long r) {
  if (r == 0 && on_fibre(p)) this_fibre::yield();
  return r;
}

// ---- the temporary set -------------------------------------------------------------

// Made on the first add(): a call with nothing to watch (poll(NULL, 0, ms)
// and select(0, ...) as sleeps) just sleeps.
class WatchSet {
 public:
  explicit WatchSet(Processor& p) : cluster_(&p.cluster()) {}

  // The set could not be made (EMFILE...): the caller makes its call as is.
  bool failed() const { return failed_; }
  bool empty() const { return ep_ < 0; }

  bool open() {
    int ep = k_epoll_create();
    FdEntry* e = ep >= 0 ? FdTable::instance().get(ep) : nullptr;
    if (!e) {
      if (ep >= 0) sys::close(ep);
      failed_ = true;
      return false;
    }
    // Nobody else knows the number until close.
    e->clear_timeouts();
    e->describe(kFdPollable, false, false, /*shared=*/false);
    ep_ = ep;
    entry_ = e;
    return true;
  }

  ~WatchSet() {
    // loom::io::close: forgets the entry (a stale edge only posts a word
    // nobody waits on) and closes; close(2) takes the set out of the
    // cluster's set.
    if (ep_ >= 0) {
      int e = errno_now();
      io::close(ep_);
      set_errno(e);
    }
  }

  // Watches fd for `events` (poll's bits; epoll's have the same values).
  // False only for a number the set holds already (EEXIST): the caller
  // then gives the union of what its entries ask through watch_again.
  bool add(int fd, std::uint32_t events) {
    if (ep_ < 0 && (failed_ || !open())) return true;
    epoll_event ev = event(fd, events);
    if (k_epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) == 0) return true;
    int e = errno_now();
    if (e == EEXIST) return false;
    refused(e);
    return true;
  }
  void watch_again(int fd, std::uint32_t events) {
    if (ep_ < 0) return;
    epoll_event ev = event(fd, events);
    if (k_epoll_ctl(ep_, EPOLL_CTL_MOD, fd, &ev) != 0) refused(errno_now());
  }

  // Waits for the set to become readable, or until d: 0, or ETIMEDOUT;
  // ECANCELED for a pending cancellation request (sched/cancel.hpp); EINTR
  // for a handler due on the fibre (parking_lot::SignalHooks::io_waiting:
  // the caller's delivery point runs it).
  int wait(Deadline d) {
    if (!entry_->registered.load(std::memory_order_acquire) && !io_register(io_state(*cluster_), ep_, *entry_))
      sliced_ = true;  // the cluster refused it (ENOMEM...): look in slices
    Deadline w = d;
    if (sliced_) {
      Deadline s = now_ns() + kSliceNs;
      if (w == kForever || s < w) w = s;
    }
    this_processor()->counters.add(Stat::io_blocks);
    note_wait(WaitKind::poll, entry_);  // (the entry: a cancellation request posts it)
    if (cancel_pending_here()) return ECANCELED;
    if (sliced_ && !entry_->registered.load(std::memory_order_acquire)) {
      if (!sleep_until_cancellable(w)) return ECANCELED;  // (w is a slice's end: never kForever)
      return ETIMEDOUT;
    }
    auto due = parking_lot::signal_hooks.io_waiting.load(std::memory_order_acquire);
    if (due && due(WaitKind::poll, entry_)) return EINTR;
    io_arm(ep_, *entry_, false);
    int rc = entry_->in.ready.wait(w);
    if (due) due(WaitKind::none, nullptr);
    return rc;
  }

  int fd() const { return ep_; }

 private:
  static epoll_event event(int fd, std::uint32_t events) {
    epoll_event ev{};
    ev.events = events & (EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLRDNORM | EPOLLRDBAND | EPOLLWRNORM | EPOLLWRBAND |
                          EPOLLMSG | EPOLLRDHUP);
    ev.data.fd = fd;
    return ev;
  }
  void refused(int e) {
    if (e != EPERM && e != EBADF) sliced_ = true;  // see the top of the file
  }

  int ep_ = -1;
  FdEntry* entry_ = nullptr;
  Cluster* cluster_ = nullptr;
  bool sliced_ = false;
  bool failed_ = false;
};

// The waiting loop every call shares. look(): > 0 ready, 0 nothing, < 0
// -errno. watch(set): adds the descriptors. blocking(): the whole call made
// as is (on the offload cluster), for a set that cannot be made.
template <class Look, class Watch, class Blocking>
long wait_many(Processor& p, Deadline d, Look&& look, Watch&& watch, Blocking&& blocking) {
  WatchSet set(p);
  watch(set);
  if (set.failed()) {
    void* token = offload_enter(WaitKind::poll, nullptr);
    long r = blocking();
    offload_leave(token);
    return r;
  }
  for (;;) {
    long r = look();
    if (r != 0) return r;
    if (d != kForever && now_ns() >= d) return 0;
    if (set.empty()) {  // nothing to watch: a sleep (in day-long steps if forever), which a handler ends
      switch (sleep_until_interruptible(d != kForever ? d : now_ns() + 86'400'000'000'000, true)) {
        case SleepEnd::cancelled:
          return -ECANCELED;
        case SleepEnd::interrupted:
          return -EINTR;
        case SleepEnd::reached:
          break;
      }
    } else if (int rc = set.wait(d); rc == ECANCELED || rc == EINTR) {  // else 0 or ETIMEDOUT: look either way
      return -rc;
    }
  }
}

// What remains of deadline d, as a timespec (d not kForever).
timespec remaining(Deadline d) {
  std::int64_t left = std::max<std::int64_t>(0, d - now_ns());
  return timespec{time_t(left / 1'000'000'000), long(left % 1'000'000'000)};
}

// ---- poll -----------------------------------------------------------------------------

// Known to loom as pollable, or already non-blocking and so classified
// without a change to its flags (a blocking socket is not classified here:
// that would make it non-blocking underneath a program that never asked).
bool loom_pollable(int fd) {
  FdEntry* e = FdTable::instance().get(fd);
  if (!e) return false;
  std::uint8_t kind = e->kind.load(std::memory_order_acquire);
  if (kind == kFdUnknown) {
    int fl = sys::fcntl(fd, F_GETFL);
    if (fl < 0 || !(fl & O_NONBLOCK)) return false;
    kind = classify(fd, *e);
  }
  return kind == kFdPollable;
}

long poll_impl(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) {
  Processor* p = this_processor_at_entry();
  if (!on_fibre(p)) return neg_errno(k_ppoll(fds, n, timeout, mask));
  if (timeout && timeout->tv_sec == 0 && timeout->tv_nsec == 0)
    return nothing_yet(p, neg_errno(k_ppoll(fds, n, timeout, mask)));
  if (!valid(timeout)) return -EINVAL;
  Deadline d = deadline_of(timeout);
  if (n == 1 && !mask && fds[0].fd >= 0 && (fds[0].events & (POLLIN | POLLOUT)) && loom_pollable(fds[0].fd)) {
    // One descriptor loom can wait on (a thread-per-connection server's
    // socket, an eventfd the program made non-blocking): its own readiness
    // words, no temporary set. Others (a blocking descriptor loom never
    // saw, whose flags it must not change) take the temporary set below.
    long r = poll_one_until(fds[0].fd, fds[0].events, d);
    if (r == -EBADF) r = POLLNVAL;  // closed while waiting: poll's way to say so
    if (r < 0) return r;
    fds[0].revents = short(r);
    return r > 0 ? 1 : 0;
  }
  auto look = [&] { return neg_errno(k_ppoll(fds, n, &kZero, mask)); };
  long r = look();
  if (r != 0) return r;
  auto watch = [&](WatchSet& s) {
    for (nfds_t i = 0; i < n; ++i) {
      int fd = fds[i].fd;
      if (fd < 0 || s.add(fd, std::uint16_t(fds[i].events))) continue;
      std::uint32_t all = 0;  // a repeated number (rare): every entry's events
      for (nfds_t j = 0; j <= i; ++j)
        if (fds[j].fd == fd) all |= std::uint16_t(fds[j].events);
      s.watch_again(fd, all);
    }
  };
  auto blocking = [&] {
    timespec t;
    if (d != kForever) t = remaining(d);
    return neg_errno(k_ppoll(fds, n, d == kForever ? nullptr : &t, mask));
  };
  return wait_many(*p, d, look, watch, blocking);
}

// ---- select -----------------------------------------------------------------------------

// The three sets as the caller gave them, restored before every look (the
// kernel overwrites them: ready bits only, or all zero).
class SavedSets {
 public:
  SavedSets(int nfds, fd_set* r, fd_set* w, fd_set* e) : bytes_(bytes_for(nfds)) {
    fd_set* in[3] = {r, w, e};
    for (int i = 0; i < 3; ++i) {
      user_[i] = in[i];
      if (!in[i]) continue;
      if (bytes_ <= sizeof(fd_set)) {
        saved_[i] = &small_[i];
      } else {
        big_[i].reset(new unsigned long[bytes_ / sizeof(unsigned long)]);
        saved_[i] = big_[i].get();
      }
      std::memcpy(saved_[i], in[i], bytes_);
    }
  }
  void restore() {
    for (int i = 0; i < 3; ++i)
      if (user_[i]) std::memcpy(user_[i], saved_[i], bytes_);
  }
  bool has(int i, int fd) const {
    if (!user_[i] || std::size_t(fd) / 8 >= bytes_) return false;
    auto* w = static_cast<const unsigned long*>(saved_[i]);
    constexpr int kBits = 8 * sizeof(unsigned long);
    return (w[fd / kBits] >> (fd % kBits)) & 1;
  }
  // Bits the kernel reads: nfds, capped as the kernel caps it (its table
  // never has more slots than the descriptor limit allows), in whole longs.
  static std::size_t bytes_for(int nfds) {
    long n = nfds;
    if (n > FD_SETSIZE) {
      rlimit rl{};
      if (::syscall(SYS_getrlimit, RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && long(rl.rlim_max) < n)
        n = std::max<long>(FD_SETSIZE, long(rl.rlim_max));
    }
    constexpr long kBits = 8 * sizeof(unsigned long);
    return std::size_t((n + kBits - 1) / kBits) * sizeof(unsigned long);
  }

 private:
  std::size_t bytes_;
  fd_set* user_[3] = {};
  void* saved_[3] = {};
  fd_set small_[3];
  std::unique_ptr<unsigned long[]> big_[3];
};

long select_impl(int nfds, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout, const sigset_t* mask) {
  Processor* p = this_processor_at_entry();
  if (!on_fibre(p) || nfds < 0) return neg_errno(k_pselect(nfds, r, w, e, timeout, mask));
  if (timeout && timeout->tv_sec == 0 && timeout->tv_nsec == 0)
    return nothing_yet(p, neg_errno(k_pselect(nfds, r, w, e, timeout, mask)));
  if (!valid(timeout)) return -EINVAL;
  Deadline d = deadline_of(timeout);
  SavedSets saved(nfds, r, w, e);
  auto look = [&] {
    saved.restore();
    return neg_errno(k_pselect(nfds, r, w, e, &kZero, mask));
  };
  long res = look();
  if (res != 0) return res;
  // The kernel's select masks (fs/select.c: POLLIN_SET, POLLOUT_SET,
  // POLLEX_SET); hang-up and error are always watched.
  auto watch = [&](WatchSet& s) {
    for (int fd = 0; fd < nfds; ++fd) {
      std::uint32_t ev = 0;
      if (saved.has(0, fd)) ev |= EPOLLIN | EPOLLRDNORM | EPOLLRDBAND;
      if (saved.has(1, fd)) ev |= EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND;
      if (saved.has(2, fd)) ev |= EPOLLPRI;
      if (ev) s.add(fd, ev);
    }
  };
  auto blocking = [&] {
    saved.restore();
    timespec t;
    if (d != kForever) t = remaining(d);
    return neg_errno(k_pselect(nfds, r, w, e, d == kForever ? nullptr : &t, mask));
  };
  return wait_many(*p, d, look, watch, blocking);
}

// ---- epoll_wait ----------------------------------------------------------------------

long epoll_impl(int ep, epoll_event* ev, int max, int timeout_ms, const sigset_t* mask) {
  Processor* p = this_processor_at_entry();
  if (!on_fibre(p)) return neg_errno(k_epoll_pwait(ep, ev, max, timeout_ms, mask));
  if (timeout_ms == 0) return nothing_yet(p, neg_errno(k_epoll_pwait(ep, ev, max, 0, mask)));
  Deadline d = deadline_ns(timeout_ms < 0 ? -1 : std::int64_t(timeout_ms) * 1'000'000);
  auto look = [&] { return neg_errno(k_epoll_pwait(ep, ev, max, 0, mask)); };
  long r = look();
  if (r != 0) return r;
  // The program's set is readable when its ready list holds something. It
  // is waited on directly, as loom waits on a socket: registered once with
  // the cluster's set (lazily, by poll_one), its readiness word posted on
  // every edge, fibres waiting on one set taking turns. A temporary set
  // around it would cost an epoll_ctl per wait, each walking the program's
  // whole set for loops (ep_loop_check): 180 us per wait at 2,000
  // descriptors, against 9 us at 1 (measured here).
  FdEntry* e = FdTable::instance().get(ep);
  std::uint8_t kind = e ? e->kind.load(std::memory_order_acquire) : std::uint8_t(kFdFile);
  if (kind == kFdUnknown) {
    // Shared: the program made it, and may close it otherwise than
    // through loom (loom::io::forget then), so a close deregisters it.
    e->clear_timeouts();
    e->describe(kFdPollable, false, false, /*shared=*/true);
    kind = kFdPollable;
  }
  if (kind == kFdPollable) {
    for (;;) {
      if (long w = poll_one_until(ep, POLLIN, d); w < 0) return w;
      r = look();
      if (r != 0) return r;
      if (d != kForever && now_ns() >= d) return 0;
    }
  }
  // A number loom took for a file (used through loom before it was an
  // epoll set): a temporary set.
  auto watch = [&](WatchSet& s) { s.add(ep, EPOLLIN); };
  auto blocking = [&] { return neg_errno(k_epoll_pwait(ep, ev, max, ms_until(d), mask)); };
  return wait_many(*p, d, look, watch, blocking);
}

}  // namespace
}  // namespace loom::rt

namespace loom::io {

int wait_signal(const sigset_t& set, siginfo_t* info, Deadline d) {
  if (sigisemptyset(&set)) {
    errno = EINVAL;
    return -1;
  }
  // A signalfd of its own per wait, looked at by the fibre's poll (it is
  // readable while one of `set` is pending for the process or the thread
  // that looks) and read without waiting.
  int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) return -1;
  signalfd_siginfo got{};
  int err = 0;
  for (;;) {
    long n = rt::raw_syscall(SYS_read, fd, long(&got), long(sizeof got), 0, 0, 0);
    if (n == long(sizeof got)) break;
    if (n < 0 && n != -EAGAIN && n != -EINTR) {
      err = int(-n);
      break;
    }
    timespec left{};
    if (d != kForever) {
      std::int64_t ns = d - rt::now_ns();
      if (ns <= 0) {
        err = ETIMEDOUT;
        break;
      }
      left = {time_t(ns / 1000000000), long(ns % 1000000000)};
    }
    pollfd p{fd, POLLIN, 0};
    long r = rt::poll_impl(&p, 1, d == kForever ? nullptr : &left, nullptr);
    if (r < 0 && r != -EINTR) {
      err = int(-r);
      break;
    }
  }
  loom::io::close(fd);
  if (err) {
    errno = err;
    return -1;
  }
  if (info) {
    *info = siginfo_t{};
    info->si_signo = int(got.ssi_signo);
    info->si_code = got.ssi_code;
    info->si_errno = got.ssi_errno;
    info->si_pid = pid_t(got.ssi_pid);
    info->si_uid = uid_t(got.ssi_uid);
    info->si_status = got.ssi_status;
    info->si_value.sival_ptr = reinterpret_cast<void*>(got.ssi_ptr);
  }
  return int(got.ssi_signo);
}

int poll(pollfd* fds, nfds_t n, int timeout_ms) {
  if (timeout_ms < 0) return rt::finish(rt::poll_impl(fds, n, nullptr, nullptr));
  timespec t{timeout_ms / 1000, long(timeout_ms % 1000) * 1'000'000};
  return rt::finish(rt::poll_impl(fds, n, &t, nullptr));
}

int ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* sigmask) {
  return rt::finish(rt::poll_impl(fds, n, timeout, sigmask));
}

int select(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, timeval* timeout) {
  // glibc's: a negative field is EINVAL, microseconds beyond a second carry.
  timespec t{}, *tp = nullptr;
  if (timeout) {
    if (timeout->tv_sec < 0 || timeout->tv_usec < 0) {
      errno = EINVAL;
      return -1;
    }
    time_t carry = timeout->tv_usec / 1'000'000;
    t.tv_sec = timeout->tv_sec > std::numeric_limits<time_t>::max() - carry ? std::numeric_limits<time_t>::max()
                                                                            : timeout->tv_sec + carry;
    t.tv_nsec = long(timeout->tv_usec % 1'000'000) * 1000;
    tp = &t;
  }
  Deadline end = tp ? rt::deadline_of(tp) : kForever;
  long r = rt::select_impl(nfds, readfds, writefds, exceptfds, tp, nullptr);
  // Linux's select leaves the time not slept in *timeout.
  if (timeout && end != kForever && r != -EINVAL) {
    timespec left = rt::remaining(end);
    timeout->tv_sec = left.tv_sec;
    timeout->tv_usec = left.tv_nsec / 1000;
  }
  return rt::finish(r);
}

int pselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, const timespec* timeout,
            const sigset_t* sigmask) {
  return rt::finish(rt::select_impl(nfds, readfds, writefds, exceptfds, timeout, sigmask));
}

int epoll_wait(int epfd, epoll_event* events, int maxevents, int timeout_ms) {
  return rt::finish(rt::epoll_impl(epfd, events, maxevents, timeout_ms, nullptr));
}

int epoll_pwait(int epfd, epoll_event* events, int maxevents, int timeout_ms, const sigset_t* sigmask) {
  return rt::finish(rt::epoll_impl(epfd, events, maxevents, timeout_ms, sigmask));
}

}  // namespace loom::io
