#!/usr/bin/env bash
# with_io_backend.sh BACKEND PROBE COMMAND... — runs an I/O test's COMMAND
# with LOOM_IO=BACKEND, if loom really runs its I/O on BACKEND here. PROBE
# (io_backend_probe, built with loom) asks loom::io::backend() under the same
# environment first; if loom fell back to another back end, the probe prints
# a *** SKIPPED: ... *** line and this exits 77, which the ctest variant
# counts as skipped (SKIP_RETURN_CODE 77), never as passed. A failing probe
# fails the test. tests/CMakeLists.txt (loom_io_test) registers the variants.
set -u
want=$1 probe=$2
shift 2
export LOOM_IO=$want
"$probe" "$want"
rc=$?
case $rc in
  0) exec "$@" ;;
  77) exit 77 ;;
  *) echo "with_io_backend: $probe $want exited $rc: not run on LOOM_IO=$want"; exit 1 ;;
esac
