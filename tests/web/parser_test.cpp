// parser_test.cpp — the web server's request parser, response heads, static
// file mapping and timeout table (apps/webserver), without a server.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "http_parser.hpp"
#include "http_response.hpp"
#include "static_files.hpp"
#include "timeouts.hpp"

using web::Method;
using web::Request;
using web::RequestParser;
using Status = RequestParser::Status;

namespace {

struct Parsed {
  Status status;
  int error = 0;
  std::size_t head = 0;
  Request req;
  std::string buf;  // keeps req's views alive
};

// Parses s in one call.
Parsed parse_all(const std::string& s) {
  Parsed p;
  p.buf = s;
  RequestParser parser;
  p.status = parser.parse(p.buf.data(), p.buf.size());
  if (p.status == Status::done) {
    p.head = parser.head_length();
    p.req = parser.request(p.buf.data());
  }
  p.error = parser.error_status();
  return p;
}

// Parses s fed in pieces of the given sizes (cycled), as reads would.
Parsed parse_pieces(const std::string& s, const std::vector<std::size_t>& sizes) {
  Parsed p;
  p.buf = s;
  RequestParser parser;
  std::size_t have = 0, k = 0;
  p.status = Status::incomplete;
  while (p.status == Status::incomplete && have < s.size()) {
    have = std::min(s.size(), have + sizes[k++ % sizes.size()]);
    p.status = parser.parse(p.buf.data(), have);
  }
  if (p.status == Status::done) {
    p.head = parser.head_length();
    p.req = parser.request(p.buf.data());
  }
  p.error = parser.error_status();
  return p;
}

int error_of(const std::string& s) {
  Parsed p = parse_all(s);
  return p.status == Status::error ? p.error : (p.status == Status::done ? 0 : -1);
}

const std::string kGet = "GET /plaintext HTTP/1.1\r\nHost: localhost:8080\r\nAccept: */*\r\n\r\n";

}  // namespace

TEST(Parser, SimpleGet) {
  Parsed p = parse_all(kGet);
  ASSERT_EQ(p.status, Status::done);
  EXPECT_EQ(p.head, kGet.size());
  EXPECT_EQ(p.req.method, Method::get);
  EXPECT_EQ(p.req.method_name, "GET");
  EXPECT_EQ(p.req.target, "/plaintext");
  EXPECT_EQ(p.req.path, "/plaintext");
  EXPECT_EQ(p.req.query, "");
  EXPECT_EQ(p.req.host, "localhost:8080");
  EXPECT_EQ(p.req.minor, 1u);
  EXPECT_TRUE(p.req.keep_alive);
  EXPECT_FALSE(p.req.has_content_length);
}

TEST(Parser, EveryPieceSizeGivesTheSameResult) {
  Parsed whole = parse_all(kGet);
  for (std::size_t n = 1; n <= kGet.size(); ++n) {
    Parsed p = parse_pieces(kGet, {n});
    ASSERT_EQ(p.status, Status::done) << "pieces of " << n;
    EXPECT_EQ(p.head, whole.head);
    EXPECT_EQ(p.req.path, "/plaintext");
    EXPECT_EQ(p.req.host, "localhost:8080");
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::vector<std::size_t> sizes;
    for (int k = 0; k < 8; ++k) sizes.push_back(1 + rng() % 9);
    Parsed p = parse_pieces(kGet, sizes);
    ASSERT_EQ(p.status, Status::done);
    EXPECT_EQ(p.head, whole.head);
  }
}

TEST(Parser, IncompleteUntilTheEmptyLine) {
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\n"), -1);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\n\r"), -1);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
  EXPECT_EQ(error_of(""), -1);
}

