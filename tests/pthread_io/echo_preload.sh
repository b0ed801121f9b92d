#!/usr/bin/env bash
# echo_preload.sh SERVER CLIENT LIB CONNECTIONS BYTES — a thread-per-
# connection echo server built with no loom flag at all, run under
# LD_PRELOAD=LIB; the client (its own process) opens CONNECTIONS connections
# at once and checks every byte. The server must stay at a handful of kernel
# threads (its connection threads are fibres; on glibc it would have one
# kernel thread per connection).
set -euo pipefail
server=$1 client=$2 lib=$3 conns=$4 bytes=$5
tmp=$(mktemp -d)
: > "$tmp/out"  # before the server: sed's first look may come before its redirection (echo_test.sh)
LD_PRELOAD=$lib "$server" 0 > "$tmp/out" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do
  port=$(sed -n 's/^listening on port \([0-9]*\)$/\1/p' "$tmp/out")
  [ -n "$port" ] && break
  kill -0 $pid 2>/dev/null || { cat "$tmp/out"; echo "echo_preload: the server died"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "echo_preload: the server never listened"; exit 1; }
"$client" "$port" "$conns" "$bytes" &
cpid=$!
most=0
while kill -0 $cpid 2>/dev/null; do
  n=$(sed -n 's/^Threads:\s*//p' /proc/$pid/status 2>/dev/null || echo 0)
  [ "${n:-0}" -gt "$most" ] && most=$n
  sleep 0.2
done
wait $cpid || { cat "$tmp/out"; echo "echo_preload: the client failed"; exit 1; }
kill -0 $pid 2>/dev/null || { cat "$tmp/out"; echo "echo_preload: the server died"; exit 1; }
[ "$most" -lt 64 ] || { echo "echo_preload: the server had $most kernel threads: not on fibres"; exit 1; }
echo "echo_preload: $conns connections x $bytes bytes echoed; at most $most kernel threads in the server"
