// sched/tls.hpp — a thread control block of its own for each fibre that is
// one of the program's threads (libloom-pthread's route).
//
// On x86-64 every thread-local a program, libstdc++ or glibc keeps (errno,
// `thread_local`, `__thread`, the locale, malloc's per-thread cache) is
// found through the %fs base, which points at the thread's control block
// (glibc's `struct pthread`, with the static TLS blocks of every module
// below it and the dynamic-TLS vector beside it). A fibre that is one of the
// program's threads gets such a block of its own, made the way glibc makes
// one for a new thread, and each switch installs the block of the fibre that
// runs next. The block sits at the top of the fibre's stack mapping, below
// the Fibre, so it comes from the processor's stack cache with the stack.
//
// The contract with glibc (docs/DESIGN.md, "A thread control block per
// fibre") is checked at start: the exact glibc version this code was verified
// against, and every private entry point found; anything else, and per-fibre
// TLS stays off with a one-line notice (today's behaviour: thread-locals per
// kernel thread). Off too under the sanitizers (their runtimes keep their
// own per-thread state in TLS and follow kernel threads) and with LOOM_TLS=off.
//
// The runtime's own thread-locals (tls_processor above all) then live in
// whatever block is installed: a switch writes the processor into the
// incoming block before installing it, so this_processor() stays right.
// Fibres without a block of their own (the idle loop, the runtime's own
// fibres) run on their processor's home block: the kernel thread's own, or
// for processor 0, whose kernel thread's block stays main()'s, one made here.
#pragma once

#include <cstddef>

namespace loom::rt {

class Fibre;
class Processor;

namespace tls {

// Per-fibre TLS is on: read on every switch.
extern bool switching;

// Turns per-fibre TLS on, from a fibre of the default cluster (libloom-
// pthread's constructor, on main()). Returns false, having said why once on
// stderr, when the contract cannot be kept.
bool enable() noexcept;

// Bytes a fibre's stack must set aside at its top for a block (0 when off).
std::size_t reserve() noexcept;
// Builds a block in [top - reserve(), top) for a fibre; returns the thread
// pointer. Throws std::bad_alloc when glibc cannot allocate its vector.
void* make(char* top);
// Tells the block's glibc fields which stack its thread runs on
// (stackblock, stackblock_size): glibc's unwinding compares frames with its
// top, so that a handler's frames on an alternate stack count as the
// innermost (nptl/unwind.c), and glibc sizes its alloca cutoff by it.
void set_stack(void* tp, void* lo, void* hi) noexcept;
// Frees what make() allocated outside the stack (the dynamic-TLS vector and
// blocks); the block's memory itself belongs to the stack.
void destroy(void* tp) noexcept;

// The thread pointer of the calling kernel thread's block now installed.
void* current() noexcept;
// Installs `tp` on the calling kernel thread, having written `p` into the
// block's copy of tls_processor first.
void install(void* tp, Processor* p) noexcept;

// On the fibre, first thing: what glibc's thread start does in a new thread
// (its locale's ctype tables, its resolver state).
void thread_start(Fibre* self) noexcept;
// On the fibre after its start routine: C++ thread_local destructors
// (glibc runs them before the POSIX key destructors).
void run_tls_destructors() noexcept;
// On the fibre, last: hands its malloc cache to the pool the next thread
// takes it from (glibc frees it at thread exit through a call it does not
// export).
void thread_end(Fibre* self) noexcept;

// In the child of a fork, on its one kernel thread, which was a processor's
// (`kernel_tcb` its own block, Processor::kernel_tcb()): the kernel forgets
// the rseq area registered there (see tls.cpp).
void forget_kernel_rseq(void* kernel_tcb) noexcept;
// In the child of a fork: glibc has reset its lists of threads, and the
// blocks loom linked there are not on them any more (see tls.cpp, "On
// glibc's list"): none is linked or unlinked from now on.
void forget_glibc_lists() noexcept;
// A block for a processor whose kernel thread's own block belongs to main()
// (processor 0); made on that processor.
void* make_home(Processor* p);

// glibc's setuid family (setuid ... setgroups) changes the credentials of
// every kernel thread it lists by signalling each but the caller's, named by
// the tid in the caller's block, and making the call itself on the calling
// kernel thread. main()'s block names the initial kernel thread (processor
// 0's); when main() runs on another processor, the initial kernel thread
// would be skipped and keep the old credentials. For the scope of one such
// call (which must not switch fibres: glibc's makes only inline system
// calls), this installs the calling kernel thread's own block if main()'s
// is installed elsewhere; main()'s errno goes in and comes back to main()'s
// block (the kernel thread's own is kept), looked up afresh after each
// install, never through an address from before it.
class KernelIdentity {
 public:
  KernelIdentity() noexcept;
  ~KernelIdentity();
  KernelIdentity(const KernelIdentity&) = delete;
  KernelIdentity& operator=(const KernelIdentity&) = delete;

 private:
  Processor* proc_ = nullptr;
  int kernel_errno_ = 0;  // the kernel thread's block's errno, put back
};

// glibc's `cancelhandling` word of the block `tp` (struct pthread's, which
// glibc's own cancellation points check: capi/pthread/cancel.cpp); nullptr
// when per-fibre TLS is off or glibc does not say where it is.
int* cancelhandling(void* tp) noexcept;
// Its bits (glibc 2.36, nptl/descr.h), for the C layer's reads and writes.
inline constexpr int kGlibcStateDisabled = 1;  // CANCELSTATE_BITMASK
inline constexpr int kGlibcAsync = 2;          // CANCELTYPE_BITMASK: inside a glibc cancellation point's system call
inline constexpr int kGlibcCanceling = 4;      // CANCELING_BITMASK
inline constexpr int kGlibcCanceled = 8;       // CANCELED_BITMASK
inline constexpr int kGlibcExiting = 16;       // EXITING_BITMASK
// A stand-in for a thread's block that glibc's pthread_cancel finds
// running (a tid) and already cancelled: it returns 0 having done only its
// first call's set-up, the installation of its SIGCANCEL handler
// (capi/pthread/cancel.cpp, which wants that done before any thread can be
// cancelled); nullptr when the offsets are not known.
void* cancelled_stand_in() noexcept;
// That word says EXITING (glibc's EXITING_BITMASK): glibc is unwinding the
// thread for a cancellation, or the thread is ending; false without a word.
bool glibc_exiting(void* tp) noexcept;

// Statistics for tests and the benchmark.
std::size_t blocks_made() noexcept;

}  // namespace tls
}  // namespace loom::rt
