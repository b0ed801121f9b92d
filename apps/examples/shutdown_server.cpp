// shutdown_server.cpp — graceful shutdown of a thread-per-connection server
// on loom's native C++ API (README, "Shutdown"; tests/shutdown_test.cpp runs it).
//
//   shutdown_server [PORT [DRAIN_SECONDS]]    PORT 0 (the default): a free port
//
// A line protocol on 127.0.0.1: each request line gets exactly one reply
// line, "ok " and the request; a request "sleep MS ..." is answered after MS
// milliseconds (a slow request: some are in flight when the signal comes).
// Each connection is a fibre that rests with no stack between requests
// (loom::io::rest); the acceptor starts each new one at rest (rest_start).
//
// SIGTERM or SIGINT shuts it down, in this order:
//  1. Stop accepting. The acceptor is asked to stop (Fibre::request_stop:
//     its waiting accept4 fails with ECANCELED) and closes the listener
//     itself; main joins it. (Closing the listener from main instead would
//     close a descriptor another fibre is using: its number may be reused by
//     the time the acceptor calls accept4 on it again.) Connections the
//     kernel had queued and the acceptor had not taken are reset, later ones
//     refused.
//  2. End the connections resting between requests. A resting fibre has no
//     handle to request_stop (only a detached fibre may rest), and a request
//     would not wake it: what wakes it is its descriptor. shutdown(2) gives
//     it a hang-up; it finds itself ended and closes. A connection marks
//     itself resting before it rests, and shutdown marks one ended only if
//     it is resting, so a request that has begun is never cut.
//  3. Let the connections in the middle of a request finish it: each sends
//     its reply, then closes (FIN first: a lingering close, so that a
//     request the client sent meanwhile cannot make the close reset the
//     connection, reply and all).
//  4. Wait until no connection is left and return 0. A second signal
//     meanwhile ends the process at once with status 1, and so does a drain
//     longer than DRAIN_SECONDS (default 10).
//
// "Nothing lost": every request line the server has taken (read whole) is
// answered in full; a connection is closed between requests only, and a
// request the client sent after the last reply is not taken (a lingering
// close reads and drops it): the client sees the end, or a reset, with no
// byte of a reply.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "loom/loom.hpp"

