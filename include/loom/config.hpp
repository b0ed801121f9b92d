// loom/config.hpp — run-time configuration of a cluster's scheduler.
//
// Every scheduler variant loom offers is chosen here, never by editing code:
// either fill a SchedConfig and pass it to Cluster's constructor, or set the
// LOOM_* environment variables that SchedConfig::from_env() reads (the
// default cluster is configured from the environment).
//
//   LOOM_PROCESSORS=N          processors of the default cluster
//                              (default: CPUs allowed by affinity and cgroup)
//   LOOM_QUEUE=nemesis|locked|shared
//   LOOM_PLACEMENT=push|share  new fibres: round robin to processors (push)
//                              or to the cluster's staging queue (share)
//   LOOM_STEAL=on|off
//   LOOM_STEAL_POLICY=longest-busy|random
//   LOOM_STICKY=N              victim queue length from which a stolen fibre
//                              stays with its thief (0 = never sticky)
//   LOOM_SPIN_US=N             at most how long an idle processor looks for
//                              work before it sleeps, with siblings to steal
//                              from (adaptive; 0 = sleep at once)
//   LOOM_STEAL_FENCE=lock|membarrier  how a thief and a processor agree on
//                              the processor's ready queue (see StealFence)
//   LOOM_STACK_SIZE=BYTES      default fibre stack size
//   LOOM_POLLER=idle|fibre|loop|loop-sleep|opportunistic|opportunistic-timeout
//                              how the cluster's epoll set is polled (see
//                              runtime/io/poller.hpp)
//   LOOM_IO=epoll|uring        the I/O back end (see runtime/io/uring.hpp);
//                              uring falls back to epoll, with a one-line
//                              notice, where the kernel lacks or forbids it
//   LOOM_POLLER_SLEEP=US       loop-sleep's sleep, opportunistic-timeout's
//                              longest interval between polls (µs)
//   LOOM_LAZY_REGISTER=on|off  register an fd with epoll only once it blocks
//   LOOM_YIELD_BEFORE_READ=on|off  input calls yield before the syscall
//   LOOM_WAIT_FIRST=on|off     a new connection's first read waits for its
//                              first bytes without trying, while that
//                              listener's recent first reads found none
//   LOOM_PIN=on|off            pin each processor's kernel thread to the PU
//                              it was assigned (default off; see topo.hpp)
//   LOOM_TOPOLOGY=DESC         use this hwloc synthetic topology instead of
//                              the machine's, e.g. "pack:2 l3:2 core:4 pu:1"
//                              (process-wide, read once; never pins)
//
// A malformed value is reported on stderr, naming the variable, and the
// default is kept: a typo must not silently change the scheduler.
#pragma once

#include <cstddef>
#include <string>

