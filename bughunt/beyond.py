"""Lesson 8: the failures the first lesson left untested, each answered with counted results.

- `chain_sweep`: a crash during recovery. Crash a run at point i, crash its resume at point j (or
  inside recovery itself), resume once more; and check that resuming twice ends where resuming once
  does, down to the bytes of the checkpoint files.
- `two_resumers`: two processes resume one run at the same moment; with the run lock exactly one
  proceeds, without it (opt-in, for this experiment) both do, and the log forks.
- `paused_holder` / `inherited_lock`: what the run lock (a `flock`) does when its holder is paused
  (it still excludes everyone) and when its holder dies while a forked child still holds the
  descriptor (the lock outlives the holder until the child ends too).
- `disk_full_sweep` / `fsync_failure_sweep`: the k-th write (or fsync) fails, for every k; the worker
  must stop with a clear message, lose nothing the tracker acknowledged, and finish on the next
  resume.
- `power_loss_sweep`: the disk states a power cut may leave (`bughunt.powerloss`), each recovered
  and checked three ways.
- `planted_bugs`: the worker's own code with one known bug at a time (a mutant: one line changed in
  a copy of the source); does the right sweep catch it, and what does the conformance suite say?
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import json
import random
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .config import CONFIG_FILE, RunConfig
from .crashpoints import PAUSE_BANNER, RECOVERY_LABELS, CrashPoint
from .experiment import (Outcome, PausedWorker, crash_and_resume, crash_points, forget, in_parallel,
                         outcome, run_crash_jobs, run_worker, spawn, work_dir, worker_command)
from .instruments import mutants
from .powerloss import crash_states, materialize, read_journal
from .stores import LOG_FILE, SNAPSHOT_FILE, StoreDamage, rebuild_from_disk
from .world import Tracker, read_reports

#: The source text's safe configuration: event log, intents, idempotency key, atomic writes.
SAFE = RunConfig(store="log", intent=True, idempotency_key=True)
CHECKPOINT_FILES = (CONFIG_FILE, LOG_FILE, SNAPSHOT_FILE)


def checkpoint_digest(run_dir: Path) -> str:
    """The checkpoint files' bytes, hashed: what a further resume must leave unchanged."""
    h = hashlib.sha256()
    for name in CHECKPOINT_FILES:
        path = Path(run_dir) / name
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"-") + b"\0")
    return h.hexdigest()


# --- crash during recovery -----------------------------------------------------------------------

def chain_pairs(config: RunConfig) -> list[tuple[CrashPoint, str]]:
    """(first crash, second crash) pairs: every point the resume can reach, and recovery's steps.

    The resume starts at the first page not done: the crashed page itself, or the next one when
    the kill fell after the page's commit.
    """
    points = crash_points(config)
    pairs = []
    for first in points:
        resume_page = first.page + (first.label == "after_commit")
        for second in points:
            if second.page >= resume_page:
                pairs.append((first, second.name))
        # recovery's own points: every resume repairs; only an at-most-once one aborts an intent
        pairs += [(first, step) for step in RECOVERY_LABELS
                  if step != "after_abort" or (config.intent and config.pending == "abort")]
    return pairs


def chain_record(config: RunConfig, first: CrashPoint, second: str, run_dir: Path, *,
                 code: Path | None = None) -> dict:
    """Crash at `first`, crash the resume at `second`, resume again, then once more for nothing."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True)
    r1 = run_worker(run_dir, config, crash_at=first, code=code)
    r2 = run_worker(run_dir, config, crash_at=second, code=code)
    r3 = run_worker(run_dir, config, code=code)
    report = json.loads(r3.stdout) if r3.returncode == 0 else None
    before = checkpoint_digest(run_dir)
    r4 = run_worker(run_dir, config, code=code)          # resuming a finished run: a no-op
    changed = checkpoint_digest(run_dir) != before
    # Its `error` is the experiment's, given below.
    return {**outcome_columns(outcome(run_dir, config, report)),
            "first": first.index, "first_point": first.name, "first_page": first.page,
            "first_label": first.label,
            "second": second, "second_killed": r2.returncode == -signal.SIGKILL,
            "error": None if (r1.returncode == -signal.SIGKILL and r3.returncode == 0
                              and r4.returncode == 0)
            else f"exits {r1.returncode}, {r2.returncode}, {r3.returncode}, {r4.returncode}: "
                 f"{(r3.stderr or r4.stderr).strip()[-200:]}",
            "noop_resume_changed_files": changed}


def outcome_columns(seen: Outcome) -> dict:
    """An Outcome as columns of a record, with the lab's one verdict on it (`outcome_correct`)."""
    return {**dataclasses.asdict(seen), "outcome_correct": seen.correct}


