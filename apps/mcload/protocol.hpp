// apps/mcload/protocol.hpp — the bytes mcload sends and the replies it
// accepts. Every reply is checked: a get's VALUE lines must name the keys
// asked for, in order, with their data followed by CRLF; a fixed-size run
// also checks each value's length. Anything else is an error, never skipped.
//
// Text protocol: "get k1 .. kM" -> VALUE k f n / data ... END;
//                "set k 0 0 n" + data -> STORED.
// Meta protocol: "mg k v" per key -> "VA n" + data, or "EN"; with M > 1
//                keys the gets are followed by "mn", answered by "MN";
//                "ms k n" + data -> "HD".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "options.hpp"

namespace mcload {

// Key number `index` as memcached sees it: "mcl:" and the index, zero-padded
// to the key size (--key-size, or the ETC key size of that index when that
// is longer than the index needs).
void append_key(std::string& out, uint64_t index, const Options& o);

void append_get(std::string& out, const uint64_t* keys, unsigned n, const Options& o);
void append_set(std::string& out, uint64_t key, unsigned value_size, const Options& o);

// One reply being read; reset between requests.
struct ReplyState {
  unsigned next_key = 0;  // text: index into the asked keys of the next possible VALUE
  unsigned replies = 0;   // meta gets: mg replies seen
  unsigned hits = 0;
  std::string error;  // a well-formed error reply (ERROR, SERVER_ERROR ...): counted
};

enum class Parse {
  more,    // the reply is not complete in the buffer yet
  done,    // complete: `consumed` bytes are the reply (state.error if it was an error reply)
  broken,  // not a reply we can make sense of; the stream is out of step (message in state.error)
};

// Parses the reply to a get of keys[0..n) or to a set, from buf[0..len).
// `consumed` is advanced over each complete part, so a partial reply is
// resumed where it stopped.
Parse parse_get(const char* buf, size_t len, size_t& consumed, const uint64_t* keys, unsigned n, ReplyState& st,
                const Options& o);
Parse parse_set(const char* buf, size_t len, size_t& consumed, ReplyState& st, const Options& o);

}  // namespace mcload
