#!/usr/bin/env bash
# unseen_wait.sh LIB PROG MODE WAITERS [full] — unseen_wait.c (a glibc binary) run
# as is, then RUNS times (default 3) with LD_PRELOAD=LIB on LOOM_PROCESSORS
# processors (the environment's), each run bounded by HANDOFF_TIMEOUT
# seconds (default 20; the program takes milliseconds): the preloaded runs
# must print what the plain run prints, exit 0 as it does, and report
# (LOOM_PTHREAD_STATS) WAITERS + 1 threads run as fibres, so that a run
# whose threads fell through to glibc's cannot pass. A run that hangs is a
# failure, described by its kernel threads' states (bounded.sh).
set -uo pipefail
lib=$1 prog=$2 mode=$3 waiters=$4
extra=(${5:+"$5"})  # full: the descriptor table filled first (unseen_wait.c)
runs=${RUNS:-3}
limit=${HANDOFF_TIMEOUT:-20}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/bounded.sh"
what="$mode, $waiters waiter(s)${5:+, $5 descriptor table}, LOOM_PROCESSORS=${LOOM_PROCESSORS:-default}"

bounded "$limit" "$tmp/plain" "$tmp/plain.err" "$prog" "$mode" "$waiters" "${extra[@]}"
rc=$?
if [ $rc -ne 0 ]; then
  cat "$tmp/plain" "$tmp/plain.err"
  echo "unseen_wait: $what: the plain run failed ($rc)"
  exit 1
fi
cat "$tmp/plain"
for ((i = 1; i <= runs; i++)); do
  start=$SECONDS
  bounded "$limit" "$tmp/loom" "$tmp/loom.err" env LD_PRELOAD="$lib" LOOM_PTHREAD_STATS=1 "$prog" "$mode" "$waiters" "${extra[@]}"
  rc=$?
  if [ $rc -eq 124 ]; then
    cat "$tmp/loom" "$tmp/loom.err"
    echo "unseen_wait: $what: preloaded run $i hung (killed after $limit s)"
    exit 1
  fi
  n=$(sed -n 's/^loom: \([0-9]*\) threads ran as fibres$/\1/p' "$tmp/loom.err" | tail -1)
  if [ $rc -ne 0 ] || ! cmp -s "$tmp/plain" "$tmp/loom" || [ -z "$n" ] || [ "$n" -lt $((waiters + 1)) ]; then
    diff "$tmp/plain" "$tmp/loom"
    sed 's/^/  stderr: /' "$tmp/loom.err" | head -40
    echo "unseen_wait: $what: preloaded run $i differs (exit $rc, ${n:-no} threads as fibres, $((waiters + 1)) made)"
    exit 1
  fi
  echo "unseen_wait: preloaded run $i as plain, $n threads as fibres ($((SECONDS - start)) s)"
done
echo "unseen_wait: $what: ok"
