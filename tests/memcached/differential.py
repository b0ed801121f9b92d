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
import base64
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

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
REFERENCE = "/usr/bin/memcached"
ITEM_MAX = 256 * 1024
# The same flags for both servers. -I below the default needs a smaller
# slab_chunk_max (memcached refuses -I smaller than slab_chunk_max).
FLAGS = ["-U", "0", "-m", "256", "-I", "256k", "-o", "slab_chunk_max=131072", "-c", "4096", "-t", "2"]
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
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=stderr)
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
            try:
                c = socket.create_connection(("127.0.0.1", self.port), timeout=1)
                c.sendall(b"version\r\n")
                ok = c.recv(100).startswith(b"VERSION")
                c.close()
                if ok:
                    return True
            except OSError:
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
# Binary protocol packets
# ---------------------------------------------------------------------------

OP = dict(get=0x00, set=0x01, add=0x02, replace=0x03, delete=0x04, incr=0x05, decr=0x06,
          quit=0x07, flush=0x08, getq=0x09, noop=0x0a, version=0x0b, getk=0x0c, getkq=0x0d,
          append=0x0e, prepend=0x0f, stat=0x10, setq=0x11, addq=0x12, replaceq=0x13,
          deleteq=0x14, incrq=0x15, decrq=0x16, quitq=0x17, flushq=0x18, appendq=0x19,
          prependq=0x1a, verbosity=0x1b, touch=0x1c, gat=0x1d, gatq=0x1e, sasl_list=0x20,
          gatk=0x23, gatkq=0x24)


def bpacket(op, key=b"", extras=b"", value=b"", cas=0, opaque=0, magic=0x80,
            keylen=None, extlen=None, bodylen=None):
    kl = len(key) if keylen is None else keylen
    el = len(extras) if extlen is None else extlen
    bl = len(key) + len(extras) + len(value) if bodylen is None else bodylen
    return struct.pack(">BBHBBHIIQ", magic, op, kl, el, 0, 0, bl, opaque, cas) + extras + key + value


SENTINEL_KEY = b"__dsentinel"


def sentinel(binary, nonce):
    if binary:
        return bpacket(OP["noop"], opaque=nonce)
    return b"mg %s O%d k\r\n" % (SENTINEL_KEY, nonce)


def sentinel_reply(binary, nonce):
    if binary:
        return struct.pack(">BBHBBHIIQ", 0x81, OP["noop"], 0, 0, 0, 0, 0, nonce, 0)
    return b"EN O%d k%s\r\n" % (nonce, SENTINEL_KEY)


# ---------------------------------------------------------------------------
# Sequences. A sequence is a list of steps; a step is
#   (data, kind) with data bytes or a function of the per-server state
#   giving bytes, and kind one of
#   "cmd"   an ordinary command,
#   "probe" a read of a key's CAS: the segment ends after it and its reply
#           sets state["cas"] for the templates that follow,
#   "close" a step after which the server may close: it starts a segment
#           of its own and ends the sequence,
#   "fresh" an incr/decr: it starts a segment of its own. memcached rewrites
#           a number in place (padded with spaces) only when nothing else
#           holds the item, and a get earlier in the same pipeline holds it
#           until its reply is written: when that is depends on timing.
#   ("short", n) a value n bytes shorter than declared (padding follows).
# ---------------------------------------------------------------------------

