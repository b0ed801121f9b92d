#!/usr/bin/env bash
# memcached-port/build.sh BUILD_DIR LOOM_INCLUDE LIBLOOM_A
# Builds the three servers from Debian's memcached 1.6.18 (fetch.sh), each
# configured as debian/rules does (--enable-sasl --enable-tls, the
# hardening=+all build flags of dpkg-buildflags), out of tree:
#   BUILD_DIR/vanilla/   the pristine tree            -> bin/memcached-vanilla
#   BUILD_DIR/loom/      patched tree, fibres (loom)  -> bin/loom-memcached
#   BUILD_DIR/tpc/       patched tree, kernel threads -> bin/memcached-tpc
# and each one's memcached-debug (-DMEMCACHED_DEBUG: the debug commands and
# options upstream's t/*.t use) as bin/<name>-debug.
# The patched tree is BUILD_DIR/memcached-1.6.18-port: a copy of the
# pristine one with patches/series applied and src/ linked in.
set -euo pipefail

build=${1:?usage: build.sh BUILD_DIR LOOM_INCLUDE LIBLOOM_A}
loom_inc=$(cd "${2:?}" && pwd)
loom_lib=$(cd "$(dirname "${3:?}")" && pwd)/$(basename "$3")
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build/bin"
build=$(cd "$build" && pwd)
jobs=${MC_PORT_JOBS:-2}

"$here/fetch.sh" "$build"
src=$build/memcached-1.6.18
port=$build/memcached-1.6.18-port

# Debian's flags (debian/rules: export DEB_BUILD_MAINT_OPTIONS = hardening=+all).
eval "$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=sh)"
configure_flags=(--prefix=/usr --enable-sasl --enable-tls)

configure() {  # configure DIR SRC
  mkdir -p "$1"
  if [ ! -f "$1/Makefile" ]; then
    (cd "$1" && "$2/configure" "${configure_flags[@]}" >configure.log 2>&1) ||
      { echo "build.sh: configure failed in $1 (see $1/configure.log)" >&2; exit 1; }
  fi
}

# make_var DIR NAME: a variable as configure wrote it into DIR/Makefile.
make_var() { sed -n "s/^$2 = //p" "$1/Makefile"; }

install_bin() {  # install_bin FILE NAME: replace only when changed
  if ! cmp -s "$1" "$build/bin/$2"; then cp "$1" "$build/bin/$2.tmp" && mv "$build/bin/$2.tmp" "$build/bin/$2"; fi
}

# ---- memcached-vanilla ---------------------------------------------------
configure "$build/vanilla" "$src"
make -C "$build/vanilla" -j"$jobs" memcached memcached-debug >"$build/vanilla/make.log" 2>&1 ||
  { tail -30 "$build/vanilla/make.log" >&2; echo "build.sh: memcached-vanilla failed" >&2; exit 1; }
install_bin "$build/vanilla/memcached" memcached-vanilla
install_bin "$build/vanilla/memcached-debug" memcached-vanilla-debug
echo "memcached-port: $build/bin/memcached-vanilla"
[ "${MC_PORT_VANILLA_ONLY:-}" = 1 ] && exit 0

# ---- the patched tree ----------------------------------------------------
stamp=$(cat "$here/patches/series" "$here"/patches/*.patch | sha256sum | cut -d' ' -f1)
if [ ! -f "$port/.series" ] || [ "$(cat "$port/.series")" != "$stamp" ]; then
  rm -rf "$port" "$build/loom" "$build/tpc"
  cp -a "$src" "$port"
  while read -r p; do
    case "$p" in ''|'#'*) continue ;; esac
    patch -d "$port" -p1 --quiet --no-backup-if-mismatch <"$here/patches/$p" ||
      { echo "build.sh: patch $p does not apply" >&2; exit 1; }
  done <"$here/patches/series"
  echo "$stamp" >"$port/.series"
fi

# Our own files are compiled beside memcached's with the same flags and
# config.h, and linked in through LIBS (memcached's Makefile.am is left as
# it is, so no autoreconf).
port_build() {  # port_build DIR NAME EXTRA_CFLAGS EXTRA_LIBS
  local dir=$1 name=$2 extra_cflags=$3 extra_libs=$4 cflags libs objs=() f o
  configure "$dir" "$port"
  cflags="$(make_var "$dir" CFLAGS) -I$here/src $extra_cflags"
  libs="$(make_var "$dir" LIBS)"
  for f in "$here"/src/*.c; do
    o=$dir/port-$(basename "${f%.c}").o
    gcc $cflags $CPPFLAGS -DHAVE_CONFIG_H -I"$dir" -I"$port" -c "$f" -o "$o" ||
      { echo "build.sh: $f failed for $name" >&2; exit 1; }
    objs+=("$o")
  done
  rm -f "$dir/memcached" "$dir/memcached-debug"
  make -C "$dir" -j"$jobs" memcached memcached-debug CFLAGS="$cflags" LIBS="${objs[*]} $libs $extra_libs" >"$dir/make.log" 2>&1 ||
    { tail -30 "$dir/make.log" >&2; echo "build.sh: $name failed" >&2; exit 1; }
  install_bin "$dir/memcached" "$name"
  install_bin "$dir/memcached-debug" "$name-debug"
  echo "memcached-port: $build/bin/$name"
}

# config.h defines _GNU_SOURCE, but after the forced header read the system
# headers: give it on the command line too (loom/pthread.h says why).
loom_cflags="-D_GNU_SOURCE=1 -I$loom_inc -include loom/pthread.h -DLOOM_PTHREAD_IO -DMC_PORT_LOOM"
# libloom.a: the binary runs without LD_LIBRARY_PATH or an rpath into build/.
loom_libs="$loom_lib -lboost_context -lhwloc -luring -lstdc++ -lm"
port_build "$build/loom" loom-memcached "$loom_cflags" "$loom_libs"
port_build "$build/tpc" memcached-tpc "-DMC_PORT_KTHREADS" ""
