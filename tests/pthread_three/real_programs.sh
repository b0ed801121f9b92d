#!/usr/bin/env bash
# real_programs.sh LIB — system binaries that were never built for loom, run
# with LD_PRELOAD=LIB on 2 processors: their output must be the plain run's,
# and (where the program lets stderr live until exit) LOOM_PTHREAD_STATS must
# show their threads ran as fibres. Programs that are not installed are
# skipped: zstd -T4 and xz -T4 (parallel compressors), python3's threading.
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
echo "real_programs: $ran programs run"
exit $fail
