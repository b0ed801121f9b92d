#!/usr/bin/env bash
# locks.sh LIB PROG — locks.c under LD_PRELOAD=LIB on 2 processors: the
# fibre listing names what each thread waits on, by kind, and the holder of
# the mutex it waits for, so the lock cycle is there to read.
set -uo pipefail
lib=$1 prog=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
LD_PRELOAD=$lib LOOM_PROCESSORS=2 timeout 60 "$prog" > "$tmp/out" 2> "$tmp/err"
rc=$?
fail=0
[ $rc -eq 0 ] || { echo "locks: the program failed ($rc)"; cat "$tmp/err"; fail=1; }
id_of() { awk -v n="$1" '$2 == n { print $1 }' "$tmp/out"; }
left=$(id_of left) right=$(id_of right)
check() {  # pattern what
  grep -Eq "$1" "$tmp/out" || { echo "locks: $2: no line matching /$1/"; fail=1; }
}
check "^ +$left +left +blocked: mutex 0x[0-9a-f]+ \(b\) held by fibre $right \"right\"[ ,]" "left waits for right's mutex, b"
check "^ +$right +right +blocked: mutex 0x[0-9a-f]+ \(a\) held by fibre $left \"left\"[ ,]" "right waits for left's mutex, a"
check "^ +[0-9]+ +errchk +blocked: mutex 0x[0-9a-f]+ \(e\) held by fibre 1 \"main\"[ ,]" "an error-checking mutex main holds"
check "^loom: deadlock: fibre [0-9]+ \"(left|right)\" waits for mutex 0x[0-9a-f]+ \([ab]\) held by fibre" "the cycle, said after the table"
check "^ +[0-9]+ +cv-waiter +blocked: condvar 0x" "a condition variable"
check "^ +[0-9]+ +rw-writer +blocked: rwlock \(write\) 0x" "a rwlock"
check "^ +[0-9]+ +sem-waiter +blocked: semaphore 0x" "a semaphore"
check "^ +[0-9]+ +bar-waiter +blocked: barrier 0x" "a barrier"
check "^locks: done$" "the program's end"
[ $fail -eq 0 ] && echo "locks: the listing names every wait's kind and each mutex's holder" || cat "$tmp/out"
exit $fail
