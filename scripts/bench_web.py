"""scripts/bench web — the web server against an epoll loop, nginx, Go and pthreads.

Imported by scripts/bench (which owns the command line, the build, the output
directory and the private copy of the binaries); entry point:
run(runner, driver).

The thesis's §4.5.3 experiment (figures 4.7-4.9) on this machine: wrk
(Debian) -t1 --latency against the plaintext route ("Hello, World!", the
same headers from every server), keep-alive and short connections
(-H "Connection: close"), at 100, 1,000 and 10,000 connections. Systems, all
in the same run:

  loom     apps/webserver --runtime=loom: a fibre per connection; the
           variant "loom uring" is the same server on loom's io_uring back
           end (LOOM_IO=uring; a run that fell back to epoll is a failure)
           "loom no-rest" and "loom no-rest uring": the same with --no-rest
           (the default rests: a connection's fibre starts at rest and gives
           its stack back between requests, loom::io::rest; issue 23)
  events   the same binary, --runtime=events: the same HTTP code as colored
           events, one color per connection (issue 12; compared with loom,
           the fibre server, in its own table: events / loom)
  pthread  apps/webserver's webserver-pthread (--runtime=pthread): the same
           server built with nothing of loom in it, a kernel thread per
           connection on glibc
  preload  that very binary, unmodified, under LD_PRELOAD=libloom-pthread.so
           (issue 11): its threads are fibres, its blocking calls loom's
  epoll    apps/baselines/epoll-web: an edge-triggered epoll loop per thread
  nginx    Debian's nginx with a generated minimal config (return 200,
           access log off, keepalive_requests high, 127.0.0.1 only)
  go       apps/baselines/go-web: Go net/http (Debian golang-go), built here

Narrower runs (environment): WEB_ONLY="loom,loom [no-rest],epoll" (row labels),
WEB_MODES=keepalive,close, WEB_CONNECTIONS=1000,10000, WEB_PROCESSORS=1,
WEB_DURATION=SECONDS.

Placement. 1-processor rows: the server on CPU 1 (taskset -c 1; loom 1
processor, epoll 1 loop, nginx 1 worker, GOMAXPROCS=1), wrk on CPU 0.
2-processor rows (full run only): the server on CPUs 0,1 with 2
processors/loops/workers/GOMAXPROCS=2, and wrk also on CPUs 0,1 — this box
has 2 CPUs, so the server shares them with its load generator and the row
shows how well it uses what wrk leaves, not scaling. loom's 2-processor rows
also have a 2-cluster variant (--cluster-size 1: a listening socket and an
acceptor per cluster).

One run: start the server, read its idle RSS, warm up (wrk for WARMUP s),
then measure (wrk -d DURATION). Server CPU = utime + stime of every server
process (/proc/PID/stat; nginx: master and workers) over the measured wrk
run; server_cpu_us_per_req = that / wrk's request count; bound = "server" if
the server used at least 90 % of its CPUs in that window, else "client"
(wrk, one thread, saturates near the fastest servers' rate here). RSS under
load is the highest VmRSS (all server processes) sampled during the
measured run; rss_kib_per_conn = (that - idle RSS) / connections.
others_cpus is the CPU the rest of the machine took meanwhile (/proc/stat
less the server's and wrk's own); a run above DISTURBED is repeated
(bounded), keeping the least disturbed attempt.
"""

import datetime
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import free_port, label, proc_rss_kib, raise_nofile, wait_port

# ---- settings ----------------------------------------------------------------

SYSTEMS = ["loom", "events", "pthread", "preload", "epoll", "nginx", "go"]
BINARIES = ["webserver", "webserver-pthread", "epoll-web"]
PRELOAD_LIB = "libloom-pthread.so"
PRELOAD_CPU_GOAL = 1.10  # preload / loom, server CPU per request (issue 11)
PRELOAD_EFFICIENCY_GOAL = 1.5  # preload / the same binary on glibc, requests per server CPU s
GO_BINARY = "go-web"
GO_SOURCE = os.path.join("apps", "baselines", "go-web")
PLACEMENT = {1: ("1", "0"), 2: ("0,1", "0,1")}  # processors -> (server CPUs, wrk CPUs)
CONNECTIONS = [100, 1000, 10000]
MODES = ["keepalive", "close"]  # the jsonl's `bench`
FULL = dict(warmup=1, duration=10, rounds=1, processors=[1, 2], retries=12,
            points={"keepalive": CONNECTIONS, "close": CONNECTIONS})
