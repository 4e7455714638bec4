"""The sweep for any adapter: find the crash points, kill at each one, resume, ask three witnesses.

1. **Point discovery.** One clean run is traced: every point it reaches, by stable name and
   occurrence (`ask_model.after#3`, `framework.put.committed#7`), in order, with its page.
2. **A crash run per point**, on a fresh run directory, three real processes:
   a first one killed by a real SIGKILL when it reaches the point, a second one that resumes to
   the end (its final state is the *memory* witness), a third that only reads the framework's
   store back (`rebuild`, the *disk* witness). Each has a timeout: a framework that hangs is
   killed and named in the record, never waited for.
3. **The witnesses.** The bill says how many model calls were paid again (calls beyond what the
   clean run paid for each page) and which pages were never asked about; the tracker says which
   reports were filed twice or never; memory and disk are compared with the clean run's final
   state and with the tracker.

`repeat=N` runs every point N times: frameworks with background writers (LangGraph's default) are
not deterministic point by point, and `varying_points` lists the points whose verdict changed.
Children are forked from a fork server that imported the framework once; framework objects and
threads are built only in the child.
"""

from __future__ import annotations

import atexit
import fnmatch
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from .. import forkserver
from ..experiment import Outcome, default_workers, frame, witnesses_agree
from ..interrupts import Held, as_finished, deferred
from ..world import TRACKER_FILE, Site, Tracker, read_bill, read_reports
from .contract import AdapterError, WorldSettings, adapter_class

Progress = Callable[[int, int], None]
CHILD_ENTRY = "bughunt.frameworks.child:main"
DEFAULT_TIMEOUT = 60.0


# --- settings and records ------------------------------------------------------------------------

@dataclass(frozen=True)
class SweepSettings:
    """One sweep: which adapter, mode and resume style, and the world's key and latency.

    `mode` and `resume` default to the adapter's first (its framework's default mode, its
    documented way to resume).
    """

    framework: str = "fake"
    mode: str | None = None
    resume: str | None = None
    idempotency_key: bool = True
    latency_ms: float = 0.0
    pages: int = 12

    def resolved(self) -> "SweepSettings":
        """These settings with defaults filled in and checked; AdapterError names a bad one."""
        cls = adapter_class(self.framework)
        mode = cls.modes[0] if self.mode is None else self.mode
        resume = cls.resume_styles[0] if self.resume is None else self.resume
        if mode not in cls.modes:
            raise AdapterError(f"--mode {mode!r}: {cls.name} has modes {', '.join(cls.modes)}")
        if resume not in cls.resume_styles:
            raise AdapterError(f"--resume {resume!r}: {cls.name} resumes by "
                               f"{', '.join(cls.resume_styles)}")
        if not (isinstance(self.latency_ms, (int, float)) and 0 <= self.latency_ms <= 10_000):
            raise AdapterError(f"--latency-ms {self.latency_ms!r}: must be 0 to 10000")
        if not (isinstance(self.pages, int) and 1 <= self.pages <= 200):
            raise AdapterError(f"--pages {self.pages!r}: must be 1 to 200")
        return SweepSettings(self.framework, mode, resume, bool(self.idempotency_key),
                             float(self.latency_ms), self.pages)

    def world(self) -> dict:
        return asdict(WorldSettings(self.pages, self.idempotency_key, self.latency_ms))

    def label(self) -> str:
        return (f"{self.framework} {self.mode}, resume {self.resume}, key "
                f"{'on' if self.idempotency_key else 'off'}"
                + (f", latency {self.latency_ms:g} ms" if self.latency_ms else ""))


@dataclass(frozen=True)
class Point:
    """A crash point found in the clean run: a stable name and which occurrence of it."""

    point: str          # "ask_model.after#3"
    name: str           # "ask_model.after"
    occurrence: int     # 3
    order: int          # its position in the clean run's trace, from 1
    page: int           # the page the agent was working on
    kind: str           # "user" (the agent's own code) or "framework" (the framework's writes)


