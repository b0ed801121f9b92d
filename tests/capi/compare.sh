#!/usr/bin/env bash
# compare.sh GLIBC_BUILD LOOM_BUILD — runs both builds of one program and
# fails unless their standard output and exit status are the same.
set -uo pipefail
a=$(timeout 60 "$1"); sa=$?
b=$(timeout 60 "$2"); sb=$?
if [ "$a" != "$b" ] || [ $sa -ne $sb ]; then
  echo "compare: $(basename "$1") (exit $sa) and $(basename "$2") (exit $sb) differ:"
  diff <(echo "$a") <(echo "$b")
  exit 1
fi
echo "$b"
echo "compare: same output, exit status $sa"
