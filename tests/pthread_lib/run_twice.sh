#!/bin/bash
# run_twice.sh PLAIN LINKED PRELOAD_LIB [INPROC] — runs a plain glibc program
# three ways: on glibc, linked with -lloom-pthread (LINKED, may be "-"), and
# with LD_PRELOAD=PRELOAD_LIB (may be "-"); INPROC, if given, is the program
# with capi/pthread/sync.cpp compiled into it (glibc's threads, loom's
# objects: what the sanitizer builds can run). stdout must be identical; stderr must show that
# pthread_mutex_lock came from libc in the first run and from
# libloom-pthread in the others (a silent fall-through to glibc fails).
set -u
plain=$1 linked=$2 lib=$3 inproc=${4:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
run() {  # name, command...
  local name=$1
  shift
  timeout 120 "$@" >"$dir/$name.out" 2>"$dir/$name.err"
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "$name: exit status $rc"
    fail=1
  fi
}
expect_impl() {  # name, pattern
  if ! grep -q "impl: pthread_mutex_lock from .*$2" "$dir/$1.err"; then
    echo "$1: pthread_mutex_lock did not come from $2:"
    grep impl: "$dir/$1.err"
    fail=1
  fi
}
run glibc "$plain"
expect_impl glibc "\(libc\|libasan\|libtsan\)"
if [ "$lib" != - ]; then
  run preload env LD_PRELOAD="$lib" "$plain"
  expect_impl preload libloom-pthread
fi
if [ -n "$inproc" ]; then
  run inproc "$inproc"
  expect_impl inproc "$(basename "$inproc")"
fi
if [ "$linked" != - ]; then
  run linked "$linked"
  expect_impl linked libloom-pthread
fi
for name in preload linked inproc; do
  [ -f "$dir/$name.out" ] || continue
  if ! diff -u "$dir/glibc.out" "$dir/$name.out"; then
    echo "$name: stdout differs from glibc's"
    fail=1
  fi
done
echo "--- glibc stdout:"
cat "$dir/glibc.out"
for name in glibc preload linked inproc; do
  [ -f "$dir/$name.err" ] && { echo "--- $name stderr:"; cat "$dir/$name.err"; }
done
exit $fail