# --quick (make demo): under a minute — the ends of the keep-alive range and
# one short-connection point, 1 processor only.
QUICK = dict(warmup=1, duration=2, rounds=1, processors=[1], retries=1,
             points={"keepalive": [100, 10000], "close": [1000]})
DISTURBED = 0.3  # others_cpus above which a run is repeated
MAX_ATTEMPTS = 2
SERVER_BOUND = 0.9  # share of its CPUs above which the server is the bottleneck
RSS_GOAL_KIB = 8.0
URING_ARGS = ["env:LOOM_IO=uring"]  # loom's io_uring back end (issue 14), a variant of loom
NOREST_ARGS = ["--no-rest"]  # loom: blocking reads, no rest (the default rests: issue 23)
URING_CPU_GOAL = 0.90  # loom on io_uring / the epoll loop, keep-alive at 1,000 and 10,000
EVENTS_CPU_GOAL = 1.10  # events / loom, server CPU per request (issue 12)
EVENTS_CPU_GOAL_22 = 1.00  # the same, issue 22's goal: colors cost no more than fibres

HZ = os.sysconf("SC_CLK_TCK")


# ---- processes -------------------------------------------------------------------


def proc_cpu_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    except (OSError, ValueError, IndexError):
        return None


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def machine_busy_ticks():
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[0] + v[1] + v[2] + v[5] + v[6] + v[7], sum(v[:8])  # busy (incl. steal), total
    except (OSError, ValueError, IndexError):
        return None






NGINX_CONF = """worker_processes {workers};
daemon off;
master_process on;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
worker_rlimit_nofile {nofile};
events {{
    worker_connections {nofile};
}}
http {{
    access_log off;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 1000000000;
    keepalive_timeout 120s;
    server {{
        listen 127.0.0.1:{port} backlog=4096{deferred};
        location / {{
            default_type text/plain;
            return 200 "Hello, World!";
        }}
    }}
}}
"""