TEST(Parser, PipelinedRequestsAreParsedOneAtATime) {
  std::string two = kGet + "HEAD /b?x=1 HTTP/1.1\r\nHost: y\r\n\r\n" + "GET /c HT";
  RequestParser parser;
  ASSERT_EQ(parser.parse(two.data(), two.size()), Status::done);
  std::size_t first = parser.head_length();
  EXPECT_EQ(first, kGet.size());
  parser.reset();
  const char* second = two.data() + first;
  ASSERT_EQ(parser.parse(second, two.size() - first), Status::done);
  Request r = parser.request(second);
  EXPECT_EQ(r.method, Method::head);
  EXPECT_EQ(r.path, "/b");
  EXPECT_EQ(r.query, "x=1");
  EXPECT_EQ(r.host, "y");
  std::size_t third = first + parser.head_length();
  parser.reset();
  EXPECT_EQ(parser.parse(two.data() + third, two.size() - third), Status::incomplete);
}

TEST(Parser, BufferMayMoveBetweenCalls) {
  // The caller compacts its buffer between reads: offsets, not pointers.
  std::string a = "GET /moved HTTP/1.1\r\nHo";
  std::string rest = "st: h\r\n\r\n";
  RequestParser parser;
  ASSERT_EQ(parser.parse(a.data(), a.size()), Status::incomplete);
  std::string b = a + rest;  // a new allocation
  ASSERT_EQ(parser.parse(b.data(), b.size()), Status::done);
  Request r = parser.request(b.data());
  EXPECT_EQ(r.path, "/moved");
  EXPECT_EQ(r.host, "h");
}

