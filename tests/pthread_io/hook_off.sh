#!/usr/bin/env bash
# hook_off.sh PROG LIB — hook_off.c three ways: glibc; LD_PRELOAD (loom's
# calls: the poll waited through loom, the socket's flags untouched);
# LD_PRELOAD with LOOM_HOOK_IO=0 (the system's calls: nothing of loom's I/O
# moves), spelt every way a flag can be.
set -euo pipefail
prog=$1 lib=$2
expect() {  # NAME OUTPUT PATTERN
  grep -qx "$3" <<< "$2" || { echo "hook_off: $1: expected '$3' in:"; echo "$2"; exit 1; }
}
out=$("$prog")
expect glibc "$out" "poll 0, program sees O_NONBLOCK 0, underneath 0"
expect glibc "$out" "no loom"
out=$(LD_PRELOAD=$lib "$prog")
expect preload "$out" "poll 0, program sees O_NONBLOCK 0, underneath 0"
expect preload "$out" "loom blocks [1-9][0-9]*"
# Every spelling of "off" (runtime/base/options.hpp: one parser for every flag).
for off in 0 off OFF false No; do
  out=$(LD_PRELOAD=$lib LOOM_HOOK_IO=$off "$prog")
  expect LOOM_HOOK_IO=$off "$out" "poll 0, program sees O_NONBLOCK 0, underneath 0"
  expect LOOM_HOOK_IO=$off "$out" "loom blocks 0"
done
# LOOM_PTHREAD_STATS, on and off in words.
err=$(LD_PRELOAD=$lib LOOM_PTHREAD_STATS=off "$prog" 2>&1 >/dev/null)
! grep -q "threads ran as fibres" <<< "$err" || { echo "hook_off: LOOM_PTHREAD_STATS=off printed statistics"; exit 1; }
err=$(LD_PRELOAD=$lib LOOM_PTHREAD_STATS=Yes "$prog" 2>&1 >/dev/null)
grep -q "threads ran as fibres" <<< "$err" || { echo "hook_off: LOOM_PTHREAD_STATS=Yes printed nothing"; exit 1; }
echo "hook_off: ok"
