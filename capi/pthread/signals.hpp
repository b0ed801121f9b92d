// capi/pthread/signals.hpp — between libloom-pthread's signal files, from
// the bottom up (each calls only those below it): sigroute.cpp, the
// signal-context side of the per-thread signals (pending sets, posting,
// route; sigroute.hpp has what only sigthread.cpp and sigexec.cpp need of
// it); sigtable.cpp, the program's dispositions and the trampoline the
// kernel calls; sigthread.cpp, the per-thread side (masks, waits, delivery,
// pthread_kill); signal.cpp, sigaction and signal by glibc's names; and
// sigexec.cpp, the mask (and, for exec, what is pending) handed to the
// kernel before exec and spawn.
// docs/DESIGN.md, "Signals and fibres", has the whole story.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <cstdint>

namespace loom::capi::pthread_signal {

inline std::uint64_t bit(int sig) { return std::uint64_t(1) << (sig - 1); }

// ---- sigtable.cpp ------------------------------------------------------------------------

// The program's sigaction, in the table and the kernel (the trampoline for
// a handler of the program's). *wrapped (if given): the kernel was given the
// trampoline (a handler, or a guarded SIG_DFL).
int install(int sig, const struct sigaction* act, struct sigaction* oldact, bool* wrapped = nullptr);
// What the kernel calls for a signal whose disposition is the program's
// handler (or a guarded SIG_DFL).
void trampoline(int sig, siginfo_t* si, void* context);
// The program's handler of sig in the table (nullptr: none, or SIG_DFL
// guarded); async-signal-safe.
void* handler_of(int sig) noexcept;
// A signal that comes asynchronously and can be caught (not SIGKILL,
// SIGSTOP, the synchronous ones, nor glibc's own two).
bool catchable_async(int sig);

// What the program's disposition of sig does now.
enum class Action { ignore, handler, terminate, stop };
Action action_of(int sig) noexcept;  // not from a handler (takes the table's lock)

// A fibre blocks sig while its disposition is SIG_DFL: the kernel, which
// does not see fibres' masks, would apply the default action on whatever
// processor it picks. From now on the kernel holds the trampoline for sig
// (the program still sees SIG_DFL), which routes it (route below) or, when
// a thread that does not block it exists, applies the default action itself.
void guard(int sig) noexcept;

// The default action of sig, for real, on this kernel thread: the
// disposition is SIG_DFL for the moment of a tgkill to oneself. Returns
// only for a stop signal (after SIGCONT) or one whose default is to ignore.
void default_action(int sig) noexcept;

// Whether the program's disposition of sig has SA_RESETHAND: a hurry
// (sigthread.cpp) that lands where it cannot run would spend the one
// delivery.
bool resets(int sig) noexcept;
// Whether the program's disposition of sig has SA_RESTART.
bool restarts(int sig) noexcept;

// ---- sigroute.cpp ------------------------------------------------------------------------

// Called by the trampoline for each signal the kernel delivers (signal
// context): true when sig was posted to another thread, or kept pending for
// the process, and the trampoline must not run it here. by_default: the
// program's disposition is SIG_DFL (a guarded signal).
bool route(int sig, const siginfo_t* si, bool by_default) noexcept;

// The trampoline is done with sig: routed elsewhere, or its handler
// returned here (counted for routings(), sigroute.hpp).
void routing_done(int sig) noexcept;

// A signal the interrupter sent to the kernel thread running a fibre it is
// due on, blocked in a system call loom does not see (sigthread.cpp,
// "hurry"): its own siginfo, which no kernel or libc code makes.
bool is_hurry(const siginfo_t& si) noexcept;
// The trampoline's, for such a signal (signal context): true when the
// handler runs here, *si rewritten to the signal's own siginfo; false when
// nothing runs here (the signal stays pending for its fibre).
bool hurried(int sig, siginfo_t* si, void* context) noexcept;

// sig's disposition became one that ignores it (SIG_IGN, or SIG_DFL of a
// signal whose default is to ignore): its pending instances are discarded,
// as the kernel discards its own — every thread's, the process's, the
// realtime queue's (called by sigtable.cpp's install).
void discard_pending(int sig) noexcept;

// ---- sigthread.cpp -----------------------------------------------------------------------

// Runs what is pending for the calling fibre and not blocked by its mask
// (handlers, default actions): the fibre's "next switch". Cheap when
// nothing is pending (two loads). No-op off a fibre and inside a handler.
void deliver_pending() noexcept;

// From the first handler the program installs (signal.cpp): a handler due
// on a fibre parked in a wait cuts the wait short.
void enable_interrupts() noexcept;

// The calling fibre's mask: false off a fibre with a
// record and inside a handler, where the kernel thread's mask is the
// caller's.
bool fibre_mask(std::uint64_t* out) noexcept;

// ---- thread.cpp ---------------------------------------------------------------------------

// `t` names a thread made in the child of a fork (a kernel
// thread of glibc's, whose handle is glibc's), so pthread_kill and
// pthread_sigqueue are glibc's for it.
bool glibc_thread_of_fork_child(pthread_t t) noexcept;
// In a fork child, the forking thread's handle from before the fork (its
// pthread_self() there): glibc's handle of that kernel thread, which a
// signal or a cancellation for it goes to; 0 for any other handle.
pthread_t forking_thread_in_child(pthread_t t) noexcept;
// thread.cpp's, for cancel.cpp: after glibc's pthread_cancel of such a
// thread, ends its cancellable wait in loom's parking lot (a condvar), if
// it is in one, so that it reaches glibc's test of the request.
void wake_fork_child_thread(pthread_t t) noexcept;

}  // namespace loom::capi::pthread_signal
