#!/usr/bin/env bash
# tests/memcached/run_suite.sh SERVER [--core] [--tls] [--port-dir DIR] [--timeout SECS] [t/FILE.t ...]
#
# Runs memcached's own test suite (t/*.t of the source package, Perl)
# against SERVER: memcached-vanilla, loom-memcached or memcached-tpc.
#
# MemcachedTest.pm takes the directory it runs in as memcached's build
# directory: it starts ./memcached-debug through ./timedrun and reads
# certificates and the like from ./t. So each server gets a scratch
# directory, PORT_DIR/suite/SERVER, of symbolic links to the pristine tree
# (which is never written to), with memcached-debug and memcached pointing
# at SERVER's binaries and timedrun compiled from the tree's timedrun.c.
#
#   PORT_DIR   the build's memcached-port directory (default: build/memcached-port
#              of this checkout); binaries come from MC_BIN_DIR when set, else
#              PORT_DIR/bin; the pristine tree is PORT_DIR/memcached-1.6.18
#   --core     only the representative core (CORE below), not every t/*.t
#   --tls      every connection over TLS, as upstream's `make test_tls`
#              (SSL_TEST=1; needs IO::Socket::SSL: libio-socket-ssl-perl)
#   --timeout  per test file, seconds (default 300; MC_SUITE_TIMEOUT)
#   t/FILE.t   just these files (overrides --core)
#
# tests/memcached/suite-exclusions.txt lists files not run, as
# "SERVER-GLOB  t/FILE.t  reason" lines. Prints a table of every file with
# its result; logs stay in PORT_DIR/suite/SERVER/logs. Exit status: 0 when
# every file run passed, 1 when one failed or timed out, 77 when the
# server's binary is not built, 2 on a usage error.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
usage() { echo "usage: run_suite.sh SERVER [--core] [--tls] [--port-dir DIR] [--timeout SECS] [t/FILE.t ...]" >&2; exit 2; }

# The core, for ctest (under two minutes a server here): the text, meta and
# binary protocols, noreply, incr/decr, cas, expiry, flush, stats, the LRU,
# slab moves, maxconns and conn-limits, the idle timeout, watch (logger
# hand-back), UDP and unix sockets. The rest (00-startup's many restarts,
# lru-crawler's metadump, restart, the issue_* files...) is for
# `make test-memcached`, which runs every file.
CORE=(
  t/getset.t t/binary.t t/metaget.t t/noreply.t t/incrdecr.t t/cas.t
  t/expirations.t t/flush-all.t t/stats.t t/stats-conns.t t/lru.t
  t/slabs_reassign.t t/maxconns.t t/conn-limits.t t/idle-timeout.t
  t/watcher.t t/udp.t t/unixsocket.t
)

server=
core=0
tls=0
port_dir=${MC_PORT_DIR:-$(cd "$here/../.." && pwd)/build/memcached-port}
timeout=${MC_SUITE_TIMEOUT:-300}
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --core) core=1 ;;
    --tls) tls=1 ;;
    --port-dir) [ $# -ge 2 ] || usage; port_dir=$2; shift ;;
    --timeout) [ $# -ge 2 ] || usage; timeout=$2; shift ;;
    -h|--help) usage ;;
    -*) echo "run_suite.sh: unknown option $1" >&2; usage ;;
    *) if [ -z "$server" ]; then server=$1; else files+=("$1"); fi ;;
  esac
  shift
done
[ -n "$server" ] || usage
case "$server" in
  memcached-vanilla|loom-memcached|memcached-tpc) ;;
  *) echo "run_suite.sh: SERVER is memcached-vanilla, loom-memcached or memcached-tpc, not '$server'" >&2; exit 2 ;;
esac

[ -d "$port_dir" ] && port_dir=$(cd "$port_dir" && pwd)  # the scratch tree's links must not be relative
bin_dir=${MC_BIN_DIR:-$port_dir/bin}
src=$port_dir/memcached-1.6.18
for b in "$server" "$server-debug"; do
  if [ ! -x "$bin_dir/$b" ]; then
    echo "run_suite.sh: $bin_dir/$b is not built: skipped" >&2
    exit 77
  fi
done
if [ ! -f "$src/t/lib/MemcachedTest.pm" ] || [ ! -f "$src/timedrun.c" ]; then
  echo "run_suite.sh: no memcached source tree at $src (memcached-port/fetch.sh makes it): skipped" >&2
  exit 77
fi
bin_dir=$(cd "$bin_dir" && pwd)

# ---- the scratch tree -------------------------------------------------------
suite=$port_dir/suite
work=$suite/$server
[ $tls = 1 ] && work=$suite/$server-tls
mkdir -p "$suite"
if [ ! -x "$suite/timedrun" ] || [ "$src/timedrun.c" -nt "$suite/timedrun" ]; then
  gcc -O2 -o "$suite/timedrun.$$" "$src/timedrun.c" ||
    { echo "run_suite.sh: cannot compile $src/timedrun.c" >&2; exit 1; }
  mv "$suite/timedrun.$$" "$suite/timedrun"
