#!/usr/bin/env python3
"""Differential test: the binary under test against Debian's /usr/bin/memcached.

Both servers are started with the same flags on free ports of 127.0.0.1 and get
the same randomised command sequences (text, meta and binary protocol, edge
cases, garbage), each sent whole, split at random byte boundaries, or in
batches. Their replies must be equal byte for byte except where they
legitimately differ: the version string, stat values (only the set of stat
names is compared), CAS unique numbers (compared structurally: the same
positions, and the same equal/unequal relations between them), and the TTL /
last-access seconds the meta protocol reports. When one server closes the
connection, the other must close too.

Then the bad-input phase: a side connection stores keys while other
connections send garbage; afterwards every acknowledged key must still be
readable, over the side connection and over a new one.

Every run prints its seed; `--seed S` replays it (the state of a server
depends on all earlier sequences, so replay with the same --count). Exit 0 on
success, 1 on a mismatch or lost key, 77 when the binary under test is absent.

Timing: nothing here depends on the clock. Expiry times are 0, negative,
already past (absolute times before the server started) or far in the future;
flush_all delays likewise. Connections that deliberately leave a value short
are padded so the end-of-segment marker is always read.
"""

import argparse
import os
import random
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from differential_gen import ITEM_MAX, OP, Gen, bpacket, sentinel, sentinel_reply  # noqa: E402,F401

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
REFERENCE = "/usr/bin/memcached"
# The same flags for both servers. -I below the default needs a smaller
# slab_chunk_max (memcached refuses -I smaller than slab_chunk_max).
FLAGS = ["-U", "0", "-m", "256", "-I", "%dk" % (ITEM_MAX // 1024), "-o", "slab_chunk_max=131072", "-c", "4096", "-t", "2"]
FLUSH_EVERY = 4
IDLE = 0.5  # seconds without data after which a reply is taken as complete
PATIENCE = 10  # the same where the reference did answer


# ---------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------

DEFAULT_BIN_DIR = os.path.join(REPO, "build", "memcached-port", "bin")


def bin_dir():
    return os.environ.get("MC_BIN_DIR") or DEFAULT_BIN_DIR


def add_bin_dir_option(ap):
    ap.add_argument("--default-bin-dir", help="where binaries are when MC_BIN_DIR is not set "
                    "(default build/memcached-port/bin in the repository)")


def use_bin_dir_option(a):
    global DEFAULT_BIN_DIR
    if a.default_bin_dir:
        DEFAULT_BIN_DIR = a.default_bin_dir


def resolve_binary(name):
    if os.sep in name:
        return name
    return os.path.join(bin_dir(), name)


def parse_with_binary(ap):
    """Parses a test's command line (its `binary` argument and
    --default-bin-dir), makes ctest's SIGTERM unwind, and resolves the
    binary: (args, path). Exits 77 (skipped) when it is not built."""
    add_bin_dir_option(ap)
    a = ap.parse_args()
    use_bin_dir_option(a)
    exit_on_sigterm()
    binary = resolve_binary(a.binary)
    if not os.access(binary, os.X_OK):
        print("SKIP: %s not built" % binary)
        sys.exit(77)
    return a, binary


def die_with_parent():
    """In the child: SIGKILL when the test process dies (a ctest timeout
    must not leave servers behind)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL


def exit_on_sigterm():
    """ctest's timeout sends SIGTERM: unwind so the servers are stopped."""
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))


