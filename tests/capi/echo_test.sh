#!/usr/bin/env bash
# echo_test.sh SERVER CLIENT [loom] — starts an echo server on an ephemeral
# port of 127.0.0.1, runs the client against it, stops the server. With
# `loom`, also checks that the server's socket calls are loom's (nm).
set -euo pipefail
server=$1 client=$2
tmp=$(mktemp -d)
# Made before the server starts: the background job opens it only when it
# runs, and sed's first look could come first (set -e: a fresh clone's make
# check failed so once).
: > "$tmp/out"
"$server" 0 > "$tmp/out" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do
  port=$(sed -n 's/^listening on port \([0-9]*\)$/\1/p' "$tmp/out")
  [ -n "$port" ] && break
  kill -0 $pid 2>/dev/null || { cat "$tmp/out"; echo "echo_test: the server died"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "echo_test: the server never listened"; exit 1; }
"$client" "$port"
kill -0 $pid 2>/dev/null || { cat "$tmp/out"; echo "echo_test: the server died"; exit 1; }
if [ "${3:-}" = loom ]; then
  calls=$(nm -D --undefined-only "$server" | awk '{print $NF}' | sed 's/@.*//')
  for f in socket bind listen accept read write close pthread_create; do
    if grep -qx "$f" <<< "$calls"; then echo "echo_test: the loom build calls libc's $f"; exit 1; fi
  done
  for f in loom_socket loom_accept loom_read loom_write loom_close loom_create; do
    grep -qx "$f" <<< "$calls" || { echo "echo_test: the loom build does not call $f"; exit 1; }
  done
fi
echo "echo_test: $(basename "$server") ok"
