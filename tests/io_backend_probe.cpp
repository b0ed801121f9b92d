// io_backend_probe BACKEND — asked by with_io_backend.sh before an I/O test's
// variant runs: does loom, in this environment (LOOM_IO, ...), run its I/O
// on BACKEND ("epoll" or "uring")? Starts the runtime, passes a byte through
// a loom socketpair on a fibre (so the cluster's I/O state exists), then asks
// loom::io::backend() from that fibre.
//   exit 0    it does; prints the back end
//   exit 77   it does not: prints the one *** SKIPPED *** line (ctest's
//             SKIP_RETURN_CODE) saying why, and whether the kernel itself
//             allows io_uring — so a missing or broken back end in loom is
//             never passed off as the kernel's fault
//   exit 1    the probe itself failed (that is a failure, not a skip)
// With LOOM_IO_REQUIRED=1 a mismatch is a failure (exit 1) instead of a skip.
#include <linux/io_uring.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "loom/io.hpp"
#include "loom/loom.hpp"

namespace {

// Whether this kernel lets the process make an io_uring: "" if so, else why
// not (ENOSYS: no io_uring; EPERM: kernel.io_uring_disabled or a seccomp
// filter, as in many containers).
std::string kernel_uring_refusal() {
  io_uring_params p;
  std::memset(&p, 0, sizeof p);
  long fd = ::syscall(__NR_io_uring_setup, 4, &p);
  if (fd >= 0) {
    ::close(int(fd));
    return "";
  }
  int e = errno;
  return std::string("io_uring_setup: ") + std::strerror(e);
}

}  // namespace

int main(int argc, char** argv) {
  const char* want = argc > 1 ? argv[1] : "uring";
  std::string got;
  bool io_ok = false;
  loom::Fibre([&] {
    int sv[2];
    if (loom::io::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return;
    char b = 0;
    io_ok = loom::io::write(sv[1], "x", 1) == 1 && loom::io::read(sv[0], &b, 1) == 1 && b == 'x';
    loom::io::close(sv[0]);
    loom::io::close(sv[1]);
    got = loom::io::backend();
  }).join();
  if (!io_ok) {
    std::printf("io_backend_probe: a byte through a loom socketpair failed (LOOM_IO=%s)\n", want);
    return 1;
  }
  if (got == want) {
    std::printf("io_backend_probe: loom runs its I/O on %s\n", got.c_str());
    return 0;
  }
  const char* required = std::getenv("LOOM_IO_REQUIRED");
  bool fail = required && !std::strcmp(required, "1");
  std::string why;
  if (!std::strcmp(want, "uring")) {
    std::string refusal = kernel_uring_refusal();
    if (!refusal.empty())
      why = "io_uring unavailable on this kernel (" + refusal + "; loom fell back to " + got + ")";
    else
      why = "loom runs on " + got + " under LOOM_IO=uring although this kernel allows io_uring"
            " (the uring back end is missing or failed to start)";
  } else {
    why = std::string("LOOM_IO=") + want + " not available (loom runs on " + got + ")";
  }
  std::printf("*** %s: %s ***\n", fail ? "FAILED (LOOM_IO_REQUIRED=1)" : "SKIPPED", why.c_str());
  std::fflush(stdout);
  return fail ? 1 : 77;
}
