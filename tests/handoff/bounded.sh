# bounded.sh — sourced by tests/handoff's scripts: runs that may hang.
#
# bounded SECONDS OUT ERR CMD... runs CMD with its standard output in OUT and
# its standard error in ERR (standard input /dev/null); returns its exit
# status, or 124 if it ran past SECONDS. Before the kill a hung run's kernel
# threads are described at the end of ERR (tasks PID; below), so that a hang
# says where loom lost its processors. The program is killed by its own PID
# (SIGKILL: a hung preloaded program need not answer SIGTERM) and reaped.
bounded() {
  local limit=$1 out=$2 err=$3
  shift 3
  "$@" < /dev/null > "$out" 2> "$err" &
  local pid=$! deadline=$((SECONDS + limit + 1)) state  # (SECONDS counts whole seconds)
  while :; do
    state=$(sed 's/.*) \(.\).*/\1/' "/proc/$pid/stat" 2> /dev/null)
    { [ -z "$state" ] || [ "$state" = Z ]; } && break
    if [ $SECONDS -ge $deadline ]; then
      { echo "bounded: still running after $limit s: $*"; tasks $pid; } >> "$err"
      kill -KILL $pid 2> /dev/null
      wait $pid 2> /dev/null
      return 124
    fi
    sleep 0.05
  done
  wait $pid
}

# tasks PID: one line per kernel thread of PID: its name, the kernel's state
# letter (R running, S asleep), the CPU time it used (user+system, in clock
# ticks) and the system call it is in (its number, from /proc's syscall
# file: "running" if none; 202 is futex, 0 read on x86-64).
tasks() {
  local t name stat call
  for t in /proc/"$1"/task/*; do
    name=$(cat "$t/comm" 2> /dev/null)
    stat=$(sed 's/.*) //' "$t/stat" 2> /dev/null)
    call=$(cut -d' ' -f1 "$t/syscall" 2> /dev/null)
    set -- $stat
    echo "  task ${t##*/} ($name): state $1, cpu ${12:-?}+${13:-?} ticks, syscall ${call:-?}"
  done
}
