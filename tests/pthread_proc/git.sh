#!/usr/bin/env bash
# git.sh LIB — git's own threads and pipes under LD_PRELOAD=LIB: a repository
# of a few hundred objects repacked (git repack -a -d runs pack-objects as a
# child and reads its output through a pipe with stdio), collected (git gc)
# with pack.threads=8, then checked with git fsck. Each step bounded in time;
# skipped (77) without git.
set -uo pipefail
lib=$1
command -v git > /dev/null || { echo "*** SKIPPED: git is not installed ***"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
export GIT_CONFIG_NOSYSTEM=1 HOME=$tmp GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
git init -q r && cd r || exit 1
for i in $(seq 1 40); do
  seq "$i" 3000 > "f$((i % 7))"
  git add . && git commit -q -m "c$i" || exit 1
done
run() {
  LD_PRELOAD=$lib timeout 120 git -c pack.threads=8 "$@" > "$tmp/out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then cat "$tmp/out"; echo "git: git $* exited $rc under the preload"; exit 1; fi
  echo "git: git $* ok"
}
run repack -a -d -q
run gc -q
run repack -a -d -f -q
run fsck --full
[ "$(git rev-list --count HEAD)" = 40 ] || { echo "git: history lost"; exit 1; }
echo "git: ok"
