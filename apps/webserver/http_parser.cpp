// http_parser.cpp — see http_parser.hpp for the contract.
#include "http_parser.hpp"

#include <cstring>

namespace web {

namespace {

// Character classes, one table lookup per byte (RFC 9110 §5.6.2 tchar,
// §5.5 field-vchar; request-target bytes are visible ASCII).
enum : std::uint8_t { kToken = 1, kTarget = 2, kValue = 4 };

struct Classes {
  std::uint8_t c[256];
  constexpr Classes() : c() {
    for (int i = 0x21; i <= 0x7e; ++i) c[i] |= kTarget | kValue;
    c[' '] |= kValue;
    c['\t'] |= kValue;
    for (int i = 0x80; i <= 0xff; ++i) c[i] |= kValue;  // obs-text
    for (int i = '0'; i <= '9'; ++i) c[i] |= kToken;
    for (int i = 'a'; i <= 'z'; ++i) c[i] |= kToken;
    for (int i = 'A'; i <= 'Z'; ++i) c[i] |= kToken;
    for (const char* p = "!#$%&'*+-.^_`|~"; *p; ++p) c[static_cast<unsigned char>(*p)] |= kToken;
  }
};
constexpr Classes kClasses;

inline bool is(char ch, std::uint8_t cls) { return kClasses.c[static_cast<unsigned char>(ch)] & cls; }

// a (any case, validated token bytes) equals the lower-case literal b.
bool iequals(const char* a, std::size_t n, std::string_view b) {
  if (n != b.size()) return false;
  for (std::size_t i = 0; i < n; ++i)
    if ((a[i] | 0x20) != b[i]) return false;
  return true;
}

Method classify(const char* m, std::size_t n) {
  switch (n) {
    case 3:
      if (!std::memcmp(m, "GET", 3)) return Method::get;
      if (!std::memcmp(m, "PUT", 3)) return Method::put;
      break;
    case 4:
      if (!std::memcmp(m, "HEAD", 4)) return Method::head;
      if (!std::memcmp(m, "POST", 4)) return Method::post;
      break;
    case 5:
      if (!std::memcmp(m, "PATCH", 5)) return Method::patch;
      if (!std::memcmp(m, "TRACE", 5)) return Method::trace;
      break;
    case 6:
      if (!std::memcmp(m, "DELETE", 6)) return Method::delete_;
      break;
    case 7:
      if (!std::memcmp(m, "OPTIONS", 7)) return Method::options;
      if (!std::memcmp(m, "CONNECT", 7)) return Method::connect;
      break;
  }
  return Method::unknown;
}

inline bool ows(char c) { return c == ' ' || c == '\t'; }

}  // namespace

const char* method_name(Method m) {
  switch (m) {
    case Method::get:
      return "GET";
    case Method::head:
      return "HEAD";
    case Method::post:
      return "POST";
    case Method::put:
      return "PUT";
    case Method::delete_:
      return "DELETE";
    case Method::options:
      return "OPTIONS";
    case Method::trace:
      return "TRACE";
    case Method::connect:
      return "CONNECT";
    case Method::patch:
      return "PATCH";
    case Method::unknown:
      break;
  }
  return "?";
}

RequestParser::Status RequestParser::parse(const char* buf, std::size_t len) {
  if (state_ == State::done) return Status::done;
  if (state_ == State::error) return Status::error;
  // A head that is not over within the first kMaxHead bytes is too long:
  // nothing past them is looked at.
  std::size_t limit = len < kMaxHead ? len : kMaxHead;
  while (pos_ < limit) {
    const void* nl = std::memchr(buf + pos_, '\n', limit - pos_);
    if (!nl) {
      // A partial line: refuse bytes no line may hold now rather than at
      // its end (a peer sending NULs or binary gets its 400 at once, and
      // whether the bytes came in one read or many makes no difference).
      std::uint8_t ok = state_ == State::request_line ? kTarget : kValue;
      for (std::size_t i = pos_; i < limit; ++i)
        if (!is(buf[i], ok) && buf[i] != ' ' && buf[i] != '\r') return fail(400);
      pos_ = static_cast<std::uint32_t>(limit);
      break;
    }
    std::size_t end = static_cast<const char*>(nl) - buf;  // the LF
    std::size_t line_end = end;
    if (line_end > line_start_ && buf[line_end - 1] == '\r') --line_end;
    Status s = state_ == State::request_line ? on_request_line(buf, line_start_, line_end)
                                             : on_header(buf, line_start_, line_end);
    pos_ = line_start_ = static_cast<std::uint32_t>(end + 1);
    if (s != Status::incomplete) {
      if (s == Status::done) head_len_ = pos_;
      return s;
    }
  }
  if (len >= kMaxHead) return fail(state_ == State::request_line ? 414 : 431);
  return Status::incomplete;
}

RequestParser::Status RequestParser::on_request_line(const char* buf, std::size_t b, std::size_t e) {
  if (b == e) {  // an empty line before the request line (RFC 9112 §2.2)
    if (++empty_lines_ > kMaxLeadingEmptyLines) return fail(400);
    return Status::incomplete;
  }
  const char* p = buf + b;
  const char* end = buf + e;
  // method SP
  const char* m = p;
  while (p < end && is(*p, kToken)) ++p;
  if (p == m || p == end || *p != ' ') return fail(400);
  method_off_ = static_cast<std::uint16_t>(m - buf);
  method_len_ = static_cast<std::uint16_t>(p - m);
  ++p;
  // request-target SP
  const char* t = p;
  while (p < end && is(*p, kTarget)) ++p;
  if (p == t || p == end || *p != ' ') return fail(400);
  target_off_ = static_cast<std::uint16_t>(t - buf);
  target_len_ = static_cast<std::uint16_t>(p - t);
  ++p;
  // HTTP-version, then the end of the line
  if (end - p != 8 || std::memcmp(p, "HTTP/", 5) != 0 || p[6] != '.') return fail(400);
  char major = p[5], minor = p[7];
  if (major < '0' || major > '9' || minor < '0' || minor > '9') return fail(400);
  if (major != '1') return fail(505);
  minor_ = minor == '0' ? 0 : 1;

  method_ = classify(m, method_len_);
  if (method_ == Method::unknown) return fail(501);
  // Request-target forms (RFC 9112 §3.2): origin, absolute (http[s]://),
  // asterisk for OPTIONS; CONNECT's authority form is answered 405 anyway.
  if (method_ != Method::connect && *t != '/') {
    bool asterisk = target_len_ == 1 && *t == '*' && method_ == Method::options;
    bool absolute = (target_len_ > 7 && iequals(t, 7, "http://")) || (target_len_ > 8 && iequals(t, 8, "https://"));
    if (!asterisk && !absolute) return fail(400);
  }
  state_ = State::headers;
  return Status::incomplete;
}

RequestParser::Status RequestParser::on_header(const char* buf, std::size_t b, std::size_t e) {
  if (b == e) {  // the empty line: end of the head
    if (minor_ == 1 && !has_host_) return fail(400);
    if (has_te_ && (has_cl_ || minor_ == 0)) return fail(400);
    state_ = State::done;
    return Status::done;
  }
  const char* p = buf + b;
  const char* end = buf + e;
  if (ows(*p)) return fail(400);  // obsolete line folding
  const char* name = p;
  while (p < end && is(*p, kToken)) ++p;
  if (p == name || p == end || *p != ':') return fail(400);  // no colon, or space before it
  std::size_t name_len = p - name;
  ++p;
  while (p < end && ows(*p)) ++p;
  const char* v = p;
  for (; p < end; ++p)
    if (!is(*p, kValue)) return fail(400);
  const char* ve = end;
  while (ve > v && ows(ve[-1])) --ve;

  switch (name_len) {
    case 4:
      if (iequals(name, 4, "host")) {
        if (has_host_) return fail(400);
        has_host_ = true;
        host_off_ = static_cast<std::uint16_t>(v - buf);
        host_len_ = static_cast<std::uint16_t>(ve - v);
      }
      break;
    case 10:
      if (iequals(name, 10, "connection")) {
        // #token: comma-separated, optional whitespace, case-insensitive.
        const char* q = v;
        while (q < ve) {
          while (q < ve && (ows(*q) || *q == ',')) ++q;
          const char* tok = q;
          while (q < ve && *q != ',' && !ows(*q)) ++q;
          if (iequals(tok, q - tok, "close"))
            conn_close_ = true;
          else if (iequals(tok, q - tok, "keep-alive"))
            conn_keep_alive_ = true;
        }
      }
      break;
    case 14:
      if (iequals(name, 14, "content-length")) {
        if (v == ve || ve - v > 15) return fail(400);
        std::uint64_t n = 0;
        for (const char* q = v; q < ve; ++q) {
          if (*q < '0' || *q > '9') return fail(400);
          n = n * 10 + (*q - '0');
        }
        if (has_cl_ && n != content_length_) return fail(400);
        has_cl_ = true;
        content_length_ = n;
      }
      break;
    case 17:
      if (iequals(name, 17, "transfer-encoding")) has_te_ = true;
      break;
  }
  return Status::incomplete;
}

Request RequestParser::request(const char* buf) const {
  Request r;
  r.method = method_;
  r.method_name = std::string_view(buf + method_off_, method_len_);
  r.target = std::string_view(buf + target_off_, target_len_);
  std::string_view path = r.target;
  if (!path.empty() && path[0] != '/' && path != "*") {  // absolute form: drop scheme://authority
    std::size_t s = path.find("://");
    std::size_t slash = s == std::string_view::npos ? std::string_view::npos : path.find('/', s + 3);
    std::size_t q = path.find('?', s == std::string_view::npos ? 0 : s + 3);
    if (slash == std::string_view::npos || (q != std::string_view::npos && q < slash))
      path = q == std::string_view::npos ? std::string_view("/") : path.substr(q);
    else
      path = path.substr(slash);
    if (!path.empty() && path[0] == '?') {  // "http://h?x": path "/" and the query
      r.query = path.substr(1);
      path = "/";
    }
  }
  std::size_t q = path.find('?');
  if (q != std::string_view::npos) {
    r.query = path.substr(q + 1);
    path = path.substr(0, q);
  }
  r.path = path;
  r.host = std::string_view(buf + host_off_, host_len_);
  r.minor = minor_;
  r.keep_alive = minor_ == 1 ? !conn_close_ : (conn_keep_alive_ && !conn_close_);
  r.has_content_length = has_cl_;
  r.has_transfer_encoding = has_te_;
  r.content_length = content_length_;
  return r;
}

long percent_decode(std::string_view in, char* out, std::size_t cap) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::size_t n = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return -1;
      int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
      if (hi < 0 || lo < 0) return -1;
      c = static_cast<char>(hi * 16 + lo);
      if (c == '\0') return -1;
      i += 2;
    }
    if (n == cap) return -1;
    out[n++] = c;
  }
  return static_cast<long>(n);
}

}  // namespace web
