#!/usr/bin/env python3
"""scripts/instructions_per_request.py — the web server's user-space
instructions per request, counted by valgrind's callgrind.

    scripts/instructions_per_request.py SERVER [SERVER...] [--requests N] [--rounds R]

SERVER is loom's webserver binary (run with --runtime loom --processors 1)
or a whole command line in one argument ("build/apps/baselines/epoll-web",
"build/apps/webserver/webserver --runtime loom --processors 1 --no-rest"),
to which --port 0 is added. For each server: runs it under callgrind twice
per round, serving N and then 5N keep-alive requests
(10 connections, one request in flight on each), and reports
(I(5N) - I(N)) / 4N: the instructions one request costs, start-up and
shutdown cancelled out. Instruction counts, unlike times, do not move with
what else the machine runs: this is how a few instructions on a hot path
(e.g. statistics counters) are measured on a shared 2-core machine. Rounds
alternate between the binaries; prints each round and the median.
"""

import argparse
import os
import re
import select
import signal
import socket
import statistics
import subprocess
import tempfile

REQUEST = b"GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n"


def drive(port, n):
    conns = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(10)]
    for _ in range(n // len(conns)):
        for s in conns:
            s.sendall(REQUEST)
        for s in conns:
            buf = b""
            while not buf.endswith(b"Hello, World!"):
                chunk = s.recv(4096)
                if not chunk:
                    raise SystemExit("the server closed a connection")
                buf += chunk
    for s in conns:
        s.close()


def instructions(server, n):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        cmd = server.split() if " " in server or "epoll" in os.path.basename(server) else \
            [server, "--runtime", "loom", "--processors", "1"]
        p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + cmd + ["--port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        ready, _, _ = select.select([p.stdout], [], [], 60)
        line = p.stdout.readline().decode() if ready else ""
        m = re.search(r"127\.0\.0\.1:(\d+)/", line)
        if not m:
            p.kill()
            raise SystemExit(f"{server} did not start under valgrind: {line!r}")
        drive(int(m.group(1)), n)
        p.send_signal(signal.SIGTERM)
        p.wait(60)
        with open(out) as f:
            for l in f:
                if l.startswith("summary:"):
                    return int(l.split()[1])
    raise SystemExit("no callgrind summary")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("servers", nargs="+")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    if a.requests < 10 or a.rounds < 1:
        ap.error("--requests at least 10, --rounds at least 1")
    per = {s: [] for s in a.servers}
    for r in range(a.rounds):
        for s in a.servers:
            small, large = instructions(s, a.requests), instructions(s, 5 * a.requests)
            per[s].append((large - small) / (4 * a.requests))
            print(f"round {r + 1}: {s}: {per[s][-1]:.0f} instructions per request", flush=True)
    for s in a.servers:
        print(f"median: {s}: {statistics.median(per[s]):.0f} instructions per request")


if __name__ == "__main__":
    main()
