#!/usr/bin/env python3
"""scripts/soak.py — a server under mixed, hostile load for a bounded time.

    scripts/soak.py web --server build/apps/webserver/webserver [--runtime loom] [--seconds 120] [--out FILE]
    scripts/soak.py memcached --server build/memcached-port/bin/loom-memcached --mcload PATH/mcload [...]

Starts the server on a free port of 127.0.0.1 (file descriptor limit 4096),
warms it up with a few seconds of the same mix (what grows once to its
working size — the descriptor table, the allocator's arenas, the kept
stacks — has grown then), and records its resident memory and open
descriptors. Then, for
--seconds, at the same time:
  - wrk keeps 64 keep-alive connections busy (the steady load);
  - "quitters" open connections and leave at random points: before sending,
    halfway through a request, after the head, while a response is on its
    way, or with a reset (SO_LINGER 0);
  - "vandals" send garbage: random bytes, NULs, a 64 KiB header line, bare
    line feeds, a request line of 8 KiB;
  - "crowds" open connections in bursts up to the descriptor limit, hold
    them a moment and close them all.
Afterwards, once the clients are gone and the server idled for a few
seconds, it must answer as at the start, its resident memory must be back
within 10 % of the warmed-up figure and no descriptor may have leaked
(/proc/PID/fd). For memcached, the steady load is mcload (64 connections,
10 % sets) and a "recorder" stores keys of its own all along, remembering
every one the server acknowledged (STORED): afterwards each must read back
with its value (-m is large enough that nothing is evicted). Prints one JSON line of figures (also to --out) and exits 1
if a criterion failed, 2 for a bad command line. Standard library only,
plus wrk (Debian).
"""

import argparse
import json
import os
import random
import re
import resource
import select
import socket
import subprocess
import sys
import threading
import time

