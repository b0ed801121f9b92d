#include "context/context.hpp"
#include "base/sys.hpp"

#include <pthread.h>
#include <valgrind/valgrind.h>

#if defined(__SANITIZE_ADDRESS__) && !defined(LOOM_ASAN)
#error "build with -DLOOM_ASAN under AddressSanitizer (the Makefile's asan target does)"
#endif
#if defined(__SANITIZE_THREAD__) && !defined(LOOM_TSAN)
#error "build with -DLOOM_TSAN under ThreadSanitizer (the Makefile's tsan target does)"
#endif

#if defined(LOOM_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(LOOM_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace loom::rt {

void context_make(Context& c, void* lo, std::size_t size, void (*entry)(transfer_t)) {
  // (Atomic stores: the fibre listing reads fctx from another thread.)
  __atomic_store_n(&c.fctx, boost::context::detail::make_fcontext(static_cast<char*>(lo) + size, size, entry),
                   __ATOMIC_RELAXED);
  c.stack_lo = lo;
  c.stack_size = size;
  c.asan_fake_stack = nullptr;
#if defined(LOOM_TSAN)
  c.tsan_fiber = __tsan_create_fiber(0);
#endif
}

void context_adopt_thread(Context& c) {
  pthread_attr_t attr;
  void* lo = nullptr;
  std::size_t size = 0;
  if (sys::pthread().getattr_np(sys::pthread().self(), &attr) == 0) {
    sys::pthread().attr_getstack(&attr, &lo, &size);
    sys::pthread().attr_destroy(&attr);
  }
  c.fctx = nullptr;  // filled in by the first switch away from it
  c.stack_lo = lo;
  c.stack_size = size;
#if defined(LOOM_TSAN)
  c.tsan_fiber = __tsan_get_current_fiber();
#endif
}

void context_destroy(Context& c) {
#if defined(LOOM_TSAN)
  if (c.tsan_fiber) __tsan_destroy_fiber(c.tsan_fiber);
#endif
  c.tsan_fiber = nullptr;
  __atomic_store_n(&c.fctx, nullptr, __ATOMIC_RELAXED);
}

void sanitizer_before_jump(Context& from, Context& to, bool from_dies) {
#if defined(LOOM_ASAN)
  __sanitizer_start_switch_fiber(from_dies ? nullptr : &from.asan_fake_stack, to.stack_lo, to.stack_size);
#endif
#if defined(LOOM_TSAN)
  __tsan_switch_to_fiber(to.tsan_fiber, 0);
#endif
  (void)from;
  (void)to;
  (void)from_dies;
}

void context_arrived(Context& self) {
#if defined(LOOM_ASAN)
  __sanitizer_finish_switch_fiber(self.asan_fake_stack, nullptr, nullptr);
#endif
  (void)self;
}

unsigned tools_register_stack(void* lo, void* hi) { return VALGRIND_STACK_REGISTER(lo, hi); }

void tools_deregister_stack(unsigned id) { VALGRIND_STACK_DEREGISTER(id); }

void sanitizer_unpoison(void* lo, std::size_t size) {
#if defined(LOOM_ASAN)
  __asan_unpoison_memory_region(lo, size);
#endif
  (void)lo;
  (void)size;
}

}  // namespace loom::rt
