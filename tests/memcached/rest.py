#!/usr/bin/env python3
"""loom-memcached's idle connections rest: no stack while waiting for a request.

    rest.py [BINARY] [--connections N] [--no-rest] [--default-bin-dir DIR]

Opens N connections (default 1,000) to BINARY (-t 1), each stores its own
key and then stays idle; the server's fibre listing (LOOM_DUMP_SIGNAL) must
show every connection "resting: fd N (no stack)" -- with --no-rest
(MC_PORT_REST=0, the old path) every one blocked on its stack instead --
and then every connection must serve again: its key read back, twice, each
time after resting. Prints the server's resident memory per idle connection
(not asserted). New connections are listed resting before they send
anything (born at rest). Then -o idle_timeout with resting connections: a
connection idle past it is closed by its own thread's timed rest (also one
that never sent a byte), and one that keeps talking is not. Exit 77 when BINARY is not built.
"""

import argparse
import os
import re
import resource
import signal
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from differential import Server, parse_with_binary  # noqa: E402

FAILURES = []


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL: " + msg, flush=True)
    return cond


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Listing:
    """The server's fibre listing, asked for by signal, read from its stderr."""

    def __init__(self, srv, err):
        self.srv, self.err = srv, err

    def take(self):
        self.err.seek(0, os.SEEK_END)
        start = self.err.tell()
        os.kill(self.srv.proc.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            self.err.seek(start)
            text = self.err.read().decode(errors="replace")
            if re.search(r"^loom: \d+ live fibres", text, re.M):
                return text
            time.sleep(0.05)
        return ""

    def states(self, fds):
        """fd -> state for the connection fibres on those descriptors."""
        out = {}
        for m in re.finditer(r"(resting: fd (\d+) \(no stack\)|blocked: fd (\d+) \([a-z_0-9]+\))", self.take()):
            fd = int(m.group(2) or m.group(3))
            if fd in fds:
                out[fd] = "resting" if m.group(2) else "blocked"
        return out

    def wait_for(self, fds, want, seconds=10):
        """Until every fd's fibre is in state `want` (or seconds pass)."""
        deadline = time.monotonic() + seconds
        while True:
            st = self.states(fds)
            n = sum(1 for fd in fds if st.get(fd) == want)
            if n == len(fds) or time.monotonic() > deadline:
                return n
            time.sleep(0.2)


def recv_until(c, end):
    buf = b""
    while not buf.endswith(end):
        d = c.recv(4096)
        if not d:
            break
        buf += d
    return buf


def server_fds(pid, port):
    """The server's descriptors of connections accepted on port (by inode)."""
    inodes = set()
    for tab in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(tab) as f:
                for line in f.readlines()[1:]:
                    p = line.split()
                    if int(p[1].split(":")[1], 16) == port and p[3] == "01":  # local port, ESTABLISHED
                        inodes.add(p[9])
        except OSError:
            pass
    fds = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", link)
        if m and m.group(1) in inodes:
            fds.add(int(fd))
    return fds


def idle_connections(binary, n, rest):
    err = tempfile.TemporaryFile()
    srv = Server(binary, ["-U", "0", "-t", "1", "-c", str(n + 100)], stderr=err)
    listing = Listing(srv, err)
    want = "resting" if rest else "blocked"
    try:
        time.sleep(0.3)
        before = rss_kib(srv.proc.pid)
        cs = [srv.connect(timeout=20) for _ in range(n)]
        # Connections that have not sent yet start at rest (no stack at all),
        # once the server has accepted them all.
        deadline = time.monotonic() + 10
        while len(fds := server_fds(srv.proc.pid, srv.port)) < n and time.monotonic() < deadline:
            time.sleep(0.1)
        got = listing.wait_for(fds, want)
        check(got == len(fds) and len(fds) >= n, "%d of %d new connections %s (%d found)" % (got, n, want, len(fds)))
        for i, c in enumerate(cs):
            c.sendall(b"set rest%d 0 0 %d\r\n%d\r\n" % (i, len(str(i)), i))
        for i, c in enumerate(cs):
            check(recv_until(c, b"\r\n") == b"STORED\r\n", "set on connection %d" % i)
        fds = server_fds(srv.proc.pid, srv.port)
        check(len(fds) >= n, "found %d of the server's %d connections" % (len(fds), n))
        for rnd in range(2):
            got = listing.wait_for(fds, want)
            check(got == len(fds), "round %d: %d of %d idle connections %s" % (rnd, got, len(fds), want))
            if rnd == 0:
                time.sleep(0.5)  # the stack caches trim once idle
                after = rss_kib(srv.proc.pid)
                print("%s, %d idle connections, rest %s: %.2f KiB resident per connection (%d -> %d KiB)"
                      % (os.path.basename(binary), n, "on" if rest else "off", (after - before) / n, before, after),
                      flush=True)
            for i, c in enumerate(cs):
                c.sendall(b"get rest%d\r\n" % i)
            bad = 0
            for i, c in enumerate(cs):
                if recv_until(c, b"END\r\n") != b"VALUE rest%d 0 %d\r\n%d\r\nEND\r\n" % (i, len(str(i)), i):
                    bad += 1
            check(bad == 0, "round %d: %d connections did not serve their key after idling" % (rnd, bad))
        for c in cs:
            c.close()
        check(srv.alive(), "the server died")
    finally:
        srv.stop()


def idle_timeout(binary, rest):
    """-o idle_timeout=2: resting connections are closed by their timed rest."""
    err = tempfile.TemporaryFile()
    srv = Server(binary, ["-U", "0", "-t", "1", "-o", "idle_timeout=2"], stderr=err)
    try:
        idle = [srv.connect(timeout=20) for _ in range(20)]
        busy = srv.connect(timeout=20)
        for c in idle[:10]:  # the others never send: born at rest, timed out there
            c.sendall(b"version\r\n")
            check(recv_until(c, b"\r\n").startswith(b"VERSION"), "version before the timeout")
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:  # busy talks every 0.5 s: never idle long enough
            busy.sendall(b"version\r\n")
            check(recv_until(busy, b"\r\n").startswith(b"VERSION"), "the busy connection answers")
            time.sleep(0.5)
        closed = 0
        for c in idle:
            c.settimeout(5)
            try:
                closed += c.recv(100) == b""
            except OSError:
                pass
        check(closed == len(idle), "%d of %d idle connections closed by -o idle_timeout=2" % (closed, len(idle)))
        busy.sendall(b"version\r\n")
        check(recv_until(busy, b"\r\n").startswith(b"VERSION"), "the busy connection survives")
        check(srv.alive(), "the server died")
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", nargs="?", default="loom-memcached")
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--no-rest", action="store_true", help="MC_PORT_REST=0: connections wait on their stacks")
    a, binary = parse_with_binary(ap)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, a.connections + 300)), hard))
    os.environ["LOOM_DUMP_SIGNAL"] = "SIGUSR2"
    os.environ["MC_PORT_REST"] = "0" if a.no_rest else "1"
    t0 = time.monotonic()
    idle_connections(binary, a.connections, not a.no_rest)
    idle_timeout(binary, not a.no_rest)
    print("rest: %s (rest %s), %d failures, %.1f s"
          % (binary, "off" if a.no_rest else "on", len(FAILURES), time.monotonic() - t0))
    print("FAIL" if FAILURES else "PASS")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
