#!/usr/bin/env bash
# gdb_test.sh PROBE SCRIPT — scripts/gdb/loom.py against a live process and
# against its core dump: `info fibres` lists the blocked fibre with what it
# waits on (and the mutex's holder), and `fibre bt N` walks its stack through
# the function it blocked in. The probe (tests/probe.cpp, gdb-subject) blocks
# a fibre named "blocker" on a mutex main holds inside
# block_in_named_function, and one named "offloader" in a call made on the
# offload cluster (listed blocked at home, not ready or running elsewhere).
set -u
probe=$1 script=$2
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail=0
check() {  # file pattern what
  if ! grep -Eq "$2" "$1"; then
    echo "gdb_test: $3: no line matching /$2/ in:"; cat "$1"; fail=1
  fi
}

LOOM_STACK_WATERMARK=1 "$probe" gdb-subject > "$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q '^ready' "$tmp/out" && break; sleep 0.1; done
grep -q '^ready' "$tmp/out" || { echo "gdb_test: the subject did not start"; cat "$tmp/out"; exit 1; }

gdb -nx -batch -p "$pid" -x "$script" -ex "info fibres" > "$tmp/list" 2>&1
id=$(awk '$2 == "blocker" { print $1 }' "$tmp/list")
[ -n "$id" ] || { echo "gdb_test: no fibre named blocker in the live listing"; cat "$tmp/list"; exit 1; }
gdb -nx -batch -p "$pid" -x "$script" -ex "fibre bt $id" -ex "fibre bt 999999" -ex "fibre bt x" \
    -ex "gcore $tmp/core" > "$tmp/live" 2>&1

check "$tmp/list" "^$id +blocker +blocked: mutex 0x[0-9a-f]+ held by fibre 1 \"main\" " "live: the blocker, its mutex and its holder"
check "$tmp/list" "^$id +blocker +.* 64K +[0-9.]+K +[0-9.]+K *$" "live: the blocker's stack, used and deepest, as the listing's columns"
check "$tmp/list" "^[0-9]+ +offloader +blocked: a function \(loom::offload\), offloaded +0 " \
      "live: a fibre in an offloaded call, at home"
check "$tmp/list" "^1 +main +blocked: sleep" "live: main, asleep"
check "$tmp/live" "in .*block_in_named_function at .*probe.cpp" "live: fibre bt through the function it blocked in"
check "$tmp/live" "in loom::Mutex::lock" "live: fibre bt shows the mutex's lock"
check "$tmp/live" "no live fibre 999999" "live: an unknown fibre id is refused"
check "$tmp/live" "usage: fibre bt N" "live: a malformed id gets the usage"
[ -s "$tmp/core" ] || { echo "gdb_test: gcore made no core file"; cat "$tmp/live"; exit 1; }

gdb -nx -batch "$probe" "$tmp/core" -x "$script" -ex "info fibres" -ex "fibre bt $id" > "$tmp/dead" 2>&1
check "$tmp/dead" "^$id +blocker +blocked: mutex 0x[0-9a-f]+ held by fibre 1 \"main\" " "core: the blocker, its mutex and its holder"
check "$tmp/dead" "^[0-9]+ +offloader +blocked: a function \(loom::offload\), offloaded +0 " "core: the offloaded call"
check "$tmp/dead" "in .*block_in_named_function at .*probe.cpp" "core: fibre bt through the function it blocked in"
[ $fail = 0 ] && echo "gdb_test: live and core dump: listing and backtrace as expected"
exit $fail
