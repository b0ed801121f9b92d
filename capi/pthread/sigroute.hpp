// capi/pthread/sigroute.hpp — what sigroute.cpp (the signal-context half of
// the per-thread signals: pending sets, posting, route) gives sigthread.cpp
// (the fibre's half: masks, waits, delivery on the calling fibre), and
// sigexec.cpp (what is pending, handed to the kernel before an exec). Bit s-1
// of a set is signal s (signals.hpp's bit).
#pragma once

#include <signal.h>

#include <atomic>
#include <cstdint>

#include "capi.hpp"

namespace loom::capi::pthread_signal {

// Raised on the thread whose instruction faulted: never routed, never
// taken over by a fibre's mask.
inline bool synchronous(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGTRAP || sig == SIGSYS;
}
// Raised by the kernel on the thread whose call caused it: never another's.
inline bool thread_directed(int sig) { return sig == SIGPIPE || sig == SIGXFSZ; }
inline int lowest(std::uint64_t b) { return __builtin_ctzll(b) + 1; }

// A hurry's siginfo (sigthread.cpp, "hurry"): what no kernel or libc code
// makes.
constexpr int kSiHurry = -42;            // si_code: no kernel or libc code uses it
constexpr int kHurryErrno = 0x6c6f6f6d;  // "loom", in si_errno

// Fibres inside a wait of sigthread.cpp's (WaitScope): route looks for
// them only while there are some.
extern std::atomic<int> waiters;
// The interrupter's futex word (sigthread.cpp's thread waits on it), and
// whether that thread runs (enable_interrupts).
extern std::atomic<int> interrupt_word;
extern std::atomic<bool> interrupts_on;
// The child of a fork: route leaves every signal to the kernel's choice.
extern std::atomic<bool> fork_child;
// The signal this kernel thread sends itself now (run_here), and whether
// start-up is unblocking what the process inherited blocked (look_up_early):
// read by route and hurried, in the trampoline.
extern thread_local const siginfo_t* tls_delivering __attribute__((tls_model("initial-exec")));
extern thread_local bool tls_adopting __attribute__((tls_model("initial-exec")));

// What a handler or sigwaitinfo is told of a signal, from the kernel's
// siginfo (nullptr: a raise of this process's), and back.
SignalInfo info_of(const siginfo_t* si);
void to_siginfo(int sig, const SignalInfo& i, siginfo_t* out);

// sig posted to s's pending set (a realtime one already pending there
// queues for the process), and s's waits woken.
void post(SignalState& s, int sig, const SignalInfo& i);
// Asks the interrupter to cut s's wait short (once interrupts are on).
void ask_interrupt(SignalState& s);

// Takes sig out of s's pending set, or the process's (take_process: the
// process's only): its info, or false if another taker won.
bool take(SignalState& s, int sig, SignalInfo* out);
bool take_process(int sig, SignalInfo* out);
// What is pending for s: its own and the process's.
std::uint64_t pending_for(const SignalState& s);

// A signal on its way (route's walk over the threads; sigthread.cpp's
// send_to_self probes with one).
struct Routing {
  int sig;
  SignalInfo info;
  bool by_default;
  SignalState* skip;
  bool posted;
  bool parked_only = false;  // post_to_unblocked's first pass
};

// sig, pending for the process, goes back there (a thread it was routed to
// ended without taking it; an exec that failed: sigexec.cpp): false when no
// thread takes it now.
bool hand_back(int sig, const SignalInfo& i);

}  // namespace loom::capi::pthread_signal
