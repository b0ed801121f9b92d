/* errname.h — an error number as its name ("EINVAL"; "0" for none), for
 * the test programs whose every line must read the same on glibc and loom
 * (attrs.c, identity.c, stacks.c). */
#pragma once
#include <string.h>

static inline const char* err(int e) {
  if (e == 0) return "0";
  const char* n = strerrorname_np(e);
  return n ? n : "other";
}
