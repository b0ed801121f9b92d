#!/usr/bin/env bash
# redis.sh LIB — Debian's redis-server (jemalloc, which calls syscall(2)
# while the loader is still starting the process, and background threads)
# under LD_PRELOAD=LIB: it starts, serves SET and GET, and shuts down.
# Skipped (77) without redis-server and redis-cli (scripts/deps.sh test).
set -uo pipefail
lib=$1
command -v redis-server > /dev/null && command -v redis-cli > /dev/null ||
  { echo "*** SKIPPED: redis-server or redis-cli is not installed ***"; exit 77; }
tmp=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
LD_PRELOAD=$lib timeout 60 redis-server --port "$port" --bind 127.0.0.1 --save '' --dir "$tmp" \
  > "$tmp/log" 2>&1 &
server=$!
trap 'kill $server 2> /dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 1 100); do
  redis-cli -p "$port" ping > /dev/null 2>&1 && break
  sleep 0.1
done
cli() { timeout 10 redis-cli -p "$port" "$@"; }
[ "$(cli set k v)" = OK ] && [ "$(cli get k)" = v ] || { cat "$tmp/log"; echo "redis: SET/GET failed"; exit 1; }
cli shutdown nosave > /dev/null 2>&1
wait $server
rc=$?
[ $rc -eq 0 ] || { cat "$tmp/log"; echo "redis: the server exited $rc"; exit 1; }
echo "redis: ok"
