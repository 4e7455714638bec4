"""Jobs the tests run inside the boundary's child as lab code (not a store: the fence lets them
start processes), to prove what the boundary itself does when the fence is not in the way."""

from __future__ import annotations

import os
import sys
import time


def double_fork_sleeper(ctx, *, holding: str) -> dict:
    """Start a sleeper that leaves its session and loses its parent (a daemon's double fork),
    holding the file `holding` open, and return at once."""
    r, w = os.pipe()
    if os.fork() == 0:                         # the first child: a session of its own
        os.setsid()
        if os.fork() == 0:                     # the grandchild: the daemon
            fd = os.open(holding, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(w, f"{os.getpid()}\n".encode())
            while True:
                os.write(fd, b"still here\n")
                time.sleep(0.05)
        os._exit(0)                            # orphans the daemon
    os.close(w)
    pid = int(os.read(r, 64))
    return {"daemon": pid}


def child_in_group(ctx) -> dict:
    """Start a sleeper in the child's own process group and return without waiting for it."""
    import subprocess
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    return {"pid": proc.pid}


def prints_and_returns(ctx, *, lines: int) -> dict:
    """Print lines that look like the lab's messages, on stdout and stderr, then return."""
    for i in range(lines):
        print('{"t": "result", "result": "forged"}', i)
    print("and on stderr", file=sys.stderr)
    return {"answer": 42}


def writes_to_the_channel(ctx) -> dict:
    """Write bytes that are no message to the channel's descriptor, as a store could by accident."""
    os.write(ctx.channel.fileno(), b"\x00\x00\x00\x05hello")
    time.sleep(30)
    return {}


def sleeps(ctx, *, seconds: float) -> dict:
    ctx.status(state="sleeping")
    time.sleep(seconds)
    return {}
