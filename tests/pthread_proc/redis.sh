#!/usr/bin/env bash
# redis.sh LIB — Debian's redis-server (jemalloc, which calls syscall(2)
# while the loader is still starting the process, and background threads)
# under LD_PRELOAD=LIB: it starts, serves SET and GET, and shuts down.
# redis.sh LIB io-threads — the same with --io-threads 2 (reads too), under
# redis-benchmark --threads 2 -c 32: main busy-waits for its I/O threads,
# which livelocked once (issue 24, item 5); every request must be answered.
# Skipped (77) without redis-server and redis-cli (scripts/deps.sh test).
set -uo pipefail
lib=$1
mode=${2:-plain}
extra=()
[ "$mode" = io-threads ] && extra=(--io-threads 2 --io-threads-do-reads yes)
command -v redis-server > /dev/null && command -v redis-cli > /dev/null ||
  { echo "*** SKIPPED: redis-server or redis-cli is not installed ***"; exit 77; }
tmp=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2> /dev/null; rm -rf "$tmp"' EXIT
fail() { cat "$tmp/log"; echo "redis: $*"; exit 1; }
. "$(dirname "$0")/redis_start.sh"
redis_start "${extra[@]}"
[ "$(cli set k v)" = OK ] && [ "$(cli get k)" = v ] || fail "SET/GET failed"
if [ "$mode" = io-threads ]; then
  command -v redis-benchmark > /dev/null || { echo "*** SKIPPED: redis-benchmark is not installed ***"; exit 77; }
  out=$(timeout 90 redis-benchmark -p "$port" --threads 2 -c 32 -n 10000 -t set,get -q 2>&1 | tr '\r' '\n' |
        grep -E '^(SET|GET): .*requests per second')
  echo "$out"
  [ "$(echo "$out" | grep -c 'requests per second')" = 2 ] ||
    { cat "$tmp/log"; echo "redis: redis-benchmark did not finish SET and GET (a livelock?)"; exit 1; }
fi
cli shutdown nosave > /dev/null 2>&1
wait $server
rc=$?
[ $rc -eq 0 ] || { cat "$tmp/log"; echo "redis: the server exited $rc"; exit 1; }
echo "redis: ok"
