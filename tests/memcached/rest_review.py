#!/usr/bin/env python3
"""An outside review of loom-memcached at rest: bad input against resting connections.

    rest_review.py [BINARY] [--default-bin-dir DIR]

Each scenario runs against BINARY (default loom-memcached, -t 2) and then
memcached-vanilla, and the two transcripts must match (vanilla is the
reference; the scenario's own checks are asserted on both):
  garbage     random bytes, with and without line ends, a 4 KiB line with no
              end, then the connection (or a new one) still serves
  split       commands cut into pieces with pauses between them (each pause
              lets the connection rest mid-command), text and binary
  huge        a value near the item limit sent in chunks with pauses; one
              over it (swallowed, in chunks); a pipelined batch of 3,000 gets
              in one write (a read that fills the buffer, bytes left queued)
  mass_close  500 idle connections, half closed with RST, all at once; then
              new connections serve and the server's connection count drops
  idle        -o idle_timeout=2 with a command left half-sent: the same
              outcome as vanilla
Every wait is bounded. Exit 77 when BINARY is not built.
"""

import argparse
import os
import random
import resource
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from differential import Server, parse_with_binary, resolve_binary  # noqa: E402

FAILURES = []


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL: " + msg, flush=True)
    return cond


def recv_for(c, seconds=1.0, until=None):
    """What c sends within `seconds` (or until it ends with `until`)."""
    c.settimeout(0.1)
    buf = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            d = c.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            break
        if not d:
            buf += b"<EOF>"
            break
        buf += d
        if until is not None and buf.endswith(until):
            break
    return buf


def send(c, data):
    """sendall, False once the server has closed (its answer says so)."""
    try:
        c.sendall(data)
        return True
    except OSError:
        return False


def stat(srv, name):
    c = srv.connect(timeout=5)
    c.sendall(b"stats\r\n")
    s = recv_for(c, 3, b"END\r\n")
    c.close()
    for line in s.split(b"\r\n"):
        p = line.split()
        if len(p) == 3 and p[1] == name.encode():
            return int(p[2])
    return -1


def garbage(srv):
    out = []
    rnd = random.Random(7)
    for i in range(20):
        c = srv.connect(timeout=5)
        junk = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 600)))
        if i % 2:
            junk = junk.replace(b"\n", b"") + b"\r\n"
        if junk[:1] == b"\x80":
            junk = b"x" + junk  # the binary protocol's magic: the split scenario's
        send(c, junk)
        time.sleep(0.05)
        send(c, b"\r\nversion\r\n")
        r = recv_for(c, 0.8)
        out.append(b"VERSION" in r or r.endswith(b"<EOF>"))
        c.close()
    # A 4 KiB line with no end (memcached's large-line rule), in pieces.
    c = srv.connect(timeout=5)
    for _ in range(8):
        send(c, b"z" * 512)
        time.sleep(0.05)
    send(c, b"\r\n")
    r = recv_for(c, 1.0)
    out.append(r.replace(b"\r\n", b"|")[:80])
    c.close()
    c = srv.connect(timeout=5)
    c.sendall(b"version\r\n")
    check(recv_for(c, 3, b"\r\n").startswith(b"VERSION"), "garbage: a new connection serves after")
    c.close()
    return out


def split(srv):
    out = []
    conns = [srv.connect(timeout=5) for _ in range(20)]
    for i, c in enumerate(conns):
        msg = b"set split%d 0 0 10\r\n0123456789\r\nget split%d\r\n" % (i, i)
        # Cut in pieces of 1-7 bytes; pauses long enough to rest in between.
        pieces = []
        p = 0
        while p < len(msg):
            n = 1 + (p * 7 + i) % 7
            pieces.append(msg[p:p + n])
            p += n
        conns[i] = (c, pieces)
    for step in range(max(len(p) for _, p in conns)):
        for c, pieces in conns:
            if step < len(pieces):
                c.sendall(pieces[step])
        time.sleep(0.02)
    for i, (c, _) in enumerate(conns):
        r = recv_for(c, 3, b"END\r\n")
        ok = r == b"STORED\r\nVALUE split%d 0 10\r\n0123456789\r\nEND\r\n" % i
        check(ok, "split: connection %d got %r" % (i, r[:100]))
        out.append(ok)
        c.close()
    # Binary protocol: a GET's 24-byte header in three pieces with pauses.
    c = srv.connect(timeout=5)
    key = b"split0"
    pkt = struct.pack(">BBHBBHIIQ", 0x80, 0x00, len(key), 0, 0, 0, len(key), 0xabcd, 0) + key
    for a, b in ((0, 5), (5, 17), (17, len(pkt))):
        c.sendall(pkt[a:b])
        time.sleep(0.2)
    r = recv_for(c, 3, b"0123456789")
    ok = len(r) >= 24 and r[0] == 0x81 and r.endswith(b"0123456789")
    check(ok, "split: binary GET in pieces got %r" % r[:60])
    out.append(ok)
    c.close()
    return out