def answers_version(port):
    """Whether a server on 127.0.0.1:port answers `version` now."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
            c.sendall(b"version\r\n")
            return c.recv(100).startswith(b"VERSION")
    except OSError:
        return False


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """A memcached process on a free port of 127.0.0.1, stopped by its PID."""

    def __init__(self, binary, flags, stderr=None):
        self.binary = binary
        if stderr is None:
            stderr = tempfile.TemporaryFile()
        for _ in range(10):
            self.port = free_port()
            args = [binary, "-u", "root", "-l", "127.0.0.1", "-p", str(self.port)] + list(flags)
            if os.geteuid() != 0:
                args.remove("-u")
                args.remove("root")
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=stderr,
                                         preexec_fn=die_with_parent)
            if self._wait_ready():
                return
            self.stop()
        stderr.seek(0)
        raise RuntimeError("could not start %s: %s" % (" ".join(args), stderr.read()[-2000:].decode(errors="replace")))

    def _wait_ready(self):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if answers_version(self.port):
                return True
            time.sleep(0.05)
        return False

    def alive(self):
        return self.proc.poll() is None

    def connect(self, timeout=IDLE):
        c = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return c

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------------------

def segments(steps, mode, batch=3):
    """Group steps into segments: each ends where a reply must be read."""
    segs, cur = [], []
    for data, kind in steps:
        if kind in ("close", "fresh") and cur:
            segs.append(cur)
            cur = []
        cur.append((data, kind))
        if kind in ("probe", "close") or (mode == "batch" and len(cur) >= batch):
            segs.append(cur)
            cur = []
    if cur:
        segs.append(cur)
    return segs


def recv_until(sock, suffix, idle):
    """Read until the data ends with `suffix`, EOF, or `idle` seconds of silence."""
    buf = bytearray()
    sock.settimeout(idle)
    while True:
        try:
            d = sock.recv(262144)
        except socket.timeout:
            return bytes(buf), "idle"
        except ConnectionResetError:
            return bytes(buf), "eof"
        if not d:
            return bytes(buf), "eof"
        buf += d
        if buf.endswith(suffix):
            return bytes(buf[:-len(suffix)]), "ok"


CAS_RE = re.compile(rb"^VALUE (\S+) (\S+) (\S+) (\d+)")


def probe_cas(reply, binary):
    if binary:
        if len(reply) >= 24 and reply[0] == 0x81:
            status = struct.unpack(">H", reply[6:8])[0]
            return struct.unpack(">Q", reply[16:24])[0] if status == 0 else None
        return None
    m = CAS_RE.match(reply)
    if m:
        return int(m.group(4))
    m = re.search(rb"(?:^|\s)c(\d+)", reply.split(b"\r\n", 1)[0])
    return int(m.group(1)) if m else None


def run_sequence(server, steps, mode, rng_split, nonce_base, expect=None):
    """Returns the list of (segment reply, how it ended). `expect`: how the
    reference's segments ended; where it answered, a slow server (a busy
    machine) is given PATIENCE seconds of silence before it counts as silent."""
    sock = server.connect()
    first = None
    st = {}
    out = []
    try:
        for si, seg in enumerate(segments(steps, mode)):
            data = b"".join(d(st) if callable(d) else d for d, _ in seg)
            if first is None:
                first = data[:1]
            binary = first == b"\x80"
            short = sum(k[1] for _, k in seg if isinstance(k, tuple))
            if short:
                data += (b"\0" if binary else b" ") * short + (b"" if binary else b"\r\n")
            nonce = nonce_base + si
            data += sentinel(binary, nonce)
            if binary and seg[-1][1] == "close":
                # A bad length may make the server wait for bytes that never
                # come: zeros complete it and then fail as a bad magic byte.
                data += b"\0" * 300
            try:
                if mode == "split" and len(data) > 2:
                    cuts = sorted(rng_split.sample(range(1, len(data)), min(len(data) - 1, rng_split.randint(1, 5))))
                    prev = 0
                    for c in cuts + [len(data)]:
                        sock.sendall(data[prev:c])
                        prev = c
                        time.sleep(0.001)
                else:
                    sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                pass
            patient = expect is not None and si < len(expect) and expect[si] == "ok"
            reply, how = recv_until(sock, sentinel_reply(binary, nonce), PATIENCE if patient else IDLE)
            out.append((reply, how))
            if seg[-1][1] == "probe":
                st["cas"] = probe_cas(reply, binary)
            if how != "ok":
                break
    finally:
        sock.close()
    return out


# ---------------------------------------------------------------------------
# Normalising replies
# ---------------------------------------------------------------------------

def norm_stat_name(name):
    """Per-slab-class names (items:N:..., N:chunk_size) depend on which
    classes hold items, which the LRU crawler and slab mover change in the
    background: they are left out. Connection numbers become #."""
    if name.startswith(b"items:") or name[:1].isdigit() and b":" in name and not name.split(b":")[0].isdigit():
        return None
    if re.match(rb"^\d+:", name) and not name.split(b":", 1)[1].startswith((b"addr", b"listen", b"state", b"secs")):
        return None
    return re.sub(rb"\d+", b"#", name)


