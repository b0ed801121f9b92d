#!/usr/bin/env python3
"""scripts/profile_request.py — one request of two servers side by side:
user-space instructions by symbol (callgrind) and system calls (strace -c -f),
per operation, under the benchmarks' own loads.

    scripts/profile_request.py memcached [--configs vanilla,loom,loom-norest] [--connections 100]
    scripts/profile_request.py web [--configs epoll,uring,loop] [--connections 1000] [--diff epoll,uring] [--close]
    common: [--short S] [--long L] [--no-strace] [--no-callgrind] [--top N] [--bin BUILD]
            [--keep DIR] [--reuse DIR (tables again from a --keep run)]

memcached: each server `-t 1 -U 0 -c 4096` on CPU 1 under callgrind (then
under strace -c -f), apps/mcload on CPU 0 (--connections N --depth 1
--write-ratio 0.1 --value-size 32, as scripts/bench memcached); operations
= the server's cmd_get + cmd_set (read with `stats` once mcload is done).
web: build/apps/webserver/webserver --processors 1 (LOOM_IO=uring for
`uring`) or the epoll loop (`loop`), wrk -t1 -cN keep-alive on CPU 0;
requests = wrk's count.

Each server runs twice, with the load for SHORT and then LONG seconds, and
every figure is (X(long) - X(short)) / (ops(long) - ops(short)): start-up,
the connections' set-up and shutdown cancel out. Instructions do not move
with the machine's load; how many requests one wake-up (epoll_wait) finds
does (under callgrind the server is ~50x slower than its client, so its
batches are larger than in a timed run): the per-batch costs (epoll_wait,
the poller's loop) are the ones to read with care.

Groups (symbol and object rules in GROUPS below) add up to the total; the
top symbols are listed for each config, and with --diff A,B the symbols
where two configs differ most. Figures of 2026-11-28: docs/BENCHMARKS.md,
"Issue 23: one request side by side". Each server takes 1-2 minutes a run
under callgrind; a whole memcached or web invocation about 10 minutes.
"""

import argparse
import glob
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import free_port, raise_nofile, wait_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (group, object regex or None, symbol regex or None): first match wins.
GROUPS = [
    ("libc: system call entry", r"libc", r"^(__libc_|__GI___libc_)?(read|write|sendmsg|recvmsg|recv|send|"
     r"epoll_wait|epoll_ctl|epoll_pwait|syscall|io_uring_enter|__syscall_cancel.*|__internal_syscall_cancel|"
     r"__GI___(read|write|sendmsg|epoll_wait|poll)|accept4?|close|poll)$"),
    ("libc: malloc/free", r"libc", r"(malloc|free|_int_|tcache|calloc|realloc|unlink_chunk|malloc_consolidate)"),
    ("libc: pthread mutexes", r"libc", r"pthread_(mutex|cond|spin|rwlock)|lll_|__lll"),
    ("libc: other", r"libc", None),
    ("libevent", r"libevent", None),
    ("ld.so", r"ld-linux|ld\.so", None),
    ("loom: mutexes (C API, loom::Mutex, owner identity)", None,
     r"mutex_of|loom_mutex_|loom::Mutex|loom::rt::identity|cond_of|CondVar|loom_cond_"),
    ("loom: rest (stack back to the cache, restart on a cached stack)", None,
     r"(^|[^a-z])rest|arm_rest|post_rest|restart|give_stack|StackCache|context_make|context_destroy|"
     r"start_fibre_context|fibre_entry|make_fcontext"),
    ("loom: scheduler and switch (ready queue, dispatch, fcontext)", None,
     r"jump_fcontext|ontop_fcontext|Processor::|ReadyQueue|next_ready|schedule|switch_to|park\(|suspend|"
     r"push_local|push_owned|fire_timers|this_processor|sched_yield"),
    ("loom: I/O (wrappers, fd entry, readiness word, poll, poller)", None,
     r"loom::io::|loom_(read|write|sendmsg|recvmsg|poll|accept|writev|readv|send|recv)|syscall_op|FdTable|check_fd|"
     r"note_input|nowait|read_op|write_op|on_ready|post_ready|ReadyWord|look\(|io_arm|finish\(|poll_one_until|"
     r"poll_impl|deliver|Poller|poller|[Uu]ring|[Ee]poll|note_wait|IoState|ring_|sqe|cqe"),
    ("loom: keys, errno, current fibre", None,
     r"specific|fibre_table|current\(|table\(|errno|current_record|this_fibre_or_null"),
    ("loom: other", None, r"loom"),
    ("memcached-port glue (mc_port.c)", None,
     r"^(mc_port|conn_continue|conn_turn|conn_loop|conn_first|conn_begin|wait_conn|released|gate_of|idle_timeout)"),
]


