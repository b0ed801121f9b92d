// shutdown_test SERVER [load|errors] — apps/examples/shutdown_server's
// graceful shutdown (README, "Shutdown"), from outside: this program is the
// clients, a plain epoll loop on one kernel thread (no loom), and sends the
// server SIGTERM as a person or a service manager would.
//
// load: 5,000 connections send one request each, get the reply and stay
// idle (resting in the server, with no stack); 500 connections send
// requests in a loop, a quarter of them slow ("sleep MS", 1-30 ms); after a
// second of that, SIGTERM, while new connections keep being attempted every
// 2 ms. Then, what "nothing lost" means here, checked:
//   - the server exits with status 0 within 10 s of the signal;
//   - every reply a client received is whole and is the right one ("ok "
//     and its request), in order;
//   - a connection ends (the end, or a reset) only after the signal, and
//     only between requests: with no request outstanding, or with one
//     whose reply has not begun (not a byte of it came) — a request the
//     server never took (it answers every line it reads whole);
//   - the server read no request it did not answer, and every reply it
//     wrote arrived: its closing line's counts, requests = answered = the
//     replies the clients received;
//   - all 5,000 idle connections see the end (EOF, no reset, no byte);
//   - connections: the server prints "shutdown: not accepting" once its
//     listener is closed; one attempted after this program has read that
//     line is refused (ECONNREFUSED). One attempted between the signal and
//     the line may be refused, reset or ended without a byte, or served
//     like any other (the acceptor had taken it before it stopped);
//   - the drain did something: requests in flight at the signal were
//     answered after it (slow ones), and the server ended the idle ones.
// errors: a signal before any client (exit 0 at once); a request half sent
// at the signal (answered once its line is complete, then the end); a
// second SIGTERM during the drain (exit status 1 at once, a slow request
// cut); a drain past the server's DRAIN_SECONDS (exit status 1 then).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const char* server_path;
int failures = 0;

void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::printf("shutdown_test: FAILED: ");
  std::vprintf(fmt, ap);
  std::printf("\n");
  std::fflush(stdout);
  va_end(ap);
  ++failures;
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// ---- the server process --------------------------------------------------------

struct Server {
  pid_t pid = -1;
  int out = -1;  // its stdout, non-blocking
  int port = 0;
  std::string buf;                 // stdout bytes not yet a line
  std::vector<std::string> lines;  // every line it printed
  int status = -1;                 // waitpid's, once it exited
  Clock::time_point exited_at;

  // A new line of its stdout, or "" (none yet).
  std::string next_line() {
    char b[4096];
    for (ssize_t n; (n = ::read(out, b, sizeof b)) > 0;) buf.append(b, std::size_t(n));
    std::size_t eol = buf.find('\n');
    if (eol == std::string::npos) return "";
    std::string line = buf.substr(0, eol);
    buf.erase(0, eol + 1);
    lines.push_back(line);
    return line;
  }
  bool reap() {
    if (status != -1) return true;
    int st;
    if (waitpid(pid, &st, WNOHANG) != pid) return false;
    status = st;
    exited_at = Clock::now();
    while (!next_line().empty()) {
    }
    return true;
  }
  // Waits for a line starting with `prefix` (within `limit`); "" if none.
  std::string wait_line(const char* prefix, milliseconds limit) {
    auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      std::string l = next_line();
      if (!l.empty()) {
        if (l.compare(0, std::strlen(prefix), prefix) == 0) return l;
        continue;
      }
      pollfd p{out, POLLIN, 0};
      ::poll(&p, 1, 10);
    }
    return "";
  }
  // Exit status (0-255), or -1 if it did not exit within `limit` (then killed).
  int wait_exit(milliseconds limit) {
    auto end = Clock::now() + limit;
    while (!reap() && Clock::now() < end) usleep(2000);
    if (status == -1) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  bool printed(const char* prefix) const {
    for (auto& l : lines)
      if (l.compare(0, std::strlen(prefix), prefix) == 0) return true;
    return false;
  }
};

