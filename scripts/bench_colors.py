"""scripts/bench colors — Mely's color-stealing microbenchmarks (Mely report
§5.2: unbalanced, penalty, cache-efficient) on loom, one row per
(benchmark, stealing variant).

Imported by scripts/bench (which owns the command line, the build, the
pinned runs and the output directory). Entry point: run(runner, driver).

The program is apps/bench/colors_loom.cpp: one process per (benchmark,
variant), a cluster of 2 processors on both CPUs (taskset -c 0,1), rounds
that start with all their events on one processor; it prints events/s and
the color layer's counters (loom::color_stats) of its measured window. Every
variant is run once per round, in an order that rotates from round to round;
a row is the median of its rounds, and a goal ratio is the median of the
ratios taken within each round (the two variants ran minutes apart at most,
usually seconds).

The peers are inside loom (docs/BENCHMARKS.md): no stealing, libasync-smp's
stealing, and Mely's base algorithm alone, with each heuristic alone, and
with all three. `mely-measured` (penalty only) is `mely` with the runtime's
measured penalty for B instead of the programmer's 1000.

Also, each round: `event-cost` with `none` on one processor (CPU 1): TSC
cycles per post + dispatch of a one-event color, the color's queue made
and freed included (empty handler). And per row, the runtime's measured
warm and cold run times of each handler (loom::handler_times) as the variant
left them: the penalty heuristic's input, which perf cannot give here.

L2 misses per event come from `perf stat` where the machine's counters work
(an L2 miss event is probed first); where they do not — on this KVM guest
`perf stat -e cache-misses` says <not supported> — the rows hold null and the
output says so.
"""

import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import spread

BINARY = "colors_loom"
CPUS = "0,1"
PROCESSORS = 2
BENCHES = ["unbalanced", "penalty", "cache-efficient"]
VARIANTS = ["none", "libasync-smp", "mely:base", "mely:locality", "mely:time-left", "mely:penalty", "mely"]
EXTRA_VARIANTS = {"penalty": ["mely-measured"]}  # B's penalty measured by the runtime, not set

FULL = dict(rounds=3, seconds=5.0, warmup=1.0)
QUICK = dict(rounds=2, seconds=1.0, warmup=0.25)
COST_CPU = "1"  # event-cost: one processor
ROUND_TIMEOUT = 30  # colors_loom --round-timeout: a round that long has lost an event

# (bench, variant, reference, goal for variant / reference, why): issue 22's.
GOALS = [
    ("unbalanced", "mely", "none", 1.5, "mely >= 1.5x no stealing"),
    ("unbalanced", "mely:time-left", "mely:base", 1.5, "time-left >= 1.5x base stealing"),
    ("penalty", "mely:penalty", "mely:base", 1.0, "penalty never below base stealing"),
] + [(b, v, "none", 0.95, "stealing never loses to none")
     for b in ["unbalanced", "penalty", "cache-efficient"]
     for v in ["libasync-smp", "mely:base", "mely:locality", "mely:time-left", "mely:penalty", "mely"]]
UNBALANCED_NONE_GOAL = 2.5e6  # events/s, unbalanced with none on 2 processors (issue 22)
# Ratios shown without a goal.
OTHER_RATIOS = [
    ("unbalanced", "libasync-smp", "none"),
    ("unbalanced", "mely", "mely:base"),
    ("penalty", "mely", "mely:base"),
    ("penalty", "mely-measured", "mely:base"),
    ("penalty", "mely-measured", "mely"),
    ("cache-efficient", "mely:locality", "mely:base"),
]

# perf events that count L2 misses, in the order tried: Intel, AMD; then the
# generic last-level-cache event, labelled as such in the rows.
L2_EVENTS = ["l2_rqsts.miss", "l2_cache_req_stat.ic_dc_miss_in_l2", "cache-misses"]


def variants_of(bench):
    return VARIANTS + EXTRA_VARIANTS.get(bench, [])


# ---- perf ------------------------------------------------------------------------


def perf_value(path_or_text, from_file=True):
    """The first counter of `perf stat -x,` output: a number, or the reason it is not."""
    text = path_or_text
    if from_file:
        try:
            with open(path_or_text) as f:
                text = f.read()
        except OSError as e:
            return None, f"no perf output ({e})"
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) < 3 or line.startswith("#"):
            continue
        v = fields[0].strip()
        if v.startswith("<"):
            return None, f"{fields[2]}: {v}"
        try:
            return float(v), None
        except ValueError:
            continue
    return None, "perf printed no counter"