class Server:
    """One server of `system` on `cpus` with `processors` processors/loops/workers."""

    def __init__(self, runner, system, variant_args, processors, cpus):
        self.error, self.proc, self.port, self.tmp = None, None, None, None
        self.stderr = tempfile.TemporaryFile("w+")
        env = dict(os.environ)
        if runner.snapshot:
            env["LD_LIBRARY_PATH"] = runner.snapshot + (":" + env["LD_LIBRARY_PATH"]
                                                        if env.get("LD_LIBRARY_PATH") else "")
        # loom's own variables would change what "loom" means here.
        for k in [k for k in env if k.startswith("LOOM_")]:
            env.pop(k)
        # A variant's environment ("env:NAME=VALUE" arguments): the io_uring back end.
        wants = [a[4:] for a in variant_args if a.startswith("env:")]
        variant_args = [a for a in variant_args if not a.startswith("env:")]
        for kv in wants:
            k, v = kv.split("=", 1)
            env[k] = v
        if system in ("pthread", "preload"):
            path = runner.binary("webserver-pthread")
            cmd = [path, "--runtime", "pthread", "--port", "0"] + variant_args
            if system == "preload":
                lib = runner.library(PRELOAD_LIB)
                if not lib:
                    self.error = f"preload: no {PRELOAD_LIB} (build)"
                    return
                env["LD_PRELOAD"] = lib
        elif system in ("loom", "events"):
            path = runner.binary("webserver")
            cmd = [path, "--runtime", system, "--port", "0", "--processors", str(processors)] + variant_args
        elif system == "epoll":
            path = runner.binary("epoll-web")
            cmd = [path, "--threads", str(processors), "--port", "0"] + variant_args
        elif system == "go":
            path = runner.binary(GO_BINARY)
            cmd = [path, "-port", "0"] + variant_args
            env["GOMAXPROCS"] = str(processors)
        elif system == "nginx":
            path = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
            self.tmp = tempfile.mkdtemp(prefix="loom-bench-nginx-")
            self.port = free_port()
            nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            with open(os.path.join(self.tmp, "nginx.conf"), "w") as f:
                f.write(NGINX_CONF.format(workers=processors, tmp=self.tmp, port=self.port,
                                          deferred=" deferred" if "deferred" in variant_args else "",
                                          nofile=min(nofile, 65536)))
            cmd = [path, "-p", self.tmp, "-c", os.path.join(self.tmp, "nginx.conf"), "-e",
                   os.path.join(self.tmp, "error.log")] if path else None
        else:
            cmd = None
        if not cmd or not cmd[0]:
            self.error = f"{system}: no binary (build, or scripts/deps.sh bench)"
            return
        self.cmd = ["taskset", "-c", cpus] + cmd
        self.shown = (f"GOMAXPROCS={processors} " if system == "go" else "") + " ".join(self.cmd)
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self.stderr, env=env,
                                     preexec_fn=raise_nofile)
        if system == "nginx":
            if not wait_port(self.port, 10):
                self.error = f"nginx did not listen on {self.port} within 10 s: {self.shown}{self.err_tail()}"
                self.stop()
                return
            # The workers are the master's children, started right after it listens.
            end = time.time() + 5
            while len(children(self.proc.pid)) < processors and time.time() < end:
                time.sleep(0.05)
        else:
            line = self.read_line(10)
            m = re.search(r"listening on http://[^ ]*:(\d+)/", line or "")
            if not m:
                self.error = f"{system}: no listening line within 10 s ({line!r}): {self.shown}{self.err_tail()}"
                self.stop()
                return
            self.port = int(m.group(1))
            if "LOOM_IO=uring" in wants and " io=uring " not in line:
                # loom fell back to epoll: this is not an io_uring row.
                self.error = f"{system}: io_uring unavailable, loom fell back to epoll: {line.strip()}{self.err_tail()}"
                self.stop()

    def read_line(self, timeout):
        fd = self.proc.stdout.fileno()
        buf = b""
        end = time.time() + timeout
        while b"\n" not in buf and time.time() < end:
            r, _, _ = select.select([fd], [], [], max(0.0, end - time.time()))
            if not r:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
        return buf.split(b"\n", 1)[0].decode(errors="replace") if buf else None

    def pids(self):
        return [self.proc.pid] + children(self.proc.pid)

    def cpu_ticks(self):
        vals = [proc_cpu_ticks(p) for p in self.pids()]
        return sum(v for v in vals if v is not None)

    def rss_kib(self):
        vals = [proc_rss_kib(p) for p in self.pids()]
        return sum(v for v in vals if v is not None)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def err_tail(self):
        try:
            self.stderr.seek(0)
            s = self.stderr.read().strip()
            return f"\n    stderr: {s[-1500:]}" if s else ""
        except (OSError, ValueError):
            return ""

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            # Our own child, by pid. nginx's master ends its workers on SIGTERM.
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc is not None:
            self.proc.stdout.close()
        self.stderr.close()
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


# ---- wrk -------------------------------------------------------------------------

UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6, "m": 60e6}


