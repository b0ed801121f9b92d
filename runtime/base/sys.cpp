#include "base/sys.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace loom::rt::sys {

namespace {

template <class F>
[[maybe_unused]] void find(F& slot, const char* name) {
  find_symbol(slot, "libc.so.6", name);
}

#if defined(LOOM_ASAN) || defined(LOOM_TSAN)
// The sanitizers intercept these names: their runtime must see every thread
// start (see sys.hpp).
Pthread load() {
  return Pthread{&::pthread_create,        &::pthread_join,           &::pthread_detach,         &::pthread_self,
                 &::pthread_setname_np,    &::pthread_setaffinity_np, &::pthread_getaffinity_np, &::pthread_getattr_np,
                 &::pthread_attr_getstack, &::pthread_attr_destroy,   &::pthread_sigmask,        &::pthread_once,
                 &::pthread_mutex_lock,    &::pthread_mutex_unlock,   &::pthread_exit,           &::pthread_key_create,
                 &::pthread_setspecific,   &::pthread_attr_init,      &::pthread_attr_setstacksize};
}
#else
Pthread load() {
  Pthread p{};
  find(p.create, "pthread_create");
  find(p.join, "pthread_join");
  find(p.detach, "pthread_detach");
  find(p.self, "pthread_self");
  find(p.setname_np, "pthread_setname_np");
  find(p.setaffinity_np, "pthread_setaffinity_np");
  find(p.getaffinity_np, "pthread_getaffinity_np");
  find(p.getattr_np, "pthread_getattr_np");
  find(p.attr_getstack, "pthread_attr_getstack");
  find(p.attr_destroy, "pthread_attr_destroy");
  find(p.sigmask, "pthread_sigmask");
  find(p.once, "pthread_once");
  find(p.mutex_lock, "pthread_mutex_lock");
  find(p.mutex_unlock, "pthread_mutex_unlock");
  find(p.exit, "pthread_exit");
  find(p.key_create, "pthread_key_create");
  find(p.setspecific, "pthread_setspecific");
  find(p.attr_init, "pthread_attr_init");
  find(p.attr_setstacksize, "pthread_attr_setstacksize");
  return p;
}
#endif

}  // namespace

void* library_symbol(const char* lib, const char* name) noexcept {
  void* h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD);
  if (!h) {
    std::fprintf(stderr, "loom: %s is not loaded in the process: %s\n", lib, dlerror());
    std::abort();
  }
  void* p = dlsym(h, name);
  if (!p) {
    std::fprintf(stderr, "loom: %s has no %s\n", lib, name);
    std::abort();
  }
  return p;
}

int create_thread(pthread_t* t, void* (*fn)(void*), void* arg) noexcept {
  const Pthread& g = pthread();
  if (kRuntimeThreadStack == 0) return g.create(t, nullptr, fn, arg);
  pthread_attr_t a;
  if (int e = g.attr_init(&a)) return e;
  g.attr_setstacksize(&a, kRuntimeThreadStack);
  int e = g.create(t, &a, fn, arg);
  g.attr_destroy(&a);
  return e;
}

const Pthread& pthread() noexcept {
  // A function-local static: thread-safe initialisation through the C++ ABI
  // (__cxa_guard, which uses futexes directly, not pthread_once).
  static const Pthread p = load();
  return p;
}

}  // namespace loom::rt::sys
