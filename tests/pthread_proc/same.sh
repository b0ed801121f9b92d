#!/usr/bin/env bash
# same.sh LIB PROG [ARGS...] — PROG (a plain glibc binary) run as is and with
# LD_PRELOAD=LIB, each bounded in time: identical stdout, both exit 0.
set -uo pipefail
lib=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
timeout 60 "$@" > "$tmp/glibc" 2> "$tmp/glibc.err" || { cat "$tmp/glibc.err"; echo "same: glibc run failed ($?)"; exit 1; }
LD_PRELOAD=$lib timeout 60 "$@" > "$tmp/loom" 2> "$tmp/loom.err"
rc=$?
cat "$tmp/loom"
[ $rc -eq 0 ] || { cat "$tmp/loom.err"; echo "same: preload run failed ($rc)"; exit 1; }
diff -u "$tmp/glibc" "$tmp/loom" || { echo "same: outputs differ"; exit 1; }
echo "same: $(basename "$1") ok"
