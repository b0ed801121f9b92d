#!/usr/bin/env bash
# Maintainer's helper: regenerates patches/NNNN-*.patch from staged trees
# a (pristine), s1, s2, s3, b under DIR (diff -U1, DEP-3 headers kept from
# the existing patches). Usage: mkpatches.sh DIR
set -euo pipefail
w=${1:?}; P=$(cd "$(dirname "$0")" && pwd)/patches
mk() {  # mk PATCH FROM TO FILE
  local hdr; hdr=$(sed '/^---$/q' "$P/$1")
  { echo "$hdr"; cd "$w" && diff -U1 --label "a/$4" --label "b/$4" "$2/$4" "$3/$4" || true; } >"$P/$1.new"
  mv "$P/$1.new" "$P/$1"
}
mk 0001-connection-threads.patch a s1 memcached.c
mk 0002-main-loop.patch s1 s2 memcached.c
mk 0003-idle-timeouts.patch s2 s3 memcached.c
mk 0004-worker-loop.patch s3 b thread.c
