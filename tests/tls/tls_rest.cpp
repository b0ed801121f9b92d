// tls_rest — a thread's own thread-locals across rests (loom_attr_
// setrestable_np, docs/DESIGN.md "Rest"). Linked with libloom-pthread, where
// each thread of loom_create has a thread control block of its own: a
// restable thread's is on the heap, so it may loom_rest, and its __thread
// and thread_local variables (their values and addresses), errno and its
// thread_local destructor (once, at its real end) survive each rest, with
// several threads resting and continued on two processors. Prints PASS or
// the first failure and exits 1. (With LOOM_TLS=off thread-locals and errno
// follow kernel threads, which other fibres share: it does not hold.)
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "loom/loom.h"

namespace {

constexpr int kThreads = 8;
constexpr int kRounds = 4;

std::atomic<int> failures{0};
std::atomic<int> finished{0};
std::atomic<int> destructed{0};

void fail(const char* what, int thread, int round) {
  if (failures.fetch_add(1) == 0) std::printf("FAIL: thread %d round %d: %s\n", thread, round, what);
}

__thread int tv = 0;               // static TLS, constant-initialised
thread_local std::string tl_text;  // constructed on first use
struct Counted {
  bool armed = false;
  ~Counted() {
    if (armed) destructed.fetch_add(1);
  }
};
thread_local Counted counted;  // its destructor registered by address

struct Conn {
  int index;
  int fd;
  int round = 0;
  int* tv_addr = nullptr;
  std::string* text_addr = nullptr;
  std::atomic<int> resting{0};  // rounds it has reached a rest in
};

std::string text_for(int index, int round) {
  return "thread " + std::to_string(index) + " round " + std::to_string(round);
}

void cont(void* p);

// Sets this round's values and rests; returns only if the rest failed.
void rest_again(Conn* c) {
  tv = 1000 * c->index + c->round;
  tl_text = text_for(c->index, c->round);
  errno = 100 + c->round;
  c->resting.store(c->round + 1);
  int e = loom_rest(c->fd, &cont, c);
  char what[96];
  std::snprintf(what, sizeof what, "loom_rest: %s", std::strerror(e));
  fail(what, c->index, c->round);
  finished.fetch_add(1);
}

void cont(void* p) {
  auto* c = static_cast<Conn*>(p);
  int saved_errno = errno;
  if (saved_errno != 100 + c->round) fail("errno changed across the rest", c->index, c->round);
  if (tv != 1000 * c->index + c->round) fail("a __thread variable changed across the rest", c->index, c->round);
  if (&tv != c->tv_addr) fail("a __thread variable moved", c->index, c->round);
  if (tl_text != text_for(c->index, c->round)) fail("a thread_local changed across the rest", c->index, c->round);
  if (&tl_text != c->text_addr) fail("a thread_local moved", c->index, c->round);
  if (!counted.armed) fail("a thread_local object lost its state", c->index, c->round);
  char b;
  if (loom_read(c->fd, &b, 1) != 1) fail("read after the rest", c->index, c->round);
  if (++c->round < kRounds) return rest_again(c);
  finished.fetch_add(1);  // returning ends the thread: counted's destructor runs once
}

void* start(void* p) {
  auto* c = static_cast<Conn*>(p);
  c->tv_addr = &tv;
  c->text_addr = &tl_text;
  counted.armed = true;
  rest_again(c);
  return nullptr;
}

bool eventually(const std::atomic<int>& v, int want) {
  for (int i = 0; i < 10000; ++i) {
    if (v.load() >= want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  Conn conns[kThreads];
  int peers[kThreads];
  loom_attr_t a;
  if (loom_attr_init(&a) || loom_attr_setdetachstate(&a, LOOM_CREATE_DETACHED) || loom_attr_setrestable_np(&a, 1)) {
    std::printf("FAIL: attributes\n");
    return 1;
  }
  int r = -1;
  if (loom_attr_getrestable_np(&a, &r) || r != 1 || loom_attr_setrestable_np(&a, 2) != EINVAL) {
    std::printf("FAIL: loom_attr_getrestable_np / bad value\n");
    return 1;
  }
  for (int i = 0; i < kThreads; ++i) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 1;
    conns[i].index = i;
    conns[i].fd = sv[0];
    peers[i] = sv[1];
    loom_t t;
    if (loom_create(&t, &a, &start, &conns[i]) != 0) {
      std::printf("FAIL: loom_create\n");
      return 1;
    }
  }
  for (int round = 0; round < kRounds && failures.load() == 0; ++round) {
    for (int i = 0; i < kThreads; ++i) {
      if (!eventually(conns[i].resting, round + 1)) {
        fail("never reached its rest", i, round);
        break;
      }
      if (write(peers[i], "x", 1) != 1) fail("write", i, round);
    }
  }
  if (!eventually(finished, kThreads)) fail("threads did not finish", -1, -1);
  if (!eventually(destructed, kThreads)) fail("thread_local destructors did not run", -1, -1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (destructed.load() != kThreads) fail("a thread_local destructor ran twice", -1, -1);
  for (int i = 0; i < kThreads; ++i) {
    close(peers[i]);
    loom_close(conns[i].fd);
  }
  loom_attr_destroy(&a);
  if (failures.load()) return 1;
  std::printf("PASS\n");
  return 0;
}
