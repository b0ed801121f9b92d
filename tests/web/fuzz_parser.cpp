// fuzz_parser.cpp — libFuzzer target for the web server's request parser
// (`make fuzz`: clang, -fsanitize=fuzzer,address,undefined, in build-fuzz/).
//
// For every input it checks what the connection code relies on:
// - parsing the bytes whole and in pieces (split where the input's first
//   byte says) gives the same status, error and head length;
// - a done head lies inside the bytes given, and every view of the request
//   points inside the head;
// - an error is one of the statuses the server knows how to send;
// - requests are consumed one after another as a pipelined connection
//   would, until the input is used up or an error stops it;
// - percent-decoding a request's path never writes past its buffer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "http_parser.hpp"

using web::RequestParser;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void check_view(std::string_view v, const char* base, std::size_t head) {
  if (v.empty()) return;
  // "/" for an absolute-form target without a path is a literal.
  if (v.data() < base || v.data() + v.size() > base + head) check(v == "/");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const char* buf = reinterpret_cast<const char*>(data);
  std::size_t step = size ? 1 + data[0] % 64 : 1;
  std::size_t off = 0;
  while (off <= size) {
    const char* req = buf + off;
    std::size_t len = size - off;
    RequestParser whole;
    auto st = whole.parse(req, len);
    RequestParser pieces;
    auto st2 = RequestParser::Status::incomplete;
    for (std::size_t have = 0; st2 == RequestParser::Status::incomplete && have < len;) {
      have = have + step < len ? have + step : len;
      st2 = pieces.parse(req, have);
    }
    if (len == 0) st2 = pieces.parse(req, 0);
    check(st == st2);
    check(whole.error_status() == pieces.error_status());
    if (st == RequestParser::Status::error) {
      int e = whole.error_status();
      check(e == 400 || e == 414 || e == 431 || e == 501 || e == 505);
      break;
    }
    if (st == RequestParser::Status::incomplete) {
      check(len < web::kMaxHead);
      break;
    }
    std::size_t head = whole.head_length();
    check(head == pieces.head_length());
    check(head > 0 && head <= len && head <= web::kMaxHead);
    web::Request r = whole.request(req);
    for (std::string_view v : {r.method_name, r.target, r.path, r.query, r.host}) check_view(v, req, head);
    check(r.minor <= 1);
    std::vector<char> out(r.path.size() + 1);
    long n = web::percent_decode(r.path, out.data(), out.size());
    check(n <= static_cast<long>(r.path.size()));
    off += head;
  }
  return 0;
}
