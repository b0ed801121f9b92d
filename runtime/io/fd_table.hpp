// io/fd_table.hpp — what loom knows about each file descriptor.
//
// An FdEntry per descriptor number, found by index: a two-level table of
// 1,024-entry chunks, allocated the first time a number in the chunk is
// used and never freed (type-stable: a poller that read a stale event for a
// closed number touches a live entry and at worst posts a spurious wake-up,
// which every waiter tolerates — it retries its system call).
//
// Per direction (in, out), an entry has
//  - a mutex: fibres sharing a descriptor in one direction take turns in
//    the slow path (the one waiting on readiness), so one edge-triggered
//    notification is never consumed by a fibre that then does not read;
//  - a ReadyWord, a binary semaphore for the one fibre that holds the turn
//    (or a one-shot callback, loom::io::when_ready): the poller posts it on
//    every edge; edges that arrive while nobody waits collapse into one
//    pending post, which a new descriptor under the number starts without.
// `gen` counts closes of the number: a fibre woken from a wait whose
// generation changed returns EBADF (close wakes everyone waiting).
#pragma once

#include <atomic>
#include <cstdint>

#include "io/ready_word.hpp"
#include "loom/sync.hpp"

namespace loom::rt {

struct IoState;
struct UringWait;

enum FdKind : std::uint8_t {
  kFdUnknown = 0,  // not seen since it was opened: looked up on first use
  kFdPollable,     // socket, pipe, ...: non-blocking underneath, epoll-able
  kFdFile,         // terminal, blocking FIFO or other: calls go through the offload cluster
  kFdRegular,      // regular file: a read is one call, in place if the page cache holds it
                   // (RWF_NOWAIT tells), else through the offload cluster (io.cpp, read_in_place)
  kFdInPlace,      // never blocks (/dev/null, /dev/zero, /dev/urandom...): calls made in place
};

// How one attempt on a pollable descriptor asks the kernel not to wait,
// whatever the open file's O_NONBLOCK says (io.cpp, "The descriptor rule").
// One value, not a flag per form: a call reads it once, when it begins, and
// makes every attempt in that form (io.cpp, call), so it must never be seen
// half of one file's and half of the next's.
enum class Nowait : std::uint8_t {
  none,  // no per-call form: the plain call (a FIFO, terminal, eventfd...)
  pipe,  // a pipe where RWF_NOWAIT works: preadv2/pwritev2
  sock,  // a socket: MSG_DONTWAIT (and recv(2) works on it)
};

struct FdSide {
  Mutex turn{MutexType::normal, MutexPolicy::blocking};
  ReadyWord ready;  // posted by the poller on every edge
  std::atomic<std::int64_t> timeout_ns{0};  // 0 = none
  // The read the turn's holder has in an io_uring (io/uring.hpp): a close
  // cancels it.
  std::atomic<UringWait*> ring_read{nullptr};
  // io_uring: a one-shot poll for this side is submitted or queued, and for
  // which of the number's files: its generation's bits plus one (0: none).
  // A poll armed for a file since closed (its completion is a closed file's,
  // and ignored) must not stand for the next file's (io/uring.cpp, uring_arm).
  std::atomic<std::uint32_t> ring_armed{0};
  // io_uring, write side: the peer shut down its writing, and the RDHUP the
  // kernel adds to every ring poll would end each one at once: this side
  // waits in the ring's write-side epoll set instead (io/uring.hpp).
  std::atomic<bool> ring_epoll{false};
};

struct FdEntry {
  std::atomic<std::uint8_t> kind{kFdUnknown};
  // Whether the program sees the descriptor non-blocking. Where loom set
  // O_NONBLOCK underneath (loom_nb), this is the program's own flag, kept
  // by loom's fcntl. Otherwise the kernel's flag is the program's and this
  // is only a hint, the kernel's answer when last asked: a program changes
  // the flag in ways loom does not see (ioctl FIONBIO, through a dup, in a
  // child sharing the open file), so whatever must be right asks the
  // kernel (program_nonblock).
  std::atomic<bool> user_nonblock{false};
  // loom set O_NONBLOCK on the open file underneath (a descriptor the native
  // API made; never on the pthread routes, nor on one loom did not make).
  // Otherwise the kernel's flag is the program's, and a pollable entry is
  // tried one call at a time without waiting (io.cpp, "The descriptor
  // rule"). Written before describe() publishes the kind.
  std::atomic<bool> loom_nb{false};
  // A socket, or a pipe where RWF_NOWAIT works: one attempt can ask the
  // kernel not to wait whatever the file's flag (MSG_DONTWAIT, RWF_NOWAIT).
  // A pollable entry without it (a FIFO, terminal, eventfd... the program
  // made non-blocking) is tried in place only while the kernel says its
  // file is non-blocking. Stored by describe() with the kind, never cleared
  // on the way: a call on its way to an attempt must not find the form gone
  // (that made it a plain, blocking read of the old file: issue 35, item 5).
  std::atomic<Nowait> nowait{Nowait::none};
  std::atomic<bool> stream{false};  // byte stream: a short read drains it
  // A read returned less than asked while registered: the receive queue was
  // empty then, and any later arrival raises an edge (epoll(7)), so the next
  // read may wait for that edge instead of spending a system call on EAGAIN.
  // Also set on a connection just accepted whose first read should wait
  // (io.cpp, "A connection's first read"): the wait registers it, and a
  // registration reports bytes already there.
  std::atomic<bool> in_drained{false};
  // The last read filled the caller's buffer: more is probably queued, so
  // the next read does not yield first (yield-before-read is for reads that
  // would otherwise find nothing yet).
  std::atomic<bool> in_full{false};
  // The poller saw the peer hang up (or an error): the end of the stream
  // needs no new edge, so drained reads must not wait for one.
  std::atomic<bool> hup{false};
  // Another number may refer to the same open file (loom made a dup): its
  // close must deregister explicitly. Otherwise close(2) of the last number
  // removes it from the epoll set, and loom saves the EPOLL_CTL_DEL.
  std::atomic<bool> shared{false};
  std::atomic<IoState*> registered{nullptr};  // whose epoll set holds it
  std::atomic<std::uint32_t> gen{0};
  // io_uring: this number's requests (polls, reads) whose completions have
  // not been reaped. Each holds the file open; close waits for them.
  std::atomic<std::uint32_t> ring_requests{0};
  FdSide in, out;
  // After the hot part, read once per connection (io.cpp, "A connection's
  // first read"). A connection's: the listener whose score its first read's
  // outcome goes to (-1: none). A listener's: how often its connections'
  // first reads found nothing lately, and its accepts mod 256.
  std::atomic<std::int32_t> probe_for{-1};
  std::atomic<std::int8_t> first_read_score{0};
  std::atomic<std::uint8_t> accepts{0};
  // A regular file's: how many reads in a row the page cache held whole
  // (io.cpp, read_in_place); from kCachedRun on, reads are made in place.
  std::atomic<std::uint8_t> cached_run{0};