def chain_sweep(config: RunConfig = SAFE, *, pairs=None, workers: int | None = None,
                progress=None, code: Path | None = None) -> list[dict]:
    """Every (first crash, second crash) pair, plus the single-crash reference for each first point.

    `same_as_single` compares the final state with a single crash+resume at the same first point.
    """
    pairs = chain_pairs(config) if pairs is None else pairs
    firsts = sorted({p for p, _ in pairs}, key=lambda p: p.index)
    with work_dir(in_memory=True) as base:
        calls = [functools.partial(crash_and_resume, config, p, base / f"single-{p.index:03d}",
                                   code=code) for p in firsts]
        calls += [functools.partial(chain_record, config, p, j,
                                    base / f"chain-{p.index:03d}-{j}", code=code)
                  for p, j in pairs]
        results = in_parallel(calls, workers, progress)
    reference = {p.index: r.final_state for p, r in zip(firsts, results)}
    records = results[len(firsts):]
    for r in records:
        r["same_as_single"] = outcome_of(r["final_state"]) == outcome_of(reference[r["first"]])
        r["correct"] = (r["error"] is None and r["outcome_correct"] and r["same_as_single"]
                        and not r["noop_resume_changed_files"])
    return records


def outcome_of(state: dict | None) -> dict | None:
    """What a run achieved: everything in its final state but `seq`, which counts events written
    (a redone bug page records its intent again, so more crashes mean more events)."""
    return None if state is None else {k: v for k, v in state.items() if k != "seq"}


def chain_summary(records: list[dict]) -> dict:
    killed = [r for r in records if r["second_killed"]]
    return {"pairs": len(records), "second crash really happened": len(killed),
            "duplicates": sum(r["duplicate_reports"] > 0 for r in records),
            "lost reports": sum(r["lost_reports"] > 0 for r in records),
            "three-way failures": sum(not r["three_way_check"] for r in records),
            "differs from a single resume": sum(not r["same_as_single"] for r in records),
            "a no-op resume changed files": sum(r["noop_resume_changed_files"] for r in records),
            # a message is a str; a DataFrame row holds NaN, not None, where there is none
            "errors": sum(isinstance(r["error"], str) for r in records),
            "correct": sum(r["correct"] for r in records)}


# --- two resumers --------------------------------------------------------------------------------

def _start_paused(run_dir: Path, config: RunConfig, pause_at: str,
                  code: Path | None) -> subprocess.Popen:
    return spawn(worker_command(run_dir, config, "--json", "--pause-at", pause_at),
                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                 env=None if code is None else mutants.env(code))


def _wait_paused_or_exited(procs: list[subprocess.Popen], timeout: float = 60) -> dict:
    """Watch both processes until each has either paused (holding the run) or exited."""
    state: dict[int, str] = {}
    sel = selectors.DefaultSelector()
    for i, p in enumerate(procs):
        sel.register(p.stderr, selectors.EVENT_READ, i)
    deadline = time.monotonic() + timeout
    while len(state) < len(procs) and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            i = key.data
            line = procs[i].stderr.readline()
            if line.startswith(PAUSE_BANNER):
                state[i] = "paused"
                sel.unregister(procs[i].stderr)
            elif line == "":
                procs[i].wait()
                state[i] = "exited"
                sel.unregister(procs[i].stderr)
    sel.close()
    return state


