"""The experiment: start the worker, kill it, resume it, and ask three witnesses what happened.

A crash run is two real processes on one fresh run directory: the first dies by SIGKILL at a crash
point, the second resumes to the end. Then the outside world is read:

- the **bill** says how many model calls were paid (redone = billed - what a clean run pays);
- the **tracker** says which reports exist (duplicates, lost reports);
- the **three-way check** compares the tracker, the resumed worker's in-memory result, and a fresh
  rebuild from disk by code that did not run the worker. The last witness catches the bugs that are
  right now and wrong at the next recovery, like the no-newline trap.

Results are plain dicts (one per crash point); `sweep` and friends also give pandas DataFrames.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable

from . import forkserver
from .config import RunConfig
from .crashpoints import PAUSE_BANNER, CrashPoint, scheme
from .events import apply_event, initial_state
from .stores import LOG_FILE, StoreDamage, rebuild_from_disk
from .world import Site, read_bill, read_reports

Progress = Callable[[int, int], None]     # (done, total)


# --- processes -----------------------------------------------------------------------------------

def worker_args(run_dir: Path, config: RunConfig, *extra: str) -> list[str]:
    return ["--dir", str(run_dir), *config.to_args(), *extra]


def worker_command(run_dir: Path, config: RunConfig, *extra: str) -> list[str]:
    """The worker as a fresh interpreter: `python -m bughunt.worker ...`."""
    return [sys.executable, "-m", "bughunt.worker", *worker_args(run_dir, config, *extra)]


_POOL = None
_POOL_LOCK = threading.Lock()


def _fork_pool():
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from .forkserver import ForkServerPool
            _POOL = ForkServerPool()
        return _POOL


def run_worker(run_dir: Path, config: RunConfig, *, crash_at: int | None = None,
               trace: bool = False, extra: tuple[str, ...] = (),
               timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the worker to its end (or its planned SIGKILL), with the JSON report on stdout.

    `extra`: more worker flags, e.g. lesson 8's `--plant-bug NAME` or `--fail-write K`.
    """
    extra = ["--json", *extra] + (["--crash-at", str(crash_at)] if crash_at is not None else [])
    extra += ["--trace"] if trace else []
    if forkserver.enabled():
        # A fork of a pre-imported worker: a separate process all the same, killed by a real
        # SIGKILL at its crash point, but started in a millisecond.
        return _fork_pool().run(worker_args(run_dir, config, *extra), timeout)
    return subprocess.run(worker_command(run_dir, config, *extra), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def clean_run(config: RunConfig, run_dir: Path | None = None, *, trace: bool = False) -> dict:
    """One run without a crash; its JSON report (in a temp dir unless `run_dir` is given)."""
    with work_dir(None) as tmp:
        target = Path(run_dir) if run_dir is not None else tmp / "clean"
        proc = run_worker(target, config, trace=trace)
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

    def __init__(self, run_dir: Path, config: RunConfig, pause_at: int, timeout: float = 60,
                 trace: bool = False):
        extra = ["--json", "--pause-at", str(pause_at)] + (["--trace"] if trace else [])
        self.proc = subprocess.Popen(
            worker_command(run_dir, config, *extra),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
        self.proc.wait()
        raise RuntimeError("worker ended before its pause point: " + "".join(lines[-5:]))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> int:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate()
        return self.proc.returncode

    def release(self) -> dict:
        out, err = self.proc.communicate(input="")
        if self.proc.returncode != 0:
            raise RuntimeError(f"worker exited {self.proc.returncode}: {err.strip()}")
        return json.loads(out)


# --- the three witnesses -------------------------------------------------------------------------

def crash_points(config: RunConfig) -> list[CrashPoint]:
    """The lesson's crash points for this configuration."""
    return scheme(config.pages, Site.load(config.pages).bug_pages, config.intent)


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


def three_way_check(run_dir: Path, config: RunConfig, memory_state: dict | None) -> dict:
    """Tracker == the resumed worker's in-memory result == a fresh rebuild from disk."""
    tracker_pages = sorted(r["page"] for r in read_reports(run_dir))
    result = {"tracker_pages": tracker_pages,
              "memory_findings": None if memory_state is None else memory_state["findings"],
              "disk_findings": None, "disk_error": None, "disk_matches_memory": None}
    if config.store != "none":     # with no store there is no third witness
        try:
            disk_state = rebuild_from_disk(run_dir, config).state
        except StoreDamage as e:
            result["disk_error"] = str(e)
        else:
            result["disk_findings"] = disk_state["findings"]
            result["disk_matches_memory"] = disk_state == memory_state
    result["three_way_ok"] = (memory_state is not None
                              and tracker_pages == sorted(memory_state["findings"])
                              and result["disk_matches_memory"] is not False
                              and result["disk_error"] is None)
    return result


def outcome(run_dir: Path, config: RunConfig, report: dict | None) -> dict:
    """After the last process of a run: duplicate and lost reports (the tracker against the site's
    bugs) and the three-way check. `report` is the last worker's JSON report, or None if it failed."""
    check = three_way_check(run_dir, config, report["state"] if report else None)
    tracker = check["tracker_pages"]
    return {"duplicate_reports": len(tracker) - len(set(tracker)),
            "lost_reports": len(set(Site.load(config.pages).bug_pages) - set(tracker)),
            "three_way_ok": check["three_way_ok"],
            "rebuild_ok": check["disk_matches_memory"],
            "disk_error": check["disk_error"],
            "tracker_pages": tracker,
            "memory_findings": check["memory_findings"],
            "final_state": report["state"] if report else None}


def crash_worker(run_dir: Path, config: RunConfig, index: int, *,
                 extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run a worker that must die by SIGKILL at crash point `index`; raise if it did not."""
    proc = run_worker(run_dir, config, crash_at=index, extra=extra)
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"{run_dir}: worker was not killed at crash point {index} (exit "
                           f"{proc.returncode}): {proc.stderr.strip()[-300:]}")
    return proc


def crash_and_resume(config: RunConfig, point: CrashPoint, run_dir: Path, *,
                     extra: tuple[str, ...] = ()) -> dict:
    """Kill a fresh run at `point`, resume it to the end, and measure. `run_dir` must not exist.

    `extra` worker flags apply to both processes (lesson 8 plants bugs this way).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True)
    record = {"index": point.index, "page": point.page, "label": point.label, "error": None}
    first = run_worker(run_dir, config, crash_at=point.index, extra=extra)
    if first.returncode != -signal.SIGKILL:
        record["error"] = (f"first run was not killed at the crash point (exit "
                           f"{first.returncode}): {first.stderr.strip()[-300:]}")
    resume = run_worker(run_dir, config, extra=extra)
    report = None
    if resume.returncode == 0:
        report = json.loads(resume.stdout)
    elif record["error"] is None:
        record["error"] = f"resume exited {resume.returncode}: {resume.stderr.strip()[-300:]}"
    record.update({
        "redone_model_calls": len(read_bill(run_dir)) - config.pages,
        "replayed_events": report["replayed_events"] if report else None,
        **outcome(run_dir, config, report),
        "aborted_pages": report["aborted"] if report else None,
        "torn_lines_skipped": report["torn_lines_skipped"] if report else None,
        "tails_repaired": report["tails_repaired"] if report else None,
        "temp_files_removed": report["temp_files_removed"] if report else None,
        "snapshot_fallback": report["snapshot_fallback"] if report else None,
        "resume_exit": resume.returncode,
    })
    if config.store == "log" and report:
        record["lesson_reader_ok"] = lesson_reader(run_dir) == report["state"]
    return record


def replay_after_crash(config: RunConfig, point: CrashPoint, run_dir: Path) -> dict:
    """Kill a fresh run at `point` and count what recovery would replay, without resuming.

    The count comes from the store's read-only `load()`, the same code a resuming worker runs
    first, so it equals the resumed worker's `replayed_events` at half the processes.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True)
    crash_worker(run_dir, config, point.index)
    rec = rebuild_from_disk(run_dir, config)
    return {"index": point.index, "page": point.page, "label": point.label,
            "replayed_events": rec.replayed_events, "snapshot_used": rec.snapshot_used,
            "torn_lines_skipped": rec.torn_lines_skipped}


# --- sweeps --------------------------------------------------------------------------------------

def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:          # macOS
        return os.cpu_count() or 2


@contextmanager
def work_dir(base: Path | None = None):
    """A directory for run dirs: `base` (created, must be new or empty) or a temp dir removed after."""
    if base is None:
        tmp = tempfile.mkdtemp(prefix="bughunt-")
        try:
            yield Path(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    base = Path(base)
    if base.exists() and any(base.iterdir()):
        raise FileExistsError(f"{base}: exists and is not empty; give a new --work-dir")
    base.mkdir(parents=True, exist_ok=True)
    yield base


def run_crash_jobs(jobs: list[tuple[str, RunConfig, CrashPoint]], base: Path,
                   workers: int | None = None, progress: Progress | None = None,
                   measure: Callable[[RunConfig, CrashPoint, Path], dict] | None = None
                   ) -> list[dict]:
    """Run (tag, config, point) jobs in parallel: `measure` (default: `crash_and_resume`) each.

    Threads only wait on child processes, so one thread per core keeps every core busy.
    """
    measure = measure or crash_and_resume
    results: list[dict] = [None] * len(jobs)    # type: ignore[list-item]
    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        futures = {pool.submit(measure, config, point, base / f"{tag}-{point.index:03d}"): i
                   for i, (tag, config, point) in enumerate(jobs)}
        for done, future in enumerate(as_completed(futures), 1):
            i = futures[future]
            results[i] = {"sweep": jobs[i][0], **future.result()}
            if progress:
                progress(done, len(jobs))
    return results


def sweep_records(config: RunConfig, *, points: Iterable[int] | None = None,
                  workers: int | None = None, progress: Progress | None = None,
                  base_dir: Path | None = None, tag: str = "sweep") -> list[dict]:
    """Crash at every point of `config` (or the given indices), resume, measure: one dict each."""
    all_points = crash_points(config)
    if points is not None:
        wanted = set(points)
        bad = wanted - {p.index for p in all_points}
        if bad:
            raise ValueError(f"no crash points {sorted(bad)} in this configuration "
                             f"(it has 1 to {len(all_points)})")
        all_points = [p for p in all_points if p.index in wanted]
    with work_dir(base_dir) as base:
        return run_crash_jobs([(tag, config, p) for p in all_points], base, workers, progress)


def sweep(config: RunConfig, **kwargs):
    """`sweep_records` as a pandas DataFrame, one row per crash point."""
    import pandas as pd

    return pd.DataFrame(sweep_records(config, **kwargs))


def summarize(records: list[dict]) -> dict:
    """The sweep's summary: averages and maxima over crash points, counts of bad outcomes."""
    n = len(records)

    def avg(key):
        values = [r[key] for r in records if r[key] is not None]
        return round(sum(values) / len(values), 4) if values else None

    def top(key):
        values = [r[key] for r in records if r[key] is not None]
        return max(values) if values else None

    return {
        "crash_points": n,
        "avg_redone_model_calls": avg("redone_model_calls"),
        "max_redone_model_calls": top("redone_model_calls"),
        "avg_replayed_events": avg("replayed_events"),
        "max_replayed_events": top("replayed_events"),
        "duplicate_points": sum(r["duplicate_reports"] > 0 for r in records),
        "lost_points": sum(r["lost_reports"] > 0 for r in records),
        "three_way_failures": sum(not r["three_way_ok"] for r in records),
        "rebuild_failures": sum(r["rebuild_ok"] is False or r["disk_error"] is not None
                                for r in records),
        "errors": sum(r["error"] is not None for r in records),
        "correct_runs": sum(is_correct(r) for r in records),
    }


def is_correct(record: dict) -> bool:
    """A crash run that recovered correctly: no error, no duplicate, nothing lost, three-way ok."""
    return (record["error"] is None and record["duplicate_reports"] == 0
            and record["lost_reports"] == 0 and record["three_way_ok"])


def verdict(record: dict) -> str:
    """One word for a crash run, worst first: error, duplicate, lost, rebuild fails, tracker
    disagrees (the agent's result and the tracker differ), correct."""
    if record["error"] is not None:
        return "error"
    if record["duplicate_reports"]:
        return "duplicate"
    if record["lost_reports"]:
        return "lost"
    if record["rebuild_ok"] is False or record["disk_error"] is not None:
        return "rebuild fails"
    if not record["three_way_ok"]:
        return "tracker disagrees"
    return "correct"


VERDICTS = ("correct", "rebuild fails", "tracker disagrees", "lost", "duplicate", "error")


# --- random kills --------------------------------------------------------------------------------

def rule_of_three(n: int) -> float | None:
    """Zero failures in n independent tries: the failure rate is below about 3/n (95%)."""
    return 3 / n if n else None


def kill_random(config: RunConfig, *, tries: int = 40, seed: int = 0,
                base_dir: Path | None = None, progress: Progress | None = None) -> dict:
    """SIGKILL the worker from outside after a seeded random delay, resume, look for duplicates.

    The delays are drawn uniformly over the length of a clean run measured first, so a kill may
    land anywhere from interpreter start to the last page. Unlike the exhaustive sweep, the outcome
    is up to the scheduler: the same seed gives the same delays, not the same results.
    """
    rng = random.Random(seed)
    tries_out = []
    with work_dir(base_dir) as base:
        t0 = time.perf_counter()
        clean = run_worker(base / "clean", config)
        clean_s = time.perf_counter() - t0
        if clean.returncode != 0:
            raise RuntimeError(f"clean run failed: {clean.stderr.strip()}")
        for i in range(tries):
            run_dir = base / f"try-{i:03d}"
            run_dir.mkdir()
            delay = rng.uniform(0, clean_s)
            proc = subprocess.Popen(worker_command(run_dir, config), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)     # a no-op if it already finished
            proc.wait()
            killed = proc.returncode == -signal.SIGKILL
            calls_before = len(read_bill(run_dir))
            resume = run_worker(run_dir, config)
            tracker = sorted(r["page"] for r in read_reports(run_dir))
            tries_out.append({"try": i, "delay_s": delay, "killed": killed,
                              "resume_exit": resume.returncode,
                              "calls_before_kill": calls_before,
                              "duplicate_reports": len(tracker) - len(set(tracker))})
            if progress:
                progress(i + 1, tries)
    kills = [t for t in tries_out if t["killed"]]
    hits = [t for t in kills if t["duplicate_reports"] > 0]
    return {
        "tries": tries, "seed": seed, "real_kills": len(kills), "duplicates_hit": len(hits),
        "clean_run_s": clean_s,
        "rule_of_three_bound": rule_of_three(len(kills)),
        "exact_95_bound": (1 - 0.05 ** (1 / len(kills))) if kills else None,
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
    ("duplicate_points_no_key", "points that duplicate a report", "no idempotency key, 51 points"),
    ("log_runs_correct", "log runs that recover correctly", "log + intents + key, 54 points"),
]


def lesson(*, workers: int | None = None, progress: Progress | None = None,
           base_dir: Path | None = None) -> dict:
    """Run the lesson's five sweeps in one pool; return figures, summaries and every record."""
    jobs = [(tag, cfg, p) for tag, cfg in LESSON_CONFIGS.items() for p in crash_points(cfg)]
    t0 = time.perf_counter()
    with work_dir(base_dir) as base:
        records = run_crash_jobs(jobs, base, workers, progress)
    elapsed = time.perf_counter() - t0
    by = {tag: [r for r in records if r["sweep"] == tag] for tag in LESSON_CONFIGS}
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
        "resume_correct": sum(r["error"] is None and r["duplicate_reports"] == 0
                              and r["lost_reports"] == 0
                              and r["tracker_pages"] == sorted(r["memory_findings"] or [])
                              for r in nonl),
        "rebuild_failures": s["log_no_newline"]["rebuild_failures"],
        "rebuild_failure_points": [(r["index"], r["page"], r["label"]) for r in nonl
                                   if r["rebuild_ok"] is False or r["disk_error"]],
        "lesson_reader_failures": sum(r.get("lesson_reader_ok") is False for r in nonl),
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
