#!/usr/bin/env bash
# lmdb.sh LIB — LMDB's tools (Debian's lmdb-utils: mdb_load, mdb_dump,
# mdb_stat) under LD_PRELOAD=LIB against plain runs. LMDB keeps robust,
# process-shared mutexes in its lock file (the writer's and the reader
# table's): the preload used to refuse them ("mdb_env_open failed, error
# 95"). Checked:
#   - a database loaded preloaded dumps (preloaded and plainly) exactly as
#     one loaded plainly; mdb_stat reads the same of both;
#   - a writer killed (SIGKILL) in the middle of its write transaction,
#     holding the writer's mutex: the next writer gets EOWNERDEAD inside
#     LMDB, which recovers, and its load completes — a preloaded writer
#     after a preloaded one and after a plain one, and a plain writer after
#     a preloaded one (the robust word is glibc's protocol on both sides).
# Skips (77) without lmdb-utils (scripts/deps.sh test installs it).
set -uo pipefail
lib=$1
for t in mdb_load mdb_dump mdb_stat; do
  command -v $t > /dev/null || { echo "lmdb: $t missing (scripts/deps.sh test installs lmdb-utils)"; exit 77; }
done
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
fail() { echo "lmdb: FAIL: $*"; exit 1; }
pre() { LD_PRELOAD=$lib timeout 60 "$@"; }
plain() { timeout 60 "$@"; }

header() { printf 'VERSION=3\nformat=print\ntype=btree\nmapsize=16777216\nHEADER=END\n'; }
{ header; awk 'BEGIN { for (i = 1; i <= 5000; i++) printf " key%05d\n value%d\n", i, i * 7 }'; echo DATA=END; } > "$tmp/in.txt"

mkdir "$tmp/plain" "$tmp/loom"
plain mdb_load -f "$tmp/in.txt" "$tmp/plain" || fail "plain mdb_load"
pre mdb_load -f "$tmp/in.txt" "$tmp/loom" || fail "preloaded mdb_load ($?)"
plain mdb_dump -p "$tmp/plain" > "$tmp/plain.dump" || fail "plain mdb_dump"
pre mdb_dump -p "$tmp/loom" > "$tmp/loom.dump" || fail "preloaded mdb_dump"
plain mdb_dump -p "$tmp/loom" > "$tmp/loom.plaindump" || fail "plain mdb_dump of the preloaded load"
cmp -s "$tmp/plain.dump" "$tmp/loom.dump" || fail "dumps differ (preloaded load and dump)"
cmp -s "$tmp/plain.dump" "$tmp/loom.plaindump" || fail "dumps differ (preloaded load, plain dump)"
echo "lmdb: 5000 records loaded and dumped preloaded, as plainly"
plain mdb_stat "$tmp/plain" | grep -v 'Tree depth\|pages' > "$tmp/plain.stat"
pre mdb_stat "$tmp/loom" | grep -v 'Tree depth\|pages' > "$tmp/loom.stat"
cmp -s "$tmp/plain.stat" "$tmp/loom.stat" || { diff "$tmp/plain.stat" "$tmp/loom.stat"; fail "mdb_stat differs"; }
grep -q 'Entries: 5000' "$tmp/loom.stat" || fail "mdb_stat: no 5000 entries"
echo "lmdb: mdb_stat the same"

# killed WHO_DIES NEXT: a writer (run by WHO_DIES: pre or plain) stopped
# with SIGKILL while its transaction waits for input, then NEXT loads the
# whole input into the same database.
killed() {
  local dies=$1 next=$2 db="$tmp/killed-$1-$2"
  mkdir "$db"
  rm -f "$tmp/fifo"
  mkfifo "$tmp/fifo"
  if [ "$dies" = pre ]; then
    LD_PRELOAD=$lib mdb_load -f "$tmp/fifo" "$db" &
  else
    mdb_load -f "$tmp/fifo" "$db" &
  fi
  local pid=$!
  pids+=("$pid")
  exec 3> "$tmp/fifo"
  { header; printf ' half\n way\n'; } >&3
  # Until its lock file exists and a moment more: the transaction is begun
  # right after the header (if not yet, the test is weaker, not wrong).
  for _ in $(seq 100); do [ -e "$db/lock.mdb" ] && break; sleep 0.05; done
  sleep 0.3
  kill -9 "$pid"
  wait "$pid" 2>/dev/null
  exec 3>&-
  $next mdb_load -f "$tmp/in.txt" "$db" || fail "$next mdb_load after a killed $dies writer ($?)"
  $next mdb_dump -p "$db" | grep -v '^ half$\|^ way$' > "$tmp/k.dump"
  cmp -s "$tmp/plain.dump" "$tmp/k.dump" || fail "$next dump after a killed $dies writer differs"
  echo "lmdb: a $dies writer killed holding the lock, then a $next load: complete"
}
killed pre pre
killed plain pre
killed pre plain
echo "lmdb: ok"
