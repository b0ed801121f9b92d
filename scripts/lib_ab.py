#!/usr/bin/env python3
"""scripts/lib_ab.py — before/after of a runtime change, in one session.

Runs the same binaries against two builds of libloom.so, interleaved
(ABBA order per round): the micro rows (micro_loom on CPU 1) and the web
server's server CPU per request (webserver --processors 1 on CPU 1, wrk -t1
on CPU 0: a 2 s warm-up, then 6 s measured, CPU from /proc/PID/stat).
A "before" build is a copy of build/libloom.so* made before the change:

    mkdir /tmp/before && cp -a build/libloom.so* /tmp/before/
    ... change, rebuild ...
    scripts/lib_ab.py --before /tmp/before [--after build] [--rounds 3] [--only micro|web]

A variant selected by a LOOM_* variable is compared the same way, with one
build: --before build --before-env LOOM_WAIT_FIRST=off.

Two whole trees (an old commit's build, whose libloom the new binaries
cannot load): --before-build OLD/build --before OLD/build; --after-arg
passes a flag to the after build's web server (--after-arg=--no-rest), and
--loop adds the epoll loop (the after build's epoll-web) to every round and
prints each build's ratio to it.

The binaries find libloom through their RUNPATH; LD_LIBRARY_PATH, which
the dynamic linker reads first, points each run at one of the builds.
Prints every run and the medians; asserts nothing.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bench_common import raise_nofile
from bench_web import parse_wrk, proc_cpu_ticks, wrk_cmd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MICRO_ROWS = "yield,create_join,mutex_handoff,sem_pingpong"
WEB_ROWS = [("keepalive", 100), ("close", 1000), ("keepalive", 1000), ("keepalive", 10000)]


def micro(build, lib, extra_env):
    env = dict(os.environ, LD_LIBRARY_PATH=lib, **extra_env)
    out = subprocess.run(["taskset", "-c", "1", f"{build}/apps/bench/micro_loom", "--bench", MICRO_ROWS,
                          "--duration", "0.3", "--warmup", "0.2", "--repeats", "3"],
                         env=env, capture_output=True, text=True, check=True).stdout
    return {d["bench"]: d["ns_per_op"] for d in map(json.loads, out.splitlines())}


def web(build, lib, extra_env, mode, conns, port, args=(), loop=False):
    env = dict(os.environ, LD_LIBRARY_PATH=lib, **extra_env)
    cmd = [f"{build}/apps/baselines/epoll-web"] if loop else \
        [f"{build}/apps/webserver/webserver", "--processors", "1", *args]
    srv = subprocess.Popen(["taskset", "-c", "1", *cmd, "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, preexec_fn=raise_nofile)
    try:
        time.sleep(0.3)
        subprocess.run(wrk_cmd(port, conns, 2, mode, "0"), capture_output=True, preexec_fn=raise_nofile, timeout=60)
        time.sleep(0.2)
        t0 = proc_cpu_ticks(srv.pid)
        out = subprocess.run(wrk_cmd(port, conns, 6, mode, "0"), capture_output=True, text=True,
                             preexec_fn=raise_nofile, timeout=60).stdout
        t1 = proc_cpu_ticks(srv.pid)
    finally:
        srv.terminate()
        srv.wait()
    n = parse_wrk(out)["requests"]
    if not n or t0 is None or t1 is None:
        sys.exit(f"lib_ab: no requests or no server CPU figure ({mode}, c={conns}): {out[-300:]}")
    return (t1 - t0) * 1e6 / os.sysconf("SC_CLK_TCK") / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="directory with the before build's libloom.so*")
    ap.add_argument("--after", default=os.path.join(ROOT, "build"), help="directory with the after build's (default build/)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="where the binaries are (default build/)")
    ap.add_argument("--before-build", help="where the before binaries are (default: --build)")
    ap.add_argument("--after-arg", action="append", default=[], metavar="FLAG",
                    help="web: a flag for the after build's server (repeatable)")
    ap.add_argument("--loop", action="store_true", help="web: the epoll loop too, each round; ratios to it")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=["micro", "web"])
    ap.add_argument("--connections", type=int, help="web: only one row (keep-alive unless --close), at this many connections")
    ap.add_argument("--close", action="store_true", help="web: with --connections, the Connection: close row")
    ap.add_argument("--before-env", action="append", default=[], metavar="NAME=VALUE",
                    help="set for the before runs only (repeatable)")
    a = ap.parse_args()
    before_env = {}
    for kv in a.before_env:
        name, eq, value = kv.partition("=")
        if not eq or not name:
            ap.error(f"--before-env {kv!r}: expected NAME=VALUE")
        before_env[name] = value
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    if a.connections is not None and not 1 <= a.connections <= 10000:
        ap.error("--connections must be 1 to 10000")
    for d in (a.before, a.after):
        if not os.path.exists(os.path.join(d, "libloom.so.0")):
            ap.error(f"{d}: no libloom.so.0 there")
    libs = {"before": a.before, "after": a.after}
    envs = {"before": before_env, "after": {}}
    builds = {"before": a.before_build or a.build, "after": a.build}
    args = {"before": [], "after": a.after_arg}
    res = {}
    port = 18400 + os.getpid() % 1000
    for r in range(a.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        if a.only != "web":
            for v in order:
                for row, ns in micro(builds[v], libs[v], envs[v]).items():
                    res.setdefault(("micro", row), {}).setdefault(v, []).append(ns)
                print(f"round {r + 1} micro {v:6}: " + " ".join(
                    f"{row}={res[('micro', row)][v][-1]:.1f}ns" for row in MICRO_ROWS.split(",")), flush=True)
        if a.only != "micro":
            rows = [("close" if a.close else "keepalive", a.connections)] if a.connections else WEB_ROWS
            for mode, conns in rows:
                for v in order + (("loop",) if a.loop else ()):
                    port += 1
                    if v == "loop":
                        us = web(a.build, a.after, {}, mode, conns, port, loop=True)
                    else:
                        us = web(builds[v], libs[v], envs[v], mode, conns, port, args[v])
                    res.setdefault(("web", f"{mode} c={conns}"), {}).setdefault(v, []).append(us)
                    print(f"round {r + 1} web {mode:9} c={conns:5} {v:6}: {us:.2f} µs CPU/request", flush=True)
    print(f"medians of {a.rounds} round(s): micro ns per operation, web server CPU µs per request")
    for (kind, row), v in res.items():
        b, f = statistics.median(v["before"]), statistics.median(v["after"])
        line = f"  {kind:5} {row:22} before {b:9.2f}  after {f:9.2f}  after/before {f / b:.3f}"
        if "loop" in v:
            l = statistics.median(v["loop"])
            line += f"  loop {l:.2f}: before/loop {b / l:.3f}, after/loop {f / l:.3f}"
        print(line)


if __name__ == "__main__":
    main()