def parse_wrk(out):
    """wrk's text output -> dict (None values where wrk printed nothing)."""
    r = {}
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", out)
    r["requests"] = int(m.group(1)) if m else None
    r["wrk_seconds"] = float(m.group(2)) * UNITS[m.group(3)] / 1e6 if m else None
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    r["requests_per_s"] = float(m.group(1)) if m else None
    for pct, key in (("50", "p50_us"), ("99", "p99_us")):
        m = re.search(rf"^\s+{pct}(?:\.0+)?%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M)
        r[key] = round(float(m.group(1)) * UNITS[m.group(2)], 1) if m else None
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    sock = [int(x) for x in m.groups()] if m else [0, 0, 0, 0]
    r["socket_errors"] = dict(zip(("connect", "read", "write", "timeout"), sock))
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    r["non_2xx"] = int(m.group(1)) if m else 0
    r["errors"] = sum(sock) + r["non_2xx"]
    return r


def wrk_cmd(port, conns, seconds, mode, cpus):
    cmd = ["taskset", "-c", cpus, "wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency", "--timeout", "5s"]
    if mode == "close":
        cmd += ["-H", "Connection: close"]
    return cmd + [f"http://127.0.0.1:{port}/plaintext"]


def one_run(runner, drv, system, variant, vargs, mode, conns, processors, s):
    """One server, warmed up and measured once; the row, or None (failure recorded)."""
    server_cpus, wrk_cpus = PLACEMENT[processors]
    srv = Server(runner, system, vargs, processors, server_cpus)
    if srv.error:
        runner.failures.append(srv.error)
        srv.stop()
        return None
    try:
        time.sleep(0.1)
        rss_idle = srv.rss_kib()
        w = subprocess.run(wrk_cmd(srv.port, conns, s["warmup"], mode, wrk_cpus), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=s["warmup"] + 60, preexec_fn=raise_nofile)
        if w.returncode != 0 or not srv.alive():
            runner.failures.append(f"web: warm-up of {label(system, variant)} failed (wrk exit {w.returncode}"
                                   f"{', server gone' if not srv.alive() else ''}): "
                                   f"{(w.stdout + w.stderr).strip()[-300:]}"
                                   f"{srv.err_tail()}")
            return None
        time.sleep(0.1)  # the warm-up's connections close
        cmd = wrk_cmd(srv.port, conns, s["duration"], mode, wrk_cpus)
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        m0, c0, t0 = machine_busy_ticks(), srv.cpu_ticks(), time.time()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=raise_nofile)
        rss_max, deadline = rss_idle, t0 + s["duration"] + 60
        while p.poll() is None and time.time() < deadline:
            time.sleep(0.25)
            if time.time() - t0 > 0.5:  # past the connection ramp
                rss_max = max(rss_max, srv.rss_kib())
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            runner.failures.append(f"web: wrk did not finish: {' '.join(cmd)}")
            return None
        c1, m1, t1 = srv.cpu_ticks(), machine_busy_ticks(), time.time()
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        out, err = p.communicate()
        alive = srv.alive()
    finally:
        srv.stop()
    res = parse_wrk(out)
    # A server that is alive but completed no request in the window (10,000
    # kernel threads on one busy CPU can do that) gets a row that says so.
    starved = p.returncode == 0 and alive and res["requests"] == 0 and res["requests_per_s"] is not None
    if not starved and (p.returncode != 0 or not res["requests"] or not alive):
        runner.failures.append(f"web: {label(system, variant)} {mode} c={conns} P={processors}: wrk exit "
                               f"{p.returncode}, {res['requests']} requests{'' if alive else ', server died'}: "
                               f"{' '.join(cmd)}\n    wrk: {(out + err).strip()[-600:]}")
        return None
    wall = t1 - t0
    server_s = (c1 - c0) / HZ
    wrk_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    others = None
    if m0 and m1 and m1[1] > m0[1]:
        busy_s = (m1[0] - m0[0]) / HZ
        others = round(max(0.0, busy_s - server_s - wrk_s) / wall, 3)
    ncpu = len(server_cpus.split(","))
    util = server_s / (wall * ncpu)
    row = {"bench": mode, "system": system, "variant": variant, "connections": conns, "processors": processors,
           "requests_per_s": res["requests_per_s"], "p50_us": res["p50_us"], "p99_us": res["p99_us"],
           "errors": res["errors"], "socket_errors": res["socket_errors"], "non_2xx": res["non_2xx"],
           "requests": res["requests"],
           "server_cpu_us_per_req": round(server_s * 1e6 / res["requests"], 3) if res["requests"] else None,
           "client_cpu_us_per_req": round(wrk_s * 1e6 / res["requests"], 3) if res["requests"] else None,
           "server_cpu_util": round(util, 3), "rss_kib": rss_max, "rss_idle_kib": rss_idle,
           "rss_kib_per_conn": round((rss_max - rss_idle) / conns, 2),
           "bound": "server" if util >= SERVER_BOUND else "client", "others_cpus": others,
           "server_cpus": server_cpus, "wrk_cpus": wrk_cpus, "server_command": srv.shown,
           "wrk_command": " ".join(cmd)}
    if starved:
        row["note"] = "no request completed in the window"
    return row


# ---- building ----------------------------------------------------------------------


# ---- the plot --------------------------------------------------------------------


