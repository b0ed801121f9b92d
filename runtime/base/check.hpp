// base/check.hpp — invariant checks of the debug and test builds.
//
// LOOM_CHECK(cond, fmt, ...) states a rule docs/DESIGN.md makes (a pinned
// fibre runs only on its processor; a processor links its own queue only):
// in a build with LOOM_CHECKS (cmake -DLOOM_CHECKS=ON; on by default in the
// Debug and sanitizer builds) a broken rule prints "loom: invariant broken:"
// with the message, which names the fibre and processor, and aborts. In the
// default build the condition is not evaluated and costs nothing (it must
// have no side effects).
#pragma once

namespace loom::rt {

[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* fmt, ...) noexcept
    __attribute__((format(printf, 4, 5), cold));

// What a synchronisation object's destructor fills it with in a checking
// build (sync/wait.hpp, dead_object): the runtime's take of a spin lock
// that reads this byte reports a touch after the destructor ran.
inline constexpr unsigned char kDeadByte = 0xDD;

#if defined(LOOM_CHECKS)
namespace check {
// A broken rule, reported (with the chaos seed in a chaos build), then abort().
[[noreturn]] void fail(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2), cold));
}  // namespace check
inline constexpr bool kChecks = true;
#define LOOM_CHECK(cond, ...)                                                                           \
  do {                                                                                                  \
    if (__builtin_expect(!(cond), 0)) ::loom::rt::check_failed(__FILE__, __LINE__, #cond, __VA_ARGS__); \
  } while (0)
#else
inline constexpr bool kChecks = false;
#define LOOM_CHECK(cond, ...) \
  do {                        \
    if (false) (void)(cond);  \
  } while (0)
#endif

}  // namespace loom::rt
