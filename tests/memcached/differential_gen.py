"""Command sequences for differential.py: memcached's text, meta and binary
protocols, their edge cases, and garbage. Everything random comes from the
random.Random passed in, so a seed replays a sequence exactly."""

import base64
import struct
import time

ITEM_MAX = 256 * 1024  # the -I both servers get (differential.FLAGS)

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
