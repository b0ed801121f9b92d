#include "io/fd_table.hpp"

#include "base/spinlock.hpp"
#include "base/sys.hpp"
#include "sched/fibre.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <fcntl.h>
#include <sys/resource.h>


namespace loom::rt {

namespace {
std::atomic<FdTable*> made{nullptr};
}  // namespace

FdTable& FdTable::instance() {
  static FdTable* table = [] {
    auto* t = new FdTable;  // never destroyed: fibres may outlive statics
    made.store(t, std::memory_order_release);
    return t;
  }();
  return *table;
}

FdTable* FdTable::existing() { return made.load(std::memory_order_acquire); }

FdTable::FdTable() {
  rlimit rl{};
  rlim_t max = 1 << 20;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && rl.rlim_max < max) max = rl.rlim_max;
  nchunks_ = unsigned((max + kChunk - 1) / kChunk);
  chunks_ = new std::atomic<FdEntry*>[nchunks_]();
}

bool FdTable::turn_of(const void* m, int* fd, bool* out) const {
  auto a = reinterpret_cast<std::uintptr_t>(m);
  for (unsigned c = 0; c < nchunks_; ++c) {
    FdEntry* chunk = chunks_[c].load(std::memory_order_acquire);
    auto lo = reinterpret_cast<std::uintptr_t>(chunk);
    if (!chunk || a < lo || a >= lo + sizeof(FdEntry) * kChunk) continue;
    std::size_t i = (a - lo) / sizeof(FdEntry);
    if (m != &chunk[i].in.turn && m != &chunk[i].out.turn) return false;
    *fd = int(c * unsigned(kChunk) + i);
    *out = m == &chunk[i].out.turn;
    return true;
  }
  return false;
}

namespace {
[[maybe_unused]] const bool turn_hook = (fd_turn_of = [](const void* m, int* fd, bool* out) {
  FdTable* t = FdTable::existing();
  return t && t->turn_of(m, fd, out);
}, true);
}  // namespace

FdEntry* FdTable::grow(unsigned c) {
  static SpinLock grow_lock;  // first use of a chunk only: 1 in 1,024 numbers (not std::mutex: base/sys.hpp)
  SpinGuard g(grow_lock);
  FdEntry* chunk = chunks_[c].load(std::memory_order_acquire);
  if (!chunk) {
    chunk = new FdEntry[kChunk];
    chunks_[c].store(chunk, std::memory_order_release);
  }
  return chunk;
}

void FdEntry::clear_timeouts() noexcept {
  in.timeout_ns.store(0, std::memory_order_relaxed);
  out.timeout_ns.store(0, std::memory_order_relaxed);
}

void FdEntry::describe(std::uint8_t k, bool user_nb, bool is_stream, bool is_shared, Nowait form) noexcept {
  user_nonblock.store(user_nb, std::memory_order_relaxed);
  stream.store(is_stream, std::memory_order_relaxed);
  shared.store(is_shared, std::memory_order_relaxed);
  // (release: a call that reads the new form reads the close count after it
  // and sees the count moved: io.cpp, call)
  nowait.store(form, std::memory_order_release);
  in_drained.store(false, std::memory_order_relaxed);
  in_full.store(false, std::memory_order_relaxed);
  hup.store(false, std::memory_order_relaxed);
  probe_for.store(-1, std::memory_order_relaxed);
  first_read_score.store(0, std::memory_order_relaxed);
  accepts.store(0, std::memory_order_relaxed);  // (a former listener's count set where the probes fell)
  cached_run.store(0, std::memory_order_relaxed);
  // (release: a registration whose mark lands after this one reads the
  // count the new descriptor moved: poller.cpp, io_register)
  registered.store(nullptr, std::memory_order_release);
  in.ready.clear_token();
  out.ready.clear_token();
  kind.store(k, std::memory_order_release);
}

bool FdEntry::program_nonblock(int fd) noexcept {
  if (loom_nb.load(std::memory_order_relaxed)) return user_nonblock.load(std::memory_order_relaxed);
  int e = errno;
  int fl = sys::fcntl(fd, F_GETFL);
  errno = e;
  bool nb = fl >= 0 && (fl & O_NONBLOCK);
  if (nb != user_nonblock.load(std::memory_order_relaxed)) user_nonblock.store(nb, std::memory_order_relaxed);
  return nb;
}

// ---- the runtime's own descriptors ------------------------------------------

namespace {
std::atomic<int> own_fds[kMaxOwnFds];
std::atomic<int> own_count{0};
std::atomic<int> own_lowest{INT_MAX};  // close()'s quick answer
SpinLock own_lock;                     // orders keep_own's appends
}  // namespace

int own_floor() noexcept {
  rlimit rl{};
  long limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? long(rl.rlim_cur) : 2048;
  return int(std::clamp(limit / 2, 3L, 1024L));
}

int move_to_floor(int fd) noexcept {
  const int floor = own_floor();
  if (fd >= floor) return fd;
  int high = sys::fcntl(fd, F_DUPFD_CLOEXEC, floor);
  if (high < 0) return -1;
  // Once more by dup3, onto the number just taken (the same file): a call
  // ThreadSanitizer follows, where it does not follow F_DUPFD, so the
  // descriptor keeps the record by which epoll_ctl and epoll_wait order the
  // threads (without it, the master poller's reads of a cluster's I/O
  // state were races to it).
  sys::dup3(fd, high, O_CLOEXEC);
  sys::close(fd);
  return high;
}

int keep_own(int fd) noexcept {
  if (fd < 0) return fd;
  if (int high = move_to_floor(fd); high >= 0) fd = high;
  SpinGuard g(own_lock);
  int n = own_count.load(std::memory_order_relaxed);
  if (n < kMaxOwnFds) {
    own_fds[n].store(fd, std::memory_order_relaxed);
    own_count.store(n + 1, std::memory_order_release);
    if (fd < own_lowest.load(std::memory_order_relaxed)) own_lowest.store(fd, std::memory_order_release);
  }
  return fd;
}

bool is_own(int fd) noexcept {
  if (fd < own_lowest.load(std::memory_order_acquire)) return false;
  for (int i = 0, n = own_count.load(std::memory_order_acquire); i < n; ++i)
    if (own_fds[i].load(std::memory_order_relaxed) == fd) return true;
  return false;
}

int own_in(unsigned first, unsigned last, int* out, int max) noexcept {
  int found = 0;
  for (int i = 0, n = own_count.load(std::memory_order_acquire); i < n && found < max; ++i) {
    int fd = own_fds[i].load(std::memory_order_relaxed);
    if (unsigned(fd) >= first && unsigned(fd) <= last) out[found++] = fd;
  }
  std::sort(out, out + found);
  return found;
}

}  // namespace loom::rt
