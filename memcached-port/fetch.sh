#!/usr/bin/env bash
# memcached-port/fetch.sh BUILD_DIR — Debian 12's memcached source package
# (1.6.18-1+deb12u1), verified and unpacked:
#   BUILD_DIR/cache/            the .dsc and its two tarballs (a second run
#                               uses these and does not touch the network)
#   BUILD_DIR/memcached-1.6.18/ `dpkg-source -x` of it: upstream plus
#                               Debian's own patches ("Debian's memcached"),
#                               pristine; memcached-vanilla and t/*.t use it
# The .dsc is pinned by its sha256 below; the tarballs are checked against
# the .dsc's Checksums-Sha256. Any mismatch stops the build.
set -euo pipefail

build=${1:?usage: fetch.sh BUILD_DIR}
mkdir -p "$build"
build=$(cd "$build" && pwd)
version=1.6.18-1+deb12u1
dsc=memcached_${version}.dsc
dsc_sha256=47fe5c96717c0282676155dc144f9524d471097b656f67637f2629c66b8a633a
mirrors=(http://deb.debian.org/debian-security/pool/updates/main/m/memcached
         http://deb.debian.org/debian/pool/main/m/memcached)
cache=$build/cache
src=$build/memcached-1.6.18
mkdir -p "$cache"

fetch() {  # fetch FILE: into the cache unless there
  local f=$1 m
  [ -s "$cache/$f" ] && return 0
  for m in "${mirrors[@]}"; do
    if curl -fsS --retry 2 --max-time 120 -o "$cache/$f.part" "$m/$f"; then
      mv "$cache/$f.part" "$cache/$f"
      return 0
    fi
  done
  rm -f "$cache/$f.part"
  echo "fetch.sh: could not download $f from ${mirrors[*]}" >&2
  exit 1
}

check() {  # check FILE SHA256
  local got
  got=$(sha256sum "$cache/$1" | cut -d' ' -f1)
  if [ "$got" != "$2" ]; then
    echo "fetch.sh: $1: sha256 $got, expected $2 — removed from the cache" >&2
    rm -f "$cache/$1"
    exit 1
  fi
}

fetch "$dsc"
check "$dsc" "$dsc_sha256"
# The .dsc's Checksums-Sha256 stanza: " <sha256> <size> <file>" lines.
sums=$(awk '/^Checksums-Sha256:/{on=1; next} /^[^ ]/{on=0} on && NF==3 {print $1, $3}' "$cache/$dsc")
[ -n "$sums" ] || { echo "fetch.sh: no Checksums-Sha256 in $dsc" >&2; exit 1; }
while read -r sum file; do
  fetch "$file"
  check "$file" "$sum"
done <<<"$sums"

if [ ! -f "$src/.unpacked" ]; then
  rm -rf "$src"
  # --no-check: the signature needs Debian's keyring; the .dsc itself is
  # pinned by sha256 above, which is the stronger check here.
  # dpkg-source leaves copies of the tarballs beside its output: unpack in
  # a scratch directory and move the tree out.
  rm -rf "$cache/unpack"
  mkdir "$cache/unpack"
  (cd "$cache/unpack" && dpkg-source --no-check -x "$cache/$dsc" memcached-1.6.18 >/dev/null)
  mv "$cache/unpack/memcached-1.6.18" "$src"
  rm -rf "$cache/unpack"
  touch "$src/.unpacked"
fi