def probe_perf():
    """(event, None) for the first L2 event perf counts here, else (None, why not)."""
    if not shutil.which("perf"):
        return None, "perf not installed"
    reasons = []
    for ev in L2_EVENTS:
        try:
            r = subprocess.run(["perf", "stat", "-x,", "-e", ev, "--", "true"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            reasons.append(f"{ev}: {e}")
            continue
        v, why = perf_value(r.stderr, from_file=False)
        if r.returncode == 0 and v is not None:
            return ev, None
        reasons.append(why if r.returncode == 0 else f"{ev}: perf exit {r.returncode}")
    return None, "; ".join(reasons)


def run_under_perf(runner, drv, event, args, timeout):
    """Like runner.run, under `perf stat -e event`; adds the count to the row."""
    path = runner.binary(BINARY)
    if path is None:
        runner.failures.append(f"{BINARY}: no binary")
        return None
    fd, out = tempfile.mkstemp(prefix="colors-perf-")
    os.close(fd)
    cmd = ["perf", "stat", "-x,", "-o", out, "-e", event, "--", "taskset", "-c", CPUS, path] + args
    env = dict(os.environ)
    if runner.snapshot:
        env["LD_LIBRARY_PATH"] = runner.snapshot + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    try:
        before = drv.cpu_ticks()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout, env=env)
        after = drv.cpu_ticks()
    except subprocess.TimeoutExpired:
        runner.failures.append(f"{BINARY}: no result after {timeout} s, killed (hang?): {' '.join(cmd)}")
        os.unlink(out)
        return None
    count, why = perf_value(out)
    os.unlink(out)
    if r.returncode != 0:
        runner.failures.append(f"{BINARY}: exit {r.returncode}: {' '.join(cmd)}\n    stderr: {r.stderr.strip()[-2000:]}")
        return None
    rows = []
    for line in r.stdout.splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError:
                runner.failures.append(f"{BINARY}: not JSON: {line[:200]!r}")
                return None
    for row in rows:
        if before and after and after[1] > before[1]:
            row["steal_pct"] = round(100.0 * (after[0] - before[0]) / (after[1] - before[1]), 1)
        row["perf_count"] = count
        if count is None:
            row["perf_note"] = why
    return rows


# ---- the benchmark -----------------------------------------------------------------


def run(runner, drv):
    s = QUICK if runner.quick else FULL
    rounds = runner.rounds or s["rounds"]
    t_start = time.time()
    if not runner.build([BINARY]):
        return
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    load_before = drv.loadavg()
    event, perf_why = probe_perf()
    l2_note = (f"L2 misses per event from `perf stat -e {event}` (whole process, warm-up included, / every event "
               f"it ran)" if event else
               f"L2 misses per event: null — perf counters do not work here ({perf_why})")
    runs = sum(len(variants_of(b)) for b in BENCHES)
    print(f"colors: {rounds} round(s) of {runs} runs ({', '.join(BENCHES)} x their variants), "
          f"{PROCESSORS} processors on CPUs {CPUS}; per run: --warmup {s['warmup']:g} --seconds {s['seconds']:g}",
          flush=True)
    print(f"  {l2_note}", flush=True)

    per = {}  # (bench, variant) -> [row per round]
    costs = []  # event-cost rows, one per round
    for rnd in range(rounds):
        args = ["--bench", "event-cost", "--variant", "none", "--processors", "1", "--seconds", f"{s['seconds']:g}",
                "--warmup", f"{s['warmup']:g}", "--round-timeout", str(ROUND_TIMEOUT)]
        t0 = time.time()
        rows = runner.run(BINARY, COST_CPU, args, int(s["warmup"] + s["seconds"] + ROUND_TIMEOUT + 60))
        if rows:
            costs.append(rows[0])
        shown = f"{rows[0]['cycles_per_event']:9.0f} cycles/event" if rows else "FAILED"
        print(f"  round {rnd + 1}/{rounds}  {'event-cost':<16}{'none, 1 proc':<16}{shown} ({time.time() - t0:.1f} s)",
              flush=True)
        for bench in BENCHES:
            for variant in drv.rotated(variants_of(bench), rnd):
                args = ["--bench", bench, "--variant", variant, "--processors", str(PROCESSORS),
                        "--seconds", f"{s['seconds']:g}", "--warmup", f"{s['warmup']:g}",
                        "--round-timeout", str(ROUND_TIMEOUT)]
                timeout = int(s["warmup"] + s["seconds"] + ROUND_TIMEOUT + 60)
                t0 = time.time()
                rows = (run_under_perf(runner, drv, event, args, timeout) if event
                        else runner.run(BINARY, CPUS, args, timeout))
                row = rows[0] if rows else None
                if row is not None and (row.get("bench") != bench or row.get("variant") != variant):
                    runner.failures.append(f"{BINARY} reported {row.get('bench')} [{row.get('variant')}], "
                                           f"expected {bench} [{variant}]")
                    row = None
                if row is not None:
                    row["round"] = rnd + 1
                    per.setdefault((bench, variant), []).append(row)
                shown = (f"{row['events_per_s'] / 1e3:9.1f} K events/s, {row['colors_stolen_per_round']:8.1f} "
                         f"colors stolen/round" if row else "FAILED")
                steal = f", steal {row['steal_pct']:.0f}%" if row and "steal_pct" in row else ""
                print(f"  round {rnd + 1}/{rounds}  {bench:<16}{variant:<16}{shown} ({time.time() - t0:.1f} s{steal})",
                      flush=True)

    common = drv.common_fields(runner, "colors", started, load_before)
    out = {}
    for (bench, variant), rows in per.items():
        row = {k: v for k, v in rows[-1].items() if k not in ("steal_pct", "round", "perf_count", "perf_note")}
        for k in ("events_per_s", "steal_cost_cycles", "stolen_work_cycles", "colors_stolen",
                  "colors_stolen_per_round", "events_stolen", "steal_attempts"):
            vals = [r[k] for r in rows if r.get(k) is not None]
            row[k] = statistics.median(vals) if vals else None
        l2 = [r["perf_count"] / r["program_events_run"] for r in rows
              if r.get("perf_count") is not None and r.get("program_events_run")]
        row["l2_misses_per_event"] = statistics.median(l2) if l2 else None
        row["l2_event"] = event
        if not l2:
            row["l2_note"] = ("perf counters not supported here" if not event
                              else "; ".join(sorted({r.get("perf_note", "?") for r in rows})))
        row["rounds"] = len(rows)
        row["round_events_per_s"] = [r["events_per_s"] for r in rows]
        row["round_steal_pct"] = [r.get("steal_pct") for r in rows]
        row["spread_pct"] = round(spread(row["round_events_per_s"]), 2)
        row.update(common)
        out[(bench, variant)] = row

    def ratio(bench, a, b):
        """Median and range of the within-round ratios a / b."""
        ra = {r["round"]: r["events_per_s"] for r in per.get((bench, a), [])}
        rb = {r["round"]: r["events_per_s"] for r in per.get((bench, b), [])}
        vals = [ra[k] / rb[k] for k in ra if k in rb and rb[k] > 0]
        return (statistics.median(vals), min(vals), max(vals)) if vals else None

    goal_lines = []
    for bench, a, b, goal, why in GOALS:
        r = ratio(bench, a, b)
        goal_lines.append((bench, a, b, goal, why, r))
        if r and (bench, a) in out:
            out[(bench, a)].setdefault("ratios", {})[b] = round(r[0], 4)
            out[(bench, a)].setdefault("goals", {})[b] = goal
    for bench, a, b in OTHER_RATIOS:
        r = ratio(bench, a, b)
        if r and (bench, a) in out:
            out[(bench, a)].setdefault("ratios", {})[b] = round(r[0], 4)

    rows = [out[(b, v)] for b in BENCHES for v in variants_of(b) if (b, v) in out]
    cost = None
    if costs:
        cost = dict(costs[-1])
        cost["cycles_per_event"] = statistics.median(r["cycles_per_event"] for r in costs)
        cost["round_cycles_per_event"] = [r["cycles_per_event"] for r in costs]
        cost.update(common)
        rows.append(cost)
    path = runner.write("colors", rows)

    # ---- the tables ----
    print()
    print(f"colors — Mely's microbenchmarks on loom, {PROCESSORS} processors (CPUs {CPUS}), batch 10; "
          f"events/s median of {rounds} round(s) (± half the range); counters of the measured window "
          f"(loom::color_stats, medians)")
    for bench in BENCHES:
        any_row = next((out[(bench, v)] for v in variants_of(bench) if (bench, v) in out), None)
        if not any_row:
            continue
        print()
        print(f"  {bench}: {describe(any_row)}")
        print(f"    {'variant':<16}{'K events/s':>16}{'/ none':>8}{'steal cost':>12}{'stolen work':>16}"
              f"{'colors stolen':>15}{'L2 misses':>11}{'events run on':>15}")
        print(f"    {'':<16}{'':>16}{'':>8}{'(cycles)':>12}{'(cycles/color)':>16}{'per round':>15}"
              f"{'per event':>11}{'P0/P1 (%)':>15}")
        for v in variants_of(bench):
            r = out.get((bench, v))
            if not r:
                print(f"    {v:<16}{'-':>16}")
                continue
            rn = ratio(bench, v, "none")
            l2 = r.get("l2_misses_per_event")
            print(f"    {v:<16}{r['events_per_s'] / 1e3:>9.1f} ±{r['spread_pct']:>3.0f}%"
                  f"{(f'{rn[0]:.2f}' if rn else '-'):>8}{fmt_int(r['steal_cost_cycles']):>12}"
                  f"{fmt_int(r['stolen_work_cycles']):>16}{r['colors_stolen_per_round']:>15.1f}"
                  f"{(f'{l2:.3g}' if l2 is not None else 'null'):>11}{split(r):>15}")

    print()
    if cost:
        ghz = cost.get("tsc_ghz") or 0
        ns = f" ({cost['cycles_per_event'] / ghz:.0f} ns at the TSC's {ghz:.2f} GHz)" if ghz else ""
        print(f"  one-event color, `none` on one processor (CPU {COST_CPU}): {cost['cycles_per_event']:,.0f} TSC "
              f"cycles per post + dispatch + color lifecycle{ns}, median of {len(costs)} round(s)")
    else:
        print("  one-event color: not measured (event-cost failed)")
    print()
    print("runtime's measured handler run times (TSC cycles, warm / cold, and the penalty a thief weighs; "
          "as each variant's run left them)")
    for bench in BENCHES:
        names = None
        for v in variants_of(bench):
            r = out.get((bench, v))
            if not r or not r.get("handlers"):
                continue
            if names is None:
                names = list(r["handlers"])
                print(f"  {bench}: " + ", ".join(names))
            cells = []
            for n in names:
                h = r["handlers"].get(n, {})
                cold = h.get("cold_cycles") or 0
                cells.append(f"{n} {fmt_int(h.get('warm_cycles'))}/{fmt_int(cold) if cold else '-'}"
                             f" x{h.get('penalty', 1):.3g}")
            print(f"    {v:<16}" + "   ".join(cells))

    print()
    print("goals (median of the ratios taken within each round; range over the rounds)")
    for bench, a, b, goal, why, r in goal_lines:
        name = f"{bench}: {a} / {b}"
        if r is None:
            print(f"  {name:<44}{'-':>8}{'>= ' + format(goal, 'g'):>9}   (not measured)   {why}")
        else:
            verdict = "met" if r[0] >= goal else "NOT met"
            print(f"  {name:<44}{r[0]:>8.2f}{'>= ' + format(goal, 'g'):>9}   {verdict:<8} "
                  f"({r[1]:.2f}–{r[2]:.2f})   {why}")
    un = out.get(("unbalanced", "none"))
    if un:
        verdict = "met" if un["events_per_s"] >= UNBALANCED_NONE_GOAL else "NOT met"
        print(f"  {'unbalanced: none, M events/s':<44}{un['events_per_s'] / 1e6:>8.2f}"
              f"{'>= ' + format(UNBALANCED_NONE_GOAL / 1e6, 'g'):>9}   {verdict:<8} (about 150 ns of runtime per event)")
    for bench, a, b in OTHER_RATIOS:
        r = ratio(bench, a, b)
        if r:
            print(f"  {bench + ': ' + a + ' / ' + b:<44}{r[0]:>8.2f}{'':>9}   (no goal) ({r[1]:.2f}–{r[2]:.2f})")

    print()
    print("  locality cannot show here: 2 CPUs, each with its own L2 and both under one L3, so the one other "
          "processor is every thief's nearest victim")
    print("  and mely:locality steals exactly as mely:base does; the victim order by cache distance is covered "
          "by the topology tests (tests/topo_test.cpp).")
    print(f"  {l2_note}.")
    print("  events run on: the share of the measured events each processor ran (last round); the driver posts "
          "each round from the processor it runs on (poster_rounds_by_processor in the jsonl).")
    print("  steal cost = loom's smoothed TSC cycles of one steal; stolen work = mean measured work of a stolen "
          "color; both as the runtime reports them at the end of the run.")
    print(f"  load average before {common['loadavg_before']}, after {common['loadavg_after']}; "
          f"{drv.steal_summary(list(per.values()))}; colors took {time.time() - t_start:.0f} s")
    print(f"wrote {path}")


def describe(row):
    b = row.get("bench")
    if b == "unbalanced":
        return (f"{row.get('events_per_round', 0):,} independent events per round, each its own color, posted on "
                f"one processor; 98 % spin 100 cycles, 2 % 10,000–50,000")
    if b == "penalty":
        return (f"{row.get('chains_per_round')} A events per round on one processor, each writing a "
                f"{row.get('array_bytes', 0) >> 10} KiB array (the L2) walked by {row.get('slices')} B events of "
                f"its color; B's penalty 1000 in mely:penalty and mely, measured in mely-measured")
    if b == "cache-efficient":
        return (f"{row.get('sorts_per_round')} A events per round on one of the 2 processors; each fills a "
                f"{row.get('array_bytes', 0) >> 10} KiB array, two B (two other colors) sort its halves, C joins, "
                f"M merges")
    return ""


def split(row):
    """Where the measured rounds' events ran: percent per processor (last round)."""
    v = row.get("events_by_processor") or []
    total = sum(v)
    return "/".join(f"{100.0 * x / total:.0f}" for x in v) if total else "-"


def fmt_int(v):
    return "-" if v is None else f"{v:,.0f}"
