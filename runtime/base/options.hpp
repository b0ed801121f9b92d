// base/options.hpp — every LOOM_* environment variable, and the one parser
// that reads them.
//
// The table (env_vars()) names each variable the runtime reads, its kind,
// its default and what it does; README.md's "Variables" table is checked
// against it by tests/options_test.cpp, and a test greps the sources for a
// LOOM_* name that is not in it. A new variable is a row here, a row in the
// README, and a call to one of the readers below.
//
// Each reader returns the parsed value, or `fallback` when the variable is
// unset or empty. A value it cannot read is reported once per variable on
// stderr, always in the same words —
//   loom: LOOM_X=value: expected <what>; using <fallback>
// — and the fallback is used: a typo never stops a program, and never
// passes silently.
//   flag    1/0, on/off, true/false, yes/no, any case
//   choice  one of a list of words, any case
//   count   a decimal integer in [min, max]
//   size    bytes: a decimal integer with an optional K, M or G suffix
//           (powers of 1024; "64K", "1M", "65536"), in [min, max]
//   signal  a signal name (SIGUSR2, USR2, RTMIN+3, any case) or number
//   text    read by its own code (a policy string, an hwloc description)
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

namespace loom::rt {

enum class EnvKind { flag, choice, count, size, signal, text };

struct EnvVar {
  const char* name;
  EnvKind kind;
  const char* values;    // as the README shows them: "on|off", "nemesis|locked|shared", "BYTES"
  const char* fallback;  // the default, in words
  const char* meaning;   // one line
};

// The table, in the README's order; `count` receives its length.
const EnvVar* env_vars(std::size_t* count);
// The row of `name`, or nullptr.
const EnvVar* env_var(const char* name);
// The README's table row of `v` ("| `LOOM_X` | values | default | meaning |").
std::string env_readme_row(const EnvVar& v);

bool env_bool(const char* name, bool fallback);
// One of `choices` (case-insensitive); returns the index of the choice, or `fallback`.
int env_choice(const char* name, std::initializer_list<const char*> choices, int fallback);
// A decimal integer in [min, max] (a count, microseconds, milliseconds).
std::size_t env_size(const char* name, std::size_t fallback, std::size_t min, std::size_t max);
// A byte size, with an optional K/M/G suffix (powers of 1024), in [min, max].
std::size_t env_bytes(const char* name, std::size_t fallback, std::size_t min, std::size_t max);
// A signal loom can catch (not KILL, STOP, SEGV or BUS), or 0 when unset or
// not one (reported, with `otherwise` saying what happens instead).
int env_signal(const char* name, const char* otherwise);

// The parsers under the readers, for values that do not come from the
// environment (tests; FibreAttr). Each returns false for a malformed value.
bool parse_flag(const char* s, bool* out);
bool parse_bytes(const char* s, std::size_t* out);
int parse_signal(const char* s);  // 0 if not a signal

// The one-line complaint, once per variable, for readers of `text` variables.
void env_complain(const char* name, const char* value, const char* expected, const std::string& using_);

// Kernel threads this process may run on at once: the affinity mask, reduced
// by a cgroup v2 (cpu.max) or v1 (cfs quota/period) CPU limit, at least 1.
std::size_t usable_cpus();

}  // namespace loom::rt