def close_stats(toks):
    out = []
    for t in toks:
        if isinstance(t, tuple) and t[:1] == ("STATS",):
            names = frozenset(n for n in t[1] if n is not None)
            if names:
                out.append(("STATS", names))
        else:
            out.append(t)
    return out


class Norm:
    """Turns raw replies into comparable tokens; CAS values become indexes."""

    def __init__(self):
        self.cas = {}

    def c(self, v):
        return ("CAS", self.cas.setdefault(int(v), len(self.cas)))

    def meta_line(self, line):
        parts = line.split(b" ")
        out = []
        for i, p in enumerate(parts):
            if i > 0 and p[:1] == b"c" and p[1:].isdigit():
                out.append(self.c(p[1:]))
            elif i > 0 and p[:1] in (b"t", b"l") and p[1:].isdigit():
                out.append(p[:1] + b"<secs>")
            else:
                out.append(p)
        return tuple(out)

    def text(self, buf):
        toks, stats = [], None
        i = 0
        while i < len(buf):
            j = buf.find(b"\r\n", i)
            if j < 0:
                toks.append(("partial", buf[i:]))
                break
            line = buf[i:j]
            i = j + 2
            if line.startswith(b"STAT "):
                if stats is None:
                    stats = set()
                    toks.append(("STATS", stats))
                stats.add(norm_stat_name(line.split(b" ")[1]) if line.count(b" ") >= 1 else line)
                continue
            stats = None
            if line.startswith(b"VALUE "):
                p = line.split(b" ")
                if len(p) >= 4 and p[3].isdigit():
                    n = int(p[3])
                    toks.append(tuple(p[:4]) + ((self.c(p[4]),) if len(p) > 4 else ()))
                    toks.append(("data", buf[i:i + n + 2]))
                    i += n + 2
                    continue
            if line.startswith(b"VA "):
                p = line.split(b" ")
                if len(p) >= 2 and p[1].isdigit():
                    toks.append(self.meta_line(line))
                    n = int(p[1])
                    toks.append(("data", buf[i:i + n + 2]))
                    i += n + 2
                    continue
            if line.startswith(b"VERSION "):
                toks.append(b"VERSION <v>")
            elif line[:3] in (b"HD ", b"EN ", b"NF ", b"NS ", b"EX "):
                toks.append(self.meta_line(line))
            elif line.startswith(b"ME "):
                toks.append(tuple(self.c(f[4:]) if f.startswith(b"cas=") else
                                  (f.split(b"=")[0] + b"=<secs>" if f.startswith((b"exp=", b"la=")) and f != b"exp=-1" else f)
                                  for f in line.split(b" ")))
            else:
                toks.append(line)
        return close_stats(toks)

    def binary(self, buf):
        toks, stats = [], None
        i = 0
        while i + 24 <= len(buf) and buf[i] == 0x81:
            magic, op, kl, el, dt, status, bl, opq, cas = struct.unpack(">BBHBBHIIQ", buf[i:i + 24])
            body = buf[i + 24:i + 24 + bl]
            if len(body) < bl:
                break
            i += 24 + bl
            if op == OP["stat"] and status == 0 and kl > 0:
                if stats is None:
                    stats = set()
                    toks.append(("STATS", stats))
                stats.add(norm_stat_name(body[el:el + kl]))
                continue
            stats = None
            if op == OP["version"] and status == 0:
                body = b"<v>"
            toks.append((op, kl, el, dt, status, opq, self.c(cas) if cas else 0, body))
        if i < len(buf):
            toks.append(("raw", buf[i:]))
        return close_stats(toks)

    def replies(self, replies, binary):
        return [(self.binary(r) if binary else self.text(r), how) for r, how in replies]