def group_of(sym, obj):
    for g, ob, sy in GROUPS:
        if ob and not re.search(ob, obj):
            continue
        if g.startswith("loom") and not re.search(r"loom|fcontext", sym):
            continue
        if sy and not re.search(sy, sym):
            continue
        return g
    return "the program's own code"


def self_costs(out_file):
    """callgrind output -> {(symbol, object): self instructions}."""
    r = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", out_file],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
    costs, total = {}, None
    for line in r.stdout.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+(\(\s*[\d.]+%\)\s+)?(PROGRAM TOTALS|\S.*)$", line)
        if not m:
            continue
        n = int(m.group(1).replace(",", ""))
        rest = m.group(3)
        if rest == "PROGRAM TOTALS":
            total = n
            continue
        mo = re.match(r"^(.*?)(?: \[(.*)\])?$", rest)
        name, obj = mo.group(1), mo.group(2) or ""
        if ":" not in name or " " in name.split(":", 1)[0]:
            continue  # not a function line
        name = name.split(":", 1)[1]  # file:function (file names here have no colon)
        costs[(name, obj)] = costs.get((name, obj), 0) + n
    return total, costs


def strace_counts(out_file):
    """strace -c output -> {syscall: calls}."""
    counts = {}
    with open(out_file) as f:
        for line in f:
            p = line.split()
            if len(p) >= 5 and re.match(r"^[\d.]+$", p[0]) and p[-1] != "total":
                calls = int(p[3])
                counts[p[-1]] = counts.get(p[-1], 0) + calls
    return counts






def mc_ops(port):
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            d = s.recv(65536)
            if not d:
                break
            buf += d
    st = dict(re.findall(rb"STAT (\S+) (\S+)", buf))
    return int(st[b"cmd_get"]) + int(st[b"cmd_set"])


def traced_pid(p, wrapper):
    """The server's pid: the Popen's own under callgrind (valgrind runs the
    program in its process); strace's child under strace."""
    if wrapper != "strace":
        return p.pid
    for _ in range(100):
        try:
            with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
                kids = f.read().split()
            if kids:
                return int(kids[0])
        except OSError:
            pass
        time.sleep(0.1)
    return p.pid


def wrapped(wrapper, out):
    if wrapper == "callgrind":
        return ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}"]
    return ["strace", "-c", "-f", "-o", out]


def run_memcached(a, cfg, wrapper, seconds, out):
    binary, env_extra = MC_CONFIGS[cfg]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_") and not k.startswith("MC_PORT")}
    env.update(env_extra)
    cmd = ["taskset", "-c", "1"] + wrapped(wrapper, out) + [os.path.join(a.bin, "memcached-port/bin", binary),
                                                          "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "1",
                                                          "-c", "4096"]
    if os.geteuid() == 0:
        cmd += ["-u", "root"]  # callgrind opens its file as root, and writes it as whom memcached became
    # memcached sets both open-file limits to -c; valgrind keeps 12 descriptors
    # of its own and refuses to move the hard limit, so it starts at -c + 12.
    nofile = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (4096 + 12, 4096 + 12))) \
        if wrapper == "callgrind" else raise_nofile
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=nofile)
    try:
        if not wait_port(port, 60):
            raise SystemExit(f"{cfg} did not listen: {' '.join(cmd)}")
        load = ["taskset", "-c", "0", os.path.join(a.bin, "apps/mcload/mcload"), "--server", f"127.0.0.1:{port}",
                "--connections", str(a.connections), "--threads", "1", "--depth", "1", "--write-ratio", "0.1",
                "--keys", "10000", "--value-size", "32", "--warmup", "0.5", "--duration", str(seconds),
                "--no-validate"]
        r = subprocess.run(load, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=seconds + 300, preexec_fn=raise_nofile)
        if r.returncode != 0:
            raise SystemExit(f"mcload failed against {cfg}: {r.stdout[-500:]}")
        ops = mc_ops(port)
    finally:
        os.kill(traced_pid(p, wrapper), signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    return ops, err.decode(errors="replace")


def stop(p, pid, port):
    """SIGTERM to the server, then a connection now and then until it is
    gone: under valgrind 3.19 a thread blocked in io_uring_enter holds
    valgrind's lock (the call is not marked as one that may block), so
    neither the signal nor the other threads run until a completion comes."""
    os.kill(pid, signal.SIGTERM)
    for _ in range(600):
        try:
            return p.communicate(timeout=0.2)[1]
        except subprocess.TimeoutExpired:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            except OSError:
                pass
    os.kill(pid, signal.SIGKILL)
    return p.communicate()[1]


def run_web(a, cfg, wrapper, seconds, out):
    argv, env_extra = WEB_CONFIGS[cfg]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env.update(env_extra)
    port = free_port()
    # A fixed port, looked at by connecting: the listening line may not come
    # under valgrind with io_uring until a connection arrives (see stop).
    cmd = ["taskset", "-c", "1"] + wrapped(wrapper, out) + [os.path.join(a.bin, argv[0])] + argv[1:] + \
        ["--port", str(port)]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=raise_nofile)
    try:
        if not wait_port(port, 60):
            raise SystemExit(f"{cfg} did not listen: {' '.join(cmd)}")
        load = ["taskset", "-c", "0", "wrk", "-t1", f"-c{a.connections}", f"-d{seconds:g}s", "--timeout", "30s"] + \
            (["-H", "Connection: close"] if a.close else []) + [f"http://127.0.0.1:{port}/plaintext"]
        r = subprocess.run(load, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=seconds + 300, preexec_fn=raise_nofile)
        m = re.search(r"(\d+) requests in", r.stdout)
        if r.returncode != 0 or not m:
            raise SystemExit(f"wrk failed against {cfg}: {r.stdout[-500:]}")
        ops = int(m.group(1))
    finally:
        err = stop(p, traced_pid(p, wrapper), port)
    return ops, err.decode(errors="replace")