class Gen:
    def __init__(self, rng):
        self.r = rng
        self.keys = [b"k%d" % i for i in range(10)] + [b"n0", b"n1", b"K" * 250, b"L" * 251,
                                                        b"a:b", b"\xc3\xbcml"]

    def key(self):
        r = self.r
        if r.random() < 0.05:
            return r.choice([b"K" * 250, b"L" * 251, b"", b"k\x00z", b"sp ace"])
        return r.choice(self.keys[:12])

    def value(self):
        r = self.r
        x = r.random()
        if x < 0.3:
            return r.choice([b"0", b"1", b"42", b"18446744073709551615", b"18446744073709551614",
                             b"18446744073709551616", b"-1", b" 7", b"abc", b"12abc", b""])
        if x < 0.97:
            n = r.choice([1, 5, 30, 100, 1000, 5000])
            return bytes(r.getrandbits(8) for _ in range(r.randint(0, n)))
        # At and above the item size limit (the boundary depends on the
        # item header, key and flags: both servers must agree on it).
        n = r.randint(ITEM_MAX - 120, ITEM_MAX + 40)
        return bytes([r.randint(97, 122)]) * n

    def exptime(self):
        return self.r.choice([b"0", b"0", b"0", b"100000", b"-1", b"1000000000",
                              b"%d" % (int(time.time()) + 200000), b"2592000", b"abc",
                              b"99999999999"])

    def flags(self):
        return self.r.choice([b"0", b"0", b"1", b"4294967295", b"4294967296", b"-1", b"x"])

    # -- text protocol ------------------------------------------------------
    def text_storage(self):
        r = self.r
        cmd = r.choice([b"set", b"add", b"replace", b"append", b"prepend"])
        k, v = self.key(), self.value()
        nr = b" noreply" if r.random() < 0.15 else b""
        end = b"\r\n" if r.random() < 0.95 else b"\n"
        x = r.random()
        if x < 0.04:  # longer than declared: bad data chunk
            return [(b"%s %s %s %s %d%s\r\n%sXY\r\n" % (cmd, k, self.flags(), self.exptime(), len(v), nr, v), "cmd")]
        if x < 0.06 and len(v) > 0:  # shorter than declared: swallows what follows
            d = r.randint(1, 8)
            return [(b"%s %s %s %s %d%s\r\n%s%s" % (cmd, k, self.flags(), self.exptime(), len(v) + d, nr, v, end), ("short", d))]
        if x < 0.08:
            return [(b"%s %s %s %s %s\r\n" % (cmd, k, self.flags(), self.exptime(), r.choice([b"-1", b"abc", b""])), "cmd")]
        # A bare \n after the data takes one byte of what follows as its \n.
        return [(b"%s %s %s %s %d%s\r\n%s%s" % (cmd, k, self.flags(), self.exptime(), len(v), nr, v, end),
                 "cmd" if end == b"\r\n" else ("short", 1))]

    def text_retrieval(self):
        r = self.r
        cmd = r.choice([b"get", b"gets", b"gat", b"gats"])
        keys = b" ".join(self.key() for _ in range(r.randint(0 if r.random() < 0.05 else 1, 4)))
        if cmd.startswith(b"gat"):
            return [(b"%s %s %s\r\n" % (cmd, self.exptime(), keys), "cmd")]
        return [(b"%s %s\r\n" % (cmd, keys), "cmd")]

    def text_cas(self):
        r = self.r
        k, v = self.key(), self.value()
        nr = b" noreply" if r.random() < 0.1 else b""
        which = r.choice(["right", "right", "wrong", "zero", "huge", "junk"])
        ex = self.exptime()

        def tmpl(st, k=k, v=v, nr=nr, which=which, ex=ex):
            c = st.get("cas")
            val = {"right": c if c is not None else 7, "wrong": (c or 7) + 1, "zero": 0,
                   "huge": 18446744073709551615, "junk": None}[which]
            cs = b"12x" if val is None else b"%d" % val
            return b"cas %s 0 %s %d %s%s\r\n%s\r\n" % (k, ex, len(v), cs, nr, v)
        return [(b"gets %s\r\n" % k, "probe"), (tmpl, "cmd")]

    def text_misc(self):
        r = self.r
        k = self.key()
        if r.random() < 0.2:
            return [(b"%s %s %s\r\n" % (r.choice([b"incr", b"decr"]), k,
                                         r.choice([b"1", b"0", b"5", b"18446744073709551615", b"18446744073709551616",
                                                   b"-1", b"abc", b""])), "fresh")]
        return [(r.choice([
            b"delete %s\r\n" % k, b"delete %s noreply\r\n" % k, b"delete %s 0\r\n" % k,
            b"delete %s 5\r\n" % k,
            b"touch %s %s\r\n" % (k, self.exptime()),
            b"touch %s\r\n" % k,
            b"flush_all\r\n", b"flush_all 0\r\n", b"flush_all -1\r\n", b"flush_all abc\r\n",
            b"flush_all noreply\r\n",
            # A delayed flush (future, or an absolute time before the server
            # started, which memcached takes as "no flush") lets items that
            # an earlier flush hid come back unless the LRU crawler has
            # reclaimed them meanwhile: timing. An immediate flush follows.
            b"flush_all 100000\r\nflush_all\r\n", b"flush_all 1000000000\r\nflush_all\r\n",
            b"flush_all %d\r\nflush_all\r\n" % (int(time.time()) + 300000),
            b"verbosity\r\n", b"verbosity 1\r\n", b"verbosity 0 noreply\r\n", b"verbosity x\r\n",
            b"verbosity 0\r\n",
            b"version\r\n", b"stats\r\n", b"stats settings\r\n", b"stats items\r\n",
            b"stats slabs\r\n", b"stats sizes\r\n", b"stats conns\r\n", b"stats bogus\r\n",
            b"stats detail\r\n", b"stats reset\r\n",
            b"shutdown\r\n", b"foo bar\r\n", b"\r\n", b"GET k1\r\n", b"cache_memlimit\r\n",
            b"get " + b" ".join([k] * 30) + b"\r\n",
            b"mn\r\n",
        ]), "cmd")]

    # -- meta protocol ------------------------------------------------------
    def meta_key(self):
        k = self.key()
        if self.r.random() < 0.15 and k:
            return base64.b64encode(k), [b"b"]
        return k, []

    def meta_flags(self, choices):
        r = self.r
        out = []
        for f in choices:
            if r.random() < 0.3:
                out.append(f() if callable(f) else f)
        r.shuffle(out)
        return out

    def meta(self):
        r = self.r
        k, kf = self.meta_key()
        opq = lambda: b"O%d" % r.randint(0, 99999)
        ttl = lambda: b"T" + self.exptime()
        x = r.random()
        quiet = r.random() < 0.15
        q = [b"q"] if quiet else []
        tail = [(b"mn\r\n", "cmd")] if quiet else []
        if x < 0.3:
            fl = self.meta_flags([b"v", b"k", b"c", b"f", b"t", b"l", b"h", b"s", opq, ttl,
                                  lambda: b"N" + self.exptime(), lambda: b"R%d" % r.randint(0, 100000),
                                  b"u", b"E5"])
            return [(b" ".join([b"mg", k] + fl + kf + q) + b"\r\n", "cmd")] + tail
        if x < 0.55:
            v = self.value()
            fl = self.meta_flags([ttl, lambda: b"F" + self.flags(), b"I", opq, b"k", b"c",
                                  lambda: b"M" + r.choice([b"E", b"A", b"P", b"R", b"S", b"a", b"Z"]),
                                  lambda: b"N" + self.exptime()])
            # (a length beyond 2^31 makes memcached wait silently: not generated)
            ln = b"%d" % len(v) if r.random() < 0.95 else r.choice([b"-1", b"x"])
            return [(b" ".join([b"ms", k, ln] + fl + kf + q) + b"\r\n" + v + b"\r\n", "cmd")] + tail
        if x < 0.65:
            fl = self.meta_flags([b"I", opq, b"k", ttl, b"x"])
            return [(b" ".join([b"md", k] + fl + kf + q) + b"\r\n", "cmd")] + tail
        if x < 0.8:
            fl = self.meta_flags([lambda: b"N" + self.exptime(),
                                  lambda: b"J" + r.choice([b"0", b"10", b"18446744073709551615", b"x"]),
                                  lambda: b"D" + r.choice([b"1", b"100", b"18446744073709551615", b"-3", b"z"]),
                                  ttl, lambda: b"M" + r.choice([b"I", b"+", b"D", b"-", b"Q"]),
                                  opq, b"t", b"c", b"v", b"k"])
            return [(b" ".join([b"ma", k] + fl + kf + q) + b"\r\n", "fresh")] + tail
        if x < 0.9:
            # compare-and-swap through meta: probe with mg c, then ms/md/ma C<cas>
            which = r.choice(["right", "wrong"])
            cmdk = r.choice([b"ms", b"md", b"ma"])
            v = self.value()

            def tmpl(st, k=k, kf=kf, which=which, cmdk=cmdk, v=v):
                c = st.get("cas") or 7
                cs = b"C%d" % (c if which == "right" else c + 1)
                if cmdk == b"ms":
                    return b" ".join([b"ms", k, b"%d" % len(v), cs] + kf) + b"\r\n" + v + b"\r\n"
                return b" ".join([cmdk, k, cs] + kf) + b"\r\n"
            return [(b" ".join([b"mg", k, b"c"] + kf) + b"\r\n", "probe"), (tmpl, "cmd")]
        return [(r.choice([b"mn\r\n", b"me %s\r\n" % k, b"me\r\n", b"mg\r\n", b"ms %s\r\n" % k,
                           b"mx %s\r\n" % k, b"mg %s %s\r\n" % (k, b"v" * 40)]), "cmd")]

    # -- garbage --------------------------------------------------------------
    def garbage(self, first):
        r = self.r
        x = r.random()
        if x < 0.45:
            b = bytes(r.getrandbits(8) for _ in range(r.randint(1, 200)))
            if first and b[:1] == b"\x80":
                b = b"x" + b
            return [(b + r.choice([b"\r\n", b"\n"]), "cmd")]
        if x < 0.6:
            return [(b"A" * r.randint(1000, 2000) + b"\r\n", "cmd")]
        if x < 0.7:
            return [(b"get \x00k1\r\nset k\x002 0 0 1\r\nx\r\nget k\x002\r\n\x00\r\n", "cmd")]
        if x < 0.8:
            return [(b"get k1\nversion\nset k3 0 0 2\nab\r\nget k3\n", "cmd")]
        if x < 0.87:
            # A line longer than memcached's 2048-byte limit with no newline
            # in sight: the connection is closed.
            return [(b"B" * 20000 + b"\r\n", "close")]
        if x < 0.93:
            return [(b"get " + b" ".join(r.choice(self.keys[:12]) for _ in range(2500)) + b"\r\n", "cmd")]
        return [(r.choice([b"quit\r\n", b"quit extra\r\n", b"QUIT\r\n"]), "close")]

    # -- binary protocol ----------------------------------------------------
    def bin_cmd(self):
        r = self.r
        k = self.key()
        op = r.choice(["get", "getq", "getk", "getkq", "set", "add", "replace", "setq", "addq",
                       "delete", "deleteq", "incr", "decr", "incrq", "append", "prepend",
                       "appendq", "noop", "version", "stat", "flush", "flushq", "touch", "gat",
                       "gatq", "gatk", "gatkq", "sasl_list", "set", "get"])
        if op in ("flush", "flushq") and r.random() < 0.7:
            op = "set"  # (a flush empties everything: keep it rarer)
        opq = r.randint(0, 1000)
        be = lambda: struct.pack(">I", r.choice([0, 0, 100000, 0xFFFFFFFF, 1000000000]))
        if op in ("get", "getq", "getk", "getkq", "delete", "deleteq"):
            return [(bpacket(OP[op], k, opaque=opq), "cmd")]
        if op in ("set", "add", "replace", "setq", "addq"):
            v = self.value()
            ex = struct.pack(">I", r.choice([0, 1, 0xFFFFFFFF])) + be()
            if op in ("set", "setq") and r.random() < 0.3:
                which = r.choice(["right", "wrong"])

                def tmpl(st, op=op, k=k, ex=ex, v=v, opq=opq, which=which):
                    c = st.get("cas") or 7
                    return bpacket(OP[op], k, ex, v, cas=c if which == "right" else c + 1, opaque=opq)
                return [(bpacket(OP["get"], k), "probe"), (tmpl, "cmd")]
            return [(bpacket(OP[op], k, ex, v, opaque=opq), "cmd")]
        if op in ("append", "prepend", "appendq"):
            return [(bpacket(OP[op], k, b"", self.value(), opaque=opq), "cmd")]
        if op in ("incr", "decr", "incrq"):
            ex = struct.pack(">QQI", r.choice([1, 0, 10, 2 ** 64 - 1]), r.choice([0, 5, 2 ** 64 - 1]),
                             r.choice([0, 0xFFFFFFFF, 100000]))
            return [(bpacket(OP[op], k, ex, opaque=opq), "fresh")]
        if op in ("noop", "version", "sasl_list"):
            return [(bpacket(OP[op], opaque=opq), "cmd")]
        if op == "stat":
            return [(bpacket(OP[op], r.choice([b"", b"", b"settings", b"items", b"slabs", b"bogus", b"reset"]),
                             opaque=opq), "cmd")]
        if op in ("flush", "flushq"):
            ex = r.choice([b"", struct.pack(">I", 0), struct.pack(">I", 100000)])
            tail = bpacket(OP["flush"], opaque=opq) if ex[:4] == struct.pack(">I", 100000) else b""
            return [(bpacket(OP[op], b"", ex, opaque=opq) + tail, "cmd")]
        if op == "verbosity":
            return [(bpacket(OP[op], b"", struct.pack(">I", 1), opaque=opq), "cmd")]
        return [(bpacket(OP[op], k, be(), opaque=opq), "cmd")]  # touch/gat*

    def bin_bad(self):
        r = self.r
        x = r.random()
        if x < 0.2:
            return [(bpacket(OP["get"], b"k1", magic=0x81), "close")]
        if x < 0.35:
            return [(bpacket(OP["get"], b"k1", magic=r.choice([0x00, 0x7f, 0xff])), "close")]
        if x < 0.5:  # key length beyond the body
            return [(bpacket(OP["get"], b"k1", keylen=40), "close")]
        if x < 0.6:  # extras on a get / none on a set
            return [(bpacket(OP[r.choice(["get", "set", "incr", "touch"])], b"k1", b"\0\0\0\0\0\0", extlen=6), "close")]
        if x < 0.7:
            return [(bpacket(OP["set"], b"L" * 251, struct.pack(">II", 0, 0), b"v"), "close")]
        if x < 0.85:  # unknown opcodes, with a body to skip
            return [(bpacket(r.choice([0x50, 0x7f, 0xfe, 0x3c]), b"k", b"", b"body"), "close")]
        if x < 0.92:
            return [(bpacket(OP["quit"], opaque=3), "close")]
        return [(bpacket(OP["quitq"], opaque=3), "close")]

    def sequence(self):
        r = self.r
        steps = []
        kind = r.choice(["text", "text", "meta", "mixed", "binary", "binary"])
        n = r.randint(1, 12)
        for i in range(n):
            if kind == "binary":
                # (a bad first byte would make it a text connection)
                s = self.bin_bad() if steps and r.random() < 0.06 else self.bin_cmd()
            else:
                x = r.random()
                if x < 0.08 or (kind == "text" and x < 0.1):
                    s = self.garbage(first=not steps)
                elif kind == "meta" or (kind == "mixed" and x < 0.5):
                    s = self.meta()
                elif x < 0.45:
                    s = self.text_storage()
                elif x < 0.7:
                    s = self.text_retrieval()
                elif x < 0.78:
                    s = self.text_cas()
                else:
                    s = self.text_misc()
            steps.extend(s)
            if steps[-1][1] == "close":
                break
        return kind, steps