def huge(srv):
    out = []
    c = srv.connect(timeout=10)
    n = 1000 * 1000  # under the 1 MiB item limit with the item's header
    val = bytes(random.Random(1).randrange(97, 123) for _ in range(n))
    c.sendall(b"set huge 0 0 %d\r\n" % n)
    for k in range(0, n, n // 10):
        c.sendall(val[k:k + n // 10])
        time.sleep(0.1)
    c.sendall(b"\r\n")
    r = recv_for(c, 5, b"\r\n")
    out.append(r)
    check(r == b"STORED\r\n", "huge: set of %d bytes in chunks: %r" % (n, r[:80]))
    c.sendall(b"get huge\r\n")
    r = recv_for(c, 10, b"END\r\n")
    ok = r == b"VALUE huge 0 %d\r\n" % n + val + b"\r\nEND\r\n"
    check(ok, "huge: get back %d bytes (%d received)" % (n, len(r)))
    out.append(ok)
    # Over the limit: an error, the data swallowed (in chunks, with pauses).
    m = 2 * 1024 * 1024
    c.sendall(b"set over 0 0 %d\r\n" % m)
    for k in range(0, m, m // 8):
        c.sendall(b"q" * (m // 8))
        time.sleep(0.1)
    c.sendall(b"\r\nversion\r\n")
    r = recv_for(c, 5)
    out.append(r.replace(b"\r\n", b"|")[:120])
    check(b"VERSION" in r, "huge: serves after a swallowed value: %r" % r[:120])
    c.close()
    # 3,000 pipelined gets in one write, then nothing more: every answer.
    c = srv.connect(timeout=10)
    c.sendall(b"set p 0 0 1\r\nx\r\n")
    check(recv_for(c, 3, b"\r\n") == b"STORED\r\n", "huge: set p")
    batch = b"get p\r\n" * 3000
    c.sendall(batch)
    want = b"VALUE p 0 1\r\nx\r\nEND\r\n" * 3000
    r = b""
    end = time.monotonic() + 10
    c.settimeout(0.2)
    while len(r) < len(want) and time.monotonic() < end:
        try:
            d = c.recv(65536)
        except socket.timeout:
            continue
        if not d:
            break
        r += d
    ok = r == want
    check(ok, "huge: 3000 pipelined gets: %d of %d bytes of answers" % (len(r), len(want)))
    out.append(ok)
    c.close()
    return out


def mass_close(srv):
    n = 500
    conns = [srv.connect(timeout=10) for _ in range(n)]
    for i, c in enumerate(conns):
        if i % 3 == 0:
            c.sendall(b"set m%d 0 0 1\r\nx\r\n" % i)
    for i, c in enumerate(conns):
        if i % 3 == 0:
            recv_for(c, 3, b"\r\n")
    time.sleep(0.5)  # every one at rest (or born at rest)
    for i, c in enumerate(conns):
        if i % 2:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
        c.close()
    fresh = [srv.connect(timeout=10) for _ in range(50)]
    for c in fresh:
        c.sendall(b"get m0\r\n")
    ok = sum(recv_for(c, 5, b"END\r\n") == b"VALUE m0 0 1\r\nx\r\nEND\r\n" for c in fresh)
    check(ok == len(fresh), "mass_close: %d of %d new connections served" % (ok, len(fresh)))
    for c in fresh:
        c.close()
    end = time.monotonic() + 10
    cur = stat(srv, "curr_connections")
    while cur > 12 and time.monotonic() < end:
        time.sleep(0.2)
        cur = stat(srv, "curr_connections")
    check(cur <= 12, "mass_close: %d connections still counted 10 s after all closed" % cur)
    return [ok == len(fresh), cur <= 12]


def idle(srv):
    out = []
    half = srv.connect(timeout=10)
    half.sendall(b"get hal")  # half a command, then nothing
    swal = srv.connect(timeout=10)
    swal.sendall(b"set s 0 0 100\r\n0123")  # half a value
    quiet = srv.connect(timeout=10)
    t0 = time.monotonic()
    for c in (half, swal, quiet):
        r = recv_for(c, 6)
        out.append(r)
    check(srv.alive(), "idle: the server died")
    check(time.monotonic() - t0 < 30, "idle: too slow")
    return out


SCENARIOS = [("garbage", [], garbage), ("split", [], split), ("huge", [], huge),
             ("mass_close", ["-c", "1200"], mass_close), ("idle", ["-o", "idle_timeout=2"], idle)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", nargs="?", default="loom-memcached")
    a, binary = parse_with_binary(ap)
    vanilla = resolve_binary("memcached-vanilla")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 2000)), hard))
    t0 = time.monotonic()
    for name, flags, fn in SCENARIOS:
        got = {}
        for b in (binary, vanilla):
            if b is None or not os.path.exists(b):
                continue
            srv = Server(b, ["-U", "0", "-t", "2"] + flags)
            try:
                got[b] = fn(srv)
                check(srv.alive(), "%s: %s died" % (name, os.path.basename(b)))
            finally:
                srv.stop()
        if len(got) == 2:
            check(got[binary] == got[vanilla], "%s: %s differs from vanilla:\n  %r\n  %r"
                  % (name, os.path.basename(binary), got[binary], got[vanilla]))
        print("%s: done (%.1f s)" % (name, time.monotonic() - t0), flush=True)
    print("FAIL" if FAILURES else "PASS")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
