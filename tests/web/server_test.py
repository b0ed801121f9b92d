#!/usr/bin/env python3
"""tests/web/server_test.py — the web server (apps/webserver) against real clients.

    server_test.py --server PATH/webserver --runtime loom|pthread|events [--corpus DIR]
                   [--server-arg=OPTION ...] [unittest args]

Starts the server on an ephemeral port of 127.0.0.1 (its listening line says
which) with a temporary --root and a 2 s read timeout, and drives it with
curl, wrk (both from Debian: scripts/deps.sh test) and Python's http.client
and raw sockets. Every test also checks that the server is still running
afterwards. Standard library only.
"""

import argparse
import http.client
import os
import random
import re
import resource
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ARGS = None
READ_TIMEOUT = 2.0  # --read-timeout given to the server (seconds)


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Server:
    """The server under test, on its own port; stderr kept for failures."""

    def __init__(self, *extra):
        self.err = tempfile.TemporaryFile()
        cmd = [ARGS.server, "--runtime", ARGS.runtime, "--port", "0", "--read-timeout", str(READ_TIMEOUT)]
        cmd += list(extra) + ARGS.server_arg
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err, preexec_fn=raise_nofile)
        ready, _, _ = select.select([self.proc.stdout], [], [], 10)
        line = self.proc.stdout.readline().decode() if ready else ""
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", line)
        if not m:
            self.stop()
            raise RuntimeError(f"server did not start: {line!r} {self.stderr()}")
        self.port = int(m.group(1))

    def alive(self):
        return self.proc.poll() is None

    def stderr(self):
        self.err.seek(0)
        return self.err.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.err.close()


