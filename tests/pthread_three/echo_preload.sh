#!/usr/bin/env bash
# echo_preload.sh LIB SERVER CLIENT ECHO_TEST — apps/examples/echo_server's
# glibc build (no loom flag at all) run with LD_PRELOAD=LIB, against
# tests/capi's echo client and driver. The client holds 200 connections
# open at once, each served by its own thread: on 2 processors, a server
# whose threads were kernel threads blocked in read would still pass, but
# one whose fibres blocked their processors would hang (the client's alarm
# fails it) — so this checks both that the threads are fibres and that
# libloom-pthread's read/write/accept block fibres only. (The server is
# stopped by a signal: LOOM_PTHREAD_STATS cannot report at exit.)
set -euo pipefail
lib=$1 server=$2 client=$3 echo_test=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/server" <<SH
#!/bin/sh
LD_PRELOAD="$lib" LOOM_PROCESSORS=2 exec "$server" "\$@"
SH
chmod +x "$tmp/server"
bash "$echo_test" "$tmp/server" "$client"
