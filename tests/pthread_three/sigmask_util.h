/* sigmask_util.h — the calling thread's signal mask, for the signal test
 * programs (signals.c, signal_cases.c). */
#pragma once
#include <pthread.h>
#include <signal.h>

static inline void block(int how, int sig) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, sig);
  pthread_sigmask(how, &s, NULL);
}
static inline int blocked(int sig) {
  sigset_t s;
  pthread_sigmask(SIG_BLOCK, NULL, &s);
  return sigismember(&s, sig);
}
