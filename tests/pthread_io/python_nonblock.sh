#!/usr/bin/env bash
# python_nonblock.sh PYTHON LIB — CPython's socket.setblocking(False) (an
# ioctl FIONBIO) under LD_PRELOAD=LIB: recv on an empty socket raises
# BlockingIOError instead of waiting (issue 35, item 2); setblocking(True)
# again makes it wait, as a fibre, for the byte another thread sends.
set -euo pipefail
py=$1 lib=$2
LD_PRELOAD=$lib timeout 20 "$py" - <<'PY'
import socket, threading, time
a, b = socket.socketpair()
a.setblocking(False)
try:
    a.recv(1)
    print("WRONG: recv returned")
except BlockingIOError:
    print("setblocking(False): BlockingIOError")
a.setblocking(True)
threading.Thread(target=lambda: (time.sleep(0.1), b.send(b"x"))).start()
print("setblocking(True): got", a.recv(1))
PY
