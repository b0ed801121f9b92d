#!/usr/bin/env bash
# scripts/monitor_web_ab.sh [BUILD] [ROUNDS] — issue 31: what the monitor
# costs the web server under load, monitor off (LOOM_HANDOFF_US=0) against
# on (the default), alternated in one run, the order flipped each round.
#
# The server (webserver --runtime loom --processors 1, the whole process on
# CPU 1) under `wrk -t1 -c1000 -d4s` keep-alive on CPU 0, after a 1 s
# warm-up; prints the server's CPU per request (from /proc) each run.
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
server=$build/apps/webserver/webserver
[ -x "$server" ] || { echo "monitor_web_ab: no $server (build first)" >&2; exit 2; }
command -v wrk > /dev/null || { echo "monitor_web_ab: wrk is missing (scripts/deps.sh bench)" >&2; exit 2; }
case $rounds in '' | *[!0-9]* | 0) echo "monitor_web_ab: ROUNDS must be a positive number" >&2; exit 2 ;; esac

one() {  # one(HANDOFF_US)
  local out pid port t0 t1 n
  out=$(mktemp)
  LOOM_HANDOFF_US=$1 taskset -c 1 "$server" --runtime loom --port 0 --processors 1 > "$out" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q listening "$out" && break; sleep 0.1; done
  port=$(grep -o '127.0.0.1:[0-9]*' "$out" | head -1 | cut -d: -f2)
  [ -n "$port" ] || { kill "$pid"; cat "$out" >&2; rm -f "$out"; echo "monitor_web_ab: the server did not start" >&2; exit 1; }
  taskset -c 0 wrk -t1 -c1000 -d1s "http://127.0.0.1:$port/" > /dev/null 2>&1
  t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  n=$(taskset -c 0 wrk -t1 -c1000 -d4s "http://127.0.0.1:$port/" 2>&1 | awk '/requests in/ {print $1}')
  t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  kill "$pid"
  wait "$pid" 2> /dev/null || true
  rm -f "$out"
  awk -v a="$t0" -v b="$t1" -v r="$n" -v h="$1" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "LOOM_HANDOFF_US=%-5s %d requests, server CPU %.3f us/request\n", h, r, (b - a) * 1e6 / hz / r }'
}

for ((i = 0; i < rounds; ++i)); do
  if ((i % 2 == 0)); then one 0; one 1000; else one 1000; one 0; fi
done
