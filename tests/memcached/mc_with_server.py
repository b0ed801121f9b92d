#!/usr/bin/env python3
"""Runs a client program against one memcached server it starts.

    mc_with_server.py BINARY [--default-bin-dir DIR] -- COMMAND ARGS...

starts BINARY (a path, or a name in MC_BIN_DIR / the build's
memcached-port/bin) on a free port of 127.0.0.1 with -t 2, replaces {port}
in COMMAND's arguments by its port, runs COMMAND (bounded by --timeout),
stops the server by its PID and exits with COMMAND's status; 1 as well when
the server died meanwhile, 77 when BINARY or COMMAND is absent.
"""

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from differential import (Server, add_bin_dir_option, exit_on_sigterm, resolve_binary,  # noqa: E402
                          use_bin_dir_option)


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        print(__doc__)
        return 2
    i = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--timeout", type=float, default=120)
    add_bin_dir_option(ap)
    a = ap.parse_args(argv[:i])
    cmd = argv[i + 1:]
    use_bin_dir_option(a)
    exit_on_sigterm()
    binary = resolve_binary(a.binary)
    for prog in (binary, cmd[0]):
        if not os.access(prog, os.X_OK):
            print("SKIP: %s not built" % prog)
            return 77
    srv = Server(binary, ["-U", "0", "-m", "64", "-t", "2"])
    try:
        cmd = [x.replace("{port}", str(srv.port)) for x in cmd]
        print("%s on port %d (pid %d): %s" % (binary, srv.port, srv.proc.pid, " ".join(cmd)), flush=True)
        try:
            rc = subprocess.run(cmd, timeout=a.timeout).returncode
        except subprocess.TimeoutExpired:
            print("FAIL: %s did not finish in %.0f s" % (cmd[0], a.timeout))
            return 1
        if not srv.alive():
            print("FAIL: the server died")
            return 1
        return rc
    finally:
        srv.stop()


if __name__ == "__main__":
    sys.exit(main())