MC_CONFIGS = {
    "vanilla": ("memcached-vanilla", {}),
    "loom": ("loom-memcached", {}),
    "loom-norest": ("loom-memcached", {"MC_PORT_REST": "0"}),
}
WEB_CONFIGS = {
    "epoll": (["apps/webserver/webserver", "--runtime", "loom", "--processors", "1"], {"LOOM_IO": "epoll"}),
    "uring": (["apps/webserver/webserver", "--runtime", "loom", "--processors", "1"], {"LOOM_IO": "uring"}),
    "loop": (["apps/baselines/epoll-web"], {}),
}


def measure(a, cfg, wrapper, keep):
    runs = []
    for seconds in (a.short, a.long):
        name = f"{a.server}-{cfg}-{wrapper}-{seconds:g}s"
        if a.reuse:  # the files a --keep run left
            out = os.path.join(a.reuse, name)
            with open(out + ".ops") as f:
                ops = int(f.read())
            runs.append((ops, callgrind_costs(out) if wrapper == "callgrind" else strace_counts(out)))
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out")
            ops, err = (run_memcached if a.server == "memcached" else run_web)(a, cfg, wrapper, seconds, out)
            if "falls back" in err:
                raise SystemExit(f"{cfg}: {err.strip()}")
            if keep:
                os.makedirs(keep, exist_ok=True)
                for f in glob.glob(out + "*"):
                    subprocess.run(["cp", f, os.path.join(keep, name + f[len(out):])])
                with open(os.path.join(keep, name + ".ops"), "w") as f:
                    f.write(f"{ops}\n")
            runs.append((ops, callgrind_costs(out) if wrapper == "callgrind" else strace_counts(out)))
            print(f"  {cfg} {wrapper} {seconds:g}s: {ops} operations", file=sys.stderr, flush=True)
    (o1, c1), (o2, c2) = runs
    if o2 <= o1:
        raise SystemExit(f"{cfg}: the long run served no more than the short one ({o2} <= {o1})")
    n = o2 - o1
    keys = set(c1) | set(c2)
    return n, {k: (c2.get(k, 0) - c1.get(k, 0)) / n for k in keys}


