"""scripts/bench io — loom's I/O path against an epoll loop and pthreads.

Imported by scripts/bench (which owns the command line, the build, the
output directory and the private copy of the binaries); entry point:
run(runner, driver).

One echo server written three ways (apps/bench/io_common.hpp):
  loom     apps/bench/io_loom.cpp: a fibre per connection, loom::io calls;
           one variant per LOOM_* setting under test (below);
  pthread  apps/bench/io_pthread.cpp: a kernel thread per connection,
           blocking system calls;
  preload  that very binary (no loom in it), unmodified, under
           LD_PRELOAD=libloom-pthread.so (issue 11): its threads are fibres
           and its blocking calls loom's;
  epoll    apps/baselines/epoll-echo/epoll_echo.cpp: one thread, one
           edge-triggered epoll loop, non-blocking sockets.
Each run starts one server pinned to CPU 1 (taskset -c 1; loom's default
cluster then has one processor) and the load generator apps/bench/io_client
pinned to CPU 0, on 127.0.0.1, with the open-files limit raised to the hard
limit. Three loads (io_client --mode):
  pingpong  N connections, each: send 64 bytes, wait for the 64-byte echo,
            repeat;
  stream    N connections, each keeps 4 chunks of 16 KiB in flight (writes
            whenever the window has room, reads whatever comes back); one
            "request" = one 16 KiB chunk echoed;
  short     N connections in flight; each: connect, one 64-byte request,
            half-close, read the echo, close (RST); one request = one
            connection.
The client warms up, then measures a window; at the window's edges it
samples the server's CPU (utime + stime of the whole process: /proc/PID/stat,
and the same sum at ns resolution from clock_getcpuclockid, which is the
figure used), its own CPU, the machine's CPU (/proc/stat: others_cpus, the
CPU the rest of the machine took, i.e. how disturbed the run was) and the
server's RSS. server_cpu_us_per_req = server CPU in the window / requests in
the window. After the load the driver asks the server for its counters
("stats" on its stdin: loom's registrations, blocks, polls, events...) and
ends it (EOF on stdin; SIGKILL by pid after 3 s).

Variants of loom: the io_uring back end (LOOM_IO=uring) on every load,
every poller (LOOM_POLLER) and yield-before-read off
(LOOM_YIELD_BEFORE_READ) on pingpong and stream; lazy registration off
(LOOM_LAZY_REGISTER) on short connections. Each configuration's variant is
what the server itself reports (io_loom names every setting that differs
from the default; the default is ""), probed before the runs: two
configurations that turn out the same (e.g. LOOM_POLLER set to the default
poller) are run once.

Every configuration runs once per round, in an order that rotates from round
to round; a row's figures are the medians over the rounds. A run during
whose window the rest of the machine took more than DISTURBED CPUs is
repeated (bounded), keeping the least disturbed attempt.
"""

import datetime
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import label, proc_rss_kib, raise_nofile, spread

# ---- settings ----------------------------------------------------------------

SERVER_CPUS, CLIENT_CPUS = "1", "0"
CLIENT = "io_client"

POLLERS = ["idle", "fibre", "loop", "loop-sleep", "opportunistic", "opportunistic-timeout"]

# (system, binary, environment overrides, benches it runs in)
PERSISTENT = ("pingpong", "stream")
CONFIGS = (
    [("loom", "io_loom", {}, PERSISTENT + ("short",))]
    + [("loom", "io_loom", {"LOOM_POLLER": p}, PERSISTENT) for p in POLLERS]
    + [("loom", "io_loom", {"LOOM_IO": "uring"}, PERSISTENT + ("short",)),
       ("loom", "io_loom", {"LOOM_YIELD_BEFORE_READ": "off"}, PERSISTENT),
       ("loom", "io_loom", {"LOOM_LAZY_REGISTER": "off"}, ("short",)),
       ("loom", "io_loom", {"LOOM_LAZY_REGISTER": "on"}, ("short",)),
       ("pthread", "io_pthread", {}, PERSISTENT + ("short",)),
       ("preload", "io_pthread", {"LD_PRELOAD": "@libloom-pthread.so"}, PERSISTENT + ("short",)),
       ("epoll", "epoll_echo", {}, PERSISTENT + ("short",))]
)
SERVERS = ["io_loom", "io_pthread", "epoll_echo"]
IO_VARS = ("LOOM_POLLER", "LOOM_YIELD_BEFORE_READ", "LOOM_LAZY_REGISTER", "LOOM_IO")

