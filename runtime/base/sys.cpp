#include "base/sys.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace loom::rt::sys {

namespace {

[[maybe_unused]] void* libc() {
  void* h = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  if (!h) {
    std::fprintf(stderr, "loom: cannot find libc.so.6 in the process: %s\n", dlerror());
    std::abort();
  }
  return h;
}

template <class F>
[[maybe_unused]] void find(void* h, F& slot, const char* name) {
  slot = reinterpret_cast<F>(dlsym(h, name));
  if (!slot) {
    std::fprintf(stderr, "loom: libc.so.6 has no %s\n", name);
    std::abort();
  }
}

#if defined(LOOM_ASAN) || defined(LOOM_TSAN)
// The sanitizers intercept these names: their runtime must see every thread
// start (see sys.hpp).
Pthread load() {
  return Pthread{&::pthread_create, &::pthread_join, &::pthread_detach, &::pthread_self, &::pthread_setname_np,
                 &::pthread_setaffinity_np, &::pthread_getaffinity_np, &::pthread_getattr_np, &::pthread_attr_getstack,
                 &::pthread_attr_destroy, &::pthread_sigmask, &::pthread_once, &::pthread_mutex_lock, &::pthread_mutex_unlock,
                 &::pthread_exit};
}
#else
Pthread load() {
  void* h = libc();
  Pthread p{};
  find(h, p.create, "pthread_create");
  find(h, p.join, "pthread_join");
  find(h, p.detach, "pthread_detach");
  find(h, p.self, "pthread_self");
  find(h, p.setname_np, "pthread_setname_np");
  find(h, p.setaffinity_np, "pthread_setaffinity_np");
  find(h, p.getaffinity_np, "pthread_getaffinity_np");
  find(h, p.getattr_np, "pthread_getattr_np");
  find(h, p.attr_getstack, "pthread_attr_getstack");
  find(h, p.attr_destroy, "pthread_attr_destroy");
  find(h, p.sigmask, "pthread_sigmask");
  find(h, p.once, "pthread_once");
  find(h, p.mutex_lock, "pthread_mutex_lock");
  find(h, p.mutex_unlock, "pthread_mutex_unlock");
  find(h, p.exit, "pthread_exit");
  return p;
}
#endif

}  // namespace

const Pthread& pthread() noexcept {
  // A function-local static: thread-safe initialisation through the C++ ABI
  // (__cxa_guard, which uses futexes directly, not pthread_once).
  static const Pthread p = load();
  return p;
}

}  // namespace loom::rt::sys