def plot(out_dir, rows, drv, started):
    if not shutil.which("gnuplot"):
        print(f"{drv.PROG}: gnuplot not found; no plot (scripts/deps.sh bench installs it)", file=sys.stderr)
        return None
    png = os.path.join(out_dir, "web.png")
    keys = list(dict.fromkeys((r["system"], r["variant"]) for r in rows if r["processors"] == 1))
    blocks, panels = [], []
    for mode, mtitle in (("keepalive", "keep-alive"), ("close", "Connection: close")):
        for metric, ytitle in (("requests_per_s", "requests / s"), ("server_cpu_us_per_req", "server CPU µs / request")):
            plots = []
            for i, (system, variant) in enumerate(keys):
                pts = sorted((r["connections"], r[metric]) for r in rows
                             if r["bench"] == mode and r["processors"] == 1 and r["system"] == system
                             and r["variant"] == variant and r.get(metric) is not None)
                if not pts:
                    continue
                name = f"{mode}_{metric}_{i}"
                blocks.append(f"${name} << EOD\n" + "".join(f"{c} {v:.4f}\n" for c, v in pts) + "EOD\n")
                # One colour per system, one dash pattern per variant.
                colour = SYSTEMS.index(system) + 1 if system in SYSTEMS else 8
                dash = {"": 1, "defer-accept": 2}.get(variant, 3)
                plots.append(f"${name} using 1:2 with linespoints lw 2 lc {colour} dt {dash} pt {5 + i % 9} "
                             f"title '{label(system, variant)}'")
            if plots:
                panels.append(f"set title '{mtitle}: {ytitle}'\nset ylabel '{ytitle}'\nplot {', '.join(plots)}\n")
    if not panels:
        return None
    script = "".join(blocks) + f"""
set terminal pngcairo size 1500,900 font ',10'
set output '{png}'
set multiplot layout 2,2 title "web plaintext: wrk -t1 on CPU 0, server on CPU 1 (1 processor / loop / worker)\\n{drv.MACHINE}, {started}"
set logscale x
set xlabel 'connections'
set xtics ({', '.join(str(c) for c in CONNECTIONS)})
set xrange [70:14000]
set yrange [0:*]
set grid
set key outside right top font ',8'
""" + "".join(panels) + "unset multiplot\n"
    return png if drv.run_gnuplot(script) else None


# ---- the benchmark -------------------------------------------------------------


def median_row(rows):
    row = dict(min(rows, key=lambda r: r.get("others_cpus") or 0))
    for k in ("requests_per_s", "server_cpu_us_per_req", "client_cpu_us_per_req", "p50_us", "p99_us",
              "rss_kib_per_conn", "server_cpu_util"):
        vals = [r[k] for r in rows if r.get(k) is not None]
        if vals:
            row[k] = statistics.median(vals)
    row["rounds"] = len(rows)
    row["round_requests_per_s"] = [r["requests_per_s"] for r in rows]
    row["round_server_cpu_us_per_req"] = [r["server_cpu_us_per_req"] for r in rows]
    row["errors"] = sum(r["errors"] for r in rows)
    return row


# TCP_DEFER_ACCEPT, the same knob for every server (nginx: `listen ...
# deferred`): a connection is accepted once its request is in, so loom's
# first read succeeds and, with lazy registration, a short connection never
# touches epoll. Short connections only, 1 processor, full runs only.
DEFER_ARGS = {"loom": ["--defer-accept"], "events": ["--defer-accept"], "pthread": ["--defer-accept"],
              "preload": ["--defer-accept"],
              "epoll": ["--defer-accept"], "nginx": ["deferred"], "go": ["-defer-accept"]}


def configs(processors_list, quick):
    """(system, variant, extra args, processors, modes) in run order."""
    out = []
    for p in processors_list:
        for system in SYSTEMS:
            out.append((system, "", [], p, MODES))
            if system == "loom":
                out.append((system, "uring", URING_ARGS, p, MODES))
                out.append((system, "no-rest", NOREST_ARGS, p, MODES))
                out.append((system, "no-rest uring", NOREST_ARGS + URING_ARGS, p, MODES))
            if system == "loom" and p > 1:
                out.append((system, "clusters=2", ["--cluster-size", "1"], p, MODES))
    if not quick:
        for system in SYSTEMS:
            out.append((system, "defer-accept", DEFER_ARGS[system], 1, ["close"]))
    # WEB_ONLY="loom,loom [no-rest],epoll": only the rows with those labels.
    only = [x.strip() for x in os.environ.get("WEB_ONLY", "").split(",") if x.strip()]
    if only:
        out = [c for c in out if label(c[0], c[1]) in only]
    return out


def points_of(s):
    """The points to measure: the settings', or WEB_MODES / WEB_CONNECTIONS (comma lists)."""
    points = dict(s["points"])
    modes = [m for m in os.environ.get("WEB_MODES", "").split(",") if m]
    conns = [int(c) for c in os.environ.get("WEB_CONNECTIONS", "").split(",") if c]
    if modes:
        points = {m: points.get(m, CONNECTIONS) for m in modes}
    if conns:
        points = {m: conns for m in points}
    return points