def point_kind(name: str) -> str:
    return "framework" if name.startswith("framework.") else "user"


@dataclass
class CleanRun:
    """The traced clean run: the truth every crash run is compared with."""

    final: dict
    model_calls: int
    calls_per_page: Counter
    tracker_pages: list
    seconds: float
    points: list[Point]
    write_ns: dict = field(default_factory=dict)    # write point name -> durations (ns)


@dataclass(frozen=True, kw_only=True)
class FrameworkRun(Outcome):
    """One crash run of a framework: killed at `point`, resumed, its store read back, witnessed.
    The verdict and "correct" are the lab's (`Outcome`); a framework's run adds where its point
    is, whether the kill happened, the bill per page, and a comparison with the clean run."""

    framework: str
    mode: str
    resume: str
    idempotency_key: bool
    latency_ms: float
    repeat: int
    point: str
    name: str
    occurrence: int
    order: int
    page: int
    kind: str
    killed: bool = False               # died by SIGKILL at the point (else: never reached it)
    redone_model_calls: int | None = None   # calls paid for a page the bill already had
    skipped_pages: int | None = None        # pages the model was never asked about
    disk_state: dict | None = None     # rebuild(): the framework's store read back
    crash_s: float | None = None       # wall time of the killed process
    resume_s: float | None = None      # wall time of the resuming process

    @property
    def reached(self) -> bool:
        return self.killed


# --- child processes -----------------------------------------------------------------------------

class Cancelled(Exception):
    """The sweep was interrupted (Ctrl-C); no further child is started."""


@dataclass
class ChildResult:
    status: int | None        # exit code, negative for a signal; None: timed out and killed
    out: dict | None          # the child's JSON, if it printed one
    stderr: str
    seconds: float


