// base/options.hpp — reading LOOM_* environment variables.
//
// Each reader returns the parsed value, or `fallback` when the variable is
// unset. A malformed value is reported once on stderr ("loom: LOOM_X=...:
// expected ...; using ...") and the fallback is used.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

namespace loom::rt {

std::size_t env_size(const char* name, std::size_t fallback, std::size_t min, std::size_t max);
bool env_bool(const char* name, bool fallback);
// One of `choices`; returns the index of the choice, or `fallback`.
int env_choice(const char* name, std::initializer_list<const char*> choices, int fallback);

// Kernel threads this process may run on at once: the affinity mask, reduced
// by a cgroup v2 (cpu.max) or v1 (cfs quota/period) CPU limit, at least 1.
std::size_t usable_cpus();

}  // namespace loom::rt