BENCHES = ["pingpong", "stream", "short"]
FULL = dict(rounds=3, warmup=1.0, duration=3.0, retries=30,
            connections={"pingpong": [10, 100, 1000], "stream": [10, 100, 1000], "short": [10, 100]})
QUICK = dict(rounds=1, warmup=0.3, duration=1.0, retries=4,
             connections={"pingpong": [10, 100, 1000], "stream": [100], "short": [100]})
GOAL_CONNECTIONS = 1000
CPU_GOAL = 1.10   # loom default / epoll, server CPU per request, pingpong at 1000 connections: at most
LAZY_GOAL = 1.3   # lazy / eager registration, requests/s on short connections: at least
PRELOAD_CPU_GOAL = 1.10  # preload / loom, server CPU per request, pingpong at 1000: at most (issue 11)
PRELOAD_EFFICIENCY_GOAL = 1.5  # pthread / preload (same binary), server CPU per request: at least
DISTURBED = 0.25  # others_cpus above which a run is repeated
MAX_ATTEMPTS = 3

# Keys of the client's row kept as they are (medians over the rounds for the
# metrics in MEDIAN_KEYS).
MEDIAN_KEYS = ("requests_per_s", "server_cpu_us_per_req", "client_cpu_us_per_req", "server_cpu_util",
               "client_cpu_util", "latency_p50_us", "latency_p99_us", "latency_p999_us", "bytes_per_s",
               "others_cpus", "server_rss_kib", "rss_per_connection_kib")


# ---- processes -------------------------------------------------------------------


def read_line(proc, timeout):
    """One line of proc's stdout within timeout seconds, or None."""
    fd = proc.stdout.fileno()
    buf = getattr(proc, "_linebuf", b"")
    deadline = time.time() + timeout
    while b"\n" not in buf:
        left = deadline - time.time()
        if left <= 0:
            proc._linebuf = buf
            return None
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            proc._linebuf = buf
            return None
        buf += chunk
    line, buf = buf.split(b"\n", 1)
    proc._linebuf = buf
    return line.decode(errors="replace")