def run(runner, drv):
    s = QUICK if runner.quick else FULL
    rounds = runner.rounds or s["rounds"]
    t_start = time.time()
    if not shutil.which("wrk"):
        runner.failures.append("web: wrk not found (scripts/deps.sh bench)")
        return
    have_go = drv.go_build(runner, GO_SOURCE, GO_BINARY)
    if not runner.build(BINARIES + ([GO_BINARY] if have_go else [])):
        return
    raise_nofile()
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    load_before = drv.loadavg()
    points = points_of(s)
    s = dict(s, points=points)
    # WEB_PROCESSORS=1 (comma list), WEB_DURATION=SECONDS: narrower runs.
    if os.environ.get("WEB_PROCESSORS"):
        s["processors"] = [int(p) for p in os.environ["WEB_PROCESSORS"].split(",") if p]
    if os.environ.get("WEB_DURATION"):
        s["duration"] = int(os.environ["WEB_DURATION"])
    cfgs = configs(s["processors"], runner.quick)
    todo = [(mode, c, cfg) for cfg in cfgs for mode in cfg[4] if mode in points for c in points[mode]]
    print(f"web: {rounds} round(s) of {len(todo)} runs ({', '.join(sorted({label(c[0], c[1]) for c in cfgs}))}; "
          f"keep-alive and Connection: close; processors {', '.join(map(str, s['processors']))}); warm-up "
          f"{s['warmup']:g} s, wrk -t1 -d{s['duration']}s --latency", flush=True)
    results = {}
    retries = {"left": s["retries"], "used": 0}
    for rnd in range(rounds):
        order = drv.rotated(todo, rnd * (len(cfgs) + 1))
        # Interleave: every system at one point before the next point.
        order.sort(key=lambda x: (x[2][3], MODES.index(x[0]), x[1]))
        for mode, conns, (system, variant, vargs, procs, _) in order:
            t0 = time.time()
            best, attempts = None, 0
            while True:
                row = one_run(runner, drv, system, variant, vargs, mode, conns, procs, s)
                attempts += 1
                if row is None:
                    break
                if best is None or (row["others_cpus"] or 0) < (best["others_cpus"] or 0):
                    best = row
                if (row["others_cpus"] or 0) <= DISTURBED or attempts >= MAX_ATTEMPTS or retries["left"] <= 0:
                    break
                retries["left"] -= 1
                retries["used"] += 1
            if best:
                best["attempts"] = attempts
                results.setdefault((mode, system, variant, conns, procs), []).append(best)
            shown = (f"{best['requests_per_s']:>9,.0f} req/s  {fmt(best['server_cpu_us_per_req'], 6)} CPU µs/req  "
                     f"p99 {best['p99_us'] / 1000 if best['p99_us'] is not None else float('nan'):7.2f} ms  "
                     f"{best['rss_kib_per_conn']:6.2f} KiB/conn  {best['bound']}-bound  others "
                     f"{best['others_cpus'] or 0:.2f}" + (f"  errors {best['errors']}" if best["errors"] else "")
                     if best else "FAILED")
            print(f"  round {rnd + 1}/{rounds}  P={procs} {mode:<9} c={conns:<5} {label(system, variant):<20} "
                  f"{shown} ({time.time() - t0:.1f} s)", flush=True)

    common = drv.common_fields(runner, "web", started, load_before)
    rows = []
    for key, rs in results.items():
        row = median_row(rs)
        row.update(common)
        rows.append(row)
    by = {(r["bench"], r["system"], r["variant"], r["connections"], r["processors"]): r for r in rows}
    # Ratios against the epoll loop at the same point, in every row; the
    # events server's also against the fibre server (same variant).
    for r in rows:
        e = by.get((r["bench"], "epoll", "", r["connections"], r["processors"]))
        if e and r is not e:
            r["ratio_vs_epoll"] = {k: div(r[k], e[k], 4) for k in ("requests_per_s", "server_cpu_us_per_req")}
        f = by.get((r["bench"], "loom", r["variant"], r["connections"], r["processors"]))
        if f and r["system"] == "events":
            r["ratio_vs_loom"] = {k: div(r[k], f[k], 4) for k in ("requests_per_s", "server_cpu_us_per_req")}
    path = runner.write("web", rows)
    png = plot(runner.out_dir, rows, drv, started)
    print_tables(rows, by, s, rounds)
    print_goals(by)
    all_rows = [r for rs in results.values() for r in rs]
    if all_rows:
        oth = [r["others_cpus"] or 0 for r in all_rows]
        print(f"  other processes' CPU during the runs: median {statistics.median(oth):.2f}, max {max(oth):.2f} CPUs; "
              f"{retries['used']} run(s) repeated for it")
    print(f"  load average before {common['loadavg_before']}, after {common['loadavg_after']}; "
          f"web benchmark took {time.time() - t_start:.0f} s")
    print(f"wrote {path}" + (f" and {png}" if png else ""))


