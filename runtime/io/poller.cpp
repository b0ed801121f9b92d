#include "io/poller.hpp"
#include "base/sys.hpp"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <cstdlib>
#include <memory>

#include "io/fd_table.hpp"
#include "io/uring.hpp"
#include "base/options.hpp"
#include "loom/fibre.hpp"
#include "sched/cluster.hpp"
#include "sched/processor.hpp"
#include "sched/timer.hpp"

namespace loom::rt {

namespace {

constexpr int kBatch = 1024;  // events taken per epoll_wait

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "loom: %s failed: errno %d\n", what, errno);
  std::abort();
}

// Posts the semaphores of every ready descriptor; the fibres they free are
// queued at once and their processors woken once each, at the end.
void deliver(IoState& s, const epoll_event* ev, int n) {
  FdTable& table = FdTable::instance();
  WakeDefer defer;
  int delivered = 0;
  for (int i = 0; i < n; ++i) {
    int fd = ev[i].data.fd;
    if (fd == s.stop_fd) continue;
    if (fd == s.wake_fd) {
      // Level-triggered: drained here, by the sleeper it was meant for
      // (a busy processor's poll leaves it, or the sleeper could miss it).
      if (s.sleeper.load(std::memory_order_relaxed) == this_processor()) {
        std::uint64_t v;
        if (sys::read(s.wake_fd, &v, sizeof v) < 0 && errno != EAGAIN) die("read (wake fd)");
      }
      continue;
    }
    FdEntry* e = table.get(fd);
    if (!e) continue;
    post_ready(*e, ev[i].events);
    ++delivered;
  }
  if (delivered) {  // (a return for the wake-up eventfd alone is not counted)
    count(*s.cluster, Stat::poller_wakeups);
    count(*s.cluster, Stat::poller_events, unsigned(delivered));
  }
}

// Waits for readiness until d (kNow: a look, kForever: until something)
// and delivers it: the back end's poll. ev: room for kBatch epoll events.
// -1 on EINTR.
int backend_poll(IoState& s, epoll_event* ev, int max, Deadline d) {
  if (s.uring) {
    // One reaper at a time: a busy processor's look is short.
    while (s.uring->reaping.exchange(true, std::memory_order_acquire)) cpu_relax();
    int n = uring_reap(s, d);
    s.uring->reaping.store(false, std::memory_order_release);
    return n;
  }
  int n = sys::epoll_wait(s.epfd, ev, max, d == kNow ? 0 : ms_until(d));
  if (n < 0) {
    if (errno == EINTR) return -1;
    die("epoll_wait");
  }
  if (n > 0) deliver(s, ev, n);
  return n;
}

// The descriptor a poller blocks on: what the master poller watches.
int wait_fd(const IoState& s) { return s.uring ? s.uring->ring.ring_fd : s.epfd; }

// ---- poller threads ------------------------------------------------------------

// The runtime's own threads take none of the program's signals (as the
// monitor's: start_runtime_thread); a poller started from main's thread
// before main ran had them open, and under the native API's
// LOOM_SIGNALS=main a SIGINT main had blocked killed the process there.
void block_all_signals() {
  sigset_t all;
  sigfillset(&all);
  (sys::pthread().sigmask)(SIG_SETMASK, &all, nullptr);
}

void* poller_thread_main(void* arg) {
  block_all_signals();
  IoState& s = *static_cast<IoState*>(arg);
  // On the heap: a thread_local array would be static TLS in every thread
  // of every program linked with loom.
  std::unique_ptr<epoll_event[]> events(new epoll_event[kBatch]);
  epoll_event* ev = events.get();
  for (;;) {
    int timeout = -1;
    // Opportunistic: poll while a processor is idle (a sleeping processor
    // signals once, when it goes to sleep; a poll that delivered nothing
    // to it leaves it idle, and the poller must go on polling for it).
    bool idle = s.cluster->idle_processors() > 0;
    if (s.kind == PollerKind::opportunistic) {
      if (!idle) s.idle_signal.wait();
    } else if (s.kind == PollerKind::opportunistic_timeout) {
      // Idle processor: block until something is ready; timeout: just look.
      if (!idle) idle = s.idle_signal.wait(now_ns() + std::int64_t(s.sleep_us) * 1000);
      timeout = idle ? -1 : 0;
    }
    if (s.stopping.load(std::memory_order_acquire)) break;
    backend_poll(s, ev, kBatch, timeout < 0 ? kForever : kNow);
    if (s.stopping.load(std::memory_order_acquire)) break;
    if (s.kind == PollerKind::loop_sleep && s.sleep_us) {
      timespec ts{time_t(s.sleep_us / 1000000), long(s.sleep_us % 1000000) * 1000};
      sys::nanosleep(&ts, nullptr);
    }
  }
  return nullptr;
}

