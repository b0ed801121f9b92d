#!/usr/bin/env bash
# headers.sh CC CXX INCLUDE_DIR LIB_DIR — the C API's headers as programs
# use them:
#  1. loom/loom.h compiles on its own, warning-free, as C99/C11/C17 and as
#     C++98/11/17/20, with GCC and Clang (whichever are installed), -pedantic;
#  2. loom/pthread.h works whether the system headers come before it, after
#     it, or both, in C and in C++ (where the standard library's threading
#     stays the system's), and such a program links and runs on loom;
#  3. every name loom cannot support fails to compile through it, with a
#     message naming it, while the same code compiles against glibc.
set -euo pipefail
SECONDS=0
cc=$1 cxx=$2 inc=$3 lib=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "headers: $*"; exit 1; }

compilers_c=("$cc")
compilers_cxx=("$cxx")
command -v clang >/dev/null && compilers_c+=(clang)
command -v clang++ >/dev/null && compilers_cxx+=(clang++)

# ---- 1. loom.h alone ---------------------------------------------------------------
cat > "$tmp/alone.c" <<'C'
#include <loom/loom.h>
static loom_mutex_t m = LOOM_MUTEX_INITIALIZER;
static loom_cond_t c = LOOM_COND_INITIALIZER;
static loom_rwlock_t r = LOOM_RWLOCK_INITIALIZER;
static loom_once_t o = LOOM_ONCE_INIT;
static loom_mutex_t rm = LOOM_RECURSIVE_MUTEX_INITIALIZER_NP;
int main(void) { return loom_mutex_lock(&m) + loom_cond_signal(&c) + loom_rwlock_rdlock(&r) + (int)o._loom_done + loom_mutex_lock(&rm) + errno; }
C
cp "$tmp/alone.c" "$tmp/alone.cpp"
for c in "${compilers_c[@]}"; do
  for std in c99 c11 c17; do
    "$c" -std=$std -pedantic -Wall -Wextra -Werror -I"$inc" -fsyntax-only "$tmp/alone.c" ||
      fail "loom.h does not compile alone with $c -std=$std"
  done
done
for c in "${compilers_cxx[@]}"; do
  for std in c++98 c++11 c++17 c++20; do
    "$c" -std=$std -pedantic -Wall -Wextra -Werror -I"$inc" -fsyntax-only "$tmp/alone.cpp" ||
      fail "loom.h does not compile alone with $c -std=$std"
  done
done

# ---- 2. include orders ----------------------------------------------------------------
body='
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static sem_t s;
static void* fn(void* a) { pthread_mutex_lock(&m); sem_post(&s); pthread_mutex_unlock(&m); return a; }
int main(void) {
  pthread_t t;
  void* r = 0;
  sem_init(&s, 0, 0);
  pthread_create(&t, NULL, fn, &m);
  sem_wait(&s);
  pthread_join(t, &r);
  sched_yield();
  usleep(1);
  printf("%d %d\n", r == (void*)&m, PTHREAD_STACK_MIN);
  return 0;
}'
before='#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <unistd.h>
#include <sched.h>
#include <time.h>
#include <sys/socket.h>
#include <stdio.h>
#include <limits.h>'
after=$before
printf '%s\n#include <loom/pthread.h>\n%s\n' "$before" "$body" > "$tmp/before.c"
printf '#include <loom/pthread.h>\n%s\n%s\n' "$after" "$body" > "$tmp/after.c"
printf '%s\n#include <loom/pthread.h>\n%s\n%s\n' "$before" "$after" "$body" > "$tmp/both.c"
for f in before after both; do
  for c in "${compilers_c[@]}"; do
    "$c" -std=c11 -D_DEFAULT_SOURCE -pedantic -Wall -Wextra -Werror -I"$inc" "$tmp/$f.c" -o "$tmp/$f" \
      -L"$lib" -lloom -Wl,-rpath,"$lib" || fail "$f.c does not build with $c"
    [ "$("$tmp/$f")" = "1 16384" ] || fail "$f.c built with $c printed $("$tmp/$f")"
    if nm -D --undefined-only "$tmp/$f" | grep -Eq ' (pthread_|sem_|sched_yield|usleep)'; then
      fail "$f.c built with $c still calls libc's pthreads"
    fi
  done
