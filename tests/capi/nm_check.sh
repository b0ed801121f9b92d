#!/usr/bin/env bash
# nm_check.sh GLIBC_BUILD LOOM_BUILD [GLIBC_BUILD LOOM_BUILD ...]
#
# A loom build of a pthread program must not reference any libc function
# that loom/pthread.h maps (pthread_*, sem_*, sched_yield, sleep, usleep,
# nanosleep, clock_nanosleep): each must have become a loom_* call. The
# glibc build of the same program is checked to reference some, so that the
# check itself is seen to work.
set -euo pipefail
mapped='^(pthread_|sem_|sched_yield$|sleep$|usleep$|nanosleep$|clock_nanosleep$)'
undefined() { nm -D --undefined-only "$1" | awk '{print $NF}' | sed 's/@.*//'; }
status=0
while [ $# -ge 2 ]; do
  glibc=$1 loom=$2
  shift 2
  if ! undefined "$glibc" | grep -Eq "$mapped"; then
    echo "nm_check: $(basename "$glibc") references no pthread symbol: the check proves nothing"
    status=1
  fi
  bad=$(undefined "$loom" | grep -E "$mapped" || true)
  if [ -n "$bad" ]; then
    echo "nm_check: $(basename "$loom") still calls libc's:" $bad
    status=1
  fi
  if ! undefined "$loom" | grep -q '^loom_'; then
    echo "nm_check: $(basename "$loom") calls no loom_ function"
    status=1
  fi
done
[ $status -eq 0 ] && echo "nm_check: no mapped libc symbol in the loom builds"
exit $status
