// http_response.cpp — see http_response.hpp.
#include "http_response.hpp"

#include <cstring>

namespace web {

namespace {

inline char* put(char* p, std::string_view s) {
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

inline char* put_uint(char* p, std::uint64_t v) {
  char tmp[20];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) *p++ = tmp[--n];
  return p;
}

inline char* put2(char* p, int v) {
  *p++ = static_cast<char>('0' + v / 10);
  *p++ = static_cast<char>('0' + v % 10);
  return p;
}

}  // namespace

void format_http_date(std::time_t t, char* out) {
  static const char* const kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::tm tm;
  gmtime_r(&t, &tm);
  char* p = out;
  p = put(p, kDays[tm.tm_wday]);
  p = put(p, ", ");
  p = put2(p, tm.tm_mday);
  *p++ = ' ';
  p = put(p, kMonths[tm.tm_mon]);
  *p++ = ' ';
  int y = tm.tm_year + 1900;
  p = put2(p, y / 100 % 100);
  p = put2(p, y % 100);
  *p++ = ' ';
  p = put2(p, tm.tm_hour);
  *p++ = ':';
  p = put2(p, tm.tm_min);
  *p++ = ':';
  p = put2(p, tm.tm_sec);
  put(p, " GMT");
}

void DateCache::refresh(std::time_t now) {
  if (now == last_) return;
  last_ = now;
  char buf[kWords * 8] = {};
  format_http_date(now, buf);
  std::uint64_t w[kWords];
  std::memcpy(w, buf, sizeof w);
  // Seqlock writer: odd while writing. Each word's release store orders
  // the odd count before it (a reader that sees a new word sees the count
  // moved on); the final release store orders the words before the even
  // count. No fences: TSan understands these, and on x86 they are plain
  // stores anyway.
  std::uint32_t s = seq_.load(std::memory_order_relaxed);
  seq_.store(s + 1, std::memory_order_relaxed);
  for (int i = 0; i < kWords; ++i) words_[i].store(w[i], std::memory_order_release);
  seq_.store(s + 2, std::memory_order_release);
}

void DateCache::copy(char* out) const {
  std::uint64_t w[kWords];
  for (;;) {
    std::uint32_t s1 = seq_.load(std::memory_order_acquire);
    // Acquire loads: the count is read again only after the words.
    for (int i = 0; i < kWords; ++i) w[i] = words_[i].load(std::memory_order_acquire);
    if (!(s1 & 1) && seq_.load(std::memory_order_relaxed) == s1) break;
  }
  std::memcpy(out, w, kLen);
}

DateCache& date_cache() {
  static DateCache cache;
  return cache;
}

const char* status_text(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
  }
  return "Unknown";
}

std::size_t format_head(char* out, std::string_view server, int status, std::string_view content_type,
                        std::uint64_t content_length, ConnHeader conn, std::string_view extra) {
  char* p = out;
  p = put(p, "HTTP/1.1 ");
  p = put_uint(p, static_cast<unsigned>(status));
  *p++ = ' ';
  p = put(p, status_text(status));
  p = put(p, "\r\nServer: ");
  p = put(p, server.substr(0, 32));
  p = put(p, "\r\nDate: ");
  date_cache().copy(p);
  p += DateCache::kLen;
  p = put(p, "\r\nContent-Type: ");
  p = put(p, content_type.substr(0, 64));
  p = put(p, "\r\nContent-Length: ");
  p = put_uint(p, content_length);
  p = put(p, "\r\n");
  if (conn == ConnHeader::close)
    p = put(p, "Connection: close\r\n");
  else if (conn == ConnHeader::keep_alive)
    p = put(p, "Connection: keep-alive\r\n");
  p = put(p, extra.substr(0, 128));
  p = put(p, "\r\n");
  return static_cast<std::size_t>(p - out);
}

std::size_t format_hello(char* out, std::string_view server, ConnHeader conn, bool head_only) {
  std::size_t n = format_head(out, server, 200, "text/plain", kHelloBody.size(), conn);
  if (!head_only) {
    std::memcpy(out + n, kHelloBody.data(), kHelloBody.size());
    n += kHelloBody.size();
  }
  return n;
}

std::size_t format_error(char* out, std::string_view server, int status, ConnHeader conn, bool head_only,
                         std::string_view extra) {
  std::string_view text = status_text(status);
  std::size_t n = format_head(out, server, status, "text/plain", text.size() + 1, conn, extra);
  if (!head_only) {
    std::memcpy(out + n, text.data(), text.size());
    n += text.size();
    out[n++] = '\n';
  }
  return n;
}

}  // namespace web
