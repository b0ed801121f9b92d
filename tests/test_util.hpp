// tests/test_util.hpp — helpers shared by loom's tests.
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>

namespace loom::test {

// Sanitizer runs set LOOM_TEST_SCALE=10 to divide iteration counts.
inline long scaled(long n) {
  const char* s = std::getenv("LOOM_TEST_SCALE");
  long k = s ? std::atol(s) : 1;
  return k > 1 ? n / k : n;
}

constexpr bool sanitized() {
#if defined(LOOM_ASAN) || defined(LOOM_TSAN)
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

}  // namespace loom::test