# ---------------------------------------------------------------------------

def show(b, limit=400):
    r = repr(b)
    return r if len(r) <= limit else r[:limit] + "... (%d bytes)" % len(b)


def flush(ctl):
    ctl.sendall(b"flush_all\r\n")
    if read_exact_reply(ctl, b"\r\n") != b"OK\r\n":
        raise RuntimeError("flush_all on the control connection failed")


def print_pair(what, seed, i, kind, mode, steps, ra, rb, na, nb, bname):
    print("%s seed=%d sequence=%d kind=%s mode=%s" % (what, seed, i, kind, mode))
    for d, k in steps:
        print("  send %-6s %s" % (k if isinstance(k, str) else "short", show(d({"cas": 0}) if callable(d) else d)))
    for si in range(max(len(ra), len(rb))):
        a = ra[si] if si < len(ra) else (b"", "absent")
        b = rb[si] if si < len(rb) else (b"", "absent")
        mark = "" if si < len(na) and si < len(nb) and na[si] == nb[si] else "  <-- differs"
        print("  segment %d%s" % (si, mark))
        print("    reference (%s): %s" % (a[1], show(a[0])))
        print("    %s (%s): %s" % (bname, b[1], show(b[0])))


def run_pair(ref, test, steps, mode, split_seed, nonce):
    """One sequence against the reference, then the server under test (given
    the reference's patience)."""
    ra = run_sequence(ref, steps, mode, random.Random(split_seed), nonce)
    return ra, run_sequence(test, steps, mode, random.Random(split_seed), nonce, [h for _, h in ra])


def run_in_new_processes(ref_binary, test_binary, steps, mode, split_seed, nonce):
    """One sequence against a new reference and a new server under test."""
    servers = [Server(b, FLAGS) for b in (ref_binary, test_binary)]
    try:
        return run_pair(servers[0], servers[1], steps, mode, split_seed, nonce)
    finally:
        for srv in servers:
            srv.stop()


