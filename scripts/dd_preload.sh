#!/usr/bin/env bash
# scripts/dd_preload.sh [BUILD] [ROUNDS] — issue 35, item 6: a page-cache
# read under the preload against the same read plain, in one run.
#
# `dd if=FILE of=/dev/null bs=4k` of a 100 MB file held in the page cache,
# plain and with LD_PRELOAD=BUILD/libloom-pthread.so, alternated (which one
# goes first flips each round) for ROUNDS rounds (default 7). Prints each
# round's wall times and the medians' ratio (goal ≤ 1.3). The file lives in
# a fresh directory under /tmp and is removed at the end.
set -euo pipefail
build=${1:-build}
rounds=${2:-7}
lib=$(readlink -f "$build/libloom-pthread.so")
[ -f "$lib" ] || { echo "dd_preload: no $build/libloom-pthread.so (build first)" >&2; exit 2; }
case $rounds in '' | *[!0-9]* | 0) echo "dd_preload: ROUNDS must be a positive number" >&2; exit 2 ;; esac
tmp=$(mktemp -d /tmp/dd_preload.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
head -c 100000000 /dev/urandom > "$tmp/file"
cat "$tmp/file" > /dev/null  # into the page cache

# One timed dd, in seconds (wall), from bash's own clock.
run() {
  local start end
  start=$(date +%s.%N)
  "$@" dd if="$tmp/file" of=/dev/null bs=4k status=none
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.6f\n", b - a }' 
}

plain=() preload=()
for ((i = 0; i < rounds; ++i)); do
  if ((i % 2 == 0)); then
    plain+=("$(run env)")
    preload+=("$(run env LD_PRELOAD="$lib")")
  else
    preload+=("$(run env LD_PRELOAD="$lib")")
    plain+=("$(run env)")
  fi
  printf 'round %d: plain %.3f s, preloaded %.3f s\n' "$((i + 1))" "${plain[i]}" "${preload[i]}"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mp=$(median "${plain[@]}")
ml=$(median "${preload[@]}")
printf 'median: plain %.3f s, preloaded %.3f s, ratio %.2f (goal <= 1.3); load average %s\n' \
  "$mp" "$ml" "$(awk -v a="$ml" -v b="$mp" 'BEGIN { print a / b }')" "$(cut -d' ' -f1-3 /proc/loadavg)"
