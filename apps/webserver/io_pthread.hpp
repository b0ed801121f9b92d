// io_pthread.hpp — the Io policy of connection.hpp for one kernel thread
// per connection: the system calls themselves, on blocking descriptors.
#pragma once

#include <cerrno>

#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <utility>

#include "connection.hpp"

namespace web {

struct PthreadIo {
  // Kernel threads get at least this much stack: glibc puts the thread's
  // static TLS (libstdc++'s and loom's, which is linked in) at its top.
  static constexpr std::size_t kMinStack = 64 * 1024;

  static int socket(int d, int t, int p) { return ::socket(d, t, p); }
  static int bind(int fd, const sockaddr* a, socklen_t n) { return ::bind(fd, a, n); }
  static int listen(int fd, int backlog) { return ::listen(fd, backlog); }
  static int accept4(int l, int flags) { return ::accept4(l, nullptr, nullptr, flags); }
  static ssize_t read(int fd, void* b, std::size_t n) { return ::read(fd, b, n); }
  static ssize_t write(int fd, const void* b, std::size_t n) { return ::send(fd, b, n, MSG_NOSIGNAL); }
  static ssize_t writev(int fd, const iovec* iov, int cnt) { return ::writev(fd, iov, cnt); }
  static ssize_t pread(int fd, void* b, std::size_t n, off_t off) { return ::pread(fd, b, n, off); }
  static int close(int fd) { return ::close(fd); }
  template <class F>
  static auto blocking(F&& f) -> decltype(std::forward<F>(f)()) {
    return std::forward<F>(f)();
  }
  static void sleep_ms(int ms) {
    timespec ts{ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, nullptr);
  }

  static int rest(int, void (*)(void*), void*) { return ENOTSUP; }  // a kernel thread keeps its stack

  struct Start {
    ServerContext* ctx;
    int fd;
  };
  static bool spawn(ServerContext& ctx, int fd) {
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, std::max(ctx.stack_size, kMinStack));
    auto* s = new Start{&ctx, fd};
    pthread_t t;
    int rc = pthread_create(
        &t, &a,
        [](void* p) -> void* {
          Start st = *static_cast<Start*>(p);
          delete static_cast<Start*>(p);
          serve_connection<PthreadIo>(*st.ctx, st.fd);
          return nullptr;
        },
        s);
    pthread_attr_destroy(&a);
    if (rc != 0) delete s;
    return rc == 0;
  }
};

}  // namespace web
