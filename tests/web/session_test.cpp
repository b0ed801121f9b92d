// session_test.cpp — the connection state both web server drivers share
// (apps/webserver/session.hpp), driven directly: input in pieces of every
// size, output taken back in writes of every size, and what advance() says
// next. No sockets, no runtime: the drivers (connection.hpp's blocking loop,
// server_events.cpp's events) are tested by server_test.py.
#include "session.hpp"

#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

// The disk calls, as the events server makes them (in place).
struct TestIo {
  static int closes;
  template <class F>
  static auto blocking(F&& f) -> decltype(f()) {
    return f();
  }
  static ssize_t pread(int fd, void* b, std::size_t n, off_t off) { return ::pread(fd, b, n, off); }
  static int close(int fd) {
    ++closes;
    return fd >= 0 ? ::close(fd) : 0;
  }
};
int TestIo::closes = 0;

using Session = web::Session<TestIo>;
using Next = Session::Next;

struct Fixture {
  web::ConnTable table{16};
  web::ServerContext ctx;
  Fixture() {
    ctx.table = &table;
    ctx.max_connections = 16;
  }
};

// Drives a session as the drivers do: feeds `input` in reads of at most
// `piece` bytes, takes output in writes of at most `wpiece` bytes; returns
// what was written and the last advance() (close or linger end it; read at
// the end of the input).
struct Driven {
  std::string out;
  Next last = Next::read;
};

Driven drive(Session& s, const std::string& input, std::size_t piece, std::size_t wpiece = 1 << 20) {
  Driven r;
  std::size_t fed = 0;
  for (int guard = 0; guard < 1000000; ++guard) {
    iovec iov[2];
    int cnt;
    while ((cnt = s.pending(iov)) > 0) {
      std::size_t take = std::min(wpiece, iov[0].iov_len);  // a short write: part of the first iovec
      r.out.append(static_cast<const char*>(iov[0].iov_base), take);
      s.wrote(take);
    }
    EXPECT_EQ(cnt, 0);
    if (r.last == Next::close || r.last == Next::linger) return r;
    r.last = s.advance();
    if (r.last == Next::read) {
      if (fed == input.size()) return r;
      s.make_room();
      std::size_t n = std::min({piece, s.read_room(), input.size() - fed});
      EXPECT_GT(n, 0u);
      std::memcpy(s.read_at(), input.data() + fed, n);
      s.did_read(n);
      fed += n;
    }
  }
  ADD_FAILURE() << "the session never finished";
  return r;
}

std::string get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + extra + "\r\n";
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (std::size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
  return n;
}

TEST(Session, PipelinedRequestsInEveryPieceSizeAreAnsweredInOrder) {
  std::string in;
  for (int i = 0; i < 200; ++i) in += get(i % 3 == 2 ? "/missing" : "/plaintext");
  for (std::size_t piece : {std::size_t(1), std::size_t(7), std::size_t(100), std::size_t(1500), in.size()}) {
    for (std::size_t wpiece : {std::size_t(3), std::size_t(4096), std::size_t(1) << 20}) {
      Fixture f;
      Session s(f.ctx, -1);
      Driven r = drive(s, in, piece, wpiece);
      EXPECT_EQ(r.last, Next::read) << piece << "/" << wpiece;
      EXPECT_EQ(count(r.out, "HTTP/1.1 200 OK"), 134) << piece << "/" << wpiece;
      EXPECT_EQ(count(r.out, "HTTP/1.1 404"), 66);
      // In order: the third answer is the first 404.
      std::size_t third = r.out.find("HTTP/1.1", r.out.find("HTTP/1.1", r.out.find("HTTP/1.1") + 1) + 1);
      EXPECT_EQ(r.out.compare(third, 12, "HTTP/1.1 404"), 0);
      EXPECT_EQ(count(r.out, "Connection: close"), 0);
      s.close();
    }
  }
}