def print_tables(rows, by, s, rounds):
    keys = list(dict.fromkeys((r["system"], r["variant"]) for r in rows))
    for procs in s["processors"]:
        server_cpus, wrk_cpus = PLACEMENT[procs]
        for mode in MODES:
            points = [c for c in s["points"].get(mode, []) if any(k[0] == mode and k[3] == c and k[4] == procs for k in by)]
            if not points:
                continue
            ks = [k for k in keys if any((mode, k[0], k[1], c, procs) in by for c in points)]
            print()
            print(f"web {mode} — {procs} processor(s): server on CPU {server_cpus}, wrk -t1 on CPU {wrk_cpus}; "
                  f"requests/s | server CPU µs per request | bound (S server, C client); "
                  f"{'median of ' + str(rounds) + ' rounds' if rounds > 1 else 'one run each'}")
            print(f"  {'system':<20}" + "".join(f"{f'c={c}':>32}" for c in points))
            for system, variant in ks:
                cells = []
                for c in points:
                    r = by.get((mode, system, variant, c, procs))
                    cells.append("-" if not r else f"{r['requests_per_s']:>10,.0f} | {fmt(r['server_cpu_us_per_req'], 6)}"
                                 f" | {'S' if r['bound'] == 'server' else 'C'}"
                                 + (f" E{r['errors']}" if r["errors"] else ""))
                print(f"  {label(system, variant):<20}" + "".join(f"{x:>32}" for x in cells))
            print(f"  ratio to epoll: requests/s x, CPU per request x")
            for system, variant in ks:
                if system == "epoll" and not variant:
                    continue
                cells = []
                for c in points:
                    r = by.get((mode, system, variant, c, procs))
                    rv = r.get("ratio_vs_epoll") if r else None
                    cells.append(f"{fmt(rv['requests_per_s'])}x | {fmt(rv['server_cpu_us_per_req'])}x" if rv else "-")
                print(f"  {label(system, variant):<20}" + "".join(f"{x:>32}" for x in cells))
            evs = [k for k in ks if k[0] == "events"]
            if evs:
                print(f"  events / loom (the fibre server): requests/s x, CPU per request x "
                      f"(goals: CPU <= {EVENTS_CPU_GOAL:.2f}x, issue 12; <= {EVENTS_CPU_GOAL_22:.2f}x, issue 22)")
                for system, variant in evs:
                    cells = []
                    for c in points:
                        r = by.get((mode, system, variant, c, procs))
                        rv = r.get("ratio_vs_loom") if r else None
                        cells.append(f"{fmt(rv['requests_per_s'])}x | {fmt(rv['server_cpu_us_per_req'])}x" if rv else "-")
                    print(f"  {label(system, variant):<20}" + "".join(f"{x:>32}" for x in cells))
            print(f"  p50 / p99 latency (ms), RSS per connection (KiB, under load less idle)")
            for system, variant in ks:
                cells = []
                for c in points:
                    r = by.get((mode, system, variant, c, procs))
                    cells.append("-" if not r or r["p50_us"] is None else
                                 f"{r['p50_us'] / 1000:.2f} / {r['p99_us'] / 1000:.2f} ms, {r['rss_kib_per_conn']:.1f} KiB")
                print(f"  {label(system, variant):<20}" + "".join(f"{x:>32}" for x in cells))


def fmt(v, width=0):
    return f"{v:{width}.2f}" if v is not None else f"{'-':>{width}}"


def div(a, b, digits=None):
    """a / b, or None when either is missing or b is 0."""
    if a is None or not b:
        return None
    return round(a / b, digits) if digits is not None else a / b