def differential(ref, ref2, test, seed, count, verbose):
    """ref and ref2 are two instances of the reference: where they disagree
    the sequence's outcome depends on timing inside memcached (the LRU
    crawler reclaiming, a reference held by a reply not yet written), so it
    is not held against the server under test (counted as unstable). Every
    FLUSH_EVERY sequences all three are flushed, which bounds how far such a
    divergence carries. A sequence that differs is replayed from a flushed
    state, and if it still differs, once more in new processes: only a
    difference that survives both counts as a mismatch."""
    mismatches = 0
    idles = 0
    unstable = []
    modes = {"whole": 0, "split": 0, "batch": 0}
    ctls = [srv.connect(timeout=10) for srv in (ref, ref2, test)]
    for i in range(count):
        if i % FLUSH_EVERY == 0:
            for c in ctls:
                flush(c)
        rng = random.Random("%d:%d" % (seed, i))
        kind, steps = Gen(rng).sequence()
        mode = rng.choice(["whole", "whole", "split", "batch"])
        modes[mode] += 1
        split_seed = rng.random()
        nonce = 1000000 + i * 100
        ra = run_sequence(ref, steps, mode, random.Random(split_seed), nonce)
        hows = [h for _, h in ra]
        ra2 = run_sequence(ref2, steps, mode, random.Random(split_seed), nonce, hows)
        rb = run_sequence(test, steps, mode, random.Random(split_seed), nonce, hows)
        first = next((d for d, _ in steps if not callable(d)), b"")[:1]
        binary = first == b"\x80"
        na, na2, nb = (Norm().replies(x, binary) for x in (ra, ra2, rb))
        if na != na2:
            unstable.append(i)
            if verbose:
                print_pair("UNSTABLE on the reference", seed, i, kind, mode, steps, ra, ra2, na, na2,
                           "reference 2")
            continue
        idles += sum(h == "idle" for _, h in ra)
        if verbose and any(h == "idle" for _, h in ra):
            print("idle: sequence %d mode %s: %s" % (i, mode, [(k, show(d({}) if callable(d) else d, 150)) for d, k in steps]))
            print("   replies: %s" % [(h, show(r, 200)) for r, h in ra])
        if na != nb:
            # State carried from an earlier sequence may differ for a reason
            # of timing no second reference can show (flush and expiry go by
            # each process's one-second clock, whose phase differs): replay
            # this sequence from a flushed state. A fault of the server under
            # test replays; a carried difference does not (counted unstable).
            for c in ctls:
                flush(c)
            ra, rb = run_pair(ref, test, steps, mode, split_seed, nonce + 50)
            na, nb = (Norm().replies(x, binary) for x in (ra, rb))
            if na == nb:
                unstable.append(i)
                if verbose:
                    print("carried: sequence %d differed only after earlier sequences" % i)
                continue
            # Still different after the flush: a flush does not clear all a
            # process carries (a connection of an earlier sequence it is
            # still working through, its background threads' state). The
            # last word goes to a new reference and a new server under test,
            # started for this sequence alone: a fault of the server under
            # test shows there too.
            fa, fb = run_in_new_processes(ref.binary, test.binary, steps, mode, split_seed, nonce + 50)
            nfa, nfb = (Norm().replies(x, binary) for x in (fa, fb))
            if nfa == nfb:
                unstable.append(i)
                print("carried past flush_all: sequence %d differs in the long-running processes, "
                      "not in new ones (seed %d)" % (i, seed))
                if verbose:
                    print_pair("CARRIED", seed, i, kind, mode, steps, ra, rb, na, nb, "under test")
                continue
            ra, rb, na, nb = fa, fb, nfa, nfb
            mismatches += 1
            if mismatches <= 10:
                print_pair("MISMATCH", seed, i, kind, mode, steps, ra, rb, na, nb, "under test")
        if not test.alive():
            print("FAIL: the server under test died at sequence %d (seed %d)" % (i, seed))
            return mismatches + 1, idles, modes, unstable
        if not ref.alive() or not ref2.alive():
            print("FAIL: the reference died at sequence %d (seed %d)" % (i, seed))
            return mismatches + 1, idles, modes, unstable
    for c in ctls:
        c.close()
    return mismatches, idles, modes, unstable


# ---------------------------------------------------------------------------
# Bad input survives
# ---------------------------------------------------------------------------

def read_exact_reply(sock, end):
    buf = b""
    while not buf.endswith(end):
        d = sock.recv(65536)
        if not d:
            raise RuntimeError("connection closed after %r" % buf[-100:])
        buf += d
    return buf


