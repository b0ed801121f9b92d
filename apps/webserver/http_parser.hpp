// http_parser.hpp — an incremental HTTP/1.x request-head parser.
//
//   web::RequestParser p;
//   switch (p.parse(buf, len)) {        // buf = the request's first byte
//     case Status::incomplete: read more, call again with the longer buffer
//     case Status::done: use p.request(buf); consume p.head_length() bytes
//     case Status::error: answer p.error_status() and close
//   }
//   p.reset();                           // before the next request
//
// Contract:
// - Incremental: each call resumes where the previous one stopped scanning
//   (no byte is looked at twice), so a head that arrives one byte at a time
//   costs O(length) in all. Between calls the caller may move the bytes (the
//   parser keeps offsets from the request's first byte, never pointers), but
//   must not change the ones it already passed.
// - It parses only the head (request line and header fields, RFC 9112). What
//   follows it — a body framed by Content-Length, the next pipelined request —
//   is the caller's.
// - Strict where leniency is a known smuggling or confusion risk: bare CR,
//   NUL and other control bytes, whitespace between a field name and its
//   colon, obsolete line folding, conflicting Content-Length values, both
//   Content-Length and Transfer-Encoding, and a missing or repeated Host in
//   HTTP/1.1 are all 400. Bare LF line ends are accepted (RFC 9112 §2.2), and
//   so are up to kMaxLeadingEmptyLines empty lines before the request line.
// - Limits: a request line longer than kMaxHead gives 414, a head longer
//   than kMaxHead gives 431, detected as soon as that many bytes are seen
//   without the end of the line / head (so a peer cannot make the caller
//   buffer more than kMaxHead + one read).
// - Methods: GET and HEAD are served; the other RFC 9110 methods give 405
//   (the caller adds Allow); any other token 501. HTTP/1.x other than 1.0 and
//   1.1 is treated as 1.1; another major version gives 505.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace web {

inline constexpr std::size_t kMaxHead = 8192;
inline constexpr unsigned kMaxLeadingEmptyLines = 4;

enum class Method : std::uint8_t { get, head, post, put, delete_, options, trace, connect, patch, unknown };

// The parsed head; the views point into the buffer given to request().
struct Request {
  Method method = Method::unknown;
  std::string_view method_name;
  std::string_view target;  // the request-target as sent
  std::string_view path;    // target's path (origin form; absolute form reduced to it), still %-encoded
  std::string_view query;   // after '?', without it; empty if none
  std::string_view host;    // the Host field's value (empty if none)
  unsigned minor = 1;       // HTTP/1.minor: 0 or 1
  bool keep_alive = true;   // persistent connection, from the version and Connection
  bool has_content_length = false;
  bool has_transfer_encoding = false;
  std::uint64_t content_length = 0;
};

class RequestParser {
 public:
  enum class Status : std::uint8_t { incomplete, done, error };

  // Parses as much of buf[0, len) as it can. buf must start at the request's
  // first byte and hold every byte given to earlier calls since reset().
  Status parse(const char* buf, std::size_t len);

  // After done: the head's length in bytes (through its final empty line).
  std::size_t head_length() const { return head_len_; }
  // After done: the request, its views into `buf` (the same bytes as parsed).
  Request request(const char* buf) const;
  // After error: 400, 414, 431, 501 or 505 (405 is not an error here: the
  // parse is done and request().method says which method it was).
  int error_status() const { return error_; }
  // Bytes of the current request seen so far (for diagnostics and tests).
  std::size_t scanned() const { return pos_; }

  void reset() { *this = RequestParser(); }

 private:
  enum class State : std::uint8_t { request_line, headers, done, error };
  Status fail(int status) {
    state_ = State::error;
    error_ = status;
    return Status::error;
  }
  Status on_request_line(const char* buf, std::size_t begin, std::size_t end);
  Status on_header(const char* buf, std::size_t begin, std::size_t end);

  // Offsets from the request's first byte.
  std::uint32_t pos_ = 0;         // next byte to scan
  std::uint32_t line_start_ = 0;  // first byte of the current line
  std::uint32_t head_len_ = 0;
  std::uint16_t method_off_ = 0, method_len_ = 0;
  std::uint16_t target_off_ = 0, target_len_ = 0;
  std::uint16_t host_off_ = 0, host_len_ = 0;
  std::uint64_t content_length_ = 0;
  std::uint16_t error_ = 0;
  State state_ = State::request_line;
  Method method_ = Method::unknown;
  std::uint8_t minor_ = 1;
  std::uint8_t empty_lines_ = 0;
  bool has_host_ = false;
  bool conn_close_ = false;
  bool conn_keep_alive_ = false;
  bool has_cl_ = false;
  bool has_te_ = false;
};

// Decodes %XX escapes of a path into out (capacity cap). Returns the decoded
// length, or -1 if an escape is malformed, decodes to NUL, or out is too
// small. '+' is left alone (it is not a space in a path).
long percent_decode(std::string_view in, char* out, std::size_t cap);

const char* method_name(Method m);

}  // namespace web