class Children:
    """Starts sweep children (forked from pre-importing servers, or fresh interpreters), each
    with a timeout, and can kill every one of them at once (Ctrl-C)."""

    def __init__(self, preload: tuple[str, ...] = ()):
        self.preload = tuple(preload)
        self.fork = forkserver.enabled()
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        self._servers: list[forkserver.ForkServer] = []
        self._procs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self.cancelled = threading.Event()

    def run(self, job: dict, timeout: float = DEFAULT_TIMEOUT) -> ChildResult:
        if self.cancelled.is_set():
            raise Cancelled
        argv = [json.dumps(job)]
        t0 = time.perf_counter()
        if self.fork:
            status, out, err = self._forked(argv, timeout)
        else:
            status, out, err = self._fresh(argv, timeout)
        seconds = time.perf_counter() - t0
        if self.cancelled.is_set():
            raise Cancelled
        parsed = None
        if status == 0:
            try:
                parsed = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                parsed = None
        return ChildResult(status, parsed, err, seconds)

    def _forked(self, argv, timeout):
        try:
            server = self._idle.get_nowait()
        except queue.Empty:
            with self._lock:
                if self.cancelled.is_set():
                    raise Cancelled from None
                server = forkserver.ForkServer(preload=self.preload)
                self._servers.append(server)
        try:
            done = server.run(argv, timeout, entry=CHILD_ENTRY)
        except subprocess.TimeoutExpired:      # the server killed the child with SIGKILL
            self._retire(server)
            return None, "", ""
        except Exception:
            self._retire(server)
            if self.cancelled.is_set():
                raise Cancelled from None
            raise
        self._idle.put(server)
        return done.returncode, done.stdout, done.stderr

    def _retire(self, server) -> None:
        with self._lock:
            if server in self._servers:
                self._servers.remove(server)
        try:
            server.close()
        except Exception:
            pass

    def _fresh(self, argv, timeout):
        proc = subprocess.Popen([sys.executable, "-m", "bughunt.frameworks.child", *argv],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        with self._lock:
            self._procs.add(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
            return proc.returncode, out, err
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return None, "", ""
        finally:
            with self._lock:
                self._procs.discard(proc)

    def kill_all(self) -> None:
        """Ctrl-C: stop starting children, SIGKILL every child and server now, reap them."""
        self.cancelled.set()
        with self._lock:
            servers, procs = list(self._servers), list(self._procs)
        for server in servers:
            try:
                # The server runs in a session of its own; its children are in its process group.
                os.killpg(server.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for server in servers:
            server.proc.wait()
        for proc in procs:
            proc.wait()

    def close(self) -> None:
        with self._lock:
            servers, self._servers = self._servers, []
        for server in servers:
            try:
                server.close()
            except Exception:
                pass


#: The lab's two frameworks, imported by every shared fork server once (a second each).
FRAMEWORK_MODULES = ("bughunt.frameworks.child", "bughunt.frameworks.langgraph_agent",
                     "bughunt.frameworks.dbos_agent")


def preload_for(settings: SweepSettings) -> tuple[str, ...]:
    """What a fork server should import once: the child, the lab's frameworks, and the adapter's
    module (a learner's adapter may name more in a `preload` attribute)."""
    cls = adapter_class(settings.framework)
    return tuple(dict.fromkeys((*FRAMEWORK_MODULES, cls.__module__,
                                *getattr(cls, "preload", ()))))


_SHARED: dict[tuple, Children] = {}
_SHARED_LOCK = threading.Lock()


def shared_children(preload: tuple[str, ...]) -> Children:
    """Fork servers kept for the life of this process (a notebook kernel runs many sweeps: each
    would otherwise import the frameworks again); a pool that Ctrl-C killed is replaced."""
    with _SHARED_LOCK:
        children = _SHARED.get(preload)
        if children is None or children.cancelled.is_set():
            children = _SHARED[preload] = Children(preload)
        return children


@atexit.register
def close_shared() -> None:
    with _SHARED_LOCK:
        pools = list(_SHARED.values())
        _SHARED.clear()
    for children in pools:
        children.close()


# --- discovery -----------------------------------------------------------------------------------

def job(settings: SweepSettings, run_dir: Path, role: str, target: str | None = None) -> dict:
    return {"role": role, "adapter": settings.framework, "mode": settings.mode,
            "resume": settings.resume, "run_dir": str(run_dir), "world": settings.world(),
            **({"target": target} if target else {})}


class SweepError(RuntimeError):
    """A sweep that could not run at all (the clean run failed); the message says why."""


def _child_error(what: str, settings: SweepSettings, res: ChildResult, timeout: float) -> str:
    if res.status is None:
        return (f"{what} of {settings.label()} did not finish within {timeout:g} s; "
                "the child was killed")
    tail = res.stderr.strip().splitlines()[-1:] or ["(no message)"]
    return f"{what} of {settings.label()} exited {res.status}: {tail[0][-300:]}"


def discover(settings: SweepSettings, children: Children, base: Path,
             timeout: float = DEFAULT_TIMEOUT) -> CleanRun:
    """Trace one clean run: its crash points, its final state, its bill and tracker."""
    run_dir = base / "clean"
    run_dir.mkdir(parents=True)
    res = children.run(job(settings, run_dir, "trace"), timeout)
    if res.status != 0 or res.out is None:
        raise SweepError(_child_error("the clean run", settings, res, timeout))
    points, writes = [], {}
    for order, e in enumerate(res.out["trace"], 1):
        name, _, occ = e["point"].rpartition("#")
        points.append(Point(e["point"], name, int(occ), order, e["page"], point_kind(name)))
        if "write_ns" in e:
            writes.setdefault(name, []).append(e["write_ns"])
    bill = [c["page"] for c in read_bill(run_dir)]
    return CleanRun(final=res.out["final"], model_calls=len(bill), calls_per_page=Counter(bill),
                    tracker_pages=tracker_pages(run_dir),
                    seconds=res.out["seconds"], points=points, write_ns=writes)


def _patterns(patterns: str | Iterable[str]) -> list[str]:
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    return [p.strip() for p in patterns if p.strip()]


def _matches(point: Point, pattern: str) -> bool:
    """`pattern` is `user`, `framework`, `all` or a shell pattern on the point's name, optionally
    followed by `@pA-B` (or `@pA`): only points on pages A to B."""
    pattern, _, pages = pattern.partition("@")
    if pages:
        low, high = _page_range(pages)
        if not low <= point.page <= high:
            return False
    return pattern in ("all", point.kind) or fnmatch.fnmatchcase(point.point, pattern)


def _page_range(text: str) -> tuple[int, int]:
    first, _, last = text.removeprefix("p").partition("-")
    try:
        low, high = int(first), int(last or first)
    except ValueError:
        raise ValueError(f"--points: '@{text}' is not a page range (write @p3 or @p1-4)") from None
    if not 1 <= low <= high:
        raise ValueError(f"--points: '@{text}' is not a page range (write @p3 or @p1-4)")
    return low, high


def select_points(points: list[Point], patterns: str | Iterable[str] | None, *,
                  strict: bool = True) -> list[Point]:
    """The points matching any pattern: `user`, `framework`, `all`, or a shell pattern on the
    point's name (`ask_model.after#*`, `framework.put.*`), each optionally limited to some pages
    (`user@p1-4`). With `strict`, ValueError names a pattern that matches nothing."""
    if patterns is None:
        return list(points)
    patterns = _patterns(patterns)
    if not patterns:
        raise ValueError("--points: give at least one pattern (user, framework, all, or a name "
                         "such as 'ask_model.after#*')")
    for pattern in patterns if strict else ():
        if not any(_matches(p, pattern) for p in points):
            example = points[0].point if points else "none"
            raise ValueError(f"--points {pattern!r} matches none of the {len(points)} crash "
                             f"points of this run (e.g. {example})")
    return [p for p in points if any(_matches(p, pattern) for pattern in patterns)]


def select_for_all(cleans: list[CleanRun], patterns) -> list[list[Point]]:
    """`select_points` for several sweeps: a pattern must match in at least one of them (an
    `exit`-mode run has no `put_writes`, a `sync` one does)."""
    if patterns is not None:
        for pattern in _patterns(patterns):
            if not any(_matches(p, pattern) for c in cleans for p in c.points):
                example = cleans[0].points[0].point if cleans and cleans[0].points else "none"
                raise ValueError(f"--points {pattern!r} matches no crash point of these runs "
                                 f"(e.g. {example})")
    return [select_points(c.points, patterns, strict=False) for c in cleans]


# --- one crash run -------------------------------------------------------------------------------

def crash_run(settings: SweepSettings, clean: CleanRun, point: Point, run_dir: Path,
              children: Children, repeat: int = 0,
              timeout: float = DEFAULT_TIMEOUT) -> FrameworkRun:
    """Kill a fresh run at `point`, resume it, rebuild from the store, and read the witnesses.

    Whatever goes wrong in one crash run (a child that fails or hangs, a fork server that dies)
    is written into its record as `error`; only Ctrl-C stops the sweep."""
    run_dir.mkdir(parents=True)
    where = dict(framework=settings.framework, mode=settings.mode, resume=settings.resume,
                 idempotency_key=settings.idempotency_key, latency_ms=settings.latency_ms,
                 repeat=repeat, point=point.point, name=point.name, occurrence=point.occurrence,
                 order=point.order, page=point.page, kind=point.kind)
    ran: dict = {"killed": False, "crash_s": None, "resume_s": None}
    memory = disk = error = None
    try:
        first = children.run(job(settings, run_dir, "crash", point.point), timeout)
        ran["crash_s"] = first.seconds
        if first.status == -signal.SIGKILL:
            ran["killed"] = True
        elif first.status != 0 or first.out is None:
            error = _child_error("the crash run", settings, first, timeout)
            return FrameworkRun(**where, **ran, **unwitnessed(), error=error)
        resumed = children.run(job(settings, run_dir, "resume"), timeout)
        ran["resume_s"] = resumed.seconds
        if resumed.status != 0 or resumed.out is None:
            error = _child_error("the resume", settings, resumed, timeout)
        else:
            memory = resumed.out["final"]
        rebuilt = children.run(job(settings, run_dir, "rebuild"), timeout)
        if rebuilt.status != 0 or rebuilt.out is None:
            error = error or _child_error("the rebuild", settings, rebuilt, timeout)
        else:
            disk = rebuilt.out["rebuilt"]
        return FrameworkRun(**where, **ran, **witness(clean, run_dir, settings.pages, memory, disk),
                            error=error)
    except Cancelled:
        raise
    except Exception as e:
        error = error or f"crash run at {point.point} of {settings.label()} failed: {e}"
        return FrameworkRun(**where, **ran, **unwitnessed(memory, disk), error=error)


def tracker_pages(run_dir: Path) -> list[int]:
    """The pages the tracker holds a report for, sorted (a page twice: a duplicate).

    The tracker is opened as its next user would open it first. A kill from a framework's
    background thread can land while the agent's thread is still creating the tracker's table;
    SQLite rolls that back (a hot journal) at the next read-write open, which a read-only reader
    cannot do.
    """
    if (Path(run_dir) / TRACKER_FILE).exists():
        Tracker(run_dir).close()
    return sorted(r["page"] for r in read_reports(run_dir))


def witness(clean: CleanRun, run_dir: Path, pages: int, memory: dict | None,
            disk: dict | None) -> dict:
    """The three witnesses after the last process, as the fields of the lab's `Outcome`: the bill,
    the tracker, and the resumed process's memory and the store's rebuild, each compared with the
    other and with the clean run."""
    tracker = tracker_pages(run_dir)
    # Redone calls are calls paid beyond what a clean run pays for the same page. For a run that
    # did every page this is the lab's "billed minus a clean run's calls"; a resume that wrongly
    # stops early (a mistake swept here) pays for fewer pages: those show as skipped pages, not as
    # a negative redo.
    billed = Counter(c["page"] for c in read_bill(run_dir))
    rebuild_ok = None if memory is None or disk is None else disk == memory
    return dict(
        redone_model_calls=sum((billed - clean.calls_per_page).values()),
        skipped_pages=sum((clean.calls_per_page - billed).values()),
        duplicate_reports=len(tracker) - len(set(tracker)),
        lost_reports=len(set(Site.load(pages).bug_pages) - set(tracker)),
        three_way_check=witnesses_agree(tracker, memory, rebuild_ok, None),
        rebuild_ok=rebuild_ok, disk_error=None, tracker_pages=tracker,
        memory_findings=None if memory is None else memory["findings"], final_state=memory,
        disk_state=disk, memory_ok=None if memory is None else memory == clean.final,
        disk_ok=None if disk is None else disk == clean.final)


def unwitnessed(memory: dict | None = None, disk: dict | None = None) -> dict:
    """The witness fields of a crash run whose experiment failed before they could be read."""
    return dict(duplicate_reports=None, lost_reports=None, three_way_check=False,
                rebuild_ok=None, disk_error=None, tracker_pages=None,
                memory_findings=None if memory is None else memory["findings"],
                final_state=memory, disk_state=disk)


# --- sweeps --------------------------------------------------------------------------------------

@dataclass
class SweepResult:
    settings: SweepSettings
    clean: CleanRun
    records: list[FrameworkRun]
    seconds: float

    def frame(self):
        return frame(self.records)


def sweep_many(all_settings: list[SweepSettings], *, points=None, repeat: int = 1,
               workers: int | None = None, timeout: float = DEFAULT_TIMEOUT,
               progress: Progress | None = None, base_dir: Path | None = None
               ) -> list[SweepResult]:
    """Several sweeps in one pool of workers: discover each one's points, then crash at every
    chosen point `repeat` times. `points`: patterns for `select_points` (one for all sweeps).

    Ctrl-C (KeyboardInterrupt) kills every child at once, removes the temp dir and re-raises.
    """
    if not isinstance(repeat, int) or repeat < 1:
        raise AdapterError(f"--repeat {repeat!r}: must be 1 or more")
    all_settings = [s.resolved() for s in all_settings]
    preload = tuple(dict.fromkeys(m for s in all_settings for m in preload_for(s)))
    children = shared_children(preload)
    # Ctrl-C and SIGTERM are held back while this thread makes its temp dir, submits and waits
    # (`deferred`): they wake the wait, and are acted on once the children are killed, the
    # threads have ended and the temp dir is removed, never in the middle of the pool's own
    # locking (see bughunt.interrupts.as_finished).
    with deferred() as held:
        base = Path(tempfile.mkdtemp(prefix="bughunt-fw-", dir=base_dir))
        pool = ThreadPoolExecutor(max_workers=workers or default_workers())
        t0 = time.perf_counter()
        try:
            cleans = list(_wait_all([pool.submit(discover, s, children, base / f"s{i}", timeout)
                                     for i, s in enumerate(all_settings)], held))
            chosen = select_for_all(cleans, points)
            jobs = [(i, r, p) for r in range(repeat) for i in range(len(all_settings))
                    for p in chosen[i]]
            if progress:
                progress(0, len(jobs))
            futures = [pool.submit(crash_run, all_settings[i], cleans[i], p,
                                   base / f"s{i}" / f"r{r}-{p.order:04d}", children, r, timeout)
                       for i, r, p in jobs]
            records = list(_wait_all(futures, held, progress))
            seconds = time.perf_counter() - t0
            return [SweepResult(s, cleans[i],
                                [rec for (j, _, _), rec in zip(jobs, records) if j == i],
                                seconds) for i, s in enumerate(all_settings)]
        except BaseException:
            children.kill_all()          # the shared pool is replaced at the next sweep
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            del pool                     # its threads' weakref callbacks run while held
            if children.cancelled.is_set():
                children.close()
            shutil.rmtree(base, ignore_errors=True)


def _wait_all(futures, held: Held, progress: Progress | None = None):
    """The futures' results in order, the first failure raised as soon as it happens; raises
    `HeldBack` as soon as `held` (the caller's `deferred()`) caught a signal."""
    for done, f in enumerate(as_finished(futures, held), 1):
        f.result()                           # raise the first failure now
        if progress:
            progress(done, len(futures))
    return [f.result() for f in futures]


def sweep_framework(settings: SweepSettings, **kwargs) -> SweepResult:
    """One sweep (see `sweep_many`)."""
    return sweep_many([settings], **kwargs)[0]


# --- what a sweep found --------------------------------------------------------------------------

def sweep_timing(records: list[FrameworkRun], clean: CleanRun) -> dict:
    """What a sweep costs in time, beside its summary (`bughunt.experiment.summarize`): the median
    wall time of a killed process plus its resume, and of one durable write in the clean run."""
    pairs = [r.crash_s + r.resume_s for r in records
             if r.killed and r.error is None and r.resume_s is not None]
    writes = [ns for v in clean.write_ns.values() for ns in v]
    return {"pair_ms": round(statistics.median(pairs) * 1000, 1) if pairs else None,
            "write_us": round(statistics.median(writes) / 1000, 1) if writes else None}


def varying_points(records: list[FrameworkRun]) -> list[dict]:
    """Points whose verdict (or redone model calls) differed between repeats of the same sweep."""
    by: dict[tuple, list[FrameworkRun]] = {}
    for r in records:
        key = (r.framework, r.mode, r.resume, r.idempotency_key, r.latency_ms, r.point)
        by.setdefault(key, []).append(r)
    out = []
    for key, runs in by.items():
        verdicts = sorted({r.verdict for r in runs})
        redone = sorted({r.redone_model_calls for r in runs if r.redone_model_calls is not None})
        if len(runs) > 1 and (len(verdicts) > 1 or len(redone) > 1):
            out.append({"point": key[-1], "order": runs[0].order, "kind": runs[0].kind,
                        "verdicts": verdicts, "redone_model_calls": redone,
                        "verdict_varies": len(verdicts) > 1, "repeats": len(runs)})
    return sorted(out, key=lambda d: d["order"])
