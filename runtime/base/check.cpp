#include "base/check.hpp"
#include "base/chaos.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace loom::rt {

void check_failed(const char* file, int line, const char* cond, const char* fmt, ...) noexcept {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "loom: invariant broken: %s (%s, at %s:%d)\n", msg, cond, file, line);
#if defined(LOOM_CHAOS)
  std::fprintf(stderr, "loom: chaos seed %llu (replay: LOOM_CHAOS=%llu)\n", chaos::seed(), chaos::seed());
#endif
  std::abort();
}

#if defined(LOOM_CHECKS)
void check::fail(const char* fmt, ...) noexcept {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
#if defined(LOOM_CHAOS)
  std::fprintf(stderr, "loom: invariant broken: %s (chaos seed %llu)\n", buf, chaos::seed());
#else
  std::fprintf(stderr, "loom: invariant broken: %s\n", buf);
#endif
  std::fflush(stderr);
  std::abort();
}
#endif

}  // namespace loom::rt
