// tests/test_util.hpp — helpers shared by loom's tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include "loom/cluster.hpp"
#include <string>

namespace loom::test {

// A shell command's exit status (-1 if it did not exit) and its standard
// output and error together: for process-level tests of a child program.
struct Result {
  int status = -1;
  std::string out;
};

inline Result run(const std::string& cmd) {
  Result r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 512> buf;
  while (std::fgets(buf.data(), int(buf.size()), p)) r.out += buf.data();
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Sanitizer runs set LOOM_TEST_SCALE=10 to divide iteration counts.
inline long scaled(long n) {
  const char* s = std::getenv("LOOM_TEST_SCALE");
  long k = s ? std::atol(s) : 1;
  return k > 1 ? n / k : n;
}

constexpr bool sanitized() {
#if defined(LOOM_ASAN) || defined(LOOM_TSAN) || defined(LOOM_CHAOS)  // (chaos: slow, like them)
  return true;
#else
  return false;
#endif
}

// Resident set size of this process in KiB.
inline long rss_kib() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * 4;
}

// Number of memory mappings of this process.
inline long mappings() {
  std::ifstream f("/proc/self/maps");
  long n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

// The fibre listing (loom::dump_fibres) as text.
inline std::string listing() {
  char* buf = nullptr;
  std::size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  loom::dump_fibres(f);
  std::fclose(f);
  std::string s(buf, len);
  std::free(buf);
  return s;
}

// How many times `what` occurs in s (overlaps counted).
inline std::size_t count_of(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace loom::test