// ---- poller fibre and the master poller ------------------------------------------

struct Master {
  int epfd = -1;
  pthread_t thread{};
};

void* master_main(void* arg) {
  block_all_signals();
  auto* m = static_cast<Master*>(arg);
  epoll_event ev[64];
  for (;;) {
    int n = sys::epoll_wait(m->epfd, ev, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait (master poller)");
    }
    for (int i = 0; i < n; ++i) {
      auto* s = static_cast<IoState*>(ev[i].data.ptr);
      if (Fibre* f = s->parked.exchange(nullptr, std::memory_order_acq_rel)) schedule(f);
    }
  }
  return nullptr;
}

Master& master() {
  static Master* m = [] {
    auto* m = new Master;
    m->epfd = keep_own(epoll_create1(EPOLL_CLOEXEC));
    if (m->epfd < 0) die("epoll_create1 (master poller)");
    if (int e = sys::create_thread(&m->thread, &master_main, m)) {
      errno = e;
      die("pthread_create (master poller)");
    }
    sys::pthread().setname_np(m->thread, "loom-master");
    return m;
  }();
  return *m;
}

// Runs on `here` once the poller fibre's context is saved: publishes it as
// parked, then (re-)arms the one-shot watch of the cluster's epoll fd. The
// master can only see the fibre after both.
void post_park(Processor&, Fibre* prev, void* arg) {
  auto* s = static_cast<IoState*>(arg);
  s->parked.store(prev, std::memory_order_seq_cst);
  // A shutdown that began meanwhile may have found nothing parked: see it.
  if (s->stopping.load(std::memory_order_seq_cst)) {
    if (Fibre* f = s->parked.exchange(nullptr, std::memory_order_acq_rel)) schedule(f);
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.ptr = s;
  int epfd = master().epfd;
  if (epoll_ctl(epfd, EPOLL_CTL_MOD, wait_fd(*s), &ev) != 0 &&
      (errno != ENOENT || epoll_ctl(epfd, EPOLL_CTL_ADD, wait_fd(*s), &ev) != 0))
    die("epoll_ctl (master poller)");
}

void poller_fibre_main(void* arg) {
  IoState& s = *static_cast<IoState*>(arg);
  epoll_event ev[256];
  while (!s.stopping.load(std::memory_order_acquire)) {
    int n = backend_poll(s, ev, 256, kNow);
    if (n > 0) {
      // Let the fibres just freed run first (the poller is in the
      // background queue, so it comes back when they are done).
      this_fibre::yield();
      continue;
    }
    if (n == 0) {
      note_wait(WaitKind::runtime, nullptr);
      this_processor()->suspend(&post_park, &s);
    }
  }
}

void add_eventfd(IoState& s, int* fd) {
  *fd = keep_own(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (*fd < 0) die("eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = *fd;
  if (epoll_ctl(s.epfd, EPOLL_CTL_ADD, *fd, &ev) != 0) die("epoll_ctl (eventfd)");
}

void start_poller(IoState& s) {
  if (s.kind == PollerKind::idle) {
    if (s.uring) return;  // woken by a no-op request (uring_wake)
    s.sleeper_events.reset(new epoll_event[kBatch]);
    add_eventfd(s, &s.wake_fd);
    return;
  }
  if (s.kind == PollerKind::fibre) {
    FibreAttr attr;
    attr.cluster = s.cluster->facade;
    attr.background = true;
    attr.name = "poller";
    attr.stack_size = kStackDefault;
    auto* f = new loom::Fibre(attr, &poller_fibre_main, static_cast<void*>(&s));
    // The poller is the cluster's, not the program's: it does not keep the
    // cluster "in use" (io_shutdown stops and joins it).
    s.cluster->fibres.fetch_sub(1, std::memory_order_relaxed);
    s.poller_handle = f;
    return;
  }
  if (!s.uring) add_eventfd(s, &s.stop_fd);
  if (int e = sys::create_thread(&s.thread, &poller_thread_main, &s)) {
    errno = e;
    die("pthread_create (poller)");
  }
  char name[16];
  std::snprintf(name, sizeof name, "loom-poll-%u", s.cluster->id());
  sys::pthread().setname_np(s.thread, name);
  s.has_thread = true;
}

}  // namespace

void post_ready(FdEntry& e, std::uint32_t m) {
  if ((m & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && !e.hup.load(std::memory_order_relaxed))
    e.hup.store(true, std::memory_order_relaxed);  // before the post that wakes the reader
  if (m & (EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) e.in.ready.post();
  if (m & (EPOLLOUT | EPOLLHUP | EPOLLERR)) e.out.ready.post();
}

IoState& io_state(Cluster& c) {
  IoState* s = c.io.load(std::memory_order_acquire);
  if (__builtin_expect(s != nullptr, 1)) return *s;
  static SpinLock create_lock;  // once per cluster (a spin lock: see base/sys.hpp)
  SpinGuard g(create_lock);
  s = c.io.load(std::memory_order_acquire);
  if (s) return *s;
  s = new IoState;  // type-stable, like the cluster itself
  s->cluster = &c;
  const SchedConfig& cfg = c.config();
  s->kind = cfg.poller;
  s->sleep_us = cfg.poller_sleep_us;
  s->lazy = cfg.lazy_register;
  s->yield_before_read = cfg.yield_before_read;
  if (cfg.io == IoBackend::uring) {
    if (uring_open(*s)) {
      s->backend = IoBackend::uring;
      s->ring_reads = env_bool("LOOM_IO_RING_READ", true);
    } else {
      static std::atomic<bool> told{false};
      if (!told.exchange(true))
        std::fprintf(stderr, "loom: io_uring unavailable (%s): LOOM_IO=uring falls back to epoll\n", std::strerror(errno));
    }
  }
  if (!s->uring) {
    s->epfd = keep_own(epoll_create1(EPOLL_CLOEXEC));
    if (s->epfd < 0) die("epoll_create1");
  }
  s->owner_pid = ::getpid();
  start_poller(*s);
  c.io.store(s, std::memory_order_release);
  c.add_extension(s);
  return *s;
}

bool io_register(IoState& s, int fd, FdEntry& e) {
  if (e.registered.load(std::memory_order_acquire)) return true;
  if (s.uring) {  // nothing to tell the kernel until a wait arms a poll (io_arm)
    IoState* none = nullptr;
    if (e.registered.compare_exchange_strong(none, &s, std::memory_order_acq_rel))
      count(*s.cluster, Stat::registrations);
    return true;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.fd = fd;
  const std::uint32_t gen = e.gen.load(std::memory_order_acquire);
  if (epoll_ctl(s.epfd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST) return false;
  IoState* none = nullptr;
  if (e.registered.compare_exchange_strong(none, &s, std::memory_order_acq_rel)) {
    count(*s.cluster, Stat::registrations);
    // Closed and handed out again between the ADD and here: the new
    // descriptor's describe() cleared the mark before this CAS set it, and
    // the ADD may have been the old file's, which close(2) took out of the
    // set. The mark must not stand for a file that is not in the set (its
    // reads would wait for ever, issue 35, item 5): add what the number
    // holds now (EEXIST if the ADD above was already it; EBADF if closed
    // again, and then the next describe() clears the mark).
    if (e.gen.load(std::memory_order_acquire) != gen) epoll_ctl(s.epfd, EPOLL_CTL_ADD, fd, &ev);
  }
  return true;
}

void io_deregister(int fd, FdEntry& e) {
  // A fork child shares its parent's epoll sets: deregistering there would
  // take the descriptor out of the parent's set too (its waiting fibre
  // would never wake). Only the process that made the set changes it.
  if (IoState* s = e.registered.exchange(nullptr, std::memory_order_acq_rel)) {
    if (s->owner_pid != ::getpid()) return;
    if (s->uring)
      uring_disarm(*s, fd, e);
    else
      epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, nullptr);
  }
}

void io_arm(int fd, FdEntry& e, bool out) {
  IoState* s = e.registered.load(std::memory_order_acquire);
  if (s && s->uring) uring_arm(*s, fd, e, out);
}

void io_processor_idle(IoState& s) {
  if (s.kind == PollerKind::opportunistic || s.kind == PollerKind::opportunistic_timeout) s.idle_signal.post();
}

bool io_idle_sleep(IoState& s, Processor& p, std::int64_t deadline) {
  if (s.kind != PollerKind::idle) return false;
  Processor* none = nullptr;
  if (!s.sleeper.compare_exchange_strong(none, &p, std::memory_order_acq_rel)) {
    if (s.uring) uring_flush(s);  // p sleeps on its futex: its fibres' requests go now
    return false;
  }
  p.sleeping_in.store(&s, std::memory_order_seq_cst);
  if (s.uring) {
    if (!p.wake_flag.try_consume())
      backend_poll(s, nullptr, 0, deadline < 0 || deadline == kNoDeadline ? kForever : std::max<Deadline>(deadline, 1));
  } else if (!p.wake_flag.try_consume()) {
    int timeout = -1;  // kNoDeadline: until woken
    if (deadline >= 0 && deadline != kNoDeadline) {
      std::int64_t left = deadline - now_ns();
      timeout = left <= 0 ? 0 : int(std::min<std::int64_t>((left + 999'999) / 1'000'000, 1 << 30));
    }
    // One sleeper at a time (the CAS above): it owns the cluster's buffer.
    epoll_event* ev = s.sleeper_events.get();
    int n = sys::epoll_wait(s.epfd, ev, kBatch, timeout);
    if (n < 0 && errno != EINTR) die("epoll_wait (idle processor)");
    if (n > 0) deliver(s, ev, n);
  }
  p.sleeping_in.store(nullptr, std::memory_order_relaxed);
  s.sleeper.store(nullptr, std::memory_order_release);
  p.wake_flag.try_consume();  // awake now: whatever was posted is in a queue
  return true;
}

void io_interrupt(IoState& s) {
  if (s.uring) return uring_wake(s);
  std::uint64_t one = 1;
  if (sys::write(s.wake_fd, &one, sizeof one) < 0 && errno != EAGAIN) die("write (wake fd)");
}

void io_busy_poll(IoState& s) {
  if (s.kind != PollerKind::idle || s.sleeper.load(std::memory_order_relaxed)) {
    if (s.uring) uring_flush(s);  // the fibres' requests since the last look
    return;
  }
  if (s.uring) {
    // A look at the completion queue costs no system call; the fibres'
    // requests since the last look are submitted in the same enter.
    if (!uring_try_reap(s)) uring_flush(s);
    return;
  }
  epoll_event ev[32];  // on the running fibre's stack: keep it small
  int n = sys::epoll_wait(s.epfd, ev, 32, 0);
  if (n > 0) deliver(s, ev, n);
}

void IoState::busy_pick(Processor&) { io_busy_poll(*this); }
void IoState::before_sleep(Processor&) {
  // The requests of p's fibres go to the kernel before p sleeps, unless p
  // is about to sleep in the ring, whose enter submits them.
  if (uring && kind != PollerKind::idle) uring_flush(*this);
  io_processor_idle(*this);
}
void IoState::before_park(Processor&) {
  // The requests of the fibres this spare ran: nothing else would submit
  // them while every processor is held (a reader's ring read stayed queued
  // behind a spinner on the only processor, and its fibre waited for good:
  // pthread_io_close_reuse_p1_uring).
  if (uring) uring_flush(*this);
}
bool IoState::sleep(Processor& p, std::int64_t deadline) { return io_idle_sleep(*this, p, deadline); }
void IoState::interrupt(Processor&) { io_interrupt(*this); }
bool IoState::outside_ready() {
  // The idle poller's: readiness waits in the kernel until a processor
  // looks (the other kinds have a thread or fibre of their own that takes
  // it). The epoll set, or the ring, is readable then; poll takes nothing.
  if (kind != PollerKind::idle) return false;
  // Requests queued and not yet submitted wait for a processor's look too.
  if (uring && uring->pending.load(std::memory_order_acquire)) return true;
  pollfd pfd{wait_fd(*this), POLLIN, 0};
  return sys::poll(&pfd, 1, 0) > 0;
}
void IoState::shutdown() { io_shutdown(*cluster); }

void io_shutdown(Cluster& c) {
  IoState* s = c.io.load(std::memory_order_acquire);
  if (!s) return;
  s->stopping.store(true, std::memory_order_seq_cst);
  if (s->has_thread) {
    std::uint64_t one = 1;
    if (s->uring)
      uring_wake(*s);
    else if (sys::write(s->stop_fd, &one, sizeof one) < 0)
      die("write (stop fd)");
    s->idle_signal.post();
    sys::pthread().join(s->thread, nullptr);
    s->has_thread = false;
  }
  if (s->poller_handle) {
    epoll_ctl(master().epfd, EPOLL_CTL_DEL, wait_fd(*s), nullptr);
    c.fibres.fetch_add(1, std::memory_order_relaxed);  // join() counts it out again
    if (Fibre* f = s->parked.exchange(nullptr, std::memory_order_acq_rel)) schedule(f);
    s->poller_handle->join();
    delete s->poller_handle;
    s->poller_handle = nullptr;
  }
}

}  // namespace loom::rt
