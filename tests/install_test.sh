#!/usr/bin/env bash
# Installs the build into a scratch prefix and builds a program against it
# with pkg-config only; also checks that every public header compiles alone.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name loom.pc)
[ -n "$pc" ] || { echo "install_test: no loom.pc installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")

for h in "$src"/include/loom/*.hpp; do
  echo "#include <loom/$(basename "$h")>" > "$tmp/one.cpp"
  g++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror $(pkg-config --cflags loom) "$tmp/one.cpp" \
    || { echo "install_test: $(basename "$h") does not compile on its own"; exit 1; }
done

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
# The static library links too.
g++ -std=c++17 "$tmp/user.cpp" -o "$tmp/user-static" $(pkg-config --cflags loom) "$libdir/libloom.a" -lboost_context -pthread
[ "$("$tmp/user-static")" = "42" ] || { echo "install_test: static build failed"; exit 1; }
echo "install_test: ok"
