#!/usr/bin/env bash
# run_preload.sh PROG LIB — PROG (a plain glibc binary) run as is and with
# LD_PRELOAD=LIB: identical stdout; the preload run shown to have run its
# threads as fibres (LOOM_PTHREAD_STATS) and to have waited through loom's
# I/O (the program's own probe line on stderr).
set -euo pipefail
prog=$1 lib=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$prog" > "$tmp/glibc" 2> "$tmp/glibc.err" || { cat "$tmp/glibc.err"; echo "run_preload: glibc run failed"; exit 1; }
LD_PRELOAD=$lib LOOM_PTHREAD_STATS=1 "$prog" > "$tmp/loom" 2> "$tmp/loom.err" ||
  { cat "$tmp/loom.err"; echo "run_preload: preload run failed"; exit 1; }
if ! diff -u "$tmp/glibc" "$tmp/loom"; then echo "run_preload: outputs differ"; exit 1; fi
grep -q "WRONG\|EARLY" "$tmp/glibc" && { cat "$tmp/glibc"; echo "run_preload: wrong results"; exit 1; }
fibres=$(sed -n 's/^loom: \([0-9]*\) threads ran as fibres.*/\1/p' "$tmp/loom.err")
[ -n "$fibres" ] && [ "$fibres" -gt 0 ] || { cat "$tmp/loom.err"; echo "run_preload: no thread ran as a fibre"; exit 1; }
grep -q "^probe: loom blocks=[1-9]" "$tmp/loom.err" || { cat "$tmp/loom.err"; echo "run_preload: no wait went through loom"; exit 1; }
cat "$tmp/loom"
echo "run_preload: $(basename "$prog") ok ($fibres threads on fibres)"
