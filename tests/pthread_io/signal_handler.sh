#!/usr/bin/env bash
# signal_handler.sh GLIBC LIB LINK — signal_handler.c (GLIBC: its plain
# glibc build; LINK: the same source linked with -lloom-pthread) run as is,
# under LD_PRELOAD=LIB and linked, on one processor: the same stdout, the
# loom runs on fibres (LOOM_PTHREAD_STATS), and the handler's sleeps and
# write blocked the kernel thread as glibc's do — the ticker, on the same
# one processor, did not run while they waited (the program's probe line).
set -euo pipefail
glibc=$1 lib=$2 link=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LOOM_PROCESSORS=1
# Without the monitor (LOOM_HANDOFF_US=0): it would send a spare to run the
# ticker while the handler's call blocks the kernel thread, as glibc runs
# it on a thread of its own; the probe is there to show the handler's path.
export LOOM_HANDOFF_US=0
timeout 60 "$glibc" > "$tmp/glibc" 2> "$tmp/glibc.err" || { cat "$tmp/glibc.err"; echo "signal_handler: glibc run failed"; exit 1; }
grep -q FAILED "$tmp/glibc" && { cat "$tmp/glibc"; echo "signal_handler: glibc run failed"; exit 1; }
check() {  # way
  local way=$1
  if ! diff -u "$tmp/glibc" "$tmp/$way"; then cat "$tmp/$way.err"; echo "signal_handler: $way: output differs"; exit 1; fi
  fibres=$(sed -n 's/^loom: \([0-9]*\) threads ran as fibres.*/\1/p' "$tmp/$way.err")
  [ -n "$fibres" ] && [ "$fibres" -gt 0 ] || { cat "$tmp/$way.err"; echo "signal_handler: $way: no thread ran as a fibre"; exit 1; }
  grep -qx "probe: ticks while the handler waited: nanosleep 0, usleep 0, write 0" "$tmp/$way.err" ||
    { cat "$tmp/$way.err"; echo "signal_handler: $way: the handler's calls let other fibres run (the fibre's path)"; exit 1; }
  echo "signal_handler: $way: same output, $fibres threads on fibres, the handler's calls blocked the kernel thread"
}
LD_PRELOAD=$lib LOOM_PTHREAD_STATS=1 timeout 60 "$glibc" > "$tmp/preload" 2> "$tmp/preload.err" || true
check preload
LOOM_PTHREAD_STATS=1 timeout 60 "$link" > "$tmp/link" 2> "$tmp/link.err" || true
check link
cat "$tmp/glibc"
echo "signal_handler: ok"
