#!/usr/bin/env python3
"""Concurrency test for a memcached binary (loom-memcached by default).

1. incr: many connections increment shared counters at once; the final
   values are the exact sums, and the counter incremented by 1 everywhere
   handed out every value exactly once.
2. Torn values: writers set values with a self-checking pattern (the header
   names writer, sequence and length; the body is derived from them) while
   readers fetch the same keys: every value read is whole.
3. Nothing acknowledged is lost: many connections store distinct keys; each
   key that got STORED is afterwards readable with its value.
4. Bursts beyond -c: a server with -c 100 gets bursts of 500 connections;
   the connections it accepts and those it refuses ("ERROR Too many open
   connections", then closed) are counted and compared with Debian's
   /usr/bin/memcached under the same burst, and after every burst the server
   serves normally and its curr_connections / total_connections /
   rejected_connections stats add up.

Exit 0 on success, 1 on failure, 77 when the binary is absent. Nothing here
is timed: loops run a fixed number of operations.
"""

import argparse
import os
import random
import resource
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from differential import (REFERENCE, Server, add_bin_dir_option, read_exact_reply,  # noqa: E402
                          resolve_binary, use_bin_dir_option)

FLAGS = ["-U", "0", "-m", "512", "-c", "4096", "-t", "2"]


class Failures(list):
    def check(self, cond, msg):
        if not cond:
            self.append(msg)
            print("  FAIL: " + msg, flush=True)
        return cond


class Conn:
    """A connection with a read buffer (a reply may arrive with the next)."""

    def __init__(self, srv):
        self.s = srv.connect(timeout=30)
        self.buf = b""

    def sendall(self, data):
        self.s.sendall(data)

    def _fill(self):
        d = self.s.recv(262144)
        if not d:
            raise RuntimeError("connection closed by the server")
        self.buf += d

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        i = self.buf.index(b"\r\n") + 2
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def close(self):
        self.s.close()


def conn(srv):
    return Conn(srv)


def run_threads(n, target):
    errors = []

    def wrap(i):
        try:
            target(i)
        except Exception as e:  # reported by the caller
            errors.append("thread %d: %r" % (i, e))
    ts = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return errors + ["thread stalled"] * sum(t.is_alive() for t in ts)


def get(c, key):
    c.sendall(b"get %s\r\n" % key)
    head = c.line()
    if head == b"END\r\n":
        return None
    parts = head.split()
    if parts[0] != b"VALUE":
        raise RuntimeError("get %r: %r" % (key, head))
    n = int(parts[3])
    body = c.exact(n + 7)
    if body[n:] != b"\r\nEND\r\n":
        raise RuntimeError("bad value trailer %r" % body[n:])
    return body[:n]


# ---------------------------------------------------------------------------

def test_incr(srv, f, nconn, nops):
    print("incr: %d connections x %d incr on 4 shared counters" % (nconn, nops), flush=True)
    c = conn(srv)
    for k in range(4):
        c.sendall(b"set ctr:%d 0 0 1\r\n0\r\n" % k)
        f.check(c.line() == b"STORED\r\n", "set ctr")
    sums = [[0] * 4 for _ in range(nconn)]
    seen = [[] for _ in range(nconn)]
    bad = []
    socks = [conn(srv) for _ in range(nconn)]  # all open before anyone starts

    def worker(i):
        rng = random.Random(i)
        s = socks[i]
        for j in range(nops):
            k = rng.randrange(4)
            d = 1 if k == 0 else rng.randint(1, 1000)
            s.sendall(b"incr ctr:%d %d\r\n" % (k, d))
            r = s.line()
            if not r[:-2].isdigit():
                bad.append(r)
                continue
            sums[i][k] += d
            if k == 0:
                seen[i].append(int(r[:-2]))
        s.close()
    errs = run_threads(nconn, worker)
    f.check(not errs, "incr threads: %s" % errs[:3])
    f.check(not bad, "incr replies that are not numbers: %r" % bad[:3])
    for k in range(4):
        want = sum(s[k] for s in sums)
        v = get(c, b"ctr:%d" % k)
        f.check(v is not None and int(v) == want, "ctr:%d is %r, the increments sum to %d" % (k, v, want))
    allseen = sorted(x for s in seen for x in s)
    f.check(allseen == list(range(1, len(allseen) + 1)),
            "incr by 1 handed out %d values, not each of 1..%d once" % (len(allseen), len(allseen)))
    c.close()


