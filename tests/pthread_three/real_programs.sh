#!/usr/bin/env bash
# real_programs.sh LIB — system binaries that were never built for loom, run
# with LD_PRELOAD=LIB on 2 processors: their output must be the plain run's,
# and (where the program lets stderr live until exit) LOOM_PTHREAD_STATS must
# show their threads ran as fibres. Programs that are not installed are
# skipped: zstd -T4 and xz -T4 (parallel compressors), python3's threading,
# pbzip2 and lbzip2 (signals between threads); yes | head (SIGPIPE).
set -uo pipefail
lib=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LOOM_PROCESSORS=2
fail=0
ran=0
# 8 MiB of text that compresses (so the compressors split it into blocks).
seq 1 1500000 | awk '{print $1 * 7919 % 1000003, "line", $1}' | head -c 8000000 > "$tmp/in"

check() {  # name min-fibres command...
  local name=$1 min=$2
  shift 2
  "$@" < "$tmp/in" > "$tmp/plain" 2> /dev/null
  LOOM_PTHREAD_STATS=1 LD_PRELOAD="$lib" timeout 120 "$@" < "$tmp/in" > "$tmp/loom" 2> "$tmp/err"
  local rc=$?
  local n
  n=$(sed -n 's/^loom: \([0-9]*\) threads ran as fibres$/\1/p' "$tmp/err" | tail -1)
  if [ $rc -ne 0 ] || ! cmp -s "$tmp/plain" "$tmp/loom"; then
    echo "real_programs: $name differs under LD_PRELOAD (exit $rc)"
    head -5 "$tmp/err"
    fail=1
  elif [ "$min" -gt 0 ] && [ "${n:-0}" -lt "$min" ]; then
    echo "real_programs: $name ran ${n:-no} threads as fibres, expected at least $min"
    fail=1
  else
    echo "real_programs: $name: same output, ${n:-?} threads ran as fibres"
  fi
  ran=$((ran + 1))
}

if command -v zstd > /dev/null; then check "zstd -T4" 2 zstd -T4 -q -c; fi
# xz closes stderr before exit: no count, the output is the check.
if command -v xz > /dev/null; then check "xz -T4" 0 xz -T4 --block-size=1MiB -c; fi
if command -v python3 > /dev/null; then
  cat > "$tmp/t.py" <<'PY'
import sys, threading, queue, concurrent.futures as cf
q = queue.Queue()
data = sys.stdin.buffer.read()
def work(i): q.put(sum(data[i::64]))
ts = [threading.Thread(target=work, args=(i,)) for i in range(64)]
for t in ts: t.start()
for t in ts: t.join()
print(sum(q.get() for _ in range(64)) == sum(data))
with cf.ThreadPoolExecutor(8) as ex: print(sum(ex.map(len, data.split(b"\n"))))
PY
  check "python3 threading" 64 python3 -S "$tmp/t.py"
fi
# Threads that wait for signals (issue 24): pbzip2's signal thread waits in
# sigwait until main ends it with pthread_kill(t, SIGUSR1); lbzip2's main
# waits in sigsuspend for its workers' pthread_kill. Compress and
# decompress, one and eight threads, and on one processor.
bz() {  # name min-fibres command...
  check "$@"
  LOOM_PROCESSORS=1 check "$1 on 1 processor" "${@:2}"
}
# 1 MB in 100 kB blocks: ten blocks for eight threads, a second a run.
head -c 1000000 "$tmp/in" > "$tmp/small"
if command -v pbzip2 > /dev/null; then
  pbzip2 -1 -c "$tmp/small" > "$tmp/small.bz2"
  for p in 1 8; do
    bz "pbzip2 -p$p" $((p + 1)) pbzip2 -1 -p$p -c "$tmp/small"
    bz "pbzip2 -d -p$p" 2 pbzip2 -d -p$p -c "$tmp/small.bz2"
  done
fi
if command -v lbzip2 > /dev/null; then  # (it closes stderr before exit: no count)
  lbzip2 -1 -c "$tmp/small" > "$tmp/small.lbz2"
  for n in 1 8; do
    bz "lbzip2 -n $n" 0 lbzip2 -1 -n $n -c "$tmp/small"
    bz "lbzip2 -d -n $n" 0 lbzip2 -d -n $n -c "$tmp/small.lbz2"
  done
fi
# SIGPIPE keeps its default on these routes: yes dies of it (141) when head
# has gone, silently, as in the plain run — not "Broken pipe" and exit 1.
st=$( (LD_PRELOAD="$lib" timeout 20 yes 2> "$tmp/err"; echo $? > "$tmp/rc") | head -1 > /dev/null; cat "$tmp/rc")
if [ "$st" != 141 ] || [ -s "$tmp/err" ]; then
  echo "real_programs: yes | head -1 exited $st under LD_PRELOAD, not 141 (SIGPIPE):"
  head -3 "$tmp/err"
  fail=1
else
  echo "real_programs: yes | head -1: died of SIGPIPE (141), as plain"
fi
ran=$((ran + 1))

echo "real_programs: $ran programs run"
exit $fail
