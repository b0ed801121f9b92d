// The native API's signal idiom (issue 33, item 1): main blocks SIGTERM,
// SIGINT and SIGUSR1 with pthread_sigmask before it starts anything, then a
// fibre waits for them — with loom::io::wait_signal, or by reading a signalfd
// of its own through loom::io::read — while other fibres keep both
// processors busy. Another process sends each signal to the process (kill),
// one at a time, waiting for the fibre's acknowledgement: every one must be
// taken by the fibre, none kill the process, whichever processor the kernel
// looks at. Then the error paths: an empty set, a deadline.
//
// Before LOOM_SIGNALS=main, the processors' kernel threads, started before
// main, had SIGTERM open: the kernel killed the process there.
#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "loom/io.hpp"
#include "loom/loom.hpp"

namespace {

// errno after a call that may resume on another kernel thread: read
// through a helper the compiler cannot inline (loom/io.hpp, "errno").
__attribute__((noinline)) int last_errno() { return errno; }

int fail(const char* what) {
  std::printf("native_signals: FAILED: %s\n", what);
  return 1;
}

}  // namespace

int main() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) return fail("pthread_sigmask");

  // Busy fibres on every processor: the kernel finds them running.
  std::atomic<bool> stop{false};
  std::vector<loom::Fibre> busy;
  for (int i = 0; i < 4; ++i)
    busy.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) loom::this_fibre::yield();
    });

  int ack[2];
  if (pipe(ack) != 0) return fail("pipe");
  constexpr int kRounds = 150;
  const int kinds[3] = {SIGTERM, SIGINT, SIGUSR1};
  pid_t parent = getpid();
  pid_t child = fork();
  if (child == 0) {
    close(ack[1]);  // a parent that dies gives this child EOF, not a wait for ever
    for (int i = 0; i < kRounds; ++i) {
      if (kill(parent, kinds[i % 3]) != 0) _exit(2);
      char c;
      if (read(ack[0], &c, 1) != 1) _exit(3);
    }
    _exit(0);
  }

  int got = 0, wrong = 0;
  int own = signalfd(-1, &set, SFD_CLOEXEC);  // the program's own signalfd
  if (own < 0) return fail("signalfd");
  loom::Fibre waiter([&] {
    for (int i = 0; i < kRounds; ++i) {
      int signo;
      if (i % 2 == 0) {
        siginfo_t info;
        signo = loom::io::wait_signal(set, &info);
        if (signo > 0 && (info.si_signo != signo || info.si_pid != child)) ++wrong;
      } else {
        signalfd_siginfo si;
        signo = loom::io::read(own, &si, sizeof si) == ssize_t(sizeof si) ? int(si.ssi_signo) : -1;
        if (signo > 0 && pid_t(si.ssi_pid) != child) ++wrong;
      }
      if (signo != kinds[i % 3]) ++wrong;
      ++got;
      char c = 'k';
      if (loom::io::write(ack[1], &c, 1) != 1) ++wrong;
    }
  });
  waiter.join();
  int status = 0;
  waitpid(child, &status, 0);
  stop = true;
  busy.clear();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return fail("the sending process");
  if (got != kRounds || wrong) {
    std::printf("native_signals: FAILED: %d of %d taken, %d wrong\n", got, kRounds, wrong);
    return 1;
  }

  // Error paths.
  sigset_t empty;
  sigemptyset(&empty);
  if (loom::io::wait_signal(empty) != -1 || last_errno() != EINVAL) return fail("an empty set gives EINVAL");
  auto t0 = std::chrono::steady_clock::now();
  siginfo_t late{};
  int r = loom::io::wait_signal(set, &late, loom::deadline_after(std::chrono::milliseconds(50)));
  int err = last_errno();
  if (r != -1 || err != ETIMEDOUT) {
    std::printf("native_signals: the timed wait gave %d (errno %d, from pid %d)\n", r, err, int(late.si_pid));
    return fail("a deadline gives ETIMEDOUT");
  }
  if (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(45)) return fail("the deadline waited");
  std::printf("native_signals: %d signals taken by a fibre, none lost, the process alive\n", got);
  return 0;
}