def pattern(writer, seq, size):
    head = b"%d:%d:%d:" % (writer, seq, size)
    unit = bytes(((writer * 131 + seq * 7 + i) % 251) for i in range(251))
    body = (unit * (size // 251 + 1))[:max(0, size - len(head))]
    return head + body


def check_pattern(v):
    try:
        w, s, n, _ = v.split(b":", 3)
        return len(v) == int(n) and v == pattern(int(w), int(s), int(n))
    except ValueError:
        return False


def test_torn(srv, f, nwriters, nreaders, nsets):
    print("torn values: %d writers x %d sets, %d readers, 8 keys, values 10 B..300 KB" % (nwriters, nsets, nreaders),
          flush=True)
    done = threading.Event()
    reads = [0] * nreaders
    torn = []

    def writer(i):
        rng = random.Random(1000 + i)
        s = conn(srv)
        for seq in range(nsets):
            size = rng.choice([10, 100, 1000, 20000, 130000, 300000])
            v = pattern(i, seq, size)
            s.sendall(b"set tv:%d 0 0 %d\r\n%s\r\n" % (rng.randrange(8), len(v), v))
            r = s.line()
            if r != b"STORED\r\n":
                torn.append("set: %r" % r)
        s.close()

    def reader(i):
        rng = random.Random(2000 + i)
        s = conn(srv)
        while not done.is_set():
            v = get(s, b"tv:%d" % rng.randrange(8))
            reads[i] += 1
            if v is not None and not check_pattern(v):
                torn.append("torn value of %d bytes starting %r" % (len(v), v[:40]))
        s.close()
    rt = [threading.Thread(target=reader, args=(i,)) for i in range(nreaders)]
    for t in rt:
        t.start()
    errs = run_threads(nwriters, writer)
    done.set()
    for t in rt:
        t.join(60)
    f.check(not errs, "writer threads: %s" % errs[:3])
    f.check(not torn, "%d bad values, e.g. %s" % (len(torn), torn[:3]))
    f.check(sum(reads) > 0, "readers read nothing")
    print("  %d reads checked" % sum(reads), flush=True)


def test_acknowledged(srv, f, nconn, nkeys):
    print("acknowledged sets: %d connections x %d keys of 1 KB" % (nconn, nkeys), flush=True)
    stored = [dict() for _ in range(nconn)]

    def worker(i):
        s = conn(srv)
        for j in range(nkeys):
            k = b"ack:%d:%d" % (i, j)
            v = pattern(i, j, 1000)
            s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v))
            if s.line() == b"STORED\r\n":
                stored[i][k] = v
        s.close()
    errs = run_threads(nconn, worker)
    f.check(not errs, "set threads: %s" % errs[:3])
    total = sum(len(d) for d in stored)
    f.check(total == nconn * nkeys, "only %d of %d sets acknowledged" % (total, nconn * nkeys))
    missing = []

    def check(i):
        s = conn(srv)
        for k, v in stored[i].items():
            if get(s, k) != v:
                missing.append(k)
        s.close()
    errs = run_threads(nconn, check)
    f.check(not errs, "get threads: %s" % errs[:3])
    f.check(not missing, "%d acknowledged keys not readable, e.g. %r" % (len(missing), missing[:3]))


# ---------------------------------------------------------------------------

def stats(srv):
    s = srv.connect(timeout=10)
    s.sendall(b"stats\r\n")
    r = read_exact_reply(s, b"END\r\n")
    s.close()
    out = {}
    for line in r.split(b"\r\n"):
        p = line.split(b" ")
        if len(p) == 3 and p[0] == b"STAT":
            out[p[1].decode()] = p[2].decode()
    return out


def settle(srv, base):
    """curr_connections drops as the server notices closes: wait for it (this
    bounds a wait, it asserts no time)."""
    for _ in range(100):
        st = stats(srv)
        if int(st["curr_connections"]) <= base + 1:  # +1: the stats connection
            return st
        time.sleep(0.1)
    return st


