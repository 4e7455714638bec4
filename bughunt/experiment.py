"""The experiment: start the worker, kill it, resume it, and ask three witnesses what happened.

A crash run is two real processes on one fresh run directory: the first dies by SIGKILL at a crash
point, the second resumes to the end. Then the outside world is read:

- the **bill** says how many model calls were paid (redone = billed - what a clean run pays);
- the **tracker** says which reports exist (duplicates, lost reports);
- the **three-way check** compares the tracker, the resumed worker's in-memory result, and a fresh
  rebuild from disk by code that did not run the worker. The last witness catches the bugs that are
  right now and wrong at the next recovery, like the no-newline trap.

Results are typed records, one per crash point: an `Outcome` (what the witnesses say, and the
lab's one verdict on it) extended by each kind of run (`CrashRun`; `CallCrashRun` below;
`bughunt.frameworks.sweep.FrameworkRun` for a framework). `frame` turns any of them into a pandas
DataFrame and `summarize` sums a sweep up; `sweep` gives the DataFrame at once. Random kills
(`kill_random`), which fall at moments rather than at points, come back as one summary with a
row per try.

The model is the in-process mock in every lesson's sweep. Lesson 11's worker mode asks a model
server over HTTP instead (`model=ServedModel(url, bill)`, from `bughunt.llm`): the call then has
crash points inside it, the bill witness is the server's bill (the run's lines, by its project),
and each crash run also says what prefix of the answer the killed worker held
(`CallCrashRun`). An HTTP call costs far more than an in-process one (`make bench` measures by
how much), which is why the other lessons keep the mock.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import functools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from . import forkserver
from .config import MESSAGE_CHARS, RunConfig, said, shown
from .crashpoints import (LABELS, PAUSE_BANNER, CrashPoint, NoSuchPoint, find, point_name,
                          scheme)
from .events import apply_event, initial_state
from .instruments import mutants
from .interrupts import as_finished, deferred
from .stores import LOG_FILE, StoreDamage, rebuild_from_disk
from .world import Site, read_bill, read_reports
from .worker import READY_BANNER

if TYPE_CHECKING:
    from .llm import ServedModel

Progress = Callable[[int, int], None]     # (done, total)


# --- processes -----------------------------------------------------------------------------------

def worker_args(run_dir: Path, config: RunConfig, *extra: str) -> list[str]:
    return ["--dir", str(run_dir), *config.to_args(), *extra]


def worker_command(run_dir: Path, config: RunConfig, *extra: str) -> list[str]:
    """The worker as a fresh interpreter: `python -m bughunt.worker ...`."""
    return [sys.executable, "-m", "bughunt.worker", *worker_args(run_dir, config, *extra)]


_POOLS: dict = {}               # (code dir or None: the real package, preload) -> ForkServerPool
_POOL_LOCK = threading.Lock()


_LIVE: set[subprocess.Popen] = set()     # workers started as fresh interpreters, still running
_STOPPING = threading.Event()              # set while an interrupted pool winds down


class Stopped(RuntimeError):
    """No new worker starts while an interrupted experiment is stopping its workers."""


#: What a fork server preloads for workers that call their model over HTTP: the `openai` SDK,
#: imported and warmed once, with no connection open (a socket held across a fork is shared by
#: every child). The other lessons' fork servers never import it.
SDK_PRELOAD = ("bughunt.llm:warm_sdk",)


def _fork_pool(code: Path | None = None, preload: tuple[str, ...] = ()):
    with _POOL_LOCK:
        if _STOPPING.is_set():
            raise Stopped("interrupted: no new worker is started")
        if (code, preload) not in _POOLS:
            from .forkserver import ForkServerPool
            _POOLS[code, preload] = ForkServerPool(None if code is None else mutants.env(code),
                                                   preload)
        return _POOLS[code, preload]


def stop_all_workers() -> None:
    """Kill every worker this process started and is still waiting for, and the fork servers
    with their children: what an interrupted sweep must do before it removes its run directories.
    The next experiment starts fresh fork servers."""
    with _POOL_LOCK:
        _STOPPING.set()
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.kill()
    live = list(_LIVE)
    for proc in live:
        proc.kill()
    for proc in live:                  # gone before the caller removes their run directories
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def spawn(cmd: list[str], **popen) -> subprocess.Popen:
    """Start a worker process that `stop_all_workers` can reach.

    Ctrl-C and SIGTERM are held back while the process starts (Popen waits for the exec), so an
    interrupt cannot fall between "the child exists" and "we know its pid" and leave it running.
    Call `forget(proc)` once it has ended.
    """
    with deferred(), _POOL_LOCK:
        if _STOPPING.is_set():
            raise Stopped("interrupted: no new worker is started")
        proc = subprocess.Popen(cmd, **popen)
        _LIVE.add(proc)
    return proc


def forget(proc: subprocess.Popen) -> None:
    _LIVE.discard(proc)


def _run_process(cmd: list[str], timeout: float,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`subprocess.run` that `stop_all_workers` can reach."""
    # A learner's store may print bytes that are not UTF-8: shown with replacement characters,
    # never a UnicodeDecodeError in the lab.
    proc = spawn(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 text=True, errors="replace", env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    finally:
        forget(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _point_arg(point: CrashPoint | str | int) -> str:
    return point.name if isinstance(point, CrashPoint) else str(point)


def run_worker(run_dir: Path, config: RunConfig, *, crash_at: CrashPoint | str | int | None = None,
               trace: bool = False, extra: tuple[str, ...] = (), code: Path | None = None,
               timeout: float = 120, model: ServedModel | None = None
               ) -> subprocess.CompletedProcess:
    """Run the worker to its end (or its planned SIGKILL), with the JSON report on stdout.

    `crash_at`: a crash point, its name (`"p3.after_submit"`) or its number.
    `extra`: more worker flags, e.g. lesson 8's `--fail-write K`.
    `code`: run another copy of the package (a mutant: `instruments.mutants.code_dir(name)`).
    `model`: ask this model server over HTTP instead of the in-process model (lesson 11).
    """
    extra = ["--json", *extra] + (["--crash-at", _point_arg(crash_at)] if crash_at is not None
                                  else [])
    extra += ["--trace"] if trace else []
    extra += model.worker_flags() if model is not None else ()
    if forkserver.enabled():
        # A fork of a pre-imported worker: a separate process all the same, killed by a real
        # SIGKILL at its crash point, but started in a millisecond.
        pool = _fork_pool(code, SDK_PRELOAD if model is not None else ())
        return pool.run(worker_args(run_dir, config, *extra), timeout)
    return _run_process(worker_command(run_dir, config, *extra), timeout,
                        None if code is None else mutants.env(code))


def clean_run(config: RunConfig, run_dir: Path | None = None, *, trace: bool = False,
              extra: tuple[str, ...] = ()) -> dict:
    """One run without a crash; its JSON report (in a temp dir unless `run_dir` is given)."""
    with work_dir(None) as tmp:
        target = Path(run_dir) if run_dir is not None else tmp / "clean"
        proc = run_worker(target, config, trace=trace, extra=extra)
        if proc.returncode != 0:
            raise RuntimeError(f"clean run failed ({proc.returncode}): {proc.stderr.strip()}")
        return json.loads(proc.stdout)


def read_trace(run_dir: Path) -> list[dict]:
    """The crash points each worker of a `--trace` run reached, with wall times, in order."""
    path = Path(run_dir) / "trace.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class PausedWorker:
    """A worker stopped at a crash point (`--pause-at`), for kills from outside at a known moment.

    `kill()` sends a real SIGKILL from this process; `release()` lets the worker carry on.
    """

    def __init__(self, run_dir: Path, config: RunConfig, pause_at: CrashPoint | str | int,
                 timeout: float = 60, trace: bool = False, code: Path | None = None,
                 extra: tuple[str, ...] = ()):
        extra = ["--json", "--pause-at", _point_arg(pause_at), *extra] + (
            ["--trace"] if trace else [])
        self.proc = spawn(worker_command(run_dir, config, *extra), stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          errors="replace", env=None if code is None else mutants.env(code))
        self.point_reached = self._wait_for_banner(timeout)

    def _wait_for_banner(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        lines = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            if line.startswith(PAUSE_BANNER):
                return line[len(PAUSE_BANNER):].strip()
            lines.append(line)
        self.proc.kill()
        self.proc.communicate()
        forget(self.proc)
        raise RuntimeError("worker ended before its pause point: " + "".join(lines[-5:]))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> int:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate()
        forget(self.proc)
        return self.proc.returncode

    def release(self) -> dict:
        out, err = self.proc.communicate(input="")
        forget(self.proc)
        if self.proc.returncode != 0:
            raise RuntimeError(f"worker exited {self.proc.returncode}: {err.strip()}")
        return json.loads(out)


# --- the three witnesses -------------------------------------------------------------------------

def crash_points(config: RunConfig, call_in_flight: bool = False) -> list[CrashPoint]:
    """The lesson's crash points for this configuration (`call_in_flight`: with the points inside
    each model call, which exist when the model is reached over HTTP)."""
    return scheme(config.pages, Site.load(config.pages).bug_pages, config.intent, call_in_flight)


def crash_point(config: RunConfig, spec: CrashPoint | str | int,
                call_in_flight: bool = False) -> CrashPoint:
    """The crash point of `config` that `spec` names (`"p3.after_submit"`) or numbers.

    Raises NoSuchPoint, saying why the point does not exist in this configuration.
    """
    if isinstance(spec, CrashPoint):
        spec = spec.name
    return find(crash_points(config, call_in_flight), spec, pages=config.pages,
                bug_pages=Site.load(config.pages).bug_pages, intent=config.intent,
                call_in_flight=call_in_flight)


def lesson_reader(run_dir: Path) -> dict:
    """Rebuild a log the way the lesson's reader did: skip what does not parse, trust the rest.

    No sequence numbers, no checksums. Used only to compare with our reader on the no-newline trap.
    """
    state = initial_state()
    path = Path(run_dir) / LOG_FILE
    for raw in path.read_bytes().split(b"\n") if path.exists() else []:
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        event.pop("crc", None)
        state = apply_event(state, event)
    return state


#: The verdict words, best first (figures colour them; `Outcome.verdict` gives one per run). The
#: lab's own sweeps give all but "not reached" and "wrong state", which only a framework's can.
VERDICTS = ("correct", "not reached", "tracker disagrees", "rebuild fails", "wrong state", "lost",
            "duplicate", "error")


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What the witnesses say after the last process of a run, and its verdict.

    Every kind of crash run extends it (`CrashRun` for the lab's worker, `FrameworkRun` for a
    framework), so that "correct" and the verdict words are defined here once."""

    duplicate_reports: int               # reports the tracker holds twice (or more)
    lost_reports: int                    # bug pages with no report in the tracker
    three_way_check: bool                # tracker == the agent's memory == a rebuild from disk
    rebuild_ok: bool | None              # the rebuild equals the memory (None: no third witness)
    disk_error: str | None               # the rebuild refused (or a learner's store raised)
    tracker_pages: list[int] | None
    memory_findings: list[int] | None
    final_state: dict | None             # the agent's memory: the resumed process's final state
    memory_ok: bool | None = None        # memory == a clean run's final state (None: not compared)
    disk_ok: bool | None = None          # the rebuild == a clean run's final state (ditto)
    error: str | None = None             # the experiment itself went wrong (no kill, no resume)

    @property
    def reached(self) -> bool:
        """The planned crash point was reached. The lab's worker reaches every point of its
        scheme (or the run is an error); a framework's background writer may not write the same
        way twice, so a point of its clean run can be missed (`FrameworkRun`)."""
        return True

    @property
    def verdict(self) -> str:
        """One word, worst first: error, not reached, duplicate, lost, wrong state (the agent's
        memory differs from a clean run's), rebuild fails, tracker disagrees (the agent's result
        and the tracker differ), correct."""
        if self.error is not None:
            return "error"
        if not self.reached:
            return "not reached"
        if self.duplicate_reports:
            return "duplicate"
        if self.lost_reports:
            return "lost"
        if self.memory_ok is False:
            return "wrong state"
        if self.rebuild_ok is False or self.disk_ok is False or self.disk_error is not None:
            return "rebuild fails"
        if not self.three_way_check:
            return "tracker disagrees"
        return "correct"

    @property
    def correct(self) -> bool:
        """The lab's one definition of a correct recovery: the experiment ran, no report twice,
        none lost, the agent's state right, and the three witnesses agree."""
        return self.verdict == "correct"

    @property
    def resumed_right(self) -> bool:
        """The resumed run itself is right: nothing twice, nothing lost, and the tracker agrees
        with the agent's memory. The rebuild from disk is not asked (the no-newline trap)."""
        return (self.error is None and self.duplicate_reports == 0 and self.lost_reports == 0
                and self.tracker_pages == sorted(self.memory_findings or []))


def outcome(run_dir: Path, config: RunConfig, report: dict | None) -> Outcome:
    """What the witnesses say after the last process of a run: the tracker (duplicate and lost
    reports, against the site's bugs), the resumed worker's memory (`report`: its JSON report, or
    None if it failed), and a fresh rebuild from disk by code that did not run the worker."""
    memory = report["state"] if report else None
    tracker = sorted(r["page"] for r in read_reports(run_dir))
    rebuild_ok, disk_error = None, None
    if config.store != "none":     # with no store there is no third witness
        try:
            rebuild_ok = rebuild_from_disk(run_dir, config).state == memory
        except StoreDamage as e:
            disk_error = shown(str(e), MESSAGE_CHARS)
        except Exception as e:         # a learner's store may raise anything: that is a verdict
            disk_error = f"load() raised {said(e)}"
    return Outcome(duplicate_reports=len(tracker) - len(set(tracker)),
                   lost_reports=len(set(Site.load(config.pages).bug_pages) - set(tracker)),
                   three_way_check=witnesses_agree(tracker, memory, rebuild_ok, disk_error),
                   rebuild_ok=rebuild_ok, disk_error=disk_error, tracker_pages=tracker,
                   memory_findings=None if memory is None else memory["findings"],
                   final_state=memory)


def witnesses_agree(tracker_pages: list[int], memory: dict | None, rebuild_ok: bool | None,
                    disk_error: str | None) -> bool:
    """The three-way check: the tracker holds exactly the findings the agent remembers, and the
    rebuild from disk (where there is one) gives the agent's memory back."""
    return (memory is not None and tracker_pages == sorted(memory["findings"])
            and rebuild_ok is not False and disk_error is None)


@dataclass(frozen=True, kw_only=True)
class CrashRun(Outcome):
    """One crash run: a fresh worker killed by SIGKILL at one crash point, a second one resuming
    to the end, and the witnesses read: the bill, the tracker, the rebuild from disk."""

    sweep: str = ""                      # which sweep it belongs to
    crash_point: str                     # the stable name: p3.after_submit
    index: int                           # its number in this configuration
    page: int
    label: str                           # the step
    redone_model_calls: int | None       # calls on the bill beyond a clean run's (None: the
                                         # resume did not finish, so there is nothing to compare)
    replayed_events: int | None          # log events applied at recovery
    aborted_pages: list[int] | None = None
    torn_lines_skipped: int | None = None
    tails_repaired: int | None = None
    temp_files_removed: int | None = None
    snapshot_fallback: str | None = None
    resume_exit: int | None = None
    lesson_reader_ok: bool | None = None   # the source text's reader (log store only)


@dataclass(frozen=True, kw_only=True)
class CallCrashRun(CrashRun):
    """A crash run of the worker that asks its model over HTTP (lesson 11). The bill witness is the
    server's bill (this run's lines); the worker's call journal adds what the killed process held
    of the call on its crash point's page: nothing at `call_sent`, a prefix at `call_chunk3`, the
    whole answer from `call_last_chunk` on (held in memory only, so a resume pays for it again)."""

    prefix_held: str                     # that call's answer text in the killed worker's journal
    chunks_held: int                     # the chunks it had received
    killed_call_billed: bool             # that call's request id is on the server's bill


@dataclass(frozen=True, kw_only=True)
class ReplayCount:
    """A worker killed at one crash point, and what a recovery would replay (read-only)."""

    sweep: str = ""
    crash_point: str
    index: int
    page: int
    label: str
    replayed_events: int
    snapshot_used: bool
    torn_lines_skipped: int


def frame(records):
    """Records (CrashRun, FrameworkRun, ReplayCount, ...) as a DataFrame, one row each, with the
    `verdict` and `resumed_right` columns for crash runs: the one way the lab turns its results
    into a table."""
    import pandas as pd

    rows = [{**dataclasses.asdict(r),
             **({"verdict": r.verdict, "resumed_right": r.resumed_right}
                if isinstance(r, Outcome) else {})}
            for r in records]
    return pd.DataFrame(rows)


def crash_worker(run_dir: Path, config: RunConfig, point: CrashPoint | str | int, *,
                 extra: tuple[str, ...] = (), code: Path | None = None
                 ) -> subprocess.CompletedProcess:
    """Run a worker that must die by SIGKILL at crash point `point`; raise if it did not."""
    proc = run_worker(run_dir, config, crash_at=point, extra=extra, code=code)
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"{run_dir}: worker was not killed at crash point {_point_arg(point)} (exit "
                           f"{proc.returncode}): {proc.stderr.strip()[-300:]}")
    return proc


def crash_and_resume(config: RunConfig, point: CrashPoint, run_dir: Path, *,
                     extra: tuple[str, ...] = (), code: Path | None = None,
                     model: ServedModel | None = None, timeout: float = 120) -> CrashRun:
    """Kill a fresh run at `point`, resume it to the end, and measure. `run_dir` must not exist.

    `extra` worker flags, `code` (another copy of the package: a mutant) and `model` (a model
    server over HTTP instead of the in-process model; then a `CallCrashRun`) apply to both
    processes; so does `timeout`, the seconds each may take (then `subprocess.TimeoutExpired`).
    Redone model calls are counted only when the resume finished: a run that never did has no
    count to compare with a clean run's.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True)
    error = None
    first = run_worker(run_dir, config, crash_at=point, extra=extra, code=code, model=model,
                       timeout=timeout)
    if first.returncode != -signal.SIGKILL:
        error = (f"first run was not killed at the crash point (exit {first.returncode}): "
                 f"{first.stderr.strip()[-300:]}")
    held = held_of_call(run_dir, point.page) if model is not None else None   # before the resume
    resume = run_worker(run_dir, config, extra=extra, code=code, model=model, timeout=timeout)
    report = None
    if resume.returncode == 0:
        report = json.loads(resume.stdout)
    elif error is None:
        error = f"resume exited {resume.returncode}: {resume.stderr.strip()[-300:]}"
    seen = {**dataclasses.asdict(outcome(run_dir, config, report)), "error": error}
    get = (lambda key: report[key]) if report else (lambda key: None)
    bill = read_bill(run_dir) if model is None else model.calls_of(run_dir)
    measured = dict(
        **seen, crash_point=point.name, index=point.index, page=point.page, label=point.label,
        redone_model_calls=(len(bill) - config.pages
                            if report and len(bill) >= config.pages else None),
        replayed_events=get("replayed_events"),
        aborted_pages=get("aborted"), torn_lines_skipped=get("torn_lines_skipped"),
        tails_repaired=get("tails_repaired"), temp_files_removed=get("temp_files_removed"),
        snapshot_fallback=get("snapshot_fallback"), resume_exit=resume.returncode,
        lesson_reader_ok=(lesson_reader(run_dir) == report["state"]
                          if config.store == "log" and report else None))
    if model is None:
        return CrashRun(**measured)
    return CallCrashRun(**measured, prefix_held=held.get("prefix", ""),
                        chunks_held=held.get("chunks", 0),
                        killed_call_billed=any(b["request_id"] == held.get("request_id")
                                               for b in bill))


def held_of_call(run_dir: Path, page: int) -> dict:
    """The last moment of page `page`'s call in the run's call journal ({} if never called): read
    right after a kill, it is what the killed worker held."""
    from .llm import read_call_journal

    lines = [r for r in read_call_journal(run_dir) if r["page"] == page]
    return lines[-1] if lines else {}


def replay_after_crash(config: RunConfig, point: CrashPoint, run_dir: Path) -> ReplayCount:
    """Kill a fresh run at `point` and count what recovery would replay, without resuming.

    The count comes from the store's read-only `load()`, the same code a resuming worker runs
    first, so it equals the resumed worker's `replayed_events` at half the processes.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True)
    crash_worker(run_dir, config, point)
    rec = rebuild_from_disk(run_dir, config)
    return ReplayCount(crash_point=point.name, index=point.index, page=point.page,
                       label=point.label, replayed_events=rec.replayed_events,
                       snapshot_used=rec.snapshot_used, torn_lines_skipped=rec.torn_lines_skipped)


# --- sweeps --------------------------------------------------------------------------------------

def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:          # macOS
        return os.cpu_count() or 2


@contextmanager
def work_dir(base: Path | None = None, *, in_memory: bool = False):
    """A directory for run dirs: `base` (created, must be new or empty) or a temp dir removed after.

    `in_memory`: the temp dir goes to /dev/shm (a RAM file system) where the machine has one with
    room, for sweeps. A kill -9 leaves the same bytes on any file system (the page cache survives
    it), and a sweep counts calls and reports, not disk time; only fsync costs nothing there, which
    is why the lessons that time writes (6, the appendix) run on the real disk.
    """
    if base is None:
        # Ctrl-C and SIGTERM are held back while the temp dir is made and while it is removed
        # (an rmtree cut short raises EBADF and leaves files), and act as usual in the block.
        # `holding` is switched by one attribute store, where no signal handler can run.
        with deferred() as held:
            where = ram_dir() if in_memory else None
            try:
                tmp = tempfile.mkdtemp(prefix="bughunt-", dir=where)
            except OSError as e:
                raise FileExistsError(_no_temp_dir(where, e)) from None
            try:
                held.holding = False
                yield Path(tmp)
            finally:
                held.holding = True
                shutil.rmtree(tmp, ignore_errors=True)
        return
    base = Path(base)
    if base.exists() and not base.is_dir():
        raise FileExistsError(f"--work-dir {base}: is a file, not a directory")
    if base.exists() and any(base.iterdir()):
        raise FileExistsError(f"--work-dir {base}: exists and is not empty; give a new one")
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FileExistsError(f"--work-dir {base}: cannot be created ({e.strerror})") from None
    yield base


def _no_temp_dir(where: str | None, e: OSError) -> str:
    """The refusal for a temp dir that cannot be made: names $BUGHUNT_RAM_DIR when it chose it."""
    if where is not None and os.environ.get("BUGHUNT_RAM_DIR"):
        return (f"BUGHUNT_RAM_DIR={where}: cannot hold the sweep's run directories ({e.strerror}); "
                "set it to a directory that exists and is writable, or to nothing for the "
                "default temp dir; nothing was run")
    return (f"{where or tempfile.gettempdir()}: the temporary run directories cannot be made "
            f"there ({e.strerror}); set TMPDIR to a writable directory; nothing was run")


def ram_dir(room: int = 256 << 20) -> str | None:
    """Where sweeps keep their run directories: $BUGHUNT_RAM_DIR if set (empty: the default temp
    dir), else /dev/shm when it exists, is writable and has `room` bytes free; else None (the
    default temp dir). macOS has no /dev/shm."""
    chosen = os.environ.get("BUGHUNT_RAM_DIR")
    if chosen is not None:
        return chosen or None
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    if st.f_bavail * st.f_frsize < room or not os.access("/dev/shm", os.W_OK):
        return None
    return "/dev/shm"


def run_crash_jobs(jobs: list[tuple[str, RunConfig, CrashPoint]], base: Path,
                   workers: int | None = None, progress: Progress | None = None,
                   measure: Callable[[RunConfig, CrashPoint, Path], CrashRun] | None = None,
                   discard: bool = False) -> list[CrashRun]:
    """Run (tag, config, point) jobs in parallel: `measure` (default: `crash_and_resume`) each.

    Threads only wait on child processes, so one thread per core keeps every core busy.
    `discard`: remove each run directory as soon as its record is taken, when the records are
    all the caller keeps. Then an interrupted sweep has only the runs in progress to remove, not
    hundreds of finished ones (seconds on a slow disk, before Ctrl-C could return).
    """
    measure = measure or crash_and_resume
    if discard:
        measure = functools.partial(_measure_and_remove, measure)
    calls = [functools.partial(measure, config, point, base / f"{tag}-{point.index:03d}")
             for tag, config, point in jobs]
    return [dataclasses.replace(r, sweep=tag)
            for (tag, _, _), r in zip(jobs, in_parallel(calls, workers, progress))]


def _measure_and_remove(measure, config: RunConfig, point: CrashPoint, run_dir: Path):
    try:
        return measure(config, point, run_dir)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def in_parallel(calls: list[Callable[[], object]], workers: int | None = None,
                progress: Progress | None = None) -> list:
    """Run the calls in a thread pool, results in order. Threads only wait on child processes,
    so one thread per core keeps every core busy.

    Interrupted (Ctrl-C, SIGTERM, a notebook's interrupt) or failing, it cancels the calls not
    started, kills the workers running, waits for the threads, then raises: the caller's
    `work_dir` then removes the run directories, and nothing is left running. The signal is
    held back while this thread submits, waits and stops (`deferred`): it wakes the wait and is
    acted on once every thread has ended, never in the middle of the pool's own locking.
    """
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    results: list = [None] * len(calls)
    with deferred() as held:
        pool = ThreadPoolExecutor(max_workers=workers or default_workers())
        try:
            futures = {pool.submit(call): i for i, call in enumerate(calls)}
            for done, future in enumerate(as_finished(futures, held), 1):
                results[futures[future]] = future.result()
                if progress:
                    progress(done, len(calls))
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            try:
                stop_all_workers()
                pool.shutdown(wait=True)
            finally:
                _STOPPING.clear()
            raise
        pool.shutdown(wait=True)
        # Dropped here, while signals are held: the weakref callbacks that its threads' end
        # runs would swallow an interrupt raised inside them ("Exception ignored in ...").
        del pool, futures
    return results


@contextmanager
def stopping_workers_on_interrupt():
    """For an experiment that starts workers one after another: on any exception (an interrupt
    included), kill what is still running before the exception leaves."""
    try:
        yield
    except BaseException:
        try:
            stop_all_workers()
        finally:
            _STOPPING.clear()
        raise


def sweep_records(config: RunConfig, *, points: Iterable[str | int] | None = None,
                  workers: int | None = None, progress: Progress | None = None,
                  base_dir: Path | None = None, tag: str = "sweep",
                  model: ServedModel | None = None) -> list[CrashRun]:
    """Crash at every point of `config` (or the given names or numbers), resume, measure: one
    record each. Raises NoSuchPoint for a point this configuration does not have.

    `model`: the worker asks this model server over HTTP (lesson 11); the points inside each call
    join the scheme, and the records are `CallCrashRun`s judged by the server's bill."""
    in_call = model is not None
    all_points = crash_points(config, in_call)
    if points is not None:
        wanted = {crash_point(config, spec, in_call).index for spec in points}
        if not wanted:
            raise NoSuchPoint("no crash points given")
        all_points = [p for p in all_points if p.index in wanted]
    measure = functools.partial(crash_and_resume, model=model) if in_call else None
    with work_dir(base_dir, in_memory=True) as base:
        return run_crash_jobs([(tag, config, p) for p in all_points], base, workers, progress,
                              measure, discard=base_dir is None)


def sweep(config: RunConfig, **kwargs):
    """`sweep_records` as a pandas DataFrame, one row per crash point, with its verdict."""
    return frame(sweep_records(config, **kwargs))


def summarize(records) -> dict:
    """The sweep's summary: costs averaged over the crash runs that reached their point, and each
    way of being wrong counted over every run. `records`: crash runs (the lab's worker's or a
    framework's), or their DataFrame (`frame`). What the records do not measure is None: replayed
    events for a framework, a state compared with a clean run's (`wrong_memory`, `wrong_disk`) for
    the lab's worker, whose three witnesses judge it instead."""
    import pandas as pd

    df = records if isinstance(records, pd.DataFrame) else frame(records)
    if df.empty:
        df = pd.DataFrame(columns=[f.name for f in dataclasses.fields(Outcome)] + ["verdict"])
    reached = df[df["verdict"] != "not reached"]

    def avg(key):
        values = reached[key].dropna() if key in reached else []
        return round(float(values.mean()), 4) if len(values) else None

    def top(key):
        values = reached[key].dropna() if key in reached else []
        return int(values.max()) if len(values) else None

    def count(condition) -> int:
        return int(condition.sum())

    def wrong(key) -> int | None:      # None: no run was compared with a clean run's state
        return count(df[key] == False) if df[key].notna().any() else None  # noqa: E712

    return {
        "crash_points": len(reached),
        "not_reached": len(df) - len(reached),
        "avg_redone_model_calls": avg("redone_model_calls"),
        "max_redone_model_calls": top("redone_model_calls"),
        "avg_replayed_events": avg("replayed_events"),
        "max_replayed_events": top("replayed_events"),
        "duplicate_points": count(df["duplicate_reports"] > 0),
        "lost_points": count(df["lost_reports"] > 0),
        "wrong_memory": wrong("memory_ok"),
        "wrong_disk": wrong("disk_ok"),
        "three_way_failures": count(~df["three_way_check"].astype(bool)),
        "rebuild_failures": count((df["rebuild_ok"] == False)                   # noqa: E712
                                  | df["disk_error"].notna()),
        "errors": count(df["error"].notna()),
        "correct_runs": count(df["verdict"] == "correct"),
    }


# --- random kills --------------------------------------------------------------------------------

def rule_of_three(n: int) -> float | None:
    """Zero failures in n independent tries: the failure rate is below about 3/n (95%)."""
    return 3 / n if n else None


def start_ready_worker(run_dir: Path, config: RunConfig,
                       extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, float]:
    """Start a traced worker as a fresh process and wait for its ready line.

    Returns the process and the wall time at which the run started (the worker's own clock, the
    same clock as its trace). Interpreter start and imports come before it and are not part of the
    run's life: a kill there could never hit anything.
    """
    proc = spawn(worker_command(run_dir, config, "--trace", "--ready", *extra),
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                 text=True, errors="replace")
    try:
        line = proc.stderr.readline()
        if not line.startswith(READY_BANNER):
            raise RuntimeError(f"worker did not start: "
                               f"{(line + proc.stderr.read()).strip()[-300:]}")
    except BaseException:                  # interrupted while it starts: leave nothing running
        proc.kill()
        proc.communicate()
        forget(proc)
        raise
    return proc, float(line[len(READY_BANNER):])


def run_life(trace: list[dict]) -> float:
    """A traced run's life in seconds: from its ready mark to its end mark (the last page
    committed, the store closed). Interpreter start-up and shut-down are not part of it."""
    by = {m["label"]: m["t"] for m in trace if m["label"] in ("ready", "end")}
    if "end" not in by:
        raise ValueError("this trace has no end mark: the run did not finish")
    return by["end"] - by.get("ready", trace[0]["t"])


WAITING = "waiting_for_model"


def where_it_landed(trace: list[dict], bill: list[dict], killed: bool) -> str:
    """Where a kill from outside fell: the last crash point the worker's trace reached
    (`p7.after_visit`), `p7.waiting_for_model` when the page's call was billed but its answer had
    not arrived, or a phase: before page 1, after the last page, finished first."""
    if not killed:
        return "finished first"
    last = trace[-1] if trace else {"label": "ready", "page": 1}
    if last["label"] == "end":
        return "after the last page"
    answered = sum(m["label"] == "after_model_call" for m in trace)
    if len(bill) > answered:
        return f"p{bill[-1]['page']}.{WAITING}"
    if last["label"] in ("ready", "start"):
        return "before page 1"
    return point_name(last["page"], last["label"])


#: Random kills give the model this latency (ms): a real agent spends nearly all its life waiting
#: for the model, and so does the worker then; with none, set-up fsyncs would fill half the run.
RANDOM_KILL_LATENCY_MS = 3.0


def landing_order(landed: str) -> tuple[int, int]:
    """Sort key for `where_it_landed` values: set-up, then pages in order, then after the run."""
    if "." in landed:
        page, step = landed.split(".", 1)
        steps = (WAITING, *LABELS)
        return (int(page[1:]), steps.index(step) if step in steps else len(steps))
    return {"before page 1": (0, 0), "after the last page": (10**9, 0)}.get(landed, (10**9, 1))


def kill_random(config: RunConfig, *, tries: int = 40, seed: int = 0,
                base_dir: Path | None = None, progress: Progress | None = None,
                references: int = 3, latency_ms: float = RANDOM_KILL_LATENCY_MS,
                at: list[float] | None = None) -> dict:
    """SIGKILL the worker from outside at seeded random moments of its run, resume, look for
    duplicates: what a chaos test does.

    Each victim is a fresh process that announces the moment its run starts (`--ready`); the kill
    falls a random delay after that moment, drawn uniformly over the life of a clean run measured
    the same way (the median of `references` traced runs, ready to end). So kills are spread over
    the run itself, its set-up and its page loop, and each try records where its kill landed (the
    last crash point its trace reached). Unlike the exhaustive sweep, the outcome is up to the
    scheduler: the same seed gives the same delays, not the same results. Each model answer takes
    `latency_ms` (billed first, then the wait: a kill there is a call in flight). `at`: kill at
    these fractions of the life instead (0.5 = halfway), one try each, to place a kill on purpose.
    """
    if at is not None:
        if not at or not all(0 <= f <= 1 for f in at):
            raise ValueError("at: fractions of the run's life, from 0 to 1")
        tries = len(at)
    if tries < 1:
        raise ValueError("tries must be at least 1")
    world = ("--latency-ms", f"{latency_ms:g}")
    rng = random.Random(seed)
    tries_out = []
    with work_dir(base_dir) as base, stopping_workers_on_interrupt():
        lives = []
        for i in range(references):
            ref = base / f"reference-{i}"
            ref.mkdir()
            proc, _ = start_ready_worker(ref, config, world)
            try:
                err = proc.communicate()[1]
            finally:
                proc.kill()
                forget(proc)
            if proc.returncode != 0:
                raise RuntimeError(f"clean run failed: {err.strip()[-300:]}")
            lives.append(run_life(read_trace(ref)))
        life = statistics.median(lives)
        for i in range(tries):
            run_dir = base / f"try-{i:03d}"
            run_dir.mkdir()
            delay = rng.uniform(0, life) if at is None else at[i] * life
            proc, ready_t = start_ready_worker(run_dir, config, world)
            try:
                time.sleep(max(0.0, ready_t + delay - time.time()))
            finally:
                proc.send_signal(signal.SIGKILL)     # a no-op if it already finished
                proc.communicate()
                forget(proc)
            killed = proc.returncode == -signal.SIGKILL
            trace, bill = read_trace(run_dir), read_bill(run_dir)
            calls_before = len(bill)
            resume = run_worker(run_dir, config)
            tracker = sorted(r["page"] for r in read_reports(run_dir))
            landed = where_it_landed(trace, bill, killed)
            tries_out.append({"try": i, "delay_ms": delay * 1e3, "killed": killed,
                              "landed": landed, "in_page_loop": killed and "." in landed,
                              "calls_before_kill": calls_before,
                              "resume_exit": resume.returncode,
                              "duplicate_reports": len(tracker) - len(set(tracker))})
            if progress:
                progress(i + 1, tries)
    kills = [t for t in tries_out if t["killed"]]
    in_loop = [t for t in kills if t["in_page_loop"]]
    hits = [t for t in kills if t["duplicate_reports"] > 0]
    return {
        "tries": tries, "seed": seed, "real_kills": len(kills), "kills_in_page_loop": len(in_loop),
        "duplicates_hit": len(hits), "run_life_ms": life * 1e3, "latency_ms": latency_ms,
        "reference_lives_ms": [x * 1e3 for x in lives],
        # Only a kill inside the page loop could have hit a danger window: the bound is over those.
        "rule_of_three_bound": rule_of_three(len(in_loop)),
        "exact_95_bound": (1 - 0.05 ** (1 / len(in_loop))) if in_loop else None,
        "runs": tries_out,
    }


# --- the lesson's table --------------------------------------------------------------------------

LESSON_CONFIGS = {
    "none": RunConfig(store="none", intent=False),
    "snapshot": RunConfig(store="snapshot", intent=False, idempotency_key=False),
    "log": RunConfig(store="log", intent=True, idempotency_key=True, snapshot_every=0),
    "log_snap4": RunConfig(store="log", intent=True, idempotency_key=True, snapshot_every=4),
    "log_no_newline": RunConfig(store="log", intent=True, idempotency_key=True,
                                write_mode="no-newline"),
}

#: The lesson's figures (first lesson text), keyed as `python -m bughunt lesson --json` prints them.
LESSON_FIGURES = {
    "crash_points_no_intent": 51, "crash_points_log": 54, "redo_none": 6.51,
    "redo_snapshot": 0.76, "replay_log_avg": 7.26, "replay_log_max": 15,
    "replay_snap4_avg": 1.98, "replay_snap4_max": 4, "duplicate_points_no_key": 6,
    "log_runs_correct": 54,
}

LESSON_ROWS = [   # (key, figure, configuration)
    ("crash_points_no_intent", "crash points", "no intents"),
    ("crash_points_log", "crash points", "log with intents"),
    ("redo_none", "avg redone model calls", "no checkpoint, 51 points"),
    ("redo_snapshot", "avg redone model calls", "snapshot after every page, 51 points"),
    ("replay_log_avg", "avg replayed events", "pure event log, 54 points"),
    ("replay_log_max", "max replayed events", "pure event log, 54 points"),
    ("replay_snap4_avg", "avg replayed events", "log + snapshot every 4 pages, 54 points"),
    ("replay_snap4_max", "max replayed events", "log + snapshot every 4 pages, 54 points"),
    ("duplicate_points_no_key", "points that duplicate a report",
     "snapshot after every page, no idempotency key, 51 points"),
    ("log_runs_correct", "log runs that recover correctly", "log + intents + key, 54 points"),
]


def lesson(*, workers: int | None = None, progress: Progress | None = None,
           base_dir: Path | None = None) -> dict:
    """Run the lesson's five sweeps in one pool; return figures, summaries and every record."""
    jobs = [(tag, cfg, p) for tag, cfg in LESSON_CONFIGS.items() for p in crash_points(cfg)]
    t0 = time.perf_counter()
    with work_dir(base_dir, in_memory=True) as base:
        records = run_crash_jobs(jobs, base, workers, progress, discard=base_dir is None)
    elapsed = time.perf_counter() - t0
    by = {tag: [r for r in records if r.sweep == tag] for tag in LESSON_CONFIGS}
    s = {tag: summarize(rs) for tag, rs in by.items()}
    figures = {
        "crash_points_no_intent": s["snapshot"]["crash_points"],
        "crash_points_log": s["log"]["crash_points"],
        "redo_none": round(s["none"]["avg_redone_model_calls"], 2),
        "redo_snapshot": round(s["snapshot"]["avg_redone_model_calls"], 2),
        "replay_log_avg": round(s["log"]["avg_replayed_events"], 2),
        "replay_log_max": s["log"]["max_replayed_events"],
        "replay_snap4_avg": round(s["log_snap4"]["avg_replayed_events"], 2),
        "replay_snap4_max": s["log_snap4"]["max_replayed_events"],
        "duplicate_points_no_key": s["snapshot"]["duplicate_points"],
        "log_runs_correct": s["log"]["correct_runs"],
    }
    nonl = by["log_no_newline"]
    no_newline = {
        "crash_points": len(nonl),
        "resume_correct": sum(r.resumed_right for r in nonl),
        "rebuild_failures": s["log_no_newline"]["rebuild_failures"],
        "rebuild_failure_points": [r.crash_point for r in nonl
                                   if r.rebuild_ok is False or r.disk_error],
        "lesson_reader_failures": sum(r.lesson_reader_ok is False for r in nonl),
    }
    return {"figures": figures, "lesson": dict(LESSON_FIGURES), "summaries": s,
            "no_newline": no_newline, "records": records, "elapsed_s": elapsed,
            "pairs": len(jobs)}


def lesson_table(result: dict):
    """The lesson's table, lesson vs this machine, as a DataFrame."""
    import pandas as pd

    keys = [key for key, _, _ in LESSON_ROWS]
    return pd.DataFrame({
        "figure": [fig for _, fig, _ in LESSON_ROWS],
        "configuration": [conf for _, _, conf in LESSON_ROWS],
        # object columns, so that counts print as 51 and averages as 6.51
        "lesson": pd.Series([result["lesson"][k] for k in keys], dtype=object),
        "lab": pd.Series([result["figures"][k] for k in keys], dtype=object),
        "match": [result["figures"][k] == result["lesson"][k] for k in keys],
    })