def two_resumers_trial(config: RunConfig, first: CrashPoint, run_dir: Path, *, lock: bool = True,
                       code: Path | None = None) -> dict:
    """Crash a run at `first`; start two resumers at the same moment; let them race; judge.

    Without the lock (`lock=False`) the resumers run the no-lock mutant: the worker's own code
    with the one line that takes the run lock removed (`instruments.mutants`)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True)
    if not lock:
        code = mutants.code_dir("no-lock")
    run_worker(run_dir, config, crash_at=first, code=code)
    # Both pause at the first point a resume reaches, so that the winner holds the run while the
    # other tries to take it: no sleep decides the outcome.
    next_page = rebuild_from_disk(run_dir, config).state["next_page"]
    pause = next(p.name for p in crash_points(config) if p.page == next_page)
    procs = [_start_paused(run_dir, config, pause, code) for _ in range(2)]
    try:
        seen = _wait_paused_or_exited(procs)
        outs = []
        for p in procs:                      # release the paused ones together
            if p.poll() is None:
                p.stdin.close()
                p.stdin = None
        for p in procs:
            out, err = p.communicate(timeout=60)
            outs.append((p.returncode, out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            forget(p)
    codes = [c for c, _ in outs]
    states = [json.loads(o)["state"] for c, o in outs if c == 0 and o.strip()]
    lines = (run_dir / LOG_FILE).read_bytes().splitlines() if (run_dir / LOG_FILE).exists() else []
    seqs = []
    for raw in lines:
        try:
            seqs.append(json.loads(raw)["seq"])
        except (ValueError, KeyError, TypeError):
            pass
    final = outcome(run_dir, config, {"state": states[0]} if states else None)
    return {"first": first.index, "first_point": first.name, "paused": sorted(seen.values()),
            "exits": sorted(codes),
            "proceeded": sum(c == 0 for c in codes), "refused_busy": sum(c == 75 for c in codes),
            "exactly_one": sorted(codes) == [0, 75],
            "duplicate_events": len(seqs) - len(set(seqs)),
            "forked_state": len(states) == 2 and states[0] != states[1] or (
                len(states) == 2 and len(seqs) != len(set(seqs))),
            "rebuild_refused": final.disk_error is not None,
            "duplicate_reports": final.duplicate_reports, "lost_reports": final.lost_reports,
            "three_way_check": final.three_way_check}


def two_resumers(config: RunConfig = SAFE, *, trials: int = 12, seed: int = 0, lock: bool = True,
                 workers: int | None = None, progress=None, code: Path | None = None):
    """`trials` races, each after a crash at a seeded random point (pause points differ with it)."""
    rng = random.Random(seed)
    # the resume must have work left: no first crash after the last page's commit
    points = [p for p in crash_points(config)
              if not (p.page == config.pages and p.label == "after_commit")]
    firsts = [rng.choice(points) for _ in range(trials)]
    with work_dir(in_memory=True) as base:
        results = in_parallel([functools.partial(two_resumers_trial, config, f,
                                                 base / f"race-{i:03d}", lock=lock, code=code)
                               for i, f in enumerate(firsts)], workers, progress)
    return [{"trial": i, **r} for i, r in enumerate(results, 1)]


# --- what the run lock does, and does not do ------------------------------------------------------

def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def paused_holder(config: RunConfig = SAFE, run_dir: Path | None = None,
                  pause_at: str = "p2.after_visit") -> dict:
    """A worker holding the run is stopped with SIGSTOP (as a long GC pause or a frozen VM would stop
    it); a second worker tries the run. A flock belongs to the open file, not to a running thread:
    a stopped process still holds it, so the second worker is refused. Then the holder is let go.
    """
    with work_dir(run_dir) as base:
        d = Path(base) / "paused"
        holder = PausedWorker(d, config, pause_at=pause_at)
        try:
            holder.proc.send_signal(signal.SIGSTOP)
            second = run_worker(d, config)
            holder.proc.send_signal(signal.SIGCONT)
            report = holder.release()
        finally:
            if holder.proc.poll() is None:
                holder.proc.send_signal(signal.SIGCONT)
                holder.kill()
    return {"holder": f"stopped with SIGSTOP at {pause_at}",
            "second worker exit": second.returncode,
            "second worker says": _last_line(second.stderr),
            "holder, after SIGCONT": f"exit 0, {report['state']['next_page'] - 1} pages done"}


#: A process that takes the run lock the worker's way, forks a child that inherits the descriptor
#: (as `os.fork`, or `multiprocessing` with the fork start method, does), reports the child's pid on
#: stdout, and waits. The child lives until its stdin closes.
LOCK_HOLDER = """\
import os, sys
from pathlib import Path
from bughunt.worker import acquire_run_lock
fd = acquire_run_lock(Path(sys.argv[1]))
child = os.fork()
if child == 0:
    sys.stdin.read()
    os._exit(0)
