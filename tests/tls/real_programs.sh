#!/usr/bin/env bash
# real_programs.sh LIB — Debian's own binaries, never built for loom, that
# keep their state in thread-locals: each run plainly and with
# LD_PRELOAD=LIB on 2 processors, several times, with a time limit; standard
# output and exit status must be the plain run's every time. Before per-fibre
# thread-locals, perl and pgrep died of SIGSEGV in most runs (main resumed on
# another kernel thread after a file read and found another block), and
# ripgrep's threads aborted on finding a finished thread's thread-locals.
# A program that is not installed is reported and skipped; scripts/deps.sh
# test installs them all.
set -uo pipefail
lib=$1
runs=${RUNS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LOOM_PROCESSORS=${LOOM_PROCESSORS:-2}
fail=0
ran=0

check() {  # name command...
  local name=$1
  shift
  if ! command -v "$1" > /dev/null; then
    echo "real_programs: $name: $1 not installed, skipped"
    return
  fi
  timeout 60 "$@" > "$tmp/plain" 2> /dev/null
  local want=$?
  local bad=0 i rc
  for ((i = 0; i < runs; i++)); do
    LD_PRELOAD="$lib" timeout 60 "$@" > "$tmp/loom" 2> "$tmp/err"
    rc=$?
    if [ $rc -ne $want ] || ! cmp -s "$tmp/plain" "$tmp/loom"; then
      [ $bad -eq 0 ] && { echo "real_programs: $name differs (exit $want plain, $rc preloaded):"; diff "$tmp/plain" "$tmp/loom" | head -5; head -5 "$tmp/err"; }
      bad=$((bad + 1))
    fi
  done
  if [ $bad -ne 0 ]; then
    echo "real_programs: $name: $bad of $runs preloaded runs differ"
    fail=1
  else
    echo "real_programs: $name: $runs of $runs preloaded runs as plain (exit $want)"
  fi
  ran=$((ran + 1))
}

# perl without threads: its interpreter lives in thread-locals; reading a
# regular file used to move main to another kernel thread.
printf 'b 2\na 1\nc 3\n' > "$tmp/in.txt"
check "perl, no threads" perl -e 'open(my $f, "<", $ARGV[0]) or die; my @l = sort <$f>; print @l; printf("%s\n", join(",", map { uc } qw(x y z)));' "$tmp/in.txt"
# perl ithreads: each thread a whole interpreter in its own thread-locals.
check "perl ithreads" perl -Mthreads -e 'my @t = map { my $i = $_; threads->create(sub { my $s = 0; $s += $_ * $i for 1 .. 20000; $s }) } 1 .. 6; print join(" ", map { $_->join } @t), "\n";'
# A program that creates no thread stays on one kernel thread, as on glibc:
# its file reads (in the page cache, or offloaded) come back to the
# processor they left. (gettid is system call 186 on x86-64.)
check "perl stays on its kernel thread" perl -e 'my $t = syscall(186); for (1 .. 300) { open(my $f, "<", "/proc/self/stat") or die; my $l = <$f>; close $f; die "moved\n" if syscall(186) != $t } print "same kernel thread\n";'
# dd: reads of a regular file in the page cache are whole, as the kernel's
# (a short one would count as a partial record).
seq 1 2000000 > "$tmp/big"
check "dd bs=4k" bash -c "dd if='$tmp/big' bs=4k status=noxfer 2>&1 > /dev/null; dd if='$tmp/big' bs=4k status=none | sha256sum"
# procps: libprocps's thread-local state, and regular-file reads of /proc.
check "ps" ps -o pid=,comm= -p 1
check "pgrep" pgrep -l -P 0
# A threaded Rust program: std checks each new thread's thread-locals, and
# its locks wait on futexes of their own. (--sort would make it run one
# thread: the output is sorted afterwards instead.)
if command -v rg > /dev/null; then
  check "rg -j4" bash -o pipefail -c 'rg -j4 -c import /usr/lib/python3.11 | sort'
else
  echo "real_programs: rg -j4: rg not installed, skipped"
fi
# python3: threads that recurse (glibc-sized stacks) and threading.local.
cat > "$tmp/t.py" <<'PY'
import threading
loc = threading.local()
out = []
lock = threading.Lock()
def work(i):
    loc.v = i
    nested = eval('[' * 40 + ']' * 40)
    def rec(n): return 0 if n == 0 else 1 + rec(n - 1)
    depth = rec(500)
    with lock: out.append((i, loc.v == i, len(nested), depth))
ts = [threading.Thread(target=work, args=(i,)) for i in range(16)]
for t in ts: t.start()
for t in ts: t.join()
print(sorted(out))
PY
check "python3 threads" /usr/bin/python3 -S "$tmp/t.py"
echo "real_programs: $ran programs run"
exit $fail