done
# With LOOM_PTHREAD_IO, socket calls are loom's, system headers in any order.
cat > "$tmp/io.c" <<'C'
#include <unistd.h>
#include <loom/pthread.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <netdb.h>
int main(void) {
  int sv[2];
  char c = 0;
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  if (write(sv[1], "k", 1) != 1 || read(sv[0], &c, 1) != 1) return 2;
  close(sv[0]);
  close(sv[1]);
  return c == 'k' ? 0 : 3;
}
C
"$cc" -std=c11 -D_DEFAULT_SOURCE -DLOOM_PTHREAD_IO -pedantic -Wall -Wextra -Werror -I"$inc" "$tmp/io.c" -o "$tmp/io" \
  -L"$lib" -lloom -Wl,-rpath,"$lib" || fail "io.c does not build"
"$tmp/io" || fail "io.c failed"
for s in socketpair read write close; do
  nm -D --undefined-only "$tmp/io" | grep -q " loom_$s$" || fail "io.c does not call loom_$s"
done
# C++: force-included, then the standard library's threading headers.
cat > "$tmp/std.cpp" <<'CPP'
#include <condition_variable>
#include <cstdio>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <thread>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
int main() {
  std::mutex sm;
  std::shared_mutex rw;
  int n = 0;
  std::thread t([&] { std::lock_guard<std::mutex> g(sm); std::shared_lock<std::shared_mutex> r(rw); ++n; });
  t.join();
  pthread_t f;
  pthread_create(&f, nullptr, [](void*) -> void* { pthread_mutex_lock(&m); pthread_mutex_unlock(&m); return nullptr; }, nullptr);
  pthread_join(f, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::printf("%d\n", n);
  return 0;
}
CPP
# (GCC with C++17, Clang with C++20: each build is a few seconds.)
std=c++17
for c in "${compilers_cxx[@]}"; do
  {
    "$c" -std=$std -Wall -Wextra -Werror -include loom/pthread.h -I"$inc" "$tmp/std.cpp" -o "$tmp/std" \
      -L"$lib" -lloom -Wl,-rpath,"$lib" -pthread || fail "std.cpp does not build with $c -std=$std"
    [ "$("$tmp/std")" = "1" ] || fail "std.cpp built with $c -std=$std failed"
  }
  std=c++20
done

# ---- 3. unsupported names fail loudly ---------------------------------------------------
while IFS='|' read -r name code; do
  [ -z "$name" ] && continue
  printf '#include <pthread.h>\n#include <semaphore.h>\n#include <signal.h>\n#include <fcntl.h>\nint f(void);\nint f(void) { %s }\n' "$code" > "$tmp/u.c"
  "$cc" -std=c11 -D_GNU_SOURCE -c "$tmp/u.c" -o "$tmp/u.o" || fail "the $name snippet does not compile against glibc"
  for c in "${compilers_c[@]}"; do
    if "$c" -std=c11 -D_GNU_SOURCE -include loom/pthread.h -I"$inc" -c "$tmp/u.c" -o "$tmp/u.o" 2> "$tmp/err"; then
      fail "$name compiles through loom/pthread.h with $c"
    fi
    grep -q "$name is not supported" "$tmp/err" || { cat "$tmp/err"; fail "$c's error does not name $name"; }
  done
done <<'LIST'
pthread_kill|pthread_t t = pthread_self(); return pthread_kill(t, SIGUSR1);
pthread_sigmask|sigset_t s; sigemptyset(&s); return pthread_sigmask(SIG_BLOCK, &s, 0);
pthread_atfork|return pthread_atfork(0, 0, 0);
pthread_attr_setstack|pthread_attr_t a; static char st[65536]; pthread_attr_init(&a); return pthread_attr_setstack(&a, st, sizeof st);
pthread_attr_setschedpolicy|pthread_attr_t a; pthread_attr_init(&a); return pthread_attr_setschedpolicy(&a, SCHED_FIFO);
pthread_setschedparam|struct sched_param p = {0}; return pthread_setschedparam(pthread_self(), SCHED_OTHER, &p);
pthread_setaffinity_np|cpu_set_t s; CPU_ZERO(&s); return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
pthread_getcpuclockid|clockid_t c; return pthread_getcpuclockid(pthread_self(), &c);
pthread_mutexattr_setprioceiling|pthread_mutexattr_t a; pthread_mutexattr_init(&a); return pthread_mutexattr_setprioceiling(&a, 1);
sem_open|return sem_open("/x", O_CREAT, 0600, 0) == SEM_FAILED;
sem_unlink|return sem_unlink("/x");
LIST
echo "headers: ok (${SECONDS}s)"
