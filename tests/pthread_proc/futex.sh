#!/usr/bin/env bash
# futex.sh LIB PROG LINKED — futex_waits.cpp as is, under LD_PRELOAD=LIB and
# linked with libloom-pthread (LINKED), on 2 processors: same stdout as the
# glibc run, and under loom at most 8 kernel threads while 1,000 threads
# wait (the glibc run has one per thread): the two processors, the monitor,
# loom-proc (the monitor's /proc reader) and the spares the monitor may
# start on a loaded machine, up to 4 (the bound was 4 before loom-proc: a
# spare under `ctest -j 2` made it 5 once; at 5, two spares made it 6 once
# in 43 runs beside a build). Waits that held kernel threads would show
# about 1,000.
set -uo pipefail
lib=$1 prog=$2 linked=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LOOM_PROCESSORS=2
timeout 120 "$prog" > "$tmp/glibc" 2> /dev/null || { echo "futex: glibc run failed"; exit 1; }
for how in preload link; do
  if [ $how = preload ]; then
    LD_PRELOAD=$lib timeout 120 "$prog" > "$tmp/loom" 2> "$tmp/err"
  else
    timeout 120 "$linked" > "$tmp/loom" 2> "$tmp/err"
  fi
  rc=$?
  cat "$tmp/loom"
  [ $rc -eq 0 ] || { cat "$tmp/err"; echo "futex: $how run failed ($rc)"; exit 1; }
  diff -u "$tmp/glibc" "$tmp/loom" || { echo "futex: $how output differs"; exit 1; }
  n=$(sed -n 's/^futex_waits: at most \([0-9]*\) tasks$/\1/p' "$tmp/err")
  [ -n "$n" ] && [ "$n" -le 8 ] || { cat "$tmp/err"; echo "futex: $how had ${n:-?} kernel threads, expected <= 8"; exit 1; }
  echo "futex: $how ok ($n kernel threads)"
done