def bad_input_survives(server, seed, rounds):
    rng = random.Random("bad:%d" % seed)
    side = server.connect(timeout=10)
    stored = {}
    stop = threading.Event()
    errors = []

    def writer():
        n = 0
        try:
            while not stop.is_set() or n < 50:
                if n >= 3000:  # enough to check; wait for the garbage to end
                    stop.wait()
                    break
                k = b"side:%d" % n
                v = b"%d:" % n + bytes(rng.getrandbits(8) for _ in range(n % 300))
                side.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v))
                if read_exact_reply(side, b"\r\n") == b"STORED\r\n":
                    stored[k] = v
                n += 1
        except Exception as e:  # reported below
            errors.append("side connection: %s" % e)

    t = threading.Thread(target=writer)
    t.start()
    closed = 0
    grng = random.Random("garbage:%d" % seed)
    for _ in range(rounds):
        g = Gen(grng)
        try:
            c = server.connect(timeout=IDLE)
            x = grng.random()
            if x < 0.3:
                data = bytes(grng.getrandbits(8) for _ in range(grng.randint(1, 4000)))
            elif x < 0.45:
                data = bpacket(OP["set"], b"x", struct.pack(">II", 0, 0), b"v" * 10, bodylen=2 ** 31)
            elif x < 0.6:
                data = b"set side:0 0 0 100\r\nabc"  # then hang up mid-value
            elif x < 0.75:
                # a random binary request, but not a flush (it would rightly
                # drop the side connection's keys)
                op = grng.choice([o for o in range(256) if o not in (OP["flush"], OP["flushq"])])
                data = b"\x80" + bytes([op]) + bytes(grng.getrandbits(8) for _ in range(200))
            else:
                data = b"".join(d for d, _ in g.garbage(first=True))
            c.sendall(data)
            if grng.random() < 0.5:
                c.settimeout(0.05)
                try:
                    while c.recv(65536):
                        pass
                except OSError:
                    pass
            c.close()
            closed += 1
        except OSError as e:
            errors.append("garbage connection: %s" % e)
    stop.set()
    t.join(60)
    if t.is_alive():
        errors.append("side connection stalled")
    if not server.alive():
        errors.append("server died")
        return errors, 0
    # Everything acknowledged is still there, on the side connection and a new one.
    for sock in (side, server.connect(timeout=10)):
        for k, v in stored.items():
            sock.sendall(b"get %s\r\n" % k)
            r = read_exact_reply(sock, b"END\r\n")
            want = b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(v), v)
            if r != want:
                errors.append("key %s: got %s" % (k.decode(), show(r, 120)))
                break
        sock.close()
    return errors, len(stored)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", nargs="?", default="loom-memcached",
                    help="binary under test: a path, or a name in MC_BIN_DIR (default loom-memcached)")
    ap.add_argument("--reference", default=REFERENCE)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--count", type=int, default=2000, help="number of sequences (default 2000)")
    ap.add_argument("--bad-rounds", type=int, default=200, help="garbage connections in the bad-input phase")
    ap.add_argument("-v", "--verbose", action="store_true")
    a, binary = parse_with_binary(ap)
    if not os.access(a.reference, os.X_OK):
        print("SKIP: reference %s not installed (Debian package memcached)" % a.reference)
        return 77
    seed = a.seed if a.seed is not None else random.randrange(1 << 31)
    print("differential: %s vs %s, flags %s, seed %d, %d sequences (replay: --seed %d --count %d)"
          % (binary, a.reference, " ".join(FLAGS), seed, a.count, seed, a.count), flush=True)
    t0 = time.monotonic()
    ref, ref2, test = Server(a.reference, FLAGS), Server(a.reference, FLAGS), Server(binary, FLAGS)
    try:
        mism, idles, modes, unstable = differential(ref, ref2, test, seed, a.count, a.verbose)
        t1 = time.monotonic()
        print("differential: %d sequences (%s), %d mismatched, %d unstable (on the reference itself, or carried from earlier sequences)%s, "
              "%d segments ended by silence, %.1f s"
              % (a.count, ", ".join("%s %d" % kv for kv in modes.items()), mism, len(unstable),
                 " (%s)" % " ".join(map(str, unstable[:20])) if unstable else "", idles, t1 - t0), flush=True)
        # Unstable sequences must stay rare, or this test would compare little.
        if len(unstable) > a.count // 50:
            print("FAIL: more than 2% of the sequences are unstable")
            mism += 1
        errors, nstored = bad_input_survives(test, seed, a.bad_rounds)
        print("bad input: %d garbage connections, %d acknowledged keys checked, %d errors, %.1f s"
              % (a.bad_rounds, nstored, len(errors), time.monotonic() - t1))
        for e in errors[:10]:
            print("  FAIL: " + e)
    finally:
        ref.stop()
        ref2.stop()
        test.stop()
    if mism or errors:
        print("FAIL (seed %d)" % seed)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