print(child, flush=True)
sys.stdin.read()
"""


def inherited_lock(config: RunConfig = SAFE, run_dir: Path | None = None) -> dict:
    """The lock's holder forks a child, then dies by SIGKILL; a worker tries the run while the child
    lives, and again once it has ended.

    flock(2): the lock belongs to the open file description, which fork shares with the child, and
    "is released either by an explicit LOCK_UN operation on any of these duplicate file
    descriptors, or when all such file descriptors have been closed". So the holder's death alone
    does not free the run. (Python's `subprocess` closes the descriptor in the program it starts,
    since descriptors are non-inheritable by default; a plain fork keeps it.)
    """
    with work_dir(run_dir) as base:
        d = Path(base) / "inherited"
        d.mkdir(parents=True)
        holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(d)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            line = holder.stdout.readline()       # the lock is held and the child forked
            if not line.strip().isdigit():
                raise RuntimeError(f"the lock holder did not start: {holder.stderr.read()}")
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            while_child = run_worker(d, config)
            holder.stdin.close()                  # the child reads EOF and ends...
            holder.stdout.read()                  # ...and its end closes the last copy of stdout
            after_child = run_worker(d, config)
        finally:
            if holder.stdin and not holder.stdin.closed:
                holder.stdin.close()
            if holder.poll() is None:
                holder.kill()
                holder.wait()
    return {"holder": f"killed by signal {-holder.returncode} after forking a child",
            "worker while the child lives: exit": while_child.returncode,
            "it says": _last_line(while_child.stderr),
            "worker after the child ended: exit": after_child.returncode}


# --- disk full, failed fsync ---------------------------------------------------------------------

def _io_counts(config: RunConfig) -> dict:
    with work_dir() as base:
        proc = run_worker(base / "clean", config)
        report = json.loads(proc.stdout)
    return {"disk_writes": report["disk_writes"], "fsyncs": report["fsyncs"]}


def fault_record(config: RunConfig, flag: tuple[str, ...], k: int, run_dir: Path) -> dict:
    """Fail at `flag` k, then resume with the disk healthy again."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True)
    failed = run_worker(run_dir, config, extra=("--io-trace", *flag))
    failed.stderr = failed.stderr.replace(str(run_dir), "RUN_DIR")
    acknowledged = sorted({r["page"] for r in read_reports(run_dir)})
    journal = read_journal(run_dir / "io.jsonl") if (run_dir / "io.jsonl").exists() else []
    resumed = run_worker(run_dir, config)
    report = json.loads(resumed.stdout) if resumed.returncode == 0 else None
    final = outcome(run_dir, config, report)
    tracker_after = {r["page"] for r in read_reports(run_dir)}
    message = failed.stderr.strip().splitlines()[-1] if failed.stderr.strip() else ""
    return {"k": k, "exit": failed.returncode, "message": message,
            "names_the_file": any(n in message for n in CHECKPOINT_FILES + ("config.json.tmp",
                                                                          "snapshot.json.tmp")),
            "fsyncs_after_failure": sum(op["op"] in ("fsync", "fsync_dir") for op in journal),
            "acknowledged_before": acknowledged,
            "acknowledged_kept": set(acknowledged) <= tracker_after,
            "resume_exit": resumed.returncode, **outcome_columns(final),
            "correct_after_resume": resumed.returncode == 0 and final.correct}


def _fault_sweep(config, flags_for, n, workers, progress):
    with work_dir(in_memory=True) as base:
        return in_parallel([functools.partial(fault_record, config, flags_for(k), k,
                                              base / f"k{k:03d}") for k in range(1, n + 1)],
                           workers, progress)