  // Records what the number refers to now (a descriptor loom made, adopted
  // or copied): fresh per-use hints, no token from a former holder of the
  // number, no registration; the kind is published last.
  void describe(std::uint8_t kind, bool user_nonblock, bool stream, bool shared, Nowait form = Nowait::none) noexcept;
  void clear_timeouts() noexcept;  // a new descriptor under the number
  // A socket (recv(2) works on it): io_uring reads it with IORING_OP_RECV.
  bool sock() const noexcept { return nowait.load(std::memory_order_relaxed) == Nowait::sock; }
  // A pollable entry whose open file's flags are the program's: each
  // attempt asks the kernel itself not to wait (RWF_NOWAIT, MSG_DONTWAIT),
  // whatever the flag says now — on a non-blocking file that is the call
  // the program made, on a blocking one the only safe attempt.
  bool per_call() const noexcept { return per_call(kind.load(std::memory_order_relaxed)); }
  bool per_call(std::uint8_t k) const noexcept {
    return !loom_nb.load(std::memory_order_acquire) && nowait.load(std::memory_order_acquire) != Nowait::none &&
           k == kFdPollable;
  }
  // Whether the program sees fd (this entry's number) non-blocking now: the
  // kernel's O_NONBLOCK (fcntl F_GETFL, 70 ns here), refreshing the hint,
  // or the program's own flag where loom set the kernel's (loom_nb). A
  // number no longer open answers false (the caller's wait then sees the
  // close, or its retry the EBADF).
  bool program_nonblock(int fd) noexcept;
};

class FdTable {
 public:
  static constexpr int kChunkBits = 10;
  static constexpr int kChunk = 1 << kChunkBits;