TEST(Parser, KeepAliveRules) {
  EXPECT_TRUE(parse_all("GET / HTTP/1.1\r\nHost: x\r\n\r\n").req.keep_alive);
  EXPECT_FALSE(parse_all("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").req.keep_alive);
  EXPECT_FALSE(parse_all("GET / HTTP/1.1\r\nHost: x\r\nconnection: Upgrade, CLOSE\r\n\r\n").req.keep_alive);
  EXPECT_FALSE(parse_all("GET / HTTP/1.0\r\n\r\n").req.keep_alive);
  Parsed ka10 = parse_all("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
  ASSERT_EQ(ka10.status, Status::done);
  EXPECT_TRUE(ka10.req.keep_alive);
  EXPECT_EQ(ka10.req.minor, 0u);
  EXPECT_FALSE(parse_all("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n").req.keep_alive);
  EXPECT_TRUE(parse_all("GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n").req.keep_alive);
}

TEST(Parser, VersionsAndMethods) {
  EXPECT_EQ(error_of("GET / HTTP/2.0\r\nHost: x\r\n\r\n"), 505);
  EXPECT_EQ(error_of("GET / HTTP/0.9\r\n\r\n"), 505);
  Parsed p12 = parse_all("GET / HTTP/1.2\r\nHost: x\r\n\r\n");
  ASSERT_EQ(p12.status, Status::done);
  EXPECT_EQ(p12.req.minor, 1u);
  EXPECT_EQ(error_of("BREW / HTTP/1.1\r\nHost: x\r\n\r\n"), 501);
  EXPECT_EQ(error_of("get / HTTP/1.1\r\nHost: x\r\n\r\n"), 501);  // methods are case-sensitive
  EXPECT_EQ(parse_all("POST / HTTP/1.1\r\nHost: x\r\n\r\n").req.method, Method::post);
  EXPECT_EQ(parse_all("DELETE /x HTTP/1.1\r\nHost: x\r\n\r\n").req.method, Method::delete_);
  EXPECT_EQ(parse_all("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n").req.method, Method::options);
  EXPECT_EQ(error_of("GET * HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
}

TEST(Parser, MalformedRequestLines) {
  for (const char* line :
       {"GET  / HTTP/1.1", "GET / HTTP/1.1 ", " GET / HTTP/1.1", "GET /", "GET / HTTP/1.", "GET / http/1.1",
        "GET / HTTP/1.1x", "GET x HTTP/1.1", "GET / HTTP/a.1", "G(T / HTTP/1.1", "GET\t/ HTTP/1.1", "GET / HTTP/11.1",
        "\x01GET / HTTP/1.1", "GET /\x7f HTTP/1.1", "GET /\x80 HTTP/1.1", "GET / \x00HTTP/1.1"}) {
    std::string s = std::string(line) + "\r\nHost: x\r\n\r\n";
    EXPECT_EQ(error_of(s), 400) << "request line: " << line;
  }
  std::string nul("GET /a\0b HTTP/1.1\r\nHost: x\r\n\r\n", 30);
  EXPECT_EQ(error_of(nul), 400);
}

TEST(Parser, BadBytesAreRefusedBeforeTheLineEnds) {
  EXPECT_EQ(error_of(std::string(64, '\0')), 400);
  EXPECT_EQ(error_of("\x16\x03\x01\x02"), 400);  // a TLS hello
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: a\x01"), 400);
  EXPECT_EQ(error_of("GET /\xff"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r"), -1);                  // CR may yet be followed by LF
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nX: caf\xc3\xa9"), -1);  // obs-text in a value is fine
  // One byte at a time or all at once: the same verdict.
  std::string s = "GET /" + std::string(100, 'a') + "\x02" + std::string(web::kMaxHead, 'b');
  EXPECT_EQ(error_of(s), 400);
  EXPECT_EQ(parse_pieces(s, {1}).error, 400);
}

TEST(Parser, MalformedHeaders) {
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\nName : v\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n folded\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\nA: b\rc\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\nA: b\x01\r\n\r\n"), 400);
  EXPECT_EQ(error_of(std::string("GET / HTTP/1.1\r\nHost: x\r\nA: b\0c\r\n\r\n", 36)), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\nA(b: c\r\n\r\n"), 400);
  // Whitespace around values is not part of them; tabs and obs-text are fine.
  Parsed p = parse_all("GET / HTTP/1.1\r\nHost: \t example.org \t\r\nX: a\tb \xe9\r\n\r\n");
  ASSERT_EQ(p.status, Status::done);
  EXPECT_EQ(p.req.host, "example.org");
}

TEST(Parser, HostIsRequiredOnceIn11) {
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.0\r\n\r\n"), 0);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHOST: a\r\n\r\n"), 0);
}

TEST(Parser, ContentLengthAndTransferEncoding) {
  Parsed p = parse_all("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 42\r\n\r\n");
  ASSERT_EQ(p.status, Status::done);
  EXPECT_TRUE(p.req.has_content_length);
  EXPECT_EQ(p.req.content_length, 42u);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 4x\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n"), 0);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n"), 400);
  EXPECT_EQ(error_of("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(error_of("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  Parsed te = parse_all("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  ASSERT_EQ(te.status, Status::done);
  EXPECT_TRUE(te.req.has_transfer_encoding);
}

TEST(Parser, LineEndsAndLeadingEmptyLines) {
  Parsed lf = parse_all("GET /lf HTTP/1.1\nHost: x\n\n");
  ASSERT_EQ(lf.status, Status::done);
  EXPECT_EQ(lf.req.path, "/lf");
  EXPECT_EQ(lf.head, 26u);
  Parsed lead = parse_all("\r\n\r\nGET /x HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(lead.status, Status::done);
  EXPECT_EQ(lead.req.path, "/x");
  EXPECT_EQ(error_of("\r\n\r\n\r\n\r\n\r\nGET /x HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
}

TEST(Parser, AbsoluteFormIsReducedToItsPath) {
  Parsed p = parse_all("GET http://example.org/a/b?q=1 HTTP/1.1\r\nHost: example.org\r\n\r\n");
  ASSERT_EQ(p.status, Status::done);
  EXPECT_EQ(p.req.path, "/a/b");
  EXPECT_EQ(p.req.query, "q=1");
  Parsed bare = parse_all("GET HTTPS://example.org HTTP/1.1\r\nHost: example.org\r\n\r\n");
  ASSERT_EQ(bare.status, Status::done);
  EXPECT_EQ(bare.req.path, "/");
  Parsed q = parse_all("GET http://example.org?z HTTP/1.1\r\nHost: example.org\r\n\r\n");
  ASSERT_EQ(q.status, Status::done);
  EXPECT_EQ(q.req.path, "/");
  EXPECT_EQ(q.req.query, "z");
}

TEST(Parser, LimitsGive414And431) {
  std::string long_target = "GET /" + std::string(web::kMaxHead, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_EQ(error_of(long_target), 414);
  EXPECT_EQ(parse_pieces(long_target, {100}).error, 414);
  // Without a line end in sight, the limit is seen at kMaxHead bytes.
  RequestParser p;
  std::string endless = "GET /" + std::string(20000, 'b');
  EXPECT_EQ(p.parse(endless.data(), web::kMaxHead - 1), Status::incomplete);
  EXPECT_EQ(p.parse(endless.data(), web::kMaxHead), Status::error);
  EXPECT_EQ(p.error_status(), 414);

  std::string big_headers = "GET / HTTP/1.1\r\nHost: x\r\n";
  while (big_headers.size() < 100 * 1024) big_headers += "X-Filler: " + std::string(100, 'f') + "\r\n";
  big_headers += "\r\n";
  EXPECT_EQ(error_of(big_headers), 431);
  Parsed pieces = parse_pieces(big_headers, {1000});
  EXPECT_EQ(pieces.status, Status::error);
  EXPECT_EQ(pieces.error, 431);
  EXPECT_LE(pieces.buf.size(), big_headers.size());
}

TEST(Parser, HeadOfExactlyTheLimitIsAccepted) {
  std::string start = "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: ";
  std::string end = "\r\n\r\n";
  std::string exact = start + std::string(web::kMaxHead - start.size() - end.size(), 'p') + end;
  ASSERT_EQ(exact.size(), web::kMaxHead);
  EXPECT_EQ(error_of(exact), 0);
  EXPECT_EQ(parse_pieces(exact, {333}).status, Status::done);
  std::string over = start + std::string(web::kMaxHead - start.size() - end.size() + 1, 'p') + end;
  EXPECT_EQ(error_of(over), 431);
  EXPECT_EQ(parse_pieces(over, {333}).error, 431);
}

TEST(Parser, ErrorIsSticky) {
  RequestParser p;
  std::string bad = "GET / HTTP/1.1\r\nBad Header\r\n\r\n";
  EXPECT_EQ(p.parse(bad.data(), bad.size()), Status::error);
  EXPECT_EQ(p.parse(bad.data(), bad.size()), Status::error);
  p.reset();
  EXPECT_EQ(p.parse(kGet.data(), kGet.size()), Status::done);
}

TEST(PercentDecode, Cases) {
  char out[64];
  auto dec = [&](const char* s) {
    long n = web::percent_decode(s, out, sizeof out);
    return n < 0 ? std::string("<bad>") : std::string(out, static_cast<std::size_t>(n));
  };
  EXPECT_EQ(dec("/a%20b"), "/a b");
  EXPECT_EQ(dec("/%2e%2E/x"), "/../x");
  EXPECT_EQ(dec("/a+b"), "/a+b");
  EXPECT_EQ(dec("/%zz"), "<bad>");
  EXPECT_EQ(dec("/%2"), "<bad>");
  EXPECT_EQ(dec("/%"), "<bad>");
  EXPECT_EQ(dec("/%00"), "<bad>");
  EXPECT_EQ(dec("/%252e"), "/%2e");
  char tiny[2];
  EXPECT_EQ(web::percent_decode("/abc", tiny, sizeof tiny), -1);
}

TEST(Response, DateFormat) {
  char d[web::DateCache::kLen + 1] = {};
  web::format_http_date(784111777, d);
  EXPECT_STREQ(d, "Sun, 06 Nov 1994 08:49:37 GMT");
  web::format_http_date(0, d);
  EXPECT_STREQ(d, "Thu, 01 Jan 1970 00:00:00 GMT");
  web::DateCache cache;
  cache.refresh(784111777);
  char c[web::DateCache::kLen + 1] = {};
  cache.copy(c);
  EXPECT_STREQ(c, "Sun, 06 Nov 1994 08:49:37 GMT");
}

TEST(Response, HelloBytes) {
  char buf[web::kMaxResponseHead + 64];
  std::size_t n = web::format_hello(buf, "loom", web::ConnHeader::none, false);
  std::string s(buf, n);
  char date[web::DateCache::kLen];
  web::date_cache().copy(date);
  std::string expect = "HTTP/1.1 200 OK\r\nServer: loom\r\nDate: " + std::string(date, sizeof date) +
                       "\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";
  EXPECT_EQ(s, expect);
  std::string head(buf, web::format_hello(buf, "loom", web::ConnHeader::close, true));
  EXPECT_NE(head.find("Connection: close\r\n\r\n"), std::string::npos);
  EXPECT_EQ(head.find("Hello"), std::string::npos);
  std::string ka(buf, web::format_hello(buf, "loom", web::ConnHeader::keep_alive, false));
  EXPECT_NE(ka.find("Connection: keep-alive\r\n"), std::string::npos);
  std::string err(buf, web::format_error(buf, "loom", 431, web::ConnHeader::close));
  EXPECT_EQ(err.rfind("HTTP/1.1 431 Request Header Fields Too Large\r\n", 0), 0u);
  EXPECT_NE(err.find("Content-Length: 32\r\n"), std::string::npos);
  EXPECT_EQ(err.substr(err.size() - 32), "Request Header Fields Too Large\n");
}

TEST(Static, MimeTypes) {
  EXPECT_EQ(web::mime_type("/a/index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(web::mime_type("x.CSS"), "text/css; charset=utf-8");
  EXPECT_EQ(web::mime_type("p.png"), "image/png");
  EXPECT_EQ(web::mime_type("p.tar.gz"), "application/gzip");
  EXPECT_EQ(web::mime_type("dir.d/noext"), "application/octet-stream");
  EXPECT_EQ(web::mime_type("README"), "application/octet-stream");
}

namespace {

struct TempTree {
  std::string base;
  TempTree() {
    char tmpl[] = "/tmp/loom-web-test-XXXXXX";
    base = mkdtemp(tmpl);
    mkdir((base + "/root").c_str(), 0755);
    mkdir((base + "/root/sub").c_str(), 0755);
    mkdir((base + "/root/empty").c_str(), 0755);
    write(base + "/root/hello.txt", "hello file\n");
    write(base + "/root/sub/index.html", "<p>index</p>");
    write(base + "/root/a b.css", "body{}");
    write(base + "/secret.txt", "secret");
    symlink((base + "/secret.txt").c_str(), (base + "/root/out-link").c_str());
    symlink((base + "/root/hello.txt").c_str(), (base + "/root/in-link").c_str());
    symlink(base.c_str(), (base + "/root/up-dir").c_str());
    mkfifo((base + "/root/fifo").c_str(), 0644);
  }
  ~TempTree() { std::system(("rm -rf '" + base + "'").c_str()); }
  static void write(const std::string& path, const std::string& body) { std::ofstream(path) << body; }
};

int status_of(const web::StaticRoot& root, const std::string& path, std::string* content = nullptr) {
  web::StaticRoot::File f = root.open(path);
  if (f.fd >= 0) {
    if (content) {
      content->resize(f.size);
      EXPECT_EQ(pread(f.fd, content->data(), f.size, 0), static_cast<ssize_t>(f.size));
    }
    close(f.fd);
  }
  return f.status;
}

}  // namespace

TEST(Static, FilesAndTraversal) {
  TempTree t;
  web::StaticRoot root(t.base + "/root");
  ASSERT_TRUE(root.ok()) << root.error();
  std::string content;
  EXPECT_EQ(status_of(root, "/hello.txt", &content), 200);
  EXPECT_EQ(content, "hello file\n");
  EXPECT_EQ(root.open("/hello.txt").mime, "text/plain; charset=utf-8");
  EXPECT_EQ(status_of(root, "/sub/", &content), 200);
  EXPECT_EQ(content, "<p>index</p>");
  EXPECT_EQ(status_of(root, "/sub"), 200);
  EXPECT_EQ(status_of(root, "/a%20b.css"), 200);
  EXPECT_EQ(status_of(root, "/./hello.txt"), 200);
  EXPECT_EQ(status_of(root, "//hello.txt"), 200);
  EXPECT_EQ(status_of(root, "/in-link"), 200);
  EXPECT_EQ(status_of(root, "/missing"), 404);
  EXPECT_EQ(status_of(root, "/empty/"), 404);
  EXPECT_EQ(status_of(root, "/hello.txt/x"), 404);
  // Escapes.
  EXPECT_EQ(status_of(root, "/../secret.txt"), 403);
  EXPECT_EQ(status_of(root, "/sub/../../secret.txt"), 403);
  EXPECT_EQ(status_of(root, "/%2e%2e/secret.txt"), 403);
  EXPECT_EQ(status_of(root, "/%2E%2e%2fsecret.txt"), 403);
  EXPECT_EQ(status_of(root, "/.%2e/secret.txt"), 403);
  EXPECT_EQ(status_of(root, "/out-link"), 403);
  EXPECT_EQ(status_of(root, "/up-dir/secret.txt"), 403);
  EXPECT_EQ(status_of(root, "/fifo"), 403);
  EXPECT_EQ(status_of(root, "/%00"), 400);
  EXPECT_EQ(status_of(root, "/%zz"), 400);
  EXPECT_EQ(status_of(root, "/%252e%252e/secret.txt"), 404);  // a file literally named "%2e%2e"
  web::StaticRoot missing(t.base + "/nope");
  EXPECT_FALSE(missing.ok());
  web::StaticRoot file(t.base + "/secret.txt");
  EXPECT_FALSE(file.ok());
}

TEST(Timeouts, ReapShutsDownExpiredConnectionsOnly) {
  int a[2], b[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
  web::ConnTable table(4096);
  table.arm(a[0], 1000);
  table.arm(b[0], 5000);
  EXPECT_EQ(table.reap(999), 0u);
  EXPECT_EQ(table.reap(2000), 1u);
  char c;
  EXPECT_EQ(read(a[0], &c, 1), 0);  // shut down: EOF at once
  EXPECT_EQ(table.reap(3000), 0u);  // reaped once only
  table.release(b[0]);
  EXPECT_EQ(table.reap(10000), 0u);  // released: never touched
  ASSERT_EQ(write(b[1], "x", 1), 1);
  EXPECT_EQ(read(b[0], &c, 1), 1);
  table.arm(100000, 1);  // beyond the table: ignored
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
}

// Every file of the regression corpus (inputs the fuzzer found, and
// hand-made nasty ones) parses to an answer without crashing, both whole and
// a byte at a time, with the same outcome.
TEST(Corpus, RegressionInputs) {
  DIR* d = opendir(LOOM_WEB_CORPUS);
  ASSERT_NE(d, nullptr) << LOOM_WEB_CORPUS;
  int files = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(std::string(LOOM_WEB_CORPUS) + "/" + e->d_name, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Parsed whole = parse_all(s);
    Parsed bytes = parse_pieces(s, {1});
    EXPECT_EQ(whole.status, bytes.status) << e->d_name;
    EXPECT_EQ(whole.error, bytes.error) << e->d_name;
    EXPECT_EQ(whole.head, bytes.head) << e->d_name;
    ++files;
  }
  closedir(d);
  EXPECT_GT(files, 0);
}