def disk_full_sweep(config: RunConfig = SAFE, *, errno_name: str = "ENOSPC",
                    workers: int | None = None, progress=None) -> list[dict]:
    """Make the k-th disk write fail (a short write, then ENOSPC or EFBIG), for every k."""
    n = _io_counts(config)["disk_writes"]
    return _fault_sweep(config, lambda k: ("--fail-write", f"{k}:{errno_name}"), n, workers,
                        progress)


def fsync_failure_sweep(config: RunConfig = SAFE.replace(fsync="always"), *,
                        workers: int | None = None, progress=None) -> list[dict]:
    """Make the k-th fsync fail with EIO, for every k: fatal, never retried."""
    n = _io_counts(config)["fsyncs"]
    records = _fault_sweep(config, lambda k: ("--fail-fsync", str(k)), n, workers, progress)
    for r in records:
        r["retried"] = r["fsyncs_after_failure"] >= r["k"]   # the journal has k-1 if none followed
    return records


# --- power loss ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    """A worker design to put through the power-loss simulation."""

    name: str
    config: RunConfig
    mutant: str | None = None          # run a planted bug (instruments.mutants), not the real code

    @property
    def code(self) -> Path | None:
        return None if self.mutant is None else mutants.code_dir(self.mutant)


POWER_VARIANTS = [
    Variant("snapshot, atomic, fsync always (+ dir fsync)",
            RunConfig(store="snapshot", intent=False, fsync="always", pages=6)),
    Variant("snapshot, atomic, fsync always, no dir fsync",
            RunConfig(store="snapshot", intent=False, fsync="always", pages=6), "no-dir-fsync"),
    Variant("snapshot, atomic, fsync never",
            RunConfig(store="snapshot", intent=False, fsync="never", pages=6)),
    Variant("snapshot, torn (in place), fsync always",
            RunConfig(store="snapshot", intent=False, fsync="always", write_mode="torn",
                      pages=6)),
    Variant("log, atomic, fsync always",
            RunConfig(store="log", intent=True, fsync="always", pages=6)),
    Variant("log, atomic, fsync never",
            RunConfig(store="log", intent=True, fsync="never", pages=6)),
]


def power_state_record(variant: Variant, state, run_dir: Path) -> dict:
    """Recover one power-cut state: read-only first (what survived), then a real resume."""
    materialize(state, run_dir, Tracker)
    committed = len(state.committed)
    try:
        recovered = rebuild_from_disk(run_dir, variant.config) if (
            run_dir / CONFIG_FILE).exists() else None
        done = (recovered.state["next_page"] - 1) if recovered else 0
        refused = None
    except StoreDamage as e:
        done, refused = 0, str(e).split(": ", 1)[-1]
    resumed = run_worker(run_dir, variant.config, code=variant.code)
    report = json.loads(resumed.stdout) if resumed.returncode == 0 else None
    final = outcome(run_dir, variant.config, report)
    return {"cut": state.cut, "choice": state.choice, "committed_pages": committed,
            "recovered_pages": done, "committed_pages_lost": max(0, committed - done),
            "refused": refused, "resume_exit": resumed.returncode,
            **outcome_columns(final),
            "correct": resumed.returncode == 0 and final.correct and committed <= done}


def power_loss_sweep(variant: Variant, *, samples_per_cut: int = 3, seed: int = 0,
                     workers: int | None = None, progress=None) -> list[dict]:
    """Journal one clean run of `variant`, build every power-cut state, recover and check each."""
    with work_dir(in_memory=True) as base:
        proc = run_worker(base / "journaled", variant.config, extra=("--io-trace",),
                          code=variant.code)
        if proc.returncode != 0:
            raise RuntimeError(f"journaled run failed: {proc.stderr.strip()}")
        journal = read_journal(base / "journaled" / "io.jsonl")
        states = list(crash_states(journal, samples_per_cut=samples_per_cut, seed=seed))
        results = in_parallel([functools.partial(power_state_record, variant, st,
                                                 base / f"state-{i:04d}")
                               for i, st in enumerate(states)], workers, progress)
    return [{"variant": variant.name, **r} for r in results]