def print_goals(by):
    """The issue's goals, as ratios in this run (1 processor, server on CPU 1)."""
    def get(mode, system, c, key, variant=""):
        r = by.get((mode, system, variant, c, 1))
        return r.get(key) if r else None

    lines = []

    def goal(text, value, target, higher_is_better):
        if value is not None:
            lines.append((text, value, f"{'>=' if higher_is_better else '<='} {target:.2f}",
                          value >= target if higher_is_better else value <= target))

    cpu, rps = "server_cpu_us_per_req", "requests_per_s"
    for c in CONNECTIONS:
        goal(f"keep-alive c={c}: CPU/request loom / epoll",
             div(get("keepalive", "loom", c, cpu), get("keepalive", "epoll", c, cpu)), 1.0, False)
        goal(f"keep-alive c={c}: requests/s loom / epoll",
             div(get("keepalive", "loom", c, rps), get("keepalive", "epoll", c, rps)), 0.95, True)
        goal(f"keep-alive c={c}: requests/s loom / nginx",
             div(get("keepalive", "loom", c, rps), get("keepalive", "nginx", c, rps)), 1.0, True)
    for c in (1000, 10000):
        for peer, target in (("pthread", 1.5), ("go", 2.0)):
            # Requests per second of server CPU: the fair figure when wrk, not the server, is the limit.
            goal(f"keep-alive c={c}: efficiency loom / {peer} (requests per server CPU s)",
                 div(get("keepalive", peer, c, cpu), get("keepalive", "loom", c, cpu)), target, True)
            goal(f"keep-alive c={c}: requests/s loom / {peer}",
                 div(get("keepalive", "loom", c, rps), get("keepalive", peer, c, rps)), target, True)
    for mode, mtitle in (("keepalive", "keep-alive"), ("close", "Connection: close")):
        for c in CONNECTIONS:
            goal(f"{mtitle} c={c}: CPU/request events / loom (fibres)",
                 div(get(mode, "events", c, cpu), get(mode, "loom", c, cpu)), EVENTS_CPU_GOAL, False)
            goal(f"{mtitle} c={c}: CPU/request events / loom (fibres), issue 22",
                 div(get(mode, "events", c, cpu), get(mode, "loom", c, cpu)), EVENTS_CPU_GOAL_22, False)
    for c in (1000, 10000):
        goal(f"keep-alive c={c}: CPU/request preload / loom (the pthread binary on libloom-pthread)",
             div(get("keepalive", "preload", c, cpu), get("keepalive", "loom", c, cpu)), PRELOAD_CPU_GOAL, False)
        goal(f"keep-alive c={c}: efficiency preload / pthread (same binary, requests per server CPU s)",
             div(get("keepalive", "pthread", c, cpu), get("keepalive", "preload", c, cpu)), PRELOAD_EFFICIENCY_GOAL, True)
    for c in CONNECTIONS:
        goal(f"keep-alive c={c}: CPU/request loom on io_uring / epoll",
             div(get("keepalive", "loom", c, cpu, "uring"), get("keepalive", "epoll", c, cpu)),
             URING_CPU_GOAL if c >= 1000 else 1.0, False)
    for c in CONNECTIONS:
        goal(f"Connection: close c={c}: CPU/request loom on io_uring / epoll",
             div(get("close", "loom", c, cpu, "uring"), get("close", "epoll", c, cpu)), 1.0, False)
    goal("keep-alive c=10000: loom RSS per connection (KiB)", get("keepalive", "loom", 10000, "rss_kib_per_conn"),
         RSS_GOAL_KIB, False)
    for c in CONNECTIONS:
        goal(f"Connection: close c={c}: requests/s loom / epoll",
             div(get("close", "loom", c, rps), get("close", "epoll", c, rps)), 1.0, True)
        goal(f"Connection: close c={c}: CPU/request loom / epoll",
             div(get("close", "loom", c, cpu), get("close", "epoll", c, cpu)), 1.0, False)
        d = "defer-accept"
        goal(f"Connection: close c={c}, both with {d}: CPU/request loom / epoll",
             div(get("close", "loom", c, cpu, d), get("close", "epoll", c, cpu, d)), 1.0, False)
    if not lines:
        return
    print()
    print("goals (1 processor; server on CPU 1, wrk on CPU 0)")
    for text, v, target, ok in lines:
        print(f"  {text:<72}{v:>8.3f}  {target:>8}   {'met' if ok else 'NOT met'}")
