// tls_rest_exit — an outside review of restable threads (loom_attr_
// setrestable_np) under libloom-pthread: how a thread that rested ends.
// Each of kThreads restable threads rests on its socket, is continued on
// one of two processors, and then ends one of three ways: loom_exit from
// the continuation, returning after loom closed its descriptor under it
// (read: EBADF), or returning after a plain read. A thread made joinable
// detaches itself before it rests. For each: loom_self() is the same
// before and after the rest, a key's destructor and a thread_local's
// destructor run exactly once, its thread_local's value is its own, and
// loom_join / loom_detach of a detached thread say EINVAL while it rests.
// Bounded: every wait gives up after 10 s. Prints PASS or the first failure.
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "loom/loom.h"

namespace {

constexpr int kThreads = 48;

std::atomic<int> failures{0};
std::atomic<int> ended{0};
std::atomic<int> tl_destructed{0};
std::atomic<int> key_destructed{0};
loom_key_t key;

void fail(const char* what, int thread) {
  if (failures.fetch_add(1) == 0) std::printf("FAIL: thread %d: %s\n", thread, what);
}

struct Counted {
  int owner = -1;
  ~Counted() {
    if (owner >= 0) tl_destructed.fetch_add(1);
  }
};
thread_local Counted counted;
thread_local std::string mine;

struct Conn {
  int index;
  int fd;
  int peer;
  loom_t self = 0;
  std::atomic<int> resting{0};
};

void key_dtor(void* v) {
  if (v) key_destructed.fetch_add(1);
}

void cont(void* p) {
  auto* c = static_cast<Conn*>(p);
  if (loom_self() != c->self) fail("loom_self() changed across the rest", c->index);
  if (mine != "thread " + std::to_string(c->index)) fail("a thread_local changed across the rest", c->index);
  if (counted.owner != c->index) fail("a thread_local object lost its state", c->index);
  if (loom_getspecific(key) != c) fail("a key's value changed across the rest", c->index);
  char b;
  ssize_t n = loom_read(c->fd, &b, 1);
  int how = c->index % 3;
  if (how == 1) {
    if (n != -1 || errno != EBADF) fail("read after loom closed the descriptor: not EBADF", c->index);
  } else if (n != 1) {
    fail("read after the rest", c->index);
  }
  if (how != 1) loom_close(c->fd);
  ended.fetch_add(1);
  if (how == 0) loom_exit(nullptr);  // from the continuation: unwinds to the thread's end
}

void* start(void* p) {
  auto* c = static_cast<Conn*>(p);
  c->self = loom_self();
  mine = "thread " + std::to_string(c->index);
  counted.owner = c->index;
  loom_setspecific(key, c);
  if (c->index % 4 == 3) {
    int e = loom_detach(loom_self());  // a joinable one detaches itself first
    if (e) fail("loom_detach(loom_self())", c->index);
  }
  c->resting.store(1);
  int e = loom_rest(c->fd, &cont, c);
  char what[96];
  std::snprintf(what, sizeof what, "loom_rest: %s", std::strerror(e));
  fail(what, c->index);
  ended.fetch_add(1);
  return nullptr;
}

template <class P>
bool eventually(P pred) {
  for (int i = 0; i < 10000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  if (loom_key_create(&key, &key_dtor) != 0) return 1;
  static Conn conns[kThreads];
  loom_t ids[kThreads];
  for (int i = 0; i < kThreads; ++i) {
    loom_attr_t a;
    loom_attr_init(&a);
    if (i % 4 != 3) loom_attr_setdetachstate(&a, LOOM_CREATE_DETACHED);
    loom_attr_setrestable_np(&a, 1);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 1;
    conns[i].index = i;
    conns[i].fd = sv[0];
    conns[i].peer = sv[1];
    if (loom_create(&ids[i], &a, &start, &conns[i]) != 0) {
      std::printf("FAIL: loom_create\n");
      return 1;
    }
    if (i % 4 != 3) {
      // Detached before it could run: EINVAL, whether it runs, rests or not yet.
      if (loom_join(ids[i], nullptr) != EINVAL) fail("loom_join of a detached thread: not EINVAL", i);
      if (loom_detach(ids[i]) != EINVAL) fail("loom_detach of a detached thread: not EINVAL", i);
    }
    loom_attr_destroy(&a);
  }
  for (int i = 0; i < kThreads; ++i) {
    Conn& c = conns[i];
    if (!eventually([&] { return c.resting.load() == 1; })) fail("never reached its rest", i);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (int i = 0; i < kThreads; ++i) {
    if (i % 4 != 3 && loom_join(ids[i], nullptr) != EINVAL)
      fail("loom_join of a resting detached thread: not EINVAL", i);
    if (i % 3 == 1)
      loom_close(conns[i].fd);  // continues it; its read says EBADF
    else if (write(conns[i].peer, "x", 1) != 1)
      fail("write", i);
  }
  if (!eventually([] { return ended.load() == kThreads; })) fail("threads did not end", ended.load());
  if (!eventually([] { return tl_destructed.load() == kThreads && key_destructed.load() == kThreads; }))
    fail("destructors did not all run", tl_destructed.load() * 1000 + key_destructed.load());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (tl_destructed.load() != kThreads) fail("a thread_local destructor ran twice", tl_destructed.load());
  if (key_destructed.load() != kThreads) fail("a key destructor ran twice", key_destructed.load());
  for (auto& c : conns) close(c.peer);
  if (failures.load()) return 1;
  std::printf("PASS\n");
  return 0;
}
