#!/usr/bin/env python3
"""scripts/mc_expand_pause.py — how long memcached's hash-table expansion stops
a connection, on each server of the port.

memcached grows its hash table when it holds 1.5x as many items as buckets:
its maintainer thread pauses every worker (pause_threads) to swap the
tables, then moves buckets over in the background. In vanilla a paused
worker stops all its connections; in the port a connection runs under its
worker's gate, which the paused worker holds — so the same stop, and this
measures it.

For each server: start it with a small table (-o hashpower=16: 65,536
buckets, expansion at 98,304 items), run a probe connection that does one
`get` after another and records each round trip, and fill the table with
--items pipelined `set ... noreply` from a second connection until the
server's stats say the table has grown (hash_power_level 17, and
hash_is_expanding back to 0). Prints one JSON line per server: the probe's
round trips before the fill (p50, p99, max) and during the expansion window
(max, and how many exceeded 1 ms), and the window's length.

  scripts/mc_expand_pause.py [--bin-dir build/memcached-port/bin] [--items 200000]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import multiprocessing
import time

SERVERS = ["memcached-vanilla", "loom-memcached", "memcached-tpc"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect(port, deadline=5.0):
    end = time.monotonic() + deadline
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def read_until(s, end):
    buf = b""
    while not buf.endswith(end):
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        buf += chunk
    return buf


def stats(port):
    with connect(port) as s:
        s.sendall(b"stats\r\n")
        out = {}
        for line in read_until(s, b"END\r\n").decode().split("\r\n"):
            f = line.split(" ")
            if len(f) == 3 and f[0] == "STAT":
                out[f[1]] = f[2]
        return out


def probe_main(port, conn, stop):
    """One get after another until `stop` is set; sends back (start time,
    round trip in µs) for each. A process of its own: in a thread it would
    share the filler's interpreter lock, and measure that."""
    s = connect(port)
    samples = []
    while not stop.is_set():
        t0 = time.monotonic()
        s.sendall(b"get probe\r\n")
        read_until(s, b"END\r\n")
        samples.append((t0, (time.monotonic() - t0) * 1e6))
    conn.send(samples)


class Probe:
    def __init__(self, port):
        self.stop = multiprocessing.Event()
        self.rx, tx = multiprocessing.Pipe(duplex=False)
        self.proc = multiprocessing.Process(target=probe_main, args=(port, tx, self.stop), daemon=True)
        self.proc.start()

    def finish(self):
        self.stop.set()
        samples = self.rx.recv()
        self.proc.join(5)
        return samples


def measure(binary, items):
    port = free_port()
    srv = subprocess.Popen([binary, "-u", "nobody", "-U", "0", "-l", "127.0.0.1", "-p", str(port), "-t", "1",
                            "-m", "1024", "-o", "hashpower=16"], stdout=subprocess.DEVNULL)
    try:
        probe = Probe(port)
        time.sleep(1.0)
        fill_start = time.monotonic()
        filler = connect(port)
        value = b"v" * 32
        batch = []
        window = [None, None]
        for i in range(items):
            batch.append(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value), value))
            if len(batch) == 1000:
                filler.sendall(b"".join(batch))
                batch = []
                if i % 10000 == 9999:
                    st = stats(port)
                    if window[0] is None and (st.get("hash_is_expanding") == "1" or st.get("hash_power_level") != "16"):
                        window[0] = time.monotonic()
        filler.sendall(b"".join(batch) + b"version\r\n")
        read_until(filler, b"\r\n")
        end = time.monotonic() + 30
        while time.monotonic() < end:
            st = stats(port)
            if st.get("hash_power_level") != "16" and st.get("hash_is_expanding") == "0":
                window[1] = time.monotonic()
                if window[0] is None:
                    window[0] = window[1]
                break
            time.sleep(0.01)
        time.sleep(0.2)
        samples = probe.finish()
        before = [rt for t, rt in samples if t < fill_start]
        grown = window[1] is not None
        if grown:
            # From the fill's first batch that saw the expansion (the pause
            # may precede that stats call by up to 10,000 items) to its end.
            lo = window[0] - 1.0
            during = [rt for t, rt in samples if lo <= t <= window[1] + 0.1]
        else:
            during = []
        q = statistics.quantiles(before, n=100) if len(before) >= 100 else None
        return {
            "bench": "mc_expand_pause", "system": os.path.basename(binary), "items": items,
            "grown": grown, "hash_power_level": st.get("hash_power_level"),
            "probe_p50_us_before": round(q[49], 1) if q else None,
            "probe_p99_us_before": round(q[98], 1) if q else None,
            "probe_max_us_before": round(max(before), 1) if before else None,
            "probe_max_us_during": round(max(during), 1) if during else None,
            "probe_over_1ms_during": sum(1 for rt in during if rt > 1000),
            "probes_during": len(during),
        }
    finally:
        srv.terminate()
        srv.wait(10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", default=os.path.join("build", "memcached-port", "bin"))
    ap.add_argument("--items", type=int, default=200000)
    args = ap.parse_args()
    if args.items < 100000 or args.items > 5000000:
        ap.error("--items: 100000..5000000 (the table grows at 98,304)")
    rc = 0
    for name in SERVERS:
        path = os.path.join(args.bin_dir, name)
        if not os.access(path, os.X_OK):
            print(f"mc_expand_pause: {path} not built; skipped", file=sys.stderr)
            continue
        row = measure(path, args.items)
        print(json.dumps(row), flush=True)
        if not row["grown"]:
            print(f"mc_expand_pause: {name}: the table did not grow", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
