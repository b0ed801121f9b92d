#!/usr/bin/env bash
# close_in_handler.sh GLIBC LIB — close_in_handler.c run as is and under
# LD_PRELOAD=LIB on one processor: the same stdout, its threads on fibres,
# and the handler's close let no other fibre run (the probe line is 0).
set -euo pipefail
glibc=$1 lib=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LOOM_PROCESSORS=1
timeout 60 "$glibc" > "$tmp/glibc" 2> "$tmp/glibc.err" || { cat "$tmp/glibc.err"; echo "close_in_handler: glibc run failed"; exit 1; }
rc=0
LD_PRELOAD=$lib LOOM_PTHREAD_STATS=1 timeout 60 "$glibc" > "$tmp/loom" 2> "$tmp/loom.err" || rc=$?
[ "$rc" = 0 ] || { cat "$tmp/loom" "$tmp/loom.err"; echo "close_in_handler: preload run failed ($rc)"; exit 1; }
if ! diff -u "$tmp/glibc" "$tmp/loom"; then cat "$tmp/loom.err"; echo "close_in_handler: outputs differ"; exit 1; fi
fibres=$(sed -n 's/^loom: \([0-9]*\) threads ran as fibres.*/\1/p' "$tmp/loom.err")
[ -n "$fibres" ] && [ "$fibres" -gt 0 ] || { cat "$tmp/loom.err"; echo "close_in_handler: no thread ran as a fibre"; exit 1; }
grep -qx "probe: most ticks while the handler closed: 0" "$tmp/loom.err" ||
  { cat "$tmp/loom.err"; echo "close_in_handler: the handler's close let other fibres run"; exit 1; }
cat "$tmp/loom"
echo "close_in_handler: ok ($fibres threads on fibres; the close in the handler switched no fibre)"
