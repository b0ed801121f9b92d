# redis_start.sh — sourced by redis.sh and redis_bgsave.sh. Needs lib, tmp
# and fail(); sets port and server. Tests run two at a time (make test), and
# a random port may be taken meanwhile (another test's listener, or one of
# the thousands of ephemeral ports a wrk run holds): another port then.
cli() { timeout 10 redis-cli -p "$port" "$@"; }

# redis_start [ARG...]: redis-server preloaded with lib on a free port, its
# log in $tmp/log, extra arguments passed on; returns when it answers PING.
redis_start() {
  for _ in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 20000))
    LD_PRELOAD=$lib timeout 60 redis-server --port "$port" --bind 127.0.0.1 --save '' --dir "$tmp" \
      "$@" >> "$tmp/log" 2>&1 &
    server=$!
    for _ in $(seq 1 100); do
      cli ping > /dev/null 2>&1 && return 0
      kill -0 "$server" 2> /dev/null || break
      sleep 0.1
    done
    kill -0 "$server" 2> /dev/null && fail "the server did not answer"
  done
  fail "the server did not start"
}
