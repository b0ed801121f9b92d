#!/usr/bin/env bash
# real_programs.sh LIB — Debian's programs that wait or spin where loom cannot
# see (issue 31), never built for loom: each run plainly, then with
# LD_PRELOAD=LIB on one processor and on the default number (RUNS times
# each, default 2), every run bounded in time (REAL_TIMEOUT seconds, default
# 60; a plain run takes a few seconds): standard output and exit status must
# be the plain run's, and the preloaded run must report (LOOM_PTHREAD_STATS)
# at least the threads the program is known to make run as fibres, so that a
# run whose threads fell through to glibc's, or that made none, cannot pass.
#
#   convert    ImageMagick 6 (OpenMP, 4 threads: libgomp waits on its own
#              inline futex calls) blurs, sharpens and resizes a generated
#              image; the output's checksum
#   numpy      np.linalg.solve and a product of 600x600 matrices on the
#              pthread OpenBLAS (forced by the library path, 4 threads set
#              through its own call: its workers busy-wait for work); a
#              rounded checksum
#   mariadb    mariadbd (InnoDB's io_uring thread waits in io_uring_enter,
#              made by liburing) in a private data directory on a unix
#              socket, as the user running the test: 4 concurrent clients
#              (tables, inserts, selects, transactions committed and rolled
#              back, a row they all update), then a clean shutdown; the
#              clients' results and the server's exit status
#
# Without the monitor (before issue 31, or with LOOM_HANDOFF_US=0), on one
# processor all three hang (convert asleep at 0 % CPU, numpy spinning at
# 100 %, mariadbd never answers); on two, convert and numpy too (four
# threads). A hang is killed after REAL_TIMEOUT seconds and
# described by its kernel threads (bounded.sh). A program that is not
# installed is reported and skipped; scripts/deps.sh test installs them all.
set -uo pipefail
lib=$1
runs=${RUNS:-2}
limit=${REAL_TIMEOUT:-60}
tmp=$(mktemp -d)
server=  # mariadbd's PID while one runs
cleanup() {
  [ -n "$server" ] && kill -KILL "$server" 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
. "$(dirname "$0")/bounded.sh"
unset LOOM_PROCESSORS
fail=0
ran=0

# The processor counts each program is run on preloaded ("" is the default).
settings=(1 "")
setting_name() { echo "LOOM_PROCESSORS=${1:-default}"; }
loom_env() {  # setting: env(1) arguments for a preloaded run
  if [ -n "$1" ]; then echo "LOOM_PROCESSORS=$1"; else echo "-u LOOM_PROCESSORS"; fi
}

# fibres_ran ERRFILE: the count LOOM_PTHREAD_STATS printed at exit, or "".
fibres_ran() { sed -n 's/^loom: \([0-9]*\) threads ran as fibres$/\1/p' "$1" | tail -1; }

# summary FILE: a program's output in a line: its text, or its size and
# checksum if it is not text.
summary() {
  if ! LC_ALL=C grep -q '[^[:print:][:space:]]' "$1"; then head -c 300 "$1" | tr '\n' ' '; else echo "$(wc -c < "$1") bytes, sha256 $(sha256sum < "$1" | cut -c1-16)..."; fi
}

# check NAME FIBRES_MIN COMMAND...: COMMAND plainly, then preloaded.
check() {
  local name=$1 min=$2
  shift 2
  local start=$SECONDS
  bounded "$limit" "$tmp/plain" "$tmp/plain.err" "$@"
  local want=$?
  if [ $want -eq 124 ]; then
    cat "$tmp/plain.err"
    echo "real_programs: $name: the plain run did not finish in $limit s"
    fail=1
    return
  fi
  echo "real_programs: $name: plain run $((SECONDS - start)) s, exit $want: $(summary "$tmp/plain")"
  local p i rc n bad
  for p in "${settings[@]}"; do
    bad=0
    for ((i = 0; i < runs; i++)); do
      start=$SECONDS
      # shellcheck disable=SC2046  # loom_env's words are env's arguments
      bounded "$limit" "$tmp/loom" "$tmp/loom.err" \
        env $(loom_env "$p") LD_PRELOAD="$lib" LOOM_PTHREAD_STATS=1 "$@"
      rc=$?
      n=$(fibres_ran "$tmp/loom.err")
      if [ $rc -eq 124 ]; then
        echo "real_programs: $name, $(setting_name "$p"): hung (killed after $limit s):"
        tail -20 "$tmp/loom.err"
        bad=$((bad + 1))
      elif [ $rc -ne $want ] || ! cmp -s "$tmp/plain" "$tmp/loom" || [ -z "$n" ] || [ "$n" -lt "$min" ]; then
        echo "real_programs: $name, $(setting_name "$p"): differs (exit $want plain, $rc preloaded;" \
          "${n:-no} threads ran as fibres, at least $min expected):"
        diff "$tmp/plain" "$tmp/loom" | head -5
        tail -5 "$tmp/loom.err"
        bad=$((bad + 1))
      else
        echo "real_programs: $name, $(setting_name "$p"): as plain, $n threads as fibres ($((SECONDS - start)) s)"
      fi
      [ $bad -ne 0 ] && break  # a hang costs REAL_TIMEOUT: once is enough
    done
    [ $bad -ne 0 ] && fail=1
  done
  ran=$((ran + 1))
}

# ---- ImageMagick: OpenMP ------------------------------------------------------------------------------
# Debian's ImageMagick 6 by its own name (/usr/local/bin/convert may be
# something else). It gives a loop more than one thread only for a long
# enough image (its rows or columns, scaled towards 8192: 1600x1200 runs
# on one), so the image is tall; MAGICK_THREAD_LIMIT and OMP_NUM_THREADS make
# the team 4 threads (3 made by libgomp) whatever the CPUs.
if command -v convert-im6.q16 > /dev/null; then
  convert-im6.q16 -size 400x8400 -seed 31 plasma:fractal -depth 8 "$tmp/in.ppm"
  check "convert (OpenMP, 4 threads)" 3 env MAGICK_THREAD_LIMIT=4 OMP_NUM_THREADS=4 \
    convert-im6.q16 "$tmp/in.ppm" -blur 0x6 -sharpen 0x1 -resize 60% ppm:-
else
  echo "real_programs: convert: convert-im6.q16 (imagemagick-6.q16) not installed, skipped"
fi

# ---- numpy on the pthread OpenBLAS ------------------------------------------------------------------------
# The library path makes the pthread variant the one loaded whatever the
# alternatives say; the script prints which variant runs and how many
# threads, so a run on another one differs.
blasdir=$(ls -d /usr/lib/*/openblas-pthread 2> /dev/null | head -1)
if ! /usr/bin/python3 -c 'import numpy' 2> /dev/null; then
  echo "real_programs: numpy: python3-numpy not installed, skipped"
elif [ -z "$blasdir" ] || ! ls "$blasdir"/libopenblas*.so* > /dev/null 2>&1; then
  echo "real_programs: numpy: libopenblas0-pthread not installed, skipped"
else
  cat > "$tmp/solve.py" << 'PY'
import ctypes
import numpy as np
blas = [p for p in open('/proc/self/maps').read().split() if '/libopenblas' in p]
if not blas:
    raise SystemExit('numpy: no OpenBLAS loaded')
ob = ctypes.CDLL(blas[0])
ob.openblas_set_num_threads(4)
print('openblas', ['sequential', 'pthread', 'openmp'][ob.openblas_get_parallel()], ob.openblas_get_num_threads(), 'threads')
rng = np.random.default_rng(31)
n = 600
a = rng.standard_normal((n, n)) + n ** 0.5 * np.eye(n)
b = rng.standard_normal((n, 8))
x = np.linalg.solve(a, b)
print('solve', np.allclose(a @ x, b), '%.6e' % np.abs(x).sum())
print('gemm', '%.6e' % np.trace(a @ a.T))
PY
  check "numpy (OpenBLAS pthread, 4 threads)" 3 env LD_LIBRARY_PATH="$blasdir" OPENBLAS_NUM_THREADS=4 \
    /usr/bin/python3 "$tmp/solve.py"
  grep -q '^openblas pthread 4 threads$' "$tmp/plain" ||
    { echo "real_programs: numpy: the plain run did not run the pthread OpenBLAS on 4 threads"; fail=1; }
fi

# ---- mariadb-server -------------------------------------------------------------------------------------
mariadbd=$(command -v mariadbd || ls /usr/sbin/mariadbd 2> /dev/null)
if [ -z "$mariadbd" ] || ! command -v mariadb-install-db > /dev/null || ! command -v mariadb > /dev/null ||
  ! command -v mariadb-admin > /dev/null; then
  echo "real_programs: mariadb: mariadb-server or mariadb-client not installed, skipped"
else
  . "$(dirname "$0")/mariadb_workload.sh"
  mariadb_check
fi

echo "real_programs: $ran programs run"
exit $fail
