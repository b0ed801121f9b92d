// Cancellation seen from C++ and from the signal waits, on a plain
// g++ -pthread build (the header route refuses sigwait and compiles C++
// against the system's headers): glibc's forced unwinding — destructors
// run, `catch (abi::__forced_unwind&)` and `catch (...)` see it and
// rethrow, C++'s pthread_cleanup_push (a destructor in glibc's header)
// runs — for pthread_cancel and pthread_exit; and a thread cancelled in
// sigwait, sigtimedwait, sigsuspend, pause and pthread_cond_wait. The
// main thread's short sleeps only make it likely that a worker already
// waits; the output is the same either way.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <cxxabi.h>
#include <initializer_list>

namespace {

int fds[2];

struct Noisy {
  const char* name;
  ~Noisy() { std::printf("  destructor: %s\n", name); }
};

void say(void* s) { std::printf("  handler: %s\n", static_cast<const char*>(s)); }

void pause_a_little() {
  timespec t{0, 20 * 1000 * 1000};
  nanosleep(&t, nullptr);
}

void* forced(void*) {
  Noisy outer{"outer"};
  try {
    Noisy inner{"inner"};
    pthread_cleanup_push(say, const_cast<char*>("C++ cleanup"));
    char c;
    if (read(fds[0], &c, 1) >= 0) std::printf("  read returned\n");
    pthread_cleanup_pop(0);
  } catch (abi::__forced_unwind&) {
    std::printf("  caught abi::__forced_unwind, rethrown\n");
    throw;
  }
  return nullptr;
}

void* catch_all(void*) {
  try {
    Noisy n{"in try"};
    sleep(1000);
  } catch (...) {
    std::printf("  caught ..., rethrown\n");
    throw;
  }
  return nullptr;
}

void* exits(void*) {
  Noisy n{"pthread_exit"};
  try {
    pthread_exit(reinterpret_cast<void*>(5));
  } catch (...) {
    std::printf("  pthread_exit caught ..., rethrown\n");
    throw;
  }
}

void* signal_waits(void* arg) {
  const char* what = static_cast<const char*>(arg);
  Noisy n{what};
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  int sig = 0;
  if (!std::strcmp(what, "sigwait")) {
    sigwait(&set, &sig);
  } else if (!std::strcmp(what, "sigtimedwait")) {
    timespec t{1000, 0};
    sigtimedwait(&set, nullptr, &t);
  } else if (!std::strcmp(what, "sigsuspend")) {
    sigset_t none;
    sigfillset(&none);
    sigdelset(&none, SIGUSR2);
    sigsuspend(&none);
  } else if (!std::strcmp(what, "pause")) {
    pause();
  }
  std::printf("  %s: not cancelled\n", what);
  return nullptr;
}

void report(const char* what, pthread_t t, int c) {
  void* r = nullptr;
  int e = pthread_join(t, &r);
  std::printf("%s: cancel %d, join %d, cancelled %d, value %ld\n", what, c, e, r == PTHREAD_CANCELED,
              r == PTHREAD_CANCELED ? -1L : long(reinterpret_cast<std::intptr_t>(r)));
}

void cancel(const char* what, void* (*fn)(void*), void* arg) {
  pthread_t t;
  std::printf("%s\n", what);
  pthread_create(&t, nullptr, fn, arg);
  pause_a_little();
  report(what, t, pthread_cancel(t));
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (pipe(fds) != 0) return 1;
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  sigaction(SIGUSR2, &sa, nullptr);
  cancel("forced unwind", forced, nullptr);
  cancel("catch (...)", catch_all, nullptr);
  pthread_t t;
  std::printf("pthread_exit\n");
  pthread_create(&t, nullptr, exits, nullptr);
  report("pthread_exit", t, 0);
  for (const char* w : {"sigwait", "sigtimedwait", "sigsuspend", "pause"})
    cancel(w, signal_waits, const_cast<char*>(w));
  return 0;
}
