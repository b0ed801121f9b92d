#!/usr/bin/env bash
# Installs the build into a scratch prefix and builds programs against it
# with pkg-config only — C++, C (loom/loom.h), and a plain pthread program
# through loom/pthread.h, linked with libloom-pthread (shared and static)
# and preloaded; a CMake project with find_package(loom); the README's
# C++ snippet pasted into main; also checks that every public header
# compiles alone.
# install_test.sh BUILD_DIR [LIBRARY...]: the libraries the build installs,
# which must be built.
set -euo pipefail
build=$1
shift
for lib in "$@"; do
  [ -e "$lib" ] || { echo "install_test: $lib is not built"; exit 1; }
done
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name loom.pc)
[ -n "$pc" ] || { echo "install_test: no loom.pc installed"; exit 1; }
gdbpy=$(find "$tmp/prefix" -path "*/gdb/auto-load/*" -name "libloom.so.*-gdb.py")
case "$gdbpy" in
  *"$tmp/prefix/"*"/gdb/auto-load$tmp/prefix/"*) ;;
  *) echo "install_test: no auto-loadable gdb script beside the library's full path (found: '$gdbpy')"; exit 1 ;;
esac
export PKG_CONFIG_PATH=$(dirname "$pc")

for h in "$src"/include/loom/*.hpp; do
  echo "#include <loom/$(basename "$h")>" > "$tmp/one.cpp"
  g++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror $(pkg-config --cflags loom) "$tmp/one.cpp" \
    || { echo "install_test: $(basename "$h") does not compile on its own"; exit 1; }
done

# The C headers, alone, in strict C (and loom.h in C++ too).
for h in loom.h pthread.h; do
  echo "#include <loom/$h>" > "$tmp/one.c"
  gcc -std=c11 -pedantic -fsyntax-only -Wall -Wextra -Werror $(pkg-config --cflags loom) "$tmp/one.c" \
    || { echo "install_test: $h does not compile on its own"; exit 1; }
done
echo "#include <loom/loom.h>" > "$tmp/one.cpp"
g++ -std=c++17 -pedantic -fsyntax-only -Wall -Wextra -Werror $(pkg-config --cflags loom) "$tmp/one.cpp" \
  || { echo "install_test: loom.h does not compile as C++"; exit 1; }

cat > "$tmp/user.cpp" <<'CPP'
#include <loom/loom.hpp>
#include <cstdio>
int main() {
  int sum = 0;
  { loom::Fibre a([&] { sum += 20; }), b([&] { sum += 22; }); }
  std::printf("%d\n", sum);
}
CPP
libdir=$(pkg-config --variable=libdir loom)
g++ -std=c++17 "$tmp/user.cpp" -o "$tmp/user" $(pkg-config --cflags --libs loom) -Wl,-rpath,"$libdir"
out=$("$tmp/user")
[ "$out" = "42" ] || { echo "install_test: expected 42, got '$out'"; exit 1; }
# The README's first C++ snippet, pasted into main as a newcomer would.
{
  echo '#include <loom/loom.hpp>'
  echo 'int main() {'
  awk '/^```cpp$/ { on = 1; next } on && /^```$/ { exit } on { print }' "$src/README.md" | grep -v '^#include'
  echo '}'
} > "$tmp/readme.cpp"
g++ -std=c++17 -w "$tmp/readme.cpp" -o "$tmp/readme" $(pkg-config --cflags --libs loom) -Wl,-rpath,"$libdir" \
  || { echo "install_test: the README's C++ snippet does not compile in main"; cat "$tmp/readme.cpp"; exit 1; }
"$tmp/readme" > "$tmp/readme.out" 2>&1 \
  || { echo "install_test: the README's C++ snippet, run in main, failed:"; cat "$tmp/readme.out"; exit 1; }
# The README's snippets marked `<!-- install_test: pasted into main -->`
# (channels, a task group, futures), each pasted into main as it is.
awk '/<!-- install_test: pasted into main -->/ { want = 1; next }
     want && /^```cpp$/ { on = 1; n++; next }
     on && /^```$/ { on = 0; want = 0; next }
     on { print > (dir "/snippet" n ".txt") }' dir="$tmp" "$src/README.md"
ls "$tmp"/snippet*.txt >/dev/null 2>&1 || { echo "install_test: no README snippet marked for pasting"; exit 1; }
for f in "$tmp"/snippet*.txt; do
  { echo '#include <loom/loom.hpp>'; echo '#include <string>'; echo 'int main() {'; cat "$f"; echo '}'; } > "$f.cpp"
  g++ -std=c++17 -Wall -Wextra -Werror "$f.cpp" -o "$f.bin" $(pkg-config --cflags --libs loom) -Wl,-rpath,"$libdir" \
    || { echo "install_test: a marked README snippet does not compile in main"; cat "$f.cpp"; exit 1; }
  "$f.bin" > "$f.out" 2>&1 || { echo "install_test: a marked README snippet, run in main, failed:"; cat "$f.cpp" "$f.out"; exit 1; }
done
# The static library links too, with the libraries `pkg-config --static`
# lists (hwloc among them) in place of -lloom.
static_libs=$(pkg-config --static --libs loom)
g++ -std=c++17 "$tmp/user.cpp" -o "$tmp/user-static" $(pkg-config --cflags loom) "$libdir/libloom.a" ${static_libs//-lloom/}
[ "$("$tmp/user-static")" = "42" ] || { echo "install_test: static build failed"; exit 1; }

# A C program on the C API, built with pkg-config alone.
cat > "$tmp/user.c" <<'C'
#include <loom/loom.h>
#include <stdio.h>
static loom_mutex_t lock = LOOM_MUTEX_INITIALIZER;
static int sum;
static void* add(void* arg) {
  loom_mutex_lock(&lock);
  sum += (int)(long)arg;
  loom_mutex_unlock(&lock);
  return NULL;
}
int main(void) {
  loom_t a, b;
  loom_create(&a, NULL, add, (void*)20);
  loom_create(&b, NULL, add, (void*)22);
  loom_join(a, NULL);
  loom_join(b, NULL);
  printf("%d\n", sum);
  return 0;
}
C
gcc -std=c11 -Wall -Wextra -Werror "$tmp/user.c" -o "$tmp/user-c" $(pkg-config --cflags --libs loom) -Wl,-rpath,"$libdir"
[ "$("$tmp/user-c")" = "42" ] || { echo "install_test: the C program failed"; exit 1; }
# A plain pthread program, unchanged, through loom/pthread.h.
cat > "$tmp/plain.c" <<'C'
#include <pthread.h>
#include <stdio.h>
static void* twice(void* arg) { return (void*)(2 * (long)arg); }
int main(void) {
  pthread_t t;
  void* r;
  pthread_create(&t, NULL, twice, (void*)21);
  pthread_join(t, &r);
  printf("%ld\n", (long)r);
  return 0;
}
C
gcc -std=c11 -D_POSIX_C_SOURCE=200809L -include loom/pthread.h "$tmp/plain.c" -o "$tmp/plain" \
  $(pkg-config --cflags --libs loom) -Wl,-rpath,"$libdir"
[ "$("$tmp/plain")" = "42" ] || { echo "install_test: the pthread program failed on loom"; exit 1; }
nm -D --undefined-only "$tmp/plain" | grep -q ' loom_create$' \
  || { echo "install_test: the pthread program does not call loom_create"; exit 1; }
# The same plain program, unchanged and compiled as for glibc, linked with
# libloom-pthread through its own pkg-config file: its thread is a fibre.
if [ -f "$PKG_CONFIG_PATH/loom-pthread.pc" ]; then
  gcc -std=c11 "$tmp/plain.c" -o "$tmp/plain-link" $(pkg-config --cflags --libs loom-pthread) -Wl,-rpath,"$libdir"
  out=$(LOOM_PTHREAD_STATS=1 "$tmp/plain-link" 2> "$tmp/plain-link.err")
  [ "$out" = "42" ] || { echo "install_test: the pthread program linked with loom-pthread failed"; exit 1; }
  grep -qx 'loom: 1 threads ran as fibres' "$tmp/plain-link.err" \
    || { echo "install_test: the thread of the program linked with loom-pthread was not a fibre"; cat "$tmp/plain-link.err"; exit 1; }
  # The unmodified glibc build, preloaded from the installed library.
  gcc -std=c11 -pthread "$tmp/plain.c" -o "$tmp/plain-glibc"
  out=$(LOOM_PTHREAD_STATS=1 LD_PRELOAD="$libdir/libloom-pthread.so" "$tmp/plain-glibc" 2> "$tmp/plain-glibc.err")
  [ "$out" = "42" ] && grep -qx 'loom: 1 threads ran as fibres' "$tmp/plain-glibc.err" \
    || { echo "install_test: the preloaded glibc build did not run its thread as a fibre"; cat "$tmp/plain-glibc.err"; exit 1; }
  # Linked statically against libloom-pthread.a and libloom.a, with what
  # `pkg-config --static` lists for the rest: no libloom*.so in the binary,
  # and its thread a fibre.
  static_link=()
  for w in $(pkg-config --static --libs loom-pthread); do
    case $w in
      -lloom-pthread) static_link+=("$libdir/libloom-pthread.a") ;;
      -lloom) static_link+=("$libdir/libloom.a") ;;
      *) static_link+=("$w") ;;
    esac
  done
  gcc -std=c11 "$tmp/plain.c" -o "$tmp/plain-static" $(pkg-config --cflags loom-pthread) "${static_link[@]}" \
    || { echo "install_test: the pthread program does not link against libloom-pthread.a"; exit 1; }
  if readelf -d "$tmp/plain-static" | grep -q 'NEEDED.*libloom'; then
    echo "install_test: the static link still needs a libloom shared library"; exit 1
  fi
  out=$(LOOM_PTHREAD_STATS=1 "$tmp/plain-static" 2> "$tmp/plain-static.err")
  [ "$out" = "42" ] && grep -qx 'loom: 1 threads ran as fibres' "$tmp/plain-static.err" \
    || { echo "install_test: the program linked with libloom-pthread.a did not run its thread as a fibre"; cat "$tmp/plain-static.err"; exit 1; }
fi
# A CMake consumer project: find_package(loom) with the prefix on
# CMAKE_PREFIX_PATH, a C++ program on loom::loom and the plain pthread
# program on loom::pthread (its thread a fibre).
mkdir -p "$tmp/consumer"
cp "$tmp/user.cpp" "$tmp/plain.c" "$tmp/consumer/"
cat > "$tmp/consumer/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.20)
project(consumer LANGUAGES C CXX)
find_package(loom 0.1 REQUIRED)
add_executable(user user.cpp)
target_compile_features(user PRIVATE cxx_std_17)
target_link_libraries(user PRIVATE loom::loom)
add_executable(plain plain.c)
target_link_libraries(plain PRIVATE loom::pthread)
CMAKE
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/consumer.log" 2>&1 &&
  cmake --build "$tmp/consumer/build" >> "$tmp/consumer.log" 2>&1 \
  || { echo "install_test: the CMake consumer project does not build:"; cat "$tmp/consumer.log"; exit 1; }
[ "$("$tmp/consumer/build/user")" = "42" ] || { echo "install_test: the CMake consumer (loom::loom) failed"; exit 1; }
out=$(LOOM_PTHREAD_STATS=1 "$tmp/consumer/build/plain" 2> "$tmp/consumer-plain.err")
[ "$out" = "42" ] && grep -qx 'loom: 1 threads ran as fibres' "$tmp/consumer-plain.err" \
  || { echo "install_test: the CMake consumer on loom::pthread did not run its thread as a fibre"; cat "$tmp/consumer-plain.err"; exit 1; }
echo "install_test: ok"
