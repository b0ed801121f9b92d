#!/usr/bin/env python3
"""scripts/perf_gate.py — the performance gate (issue 34, item 2).

Runs the quick micro, lock, io and colors benchmarks (scripts/bench NAME
--quick: peers measured beside loom in the same run) and compares the
same-run ratios they record against committed bounds
(scripts/perf_bounds.json). Each bound sits at about twice its goal: loose
enough for a noisy shared machine, tight enough that a 2x regression of a
row that meets its goal fails. A row over its bound is measured once more
(that benchmark alone) before it counts as failed: one disturbed run on a
shared machine is not a regression, two in a row are.

    scripts/perf_gate.py [--bin-dir DIR] [--out DIR] [--only NAME,...]
    scripts/perf_gate.py --check-only DIR   # judge results already in DIR

Prints one line per bound (row, ratio, bound, the previous figure, goal)
and, for each failure, a line that names the row, the ratio, the bound and
the figure recorded when the bound was last reviewed. Exit 0 when every
bound holds, 1 when one fails (or a benchmark did not produce its row), 2
for a bad command line.

How to change a bound: docs/BENCHMARKS.md, "The performance gate".
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOUNDS = os.path.join(ROOT, "scripts", "perf_bounds.json")
BENCHES = ["micro", "lock", "io", "colors"]
OPS = {"<=": lambda v, b: v <= b, ">=": lambda v, b: v >= b}


def die(msg, code=2):
    print(f"perf_gate: {msg}", file=sys.stderr)
    sys.exit(code)


def load_bounds(path=BOUNDS):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{path}: {e}", 1)
    bounds = doc.get("bounds")
    if not isinstance(bounds, list) or not bounds:
        die(f"{path}: no bounds", 1)
    for b in bounds:
        for k in ("name", "bench", "row", "ratio", "op", "bound", "goal", "previous", "reason"):
            if k not in b:
                die(f"{path}: bound {b.get('name', '?')!r} lacks '{k}'", 1)
        if b["op"] not in OPS:
            die(f"{path}: bound {b['name']!r}: op must be <= or >=", 1)
        if b["bench"] not in BENCHES:
            die(f"{path}: bound {b['name']!r}: bench must be one of {', '.join(BENCHES)}", 1)
    return bounds


def read_rows(out_dir, bench):
    path = os.path.join(out_dir, f"{bench}.jsonl")
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    rows.append(json.loads(line))
    except (OSError, ValueError):
        return None
    return rows


def find_ratio(rows, bound):
    """The ratio a bound is about, or None: the row whose fields match
    bound['row'] and that records bound['ratio'] among its ratios."""
    for r in rows or []:
        if all(r.get(k) == v for k, v in bound["row"].items()):
            v = (r.get("ratios") or {}).get(bound["ratio"])
            if v is not None:
                return float(v)
    return None


def judge(out_dir, bounds, benches):
    """[(bound, value or None, ok)] for the bounds of `benches`."""
    results = []
    for bench in benches:
        rows = read_rows(out_dir, bench)
        for b in bounds:
            if b["bench"] != bench:
                continue
            v = find_ratio(rows, b)
            results.append((b, v, v is not None and OPS[b["op"]](v, b["bound"])))
    return results


def run_bench(bench, bin_dir, out_dir):
    cmd = [os.path.join(ROOT, "scripts", "bench"), bench, "--quick", "--out", out_dir]
    if bin_dir:
        cmd += ["--bin-dir", bin_dir]
    print(f"perf_gate: {' '.join(cmd)}", flush=True)
    return subprocess.call(cmd)


def report(results):
    w = max([len(b["name"]) for b, _, _ in results] + [5]) + 2
    print(f"\n{'bound':<{w}}{'ratio':>9}{'bound':>10}{'previous':>10}{'goal':>9}   verdict")
    for b, v, ok in results:
        shown = f"{v:.3f}" if v is not None else "-"
        print(f"{b['name']:<{w}}{shown:>9}{b['op'] + ' ' + format(b['bound'], 'g'):>10}"
              f"{b['previous']:>10g}{b['op'] + ' ' + format(b['goal'], 'g'):>9}   "
              f"{'ok' if ok else 'FAILED'}")


def main(argv):
    bin_dir, out_dir, only, check_only = None, os.path.join(ROOT, "bench-results", "gate"), None, None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(__doc__)
            return 0
        if a in ("--bin-dir", "--out", "--only", "--check-only"):
            if i + 1 >= len(argv):
                die(f"missing value after {a}")
            v = argv[i + 1]
            i += 1
            if a == "--bin-dir":
                bin_dir = os.path.abspath(v)
            elif a == "--out":
                out_dir = os.path.abspath(v)
            elif a == "--only":
                only = [x for x in v.split(",") if x]
                bad = [x for x in only if x not in BENCHES]
                if bad or not only:
                    die(f"bad value '{v}' for --only (from {', '.join(BENCHES)})")
            else:
                check_only = os.path.abspath(v)
        else:
            die(f"unknown argument '{a}' (see --help)")
        i += 1
    bounds = load_bounds()
    benches = only or BENCHES

    if check_only:
        results = judge(check_only, bounds, benches)
    else:
        os.makedirs(out_dir, exist_ok=True)
        for bench in benches:
            run_bench(bench, bin_dir, out_dir)  # a failed run shows as a missing ratio below
        results = judge(out_dir, bounds, benches)
        # A bound missed once is measured again: that benchmark alone, once.
        again = sorted({b["bench"] for b, _, ok in results if not ok})
        for bench in again:
            print(f"perf_gate: {bench}: a bound failed; measuring it once more", flush=True)
            retry_dir = os.path.join(out_dir, "retry")
            os.makedirs(retry_dir, exist_ok=True)
            run_bench(bench, bin_dir, retry_dir)
            second = {id(b): (v, ok) for b, v, ok in judge(retry_dir, bounds, [bench])}
            merged = []
            for b, v, ok in results:
                if b["bench"] == bench and not ok:
                    v2, ok2 = second.get(id(b), (None, False))
                    if ok2:
                        v, ok = v2, True
                    elif v2 is not None:
                        # Failed twice: report the run nearer the bound.
                        better = v2 < v if b["op"] == "<=" else v2 > v
                        v = v2 if v is None or better else v
                merged.append((b, v, ok))
            results = merged

    report(results)
    failed = [(b, v) for b, v, ok in results if not ok]
    for b, v in failed:
        what = "not measured (the benchmark failed or did not write the row)" if v is None else f"{v:.3f}"
        print(f"perf_gate: FAILED {b['name']}: ratio {what}, bound {b['op']} {b['bound']:g}, "
              f"previous figure {b['previous']:g} ({b['reason']})", file=sys.stderr)
    print(f"perf_gate: {len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