bool start(Server& s, const char* drain_seconds = "10") {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return false;
  s.pid = fork();
  if (s.pid == 0) {
    dup2(p[1], 1);
    execl(server_path, server_path, "0", drain_seconds, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(p[1]);
  s.out = p[0];
  fcntl(s.out, F_SETFL, O_NONBLOCK);
  std::string l = s.wait_line("listening on port ", milliseconds(10000));
  if (l.empty()) {
    fail("the server did not start (%s)", server_path);
    return false;
  }
  s.port = std::atoi(l.c_str() + std::strlen("listening on port "));
  return true;
}

// ---- a connection ------------------------------------------------------------------

sockaddr_in address(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(std::uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A blocking connection with a 5 s receive timeout (the errors cases), or -1.
int dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = address(port);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool say(int fd, const std::string& s) { return send(fd, s.data(), s.size(), MSG_NOSIGNAL) == ssize_t(s.size()); }

// Reads one line (blocking, 5 s); "" at the end, a reset or the timeout.
std::string hear(int fd) {
  std::string line;
  char c;
  while (recv(fd, &c, 1, 0) == 1) {
    line += c;
    if (c == '\n') return line;
  }
  return line;  // (a partial line, if it was cut)
}

// What a blocking read finds next: "eof", "reset", "timeout" or "data".
const char* next_event(int fd) {
  char c;
  ssize_t n = recv(fd, &c, 1, 0);
  if (n == 0) return "eof";
  if (n > 0) return "data";
  return errno == ECONNRESET ? "reset" : errno == EAGAIN ? "timeout" : "error";
}

// ---- load ---------------------------------------------------------------------------

enum class Kind { idle, loop, late };
enum class End { open, eof, reset, refused, error };

struct Conn {
  int fd = -1;
  Kind kind;
  int id;
  bool connecting = true;
  std::string request;  // outstanding ("" none); its reply is "ok " + request
  std::string got;      // bytes of that reply so far
  long long seq = 0;
  long long replies = 0;
  long long answered_after_line = 0;  // replies received after "not accepting" was read
  bool after_line = false;            // (late) attempted after "not accepting" was read
  End end = End::open;
  bool ended_before_kill = false;
};

struct Load {
  static constexpr int kIdle = 5000, kLoops = 500;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  Server srv;
  std::vector<std::unique_ptr<Conn>> conns;
  int open_conns = 0, connecting = 0;
  bool killed = false, line_seen = false;
  unsigned seed = 12345;
  long long total_replies = 0;

  unsigned rnd() { return seed = seed * 1103515245u + 12345u, (seed >> 8) & 0xffffff; }

  Conn* dial_async(Kind k, int id) {
    auto c = std::make_unique<Conn>();
    c->kind = k;
    c->id = id;
    c->after_line = line_seen;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
      fail("socket: %s", std::strerror(errno));
      return nullptr;
    }
    sockaddr_in a = address(srv.port);
    int r = connect(c->fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    if (r != 0 && errno != EINPROGRESS) {
      c->end = errno == ECONNREFUSED ? End::refused : End::error;
      close(c->fd);
      conns.push_back(std::move(c));
      return conns.back().get();
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
    ev.data.ptr = c.get();
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    ++open_conns;
    ++connecting;
    conns.push_back(std::move(c));
    return conns.back().get();
  }

  void send_next(Conn* c) {
    char b[96];
    switch (c->kind) {
      case Kind::idle:
        std::snprintf(b, sizeof b, "idle %d", c->id);
        break;
      case Kind::late:
        std::snprintf(b, sizeof b, "late %d", c->id);
        break;
      case Kind::loop:
        if (rnd() % 4 == 0)
          std::snprintf(b, sizeof b, "sleep %u loop %d %lld", 1 + rnd() % 30, c->id, c->seq++);
        else
          std::snprintf(b, sizeof b, "loop %d %lld", c->id, c->seq++);
        break;
    }
    c->request = b;
    c->got.clear();
    std::string line = c->request + "\n";
    if (send(c->fd, line.data(), line.size(), MSG_NOSIGNAL) != ssize_t(line.size()))
      finish(c, errno == ECONNRESET || errno == EPIPE ? End::reset : End::error);
  }

  void finish(Conn* c, End e) {
    if (c->end != End::open) return;
    c->end = e;
    c->ended_before_kill = !killed;
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
    --open_conns;
    if (c->connecting) --connecting;
  }

  void on_event(Conn* c, std::uint32_t events) {
    if (c->end != End::open) return;
    if (c->connecting) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0 && !(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
      if (err != 0) return finish(c, err == ECONNREFUSED ? End::refused : err == ECONNRESET ? End::reset : End::error);
      c->connecting = false;
      --connecting;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.ptr = c;
      epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
      send_next(c);
      return;
    }
    char b[4096];
    for (;;) {
      ssize_t n = recv(c->fd, b, sizeof b, 0);
      if (n == 0) return finish(c, End::eof);
      if (n < 0) {
        if (errno == EAGAIN) return;
        return finish(c, errno == ECONNRESET ? End::reset : End::error);
      }
      c->got.append(b, std::size_t(n));
      for (std::size_t eol; (eol = c->got.find('\n')) != std::string::npos;) {
        std::string reply = c->got.substr(0, eol);
        c->got.erase(0, eol + 1);
        if (c->request.empty() || reply != "ok " + c->request) {
          fail("connection %d (%s): reply '%s' to request '%s'", c->id,
               c->kind == Kind::loop   ? "loop"
               : c->kind == Kind::idle ? "idle"
                                       : "late",
               reply.c_str(), c->request.c_str());
          return finish(c, End::error);
        }
        c->request.clear();
        ++c->replies;
        ++total_replies;
        if (line_seen) ++c->answered_after_line;
        if (c->kind == Kind::loop) send_next(c);
        if (c->end != End::open) return;
      }
    }
  }

  void poll_once(int timeout_ms) {
    epoll_event evs[256];
    int n = epoll_wait(ep, evs, 256, timeout_ms);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.ptr == nullptr) {  // the server's stdout: read below; its end, no more
        if (evs[i].events & EPOLLHUP) epoll_ctl(ep, EPOLL_CTL_DEL, srv.out, nullptr);
        continue;
      }
      on_event(static_cast<Conn*>(evs[i].data.ptr), evs[i].events);
    }
    for (std::string l; !(l = srv.next_line()).empty();)
      if (l == "shutdown: not accepting") line_seen = true;
  }

  int count(Kind k, End e) const {
    int n = 0;
    for (auto& c : conns) n += c->kind == k && c->end == e;
    return n;
  }

  void run() {
    if (!start(srv)) return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;
    epoll_ctl(ep, EPOLL_CTL_ADD, srv.out, &ev);
    auto t0 = Clock::now();
    // The idle ones, 200 connecting at a time, each answered once.
    for (int i = 0; i < kIdle;) {
      while (connecting < 200 && i < kIdle) dial_async(Kind::idle, i++);
      poll_once(10);
      if (ms_since(t0) > 20000) return fail("20 s to open %d idle connections", i);
    }
    auto all_idle = [&] {
      for (auto& c : conns)
        if (c->kind == Kind::idle && (c->replies != 1 || c->end != End::open)) return false;
      return true;
    };
    while (!all_idle()) {
      poll_once(10);
      if (ms_since(t0) > 20000) return fail("20 s for the idle connections' first replies");
    }
    std::printf("shutdown_test: %d idle connections answered and resting (%.0f ms)\n", kIdle, ms_since(t0));
    for (int i = 0; i < kLoops; ++i) dial_async(Kind::loop, i);
    auto t1 = Clock::now();
    while (ms_since(t1) < 1000) poll_once(10);
    long long before = total_replies - kIdle;
    for (auto& c : conns)
      if (c->kind == Kind::loop && c->end != End::open) fail("loop connection %d ended before the signal", c->id);
    int inflight = 0;
    for (auto& c : conns) inflight += c->kind == Kind::loop && !c->request.empty();
    kill(srv.pid, SIGTERM);
    killed = true;
    auto tk = Clock::now();
    std::printf("shutdown_test: %lld loop replies in 1 s; SIGTERM with %d loop requests in flight\n", before, inflight);
    // New connections every 2 ms until 20 have been attempted after the
    // server said it no longer accepts; then everything ends.
    int late = 0, late_after = 0;
    auto next_late = Clock::now();
    while (ms_since(tk) < 12000) {
      if (late_after < 20 && Clock::now() >= next_late) {
        Conn* c = dial_async(Kind::late, late++);
        late_after += c && c->after_line;
        next_late = Clock::now() + milliseconds(2);
      }
      poll_once(1);
      if (srv.reap() && open_conns == 0 && late_after >= 20) break;
      if (srv.status != -1 && ms_since(srv.exited_at) > 2000) break;  // what is open then stays open
    }
    int code = srv.wait_exit(milliseconds(std::max(0LL, 10000LL - static_cast<long long>(ms_since(tk)))));
    double took = code == -1 ? ms_since(tk) : std::chrono::duration<double, std::milli>(srv.exited_at - tk).count();
    while (open_conns > 0 && ms_since(tk) < 15000) poll_once(10);
    check(code, took, late);
  }

  void check(int code, double took, int late) {
    if (code != 0)
      fail("the server's exit status: %d (-1: still running 10 s after SIGTERM); its last line: '%s'", code,
           srv.lines.empty() ? "" : srv.lines.back().c_str());
    else
      std::printf("shutdown_test: the server exited 0, %.0f ms after SIGTERM\n", took);
    int ended_early = 0, cut_reply = 0, unanswered = 0, between = 0;
    long long drained_replies = 0;
    for (auto& c : conns) {
      if (c->end == End::open) {
        fail("connection %d of kind %d still open after the server exited", c->id, int(c->kind));
        continue;
      }
      ended_early += c->ended_before_kill;
      if (!c->got.empty()) ++cut_reply;
      if (c->kind == Kind::loop && !c->request.empty()) ++unanswered;
      if (c->kind == Kind::loop && c->request.empty()) ++between;
      drained_replies += c->answered_after_line;
    }
    if (ended_early) fail("%d connections ended before the signal", ended_early);
    if (cut_reply) fail("%d connections ended in the middle of a reply", cut_reply);
    int idle_eof = count(Kind::idle, End::eof);
    if (idle_eof != kIdle)
      fail("%d of %d idle connections saw the end (%d a reset, %d an error)", idle_eof, kIdle,
           count(Kind::idle, End::reset), count(Kind::idle, End::error));
    int late_refused = 0, late_served = 0, late_cut = 0;
    for (auto& c : conns) {
      if (c->kind != Kind::late) continue;
      if (c->after_line && c->end != End::refused)
        fail("late connection %d, attempted after 'not accepting', was not refused (end %d, %lld replies)", c->id,
             int(c->end), c->replies);
      late_refused += c->end == End::refused;
      late_served += c->replies > 0;
      late_cut += c->end != End::refused && c->replies == 0;
    }
    // The server's own count: requests it read, replies it wrote.
    unsigned long long req = 0, ans = 0, at_rest = 0;
    bool drained = false;
    for (auto& l : srv.lines)
      drained |=
          std::sscanf(l.c_str(), "shutdown: drained: %llu requests, %llu answered, %llu connections ended at rest",
                      &req, &ans, &at_rest) == 3;
    if (!drained) {
      fail("no 'shutdown: drained' line from the server");
    } else {
      if (req != ans) fail("the server read %llu requests and answered %llu", req, ans);
      if (ans != static_cast<unsigned long long>(total_replies))
        fail("the server answered %llu requests, the clients received %lld replies", ans, total_replies);
      if (at_rest < static_cast<unsigned long long>(kIdle))
        fail("the server ended %llu connections at rest, fewer than the %d idle ones", at_rest, kIdle);
    }
    if (drained_replies == 0) fail("no reply came after 'not accepting' (no drain seen)");
    std::printf(
        "shutdown_test: %lld replies in all, each whole and right; loop connections: %d ended between requests, %d "
        "with "
        "a request the server had not taken; %lld replies after 'not accepting' (the drain); %d idle "
        "connections saw the end; late connections: %d attempted (%d refused, %d served, %d ended unserved)\n",
        total_replies, between, unanswered, drained_replies, idle_eof, late, late_refused, late_served, late_cut);
  }
};

void load() {
  Load l;
  l.run();
}

// ---- errors -------------------------------------------------------------------------

void early_signal() {
  Server s;
  if (!start(s)) return;
  auto t = Clock::now();
  kill(s.pid, SIGTERM);
  int code = s.wait_exit(milliseconds(5000));
  if (code != 0) return fail("a signal before any client: exit status %d", code);
  if (!s.printed("shutdown: drained: 0 requests, 0 answered, 0 connections ended at rest"))
    return fail("a signal before any client: no 'drained: 0 requests' line");
  std::printf("shutdown_test: a signal before any client: exit 0 in %.0f ms\n", ms_since(t));
}

void half_sent_request() {
  Server s;
  if (!start(s)) return;
  int idle = dial(s.port), half = dial(s.port);
  if (idle < 0 || half < 0) return fail("half-sent: connect");
  if (!say(idle, "hello\n") || hear(idle) != "ok hello\n") return fail("half-sent: the idle connection's reply");
  if (!say(half, "sleep 50 par")) return fail("half-sent: send");
  usleep(50000);  // (the server has read the half)
  kill(s.pid, SIGTERM);
  if (s.wait_line("shutdown: not accepting", milliseconds(5000)).empty())
    return fail("half-sent: no 'not accepting' line");
  const char* e = next_event(idle);
  if (std::strcmp(e, "eof") != 0) return fail("half-sent: the idle connection saw %s, not the end", e);
  if (!say(half, "tial\n")) return fail("half-sent: the rest of the line could not be sent");
  std::string r = hear(half);
  if (r != "ok sleep 50 partial\n") return fail("half-sent: the reply was '%s'", r.c_str());
  e = next_event(half);
  if (std::strcmp(e, "eof") != 0) return fail("half-sent: after its reply, %s rather than the end", e);
  close(half);
  close(idle);
  int code = s.wait_exit(milliseconds(5000));
  if (code != 0) return fail("half-sent: exit status %d", code);
  std::printf("shutdown_test: a request half sent at the signal was answered once whole, then the end\n");
}

// A slow request in flight; SIGTERM; then `second` (a second SIGTERM after
// the drain began) or the server's 1 s drain limit: exit status 1.
void cut_drain(bool second) {
  Server s;
  if (!start(s, second ? "10" : "1")) return;
  int idle = dial(s.port), slow = dial(s.port);
  if (idle < 0 || slow < 0) return fail("cut drain: connect");
  if (!say(idle, "hello\n") || hear(idle) != "ok hello\n") return fail("cut drain: the idle connection's reply");
  if (!say(slow, "sleep 8000 slow\n")) return fail("cut drain: send");
  usleep(50000);
  auto t = Clock::now();
  kill(s.pid, SIGTERM);
  if (s.wait_line("shutdown: not accepting", milliseconds(5000)).empty())
    return fail("cut drain: no 'not accepting' line");
  if (std::strcmp(next_event(idle), "eof") != 0) return fail("cut drain: the idle connection did not see the end");
  auto t2 = Clock::now();
  if (second) {
    usleep(100000);
    t2 = Clock::now();
    kill(s.pid, SIGTERM);
  }
  int code = s.wait_exit(milliseconds(5000));
  double took = ms_since(second ? t2 : t);
  const char* why = second ? "a second signal" : "drain timed out";
  if (code != 1) return fail("%s: exit status %d, not 1", why, code);
  if (!s.printed((std::string("shutdown: ") + why + ", 1 connections left open").c_str()))
    return fail("%s: no line saying so (last: '%s')", why, s.lines.empty() ? "" : s.lines.back().c_str());
  if (second ? took > 1000 : (took < 900 || took > 3000))
    return fail("%s: the server exited %.0f ms after the %s", why, took, second ? "second signal" : "first");
  std::string r = hear(slow);
  if (!r.empty()) return fail("%s: the cut request got '%s'", why, r.c_str());
  close(slow);
  close(idle);
  std::printf("shutdown_test: %s: exit status 1, %.0f ms after the %s, the slow request cut with no reply\n", why, took,
              second ? "second signal" : "first");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: shutdown_test SERVER [load|errors]\n");
    return 2;
  }
  server_path = argv[1];
  std::string mode = argc > 2 ? argv[2] : "load";
  signal(SIGPIPE, SIG_IGN);
  // 5,500 connections here and as many in the server (which inherits it).
  rlimit r;
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = r.rlim_max == RLIM_INFINITY || r.rlim_max > 65536 ? 65536 : r.rlim_max;
  if (r.rlim_cur < 12000) {
    std::printf("shutdown_test: FAILED: RLIMIT_NOFILE's hard limit (%llu) is below 12000\n",
                static_cast<unsigned long long>(r.rlim_max));
    return 1;
  }
  setrlimit(RLIMIT_NOFILE, &r);
  auto t = Clock::now();
  if (mode == "load") {
    load();
  } else if (mode == "errors") {
    early_signal();
    half_sent_request();
    cut_drain(true);
    cut_drain(false);
  } else {
    std::fprintf(stderr, "shutdown_test: unknown mode %s\n", mode.c_str());
    return 2;
  }
  if (failures) {
    std::printf("shutdown_test: %s: %d failures\n", mode.c_str(), failures);
    return 1;
  }
  std::printf("shutdown_test: %s: ok (%.1f s)\n", mode.c_str(), ms_since(t) / 1000);
  return 0;
}
