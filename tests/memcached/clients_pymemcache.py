#!/usr/bin/env python3
"""pymemcache (Debian's python3-pymemcache) against one memcached binary.

Starts the binary on a free port of 127.0.0.1 and drives it with
pymemcache's Client: set, add, replace, append, prepend, get, get_many,
gets, gets_many, cas, incr, decr, delete, delete_many, set_many, touch,
flush_all, stats, version and a 512 KiB value, each result checked; then a
CAS race: THREADS kernel threads (each with its own Client) increment one
key by gets + cas, retrying when cas says the value changed, and the final
value must be exactly THREADS * ROUNDS. Exit 0 on success, 1 on a failed
check, 77 when the binary or pymemcache is absent.
"""

import argparse
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from differential import Server, parse_with_binary  # noqa: E402

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("  FAIL: " + msg, flush=True)


def eq(what, got, want):
    check(got == want, "%s: %r, expected %r" % (what, got, want))


def client(Client, port):
    return Client(("127.0.0.1", port), connect_timeout=5, timeout=10, default_noreply=False)


def every_command(c):
    eq("flush_all", c.flush_all(), True)
    eq("set k1", c.set("k1", b"v1"), True)
    eq("get k1", c.get("k1"), b"v1")
    eq("add k1 (exists)", c.add("k1", b"x"), False)
    eq("add k2", c.add("k2", b"v2"), True)
    eq("replace k3 (absent)", c.replace("k3", b"x"), False)
    eq("get k3", c.get("k3"), None)
    eq("replace k2", c.replace("k2", b"v2r"), True)
    eq("get k2", c.get("k2"), b"v2r")
    eq("append k1", c.append("k1", b"-a"), True)
    eq("prepend k1", c.prepend("k1", b"p-"), True)
    eq("get k1", c.get("k1"), b"p-v1-a")
    eq("append k3 (absent)", c.append("k3", b"x"), False)
    eq("prepend k3 (absent)", c.prepend("k3", b"x"), False)
    eq("get default", c.get("k3", default=b"dflt"), b"dflt")

    # Multi-get: 40 keys asked, the even ones stored.
    want = {"mk%d" % i: b"value-%d" % (i * 31) for i in range(0, 40, 2)}
    eq("set_many (keys not stored)", c.set_many(want), [])
    eq("get_many", c.get_many(["mk%d" % i for i in range(40)]), want)
    gm = c.gets_many(["mk%d" % i for i in range(40)])
    eq("gets_many keys", sorted(gm), sorted(want))
    eq("gets_many values", {k: v[0] for k, v in gm.items()}, want)
    uniques = [v[1] for v in gm.values()]
    check(all(isinstance(u, bytes) and u.isdigit() and int(u) > 0 for u in uniques)
          and len(set(uniques)) == len(uniques), "gets_many: CAS uniques %r not distinct numbers" % uniques[:5])

    # gets + cas
    eq("set c1", c.set("c1", b"one"), True)
    v, cas = c.gets("c1")
    eq("gets c1 value", v, b"one")
    eq("cas c1 (current)", c.cas("c1", b"two", cas), True)
    eq("get c1", c.get("c1"), b"two")
    eq("cas c1 (stale)", c.cas("c1", b"three", cas), False)
    eq("get c1", c.get("c1"), b"two")
    eq("cas c9 (absent)", c.cas("c9", b"x", cas), None)
    eq("gets c9 (absent)", c.gets("c9"), (None, None))

    # incr / decr
    eq("set n", c.set("n", b"10"), True)
    eq("incr n 5", c.incr("n", 5), 15)
    eq("decr n 3", c.decr("n", 3), 12)
    eq("decr n 100", c.decr("n", 100), 0)
    eq("set n 2^64-1", c.set("n", b"18446744073709551615"), True)
    eq("incr n 2 (wraps)", c.incr("n", 2), 1)
    eq("incr absent", c.incr("nx", 1), None)
    eq("decr absent", c.decr("nx", 1), None)
    c.set("nt", b"abc")
    try:
        r = c.incr("nt", 1)
        check(False, "incr of b'abc' returned %r, expected a client error" % (r,))
    except Exception as e:  # pymemcache raises MemcacheClientError
        check("non-numeric" in str(e) or "CLIENT_ERROR" in str(e) or "numeric" in str(e),
              "incr of b'abc': %r" % e)

    # delete, touch
    eq("delete k2", c.delete("k2"), True)
    eq("delete k2 again", c.delete("k2"), False)
    eq("get k2", c.get("k2"), None)
    eq("delete_many", c.delete_many(["mk0", "mk2", "mk1"]), True)
    eq("get_many after delete_many", sorted(c.get_many(["mk0", "mk1", "mk2", "mk4"])), ["mk4"])
    eq("touch k1", c.touch("k1", 3600), True)
    eq("touch k3 (absent)", c.touch("k3", 3600), False)
    eq("get k1 after touch", c.get("k1"), b"p-v1-a")
    eq("set expired", c.set("kx", b"x", expire=-1), True)
    eq("get expired", c.get("kx"), None)

    big = bytes((i * 7 + i // 251) % 256 for i in range(512 * 1024))
    eq("set big", c.set("big", big), True)
    check(c.get("big") == big, "get big: 512 KiB value differs")

    # stats, version, flush_all
    st = c.stats()
    for k in (b"pid", b"curr_items", b"total_items", b"curr_connections", b"cmd_get", b"get_hits", b"threads"):
        check(k in st, "stats: no %r" % k)
    eq("stats version", st.get(b"version"), b"1.6.18")
    eq("stats threads", st.get(b"threads"), 2)
    check(st.get(b"curr_items", 0) > 20, "stats curr_items %r" % st.get(b"curr_items"))
    eq("stats slabs is a dict", isinstance(c.stats("slabs"), dict), True)
    eq("version", c.version(), b"1.6.18")
    eq("flush_all", c.flush_all(), True)
    eq("get k1 after flush_all", c.get("k1"), None)
    eq("get_many after flush_all", c.get_many(["mk4", "c1", "n"]), {})
    eq("set after flush_all", c.set("k1", b"again"), True)
    eq("get k1", c.get("k1"), b"again")


def cas_race(Client, port, threads, rounds):
    c = client(Client, port)
    eq("set race", c.set("race", b"0"), True)
    conflicts = [0] * threads
    errors = []

    def racer(i):
        try:
            mc = client(Client, port)
            done = 0
            while done < rounds:
                v, cas = mc.gets("race")
                if mc.cas("race", b"%d" % (int(v) + 1), cas):
                    done += 1
                else:
                    conflicts[i] += 1
            mc.close()
        except Exception as e:
            errors.append("racer %d: %r" % (i, e))
    ts = [threading.Thread(target=racer, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    check(not any(t.is_alive() for t in ts), "CAS race: a thread did not finish in 120 s")
    check(not errors, "CAS race: %s" % errors[:3])
    final = c.get("race")
    print("  CAS race: %d threads x %d increments, %d conflicts retried, final value %s"
          % (threads, rounds, sum(conflicts), final), flush=True)
    eq("CAS race final value", final, b"%d" % (threads * rounds))
    c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", nargs="?", default="loom-memcached",
                    help="a path, or a name in MC_BIN_DIR (default loom-memcached)")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=100)
    a, binary = parse_with_binary(ap)
    try:
        from pymemcache.client.base import Client
    except ImportError:
        print("SKIP: pymemcache is not installed (Debian: python3-pymemcache)")
        return 77
    srv = Server(binary, ["-U", "0", "-m", "64", "-t", "2"])
    try:
        print("pymemcache against %s on port %d" % (binary, srv.port), flush=True)
        c = client(Client, srv.port)
        every_command(c)
        c.close()
        cas_race(Client, srv.port, a.threads, a.rounds)
        check(srv.alive(), "the server died")
    finally:
        srv.stop()
    print("clients_pymemcache: %d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
