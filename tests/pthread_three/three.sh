#!/usr/bin/env bash
# three.sh LIB GLIBC HEADER LINK [ARGS...] — one pthread program, run every
# way loom offers, against its plain glibc build:
#   glibc     GLIBC, as built (the reference);
#   header    HEADER: the same source built with -include loom/pthread.h;
#   preload   GLIBC again, unmodified, with LD_PRELOAD=LIB (libloom-pthread.so);
#   link      LINK: the same source linked with -lloom-pthread.
# Fails unless each run's standard output and exit status are the glibc
# run's, and each loom run reports (LOOM_PTHREAD_STATS=1, on stderr) as many
# threads run as fibres as the program created — so a silent fall-through
# to glibc's threads fails. A way given as "-" is skipped.
# Environment: EXPECT, a file of the expected output (exit status 0): the
# reference instead of the glibc run, which is then not made (for programs
# whose glibc behaviour is undefined or differs by design: stale handles,
# fork children); FIBRES_MIN (default 1: fewer fibres than that fails);
# LOOM_PROCESSORS as the runtime reads it.
set -uo pipefail
lib=$1 glibc=$2 header=$3 link=$4
shift 4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
min=${FIBRES_MIN:-1}
fail=0

run() {  # way binary [env...]
  local way=$1 bin=$2
  shift 2
  env "$@" timeout 120 "$bin" "${args[@]}" > "$tmp/$way.out" 2> "$tmp/$way.err"
  echo $? > "$tmp/$way.rc"
}
args=("$@")

if [ -n "${EXPECT:-}" ]; then
  cp "$EXPECT" "$tmp/expect.out"
  echo 0 > "$tmp/expect.rc"
  ref=$tmp/expect
elif [ "$glibc" != - ]; then
  run glibc "$glibc"
  ref=$tmp/glibc
else
  echo "three: no glibc build and no EXPECT file"
  exit 2
fi

check() {  # way
  local way=$1
  if ! cmp -s "$ref.out" "$tmp/$way.out" || ! cmp -s "$ref.rc" "$tmp/$way.rc"; then
    echo "three: $way run differs from $(basename "$ref") (exit $(cat "$ref.rc") vs $(cat "$tmp/$way.rc")):"
    diff "$ref.out" "$tmp/$way.out" | head -40
    sed 's/^/  stderr: /' "$tmp/$way.err" | head -20
    fail=1
  fi
  local n
  n=$(sed -n 's/^loom: \([0-9]*\) threads ran as fibres$/\1/p' "$tmp/$way.err" | tail -1)
  if [ -z "$n" ]; then
    echo "three: $way run did not run on loom (no LOOM_PTHREAD_STATS line on stderr)"
    fail=1
  elif [ "$n" -lt "$min" ]; then
    echo "three: $way run made $n fibres, fewer than $min: its threads fell through to glibc"
    fail=1
  else
    echo "three: $way: same output, $n threads ran as fibres"
  fi
}

if [ "$header" != - ]; then
  run header "$header" LOOM_PTHREAD_STATS=1
  check header
fi
if [ "$glibc" != - ]; then
  run preload "$glibc" LOOM_PTHREAD_STATS=1 LD_PRELOAD="$lib"
  check preload
fi
if [ "$link" != - ]; then
  run link "$link" LOOM_PTHREAD_STATS=1
  check link
fi
cat "$ref.out"
[ $fail = 0 ] && echo "three: ok"
exit $fail
