"""scripts/bench chan — loom::Channel against Boost.Fiber's channels and Go's
chan (issue 33), in the same run: apps/bench/chan_loom, chan_boostfiber and
apps/baselines/chanbench-go, each on one processor / thread / GOMAXPROCS=1,
pinned to CPU 1. Rows (their headers say more): chan_pingpong (two channels
holding one value each), chan_rendezvous (unbuffered), chan_fanin (four
producers into one channel of 64, one consumer); ns per message. Every
program runs once per round, in an order rotating between rounds; a row's
figure is the median of its rounds. Writes chan.jsonl; prints the table and
loom's ratios against the issue's goals: <= 1/2 of Boost.Fiber's time per
message and <= Go's.
"""

import datetime
import statistics
import time

from bench_common import spread

SYSTEMS = [("loom", "chan_loom"), ("boost.fiber", "chan_boostfiber"), ("go", "chanbench-go")]
BENCHES = ["chan_pingpong", "chan_rendezvous", "chan_fanin"]
GOALS = [("boost.fiber", 0.5), ("go", 1.0)]  # loom / peer
GO_BINARY = "chanbench-go"
GO_SOURCE = "apps/baselines/chanbench-go"
CPUS = "1"
FULL = dict(rounds=3, args=["--warmup", "0.5", "--duration", "0.5", "--repeats", "5"], timeout=300)
QUICK = dict(rounds=3, args=["--warmup", "0.1", "--duration", "0.1", "--repeats", "3"], timeout=60)


def run(runner, drv):
    s = QUICK if runner.quick else FULL
    rounds = runner.rounds or s["rounds"]
    have_go = drv.go_build(runner, GO_SOURCE, GO_BINARY, timeout=300)
    systems = [e for e in SYSTEMS if e[1] != GO_BINARY or have_go]
    if not runner.build([b for _, b in systems]):
        return
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    load_before = drv.loadavg()
    print(f"chan: {rounds} round(s) of {', '.join(n for n, _ in systems)}, pinned to CPU {CPUS}; "
          f"per program: {' '.join(s['args'])}", flush=True)
    per_round = {}
    for rnd in range(rounds):
        for system, binary in drv.rotated(systems, rnd):
            t0 = time.time()
            rows = runner.run(binary, CPUS, s["args"], s["timeout"], system=system)
            print(f"  round {rnd + 1}/{rounds}  {system:<12} {'ok' if rows else 'FAILED'} ({time.time() - t0:.1f} s)",
                  flush=True)
            for row in rows or []:
                per_round.setdefault((row["system"], row["bench"]), []).append(row)

    common = drv.common_fields(runner, "chan", started, load_before)
    out = {}
    for key, rows in per_round.items():
        values = [r["ns_per_op"] for r in rows]
        row = {k: v for k, v in rows[-1].items() if k not in ("samples_ns", "min_ns", "max_ns", "iterations",
                                                                "warmup_s", "steal_pct")}
        row.update(ns_per_op=statistics.median(values), rounds=len(values), round_ns=values,
                   spread_pct=round(spread(values), 2), round_steal_pct=[r.get("steal_pct") for r in rows])
        row.update(common)
        out[key] = row

    def ns(system, bench):
        r = out.get((system, bench))
        return r["ns_per_op"] if r else None

    for bench in BENCHES:
        row = out.get(("loom", bench))
        if row:
            row["ratios"] = {p: round(row["ns_per_op"] / ns(p, bench), 4) for p, _ in GOALS if ns(p, bench)}
            row["goals"] = dict(GOALS)
    runner.write("chan", list(out.values()))

    names = [n for n, _ in SYSTEMS]
    print()
    print(f"chan — ns per message, median of {rounds} round(s) (± half the range); one processor, CPU {CPUS}")
    print(f"  {'bench':<16}" + "".join(f"{n:>16}" for n in names))
    for bench in BENCHES:
        cells = []
        for n in names:
            r = out.get((n, bench))
            cells.append(f"{drv.fmt_ns(r['ns_per_op'])} ±{r['spread_pct']:.0f}%" if r else "-")
        print(f"  {bench:<16}" + "".join(f"{c:>16}" for c in cells))
    print()
    print(f"  {'ratio':<40}{'measured':>10}{'goal':>9}")
    for bench in BENCHES:
        for peer, goal in GOALS:
            a, b = ns("loom", bench), ns(peer, bench)
            label = f"loom / {peer} {bench}"
            if a and b:
                r = a / b
                print(f"  {label:<40}{r:>10.3f}{'<= ' + str(goal):>9}   {'met' if r <= goal else 'NOT met'}")
            else:
                print(f"  {label:<40}{'-':>10}{'<= ' + str(goal):>9}   (not measured)")
    print(f"  load average before {common['loadavg_before']}, after {common['loadavg_after']}; "
          f"{drv.steal_summary(per_round.values())}")
