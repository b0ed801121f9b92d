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
4. Churn: 16 threads open and close thousands of connections, each storing
   and reading its own key, closed by the client, by "quit" or by a protocol
   error: every reply is right and the server survives.
5. Bursts beyond -c: a server with -c 100 gets bursts of 500 connections,
   all held open. What vanilla memcached does (see test_bursts): it accepts
   exactly the free descriptor numbers below -c - 1, answers those, refuses
   every other one at once with "ERROR Too many open connections" and a
   close, leaves none unanswered and never stops accepting. Debian's
   /usr/bin/memcached and the binary under test must both do exactly that,
   serve normally after every burst, and their curr_connections /
   total_connections / rejected_connections stats must add up.

Exit 0 on success, 1 on failure, 77 when the binary is absent. Nothing here
is timed: loops run a fixed number of operations.
"""

import argparse
import os
import random
import resource
import selectors
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from differential import REFERENCE, Server, parse_with_binary, read_exact_reply  # noqa: E402

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


def test_churn(srv, f, nthreads, per):
    """Connections opened and closed as fast as possible from many threads:
    each stores and reads back its own key, then goes away one of three
    ways: the client closes, it sends "quit", or it sends a bad binary
    request (the server closes). Descriptor numbers are reused at once, so a
    server that lets an old connection's state outlive its close serves the
    new one twice."""
    print("churn: %d threads x %d connections, each set + get, then close / quit / protocol error"
          % (nthreads, per), flush=True)
    bad = []
    done = [0] * nthreads

    def worker(i):
        rng = random.Random(3000 + i)
        for j in range(per):
            if not srv.alive():
                return
            try:
                s = srv.connect(timeout=10)
                k = b"churn:%d:%d" % (i, j)
                s.sendall(b"set %s 0 0 2\r\nok\r\nget %s\r\n" % (k, k))
                want = b"STORED\r\nVALUE %s 0 2\r\nok\r\nEND\r\n" % k
                r = read_exact_reply(s, b"END\r\n")
                if r != want:
                    bad.append("connection %d of thread %d: %r" % (j, i, r[:100]))
                x = rng.random()
                if x < 1 / 3:
                    s.sendall(b"quit\r\n")
                elif x < 2 / 3:
                    s.sendall(b"\x80\x01\x00\x05garbage")
                s.close()
                done[i] += 1
            except (OSError, RuntimeError) as e:
                bad.append("connection %d of thread %d: %r" % (j, i, e))
    errs = run_threads(nthreads, worker)
    f.check(not errs, "churn threads: %s" % errs[:3])
    f.check(srv.alive(), "the server died during the churn (exit status %s) after %d of %d connections"
            % (srv.proc.poll(), sum(done), nthreads * per))
    f.check(not bad, "churn: %d connections went wrong, e.g. %s" % (len(bad), bad[:3]))


# ---------------------------------------------------------------------------

def stats(srv):
    """The server's stats. Right after a burst the server may not have closed
    the burst's connections yet and refuses this one (an error line and a
    close, or a reset): try again (bounded). Each refused poll is counted in
    srv.refused_polls: the server counts it in rejected_connections too."""
    for attempt in range(50):
        s = srv.connect(timeout=10)
        try:
            s.sendall(b"stats\r\n")
            r = read_exact_reply(s, b"END\r\n")
        except (RuntimeError, ConnectionError):
            srv.refused_polls = getattr(srv, "refused_polls", 0) + 1
            if attempt == 49:
                raise
            time.sleep(0.1)
            continue
        finally:
            s.close()
        break
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


def held_fds(srv):
    """The server's descriptors now, number -> what /proc says it is; None
    when /proc does not show them."""
    path = "/proc/%d/fd" % srv.proc.pid
    held = {}
    try:
        for x in os.listdir(path):
            try:
                held[int(x)] = os.readlink(os.path.join(path, x))
            except OSError:
                continue
    except OSError:
        return None
    return held


def free_slots(srv, maxconns):
    """Descriptor numbers below maxconns - 1 the server does not hold: what
    vanilla accepts (memcached.c raises RLIMIT_NOFILE to -c, and with
    maxconns_fast, the default, an accepted descriptor >= maxconns - 1 gets
    "ERROR Too many open connections" and is closed). Waits (bounded) until
    the server holds no socket but its listener (our stats connection is
    closed on its side too). Returns (count, held) or (None, None) when
    /proc does not show them."""
    for _ in range(100):
        held = held_fds(srv)
        if held is None:
            return None, None
        if sum(1 for v in held.values() if v.startswith("socket:")) <= 1:
            break
        time.sleep(0.05)
    return sum(1 for fd in range(maxconns - 1) if fd not in held), held


def burst(srv, n, wait=10, during=None):
    """Open n connections at once, all held open, each sending "version",
    then read every reply at once for at most `wait` seconds. Returns
    (answered, refused, silent, unconnected): silent ones got nothing at all
    (queued in the listen backlog and never accepted, or accepted and never
    served); unconnected ones could not connect within 2 s (the server
    shrank its backlog: it hit EMFILE and stopped accepting)."""
    socks = []
    unconnected = 0
    for _ in range(n):
        if unconnected >= 3:  # the backlog is closed: the rest would wait too
            unconnected += 1
            continue
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", srv.port))
            s.sendall(b"version\r\n")
            s.setblocking(False)
            socks.append(s)
        except OSError:
            s.close()
            unconnected += 1
    bufs = {s: b"" for s in socks}
    open_ = set(socks)
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    deadline = time.monotonic() + wait
    while open_ and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            try:
                d = s.recv(256)
            except OSError:
                d = b""
            bufs[s] += d
            if not d or bufs[s].endswith(b"\r\n"):
                sel.unregister(s)
                open_.discard(s)
    sel.close()
    if during is not None:  # what the server holds while every connection is still open
        during.update(held_fds(srv) or {})
    answered = refused = silent = 0
    for s in socks:
        b = bufs[s]
        if b.startswith(b"VERSION "):
            answered += 1
        elif b == b"ERROR Too many open connections\r\n":
            refused += 1
        elif b == b"":
            silent += 1
        else:
            raise RuntimeError("burst: unexpected reply %r" % b)
        s.close()
    return answered, refused, silent, unconnected


def test_bursts(binary, f, rounds, size, maxconns=100):
    """What vanilla does with -c (memcached.c, maxconns_fast, the default):
    main() sets RLIMIT_NOFILE to -c; the listener accepts every pending
    connection, and one whose descriptor is >= maxconns - 1 gets "ERROR Too
    many open connections" and is closed at once (rejected_connections + 1),
    so the accepted ones are exactly the free descriptor numbers below
    maxconns - 1, nobody waits unanswered, and the listener never reaches
    EMFILE (which would make it listen(fd, 0) and stop accepting until a
    connection closes: maxconns_handler). Both servers must do exactly
    that."""
    print("bursts: -c %d, %d bursts of %d connections held open, against %s and %s"
          % (maxconns, rounds, size, REFERENCE, binary), flush=True)
    for name, b in (("reference", REFERENCE), ("under test", binary)):
        srv = Server(b, ["-U", "0", "-c", str(maxconns), "-t", "2"])
        try:
            st0 = stats(srv)
            base = int(st0["curr_connections"]) - 1
            for r in range(rounds):
                before = stats(srv)
                polls_before = getattr(srv, "refused_polls", 0)
                slots, held_before = free_slots(srv, maxconns)
                during = {}
                a, ref, silent, unconn = burst(srv, size, during=during)
                # Descriptors the server opened during the burst that are no
                # connections (a runtime's own, a file): numbers it could
                # not accept on. Named, and taken off what it could accept
                # (a fresh check's slow stage once saw 78 accepted of 80).
                others = {fd: v for fd, v in during.items()
                          if fd < maxconns - 1 and held_before is not None and fd not in held_before
                          and not v.startswith("socket:")}
                if slots is not None and others:
                    print("  %-10s burst %d: %d descriptors below %d opened during it that are no connections: %s"
                          % (name, r, len(others), maxconns - 1,
                             ", ".join("%d %s" % kv for kv in sorted(others.items()))), flush=True)
                    slots -= len(others)
                after = settle(srv, base)
                s = srv.connect(timeout=10)
                s.sendall(b"set burst 0 0 2\r\nok\r\nget burst\r\n")
                normal = read_exact_reply(s, b"END\r\n") == b"STORED\r\nVALUE burst 0 2\r\nok\r\nEND\r\n"
                s.close()
                d_total = int(after["total_connections"]) - int(before["total_connections"])
                # our own stats polls refused while the burst's connections
                # were still closing are rejected_connections too
                polls = getattr(srv, "refused_polls", 0) - polls_before
                d_rej = int(after["rejected_connections"]) - int(before["rejected_connections"]) - polls
                print("  %-10s burst %d: %d answered, %d refused, %d silent, %d could not connect "
                      "(%s free descriptors below %d); stats: +%d total_connections, +%d rejected_connections, "
                      "listen_disabled_num %s, curr_connections %s after"
                      % (name, r, a, ref, silent, unconn, slots, maxconns - 1, d_total, d_rej,
                         after.get("listen_disabled_num"), after["curr_connections"]), flush=True)
                f.check(srv.alive(), "%s died in burst %d" % (name, r))
                f.check(normal, "%s does not serve normally after burst %d" % (name, r))
                f.check(silent == 0 and unconn == 0,
                        "%s, burst %d: %d connections held open got no reply and %d could not connect "
                        "(vanilla answers or refuses every one; listen_disabled_num %s: it hit EMFILE and "
                        "stopped accepting)" % (name, r, silent, unconn, after.get("listen_disabled_num")))
                if slots is not None:
                    f.check(a == slots, "%s, burst %d: %d accepted, but %d descriptors below -c - 1 = %d were "
                            "free (vanilla accepts exactly those)" % (name, r, a, slots, maxconns - 1))
                f.check(a + ref + silent + unconn == size and a > 0 and ref > 0,
                        "%s: %d answered and %d refused out of %d with -c %d" % (name, a, ref, size, maxconns))
                f.check(d_rej == ref, "%s: rejected_connections rose by %d, %d were refused" % (name, d_rej, ref))
                # total_connections counts accepted connections only (the
                # refused are rejected_connections), plus our stats polls.
                f.check(a <= d_total <= a + 101, "%s: total_connections rose by %d for %d accepted"
                        % (name, d_total, a))
                f.check(int(after["curr_connections"]) <= base + 1,
                        "%s: curr_connections %s after the burst closed (was %d)"
                        % (name, after["curr_connections"], base + 1))
                f.check(after.get("listen_disabled_num") == st0.get("listen_disabled_num"),
                        "%s: listen_disabled_num went from %s to %s: accepting hit EMFILE"
                        % (name, st0.get("listen_disabled_num"), after.get("listen_disabled_num")))
                if silent or unconn:
                    print("  %s: no more bursts (each would wait out its timeouts)" % name, flush=True)
                    break
        finally:
            srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", nargs="?", default="loom-memcached",
                    help="a path, or a name in MC_BIN_DIR (default loom-memcached)")
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--ops", type=int, default=50, help="incr per connection")
    ap.add_argument("--churn", type=int, default=300, help="connections per thread in the churn (16 threads)")
    ap.add_argument("--bursts", type=int, default=4)
    ap.add_argument("--burst-size", type=int, default=500)
    a, binary = parse_with_binary(ap)
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
        if srv.alive():
            test_churn(srv, f, 16, a.churn)
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
