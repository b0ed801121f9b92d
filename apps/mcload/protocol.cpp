// apps/mcload/protocol.cpp — see protocol.hpp.
#include "protocol.hpp"

#include <cstdio>
#include <cstring>

#include "dist.hpp"

namespace mcload {
namespace {

// A value's bytes: the same filler for every set (memcached does not look).
const char* filler() {
  static std::string f(kMaxValue, 'v');
  return f.data();
}

bool starts(const char* p, size_t n, const char* word) {
  size_t w = std::strlen(word);
  return n >= w && std::memcmp(p, word, w) == 0 && (n == w || p[w] == ' ');
}

bool is_error_line(const char* p, size_t n) {
  return starts(p, n, "ERROR") || starts(p, n, "CLIENT_ERROR") || starts(p, n, "SERVER_ERROR");
}

// Reads a decimal at p (advancing it), false if there is none.
bool read_uint(const char*& p, const char* end, uint64_t& v) {
  const char* s = p;
  v = 0;
  while (p < end && *p >= '0' && *p <= '9') {
    if (v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + uint64_t(*p++ - '0');
  }
  return p != s;
}

constexpr size_t kMaxLine = 2048;

// The line at buf[pos..): its length without CRLF, or -1 when incomplete
// (and -2 when it is too long to be memcached's).
long line_at(const char* buf, size_t len, size_t pos) {
  const void* nl = std::memchr(buf + pos, '\n', len - pos);
  if (!nl) return len - pos > kMaxLine ? -2 : -1;
  size_t e = static_cast<const char*>(nl) - buf;
  if (e == pos || buf[e - 1] != '\r') return -2;
  return long(e - 1 - pos);
}

Parse broken(ReplyState& st, const char* what, const char* p, size_t n) {
  st.error = std::string(what) + ": '" + std::string(p, n < 80 ? n : 80) + "'";
  return Parse::broken;
}

// Data block of `bytes` after a header line ending at `data`; checks CRLF.
// Returns 0 when complete and well-formed, 1 when more is needed, -1 when broken.
int data_block(const char* buf, size_t len, size_t data, uint64_t bytes) {
  if (len - data < bytes + 2) return 1;
  return buf[data + bytes] == '\r' && buf[data + bytes + 1] == '\n' ? 0 : -1;
}

}  // namespace

void append_key(std::string& out, uint64_t index, const Options& o) {
  char digits[24];
  int nd = std::snprintf(digits, sizeof digits, "%llu", (unsigned long long)index);
  unsigned size = o.etc ? etc_key_size(index) : o.key_size;
  out += "mcl:";
  for (unsigned i = 4 + unsigned(nd); i < size; ++i) out += '0';
  out.append(digits, nd);
}

void append_get(std::string& out, const uint64_t* keys, unsigned n, const Options& o) {
  if (o.protocol == Protocol::text) {
    out += "get";
    for (unsigned i = 0; i < n; ++i) {
      out += ' ';
      append_key(out, keys[i], o);
    }
    out += "\r\n";
    return;
  }
  for (unsigned i = 0; i < n; ++i) {
    out += "mg ";
    append_key(out, keys[i], o);
    out += " v\r\n";
  }
  if (n > 1) out += "mn\r\n";
}

void append_set(std::string& out, uint64_t key, unsigned value_size, const Options& o) {
  char tail[40];
  out += o.protocol == Protocol::text ? "set " : "ms ";
  append_key(out, key, o);
  std::snprintf(tail, sizeof tail, o.protocol == Protocol::text ? " 0 0 %u\r\n" : " %u\r\n", value_size);
  out += tail;
  out.append(filler(), value_size);
  out += "\r\n";
}

Parse parse_get(const char* buf, size_t len, size_t& consumed, const uint64_t* keys, unsigned n, ReplyState& st,
                const Options& o) {
  std::string want;
  for (;;) {
    long ll = line_at(buf, len, consumed);
    if (ll == -1) return Parse::more;
    if (ll == -2) return broken(st, "reply line without CRLF or too long", buf + consumed, len - consumed);
    const char* p = buf + consumed;
    const char* end = p + ll;
    size_t after = consumed + size_t(ll) + 2;
    if (o.protocol == Protocol::text) {
      if (ll == 3 && std::memcmp(p, "END", 3) == 0) {
        consumed = after;
        return Parse::done;
      }
      if (is_error_line(p, size_t(ll))) {
        st.error.assign(p, size_t(ll));
        consumed = after;
        return Parse::done;
      }
      if (!starts(p, size_t(ll), "VALUE")) return broken(st, "unexpected line in a get's reply", p, size_t(ll));
      const char* q = p + 6;
      const char* ks = q;
      while (q < end && *q != ' ') ++q;
      std::string key(ks, q - ks);
      uint64_t flags, bytes;
      if (q >= end || !read_uint(++q, end, flags) || q >= end || *q != ' ' || !read_uint(++q, end, bytes) || q != end)
        return broken(st, "malformed VALUE line", p, size_t(ll));
      int d = data_block(buf, len, after, bytes);
      if (d == 1) return Parse::more;
      if (d < 0) return broken(st, "value data not followed by CRLF", p, size_t(ll));
      bool found = false;
      while (st.next_key < n && !found) {
        want.clear();
        append_key(want, keys[st.next_key++], o);
        found = want == key;
      }
      if (!found) return broken(st, "VALUE for a key not asked for (or out of order)", p, size_t(ll));
      if (!o.etc && bytes != o.value_size) {
        st.error =
            "value of " + key + " has " + std::to_string(bytes) + " bytes, stored " + std::to_string(o.value_size);
      }
      ++st.hits;
      consumed = after + bytes + 2;
      continue;
    }
    // Meta.
    if (st.replies == n) {
      if (ll == 2 && std::memcmp(p, "MN", 2) == 0) {
        consumed = after;
        return Parse::done;
      }
      return broken(st, "expected MN after the gets' replies", p, size_t(ll));
    }
    if (ll == 2 && std::memcmp(p, "EN", 2) == 0) {
      consumed = after;
    } else if (starts(p, size_t(ll), "VA")) {
      const char* q = p + 3;
      uint64_t bytes;
      if (!read_uint(q, end, bytes) || (q != end && *q != ' ')) return broken(st, "malformed VA line", p, size_t(ll));
      int d = data_block(buf, len, after, bytes);
      if (d == 1) return Parse::more;
      if (d < 0) return broken(st, "value data not followed by CRLF", p, size_t(ll));
      if (!o.etc && bytes != o.value_size)
        st.error = "a value has " + std::to_string(bytes) + " bytes, stored " + std::to_string(o.value_size);
      ++st.hits;
      consumed = after + bytes + 2;
    } else if (is_error_line(p, size_t(ll))) {
      st.error.assign(p, size_t(ll));
      consumed = after;
    } else {
      return broken(st, "unexpected line in an mg's reply", p, size_t(ll));
    }
    if (++st.replies == n && n == 1) return Parse::done;
  }
}

Parse parse_set(const char* buf, size_t len, size_t& consumed, ReplyState& st, const Options& o) {
  long ll = line_at(buf, len, consumed);
  if (ll == -1) return Parse::more;
  if (ll == -2) return broken(st, "reply line without CRLF or too long", buf + consumed, len - consumed);
  const char* p = buf + consumed;
  size_t n = size_t(ll);
  consumed += n + 2;
  const char* ok = o.protocol == Protocol::text ? "STORED" : "HD";
  if (n == std::strlen(ok) && std::memcmp(p, ok, n) == 0) return Parse::done;
  if (is_error_line(p, n) ||
      (o.protocol == Protocol::text &&
       (starts(p, n, "NOT_STORED") || starts(p, n, "EXISTS") || starts(p, n, "NOT_FOUND"))) ||
      (o.protocol == Protocol::meta && (starts(p, n, "NS") || starts(p, n, "EX") || starts(p, n, "NF")))) {
    st.error = "set: " + std::string(p, n);
    return Parse::done;
  }
  consumed -= n + 2;
  return broken(st, "unexpected reply to a set", p, n);
}

}  // namespace mcload