def power_summary(records: list[dict]) -> dict:
    return {"states explored": len(records), "correct": sum(r["correct"] for r in records),
            "refused": sum(isinstance(r["refused"], str) for r in records),
            "states losing committed pages": sum(r["committed_pages_lost"] > 0 for r in records),
            "most committed pages lost": max((r["committed_pages_lost"] for r in records),
                                             default=0),
            "states with duplicates": sum(r["duplicate_reports"] > 0 for r in records)}


# --- planted bugs --------------------------------------------------------------------------------

#: Which of the lab's checks each planted bug (`instruments.mutants`) is meant to meet.
CHECKS = {
    "no-fsync": "power loss: snapshot, atomic, fsync always",
    "no-dir-fsync": "power loss: snapshot, atomic, fsync always",
    "submit-before-intent": "crash sweep: at most once (intents, pending abort, no key)",
    "no-key": "crash sweep: the safe configuration",
    "repair-not-idempotent": "resume twice: torn log, crash in the commit",
    "no-lock": "two resumers at once",
}


def detect(check: str, bug: str | None, *, pages: int = 4) -> int:
    """Run the check that targets `bug` (None: the real code); return the failures it finds."""
    code = None if bug is None else mutants.code_dir(bug)
    if check.startswith("power loss"):
        cfg = RunConfig(store="snapshot", intent=False, fsync="always", pages=pages)
        recs = power_loss_sweep(Variant("check", cfg, bug), samples_per_cut=1)
        return sum(r["committed_pages_lost"] > 0 for r in recs)
    if check.startswith("crash sweep: at most once"):
        cfg = RunConfig(store="log", intent=True, idempotency_key=False, pending="abort",
                        pages=pages)
    elif check.startswith("crash sweep"):
        cfg = SAFE.replace(pages=pages)
    if check.startswith("crash sweep"):
        with work_dir(in_memory=True) as base:
            recs = run_crash_jobs([("bug", cfg, p) for p in crash_points(cfg)], base,
                                  measure=functools.partial(crash_and_resume, code=code))
        return sum(r.duplicate_reports > 0 for r in recs)
    if check.startswith("resume twice"):
        cfg = SAFE.replace(write_mode="torn", pages=pages)
        pairs = [(p, "after_repair") for p in crash_points(cfg) if p.label == "mid_commit"]
        recs = chain_sweep(cfg, pairs=pairs, code=code)
        return sum(r["noop_resume_changed_files"] for r in recs)
    if check.startswith("two resumers"):
        recs = two_resumers(SAFE.replace(pages=pages), trials=4, code=code)
        return sum(not r["exactly_one"] for r in recs)
    raise ValueError(f"unknown check {check!r}")


def suite_verdict(bug: str | None) -> str:
    """What the conformance suite says about the code with `bug`: the store rules it breaks, or
    that it is not a store bug (then only a sweep of real processes can catch it)."""
    package = importlib.import_module("bughunt") if bug is None else mutants.load(bug)
    suite = importlib.import_module(package.__name__ + ".conformance")
    config = importlib.import_module(package.__name__ + ".config").RunConfig
    broken = []
    for store in ("snapshot", "log"):
        broken += [r for r in suite.conform(config(store=store, fsync="always")).broken()
                   if r not in broken]
    return ", ".join(broken) if broken else "no store rule broken"


def planted_bugs(*, pages: int = 4, progress=None) -> list[dict]:
    """Each planted bug against the check meant to catch it, and the real code as a control;
    beside it, the conformance suite's verdict on the same code."""
    out = []
    for i, (bug, check) in enumerate(CHECKS.items(), 1):
        control = detect(check, None, pages=pages)
        with_bug = detect(check, bug, pages=pages)
        out.append({"bug": bug, "what it does": mutants.MUTANTS[bug].bug, "caught by": check,
                    "failures, correct worker": control, "failures, with the bug": with_bug,
                    "caught": control == 0 and with_bug > 0,
                    "conformance suite": suite_verdict(bug)})
        if progress:
            progress(i, len(CHECKS))
    return out