class Server:
    """One echo server pinned to SERVER_CPUS; the protocol of io_common.hpp."""

    def __init__(self, runner, binary, env_over):
        self.binary = binary
        self.error = None
        self.info = None
        path = runner.binary(binary)
        if path is None:
            self.error = f"{binary}: no binary under {runner.bin_dir or 'build/'}"
            return
        env = dict(os.environ)
        for k in IO_VARS:
            env.pop(k, None)
        for k, v in env_over.items():
            # "@name": a library of the build (the private copy's), e.g. the preload.
            if v.startswith("@"):
                lib = runner.library(v[1:])
                if not lib:
                    self.error = f"{binary}: no {v[1:]} to {k} (build)"
                    return
                v = lib
            env[k] = v
        if runner.snapshot:
            env["LD_LIBRARY_PATH"] = runner.snapshot + (":" + env["LD_LIBRARY_PATH"]
                                                        if env.get("LD_LIBRARY_PATH") else "")
        self.cmd = ["taskset", "-c", SERVER_CPUS, path, "--port", "0"]
        self.shown = " ".join(f"{k}={v}" for k, v in env_over.items()) + (" " if env_over else "") + \
            " ".join(self.cmd)
        self.stderr = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     env=env, preexec_fn=raise_nofile)
        line = read_line(self.proc, 10)
        try:
            self.info = json.loads(line) if line else None
        except json.JSONDecodeError:
            self.info = None
        if not self.info or "listening" not in self.info:
            self.error = f"{binary}: no 'listening' line within 10 s: {self.shown}" + self.err_tail()
            self.stop()

    def err_tail(self):
        try:
            self.stderr.seek(0)
            s = self.stderr.read().strip()
            return f"\n    stderr: {s[-1500:]}" if s else ""
        except (OSError, ValueError):
            return ""

    def stats(self):
        try:
            self.proc.stdin.write(b"stats\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        line = read_line(self.proc, 3)
        try:
            return json.loads(line) if line else None
        except json.JSONDecodeError:
            return None

    def stop(self):
        """EOF on stdin ends the server; SIGKILL (by pid, our own child) after 3 s. Returns its exit status."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            rc = self.proc.wait(3)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait()
            rc = "killed after 3 s without exiting on EOF"
        self.proc.stdout.close()
        self.stderr.close()
        return rc


def one_run(runner, drv, cfg, bench, conns, s):
    """Server + client once; returns the row or None (the failure recorded)."""
    system, binary, env_over, _ = cfg
    srv = Server(runner, binary, env_over)
    if srv.error:
        runner.failures.append(srv.error)
        return None
    pid, port = srv.info["pid"], srv.info["listening"]
    rss_idle = proc_rss_kib(pid)
    client = runner.binary(CLIENT)
    cmd = ["taskset", "-c", CLIENT_CPUS, client, "--port", str(port), "--mode", bench, "--connections", str(conns),
           "--warmup", str(s["warmup"]), "--duration", str(s["duration"]), "--server-pid", str(pid)]
    env = dict(os.environ)
    if runner.snapshot:
        env["LD_LIBRARY_PATH"] = runner.snapshot + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    timeout = s["warmup"] + s["duration"] + 30
    before = drv.cpu_ticks()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout, env=env,
                           preexec_fn=raise_nofile)
    except subprocess.TimeoutExpired:
        srv.stop()
        runner.failures.append(f"io_client: no result after {timeout:.0f} s, killed (hang?): {' '.join(cmd)} "
                               f"against {srv.shown}")
        return None
    after = drv.cpu_ticks()
    stats = srv.stats()
    err = srv.err_tail()
    rc = srv.stop()
    row = None
    for line in r.stdout.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            pass
    if row is None or r.returncode != 0:
        runner.failures.append(f"io_client exit {r.returncode} against {srv.shown}: {' '.join(cmd)}\n"
                               f"    client stderr: {r.stderr.strip()[-800:]}" + err
                               + (f"\n    client row: {json.dumps(row)}" if row else ""))
        return None
    if rc not in (0, None):
        runner.failures.append(f"{binary} ended with {rc} after the run: {srv.shown}{err}")
    # A preloaded binary reports what it was built as (pthread): the row is the preload's.
    out = {"bench": bench, "system": system if "LD_PRELOAD" in env_over else srv.info.get("system", system),
           "variant": srv.info.get("variant", ""),
           "connections": conns}
    out.update({k: v for k, v in row.items() if k not in ("mode",)})
    out["server_rss_idle_kib"] = rss_idle
    if rss_idle is not None and row.get("server_rss_kib") is not None and bench != "short":
        out["rss_per_connection_kib"] = round((row["server_rss_kib"] - rss_idle) / conns, 2)
    if stats:
        out["server_stats"] = stats
        if bench == "short" and stats.get("accepted"):
            for k in ("registrations", "blocks"):
                if k in stats:
                    out[f"server_{k}_per_connection"] = round(stats[k] / stats["accepted"], 3)
    if before and after and after[1] > before[1]:
        out["steal_pct"] = round(100.0 * (after[0] - before[0]) / (after[1] - before[1]), 1)
    out["server_command"] = srv.shown
    return out


def probe_variants(runner, configs):
    """Starts each loom configuration's server once to learn the variant it reports."""
    seen, kept = {}, []
    for cfg in configs:
        system, binary, env_over, benches = cfg
        if binary != "io_loom":
            kept.append((cfg, ""))
            continue
        srv = Server(runner, binary, env_over)
        if srv.error:
            runner.failures.append(srv.error)
            continue
        variant = srv.info.get("variant", "")
        srv.stop()
        if variant in seen:
            # Same configuration as an earlier one: run it once, in the union of their benches.
            i = seen[variant]
            old, v = kept[i]
            kept[i] = ((old[0], old[1], old[2], tuple(dict.fromkeys(old[3] + benches))), v)
            continue
        seen[variant] = len(kept)
        kept.append((cfg, variant))
    return kept


# ---- the plot --------------------------------------------------------------------


def plot(out_dir, rows, drv, started):
    if not shutil.which("gnuplot"):
        print(f"{drv.PROG}: gnuplot not found; no plot (scripts/deps.sh bench installs it)", file=sys.stderr)
        return None
    png = os.path.join(out_dir, "io.png")
    keys = list(dict.fromkeys((r["system"], r["variant"]) for r in rows))
    blocks, panels = [], []
    for bench, title in (("pingpong", "pingpong (64-byte request/response)"),
                         ("stream", "stream (16 KiB chunks, 4 in flight per connection)")):
        plots = []
        for i, (system, variant) in enumerate(keys):
            pts = sorted((r["connections"], r["server_cpu_us_per_req"]) for r in rows
                         if r["bench"] == bench and r["system"] == system and r["variant"] == variant
                         and r.get("server_cpu_us_per_req") is not None)
            if len(pts) < 1:
                continue
            name = f"{bench}{i}"
            blocks.append(f"${name} << EOD\n" + "".join(f"{c} {v:.4f}\n" for c, v in pts) + "EOD\n")
            plots.append(f"${name} using 1:2 with linespoints lw 2 lc {i + 1} dt {1 if system == 'loom' else 2} pt {5 + i % 9} "
                         f"title '{label(system, variant)}'")
        if plots:
            panels.append(f"set title '{title}'\nplot {', '.join(plots)}\n")
    if not panels:
        return None
    script = "".join(blocks) + f"""
set terminal pngcairo size 1300,560 font ',10'
set output '{png}'
set multiplot layout 1,{len(panels)} title "loom I/O: echo server CPU per request (server on CPU 1, client on CPU 0), lower is better\\n{drv.MACHINE}, {started}"
set logscale x
set xlabel 'connections'
set ylabel 'server CPU µs per request'
set yrange [0:*]
set grid
set key top left font ',8'
""" + "".join(panels) + "unset multiplot\n"
    return png if drv.run_gnuplot(script) else None


# ---- the benchmark -------------------------------------------------------------


def median_row(rows):
    row = dict(min(rows, key=lambda r: r.get("others_cpus") or 0))
    for k in MEDIAN_KEYS:
        vals = [r[k] for r in rows if r.get(k) is not None]
        if vals:
            row[k] = statistics.median(vals)
    row["rounds"] = len(rows)
    row["round_requests_per_s"] = [r["requests_per_s"] for r in rows]
    row["round_server_cpu_us_per_req"] = [r.get("server_cpu_us_per_req") for r in rows]
    row["round_others_cpus"] = [r.get("others_cpus") for r in rows]
    row["round_saturated"] = [r.get("saturated") for r in rows]
    row["round_steal_pct"] = [r.get("steal_pct") for r in rows]
    row.pop("steal_pct", None)
    vals = [v for v in row["round_server_cpu_us_per_req"] if v is not None]
    row["spread_pct"] = round(spread(vals), 2) if vals else None
    row["attempts"] = sum(r.get("attempts", 1) for r in rows)
    return row


def cell(r, rounds):
    """A table cell: requests/s | server CPU µs per request [± half the range over the rounds] | saturated side."""
    if r is None:
        return "-"
    cpu = r.get("server_cpu_us_per_req")
    if cpu is None:
        return f"{r['requests_per_s']:,.0f}"
    pm = f" ±{r['spread_pct']:.0f}%" if rounds > 1 and r.get("spread_pct") is not None else ""
    sat = {"server": "S", "client": "C", "both": "B", "neither": "-"}.get(r.get("saturated"), "?")
    return f"{r['requests_per_s']:>10,.0f} | {cpu:6.2f}{pm:<5} | {sat}"


def run(runner, drv):
    s = QUICK if runner.quick else FULL
    rounds = runner.rounds or s["rounds"]
    t_start = time.time()
    if not runner.build(SERVERS + [CLIENT]):
        return
    for b in SERVERS + [CLIENT]:
        if runner.binary(b) is None:
            runner.failures.append(f"io: {b} was not built")
    if runner.binary(CLIENT) is None:
        return
    raise_nofile()
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    load_before = drv.loadavg()

    configs = [c for c in CONFIGS if runner.binary(c[1]) is not None]
    configs = probe_variants(runner, configs)
    todo = []  # (bench, connections, cfg, variant)
    for bench in BENCHES:
        for n in s["connections"][bench]:
            for cfg, variant in configs:
                if bench in cfg[3]:
                    todo.append((bench, n, cfg, variant))
    print(f"io: {rounds} round(s) of {len(todo)} runs ({', '.join(BENCHES)}; "
          f"{len(configs)} server configurations); server on CPU {SERVER_CPUS}, client on CPU {CLIENT_CPUS}; "
          f"warm-up {s['warmup']:g} s, window {s['duration']:g} s", flush=True)

    retries = {"left": s["retries"], "used": 0}
    results = {}  # (bench, system, variant, connections) -> [row per round]
    k = len(configs) + 1
    for rnd in range(rounds):
        for bench, n, cfg, variant in drv.rotated(todo, rnd * k):
            t0 = time.time()
            best, attempts = None, 0
            while True:
                row = one_run(runner, drv, cfg, bench, n, s)
                attempts += 1
                if row is None:
                    break
                if best is None or (row.get("others_cpus") or 0) < (best.get("others_cpus") or 0):
                    best = row
                if (best.get("others_cpus") or 0) <= DISTURBED or attempts >= MAX_ATTEMPTS or retries["left"] <= 0:
                    break
                retries["left"] -= 1
                retries["used"] += 1
            if best:
                best["attempts"] = attempts
                if best["variant"] != variant:
                    runner.failures.append(f"{cfg[1]} reported variant '{best['variant']}' in a run, "
                                           f"'{variant}' when probed")
                results.setdefault((bench, best["system"], best["variant"], n), []).append(best)
                shown = (f"{best['requests_per_s']:>11,.0f} req/s, server {best.get('server_cpu_us_per_req', 0):6.2f} "
                         f"µs/req, saturated: {best.get('saturated', '?'):<7} others {best.get('others_cpus', 0):.2f}"
                         + (f", {attempts} attempts" if attempts > 1 else ""))
            else:
                shown = "FAILED"
            print(f"  round {rnd + 1}/{rounds}  {bench:<8} N={n:<5} {label(cfg[0], variant):<42} {shown} "
                  f"({time.time() - t0:.1f} s)", flush=True)

    common = drv.common_fields(runner, "io", started, load_before)
    out = []
    by = {}
    for key, rows in results.items():
        row = median_row(rows)
        row.update(common)
        by[key] = row
    order = [(b, cfg[0], v) for b in BENCHES for cfg, v in configs if b in cfg[3]]

    def get(bench, system, variant, n):
        return by.get((bench, system, variant, n))

    # The goal ratios, kept in the rows they are about.
    goal_lines = []
    lo, ep = get("pingpong", "loom", "", GOAL_CONNECTIONS), get("pingpong", "epoll", "", GOAL_CONNECTIONS)
    cpu_ratio = None
    if lo and ep and lo.get("server_cpu_us_per_req") and ep.get("server_cpu_us_per_req"):
        cpu_ratio = lo["server_cpu_us_per_req"] / ep["server_cpu_us_per_req"]
        lo.setdefault("ratios", {})["server_cpu_per_req_vs_epoll"] = round(cpu_ratio, 4)
        lo.setdefault("goals", {})["server_cpu_per_req_vs_epoll"] = CPU_GOAL
    goal_lines.append(("loom / epoll, server CPU per request, pingpong N=%d" % GOAL_CONNECTIONS, cpu_ratio,
                       f"<= {CPU_GOAL}", cpu_ratio is not None and cpu_ratio <= CPU_GOAL))
    pre, pt = get("pingpong", "preload", "", GOAL_CONNECTIONS), get("pingpong", "pthread", "", GOAL_CONNECTIONS)
    for name, a, b, target, higher in (
            ("preload / loom, server CPU per request, pingpong N=%d" % GOAL_CONNECTIONS, pre, lo, PRELOAD_CPU_GOAL, False),
            ("pthread / preload (same binary), server CPU per request, pingpong N=%d" % GOAL_CONNECTIONS, pt, pre,
             PRELOAD_EFFICIENCY_GOAL, True)):
        r = None
        if a and b and a.get("server_cpu_us_per_req") and b.get("server_cpu_us_per_req"):
            r = a["server_cpu_us_per_req"] / b["server_cpu_us_per_req"]
        goal_lines.append((name, r, f"{'>=' if higher else '<='} {target}",
                           r is not None and (r >= target if higher else r <= target)))
    short_n = max(s["connections"]["short"])
    lazy = get("short", "loom", "", short_n)
    eager = next((get("short", "loom", v, short_n) for _, v in configs if "lazy_register=off" in v), None)
    lazy_ratio = lazy_cpu = None
    if lazy and eager:
        lazy_ratio = lazy["requests_per_s"] / eager["requests_per_s"]
        if lazy.get("server_cpu_us_per_req") and eager.get("server_cpu_us_per_req"):
            lazy_cpu = eager["server_cpu_us_per_req"] / lazy["server_cpu_us_per_req"]
        lazy.setdefault("ratios", {})["requests_per_s_vs_eager_registration"] = round(lazy_ratio, 4)
        lazy.setdefault("goals", {})["requests_per_s_vs_eager_registration"] = LAZY_GOAL
        if lazy_cpu:
            lazy["ratios"]["eager_over_lazy_server_cpu_per_req"] = round(lazy_cpu, 4)
    goal_lines.append((f"lazy / eager registration, requests/s, short N={short_n}", lazy_ratio, f">= {LAZY_GOAL}",
                       lazy_ratio is not None and lazy_ratio >= LAZY_GOAL))

    for b, system, v in order:
        for n in s["connections"][b]:
            if (b, system, v, n) in by:
                out.append(by[(b, system, v, n)])
    path = runner.write("io", out)
    png = plot(runner.out_dir, out, drv, started)

    # ---- the tables ----
    for bench, what in (("pingpong", "64-byte request/response"),
                        ("stream", "16 KiB chunks, 4 in flight per connection; a request = a chunk echoed"),
                        ("short", "one 64-byte request per connection; N connections in flight")):
        ns = s["connections"][bench]
        print()
        print(f"io {bench} — {what}: requests/s | server CPU µs per request (median of {rounds} round(s)) "
              f"| saturated side")
        print(f"  {'system [variant]':<44}" + "".join(f"{'N=' + str(n):>30}" for n in ns))
        for b, system, v in order:
            if b != bench:
                continue
            cells = [cell(by.get((bench, system, v, n)), rounds) for n in ns]
            print(f"  {label(system, v):<44}" + "".join(f"{c:>30}" for c in cells))
        if bench == "short":
            for b, system, v in order:
                if b == "short" and system == "loom":
                    r = by.get(("short", system, v, short_n))
                    if r and "server_registrations_per_connection" in r:
                        print(f"    {label(system, v)}: epoll registrations per connection "
                              f"{r['server_registrations_per_connection']:.2f}, readiness waits per connection "
                              f"{r.get('server_blocks_per_connection', float('nan')):.2f} (over the server's life)")
    print("  saturated: S server (≥ 90 % of CPU 1), C client (≥ 90 % of CPU 0), B both, - neither "
          "(a poller that spins shows S whatever the load)")

    mem = [(label(system, v), by.get(("pingpong", system, v, GOAL_CONNECTIONS)))
           for b, system, v in order if b == "pingpong"]
    mem = [(l, r) for l, r in mem if r and r.get("rss_per_connection_kib") is not None]
    if mem:
        print()
        print(f"memory — server RSS at the end of the pingpong window with {GOAL_CONNECTIONS} connections: "
              f"KiB per connection (total KiB)")
        for l, r in mem:
            print(f"  {l:<44}{r['rss_per_connection_kib']:>10.1f}  ({r['server_rss_kib']:,.0f})")

    print()
    print(f"  {'ratio':<60}{'measured':>10}{'goal':>10}")
    for name, ratio, goal, met in goal_lines:
        if ratio is None:
            print(f"  {name:<60}{'-':>10}{goal:>10}   (not measured)")
        else:
            print(f"  {name:<60}{ratio:>10.3f}{goal:>10}   {'met' if met else 'NOT met'}")
    if lazy_cpu:
        print(f"  {'eager / lazy registration, server CPU per request, short N=' + str(short_n):<60}"
              f"{lazy_cpu:>10.3f}{'':>10}   (no goal)")
    for peer in ("pthread",):
        p = get("pingpong", peer, "", GOAL_CONNECTIONS)
        if lo and p and lo.get("server_cpu_us_per_req") and p.get("server_cpu_us_per_req"):
            print(f"  {'loom / ' + peer + ', server CPU per request, pingpong N=' + str(GOAL_CONNECTIONS):<60}"
                  f"{lo['server_cpu_us_per_req'] / p['server_cpu_us_per_req']:>10.3f}{'':>10}   (no goal)")
    all_rows = [r for rows in results.values() for r in rows]
    if all_rows:
        others = [r.get("others_cpus") or 0 for r in all_rows]
        disturbed = sum(1 for o in others if o > DISTURBED)
        print(f"  other processes' CPU during the windows: median {statistics.median(others):.2f}, max "
              f"{max(others):.2f} CPUs; {retries['used']} run(s) repeated for it; {disturbed} of {len(all_rows)} "
              f"kept runs still above {DISTURBED} CPUs")
    try:
        print(f"  {drv.steal_summary(list(results.values()))}")
    except Exception:  # the driver's helper changed shape: not worth failing the run
        pass
    print(f"  load average before {common['loadavg_before']}, after {common['loadavg_after']}; "
          f"io benchmark took {time.time() - t_start:.0f} s")
    print(f"wrote {path}" + (f" and {png}" if png else ""))
