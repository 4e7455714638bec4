"""A fork server: start worker processes in a millisecond instead of a fresh interpreter's 50.

Starting `python -m bughunt.worker` costs an interpreter start and every import, tens of
milliseconds, and a sweep starts hundreds of workers. The fork server is a small process that has
already imported the worker; for each request it forks. The child is a new, separate process (its
own pid, its own file descriptors, its own flock), runs the worker's `main(argv)` with stdout and
stderr in files, and dies exactly as a worker started from a shell would: by a real SIGKILL at its
crash point, or by exiting. The server reports the child's pid at once (so a caller can kill it on a
timeout) and its exit status when it ends (negative for a signal, as `subprocess` reports it).

Protocol, one JSON object per line on the server's stdin/stdout:
    request {"argv": [...], "out": PATH, "err": PATH}  ->  {"pid": N}, then {"status": CODE}

A request may also name another program to run in the child, `"entry": "module:function"` (the
function takes argv and returns an exit code), and the server may be started with `--preload
MOD,MOD` to import more modules once, before any fork (`module:function` also calls it once):
lesson 10's framework agents and lesson 11's call processes and workers start this way,
so that each child skips the second it takes to import a framework. Objects with threads (a
framework's runtime) or connections (`bughunt.llm:warm_sdk` builds and closes one SDK client and
opens no socket: one the parent held would be shared by every child) are built in the child only;
the server itself never starts a thread and never opens a connection.

`ForkServerPool.run(argv)` hides all of this behind a `subprocess.CompletedProcess`, one server per
concurrent caller. Set BUGHUNT_FORKSERVER=0 to start every worker as a fresh interpreter instead.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import lifeline
from .interrupts import deferred

BOUNDARY_ENV = "BUGHUNT_BOUNDARY"     # set in every process behind lesson 9's boundary


def _entry(name: str):
    """`module:function` -> the function (imported in the server, before the fork, if preloaded)."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def serve_forks(preload: tuple[str, ...] = ()) -> None:
    """The server loop: fork one worker per request, report its pid and its exit status."""
    from . import worker          # imported once, here, before any fork
    for name in preload:          # "module", or "module:function" to also call it once
        if ":" in name:
            _entry(name)()
        else:
            importlib.import_module(name)

    worker.warm_up()              # and run once, so that children start where a second run does

    # Every object imported so far is moved out of the garbage collector's reach, and children
    # never collect: a child's collector would otherwise touch every page it shares with this
    # parent and copy it (copy-on-write), which costs more than the whole run of a worker.
    gc.collect()
    gc.freeze()

    # Ctrl-C or a notebook kernel's interrupt is for the caller, not for this helper: it ends
    # when its caller closes its stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDONLY)
    for line in sys.stdin.buffer:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:                                   # the child: a worker process
            code = 1
            try:
                os.dup2(devnull, 0)
                for fd, path in ((1, request["out"]), (2, request["err"])):
                    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.dup2(target, fd)
                    os.close(target)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                gc.disable()                           # a short life: nothing to collect
                if "entry" in request:
                    code = _entry(request["entry"])(request["argv"])
                else:
                    code = worker.main(request["argv"], prog="python -m bughunt.worker")
            except SystemExit as e:                    # argparse errors exit this way
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:                      # a crash of the worker is its own result
                import traceback
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        try:
            os.write(1, (json.dumps({"pid": pid}) + "\n").encode())
            _, status = os.waitpid(pid, 0)
            os.write(1, (json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
                     .encode())
        except OSError:               # the caller is gone (its pipe is closed): end quietly
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return


#: How long a fork server may take to import, warm up and fork its first child.
START_TIMEOUT_S = 300.0


WAIT_SLICE_S = 0.25         # the longest a signal waits for the main thread (`_reply`)


class ForkServer:
    """One server process; used by one caller at a time."""

    def __init__(self, env: dict[str, str] | None = None, preload: tuple[str, ...] = ()):
        # Unbuffered replies: select() must see every line the server wrote, not one a buffer
        # already swallowed. A session of its own keeps terminal signals for the caller; behind
        # the boundary of lesson 9 (which has no terminal) it stays in its caller's process
        # group instead, so that ending that group ends the server and its workers too. `env`
        # may put another copy of the package first on PYTHONPATH (lesson 8's mutants).
        extra = ["--preload", ",".join(preload)] if preload else []
        self.tmp = tempfile.TemporaryDirectory(prefix="bughunt-fork-")
        self.out, self.err = Path(self.tmp.name) / "out", Path(self.tmp.name) / "err"
        # The server's temp files (its warm-up run, Python's first probe of the temp dir) go in
        # this directory, which `close` and `kill` remove: a server killed while it warms up
        # leaves nothing in the caller's TMPDIR.
        env = {**(os.environ if env is None else env), "TMPDIR": self.tmp.name}
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "bughunt.forkserver", *extra],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         bufsize=0, env=env,
                                         start_new_session=BOUNDARY_ENV not in os.environ)
        except BaseException:
            self.tmp.cleanup()
            raise
        self.own_group = BOUNDARY_ENV not in os.environ
        self.worker: int | None = None      # the pid of the worker running now
        # The server ends when its caller closes its stdin, even by dying; its scratch directory
        # is the caller's, so a caller killed by SIGKILL leaves it to the lifeline. Behind the
        # boundary, the boundary's supervisor ends the server with its caller's group instead.
        if self.own_group:
            lifeline.watch_group(self.proc.pid)
            lifeline.watch_dir(self.tmp.name)

    def _reply(self, timeout: float | None) -> dict:
        # Waited for in short slices: a SIGINT the kernel hands to another thread of this
        # process (kill(2) picks any thread that does not block it) only sets Python's flag, and
        # the main thread acts on it when its select() returns, so within a slice, not after the
        # whole timeout (a notebook's Ctrl-C during a 60 s model call).
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.proc.stdout], [], [],
                                        WAIT_SLICE_S if left is None else min(left, WAIT_SLICE_S))
            if ready:
                break
            if left is not None and left <= WAIT_SLICE_S:
                raise TimeoutError
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the fork server died")
        return json.loads(line)

    def run(self, argv: list[str], timeout: float = 120,
            entry: str | None = None) -> subprocess.CompletedProcess:
        """Run `argv` in a forked child (the worker, or `entry` "module:function" if given).

        `timeout` is the child's: it starts when the child exists. A new server first imports
        and warms up (a second or more with lesson 10's frameworks), which is not the child
        running too long; it has START_TIMEOUT_S to answer with the child's pid.
        """
        request = {"argv": argv, "out": str(self.out), "err": str(self.err)}
        if entry is not None:
            request["entry"] = entry
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        try:
            pid = self.worker = self._reply(START_TIMEOUT_S)["pid"]
        except TimeoutError:
            raise RuntimeError(f"the fork server did not start a child in {START_TIMEOUT_S:g} s") \
                from None
        try:
            status = self._reply(timeout)["status"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._reply(None)
            raise subprocess.TimeoutExpired(argv, timeout) from None
        finally:
            self.worker = None
        # read as `subprocess.run(text=True, errors="replace")` would: a store may print bytes
        return subprocess.CompletedProcess(argv, status, self.out.read_text(errors="replace"),
                                           self.err.read_text(errors="replace"))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        self.tmp.cleanup()
        self._released()

    def _released(self) -> None:
        lifeline.release_group(self.proc.pid)
        lifeline.release_dir(self.tmp.name)

    def kill(self) -> None:
        """SIGKILL the server and every worker it forked (its process group), now."""
        if not self.own_group:           # in its caller's group: the worker, then the server
            for pid in (self.worker, self.proc.pid):
                if pid:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            self.proc.wait()
            self.tmp.cleanup()
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        # Its workers are now orphans dying of the same SIGKILL: wait (briefly) until none of
        # the group runs any more, so that nothing of this server outlives the call.
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and group_running(self.proc.pid):
            time.sleep(0.002)
        self.tmp.cleanup()
        self._released()


def group_running(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs.

    A killed worker whose parent (the server) is dead waits, a zombie, until init reaps it, and
    init takes its time: a second or more in a container or VM, which made Ctrl-C take that long.
    A zombie has already closed its files and dropped its locks (exit(2)), so where /proc says
    which processes are zombies (Linux) they count as gone; elsewhere only a group that no longer
    exists does.
    """
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not os.path.exists("/proc/self/stat"):
        return True
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue                      # gone meanwhile
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state not in (b"Z", b"X"):
            return True
    return False


class ForkServerPool:
    """Idle servers, handed out to concurrent callers; one more is started when all are busy."""

    def __init__(self, env: dict[str, str] | None = None, preload: tuple[str, ...] = ()):
        self.env = env
        self.preload = tuple(preload)
        self._idle: queue.SimpleQueue[ForkServer] = queue.SimpleQueue()
        self._all: list[ForkServer] = []
        self._lock = threading.Lock()
        self._killed = False
        atexit.register(self.close)

    def run(self, argv: list[str], timeout: float = 120,
            entry: str | None = None) -> subprocess.CompletedProcess:
        try:
            server = self._idle.get_nowait()
        except queue.Empty:
            with self._lock:
                if self._killed:
                    raise RuntimeError("the fork servers were stopped")
                with deferred():     # no interrupt between "it exists" and "the pool knows it"
                    server = ForkServer(self.env, self.preload)
                    self._all.append(server)
        try:
            result = server.run(argv, timeout, entry)
        except BaseException:
            # A server in an unknown state is not reused, and is killed with its worker, not
            # closed: closing waits for the worker to end, which an interrupted caller (a
            # notebook's Ctrl-C during a slow worker) must not.
            server.kill()
            raise
        self._idle.put(server)
        return result

    def close(self) -> None:
        with self._lock:
            servers, self._all = self._all, []
        for server in servers:
            try:
                server.close()
            except Exception:
                pass

    def kill(self) -> None:
        """Kill every server and its workers (an interrupted sweep); the pool is then empty."""
        with self._lock:
            self._killed = True
            servers, self._all = self._all, []
        for server in servers:
            server.kill()


def enabled() -> bool:
    return os.environ.get("BUGHUNT_FORKSERVER", "1") != "0" and hasattr(os, "fork")


if __name__ == "__main__":
    modules = sys.argv[2].split(",") if sys.argv[1:2] == ["--preload"] else []
    serve_forks(tuple(m for m in modules if m))