# ---------------------------------------------------------------------------
# Running a sequence against one server
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


def differential(ref, ref2, test, seed, count, verbose):
    """ref and ref2 are two instances of the reference: where they disagree
    the sequence's outcome depends on timing inside memcached (the LRU
    crawler reclaiming, a reference held by a reply not yet written), so it
    is not held against the server under test (counted as unstable). Every
    FLUSH_EVERY sequences all three are flushed, which bounds how far such a
    divergence carries."""
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
                print("unstable: sequence %d (the two references disagree)" % i)
            continue
        idles += sum(h == "idle" for _, h in ra)
        if verbose and any(h == "idle" for _, h in ra):
            print("idle: sequence %d mode %s: %s" % (i, mode, [(k, show(d({}) if callable(d) else d, 150)) for d, k in steps]))
            print("   replies: %s" % [(h, show(r, 200)) for r, h in ra])
        if na != nb:
            mismatches += 1
            if mismatches <= 10:
                print("MISMATCH seed=%d sequence=%d kind=%s mode=%s" % (seed, i, kind, mode))
                for d, k in steps:
                    print("  send %-6s %s" % (k if isinstance(k, str) else "short", show(d({"cas": 0}) if callable(d) else d)))
                for si in range(max(len(ra), len(rb))):
                    a = ra[si] if si < len(ra) else (b"", "absent")
                    b = rb[si] if si < len(rb) else (b"", "absent")
                    mark = "" if si < len(na) and si < len(nb) and na[si] == nb[si] else "  <-- differs"
                    print("  segment %d%s" % (si, mark))
                    print("    reference (%s): %s" % (a[1], show(a[0])))
                    print("    under test (%s): %s" % (b[1], show(b[0])))
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
    add_bin_dir_option(ap)
    a = ap.parse_args()
    use_bin_dir_option(a)
    binary = resolve_binary(a.binary)
    if not os.access(binary, os.X_OK):
        print("SKIP: %s not built" % binary)
        return 77
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
        print("differential: %d sequences (%s), %d mismatched, %d unstable on the reference itself%s, "
              "%d segments ended by silence, %.1f s"
              % (a.count, ", ".join("%s %d" % kv for kv in modes.items()), mism, len(unstable),
                 " (%s)" % " ".join(map(str, unstable[:20])) if unstable else "", idles, t1 - t0), flush=True)
        # Unstable sequences must stay rare, or this test would compare little.
        if len(unstable) > a.count // 50:
            print("FAIL: more than 2%% of the sequences are unstable on the reference")
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
