#!/usr/bin/env bash
# Installs the Debian packages loom needs, only those missing.
#   scripts/deps.sh build   compiler, Boost.Context, hwloc, liburing; memcached-port's
#                           fetch (curl, dpkg-source, xz, patch) and Debian's
#                           memcached build-depends (libevent, SASL, OpenSSL)
#   scripts/deps.sh test    build + GoogleTest, valgrind, gdb, curl, python3, wrk, zstd, xz, pbzip2 and
#                           lbzip2 (real threaded programs run on libloom-pthread), perl, procps and
#                           ripgrep (programs whose state is in thread-locals: tests/tls), git and
#                           redis (tests/pthread_proc); ImageMagick (OpenMP), numpy on the pthread
#                           OpenBLAS and mariadb server and client (programs that block or spin where
#                           loom cannot see: tests/handoff); memcached's
#                           t/*.t modules, Debian's memcached, libmemcached and pymemcache
#                           (tests/memcached); Go (the lock benchmark's peer in the
#                           performance gate, `make perf-gate`, the end of `make check`);
#                           glibc-source (glibc 2.36's own thread and signal tests: tests/glibc);
#                           lmdb-utils (robust process-shared mutexes: tests/pthread_proc's lmdb)
#   scripts/deps.sh bench   test + Boost.Fiber, wrk, nginx, Go, memcached, gnuplot,
#                           clang with libFuzzer (make fuzz)
# Idempotent: a second run installs nothing and does not touch the network.
set -euo pipefail

group=${1:-test}
build=(g++ make cmake pkg-config libboost-context-dev libhwloc-dev liburing-dev
       curl ca-certificates dpkg-dev xz-utils patch libevent-dev libsasl2-dev libssl-dev)
test=("${build[@]}" libgtest-dev googletest valgrind gdb curl python3 libboost-fiber-dev wrk zstd xz-utils pbzip2 lbzip2
      perl procps ripgrep
      libio-socket-ssl-perl sasl2-bin memcached libmemcached-tools libmemcached-dev python3-pymemcache
      git redis-server redis-tools golang-go
      imagemagick python3-numpy libopenblas0-pthread mariadb-server mariadb-client
      glibc-source lmdb-utils)
bench=("${test[@]}" wrk nginx-light golang-go memcached libmemcached-tools gnuplot-nox clang libclang-rt-14-dev)

case "$group" in
  build) want=("${build[@]}") ;;
  test) want=("${test[@]}") ;;
  bench|all) want=("${bench[@]}") ;;
  *) echo "deps.sh: unknown group '$group' (build, test, bench)" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps.sh: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