  // The entry for fd (>= 0), created on first use; nullptr for a number
  // beyond the table (larger than RLIMIT_NOFILE's hard limit at start-up).
  FdEntry* get(int fd) {
    if (fd < 0) return nullptr;
    unsigned c = unsigned(fd) >> kChunkBits;
    if (c >= nchunks_) return nullptr;
    FdEntry* chunk = chunks_[c].load(std::memory_order_acquire);
    if (__builtin_expect(chunk == nullptr, 0)) chunk = grow(c);
    return &chunk[fd & (kChunk - 1)];
  }

  // The entry for fd if its chunk exists (never creates one): nullptr for a
  // number loom has never looked at, which it knows nothing of.
  FdEntry* find(int fd) const {
    if (fd < 0) return nullptr;
    unsigned c = unsigned(fd) >> kChunkBits;
    if (c >= nchunks_) return nullptr;
    FdEntry* chunk = chunks_[c].load(std::memory_order_acquire);
    return chunk ? &chunk[fd & (kChunk - 1)] : nullptr;
  }
  // Whether m is an entry's in.turn or out.turn, and whose (the listing's
  // rt::fd_turn_of): a scan of the chunks, for diagnostics only.
  bool turn_of(const void* m, int* fd, bool* out) const;
  // One past the largest number the table can hold.
  unsigned limit() const { return nchunks_ * unsigned(kChunk); }

  static FdTable& instance();
  // The table if it has been made (nullptr before loom's first look at any
  // descriptor): a call that changes numbers before then has nothing to
  // keep, and must not make it (jemalloc closes files through syscall(2)
  // from its first malloc, before any constructor: capi/pthread/io_syscall.hpp).
  static FdTable* existing();

 private:
  FdTable();
  FdEntry* grow(unsigned c);
  std::atomic<FdEntry*>* chunks_;
  unsigned nchunks_;
};

// ---- the runtime's own descriptors ------------------------------------------
//
// The descriptors loom keeps for the life of the process (the pollers' epoll
// sets and eventfds, the io_uring ring and its write-side set) live in the
// program's table, but are not the program's: on glibc those numbers are
// free. So each is moved at its making to a number a program does not count
// on (own_floor() or above: a server at its limit counts from 0, a program
// that closes then opens expects the lowest free number back), and the
// program's close, close_range and closefrom pass over it — a daemon's
// closefrom(3) once took the pollers' eventfd, and the next wake-up aborted
// the process. close() of one fails with EBADF and a dup2 onto one with
// EBUSY (the program never had it; see docs/DESIGN.md, "Close, then the
// same number at once"). Short-lived descriptors made inside one of the
// program's calls (poll's set, sigwait's signalfd) are not kept.

// The lowest number a kept descriptor takes: half the soft descriptor
// limit, at most 1,024 (a larger floor grows the kernel's table, and a fork
// copies it) and never below 3 (a limit of 64 keeps them at 32 and up).
int own_floor() noexcept;
constexpr int kMaxOwnFds = 32;  // a cluster keeps two or three; clusters are few
// fd (close-on-exec) at own_floor() or above: itself if it is there, else
// a copy there, fd closed; -1 (fd left open) where none can be had.
int move_to_floor(int fd) noexcept;
// Moves fd (just made, close-on-exec) to own_floor() or above and marks it
// the runtime's; the new number. Where it cannot move (the table full up
// there) it is kept and marked where it is. fd < 0 passes through.
int keep_own(int fd) noexcept;
// Whether fd is one keep_own() marked.
bool is_own(int fd) noexcept;
// The marked numbers in [first, last], ascending, at most max; how many.
int own_in(unsigned first, unsigned last, int* out, int max) noexcept;

}  // namespace loom::rt