namespace loom {

// How a processor's ready queue is built (thesis §4.2, figure 4.1).
enum class QueueKind {
  nemesis,  // intrusive lock-free MPSC queue per processor (default)
  locked,   // intrusive FIFO behind a spin lock per processor
  shared,   // one locked queue for the whole cluster
};

// Where a newly created fibre is placed.
enum class Placement {
  push,   // round robin over the cluster's processors (work pushing)
  share,  // the cluster's staging queue (work sharing)
};

// How a thief and the owner of a processor's Nemesis ready queue exclude
// each other (sched/ready_queue.hpp).
enum class StealFence {
  lock,        // both take the queue's spin lock: a locked instruction per
               // pick for the owner, a steal costs no system call (default)
  membarrier,  // the owner pays a plain store per pick, a thief one
               // membarrier(2): cheapest for the owner, but the membarrier
               // interrupts every CPU running the process — about 40 µs
               // on a 2-CPU VM whose other CPU is busy (1 µs when idle),
               // and a fibre stolen from a busy processor waits that long
};

// How a cluster polls its epoll set (thesis §3.4, figure 4.4).
enum class PollerKind {
  idle,                   // no poller of its own: the last processor to go
                          // idle blocks in epoll_wait instead of sleeping,
                          // and busy processors poll without blocking
                          // every 128th pick
  fibre,                  // poller fibre in the background queue; a master
                          // poller thread blocks on every cluster's epoll fd
  loop,                   // poller thread: epoll_wait without pause
  loop_sleep,             // poller thread: epoll_wait, then sleep
  opportunistic,          // poller thread woken when a processor goes idle
  opportunistic_timeout,  // ... or after poller_sleep_us at the latest
};

// How a cluster learns that descriptors are ready (and, for io_uring, how
// fibres whose reads would wait get their bytes).
enum class IoBackend {
  epoll,  // an edge-triggered epoll set per cluster
  uring,  // an io_uring per cluster: multishot polls instead of epoll
          // registrations, and a drained stream's read submitted to the
          // ring, its bytes delivered straight to the fibre
};

inline constexpr std::size_t kStackDefault = 64 * 1024;
inline constexpr std::size_t kStackMin = 16 * 1024;
inline constexpr std::size_t kStackMax = std::size_t(1) << 30;  // 1 GiB

struct SchedConfig {
  QueueKind queue = QueueKind::nemesis;
  Placement placement = Placement::push;
  bool stealing = true;
  std::string steal_policy = "longest-busy";
  std::size_t sticky_threshold = 8;
  // Microseconds an idle processor of a cluster of several keeps looking
  // for work before it sleeps, at most (the budget adapts: DESIGN.md,
  // "Spinning before sleeping"). 20: about what a futex sleep and wake cost
  // here, the competitive bound; measured in docs/BENCHMARKS.md ("lock").
  unsigned spin_us = 20;
  // membarrier falls back to lock where membarrier(2) is missing (and
  // under TSan).
  StealFence steal_fence = StealFence::lock;
  std::size_t stack_size = kStackDefault;
  PollerKind poller = PollerKind::idle;
  unsigned poller_sleep_us = 1000;
  IoBackend io = IoBackend::epoll;
  bool lazy_register = true;
  bool yield_before_read = true;
  // The first read of a connection accepted by a blocking accept waits for
  // the socket's first edge instead of trying read(2), as long as probes
  // of that listener (one connection in 16) find its first reads empty:
  // clients that connect and then send each spent an EAGAIN read per
  // connection (runtime/io/io.cpp, "A connection's first read").
  bool wait_first = true;
  // Pin each processor's kernel thread to its PU (Processor::pu(), handed out
  // round robin over the machine's PUs in processor creation order).
  bool pin = false;
  // Stall detector (LOOM_STALL_MS): report a fibre that holds a processor
  // longer than this many milliseconds without a scheduling point, with its
  // backtrace, or that sits in a plain blocking system call. 0 = off.
  unsigned stall_ms = 0;
  // The monitor (LOOM_HANDOFF_US; DESIGN.md, "Lost processors"): a
  // processor whose kernel thread has not passed through the scheduler for
  // this many microseconds, blocked in a system call loom did not see,
  // while fibres wait for it, gets a thief or a spare kernel thread to run
  // them. 0 = off; else at least 100. While a spare works, the cluster runs
  // more fibres at once than it has processors: code that counts on a
  // one-processor cluster to run one fibre at a time sets 0.
  unsigned handoff_us = 1000;
  // ... and one that runs a fibre this long without a scheduling point (a
  // busy wait for a flag; LOOM_SLICE_US). Not below handoff_us. (10 ms
  // started spares for loom's own long runs under a burst of 10,000
  // connections, whose accepting thread then lost the CPUs to them.)
  unsigned slice_us = 100000;

  // The defaults above, overridden by LOOM_* variables that are set.
  static SchedConfig from_env();
  // Human-readable summary, e.g. "queue=nemesis placement=push steal=on".
  std::string describe() const;
};

const char* to_string(QueueKind);
const char* to_string(Placement);
const char* to_string(PollerKind);
const char* to_string(IoBackend);
const char* to_string(StealFence);

}  // namespace loom