FD_LIMIT = 4096


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def limit_fds():
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def raise_own_fds():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class WebServer:
    def __init__(self, path, runtime):
        cmd = [path, "--runtime", runtime, "--port", "0", "--read-timeout", "2", "--processors", "2"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limit_fds)
        ready, _, _ = select.select([self.proc.stdout], [], [], 10)
        line = self.proc.stdout.readline().decode() if ready else ""
        m = re.search(r"127\.0\.0\.1:(\d+)/", line)
        if not m:
            self.proc.kill()
            raise SystemExit(f"soak: the server did not start: {line!r}")
        self.port = int(m.group(1))
        self.pid = self.proc.pid

    def check(self):
        """One request on a fresh connection: the answer it gives at rest."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"GET /plaintext HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        return data.startswith(b"HTTP/1.1 200") and data.endswith(b"Hello, World!")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Memcached:
    def __init__(self, path):
        with socket.socket() as probe:  # a free port (memcached has no "any port" option)
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        cmd = [path, "-p", str(self.port), "-U", "0", "-l", "127.0.0.1", "-t", "2", "-m", "1024", "-c", str(FD_LIMIT - 64)]
        if os.geteuid() == 0:
            cmd += ["-u", "root"]  # memcached refuses to run as root without it
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit_fds)
        self.pid = self.proc.pid
        for _ in range(100):
            try:
                if self.ask(b"version\r\n").startswith(b"VERSION"):
                    return
            except OSError:
                time.sleep(0.05)
        self.proc.kill()
        raise SystemExit("soak: memcached did not start")

    def ask(self, line):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(line)
            return s.recv(4096)

    def check(self):
        return self.ask(b"set soak:check 0 0 2\r\nok\r\n") == b"STORED\r\n"

    def item_bytes(self):
        """What the stored items occupy: used chunks times chunk size over the
        slab classes (`stats slabs`); memcached mallocs slab pages ahead
        (total_malloced) but they become resident only as items fill them."""
        data = b""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                s.sendall(b"stats slabs\r\n")
                while not data.endswith(b"END\r\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except OSError:
            return 0
        size = {int(c): int(v) for c, v in re.findall(rb"STAT (\d+):chunk_size (\d+)", data)}
        used = {int(c): int(v) for c, v in re.findall(rb"STAT (\d+):used_chunks (\d+)", data)}
        return sum(size[c] * n for c, n in used.items() if c in size)

    def stop(self):
        WebServer.stop(self)


class Recorder:
    """Stores soak:<n> = <n repeated> one at a time; keeps what was STORED."""

    def __init__(self, port):
        self.port = port
        self.stored = []
        self.stop = threading.Event()

    def run(self):
        n = 0
        s = None
        while not self.stop.is_set():
            try:
                if s is None:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                value = str(n).encode() * 3
                s.sendall(b"set soak:%d 0 0 %d\r\n%s\r\n" % (n, len(value), value))
                reply = b""
                while not reply.endswith(b"\r\n"):
                    chunk = s.recv(64)
                    if not chunk:
                        raise OSError("closed")
                    reply += chunk
                if reply == b"STORED\r\n":
                    self.stored.append(n)
                n += 1
            except OSError:
                s = None  # a refused or dropped connection: nothing acknowledged, try again
                time.sleep(0.01)
        if s is not None:
            s.close()  # before the server is looked at rest

    def verify(self):
        """Keys acknowledged but not read back with their value."""
        lost = []
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
            f = s.makefile("rb")
            for i in range(0, len(self.stored), 100):
                batch = self.stored[i:i + 100]
                s.sendall(b"get " + b" ".join(b"soak:%d" % n for n in batch) + b"\r\n")
                got = {}
                while True:
                    line = f.readline()
                    if line == b"END\r\n" or not line:
                        break
                    key, _, length = line.split()[1:4]
                    got[key] = f.read(int(length) + 2)[:-2]
                for n in batch:
                    if got.get(b"soak:%d" % n) != str(n).encode() * 3:
                        lost.append(n)
        return lost


class Clients:
    """The hostile clients, each kind in its own thread until `stop`."""

    def __init__(self, port, seed, memcached=False):
        self.port = port
        self.memcached = memcached
        self.stop = threading.Event()
        self.count = {"quitters": 0, "vandals": 0, "crowd_connections": 0, "crowd_bursts": 0, "refused": 0}
        self.lock = threading.Lock()
        self.rng = random.Random(seed)

    def bump(self, key, n=1):
        with self.lock:
            self.count[key] += n

    def connect(self):
        s = socket.socket()
        s.settimeout(2)
        s.connect(("127.0.0.1", self.port))
        return s

    def repeat(self, kind, act):
        """Until stopped: a new connection, act(socket), close; counted as
        `kind`, or as refused when the connection fails."""
        while not self.stop.is_set():
            try:
                s = self.connect()
                act(s)
                s.close()
                self.bump(kind)
            except OSError:
                self.bump("refused")
                time.sleep(0.01)

    def quitter(self):
        rng = random.Random(self.rng.random())
        request = (b"set quitter 0 0 5\r\nhello\r\nget quitter\r\n" if self.memcached
                   else b"GET /plaintext HTTP/1.1\r\nHost: soak\r\nUser-Agent: quitter\r\n\r\n")
        # memcached: no reset after a partial command (how 4). With it alone,
        # Debian's memcached 1.6.18 itself (memcached-vanilla) ended holding
        # every descriptor in CLOSE-WAIT and answering nobody within 4 s
        # (2026-11-26; loom-memcached the same): a load the reference does not
        # survive is not asked of the port.
        kinds = 4 if self.memcached else 5

        def leave(s):
            how = rng.randrange(kinds)
            if how == 1:
                s.sendall(request[: rng.randrange(1, len(request) - 4)])
            elif how == 2:
                s.sendall(request[:-2])
            elif how == 3:
                s.sendall(request * rng.randrange(1, 50))  # leaves with answers unread
            elif how == 4:
                s.sendall(request[:10])
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")

        self.repeat("quitters", leave)

    def vandal(self):
        rng = random.Random(self.rng.random())
        garbage = [
            lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2048))),
            lambda: b"\0" * 512 + b"\r\n\r\n",
            lambda: b"GET / HTTP/1.1\r\nX: " + b"a" * 65536 + b"\r\n\r\n",
            lambda: b"GET /plaintext HTTP/1.1\nHost: x\n\n",
            lambda: b"GET /" + b"b" * 8192 + b" HTTP/1.1\r\n\r\n",
            lambda: b"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        ]
        if self.memcached:
            garbage += [
                lambda: b"set k 0 0 5\r\n" + b"x" * 4096 + b"\r\n",      # more data than announced
                lambda: b"get " + b"k" * 300 + b"\r\n",                      # key too long
                lambda: b"\x80\x01\x00\x05" + bytes(rng.randrange(256) for _ in range(40)),  # binary garbage
                lambda: b"set k 0 0 99999999999\r\n",
            ]
        def vandalise(s):
            s.sendall(rng.choice(garbage)())
            try:
                s.recv(4096)
            except OSError:
                pass

        self.repeat("vandals", vandalise)

    def crowd(self):
        rng = random.Random(self.rng.random())
        while not self.stop.is_set():
            socks = []
            want = rng.randrange(FD_LIMIT // 2, FD_LIMIT)  # up to the server's limit
            for _ in range(want):
                if self.stop.is_set():
                    break
                try:
                    socks.append(self.connect())
                except OSError:
                    self.bump("refused")
                    break
            self.bump("crowd_connections", len(socks))
            self.bump("crowd_bursts")
            time.sleep(rng.uniform(0.1, 0.5))
            for s in socks:
                s.close()
            time.sleep(rng.uniform(0.2, 1.0))

    def run(self, seconds):
        # memcached: one quitter thread. Two, with the crowd at the limit,
        # left Debian's own memcached 1.6.18 (memcached-vanilla) holding
        # every descriptor and answering nobody afterwards (2026-11-25): the
        # reference itself does not survive that mix, so it is not asked of
        # the port either.
        kinds = (self.quitter, self.vandal, self.crowd) if self.memcached else (self.quitter, self.quitter, self.vandal, self.crowd)
        threads = [threading.Thread(target=f, daemon=True) for f in kinds]
        for t in threads:
            t.start()
        self.stop.wait(seconds)
        self.stop.set()
        for t in threads:
            t.join(10)


def wrk(port, seconds, connections=64):
    return subprocess.Popen(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "5s", f"http://127.0.0.1:{port}/plaintext"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wrk_requests(out):
    m = re.search(r"(\d+) requests in", out)
    return int(m.group(1)) if m else 0


def at_rest(server):
    """The idle server's resident memory, open descriptors and whether it
    answers a plain request; None when it has died."""
    if server.proc.poll() is not None:
        return None
    try:
        answered = server.check()
    except OSError:  # refused or reset: it does not answer
        answered = False
    return {"rss": rss_kib(server.pid), "fds": open_fds(server.pid), "answered": answered}


def leaks(before, after, result, allowance_kib=0):
    """Records the before/after figures in `result`; returns the criteria
    that failed: alive, answering, memory within 10 % (plus what the server
    legitimately keeps, `allowance_kib`), every descriptor closed."""
    after_or_dead = after or {"rss": 0, "fds": 0, "answered": False}
    rss0, rss1, fds0, fds1 = before["rss"], after_or_dead["rss"], before["fds"], after_or_dead["fds"]
    result.update(rss_kib_start=rss0, rss_kib_end=rss1, rss_ratio=round(rss1 / rss0, 3) if rss0 else None,
                  fds_start=fds0, fds_end=fds1, answered_at_start=before["answered"],
                  answered_at_end=after_or_dead["answered"], alive=after is not None)
    failures = []
    if after is None:
        failures.append("the server died")
    if not (before["answered"] and after_or_dead["answered"]):
        failures.append("the server did not answer a plain request at rest")
    if rss0 and rss1 > 1.10 * rss0 + allowance_kib:
        kept = f" + {allowance_kib} KiB it keeps" if allowance_kib else ""
        failures.append(f"resident memory {rss1} KiB after, {rss0} KiB before{kept} (> +10 %)")
    if fds1 > fds0:  # fewer is no leak: a warm-up connection may still have been closing before
        failures.append(f"{fds1} descriptors open after, {fds0} before")
    return failures


def soak_web(args):
    raise_own_fds()
    server = WebServer(args.server, args.runtime)
    result = {"soak": "web", "runtime": args.runtime, "seconds": args.seconds}
    try:
        # Warm-up: the same mix for a few seconds, so that what grows once to
        # its working size (the descriptor table up to the limit, the
        # allocator's arenas, the stack caches' kept stacks) has grown.
        w = wrk(server.port, 5)
        Clients(server.port, args.seed + 1).run(5)
        w.communicate()
        time.sleep(5)
        before = at_rest(server)
        load = wrk(server.port, args.seconds)
        clients = Clients(server.port, args.seed)
        peak = [before["rss"]]

        def watch():
            while load.poll() is None:
                peak[0] = max(peak[0], rss_kib(server.pid))
                time.sleep(0.5)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        clients.run(args.seconds)
        out = load.communicate()[0].decode(errors="replace")
        watcher.join()
        time.sleep(5)  # closed connections drain, the stack caches trim
        result["failures"] = leaks(before, at_rest(server), result)
        result.update(rss_kib_peak=peak[0], wrk_requests=wrk_requests(out), **clients.count)
    finally:
        server.stop()
    return result


def soak_memcached(args):
    raise_own_fds()
    server = Memcached(args.server)
    result = {"soak": "memcached", "server": os.path.basename(args.server), "seconds": args.seconds}

    def mcload(seconds):
        return subprocess.Popen([args.mcload, "--server", f"127.0.0.1:{server.port}", "--connections", "64",
                                 "--write-ratio", "0.1", "--warmup", "0", "--duration", str(seconds), "--no-validate"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    try:
        w = mcload(5)
        Clients(server.port, args.seed + 1, memcached=True).run(5)
        w.communicate()
        time.sleep(5)
        items0 = server.item_bytes()
        before = at_rest(server)
        load = mcload(args.seconds)
        recorder = Recorder(server.port)
        rec = threading.Thread(target=recorder.run, daemon=True)
        rec.start()
        clients = Clients(server.port, args.seed, memcached=True)
        clients.run(args.seconds)
        recorder.stop.set()
        rec.join(10)
        out = load.communicate()[0].decode(errors="replace")
        time.sleep(5)
        after = at_rest(server)
        lost = recorder.verify() if after else recorder.stored
        # The items stored meanwhile stay (the recorder's, read back below):
        # growth beyond the slab chunks they fill is what counts.
        slab_kib = (server.item_bytes() - items0) // 1024 if after else 0
        failures = leaks(before, after, result, allowance_kib=slab_kib)
        if lost:
            failures.append(f"{len(lost)} of {len(recorder.stored)} acknowledged sets did not read back (first: soak:{lost[0]})")
        ops = re.search(r'"ops_per_s":\s*([0-9.]+)', out)
        result.update(slab_growth_kib=slab_kib, mcload_ops_per_s=float(ops.group(1)) if ops else None,
                      acknowledged=len(recorder.stored), lost=len(lost), **clients.count)
        result["failures"] = failures
    finally:
        server.stop()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["web", "memcached"])
    ap.add_argument("--mcload", help="apps/mcload's binary (memcached)")
    ap.add_argument("--server", required=True)
    ap.add_argument("--runtime", default="loom", choices=["loom", "events", "pthread"])
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.seconds < 1:
        ap.error("--seconds must be at least 1")
    if args.what == "memcached" and not args.mcload:
        ap.error("memcached needs --mcload")
    result = soak_web(args) if args.what == "web" else soak_memcached(args)
    line = json.dumps(result)
    print(line)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    for f in result["failures"]:
        print(f"soak: {f}", file=sys.stderr)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
