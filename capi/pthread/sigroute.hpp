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
// process's only): its info, or false if another taker won. A realtime
// signal's instances come one at a time, s's own first, each in the order
// it was sent.
bool take(SignalState& s, int sig, SignalInfo* out);
bool take_process(int sig, SignalInfo* out);
// What is pending for s: its own and the process's.
std::uint64_t pending_for(const SignalState& s);
// What is pending for the process (sequentially consistent).
std::uint64_t process_pending_now();

// How many times the trampoline has ended for sig (acquire: what route
// posted, and what a handler run there did, is visible once the count
// moved): a kill the kernel sends to this process among others is waited
// for by its sender (sigthread.cpp, await_routing).
unsigned routings(int sig);
// The sender of a kill to its own process group waits for sig (from
// `expected` to `now`, null: none): route posts sig to it rather than run
// it on an idle processor or a thread of loom's.
void awaiting_kill(int sig, SignalState* expected, SignalState* now);

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
// Whether a realtime instance this kernel thread queued since the last
// call was dropped, the pool full (and clears it): a sigqueue to this
// process that queued it gets EAGAIN, as the kernel's at RLIMIT_SIGPENDING.
bool queue_failed();
// Every node of the realtime queue in use: a sigqueue to this process that
// goes through the kernel (not routed in the call) gets EAGAIN up front —
// racy against other senders, which queue_failed is not.
bool queue_full();
// In a fork child: the realtime lock free, nothing queued (POSIX: the
// child's pending set is empty).
void rt_after_fork() noexcept;
// A thread that can take realtime sig, queued for the process, is woken
// to (a thread ended that route had woken for it): false when none can now.
bool claim_queued(int sig);
// The realtime instances of `sigs` queued for s dropped (s ended: what was
// sent to a thread ends with it, as on glibc).
void drop_queued(SignalState& s, std::uint64_t sigs);

}  // namespace loom::capi::pthread_signal