namespace {

enum { kResting, kBusy, kEnded };  // Conn::state

struct Conn {
  explicit Conn(int fd) : fd(fd) {}
  int fd;
  std::atomic<int> state{kResting};  // (a new connection starts at rest)
  std::string partial;               // a request line's bytes so far
  Conn* prev = nullptr;              // the list of open connections
  Conn* next = nullptr;
};

// The open connections: shutdown ends those at rest and waits for the list
// to empty. Never destroyed (main may return while fibres still use it).
struct Connections {
  loom::Mutex m;
  loom::CondVar changed;  // one closed, or a second signal
  Conn* head = nullptr;
  std::size_t open = 0;
  bool cut = false;  // a second signal: stop waiting
};
Connections& conns = *new Connections;
std::atomic<bool> stopping{false};
std::atomic<unsigned long long> requests{0}, answered{0}, ended_at_rest{0};

void add(Conn* c) {
  std::lock_guard<loom::Mutex> g(conns.m);
  c->next = conns.head;
  if (c->next) c->next->prev = c;
  conns.head = c;
  ++conns.open;
}

// Closes c. Off the list first: from then on end_resting() no longer
// touches c->fd, whose number close() frees for reuse.
void end(Conn* c, bool after_reply) {
  if (after_reply) {  // a lingering close: FIN, then the client's (1 s at most)
    ::shutdown(c->fd, SHUT_WR);
    char buf[4096];
    loom::Deadline d = loom::deadline_after(std::chrono::seconds(1));
    while (loom::io::read_until(c->fd, buf, sizeof buf, d) > 0) {
    }
  }
  {
    std::lock_guard<loom::Mutex> g(conns.m);
    (c->prev ? c->prev->next : conns.head) = c->next;
    if (c->next) c->next->prev = c->prev;
  }
  loom::io::close(c->fd);
  delete c;
  std::lock_guard<loom::Mutex> g(conns.m);
  if (--conns.open == 0) conns.changed.notify_all();
}

// errno after a call that may have moved the fibre to another kernel
// thread (loom/io.hpp, "errno"): read where the compiler cannot reuse the
// address it had before the call.
[[gnu::noinline]] int last_errno() { return errno; }
// One request line, one reply line.
bool answer(int fd, const std::string& line) {
  ++requests;
  if (line.compare(0, 6, "sleep ") == 0)
    loom::this_fibre::sleep_for(std::chrono::milliseconds(std::atoi(line.c_str() + 6)));
  std::string reply = "ok " + line + "\n";
  if (loom::io::write(fd, reply.data(), reply.size()) != ssize_t(reply.size())) return false;
  ++answered;
  return true;
}

// A connection's fibre: started, and continued after each rest, here.
void serve(void* arg) {
  auto* c = static_cast<Conn*>(arg);
  int resting = kResting;
  if (!c->state.compare_exchange_strong(resting, kBusy)) return end(c, false);  // ended at rest (step 2)
  char buf[4096];
  for (;;) {
    // Between requests, a read that would wait rests instead: a wake-up
    // from rest may find nothing to read (readiness is a hint), and a
    // fibre waiting in read for a request that never comes is not at rest,
    // so the shutdown would wait for it.
    const bool idle = c->partial.empty();
    ssize_t n = loom::io::recv(c->fd, buf, sizeof buf, idle ? MSG_DONTWAIT : 0);
    if (n < 0 && idle && last_errno() == EAGAIN) goto rest;
    if (n <= 0) return end(c, false);  // the client hung up
    c->partial.append(buf, std::size_t(n));
    for (std::size_t eol; (eol = c->partial.find('\n')) != std::string::npos; c->partial.erase(0, eol + 1))
      if (!answer(c->fd, c->partial.substr(0, eol))) return end(c, false);
    if (c->partial.size() > 65536) return end(c, false);  // no line in sight
    if (!c->partial.empty()) continue;                    // in the middle of a request: read the rest
  rest:
    // Between requests: rest, with no stack, until the next one. Unless the
    // shutdown has begun (step 3): the marks are a Dekker pair with
    // end_resting's (each stores, then reads the other's: one sees the other).
    c->state.store(kResting);
    resting = kResting;
    if (stopping.load() && c->state.compare_exchange_strong(resting, kBusy)) return end(c, true);
    loom::io::rest(c->fd, &serve, c);  // returns only on error
    return end(c, false);
  }
}

// Step 2: every connection at rest is marked ended and woken by a hang-up.
void end_resting() {
  stopping.store(true);
  std::lock_guard<loom::Mutex> g(conns.m);  // (a listed connection's fd is open)
  for (Conn* c = conns.head; c; c = c->next) {
    int resting = kResting;
    if (c->state.compare_exchange_strong(resting, kEnded)) {
      ::shutdown(c->fd, SHUT_RDWR);
      ++ended_at_rest;
    }
  }
}

// Accepts until asked to stop: a request ends a waiting accept4 with
// ECANCELED, and the loop's test catches one made between two calls (an
// accept4 that need not wait takes a queued connection, request or not).
void accept_loop(int listener) {
  loom::FibreAttr attr;
  attr.name = "conn";
  while (!loom::this_fibre::stop_requested()) {
    int fd = loom::io::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (!loom::this_fibre::stop_requested()) loom::this_fibre::sleep_for(std::chrono::milliseconds(10));  // EMFILE...
      continue;
    }
    auto* c = new Conn(fd);
    add(c);
    if (loom::io::rest_start(fd, &serve, c, attr) != 0) end(c, false);
  }
  loom::io::close(listener);
}

int listen_on(int port) {
  int l = loom::io::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  loom::io::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(std::uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (l < 0 || loom::io::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      loom::io::listen(l, SOMAXCONN) != 0 || getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return -1;
  std::printf("listening on port %d\n", ntohs(a.sin_port));
  std::fflush(stdout);
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything starts: the stop signals are blocked, to be taken by
  // wait_signal (a signal sent to the process goes to main's kernel thread).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  int drain_seconds = argc > 2 ? std::atoi(argv[2]) : 10;
  int listener = listen_on(argc > 1 ? std::atoi(argv[1]) : 0);
  if (listener < 0) {
    std::perror("shutdown_server: listen");
    return 1;
  }
  loom::Fibre acceptor(accept_loop, listener);

  loom::io::wait_signal(stop_signals);  // main is a fibre: only it waits
  acceptor.request_stop();              // 1. stop accepting
  acceptor.join();
  std::printf("shutdown: not accepting\n");
  std::fflush(stdout);
  loom::Fibre second([&] {                                // a second signal cuts the drain short
    if (loom::io::wait_signal(stop_signals) < 0) return;  // ECANCELED: the drain ended first
    std::lock_guard<loom::Mutex> g(conns.m);
    conns.cut = true;
    conns.changed.notify_all();
  });
  end_resting();     // 2. end the connections at rest
  std::size_t left;  // 3. the others finish their request
  bool cut;
  {
    std::lock_guard<loom::Mutex> g(conns.m);
    conns.changed.wait_for(conns.m, std::chrono::seconds(drain_seconds), [] { return conns.open == 0 || conns.cut; });
    left = conns.open;
    cut = conns.cut;
  }
  second.request_stop();
  second.join();
  if (left != 0) {
    std::printf("shutdown: %s, %zu connections left open\n", cut ? "a second signal" : "drain timed out", left);
    std::fflush(stdout);
    if (!cut) loom::dump_fibres();  // where each is (stderr)
    return 1;
  }
  std::printf("shutdown: drained: %llu requests, %llu answered, %llu connections ended at rest\n", requests.load(),
              answered.load(), ended_at_rest.load());
  return 0;  // 4.
}
