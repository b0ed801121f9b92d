#!/usr/bin/env python3
"""Scale-out: three memcached servers behind libmemcached's ketama hashing.

Starts three servers (loom-memcached by default) on free ports of
127.0.0.1 and one client, the ketama program (ketama.c: libmemcached with
MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA, MD5), which lives through all
phases:

1. fill: 3,000 keys stored; each server must own a fair share (between 20%
   and 47% of the keys) and hold exactly the keys libmemcached maps to it
   (its curr_items);
2. one server is killed (SIGKILL, by the PID this script started): the
   client keeps working; every other key hits and can be set; its own keys
   fail (plain: libmemcached leaves it in the continuum, its requests fail
   until it answers) or miss (eject: MEMCACHED_BEHAVIOR_REMOVE_FAILED_SERVERS
   takes it out of the continuum after a few failed requests, its keys move
   to the two others, only its keys move, and they can be set there);
3. it is started again, empty, on the same port: the same client, unchanged,
   retries it (retry/dead timeout 1 s) and uses it again; its keys miss, the
   others hit; they are stored again and all keys hit; its curr_items is its
   share again.

Both modes run by default (--mode), each with fresh servers.

Exit 0 on success, 1 on a failure, 77 when a binary is missing.
"""

import argparse
import os
import select
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from differential import (add_bin_dir_option, answers_version, die_with_parent, exit_on_sigterm,  # noqa: E402
                          free_port, read_exact_reply, resolve_binary, use_bin_dir_option)

FLAGS = ["-U", "0", "-m", "64", "-t", "2"]


class PortServer:
    """A memcached process on a given port of 127.0.0.1, stopped by its PID."""

    def __init__(self, binary, port):
        self.binary, self.port = binary, port
        self.start()

    def start(self):
        self.err = tempfile.TemporaryFile()
        args = [self.binary, "-l", "127.0.0.1", "-p", str(self.port)] + FLAGS
        if os.geteuid() == 0:
            args[1:1] = ["-u", "root"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.err, preexec_fn=die_with_parent)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            if answers_version(self.port):
                return True
            time.sleep(0.05)
        self.kill()
        self.err.seek(0)
        raise RuntimeError("could not start %s on port %d: %s"
                           % (self.binary, self.port, self.err.read()[-1000:].decode(errors="replace")))

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def alive(self):
        return self.proc.poll() is None

    def curr_items(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.sendall(b"stats\r\n")
        r = read_exact_reply(s, b"END\r\n")
        s.close()
        for line in r.split(b"\r\n"):
            p = line.split()
            if len(p) == 3 and p[1] == b"curr_items":
                return int(p[2])
        raise RuntimeError("no curr_items in %r" % r[:200])


def scenario(binary, client_prog, keys, stop, eject, check):
    servers, client = [], None
    try:
        ports = []
        while len(ports) < 3:
            p = free_port()
            if p not in ports:
                ports.append(p)
        servers = [PortServer(binary, p) for p in ports]
        print("%s on ports %s (pids %s)" % (binary, ports, [s.proc.pid for s in servers]), flush=True)
        argv = [client_prog] + [str(p) for p in ports] + [str(keys)] + (["eject"] if eject else [])
        client = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                  preexec_fn=die_with_parent)

        def phase(cmd, timeout=60):
            client.stdin.write(cmd + "\n")
            client.stdin.flush()
            r, _, _ = select.select([client.stdout], [], [], timeout)
            line = client.stdout.readline().strip() if r else ""
            print("%s -> %s" % (cmd, line or "(no answer in %d s)" % timeout), flush=True)
            check(line.startswith("ok"), "%s: %s" % (cmd, line or "the client did not answer"))
            return line

        line = phase("fill")
        if not line.startswith("ok fill"):
            return
        share = [int(x) for x in line.split()[2:5]]
        items = [s.curr_items() for s in servers]
        print("keys per server (libmemcached): %s; curr_items: %s" % (share, items), flush=True)
        check(sum(share) == keys, "shares %s do not add up to %d" % (share, keys))
        for i in range(3):
            check(0.20 * keys <= share[i] <= 0.47 * keys,
                  "server %d owns %d of %d keys: ketama should spread them (20%%..47%% each)" % (i, share[i], keys))
            check(items[i] == share[i], "server %d holds %d items, libmemcached maps %d keys to it"
                  % (i, items[i], share[i]))

        d = stop
        servers[d].kill()
        print("killed server %d (port %d)" % (d, ports[d]), flush=True)
        phase("down %d" % d)
        for i in range(3):
            if i != d:
                check(servers[i].alive(), "server %d died" % i)

        servers[d].start()
        print("restarted server %d on port %d (pid %d)" % (d, ports[d], servers[d].proc.pid), flush=True)
        phase("up %d" % d)
        items = [s.curr_items() for s in servers]
        print("curr_items after: %s" % items, flush=True)
        check(items[d] == share[d], "restarted server %d holds %d items, its share is %d" % (d, items[d], share[d]))
        for i in range(3):
            check(servers[i].alive(), "server %d died" % i)
        client.stdin.write("quit\n")
        client.stdin.flush()
        try:
            check(client.wait(30) == 0, "the client exited with %s" % client.returncode)
        except subprocess.TimeoutExpired:
            check(False, "the client did not exit")
    finally:
        if client and client.poll() is None:
            client.kill()
            client.wait()
        for s in servers:
            s.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("client", help="the ketama program (ketama.c)")
    ap.add_argument("binary", nargs="?", default="loom-memcached",
                    help="a path, or a name in MC_BIN_DIR (default loom-memcached)")
    ap.add_argument("--keys", type=int, default=3000)
    ap.add_argument("--stop", type=int, help="which server (0-2) to stop and restart (default 1, and 2 with eject)")
    ap.add_argument("--mode", choices=["plain", "eject", "both"], default="both",
                    help="plain: no ejection; eject: MEMCACHED_BEHAVIOR_REMOVE_FAILED_SERVERS; both (default)")
    add_bin_dir_option(ap)
    a = ap.parse_args()
    use_bin_dir_option(a)
    exit_on_sigterm()
    binary = resolve_binary(a.binary)
    for prog in (binary, a.client):
        if not os.access(prog, os.X_OK):
            print("SKIP: %s not built" % prog)
            return 77
    failures = []

    def check(cond, msg):
        if not cond:
            failures.append(msg)
            print("  FAIL: " + msg, flush=True)
        return cond

    modes = {"plain": [False], "eject": [True], "both": [False, True]}[a.mode]
    for eject in modes:
        stop = a.stop if a.stop is not None else (2 if eject else 1)
        print("--- %s: server %d stopped and restarted" % (
            "REMOVE_FAILED_SERVERS (ejected, its keys move)" if eject else "no ejection (its keys fail)", stop),
            flush=True)
        scenario(binary, a.client, a.keys, stop, eject, check)
    print("ketama: %s, %d failures" % (binary, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
