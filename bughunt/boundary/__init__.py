"""Learner code behind one boundary (lesson 9): a child process the lab controls.

Every path that runs a learner's store goes through here: the grader (`bughunt.grader`),
`python -m bughunt conformance --store`, `run --store` and `sweep --store`, and lesson 9's panel
(which grades through the grader). The store never runs in the caller's process:

    with Boundary("/abs/my_store.py:MyStore") as b:
        ended = b.call("bughunt.boundary.jobs:conform_job", {...}, timeout=30)

- **A child process the lab controls.** `python -m bughunt.boundary` (`child.py`), started by a small
  supervisor (`supervisor.py`) in a session of its own, in a process group of its own.
- **A private channel.** Jobs and their results, and where the store is ("begin
  MyStore.commit..."), travel over a socket pair the lab opened and passed by descriptor (which
  the child moves to a number nothing names); never the child's stdout or stderr. Those are
  the store's: captured here and shown under the verdict (`Printed`: the first lines, then
  "... N more lines").
- **Limits.** A wall-clock limit per call into the store (`Limits.operation_s`) and per job
  (`timeout`), each ending in a verdict that names it and what the store was doing; a memory cap
  (RLIMIT_AS on Linux; macOS accepts the limit and does not enforce it, so there the time limits
  stop a store that grows without end), a CPU-time cap and a cap on any one file's size.
- **The end takes everything.** The supervisor kills the child's process group; on Linux it is a
  child subreaper (prctl PR_SET_CHILD_SUBREAPER), so a process the store double-forked or moved
  to a session of its own is re-parented to it and killed too. When `call` returns after ending
  the child, and when the boundary closes, nothing the store started is running, and the
  boundary's temporary folder is gone. On macOS, a process the store moved to a session of its
  own escapes (there is no subreaper there).
- **The fence** (`fence.py`): an audit hook in every process of the boundary that refuses what a
  store has no business doing, names it and logs it here; and, on Linux with Landlock
  (`landlock.py`), the kernel, which the child asks before it imports the store to refuse every
  write outside the boundary's folder and its run directories, TCP, and signals outside.
- **A kill is a new process** (`pristine.py`): the conformance suite loads every crash state in a
  process that never ran the store, as a resume after a real kill -9 would.
- **Results the store cannot forge**: the channel's descriptor is held in a closure, not a module
  attribute, and every frame carries the unguessable number of the request it answers; a frame
  that answers no request ends the job with "the store wrote to the lab's channel".

With the kernel's half it holds against a store written to get out, as far as writing, processes'
effects, the network and signals go; without it (macOS, an older kernel) it guards against
accidents only, and the grader's verdict says so. `fence.py` lists what each layer cannot stop.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import fence as _fence
from .channel import Channel, ChannelDamaged

SUPERVISOR = str(Path(__file__).with_name("supervisor.py"))
PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
SITECUSTOMIZE = ("# Written by bughunt.boundary: fence this process before any other code runs\n"
                 "# (and import the guard once, so that a fork server's workers inherit it).\n"
                 "import bughunt.boundary.fence as _fence\n"
                 "if _fence.install_from_env():\n"
                 "    import bughunt.boundary.child\n"
                 "_fence.add_learner_dirs()\n")


@dataclass(frozen=True)
class Limits:
    """What the store's process may use. `operation_s`: one call into the store (its import,
    `__init__`, a `load`, a `commit`...); `memory_bytes`: address space per process (Linux);
    `file_bytes`: the size of any one file; `cpu_s`: CPU seconds per process, the last backstop."""

    operation_s: float = 10.0
    memory_bytes: int = 1 << 30
    file_bytes: int = 256 << 20
    cpu_s: int = 600


# --- what the store printed ------------------------------------------------------------------------

HEAD_LINES = 8
LINE_CHARS = 160


class _Capture:
    """One stream of the child: the first lines kept, the rest counted, nothing held beyond."""

    def __init__(self, forward: int | None = None):
        self.head: list[str] = []
        self.lines = 0
        self.partial = b""
        self.forward = forward
        self.bytes = 0

    def feed(self, data: bytes) -> None:
        if self.forward is not None:
            try:
                os.write(self.forward, data)
            except OSError:
                pass
        self.bytes += len(data)
        newlines = data.count(b"\n")
        if len(self.head) < HEAD_LINES:
            text = self.partial + data
            *whole, self.partial = text.split(b"\n")
            for raw in whole:
                if len(self.head) < HEAD_LINES:
                    self.head.append(_line(raw))
            if len(self.partial) > 4096:
                self.partial = self.partial[:4096]
        else:
            self.partial = data[data.rfind(b"\n") + 1:][-4096:] if newlines else (
                self.partial + data)[-4096:]
        self.lines += newlines

    def close(self) -> None:
        if self.partial:
            self.lines += 1
            if len(self.head) < HEAD_LINES:
                self.head.append(_line(self.partial))
            self.partial = b""


#: Control characters a store prints (NUL, ESC, a carriage return, C1's CSI...), shown escaped
#: under the verdict: raw, they could move the cursor and paint over the verdict itself.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7f, *range(0x80, 0xa0)) if c != 0x09}


def _line(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").rstrip("\r").translate(_CONTROL)
    return text if len(text) <= LINE_CHARS else text[:LINE_CHARS - 1] + "…"


@dataclass(frozen=True)
class Printed:
    """What the store's process wrote on its stdout and its stderr: the first lines of each and
    how many lines there were in all."""

    stdout: tuple[str, ...] = ()
    stdout_lines: int = 0
    stderr: tuple[str, ...] = ()
    stderr_lines: int = 0

    def __bool__(self) -> bool:
        return bool(self.stdout_lines or self.stderr_lines)

    def __add__(self, other: "Printed") -> "Printed":
        return Printed(stdout=(self.stdout + other.stdout)[:HEAD_LINES],
                       stdout_lines=self.stdout_lines + other.stdout_lines,
                       stderr=(self.stderr + other.stderr)[:HEAD_LINES],
                       stderr_lines=self.stderr_lines + other.stderr_lines)

    def lines(self) -> list[str]:
        out = []
        for name, head, total in (("stdout", self.stdout, self.stdout_lines),
                                  ("stderr", self.stderr, self.stderr_lines)):
            if not total:
                continue
            out.append(f"What the store printed on {name} ({total:,} line"
                       f"{'' if total == 1 else 's'}):")
            out += [f"  | {line}" for line in head]
            if total > len(head):
                out.append(f"  … {total - len(head):,} more line"
                           f"{'' if total - len(head) == 1 else 's'}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_json(self) -> dict:
        return {"stdout": list(self.stdout), "stdout_lines": self.stdout_lines,
                "stderr": list(self.stderr), "stderr_lines": self.stderr_lines}


# --- how a call ended --------------------------------------------------------------------------

@dataclass(frozen=True)
class Ended:
    """How one job in the boundary ended, from what happened.

    how: "returned" (result), "stopped" (the lab stopped the store: `record`), "raised" (the job
    raised: `error`), "exit" (the child exited with `code` before answering), "signal" (killed by
    signal `signal`), "sigstop" (the child stopped itself), "operation" (one call into the store
    exceeded `Limits.operation_s`), "timeout" (the job exceeded its time), "channel" (the private
    channel was damaged), "interrupted" (Ctrl-C or SIGTERM in the child).
    """

    how: str
    job: str
    result: dict | None = None
    record: dict | None = None
    error: dict | None = None
    code: int | None = None
    signal: int | None = None
    where: str | None = None           # the call into the store open at the end
    at: str | None = None              # what the lab was doing then ("at the crash state ...")
    points: tuple[str, ...] = ()       # the sweep's crash points running at the end
    finished_points: int = 0
    limit_s: float | None = None
    seconds: float = 0.0
    events: tuple[dict, ...] = ()      # the fence's log of this job: refusals, stops, notes
    printed: Printed = Printed()
    dirs: dict = field(default_factory=dict)   # run directory -> crash point (sweeps)
    store_name: str | None = None      # the store class's `name`, once it was loaded

    @property
    def ok(self) -> bool:
        return self.how == "returned"


@dataclass(frozen=True)
class StoreProblem:
    """Something that stopped the lab from judging the store, in one sentence.

    kind: "spec" (no such file, no FILE.py:Class), "load" (the file does not import or has no such
    class), "refused" (the fence refused an operation), "exit" (the store ended its process),
    "signal" (its process died by a signal), "sigstop", "timeout" (a call or a job never
    returned), "memory" (MemoryError), "returns" (a method returned what the contract does not
    say), "exception" (the store raised where the lab cannot go on), "channel" (the store wrote
    to the lab's channel), "name" (it named a file with bytes that are not text), "patched" (it
    replaced a function of the lab's in its process: json.dumps), "lab" (the lab itself failed),
    "interrupted". (What it prints is never a problem: bytes that are not UTF-8 are shown with
    replacement characters.)
    """

    kind: str
    message: str
    loading: bool = False             # it happened while the store's file was imported


def _in(where: str | None, at: str | None) -> str:
    """ "in MyStore.commit (event 3: ...), at the crash state ..." or a part of it, or "". """
    parts = [f"in {where}" if where else "", at or ""]
    return ", ".join(p for p in parts if p)


def _place(event: dict, ended: Ended) -> str:
    """Where the fence saw it: the call into the store, what the lab was doing, the crash
    point's run of a sweep, the store's line."""
    where = event.get("where") or ""
    point = ended.dirs.get(event.get("dir") or "")
    text = _in(where, event.get("at")) or "outside any call into the store (a thread, a finalizer?)"
    if point:
        text += f", in the sweep's run for crash point {point}"
    if event.get("line"):
        text += f" ({event['line']})"
    return text


def problem_of(ended: Ended, tidy=lambda s: s) -> StoreProblem | None:
    """The first thing wrong with how `ended` went, as a `StoreProblem`, or None (it returned and the
    fence logged nothing against the store). A refusal of the fence comes first: it is what the
    store did, whatever it did next."""
    refusals = [e for e in ended.events if e.get("kind") == "refused"]
    if refusals:
        e = refusals[0]
        return StoreProblem("refused", tidy(f"refused: the store tried to {_short(tidy(e['what']))}, "
                                       f"{_place(e, ended)}"), _loading(e.get("where")))
    notes = [e for e in ended.events if e.get("kind") == "note"]
    how = ended.how
    lost = [e for e in ended.events if e.get("kind") == "lost"]
    if lost and how in ("exit", "channel"):
        at = _in(ended.where, ended.at)
        what = lost[0].get("what") or ""
        what = (what if what.startswith("changed") else "closed or replaced the lab's channel to "
                "its process (os.close or os.dup2 on a descriptor it did not open)")
        return StoreProblem("channel", tidy(f"the store {what}{', ' + at if at else ''}; the lab "
                                            "stopped it"), _loading(ended.where))
    if how == "returned":
        other = [e for e in ended.events if e.get("kind") in ("stopped", "returns")]
        return _from_record(other[0], ended, tidy) if other else None
    if how == "stopped":
        return _from_record(ended.record or {}, ended, tidy)
    where = ended.where
    at = _in(where, ended.at)
    if how == "raised":
        err = ended.error or {}
        text = f"{err.get('type')}: {err.get('text')}" if err.get("text") else err.get("type")
        if err.get("spec"):
            message = re.sub(r"^--store \S+: ", "", err.get("text", ""))
            return StoreProblem("load", tidy(message), True)
        if err.get("line"):
            who = err.get("where") or where or "the store"
            when = f", {err['at']}" if err.get("at") else ""
            return StoreProblem("exception", tidy(f"{who} raised {text} ({err['line']}){when}"),
                           _loading(who))
        return StoreProblem("lab", tidy(f"the lab's job {ended.job} failed: {text}"))
    if how == "exit":
        if where:
            return StoreProblem("exit", tidy(f"the store ended its process with os._exit({ended.code})"
                                        f", {at} (its process exited with status {ended.code} "
                                        "without raising SystemExit)"), _loading(where))
        return StoreProblem("lab", tidy(f"the process running the store exited with status "
                                   f"{ended.code} outside any call into the store"))
    if how == "signal":
        name = _signame(ended.signal)
        mine = [n for n in notes if n["what"].startswith(f"sent {name}")]
        if mine:
            return StoreProblem("signal", tidy(f"the store {mine[0]['what']}, "
                                          f"{_place(mine[0], ended)}"),
                           _loading(mine[0].get("where")))
        if ended.signal in TIMERS:
            return StoreProblem("signal", tidy(
                f"the process running the store died by {name}{', ' + at if at else ''}: a "
                "timer of its own process (signal.setitimer, signal.alarm: the lab sets none) "
                "that nothing handled"), _loading(where))
        cause = ("a crash in C code" if ended.signal in (signal.SIGSEGV, signal.SIGBUS,
                                                         signal.SIGABRT, signal.SIGILL)
                 else "its CPU-time limit" if ended.signal == signal.SIGXCPU
                 else "a signal from outside the lab (the OOM killer sends SIGKILL)")
        return StoreProblem("signal", tidy(f"the process running the store died by {name}"
                                      f"{', ' + at if at else ''}: {cause}"), _loading(where))
    if how == "sigstop":
        mine = [n for n in notes if "SIGSTOP" in n["what"] or "SIGTSTP" in n["what"]]
        who = (f"the store stopped its own process ({_signame(ended.signal)}), "
               f"{_place(mine[0], ended)}" if mine else
               f"the process running the store was stopped ({_signame(ended.signal)})"
               f"{', ' + at if at else ''}")
        return StoreProblem("sigstop", tidy(f"{who}; the lab ended it"), _loading(where))
    if how == "operation":
        when = f" ({ended.at})" if ended.at else ""
        return StoreProblem("timeout", tidy(
            f"{where or 'a call into the store'} did not return within {ended.limit_s:g} s"
            f"{when}: a loop that never ends, or a wait for something that never comes? The lab "
            "stopped it"), _loading(where))
    if how == "timeout":
        if ended.points:
            where_ = (f"the runs at {', '.join(ended.points)} had not finished; "
                      f"{ended.finished_points} crash point"
                      f"{'' if ended.finished_points == 1 else 's'} had")
        else:
            where_ = f"it was {at}" if at else "it was in the lab's own code"
        return StoreProblem("timeout", tidy(f"the {_job_words(ended.job)} did not finish within "
                                       f"{ended.limit_s:g} s ({where_}); the lab stopped it"),
                       _loading(where))
    if how == "channel":
        return StoreProblem("channel", tidy(f"the store wrote to the lab's channel"
                                       f"{', ' + at if at else ''} (a frame that answers no "
                                       "request of the lab's, or a descriptor it did not open); "
                                       "the lab stopped it"), _loading(where))
    if how == "interrupted":
        mine = [n for n in notes if n["what"].startswith(("sent SIGTERM", "sent SIGINT"))]
        if mine:                       # the store's own os.kill, not the lab's Ctrl-C or SIGTERM
            return StoreProblem("signal", tidy(f"the store {mine[0]['what']}, "
                                          f"{_place(mine[0], ended)}"),
                           _loading(mine[0].get("where")))
        return StoreProblem("interrupted", "interrupted")
    return StoreProblem("lab", f"the lab's job {ended.job} ended as {how}")


def _short(what: str, limit: int = 240) -> str:
    """What the store tried, cut (after the lab's paths are gone from it) to a sentence's length."""
    return what if len(what) <= limit else what[:limit - 2] + "…)"


def _signame(signum: int | None) -> str:
    try:
        return signal.Signals(signum).name
    except (ValueError, TypeError):
        return f"signal {signum}"


def _loading(where: str | None) -> bool:
    return bool(where) and where.startswith("importing ")


def _job_words(job: str) -> str:
    name = job.rpartition(":")[2].strip("_")
    return {"conform_job": "conformance suite", "graded_suite_job": "conformance suite",
            "sweep_job": "sweep", "worker_job": "run"}.get(name, f"job {name}")


def _from_record(record: dict, ended: Ended, tidy) -> StoreProblem:
    kind = record.get("kind")
    loading = _loading(record.get("where"))
    if kind == "refused":
        return StoreProblem("refused", tidy(f"refused: the store tried to "
                                       f"{_short(tidy(record['what']))}, "
                                       f"{_place(record, ended)}"), loading)
    if kind == "stopped":
        how = record.get("how")
        what = record.get("what", "")
        return StoreProblem({"memory": "memory", "exit": "exit", "patched": "patched"}.get(
                                how, "exception"),
                       tidy(f"the store {what}, {_place(record, ended)}"), loading)
    if kind == "note":
        return StoreProblem("signal", tidy(f"the store {record.get('what')}, "
                                      f"{_place(record, ended)}"), loading)
    if kind == "returns":
        return StoreProblem("returns", tidy(record.get("what", "")), loading)
    if kind in ("timeout", "exit", "signal", "channel", "name"):
        return StoreProblem(kind, tidy(record.get("sentence") or record.get("what", "")), loading)
    return StoreProblem("lab", tidy(record.get("sentence") or str(record)), loading)


# --- the boundary ----------------------------------------------------------------------------------

#: Signals only a process's own timers send (the lab sets none).
TIMERS = tuple(getattr(signal, n) for n in ("SIGALRM", "SIGVTALRM", "SIGPROF")
               if hasattr(signal, n))

#: What a frame on the channel that answers no request of the lab's means.
FORGED = "a frame that answers no request of the lab's (the store wrote to the lab's channel)"

class Boundary:
    """A temporary folder, a supervisor, and a child process running jobs on a learner's store.

    `store`: the store spec the jobs load (`/abs/path/file.py:ClassName`), or None; its folder is
    the learner's code (the fence's "store's files") and goes on the child's import path, so one
    store file can import another. `writable`: more directories a store may be given as its run
    directory (a run's --dir, a sweep's --work-dir). `paths`: more import paths (tests).
    `stdin`: a descriptor for the child's stdin (default: none). `stream`: forward the child's
    stdout and stderr to these descriptors as they come (the `run` command), as well as count them.
    `cwd`: the child's working directory (default: an empty one of the boundary's).
    """

    def __init__(self, store: str | None = None, *, limits: Limits = Limits(), writable=(),
                 paths=(), stdin: int | None = None, stream: tuple[int, int] | None = None,
                 cwd: str | None = None, connect=()):
        self.store, self.limits, self.cwd = store, limits, cwd
        self.connect = [int(p) for p in connect]
        self.kernel_abi: int | None = None     # the Landlock ABI the child reported (0: none)
        self._made: list[str] = []
        file = store.rpartition(":")[0] if store and ":" in store else None
        self.store_dir = str(Path(file).resolve().parent) if file else None
        self.writable = [str(Path(w).resolve()) for w in writable]
        self.paths = [str(p) for p in paths]
        self.stdin, self.stream = stdin, stream
        self.root: Path | None = None
        self._proc = None

    # - set-up and tear-down

    def __enter__(self) -> "Boundary":
        from ..interrupts import deferred

        # An interrupt (or an error) before `with` holds the boundary would leave its folder:
        # `__exit__` runs only once `__enter__` has returned.
        try:
            with deferred():
                self.root = Path(tempfile.mkdtemp(prefix="bughunt-boundary-", dir=_ram_dir()))
            self.real_root = os.path.realpath(self.root)
            for d in ("tmp", "out", "cwd", "hook", "tmp/home"):
                (self.root / d).mkdir()
            # XDG_RUNTIME_DIR must exist, be the user's and mode 0700 (the XDG Base Directory
            # specification): programs use it, they do not make it. The other XDG folders they
            # make themselves, as a home's first use does.
            runtime = self.root / "tmp" / "home" / ".run"
            runtime.mkdir(mode=0o700)
            runtime.chmod(0o700)                 # whatever the umask took away
            for w in self.writable:              # the kernel's rules need a directory there
                missing = []
                path = Path(w)
                while not path.exists() and path != path.parent:
                    missing.append(path)
                    path = path.parent
                for d in reversed(missing):
                    try:
                        d.mkdir()
                        self._made.append(str(d))
                    except OSError:
                        break
            (self.root / "hook" / "sitecustomize.py").write_text(SITECUSTOMIZE)
            self.log = self.root / "out" / "fence.jsonl"
            self.log.touch()
            self._log_offset = 0
            # The store's folder is not among them: the sitecustomize puts it last on the import
            # path (`fence.add_learner_dirs`), so that a file beside the store is imported only
            # when the store imports it, never in place of a module the lab imports.
            paths = [str(self.root / "hook"), PACKAGE_PARENT, *self.paths]
            if os.environ.get("PYTHONPATH"):
                paths.append(os.environ["PYTHONPATH"])
            limits = {"memory_bytes": self.limits.memory_bytes,
                      "file_bytes": self.limits.file_bytes, "cpu_s": self.limits.cpu_s}
            home = self.root / "tmp" / "home"
            self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("XDG_")},
                        "PYTHONPATH": os.pathsep.join(paths),
                        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
                        # no working directory on the import path (python -P): a json.py or a
                        # bughunt.py in the folder a run starts from is not the lab's
                        "PYTHONSAFEPATH": "1",
                        "TMPDIR": str(self.root / "tmp"), "BUGHUNT_RAM_DIR": "",
                        "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                        "XDG_CACHE_HOME": str(home / ".cache"),
                        "XDG_DATA_HOME": str(home / ".local" / "share"),
                        "XDG_STATE_HOME": str(home / ".local" / "state"),
                        "XDG_RUNTIME_DIR": str(runtime),
                        _fence.ENV: _fence.settings(
                            roots=[self.root, *self.writable], default_dir=self.root / "tmp",
                            learner_dirs=[self.store_dir] if self.store_dir else [],
                            log=self.log, limits=limits,
                            kernel={"dirs": [str(self.root / "tmp"), *self.writable],
                                    "files": [os.devnull], "append": [str(self.log)],
                                    "ports": self.connect})}
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """End the child and everything it started, then remove the temporary folder."""
        from ..interrupts import deferred

        with deferred():
            if self._proc is not None:
                self._end("stop")
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
                self.root = None
            for d in reversed(self._made):   # made for the kernel's rules, and still empty
                try:
                    os.rmdir(d)
                except OSError:
                    pass
            self._made = []

    def tidy(self, text):
        """`text` without the boundary's temporary paths and the store's folder."""
        if not isinstance(text, str) or self.root is None:
            return text
        for root in {str(self.root), self.real_root}:
            text = re.sub(re.escape(root) + r"(?:/[^/\s'\":,()]+)*/", "", text)
        if self.store_dir:
            text = text.replace(self.store_dir + os.sep, "")
        return text

    # - the child

    def _start(self) -> None:
        from ..interrupts import deferred

        ours, theirs = socket.socketpair()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        passed = [theirs.fileno(), out_w, err_w] + ([self.stdin] if self.stdin is not None else [])
        config = {"argv": [sys.executable, "-m", "bughunt.boundary", str(theirs.fileno())],
                  "env": self.env, "cwd": self.cwd or str(self.root / "cwd"), "grace": 0.3,
                  "remove": str(self.root),
                  "fds": {"stdout": out_w, "stderr": err_w, "pass": [theirs.fileno()],
                          "stdin": self.stdin}}
        # No interrupt between "it exists" and "we hold it", nor before the state that `close`
        # needs is complete and the supervisor has its orders (which name the folder it
        # removes): an interrupt acted on right after the start left a supervisor without
        # orders (its traceback on stderr) and the folder behind.
        with deferred():
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", SUPERVISOR], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=None, pass_fds=passed, bufsize=0,
                start_new_session=True, cwd=str(self.root / "cwd"))
            for fd in (out_w, err_w):
                os.close(fd)
            theirs.close()
            self._proc.stdin.write((json.dumps(config) + "\n").encode())
            self._channel = Channel(ours)
            self._pipes = {out_r: "stdout", err_r: "stderr"}
            self._sup_buffer = b""
            self._child_pid = None
            self._child_alive = True
            self._gone = False
            self._stopped_signal = None
            self._exit_code = None
            for fd in (out_r, err_r):
                os.set_blocking(fd, False)
            self._selector = selectors.DefaultSelector()
            self._selector.register(self._channel.sock, selectors.EVENT_READ, "channel")
            self._channel_open = True
            for fd in self._pipes:
                self._selector.register(fd, selectors.EVENT_READ, "pipe")
            self._selector.register(self._proc.stdout, selectors.EVENT_READ, "supervisor")

    def _supervisor_said(self) -> None:
        chunk = os.read(self._proc.stdout.fileno(), 4096)
        if not chunk:
            self._gone = True
            self._child_alive = False
            self._selector.unregister(self._proc.stdout)
            return
        self._sup_buffer += chunk
        while b"\n" in self._sup_buffer:
            line, self._sup_buffer = self._sup_buffer.split(b"\n", 1)
            msg = json.loads(line)
            if msg["t"] == "started":
                self._child_pid = msg["pid"]
            elif msg["t"] == "stopped":
                self._stopped_signal = msg["signal"]
            elif msg["t"] == "exit":
                self._child_alive = False
                self._exit_code = msg["code"]
            elif msg["t"] == "gone":
                self._gone = True
                self._child_alive = False

    def _read_pipe(self, fd: int, captures: dict) -> None:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not data:
            self._selector.unregister(fd)
            os.close(fd)
            del self._pipes[fd]
            return
        captures[self._pipes[fd]].feed(data)

    def _pump(self, timeout: float, captures: dict, on_message) -> bool:
        """Wait up to `timeout` s for anything from the child or the supervisor, and handle it;
        False if nothing came."""
        ready = self._selector.select(max(0.0, timeout))
        for key, _ in ready:
            if key.data == "channel":
                alive = self._channel.feed()
                for message in self._channel.messages():
                    on_message(message)
                if not alive:
                    self._selector.unregister(self._channel.sock)
                    self._channel_open = False
            elif key.data == "pipe":
                self._read_pipe(key.fd, captures)
            else:
                self._supervisor_said()
        return bool(ready)

    def _end(self, how: str, captures: dict | None = None) -> None:
        """Ask the supervisor to end the child ("stop": SIGTERM, a grace, SIGKILL; "kill" at
        once) and everything it started; wait until it says they are gone."""
        captures = captures or {"stdout": _Capture(), "stderr": _Capture()}
        proc = self._proc
        try:
            proc.stdin.write(f"{how}\n".encode())
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        deadline = time.monotonic() + 7
        while not self._gone and time.monotonic() < deadline:
            try:
                self._pump(0.05, captures, lambda m: None)
            except (ChannelDamaged, OSError, ValueError):
                pass
        if not self._gone:                       # the supervisor itself is stuck: end it all
            for group in (proc.pid, self._child_pid):
                if group:
                    try:
                        os.killpg(group, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
        proc.wait()
        # What is still in the pipes (a store's last words) is read, then everything is closed.
        deadline = time.monotonic() + 0.5
        while self._pipes and time.monotonic() < deadline:
            ready = self._selector.select(0.05)
            for key, _ in ready:
                if key.data == "pipe":
                    self._read_pipe(key.fd, captures)
            if not ready:
                break
        for fd in list(self._pipes):
            os.close(fd)
        self._pipes = {}
        self._selector.close()
        self._channel.close()
        proc.stdout.close()
        self._proc = None

    # - a job

    def call(self, job: str, args: dict | None = None, *, timeout: float,
             on_status=None) -> Ended:
        """Run `job` ("module:function", called with a Context and `args`) in the child; wait
        for its answer, at most `timeout` seconds (and `Limits.operation_s` per call into the
        store). The answer, or how it ended instead, as an `Ended`."""
        if self.root is None:
            raise RuntimeError("the boundary is closed (use it as a context manager)")
        if self._proc is None:
            self._start()
        t0 = time.monotonic()
        deadline = t0 + timeout
        captures = {"stdout": _Capture(self.stream[0] if self.stream else None),
                    "stderr": _Capture(self.stream[1] if self.stream else None)}
        open_calls: list[tuple[str, str, float]] = []
        track = {"state": None, "points": {}, "done": 0, "dirs": {}}
        answer: list[dict] = []

        def on_message(message: dict) -> None:
            # Every frame answers this call's request, by its number; the reply comes once, and
            # last. Anything else was written by someone else: the store.
            if message.get("seq") != seq or answer:
                raise ChannelDamaged(FORGED)
            if message["t"] != "status":
                answer.append(message)
                return
            if "begin" in message:
                open_calls.append((message["begin"], message.get("at") or "",
                                   time.monotonic()))
            elif "end" in message:
                if open_calls:
                    open_calls.pop()
            elif "state" in message:
                track["state"] = message["state"]
            elif "store_name" in message:
                track["store_name"] = message["store_name"]
            elif "fence" in message:
                self.kernel_abi = int((message["fence"] or {}).get("kernel") or 0)
            elif "point" in message:
                if message.get("phase") == "begin":
                    track["points"][message["point"]] = time.monotonic()
                    track["dirs"][os.path.realpath(message["dir"])] = message["point"]
                else:
                    track["points"].pop(message["point"], None)
                    track["done"] += 1
            if on_status is not None:
                on_status(message)

        how, extra = None, {}
        seq = secrets.token_hex(16)      # a number the store cannot guess
        try:
            self._channel.send({"t": "job", "job": job, "args": args or {}, "seq": seq})
            while how is None:
                now = time.monotonic()
                op_deadline = open_calls[-1][2] + self.limits.operation_s if open_calls else None
                wait = min(d for d in (deadline, op_deadline) if d is not None) - now
                try:
                    self._pump(min(wait, 0.5), captures, on_message)
                except ChannelDamaged as e:
                    how, extra = "channel", {"error": {"text": str(e)}}
                    self._end("kill", captures)
                    break
                now = time.monotonic()
                if answer:
                    how = answer[0]["t"]
                elif self._stopped_signal is not None:
                    how, extra = "sigstop", {"signal": self._stopped_signal}
                    self._end("kill", captures)
                elif not self._child_alive:
                    try:
                        self._drain_after_exit(captures, on_message)
                    except ChannelDamaged as e:
                        how, extra = "channel", {"error": {"text": str(e)}}
                        self._end("stop", captures)
                        break
                    if answer:
                        how = answer[0]["t"]
                    else:
                        code = self._exit_code
                        how, extra = (("signal", {"signal": -code}) if code is not None and code < 0
                                      else ("exit", {"code": code}))
                    self._end("stop", captures)
                elif op_deadline is not None and now >= op_deadline:
                    how, extra = "operation", {"limit_s": self.limits.operation_s}
                    self._end("kill", captures)
                elif now >= deadline:
                    how, extra = "timeout", {"limit_s": timeout}
                    self._end("kill", captures)
        except BaseException as e:
            from ..interrupts import Interrupted, deferred

            if isinstance(e, Interrupted):
                # The lab's caller says in one sentence that the run stopped and why; what the
                # child says as the supervisor stops it ("terminated") is not forwarded too.
                for c in captures.values():
                    c.forward = None
            if self._proc is not None:
                with deferred():
                    self._end("stop", captures)
            raise
        if how == "interrupted" and self._proc is not None:
            self._end("stop", captures)
        message = answer[0] if answer else {}
        for c in captures.values():
            c.close()
        printed = Printed(tuple(captures["stdout"].head), captures["stdout"].lines,
                          tuple(captures["stderr"].head), captures["stderr"].lines)
        if how in ("result", "raised", "stopped") and self._proc is not None and (
                not self._child_alive):
            self._end("stop", captures)
        return Ended(
            how={"result": "returned"}.get(how, how), job=job,
            result=message.get("result"), record=message.get("record"),
            error=message if how == "raised" else extra.get("error"),
            code=extra.get("code"), signal=extra.get("signal"),
            where=open_calls[-1][0] if open_calls else None,
            at=(open_calls[-1][1] if open_calls else None) or track["state"],
            points=tuple(sorted(track["points"], key=track["points"].get)),
            finished_points=track["done"], limit_s=extra.get("limit_s"),
            seconds=time.monotonic() - t0, events=tuple(self._new_events()), printed=printed,
            dirs=dict(track["dirs"]), store_name=track.get("store_name"))

    def _drain_after_exit(self, captures, on_message) -> None:
        """The child has exited: read what it sent before it did (half a second at most)."""
        deadline = time.monotonic() + 0.5
        while self._channel_open and time.monotonic() < deadline:
            if not self._pump(0.02, captures, on_message):
                break

    def _new_events(self) -> list[dict]:
        try:
            with open(self.log, "rb") as f:
                f.seek(self._log_offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self._log_offset += end
        out = []
        for line in data[:end].splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"kind": "damaged", "what": line[:120].decode("utf-8", "replace")})
        return out


def _ram_dir() -> str | None:
    from ..experiment import ram_dir
    return ram_dir()