def burst(srv, n):
    """Open n connections at once, then ask each for its version. Returns
    (answered, refused, other) and the sockets' replies."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(10)
        try:
            s.connect(("127.0.0.1", srv.port))
            socks.append(s)
        except OSError:
            socks.append(None)
    answered = refused = other = 0
    for s in socks:
        if s is None:
            other += 1
            continue
        try:
            s.sendall(b"version\r\n")
        except OSError:
            pass
        buf = b""
        try:
            while not buf.endswith(b"\r\n"):
                d = s.recv(256)
                if not d:
                    break
                buf += d
        except OSError:
            pass
        if buf.startswith(b"VERSION "):
            answered += 1
        elif buf == b"ERROR Too many open connections\r\n":
            refused += 1
        else:
            other += 1
    for s in socks:
        if s is not None:
            s.close()
    return answered, refused, other


def test_bursts(binary, f, rounds, size):
    print("bursts: -c 100, %d bursts of %d connections, against %s and %s" % (rounds, size, REFERENCE, binary),
          flush=True)
    results = {}
    for name, b in (("reference", REFERENCE), ("under test", binary)):
        srv = Server(b, ["-U", "0", "-c", "100", "-t", "2"])
        try:
            st0 = stats(srv)
            base = int(st0["curr_connections"]) - 1
            rows = []
            for r in range(rounds):
                before = stats(srv)
                a, ref, other = burst(srv, size)
                after = settle(srv, base)
                s = srv.connect(timeout=10)
                s.sendall(b"set burst 0 0 2\r\nok\r\nget burst\r\n")
                normal = read_exact_reply(s, b"END\r\n") == b"STORED\r\nVALUE burst 0 2\r\nok\r\nEND\r\n"
                s.close()
                d_total = int(after["total_connections"]) - int(before["total_connections"])
                d_rej = int(after["rejected_connections"]) - int(before["rejected_connections"])
                rows.append((a, ref, other))
                print("  %-10s burst %d: %d answered, %d refused, %d other; stats: +%d total_connections, "
                      "+%d rejected_connections, curr_connections %s after"
                      % (name, r, a, ref, other, d_total, d_rej, after["curr_connections"]), flush=True)
                f.check(srv.alive(), "%s died in burst %d" % (name, r))
                f.check(normal, "%s does not serve normally after burst %d" % (name, r))
                f.check(a + ref + other == size, "burst accounting")
                f.check(a > 0 and ref > 0, "%s: %d answered and %d refused out of %d with -c 100"
                        % (name, a, ref, size))
                f.check(d_rej == ref, "%s: rejected_connections rose by %d, %d were refused" % (name, d_rej, ref))
                # total_connections counts accepted connections only (the
                # refused are rejected_connections), plus our stats polls.
                f.check(a <= d_total <= a + 101, "%s: total_connections rose by %d for %d accepted"
                        % (name, d_total, a))
                f.check(int(after["curr_connections"]) <= base + 1,
                        "%s: curr_connections %s after the burst closed (was %d)"
                        % (name, after["curr_connections"], base + 1))
            results[name] = rows
        finally:
            srv.stop()
    # The same limit: vanilla accepts as many and refuses the rest.
    ra, rb = results.get("reference"), results.get("under test")
    if ra and rb:
        f.check([x[0] for x in ra] == [x[0] for x in rb] and [x[2] for x in rb] == [0] * rounds,
                "accepted per burst: reference %s, under test %s (others: %s)"
                % ([x[0] for x in ra], [x[0] for x in rb], [x[2] for x in rb]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", nargs="?", default="loom-memcached",
                    help="a path, or a name in MC_BIN_DIR (default loom-memcached)")
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--ops", type=int, default=50, help="incr per connection")
    ap.add_argument("--bursts", type=int, default=4)
    ap.add_argument("--burst-size", type=int, default=500)
    add_bin_dir_option(ap)
    a = ap.parse_args()
    use_bin_dir_option(a)
    binary = resolve_binary(a.binary)
    if not os.access(binary, os.X_OK):
        print("SKIP: %s not built" % binary)
        return 77
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * a.burst_size + 2 * a.connections + 200))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    f = Failures()
    t0 = time.monotonic()
    srv = Server(binary, FLAGS)
    try:
        test_incr(srv, f, a.connections, a.ops)
        test_torn(srv, f, 16, 16, 60)
        test_acknowledged(srv, f, 50, 200)
        f.check(srv.alive(), "the server died")
    finally:
        srv.stop()
    test_bursts(binary, f, a.bursts, a.burst_size)
    print("concurrency: %s, %d failures, %.1f s" % (binary, len(f), time.monotonic() - t0))
    if f:
        print("FAIL")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