def callgrind_costs(out):
    """{(symbol, object): self instructions} of the threads that serve
    requests, with ("(total)", "") their sum and ("(other threads)", "") the
    rest. A thread serves requests if it runs drive_machine (memcached:
    vanilla's worker, loom-memcached's connections' processor; the others are
    memcached's LRU maintainer, crawler, logger, listener, whose cost goes by
    time, not by request) — or, for the web servers, every thread."""
    costs, other = {}, 0
    per_thread = [self_costs(f) for f in sorted(glob.glob(out + "-*")) or [out]]
    drives = [any(s == "drive_machine" for s, _ in c) for _, c in per_thread]
    for (total, c), d in zip(per_thread, drives):
        if any(drives) and not d:
            other += total
            continue
        costs[("(total)", "")] = costs.get(("(total)", ""), 0) + total
        for k, v in c.items():
            costs[k] = costs.get(k, 0) + v
    costs[("(other threads)", "")] = other
    return costs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("server", choices=["memcached", "web"])
    ap.add_argument("--configs")
    ap.add_argument("--connections", type=int)
    ap.add_argument("--short", type=float, default=3)
    ap.add_argument("--long", type=float, default=9)
    ap.add_argument("--no-strace", action="store_true")
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--close", action="store_true", help="web: every request on a new connection (Connection: close)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build"))
    ap.add_argument("--keep", help="copy the callgrind and strace outputs into this directory")
    ap.add_argument("--reuse", help="read a --keep directory instead of running the servers")
    ap.add_argument("--diff", metavar="A,B", help="also list the symbols where configs A and B differ most")
    a = ap.parse_args()
    table = MC_CONFIGS if a.server == "memcached" else WEB_CONFIGS
    a.connections = a.connections or (100 if a.server == "memcached" else 1000)
    cfgs = (a.configs or ",".join(table)).split(",")
    for c in cfgs:
        if c not in table:
            ap.error(f"unknown config {c} (have {', '.join(table)})")
    print(f"{a.server}: {a.connections} connections, runs of {a.short} s and {a.long} s; per operation", flush=True)
    ins, sc = {}, {}
    for c in cfgs:
        if not a.no_callgrind:
            ins[c] = measure(a, c, "callgrind", a.keep)
        if not a.no_strace:
            sc[c] = measure(a, c, "strace", a.keep)
    if ins:
        print("\ninstructions per operation (callgrind), by group")
        groups = {}
        for c in cfgs:
            n, per = ins[c]
            g = {}
            for (sym, obj), v in per.items():
                if not sym.startswith("("):
                    k = group_of(sym, obj)
                    g[k] = g.get(k, 0) + v
            groups[c] = g
        names = sorted({k for g in groups.values() for k in g}, key=lambda k: -max(g.get(k, 0) for g in groups.values()))
        print("| group | " + " | ".join(cfgs) + " |")
        print("|---|" + "---:|" * len(cfgs))
        print("| all user space, the threads that serve requests | "
              + " | ".join(f"{ins[c][1][('(total)', '')]:,.0f}" for c in cfgs) + " |")
        for k in names:
            print(f"| {k} | " + " | ".join(f"{groups[c].get(k, 0):,.0f}" for c in cfgs) + " |")
        print("| other threads (by time, not by request) | "
              + " | ".join(f"{ins[c][1][('(other threads)', '')]:,.0f}" for c in cfgs) + " |")
        print("| (operations measured) | " + " | ".join(f"{ins[c][0]:,}" for c in cfgs) + " |")
        for c in cfgs:
            n, per = ins[c]
            print(f"\n{c}: top symbols, instructions per operation (self)")
            top = sorted(((v, s, o) for (s, o), v in per.items() if not s.startswith("(")), reverse=True)[:a.top]
            for v, s, o in top:
                print(f"  {v:8.1f}  {s}  [{os.path.basename(o)}]  <{group_of(s, o)}>")
    if ins and a.diff:
        x, y = a.diff.split(",")
        px, py = ins[x][1], ins[y][1]
        by = {}
        for (sym, obj), v in list(px.items()) + [(k, -v) for k, v in py.items()]:
            if not sym.startswith("("):
                k = sym.split("'")[0]  # callgrind's recursion marks
                by[k] = by.get(k, 0) - v
        print(f"\n{y} less {x}: instructions per operation, by symbol (largest differences)")
        for k, v in sorted(by.items(), key=lambda kv: -abs(kv[1]))[:a.top]:
            print(f"  {v:+8.1f}  {k[:150]}")
    if sc:
        print("\nsystem calls per operation (strace -c -f)")
        names = sorted({k for c in sc for k, v in sc[c][1].items() if abs(v) >= 0.001},
                       key=lambda k: -max(sc[c][1].get(k, 0) for c in sc))
        print("| system call | " + " | ".join(cfgs) + " |")
        print("|---|" + "---:|" * len(cfgs))
        print("| all | " + " | ".join(f"{sum(sc[c][1].values()):.3f}" for c in cfgs) + " |")
        for k in names:
            print(f"| {k} | " + " | ".join(f"{sc[c][1].get(k, 0):.3f}" for c in cfgs) + " |")
        print("| (operations measured) | " + " | ".join(f"{sc[c][0]:,}" for c in cfgs) + " |")


if __name__ == "__main__":
    main()