fi
rm -rf "$work"
mkdir -p "$work/t" "$work/logs"
for f in "$src"/* "$src"/t/*; do
  rel=${f#"$src"/}
  case "$rel" in t|memcached|memcached-debug|timedrun) continue ;; esac
  ln -s "$f" "$work/$rel"
done
if [ "$server" = memcached-vanilla ]; then
  ln -s "$bin_dir/$server-debug" "$work/memcached-debug"
else
  # The ports refuse -o ext_path at start (mc_port_init, exit 64) but their
  # -h still lists it, and the suite decides whether to try extstore from
  # -h (supports_extstore). Their memcached-debug is the binary under a
  # wrapper that leaves ext_path out of -h and runs it unchanged otherwise
  # (exec: same process), so the suite skips extstore as it does for a
  # build without it. The extstore-only files are in suite-exclusions.txt.
  cat >"$work/memcached-debug" <<WRAPPER
#!/usr/bin/env bash
# $server-debug for memcached's t/*.t (written by run_suite.sh): -h without ext_path.
if [ "\$#" = 1 ] && [ "\$1" = -h ]; then
  set -o pipefail
  "$bin_dir/$server-debug" -h | grep -v ext_path
  exit
fi
exec "$bin_dir/$server-debug" "\$@"
WRAPPER
  chmod +x "$work/memcached-debug"
fi
ln -s "$bin_dir/$server" "$work/memcached"
ln -s "$suite/timedrun" "$work/timedrun"

# ---- what to run --------------------------------------------------------------
if [ ${#files[@]} -eq 0 ]; then
  if [ $core = 1 ]; then
    files=("${CORE[@]}")
  else
    files=()
    for f in "$src"/t/*.t; do files+=("t/${f##*/}"); done
  fi
fi

# excluded FILE: the reason FILE is not run against this server, if it is listed.
excl_file=$here/suite-exclusions.txt
excluded() {
  local glob file reason globs
  [ -f "$excl_file" ] || return 1
  while read -r glob file reason; do
    case "$glob" in ''|'#'*) continue ;; esac
    [ "$file" = "$1" ] || continue
    local g
    IFS=, read -ra globs <<<"$glob"
    for g in "${globs[@]}"; do
      # shellcheck disable=SC2053
      if [[ $server == $g ]]; then
        echo "${reason:-(no reason given)}"
        return 0
      fi
    done
  done <"$excl_file"
  return 1
}

# binary-sasl.t runs only when asked to, and needs saslpasswd2 (sasl2-bin):
# asked to whenever that is there (the servers are built with SASL).
if command -v saslpasswd2 >/dev/null 2>&1 || [ -x /usr/sbin/saslpasswd2 ]; then
  export RUN_SASL_TESTS=1
fi
unset SSL_TEST T_MEMD_USE_DAEMON VALGRIND_TEST
[ $tls = 1 ] && export SSL_TEST=1

# ---- run ----------------------------------------------------------------------
mode=
[ $tls = 1 ] && mode=" over TLS"
echo "memcached's t/*.t against $server$mode ($bin_dir/$server-debug), in $work"
declare -a rows
npass=0 nfail=0 nexcl=0 nskip=0
failed=()
start_all=$(date +%s)
for f in "${files[@]}"; do
  f=t/${f#t/}
  name=${f#t/}
  if [ ! -f "$src/$f" ]; then
    rows+=("$(printf '%-28s %-9s %s' "$f" FAIL "no such file in $src")")
    nfail=$((nfail + 1)); failed+=("$f")
    continue
  fi
  if reason=$(excluded "$f"); then
    rows+=("$(printf '%-28s %-9s %s' "$f" excluded "$reason")")
    nexcl=$((nexcl + 1))
    continue
  fi
  log=$work/logs/${name%.t}.log
  t0=$(date +%s.%N)
  # timeout leads its own process group: on expiry it signals the whole
  # group, the servers the test started included. Whatever is left of the
  # group afterwards (a server a dying test did not stop) goes too.
  (cd "$work" && exec timeout -k 10 "$timeout" perl "$f") </dev/null >"$log" 2>&1 &
  pid=$!
  wait "$pid"
  rc=$?
  kill -KILL -- "-$pid" 2>/dev/null
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  nok=$(grep -c '^ok ' "$log")
  plan=$(sed -n 's/^1\.\.\([0-9]*\).*/\1/p' "$log" | head -1)
  if [ $rc = 0 ] && grep -qi '^1\.\.0 # skip' "$log"; then
    result=skipped
    detail=$(sed -n 's/^1\.\.0 # [Ss][Kk][Ii][Pp][^ ]* *//p' "$log" | head -1)
    nskip=$((nskip + 1))
  elif [ $rc = 0 ]; then
    result=pass
    detail="$nok/${plan:-?} ok"
    npass=$((npass + 1))
  else
    if [ $rc = 124 ] || [ $rc = 137 ]; then result=TIMEOUT; else result=FAIL; fi
    detail="$nok/${plan:-?} ok, exit $rc, log $log"
    nfail=$((nfail + 1)); failed+=("$f")
  fi
  rows+=("$(printf '%-28s %-9s %6ss  %s' "$f" "$result" "$secs" "$detail")")
  printf '  %-28s %s\n' "$f" "$result"
done
elapsed=$(( $(date +%s) - start_all ))

echo
echo "== memcached's t/*.t against $server$mode =="
printf '%s\n' "${rows[@]}"
echo "== $server$mode: $npass passed, $nfail failed, $nskip skipped by the test itself, $nexcl excluded; ${elapsed}s =="
if [ $nfail -gt 0 ]; then
  for f in "${failed[@]}"; do
    log=$work/logs/$(basename "${f%.t}").log
    [ -f "$log" ] || continue
    echo
    echo "---- $f (last lines of $log) ----"
    grep -n '^not ok\|^#\|Failed\|croak\|died\|Dubious' "$log" | head -20
    tail -5 "$log"
  done
  exit 1
fi
exit 0
