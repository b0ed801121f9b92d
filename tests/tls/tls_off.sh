#!/usr/bin/env bash
# tls_off.sh LIB GLIBC MODULE — the proof that per-fibre thread-locals are
# what makes tls_threads right: with LOOM_TLS=off (thread-locals per kernel
# thread, as before) its preloaded output must differ from glibc's. If it
# does not, the test that compares them proves nothing.
set -uo pipefail
lib=$1 glibc=$2 module=$3
want=$(timeout 120 "$glibc" all "$module" 2> /dev/null)
got=$(LOOM_TLS=off LOOM_PROCESSORS=2 LD_PRELOAD="$lib" timeout 120 "$glibc" all "$module" 2> /dev/null)
if [ "$want" = "$got" ]; then
  echo "tls_off: with LOOM_TLS=off the output is still glibc's: the TLS tests cannot tell it is on"
  exit 1
fi
echo "tls_off: with LOOM_TLS=off tls_threads differs from glibc, as it must:"
diff <(echo "$want") <(echo "$got") | head -10
exit 0