def connect(port, timeout=5.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def read_until_close(s, deadline_s):
    """Everything the server sends until it closes; None if it is still open
    after deadline_s seconds (a hang)."""
    data = b""
    end = time.monotonic() + deadline_s
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return None
        r, _, _ = select.select([s], [], [], left)
        if not r:
            return None
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return data
        if not chunk:
            return data
        data += chunk


def parse_responses(data, head_flags):
    """Splits a byte stream into responses; head_flags[i] says whether
    request i was HEAD (no body whatever Content-Length says). Returns a list
    of (status, headers dict (lower-case names), body) and the bytes left."""
    out = []
    for is_head in head_flags:
        end = data.find(b"\r\n\r\n")
        if end < 0:
            break
        head = data[:end].decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        headers = {}
        for line in head[1:]:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        n = 0 if is_head else int(headers.get("content-length", "0"))
        body = data[end + 4:end + 4 + n]
        if len(body) < n:
            break
        out.append((status, headers, body))
        data = data[end + 4 + n:]
    return out, data


def recv_responses(s, head_flags, timeout=10.0):
    """Reads until len(head_flags) whole responses have arrived."""
    data = b""
    end = time.monotonic() + timeout
    while True:
        got, rest = parse_responses(data, head_flags)
        if len(got) == len(head_flags):
            return got, rest
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError(f"only {len(got)} of {len(head_flags)} responses after {timeout} s")
        r, _, _ = select.select([s], [], [], left)
        if r:
            chunk = s.recv(1 << 20)
            if not chunk:
                raise AssertionError(f"closed after {len(got)} of {len(head_flags)} responses")
            data += chunk


def request(path, method="GET", version="1.1", headers=()):
    lines = [f"{method} {path} HTTP/{version}"]
    if version == "1.1":
        lines.append("Host: 127.0.0.1")
    lines += list(headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class WebServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="loom-web-")
        root = os.path.join(cls.tmp, "root")
        os.makedirs(os.path.join(root, "sub"))
        cls.files = {}

        def put(rel, content):
            with open(os.path.join(root, rel), "wb") as f:
                f.write(content)
            cls.files[rel] = content

        put("index.html", b"<!doctype html><p>loom</p>\n")
        put("style.css", b"body { color: black }\n")
        put("sub/data.json", b'{"a": 1}\n')
        for i in range(10):
            put(f"f{i}.txt", f"file number {i}\n".encode() * (i + 1))
        rnd = random.Random(6)
        put("big.bin", bytes(rnd.getrandbits(8) for _ in range(1 << 20)))
        with open(os.path.join(cls.tmp, "secret.txt"), "wb") as f:
            f.write(b"outside the root\n")
        os.symlink(os.path.join(cls.tmp, "secret.txt"), os.path.join(root, "out-link"))
        os.symlink(os.path.join(root, "style.css"), os.path.join(root, "in-link.css"))
        cls.server = Server("--root", root)
        cls.port = cls.server.port

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def tearDown(self):
        self.assertTrue(self.server.alive(), f"the server died: {self.server.stderr()}")
        # ... and still answers.
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        c.request("GET", "/plaintext")
        r = c.getresponse()
        self.assertEqual((r.status, r.read()), (200, b"Hello, World!"))
        c.close()

    # ---- real clients ----

    def test_plaintext_headers(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        c.request("GET", "/plaintext")
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.read(), b"Hello, World!")
        self.assertEqual(r.getheader("Content-Type"), "text/plain")
        self.assertEqual(r.getheader("Content-Length"), "13")
        self.assertEqual(r.getheader("Server"), "loom")
        self.assertRegex(r.getheader("Date"), r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT$")
        c.close()

    def test_curl_reuses_the_connection(self):
        url = f"http://127.0.0.1:{self.port}/plaintext"
        r = subprocess.run(["curl", "-sv", "--max-time", "10", url, url, url], capture_output=True, timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"Hello, World!" * 3)
        self.assertEqual(r.stderr.count(b"Re-using existing connection"), 2, r.stderr.decode(errors="replace"))

    def test_http_client_keep_alive(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        c.connect()
        sock = c.sock
        for path, body in (("/plaintext", b"Hello, World!"), ("/f3.txt", self.files["f3.txt"]),
                           ("/index.html", self.files["index.html"]), ("/plaintext", b"Hello, World!")):
            c.request("GET", path)
            r = c.getresponse()
            self.assertEqual((r.status, r.read()), (200, body))
            self.assertIs(c.sock, sock, "http.client had to reconnect: the connection was not kept alive")
        c.close()

    def test_500_pipelined_requests_in_order(self):
        reqs, expect, heads = [], [], []
        for i in range(500):
            kind = i % 4
            if kind == 0:
                reqs.append(request("/plaintext"))
                expect.append((200, b"Hello, World!"))
            elif kind == 1:
                reqs.append(request(f"/f{i % 10}.txt"))
                expect.append((200, self.files[f"f{i % 10}.txt"]))
            elif kind == 2:
                reqs.append(request("/plaintext", method="HEAD"))
                expect.append((200, b""))
            else:
                reqs.append(request(f"/missing-{i}"))
                expect.append((404, b"Not Found\n"))
            heads.append(kind == 2)
        s = connect(self.port)
        s.sendall(b"".join(reqs))
        got, rest = recv_responses(s, heads)
        self.assertEqual(rest, b"")
        self.assertEqual([(st, body) for st, _, body in got], expect)
        s.close()

    def test_head_has_no_body(self):
        s = connect(self.port)
        s.sendall(request("/plaintext", method="HEAD") + request("/style.css", method="HEAD") + request("/plaintext"))
        got, rest = recv_responses(s, [True, True, False])
        self.assertEqual(got[0][1]["content-length"], "13")
        self.assertEqual(got[0][2], b"")
        self.assertEqual(got[1][1]["content-length"], str(len(self.files["style.css"])))
        self.assertEqual(got[1][1]["content-type"], "text/css; charset=utf-8")
        self.assertEqual(got[2][2], b"Hello, World!")
        s.settimeout(0.3)
        with self.assertRaises(socket.timeout):
            extra = s.recv(100)  # nothing else: HEAD sent no body
            self.fail(f"unexpected bytes after the answers: {extra!r}")
        s.close()

    def test_connection_close_closes(self):
        s = connect(self.port)
        s.sendall(request("/plaintext", headers=["Connection: close"]))
        data = read_until_close(s, 5)
        self.assertIsNotNone(data, "the server kept the connection open after Connection: close")
        got, rest = parse_responses(data, [False])
        self.assertEqual(got[0][0], 200)
        self.assertEqual(got[0][1]["connection"], "close")
        self.assertEqual(rest, b"")
        s.close()

    def test_http10(self):
        s = connect(self.port)
        s.sendall(b"GET /plaintext HTTP/1.0\r\n\r\n")
        data = read_until_close(s, 5)
        self.assertIsNotNone(data, "HTTP/1.0 without keep-alive must close")
        got, _ = parse_responses(data, [False])
        self.assertEqual((got[0][0], got[0][2]), (200, b"Hello, World!"))
        s.close()
        s = connect(self.port)
        s.sendall(b"GET /plaintext HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        got, _ = recv_responses(s, [False])
        self.assertEqual(got[0][1].get("connection"), "keep-alive")
        s.sendall(b"GET /f1.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        got, _ = recv_responses(s, [False])
        self.assertEqual(got[0][2], self.files["f1.txt"])
        s.close()

    # ---- bad input: an error status or a close, never a crash or a hang ----

    def expect_error_and_close(self, data, statuses, chunk=None):
        s = connect(self.port)
        try:
            if chunk:
                for i in range(0, len(data), chunk):
                    s.sendall(data[i:i + chunk])
            else:
                s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed while we were still sending
        out = read_until_close(s, READ_TIMEOUT + 3)
        s.close()
        self.assertIsNotNone(out, f"no close after {data[:60]!r}")
        got, _ = parse_responses(out, [False])
        self.assertTrue(got, f"no answer to {data[:60]!r}: {out[:200]!r}")
        self.assertIn(got[0][0], statuses, data[:80])
        self.assertEqual(got[0][1].get("connection"), "close")
        return got[0]

    def test_malformed_request_lines(self):
        for line in [b"GET", b"GET /", b"GET  / HTTP/1.1", b"GET / HTTP/1.1 x", b"GET / HTTP/x.y", b"GET noslash HTTP/1.1",
                     b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"GET /\x7f HTTP/1.1", b" GET / HTTP/1.1"]:
            self.expect_error_and_close(line + b"\r\nHost: x\r\n\r\n", (400,))

    def test_header_without_colon(self):
        self.expect_error_and_close(b"GET / HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n", (400,))
        self.expect_error_and_close(b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", (400,))
        self.expect_error_and_close(b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", (400,))
        self.expect_error_and_close(b"GET / HTTP/1.1\r\n\r\n", (400,))  # no Host

    def test_100kib_of_headers(self):
        data = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 90)
                                                        for i in range(1100)) + b"\r\n"
        self.assertGreater(len(data), 100 * 1024)
        self.expect_error_and_close(data, (431,))
        self.expect_error_and_close(data, (431,), chunk=1000)
        self.expect_error_and_close(b"GET /" + b"a" * (100 * 1024) + b" HTTP/1.1\r\nHost: x\r\n\r\n", (414,))

    def test_nul_bytes(self):
        self.expect_error_and_close(b"GET /a\x00b HTTP/1.1\r\nHost: x\r\n\r\n", (400,))
        self.expect_error_and_close(b"GET / HTTP/1.1\r\nHost: x\x00y\r\n\r\n", (400,))
        self.expect_error_and_close(b"\x00" * 64, (400,))

    def test_unsupported_methods_and_versions(self):
        s = connect(self.port)
        s.sendall(request("/plaintext", method="DELETE") + request("/plaintext"))
        got, _ = recv_responses(s, [False, False])
        self.assertEqual(got[0][0], 405)
        self.assertEqual(got[0][1]["allow"], "GET, HEAD")
        self.assertEqual(got[1][0], 200)  # no body: the connection goes on
        s.close()
        self.expect_error_and_close(request("/", method="POST", headers=["Content-Length: 5"]) + b"hello", (405,))
        self.expect_error_and_close(request("/", method="BREW"), (501,))
        self.expect_error_and_close(b"GET / HTTP/2.0\r\n\r\n", (505,))
        self.expect_error_and_close(request("/", headers=["Transfer-Encoding: chunked"]) + b"0\r\n\r\n", (501,))

    def test_get_with_a_body_is_read_past(self):
        s = connect(self.port)
        s.sendall(request("/plaintext", headers=["Content-Length: 10"]) + b"0123456789" + request("/f2.txt"))
        got, _ = recv_responses(s, [False, False])
        self.assertEqual([g[0] for g in got], [200, 200])
        self.assertEqual(got[1][2], self.files["f2.txt"])
        s.close()

    def test_slow_and_idle_clients_are_closed_others_keep_being_served(self):
        results = {}

        def slow():
            s = connect(self.port, timeout=10)
            t0 = time.monotonic()
            received = b""
            try:
                for b in request("/plaintext"):
                    s.send(bytes([b]))
                    r, _, _ = select.select([s], [], [], 1.0)
                    if r:
                        chunk = s.recv(4096)
                        received += chunk
                        if not chunk:
                            break
            except (BrokenPipeError, ConnectionResetError):
                pass
            results["slow"] = (time.monotonic() - t0, received)
            s.close()

        def idle():
            s = connect(self.port, timeout=10)
            t0 = time.monotonic()
            data = read_until_close(s, READ_TIMEOUT + 4)
            results["idle"] = (time.monotonic() - t0, data)
            s.close()

        threads = [threading.Thread(target=slow), threading.Thread(target=idle)]
        for t in threads:
            t.start()
        # 100 other clients, each asking again and again meanwhile.
        others = [connect(self.port) for _ in range(100)]
        served = [0] * len(others)
        t0 = time.monotonic()
        while time.monotonic() - t0 < READ_TIMEOUT + 1.5:
            for i, s in enumerate(others):
                s.sendall(request("/plaintext"))
            for i, s in enumerate(others):
                got, _ = recv_responses(s, [False], timeout=5)
                self.assertEqual(got[0][2], b"Hello, World!")
                served[i] += 1
            time.sleep(0.05)
        for t in threads:
            t.join()
        for s in others:
            s.close()
        slow_t, slow_data = results["slow"]
        self.assertEqual(slow_data, b"", "the slow client got an answer")
        self.assertGreaterEqual(slow_t, READ_TIMEOUT - 0.3)
        self.assertLess(slow_t, READ_TIMEOUT + 2.0, "the slow client was not closed at its timeout")
        idle_t, idle_data = results["idle"]
        self.assertEqual(idle_data, b"", "the idle client was not closed (or got bytes)")
        self.assertGreaterEqual(idle_t, READ_TIMEOUT - 0.3)
        self.assertLess(idle_t, READ_TIMEOUT + 1.5)
        self.assertGreaterEqual(min(served), 10, f"others starved: served {min(served)}..{max(served)}")

    def test_corpus_and_random_bytes(self):
        inputs = []
        if ARGS.corpus:
            for name in sorted(os.listdir(ARGS.corpus)):
                with open(os.path.join(ARGS.corpus, name), "rb") as f:
                    inputs.append((name, f.read()))
        rnd = random.Random(1234)
        base = request("/plaintext") + request("/f1.txt", method="HEAD")
        for i in range(60):
            if i % 2:
                data = bytes(rnd.getrandbits(8) for _ in range(rnd.choice([1, 16, 200, 3000, 9000, 20000])))
            else:  # a real request with a few bytes flipped, cut or doubled
                b = bytearray(base)
                for _ in range(rnd.randint(1, 6)):
                    op, k = rnd.randint(0, 2), rnd.randrange(len(b))
                    if op == 0:
                        b[k] = rnd.getrandbits(8)
                    elif op == 1:
                        del b[k]
                    else:
                        b[k:k] = b[k:k + rnd.randint(1, 20)]
                data = bytes(b)
            inputs.append((f"random-{i}", data))
        failures = []

        def one(name, data):
            try:
                s = connect(self.port, timeout=10)
                try:
                    s.sendall(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                out = read_until_close(s, READ_TIMEOUT + 3)
                s.close()
                if out is None:
                    failures.append(f"{name}: still open after {READ_TIMEOUT + 3} s")
                    return
                # Whatever came back is whole responses with known statuses.
                heads = [False] * 64
                got, _ = parse_responses(out, heads)
                for st, _, _ in got:
                    if st not in (200, 400, 404, 405, 413, 414, 431, 501, 505):
                        failures.append(f"{name}: status {st}")
            except Exception as e:  # noqa: BLE001 — report every input, not the first
                failures.append(f"{name}: {e!r}")

        threads = [threading.Thread(target=one, args=x) for x in inputs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(failures, [])

    # ---- static files ----

    def test_static_files(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        for rel, ctype in (("index.html", "text/html; charset=utf-8"), ("style.css", "text/css; charset=utf-8"),
                           ("sub/data.json", "application/json"), ("big.bin", "application/octet-stream"),
                           ("f9.txt", "text/plain; charset=utf-8")):
            c.request("GET", "/" + rel)
            r = c.getresponse()
            body = r.read()
            self.assertEqual(r.status, 200, rel)
            self.assertEqual(body, self.files[rel], rel)
            self.assertEqual(int(r.getheader("Content-Length")), len(self.files[rel]))
            self.assertEqual(r.getheader("Content-Type"), ctype)
        c.request("GET", "/")
        r = c.getresponse()
        self.assertEqual((r.status, r.read()), (200, self.files["index.html"]))
        c.request("GET", "/in-link.css")
        r = c.getresponse()
        self.assertEqual((r.status, r.read()), (200, self.files["style.css"]))
        for path in ("/nope.html", "/sub/nope", "/f1.txt/x"):
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 404, path)
        c.close()

    def test_traversal_is_refused(self):
        s = connect(self.port)
        paths = ["/../secret.txt", "/sub/../../secret.txt", "/%2e%2e/secret.txt", "/%2E%2E%2Fsecret.txt",
                 "/.%2e/secret.txt", "/out-link", "/sub/..%2f..%2fsecret.txt", "http://x/../secret.txt"]
        s.sendall(b"".join(request(p) for p in paths))
        got, _ = recv_responses(s, [False] * len(paths))
        for p, (st, _, body) in zip(paths, got):
            self.assertIn(st, (403, 404), p)
            self.assertNotIn(b"outside", body, p)
        s.close()

    # ---- load ----

    def test_wrk_10000_connections(self):
        if not shutil.which("wrk"):
            self.skipTest("wrk not installed (scripts/deps.sh test)")
        # A server of its own, with a read timeout longer than the run: wrk's
        # one thread opens all 10,000 connections before it sends on most of
        # them, and on a loaded machine that took longer than the shared
        # server's 2 s, which then closed the first ones as idle clients
        # (CI: "0 requests in 2.84s", 254 read errors).
        # wrk's duration counts from its start, connecting included: with
        # two such tests at once on a loaded 2-core machine its one thread
        # spent all of 4 s connecting ("0 requests in 6.47s", no socket
        # errors). A run that served nothing is made again, longer, once.
        server = Server("--read-timeout", "60")
        try:
            for duration in ("4s", "15s"):
                r = subprocess.run(["wrk", "-t1", "-c10000", f"-d{duration}", "--timeout", "10s",
                                    f"http://127.0.0.1:{server.port}/plaintext"],
                                   capture_output=True, text=True, timeout=90, preexec_fn=raise_nofile)
                self.assertTrue(server.alive(), server.stderr())
                if r.returncode != 0 or "Socket errors" in r.stdout or not re.search(r"\b0 requests in", r.stdout):
                    break
        finally:
            server.stop()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("Socket errors", r.stdout, r.stdout)
        self.assertNotIn("Non-2xx", r.stdout, r.stdout)
        m = re.search(r"(\d+) requests in", r.stdout)
        self.assertTrue(m and int(m.group(1)) > 0, r.stdout)


class LimitsTest(unittest.TestCase):
    def test_max_connections(self):
        server = Server("--max-connections", "3")
        try:
            held = []
            for _ in range(3):
                s = connect(server.port)
                s.sendall(request("/plaintext"))
                got, _ = recv_responses(s, [False])
                self.assertEqual(got[0][0], 200)
                held.append(s)
            s = connect(server.port)
            s.sendall(request("/plaintext"))
            out = read_until_close(s, 5)
            self.assertIsNotNone(out)
            got, _ = parse_responses(out, [False])
            self.assertEqual(got[0][0], 503)
            s.close()
            held.pop().close()
            time.sleep(0.2)
            s = connect(server.port)
            s.sendall(request("/plaintext"))
            got, _ = recv_responses(s, [False])
            self.assertEqual(got[0][0], 200)
            s.close()
            for h in held:
                h.close()
            self.assertTrue(server.alive())
        finally:
            server.stop()

    def test_defer_accept(self):
        server = Server("--defer-accept")
        try:
            s = connect(server.port)
            s.sendall(request("/plaintext", headers=["Connection: close"]))
            out = read_until_close(s, 5)
            s.close()
            self.assertIsNotNone(out)
            got, _ = parse_responses(out, [False])
            self.assertEqual((got[0][0], got[0][2]), (200, b"Hello, World!"))
            # A client that sends nothing is still accepted (after about a
            # second) and then closed at its read timeout.
            s = connect(server.port)
            t0 = time.monotonic()
            self.assertEqual(read_until_close(s, READ_TIMEOUT + 6), b"")
            self.assertLess(time.monotonic() - t0, READ_TIMEOUT + 6)
            s.close()
            self.assertTrue(server.alive())
        finally:
            server.stop()

    def test_bad_command_lines(self):
        bad = [(["--bogus"], "unknown option"), (["--port", "abc"], "--port"),
               (["--runtime=fibres"], "--runtime"), (["--poller", "nope"], "--poller"),
               (["--stack-size", "1K"], "--stack-size"), (["--read-timeout", "-1"], "--read-timeout"),
               (["--processors"], "needs a value"), (["--root", "/nonexistent/dir"], "--root"),
               (["--address", "1.2.3"], "--address")]
        if ARGS.runtime != "loom":  # one cluster (events), or none (pthread)
            bad.append((["--cluster-size", "2"], "--cluster-size"))
        for args, what in bad:
            r = subprocess.run([ARGS.server, "--runtime", ARGS.runtime, "--port", "0"] + args, capture_output=True,
                               text=True, timeout=10)
            self.assertEqual(r.returncode, 2, f"{args}: exit {r.returncode}, {r.stderr}")
            self.assertIn(what, r.stderr, args)
        r = subprocess.run([ARGS.server, "--help"], capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 0)
        self.assertIn("--runtime", r.stdout)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--runtime", choices=["loom", "pthread", "events"], required=True)
    p.add_argument("--corpus")
    # An option for every server started (--server-arg=--rest: resting connections).
    p.add_argument("--server-arg", action="append", default=[])
    ARGS, rest = p.parse_known_args()
    raise_nofile()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
