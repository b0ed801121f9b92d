#!/usr/bin/env bash
# stall.sh LIB PROG — wait_child.c under LD_PRELOAD=LIB with the stall
# detector on (LOOM_STALL_MS=100, 2 processors): main() waiting for its
# child in waitpid and in pthread_join is not reported; the spinner is,
# by name; no call is named by a bare number.
set -uo pipefail
lib=$1 prog=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
LD_PRELOAD=$lib LOOM_PROCESSORS=2 LOOM_STALL_MS=100 timeout 60 "$prog" > "$tmp/out" 2> "$tmp/err"
rc=$?
fail=0
[ $rc -eq 0 ] || { echo "stall: the program failed ($rc)"; fail=1; }
grep -q '^joined the spinner$' "$tmp/out" || { echo "stall: the program did not finish"; fail=1; }
grep -q '^loom: stall: fibre [0-9]* "spinner" has held processor' "$tmp/err" ||
  { echo "stall: no report of the spinner (is the detector on?)"; fail=1; }
if grep '^loom: stall:' "$tmp/err" | grep -v '"spinner"' | grep -q .; then
  echo "stall: reported what is no stall:"; grep '^loom: stall:' "$tmp/err" | grep -v '"spinner"'; fail=1
fi
if grep -q 'system call [0-9]' "$tmp/err"; then echo "stall: a call named by its number"; fail=1; fi
cat "$tmp/out"
[ $fail -eq 0 ] && echo "stall: main's waits not reported, the spinner reported" || cat "$tmp/err"
exit $fail
