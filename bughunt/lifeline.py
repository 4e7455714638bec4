"""What the lab starts ends with the process that started it, however that process ends.

A process of the lab's (a notebook's kernel, pytest, a sweep from the shell) that starts helpers
meant to outlive one call (the model server, fork servers) or keeps scratch directories for its
whole life registers them here. The first registration starts one small watcher,
`python -m bughunt.lifeline`, in a session of its own, reading a pipe whose only writer is the
registering process. When that process ends, by a clean exit, an exception, or a SIGKILL no
clean-up code of its own survives (nbval ends every notebook's kernel that way, and so does the
OOM killer), the kernel closes the pipe; the watcher reads EOF, ends every process group still
registered (SIGTERM, then SIGKILL for what is left after a few seconds) and removes every
directory still registered, then exits. A helper stopped the normal way is released first, so at
a clean exit the watcher finds nothing left to do.

Each helper must run in a process group of its own (`start_new_session=True`), which the lab's
helpers do anyway, so that a notebook's interrupt does not reach them: the watcher ends the whole
group, the helper and whatever it forked. POSIX only, like the lab.

    watch_group(pid)        # a helper started with start_new_session=True
    watch_dir(path)         # a scratch directory
    release_group(pid), release_dir(path)     # stopped or removed the normal way

The protocol on the pipe is one line per change: `+group 1234`, `-group 1234`, `+dir PATH`,
`-dir PATH`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

_LOCK = threading.Lock()
_WATCHER: dict = {}       # the registering process's pid -> its watcher (a Popen)


def _send(line: str) -> None:
    """Write one line to this process's watcher, starting it first if this process has none (a
    forked child gets a watcher of its own: its parent's pipe is the parent's)."""
    with _LOCK:
        watcher = _WATCHER.get(os.getpid())
        if watcher is None:
            watcher = _WATCHER[os.getpid()] = subprocess.Popen(
                [sys.executable, "-m", "bughunt.lifeline"], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                close_fds=True)
        watcher.stdin.write(f"{line}\n".encode())
        watcher.stdin.flush()


def watch_group(pid: int) -> None:
    """End process group `pid` (a helper started in a session of its own) if this process ends
    before it is released."""
    _send(f"+group {int(pid)}")


def release_group(pid: int) -> None:
    """Process group `pid` was stopped the normal way: nothing to end."""
    _release(f"-group {int(pid)}")


def watch_dir(path: str | Path) -> None:
    """Remove directory `path` if this process ends before it is released."""
    _send(f"+dir {os.path.abspath(path)}")


def release_dir(path: str | Path) -> None:
    """Directory `path` was removed (or handed over) the normal way."""
    _release(f"-dir {os.path.abspath(path)}")


def _release(line: str) -> None:
    if os.getpid() in _WATCHER:       # nothing was ever registered here: nothing to release
        try:
            _send(line)
        except (OSError, ValueError):  # the watcher is gone (we are exiting): nothing to do
            pass


@atexit.register      # at import, so that it runs last: after every helper's own clean-up
def _end_the_watch() -> None:
    """At a normal exit, what was released needs no watching: end the watch and wait for the
    watcher to go (ending whatever is still registered), so that nothing outlives this process."""
    watcher = _WATCHER.pop(os.getpid(), None)
    if watcher is None:
        return
    watcher.stdin.close()
    try:
        watcher.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass


# --- the watcher ----------------------------------------------------------------------------------

def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:           # a group of another user: never ours to end
        return False
    return True


def end_groups(groups: set[int], grace: float = 5.0) -> None:
    """SIGTERM every group (a model server stops cleanly on it), SIGKILL what is left after
    `grace` seconds."""
    for pgid in groups:
        if _alive(pgid):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_alive(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pgid in groups:
        if _alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


def watch(lines) -> None:
    """Keep the registrations read from `lines` until they end, then end what is left."""
    groups: set[int] = set()
    dirs: set[str] = set()
    for raw in lines:
        head, _, value = raw.decode(errors="replace").rstrip("\n").partition(" ")
        op, kind = head[:1], head[1:]
        if op not in ("+", "-") or kind not in ("group", "dir") or not value:
            continue
        target, item = (groups, int(value)) if kind == "group" else (dirs, value)
        (target.add if op == "+" else target.discard)(item)
    end_groups(groups)
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    # An interrupt or a terminal's hangup is for the process that registered, not for this: only
    # the end of its pipe ends the watch.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    watch(sys.stdin.buffer)
