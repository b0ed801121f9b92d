// http_response.hpp — response heads, the cached Date, status texts.
//
// Shared by the web server (both runtimes) and the epoll baseline, so that
// every server we wrote sends the same bytes:
//
//   HTTP/1.1 200 OK\r\n
//   Server: loom\r\n
//   Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n
//   Content-Type: text/plain\r\n
//   Content-Length: 13\r\n
//   \r\n
//   Hello, World!
//
// plus `Connection: close` when the server will close, and
// `Connection: keep-alive` for a persistent HTTP/1.0 connection.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string_view>

namespace web {

inline constexpr std::string_view kHelloBody = "Hello, World!";
// Room a response head needs at most (format_head's `out`), extra headers
// included.
inline constexpr std::size_t kMaxResponseHead = 512;

// The IMF-fixdate of the current second, written by one thread (a ticker)
// and read by every connection; a seqlock, so a reader never sees half of
// two dates and never waits for the writer.
class DateCache {
 public:
  static constexpr std::size_t kLen = 29;  // "Sun, 06 Nov 1994 08:49:37 GMT"
  DateCache() { refresh(std::time(nullptr)); }
  // Writer side (one thread at a time): formats `now` if the second changed.
  void refresh(std::time_t now);
  // Copies the kLen bytes of the current date to out.
  void copy(char* out) const;

 private:
  static constexpr int kWords = 4;  // 32 bytes hold the 29
  std::atomic<std::uint32_t> seq_{0};
  std::atomic<std::uint64_t> words_[kWords] = {};
  std::time_t last_ = -1;
};

// The process's date, refreshed by whoever runs the ticker.
DateCache& date_cache();

// Formats an IMF-fixdate (kLen bytes, no NUL) of `t` into out.
void format_http_date(std::time_t t, char* out);

const char* status_text(int status);

enum class ConnHeader : std::uint8_t { none, close, keep_alive };
// Which Connection header a response needs: `closing` = the server closes
// after it; minor = the request's HTTP/1.minor.
inline ConnHeader conn_header(bool closing, unsigned minor) {
  return closing ? ConnHeader::close : (minor == 0 ? ConnHeader::keep_alive : ConnHeader::none);
}

// Writes a response head (through the empty line) to out, which has at
// least kMaxResponseHead bytes; returns its length. `server` is the Server
// field's value, `extra` more header lines, each ending in CRLF (may be
// empty; at most 128 bytes).
std::size_t format_head(char* out, std::string_view server, int status, std::string_view content_type,
                        std::uint64_t content_length, ConnHeader conn, std::string_view extra = {});

// The whole plaintext answer (head and, unless head_only, body).
std::size_t format_hello(char* out, std::string_view server, ConnHeader conn, bool head_only);

// A short text/plain error answer: the status text and a newline as body.
std::size_t format_error(char* out, std::string_view server, int status, ConnHeader conn, bool head_only = false,
                         std::string_view extra = {});

}  // namespace web
