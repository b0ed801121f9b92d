#!/usr/bin/env python3
"""TLS on one of the port's servers (-Z, the test certificates of memcached's
own t/): OpenSSL's reads and writes that want more data wait on the socket.

    tls.py BINARY [--default-bin-dir DIR]

Starts BINARY with -Z on a free port of 127.0.0.1, then 8 concurrent TLS
connections each store and read back values from 10 bytes to 512 KB (a
record larger than the socket buffers: partial TLS writes and reads), with
pipelined small gets in between; a plaintext client is refused while the
TLS ones go on. Exit 0 on success, 1 on a failure, 77 when BINARY or the
certificates are absent.
"""

import argparse
import os
import socket
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from differential import free_port, parse_with_binary  # noqa: E402

SIZES = [10, 1000, 16384, 100000, 524288]


def read_until(s, end, limit=2 << 20):
    buf = b""
    while not buf.endswith(end):
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed after %r" % buf[-80:])
        buf += chunk
        if len(buf) > limit:
            raise ValueError("reply too long")
    return buf


def tls_connect(ctx, port, timeout=10):
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return ctx.wrap_socket(raw)


def client(ctx, port, n, errors):
    try:
        with tls_connect(ctx, port) as s:
            for size in SIZES:
                key = b"tls%d_%d" % (n, size)
                value = bytes((n * 7 + i) % 251 for i in range(size))
                s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, size, value))
                if read_until(s, b"\r\n") != b"STORED\r\n":
                    raise AssertionError("set %s not stored" % key)
                s.sendall(b"get missing1\r\nget %s\r\nget missing2\r\n" % key)
                want = b"END\r\nVALUE %s 0 %d\r\n%s\r\nEND\r\nEND\r\n" % (key, size, value)
                got = b""
                while len(got) < len(want):
                    chunk = s.recv(65536)
                    if not chunk:
                        raise ConnectionError("closed mid-reply")
                    got += chunk
                if got != want:
                    raise AssertionError("get %s: %d bytes back, %d expected, differ at %d" % (
                        key, len(got), len(want), next(i for i in range(min(len(got), len(want)))
                                                       if got[i] != want[i]) if got[:len(want)] != want else -1))
    except Exception as e:  # reported by the main thread
        errors.append("client %d: %r" % (n, e))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    a, binary = parse_with_binary(ap)
    tdir = os.path.join(os.path.dirname(os.path.dirname(binary)), "memcached-1.6.18", "t")
    crt, key = os.path.join(tdir, "server_crt.pem"), os.path.join(tdir, "server_key.pem")
    for f in (crt, key):
        if not os.path.exists(f):
            print("SKIP: %s absent" % f)
            return 77
    port = free_port()
    args = [binary, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "2", "-m", "64", "-I", "1m",
            "-Z", "-o", "ssl_chain_cert=%s,ssl_key=%s" % (crt, key)]
    if os.geteuid() == 0:
        args[1:1] = ["-u", "root"]
    srv = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with tls_connect(ctx, port, timeout=2) as s:
                    s.sendall(b"version\r\n")
                    if read_until(s, b"\r\n").startswith(b"VERSION"):
                        break
            except (OSError, ssl.SSLError, ConnectionError):
                if time.monotonic() > deadline or srv.poll() is not None:
                    print("FAIL: %s did not come up with TLS" % binary)
                    return 1
                time.sleep(0.1)
        errors = []
        threads = [threading.Thread(target=client, args=(ctx, port, n, errors)) for n in range(8)]
        for t in threads:
            t.start()
        # A plaintext client: no reply (the server waits for a handshake it
        # cannot parse, or drops it); the TLS clients must not notice.
        with socket.create_connection(("127.0.0.1", port), timeout=2) as p:
            p.sendall(b"get x\r\n")
            try:
                reply = p.recv(100)
            except (socket.timeout, ConnectionResetError):
                reply = b""
            if reply.startswith(b"END") or reply.startswith(b"VALUE"):
                errors.append("a plaintext client was served: %r" % reply)
        for t in threads:
            t.join(60)
        if srv.poll() is not None:
            errors.append("the server died (status %s)" % srv.returncode)
        for e in errors:
            print("FAIL: " + e)
        print("tls: %s, 8 connections x %d sizes up to %d bytes: %s" % (
            os.path.basename(binary), len(SIZES), SIZES[-1], "FAIL" if errors else "ok"))
        return 1 if errors else 0
    finally:
        srv.terminate()
        srv.wait(10)


if __name__ == "__main__":
    sys.exit(main())
