"""scripts/bench_common.py — small helpers that scripts/bench and its
benchmark modules (bench_lock, bench_io, bench_web) share."""

import resource
import statistics


def label(system, variant):
    """A row's name in tables and plots: 'system' or 'system [variant]'."""
    return system + (f" [{variant}]" if variant else "")


def spread(values):
    """Half the range over the median, in percent: how much the rounds agreed."""
    m = statistics.median(values)
    return 100.0 * (max(values) - min(values)) / 2 / m if m else 0.0


def raise_nofile():
    """Raises the open-files limit to the hard limit (also a preexec_fn)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def proc_rss_kib(pid):
    """Resident memory of a process in KiB, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None