TEST(Session, ConnectionCloseEndsWithCloseOrLingerWhenMoreIsComing) {
  Fixture f;
  Session a(f.ctx, -1);
  Driven r = drive(a, get("/plaintext", "Connection: close\r\n"), 1024);
  EXPECT_EQ(r.last, Next::close);
  EXPECT_EQ(count(r.out, "Connection: close"), 1);
  EXPECT_EQ(count(r.out, "Hello, World!"), 1);
  a.close();
  // Bytes after the final request: the peer is still sending.
  Session b(f.ctx, -1);
  r = drive(b, get("/plaintext", "Connection: close\r\n") + get("/plaintext"), 4096);
  EXPECT_EQ(r.last, Next::linger);
  EXPECT_EQ(count(r.out, "HTTP/1.1 200 OK"), 1) << "nothing is answered after a final request";
  b.close();
}

TEST(Session, ErrorsAreAnsweredThenLingered) {
  for (const char* bad : {"GET / HTTP/1.1\r\nNo colon\r\n\r\n", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
                          "GET / HTTP/2.0\r\n\r\n"}) {
    Fixture f;
    Session s(f.ctx, -1);
    Driven r = drive(s, get("/plaintext") + bad, 5);
    EXPECT_EQ(r.last, Next::linger) << bad;
    EXPECT_EQ(count(r.out, "HTTP/1.1 200 OK"), 1) << bad;
    EXPECT_EQ(count(r.out, "Connection: close"), 1) << bad;
    s.close();
  }
}

TEST(Session, BodiesOfGetAreSkippedAcrossReads) {
  Fixture f;
  Session s(f.ctx, -1);
  std::string in = get("/plaintext", "Content-Length: 3000\r\n") + std::string(3000, 'b') + get("/missing");
  Driven r = drive(s, in, 333);
  EXPECT_EQ(r.last, Next::read);
  EXPECT_EQ(count(r.out, "HTTP/1.1 200 OK"), 1);
  EXPECT_EQ(count(r.out, "HTTP/1.1 404"), 1);
  s.close();
}

TEST(Session, AStaticFileGoesOutWholeBetweenTheAnswersAroundIt) {
  char tmpl[] = "/tmp/loom-session-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  std::string body;
  for (int i = 0; body.size() < 3 * web::kFileChunk + 123; ++i) body += "line " + std::to_string(i) + "\n";
  std::ofstream(dir + "/big.txt") << body;
  web::StaticRoot root(dir);
  ASSERT_TRUE(root.ok());
  for (std::size_t wpiece : {std::size_t(1000), std::size_t(1) << 20}) {
    Fixture f;
    f.ctx.root = &root;
    Session s(f.ctx, -1);
    int closes = TestIo::closes;
    Driven r = drive(s, get("/plaintext") + get("/big.txt") + get("/plaintext"), 4096, wpiece);
    EXPECT_EQ(r.last, Next::read);
    std::size_t at = r.out.find(body);
    ASSERT_NE(at, std::string::npos) << "the file's bytes, whole and in order";
    EXPECT_EQ(count(r.out.substr(0, at), "Hello, World!"), 1);
    EXPECT_EQ(count(r.out.substr(at + body.size()), "Hello, World!"), 1);
    EXPECT_EQ(TestIo::closes, closes + 1) << "the file is closed once it is sent";
    s.close();
  }
  std::remove((dir + "/big.txt").c_str());
  rmdir(dir.c_str());
}

TEST(Session, ADroppedOutputClosesTheFileAndMarksTheSessionBroken) {
  char tmpl[] = "/tmp/loom-session-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  std::ofstream(dir + "/f.txt") << std::string(100000, 'x');
  web::StaticRoot root(dir);
  Fixture f;
  f.ctx.root = &root;
  Session s(f.ctx, -1);
  std::string in = get("/f.txt");
  s.make_room();
  std::memcpy(s.read_at(), in.data(), in.size());
  s.did_read(in.size());
  EXPECT_EQ(s.advance(), Next::write);
  iovec iov[2];
  EXPECT_EQ(s.pending(iov), 2) << "the head and the file's first chunk, in one writev";
  int closes = TestIo::closes;
  s.drop_output();
  EXPECT_TRUE(s.broken());
  EXPECT_EQ(TestIo::closes, closes + 1);
  EXPECT_EQ(s.pending(iov), 0);
  s.close();
  std::remove((dir + "/f.txt").c_str());
  rmdir(dir.c_str());
}

}  // namespace
