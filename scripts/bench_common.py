"""scripts/bench_common.py — small helpers that scripts/bench, its
benchmark modules (bench_lock, bench_io, bench_web, bench_memcached) and
scripts/profile_request.py share."""

import resource
import socket
import statistics
import time


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


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout, poll=0.05):
    """True once something accepts connections on 127.0.0.1:port, False after timeout seconds."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(poll)
    return False
