#!/usr/bin/env python3
"""mcload's test (ctest mcload_debian_memcached, label memcached).

    mcload_test.py MCLOAD MEMCACHED

Against Debian's memcached, started here on a free 127.0.0.1 port with one
worker thread: a second of text-protocol load and half a second of meta
multigets with ETC sizes must give a well-formed JSON line whose counts agree
with the server's counters (validated: true, exit 0). The checks must be able
to fail, so the test also shows that they do: two mcloads sharing the server
see each other's requests in its counters and fail the validation (exit 1);
a server that answers a get with garbage makes mcload exit 1 naming the bad
reply, and so does memcached refusing connections over its -c limit; bad
flags exit 2 with a message.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time

MCLOAD, MEMCACHED = sys.argv[1], sys.argv[2]
FAILS = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def mcload(args, timeout=60):
    r = subprocess.run([MCLOAD] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def load_ok(port, args, label):
    rc, out, err = mcload(["--server", f"127.0.0.1:{port}"] + args)
    check(rc == 0, f"{label}: exit 0 (got {rc}; stderr: {err.strip()[:300]})")
    try:
        row = json.loads(out)
    except json.JSONDecodeError:
        check(False, f"{label}: one JSON line (got {out[:200]!r})")
        return None
    for k in ("ops_per_s", "gets", "sets", "hits", "misses", "errors", "p50_us", "p90_us", "p99_us", "p999_us"):
        check(k in row, f"{label}: JSON has {k}")
    check(row.get("validated") is True, f"{label}: validated against the server's counters")
    check(row["errors"] == 0 and row["unanswered"] == 0, f"{label}: no errors")
    check(row["ops_per_s"] > 0 and row["gets"] > 0 and row["sets"] > 0, f"{label}: gets and sets completed")
    check(row["hits"] + row["misses"] == row["get_keys"], f"{label}: hits + misses = keys asked for")
    check(0 < row["p50_us"] <= row["p90_us"] <= row["p99_us"] <= row["p999_us"], f"{label}: percentiles ordered")
    check(row["server_get_hits"] >= row["hits"], f"{label}: the server saw at least the measured hits")
    return row


def bad_server(port, stop):
    """Answers stats and sets like memcached, and every get with a line no memcached sends."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(64)
    ls.settimeout(0.2)
    conns = []

    def serve(c):
        buf = b""
        try:
            while not stop.is_set():
                d = c.recv(65536)
                if not d:
                    return
                buf += d
                out = b""
                while b"\r\n" in buf:
                    line, rest = buf.split(b"\r\n", 1)
                    if line.startswith(b"set "):
                        n = int(line.split()[4])
                        if len(rest) < n + 2:
                            break
                        buf = rest[n + 2:]
                        out += b"STORED\r\n"
                        continue
                    buf = rest
                    if line == b"stats":
                        out += b"STAT cmd_get 0\r\nSTAT cmd_set 0\r\nSTAT get_hits 0\r\nSTAT get_misses 0\r\nEND\r\n"
                    else:
                        out += b"HELLO THERE\r\n"
                c.sendall(out)
        except OSError:
            pass
        finally:
            c.close()

    while not stop.is_set():
        try:
            c, _ = ls.accept()
        except socket.timeout:
            continue
        t = threading.Thread(target=serve, args=(c,), daemon=True)
        t.start()
        conns.append(t)
    ls.close()


def main():
    port = free_port()
    cmd = [MEMCACHED, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "1", "-c", "1024"]
    if os.geteuid() == 0:
        cmd += ["-u", "nobody"]
    srv = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        check(wait_port(port), f"memcached listens on {port}")
        load_ok(port, ["--connections", "8", "--depth", "2", "--warmup", "0.2", "--duration", "1"], "text")
        row = load_ok(port, ["--connections", "6", "--threads", "2", "--depth", "4", "--multiget", "4",
                             "--protocol", "meta", "--dist", "etc", "--warmup", "0.1", "--duration", "0.5"], "meta+etc")
        if row:
            check(row["get_keys"] == 4 * row["gets"], "meta+etc: 4 keys per get")
        # Two clients on one server: each sees the other's requests in the counters.
        a = subprocess.Popen([MCLOAD, "--server", f"127.0.0.1:{port}", "--connections", "4", "--duration", "1",
                              "--warmup", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rc_b, _, err_b = mcload(["--server", f"127.0.0.1:{port}", "--connections", "4", "--duration", "1",
                                 "--warmup", "0.2"])
        out_a, err_a = a.communicate(timeout=60)
        failed = [(rc, err) for rc, err in ((a.returncode, err_a), (rc_b, err_b)) if rc == 1 and "validation failed" in err]
        check(len(failed) >= 1, f"a shared server fails the validation (exit {a.returncode} and {rc_b}; "
                                f"{(err_a + err_b).strip()[:300]})")
    finally:
        srv.terminate()
        srv.wait(10)

    # Over the server's -c limit: memcached's own refusal reaches the user.
    port = free_port()
    cmd = [MEMCACHED, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "1", "-c", "20"]
    if os.geteuid() == 0:
        cmd += ["-u", "nobody"]
    srv = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        check(wait_port(port), f"memcached -c 20 listens on {port}")
        rc, out, err = mcload(["--server", f"127.0.0.1:{port}", "--connections", "40", "--warmup", "0",
                               "--duration", "0.3"])
        check(rc == 1 and "Too many open connections" in err,
              f"40 connections to memcached -c 20: exit 1 with its refusal (got {rc}; {err.strip()[:300]})")
    finally:
        srv.terminate()
        srv.wait(10)

    # Bad replies are errors, not ignored.
    port = free_port()
    stop = threading.Event()
    t = threading.Thread(target=bad_server, args=(port, stop), daemon=True)
    t.start()
    check(wait_port(port), "the bad server listens")
    rc, out, err = mcload(["--server", f"127.0.0.1:{port}", "--connections", "2", "--keys", "100",
                           "--write-ratio", "0", "--warmup", "0", "--duration", "0.3"])
    stop.set()
    check(rc == 1 and "bad reply" in err and "HELLO THERE" in err,
          f"a garbage reply is an error, exit 1 (got {rc}; {err.strip()[:300]})")
    if out.strip():
        check(json.loads(out)["errors"] > 0, "the JSON counts the errors")

    # Bad flags: exit 2 with a message naming the flag.
    for args, word in ((["--depth", "0"], "--depth"), (["--connections", "x"], "--connections"),
                       (["--write-ratio", "2"], "--write-ratio"), (["--frobnicate", "1"], "--frobnicate"),
                       (["--dist", "zipf"], "--dist"), (["--server", "nohostport"], "--server")):
        rc, _, err = mcload(args)
        check(rc == 2 and word in err, f"mcload {' '.join(args)}: exit 2 naming {word} (got {rc}: {err.splitlines()[0] if err else ''})")
    # A server that is not there: exit 1 with the reason.
    rc, _, err = mcload(["--server", f"127.0.0.1:{free_port()}", "--duration", "0.1"])
    check(rc == 1 and "cannot connect" in err, f"no server: exit 1, 'cannot connect' (got {rc}: {err.strip()[:200]})")

    print(f"{len(FAILS)} failure(s)" if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
