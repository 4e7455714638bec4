"""The conformance suite: a checkpoint store against every crash state of a run, rule by rule.

    python -m bughunt.conformance [--store log|snapshot|FILE.py:Class] [design flags] [--json]

One run of the real page loop (the worker's `Agent`, with the lab's world in a temp dir) drives
the store in one process (a learner's store: behind the lab's boundary, `bughunt.boundary`, never
in the caller's), through an I/O door that journals every disk operation
(`bughunt.instruments.journal`). From the journal the suite builds every crash state of that run:

- **kill -9** after each operation: every byte written so far is in the page cache and survives;
- **power cut** after each operation: only what was fsynced is sure to survive; of the rest, any
  prefix per file, the last write possibly torn, directory changes only if the directory was
  fsynced (`bughunt.powerloss`: the extremes and seeded mixes, as ALICE and LazyFS explore them).

At each state it opens fresh stores on a copy of the files (a learner's store: in new processes,
never the one that recorded the run, as after a real kill -9; `FreshProcesses`) and checks the
rules of the store contract (`bughunt.stores.contract.RULES`): load reads only; what it returns is
a state the run really passed through (or a refusal naming a file); nothing acknowledged is lost
where the design promises it; the repair is idempotent; the next commit after recovery reads back
as written. A violation names the rule, the crash state (which operation, which file), and what
was on disk. A store whose files the door did not see written (`unseen_by_door`) cannot have its
crash states built from the journal: only the files as its run left them are checked, and the
report says so (a real-SIGKILL sweep judges the rest).

It grades a learner's store the same way (`conform(config, MyStore)`), and, with the lab's
mutants (`bughunt.instruments.mutants`), shows which planted bug breaks which rule.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .config import (MESSAGE_CHARS, ConfigError, OneSentenceParser, RunConfig,
                     add_config_arguments, config_from_args, is_store_file, shown)
from .crashpoints import CrashPlan
from .diskio import Door
from .events import initial_state
from .instruments.journal import JournalingFiles, Op
from .interrupts import Interrupted, interruptible
from .powerloss import crash_states, kill_states
from .stores import StoreDamage, StoreSpecError, store_for
from .stores.contract import RULES
from .world import MockModel, Site, Tracker

#: A smaller site than the lessons' 12 pages: every kind of page (a bug page with its intent and
#: report, plain pages, a snapshot interval) in a fraction of the states.
SUITE_PAGES = 5


@dataclass(frozen=True)
class Violation:
    rule: str
    state: str                     # which crash state, in words
    detail: str
    file: str | None = None
    disk: dict = field(default_factory=dict)      # file -> the last bytes, for the reader

    def __str__(self) -> str:
        where = f" ({self.file})" if self.file else ""
        return f"{self.rule}: {self.state}{where}: {self.detail}"


@dataclass
class ConformanceReport:
    """What the suite found for one store and one configuration."""

    store: str
    config: RunConfig
    states: int = 0
    checked: Counter = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    seconds: float = 0.0
    #: The store's files the door did not see written (then the only crash state checked is the
    #: run's end, and the sweep's real kills are the verdict on the rest); `door_writes`: whether
    #: the door saw any write of the store's at all.
    unseen: list[str] = field(default_factory=list)
    door_writes: bool = True

    @property
    def ok(self) -> bool:
        return not self.violations

    def broken(self) -> list[str]:
        """The rules with at least one violation, in the contract's order."""
        hit = {v.rule for v in self.violations}
        return [r for r in RULES if r in hit]

    def first(self, rule: str) -> Violation | None:
        return next((v for v in self.violations if v.rule == rule), None)

    def table(self):
        """One row per rule: states checked, violations, the first one in words."""
        import pandas as pd

        counts = Counter(v.rule for v in self.violations)
        return pd.DataFrame([{"rule": r, "checked": self.checked[r], "violations": counts[r],
                              "first violation": str(self.first(r)).split(": ", 1)[1]
                              if counts[r] else ""}
                             for r in RULES if self.checked[r]]).set_index("rule")

    def to_json(self) -> dict:
        return {"store": self.store, "config": self.config.to_json(), "states": self.states,
                "ok": self.ok, "checked": dict(self.checked),
                "violations": [dataclasses.asdict(v) for v in self.violations],
                "seconds": self.seconds, "unseen": list(self.unseen),
                "door_writes": self.door_writes}


# --- recording one run -------------------------------------------------------------------------

class _Recorder:
    """The store under test, watched from outside: each commit is marked in the journal when it
    begins and when it returns (acknowledged), its mid() hook counted, its state kept."""

    def __init__(self, inner, door: Door, report: ConformanceReport):
        self.inner, self.door, self.report = inner, door, report
        self.states = [initial_state()]
        self.events: list[dict] = []

    def load(self):
        return self.inner.load()

    def open_for_append(self):
        return self.inner.open_for_append()

    def commit(self, state, event, *, mid=lambda: None):
        calls = []
        self.door.mark(what="commit-begin", seq=event["seq"])
        self.inner.commit(state, event, mid=lambda: (calls.append(1), mid()))
        self.door.mark(what="commit-end", seq=event["seq"])
        self.report.checked["mid-fires-once"] += 1
        if len(calls) != 1:
            self.report.violations.append(Violation(
                "mid-fires-once", f"commit of event {event['seq']} ({event['t']})",
                f"mid() was called {len(calls)} times"))
        self.states.append(state)
        self.events.append(event)

    def close(self):
        self.inner.close()


def record(config: RunConfig, cls, run_dir: Path, report: ConformanceReport):
    """Run the page loop once on `cls`; return the journal, the states and the events."""
    ops: list[dict] = []
    # paths relative to the run directory: a store's sub/state.json is not its state.json
    door = Door(config.fsync, files=JournalingFiles(ops.append, root=run_dir))
    store = _Recorder(cls(run_dir, config, door), door, report)
    check_load_reads_only(run_dir, store.load, report, "on the empty run directory the run "
                                                       "starts in (its first load)")
    store.open_for_append()
    site = Site.load(config.pages)
    model, tracker = MockModel(run_dir, site), Tracker(run_dir)
    # Imported here: the worker's page loop is the client the contract is written for.
    from .worker import Agent
    agent = Agent(config, site, store, door, model, tracker, CrashPlan([]), initial_state())
    try:
        for page in range(1, config.pages + 1):
            agent.run_page(page)
            check_reads_back(config, cls, run_dir, store.states[-1], report, page)
    finally:
        store.close()
        model.close()
        tracker.close()
    return ops, store.states, store.events


def _on_disk(directory: Path) -> tuple[dict[str, bytes], list[str]]:
    """What a load could change below `directory`: its files' bytes and its directories."""
    return _files_in(directory), sorted(p.relative_to(directory).as_posix()
                                        for p in directory.rglob("*") if p.is_dir())


def check_load_reads_only(run_dir: Path, load, report: ConformanceReport, where: str):
    """`load()` on the run directory as it is, with what it changed there judged: every file
    and directory it made, changed or removed, whether through the door or not (the crash
    states' loads are judged the same way, `check_state`). Returns what load returned."""
    report.checked["load-reads-only"] += 1
    files, dirs = _on_disk(run_dir)
    try:
        return load()
    finally:
        after, after_dirs = _on_disk(run_dir)
        changed = _changed_files(files, after) + sorted(set(dirs) ^ set(after_dirs))
        if changed:
            report.violations.append(Violation(
                "load-reads-only", where, f"load() changed {', '.join(changed)}", changed[0]))


def check_reads_back(config, cls, run_dir, state, report: ConformanceReport, page: int) -> None:
    report.checked["commit-reads-back"] += 1
    try:
        store = cls(run_dir, config, Door(config.fsync))
        got = check_load_reads_only(run_dir, store.load, report, f"right after page {page}'s "
                                                                 "commit returned").state
    except StoreDamage as e:
        got = f"a refusal ({e})"
    if got != state:
        report.violations.append(Violation(
            "commit-reads-back", f"right after page {page}'s commit returned",
            f"load() gave {describe_state(got)}, not the committed {describe_state(state)}"))


# --- checking one crash state ------------------------------------------------------------------

def describe_state(state) -> str:
    if not isinstance(state, dict):
        return str(state)
    return (f"next page {state.get('next_page')}, findings {state.get('findings')}, "
            f"seq {state.get('seq')}")


def describe_op(op: dict | None) -> str:
    if op is None:
        return "before any operation"
    kind = op["op"]
    if kind == Op.WRITE:
        n = len(base64.b64decode(op["data"]))
        return f"write of {n} bytes to {op['path']} at offset {op['offset']}"
    if kind == Op.TRUNC and op.get("size"):
        return f"truncate {op['path']} to {op['size']} bytes"
    if kind == Op.RENAME:
        return f"rename {op['src']} -> {op['dst']}"
    if kind == Op.FSYNC_DIR:
        return "directory fsync" + (f" of {op['path']}" if op.get("path") else "")
    if kind == Op.UNRELIABLE:
        return f"unreliable: {op.get('why')}"
    if kind == Op.MARK:
        return {"commit-end": f"commit of event {op.get('seq')} returned",
                "commit-begin": f"commit of event {op.get('seq')} began"}.get(
            op.get("what"), f"{op.get('what')} (page {op.get('page')})")
    return f"{kind} {op.get('path', '')}".strip()


def _preview(files: dict[str, bytes]) -> dict[str, str]:
    return {name: (repr(data[-60:]) if len(data) > 60 else repr(data)) + f" ({len(data)} bytes)"
            for name, data in sorted(files.items())}


def _files_in(directory: Path) -> dict[str, bytes]:
    """Every regular file below `directory`, by its path relative to it ("sub/state.json")."""
    out = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[p.relative_to(directory).as_posix()] = p.read_bytes()
    return out


def _write(directory: Path, files: dict[str, bytes]) -> None:
    directory.mkdir()
    for name, data in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)


def _names_are_text(ops: list[dict], run_dir: Path) -> None:
    """A file the store named with bytes that are not text (not UTF-8) stops the suite, named:
    the journal, the crash states and the report all keep names as text."""
    import os

    names = {op.get(k) for op in ops for k in ("path", "src", "dst")} | {
        str(p.relative_to(run_dir)) for p in run_dir.rglob("*")}
    bad = []
    for name in sorted(n for n in names if isinstance(n, str)):
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            bad.append(os.fsencode(name))
    if bad:
        from .boundary.fence import StoreStopped
        shown = ", ".join(repr(b) for b in bad[:3]) + (f" and {len(bad) - 3} more"
                                                       if len(bad) > 3 else "")
        raise StoreStopped({"kind": "name", "where": "", "dir": str(run_dir), "line": "",
                            "sentence": f"the store named a file with bytes that are not text "
                                        f"(not UTF-8): {shown}, in its run directory; the lab "
                                        "keeps file names as text (the journal, the crash "
                                        "states, the report)"})


#: What the lab's world writes in a run directory (the model's bill, the tracker): not the store's.
WORLD_FILES = ("bill.jsonl", "tracker.db", "tracker.db-journal", "tracker.db-wal",
               "tracker.db-shm")


def unseen_by_door(ops: list[dict], run_dir: Path, dirs=()) -> list[str]:
    """The store's files whose bytes on disk after the recorded run are not what the door's
    journal says they are: written (or made) without the door. `dirs`: the directories the
    store made itself (the door makes none), below which the door's files are its own."""
    journaled = {}
    for journaled in kill_states(ops, dirs=dirs):
        pass
    journaled = journaled.files if journaled else {}
    real = {n: b for n, b in _files_in(run_dir).items() if n not in WORLD_FILES}
    return sorted(n for n in set(real) | set(journaled) if real.get(n) != journaled.get(n))


class InProcess:
    """The steps after a simulated crash, run in this process (the lab's own stores, which keep
    nothing in memory between two instances). A learner's store gets `FreshProcesses`."""

    def __init__(self, config, cls):
        self.config, self.cls = config, cls
        self.at: str | None = None

    def load(self, directory: Path) -> dict:
        return load_step(self.config, self.cls, directory)

    def repair(self, directory: Path) -> dict:
        return repair_step(self.config, self.cls, directory)

    def resume(self, directory: Path, state: dict, event: dict) -> dict:
        return resume_step(self.config, self.cls, directory, state, event)

    def load_then_repair(self, directory: Path, real: list[str]) -> dict:
        return load_then_repair(self.config, self.cls, directory, real)

    def repair_then_resume(self, directory: Path, state, event) -> dict:
        return repair_then_resume(self.config, self.cls, directory, state, event)


class FreshProcesses:
    """The same steps, each in a new process that never ran the store
    (`bughunt.boundary.pristine`): a kill -9 takes the store's memory with it."""

    def __init__(self, config, spec: str):
        self.config, self.spec = config.to_json(), spec
        self.at: str | None = None

    def _run(self, step: str, directory: Path, **args) -> dict:
        from .boundary import pristine
        return pristine.run_fresh(f"bughunt.conformance:{step}", {
            "spec": self.spec, "config": self.config, "directory": str(directory), **args},
            spec=self.spec, at=self.at)

    def load(self, directory: Path) -> dict:
        return self._run("_fresh_load", directory)

    def repair(self, directory: Path) -> dict:
        return self._run("_fresh_repair", directory)

    def resume(self, directory: Path, state: dict, event: dict) -> dict:
        return self._run("_fresh_resume", directory, state=state, event=event)

    def load_then_repair(self, directory: Path, real: list[str]) -> dict:
        return self._run("_fresh_load_then_repair", directory, real=real)

    def repair_then_resume(self, directory: Path, state, event) -> dict:
        return self._run("_fresh_repair_then_resume", directory, state=state, event=event)


def _outcome(fn) -> dict:
    """What a step gave: {"state": ...}, {"damage": words} (a StoreDamage), or {"raised":
    (type, words)} (anything else a store raised)."""
    try:
        return fn()
    except StoreDamage as e:
        return {"damage": shown(str(e), MESSAGE_CHARS)}
    except Exception as e:             # a learner's store may raise anything
        return {"raised": [type(e).__name__, shown(str(e), MESSAGE_CHARS)]}


def load_step(config, cls, directory: Path) -> dict:
    """A fresh store's load(), as recovery runs it first."""
    return _outcome(lambda: {"state": cls(directory, config, Door(config.fsync)).load().state})


def repair_step(config, cls, directory: Path) -> dict:
    """A fresh store's load(), open_for_append() and close(): recovery, then the repair."""
    def step():
        store = cls(directory, config, Door(config.fsync))
        state = store.load().state
        store.open_for_append()
        store.close()
        return {"state": state}
    return _outcome(step)


def resume_step(config, cls, directory: Path, state: dict, event: dict) -> dict:
    """A fresh store recovers, repairs, commits `event` (whose state is `state`) and closes."""
    def step():
        store = cls(directory, config, Door(config.fsync))
        store.load()
        store.open_for_append()
        store.commit(state, event, mid=lambda: None)
        store.close()
        return {}
    return _outcome(step)


def _changed_files(before: dict, after: dict) -> list[str]:
    return sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))


def load_then_repair(config, cls, directory: Path, real: list[str]) -> dict:
    """The crash state's load() (judged), then, if it changed no file and gave a state the run
    was in, the first repair (`repair_step`) in the same process: it had written nothing before
    that load. (Two steps, one process: each process costs a fork.)"""
    before = _files_in(directory)
    loaded = load_step(config, cls, directory)
    changed = _changed_files(before, _files_in(directory))
    out = {"load": loaded, "changed": changed}
    if not changed and "state" in loaded and json.dumps(loaded["state"], sort_keys=True) in \
            set(real):
        out["repair"] = repair_step(config, cls, directory)
    return out


def repair_then_resume(config, cls, directory: Path, state, event) -> dict:
    """The second repair (its load judged: a new process since the first repair wrote), whether
    it changed the files, then, when `event` is given and the repair recovered, the resume's
    commit of `event` (`resume_step`, whose own load is not judged)."""
    before = _files_in(directory)
    repaired = repair_step(config, cls, directory)
    after = _files_in(directory)
    out = {"repair": repaired, "differs": after != before,
           "changed": sorted(n for n in before if after.get(n) != before[n])}
    if event is not None and "state" in repaired:
        out["resume"] = resume_step(config, cls, directory, state, event)
    return out


def _fresh_load_then_repair(*, spec, config, directory, real):
    cls, config = _fresh_store(spec, config)
    return load_then_repair(config, cls, Path(directory), real)


def _fresh_repair_then_resume(*, spec, config, directory, state, event):
    cls, config = _fresh_store(spec, config)
    return repair_then_resume(config, cls, Path(directory), state, event)


def _fresh_store(spec: str, config: dict):
    from .stores import store_class
    return store_class(spec), RunConfig.from_json(config)


def _fresh_load(*, spec, config, directory):
    cls, config = _fresh_store(spec, config)
    return load_step(config, cls, Path(directory))


def _fresh_repair(*, spec, config, directory):
    cls, config = _fresh_store(spec, config)
    return repair_step(config, cls, Path(directory))


def _fresh_resume(*, spec, config, directory, state, event):
    cls, config = _fresh_store(spec, config)
    return resume_step(config, cls, Path(directory), state, event)


def _raised(outcome: dict) -> str:
    kind, words = outcome["raised"]
    return f"{kind}: {words}"


#: What a kill right after a commit returned, that loses it, says: nothing was being written.
IN_MEMORY = ("nothing was being written at this kill, so the commit had returned without its "
             "state on disk: it was kept in the process's memory (a module or class variable, a "
             "cache), which a kill -9 takes with it (the suite loads in a new process)")



def _commits(n: int) -> str:
    """"1 commit", "2 commits"."""
    return f"{n} commit" + ("" if n == 1 else "s")

def check_state(config, cls, directory: Path, files: dict[str, bytes], *, kind: str,
                where: str, acknowledged: int, states: list[dict], events: list[dict],
                report: ConformanceReport, steps=None, after_commit: bool = False) -> None:
    """Every rule at one crash state: `files` is what the disk holds after it. `steps` runs the
    store's calls (default: in this process); `after_commit`: the crash came right after a
    commit returned, with nothing in flight."""
    steps = steps or InProcess(config, cls)
    real = {json.dumps(s, sort_keys=True): i for i, s in enumerate(states)}
    passed_rule = "crash-leaves-a-real-state" if kind == "kill" else "power-cut-leaves-a-real-state"
    keeps_rule = "kill-keeps-acknowledged" if kind == "kill" else (
        "fsync-keeps-acknowledged" if config.fsync == "always" else None)

    def violation(rule, detail, file=None):
        report.violations.append(Violation(rule, where, detail, file, _preview(files)))

    _write(directory, files)
    report.checked["load-reads-only"] += 1
    report.checked[passed_rule] += 1
    first = steps.load_then_repair(directory, list(real))
    loaded = first["load"]
    recovered = loaded.get("state")
    if "damage" in loaded:
        refusal = loaded["damage"]
        if not (str(directory) in refusal or any(name in refusal for name in files)):
            violation(passed_rule, f"the refusal names no file: {refusal}")
    elif "raised" in loaded:
        violation(passed_rule, f"load() raised {_raised(loaded)}")
        if keeps_rule:
            report.checked[keeps_rule] += 1
            violation(keeps_rule, f"{_commits(acknowledged)} had returned, but load() raised "
                                  f"{loaded['raised'][0]}")
        return
    if first["changed"]:
        changed = first["changed"]
        violation("load-reads-only", f"load() changed {', '.join(changed)}", changed[0])
        _write_over(directory, files)
    index = None
    if "state" in loaded:
        index = real.get(json.dumps(recovered, sort_keys=True))
        if index is None:
            violation(passed_rule, f"load() gave {describe_state(recovered)}: a state "
                                   "this run never was in")
    if keeps_rule:
        report.checked[keeps_rule] += 1
        if index is None or index < acknowledged:
            got = "a refusal" if "state" not in loaded else describe_state(recovered)
            memory = (f"; {IN_MEMORY}" if after_commit and kind == "kill" and index is not None
                      else "")
            violation(keeps_rule, f"{_commits(acknowledged)} had returned, but load() gave "
                                  f"{got}{memory}")
    if index is None:
        return
    _check_repair_and_resume(config, cls, directory, files, index, states, events, violation,
                             report, steps, first.get("repair"))


def _write_over(directory: Path, files: dict[str, bytes]) -> None:
    for name in _files_in(directory):
        if name not in files:
            (directory / name).unlink()
    for name, data in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)


def _check_repair_and_resume(config, cls, directory, files, index, states, events, violation,
                             report, steps, first=None):
    report.checked["repair-is-idempotent"] += 1
    first = first if first is not None else steps.repair(directory)
    resume = index < len(events)
    then = (steps.repair_then_resume(directory, states[index + 1] if resume else None,
                                     events[index] if resume else None)
            if "state" in first else {"repair": first})
    second = then["repair"]
    for outcome in (first, second):
        if "damage" in outcome:
            violation("repair-is-idempotent", f"after the repair, load() refused: "
                                              f"{outcome['damage']}")
            return
        if "raised" in outcome:
            violation("repair-is-idempotent", f"the repair raised {_raised(outcome)}")
            return
    state, again = first["state"], second["state"]
    if then["differs"]:
        changed = then["changed"]
        violation("repair-is-idempotent", "a second open_for_append() changed the files again",
                  changed[0] if changed else None)
    elif again != state:
        violation("repair-is-idempotent", f"after the repair load() gave {describe_state(again)}, "
                                          f"before it {describe_state(state)}")
    if index >= len(events):
        return                                  # the run was complete: nothing to resume
    report.checked["resume-appends-cleanly"] += 1
    resumed = then["resume"]
    got = steps.load(directory) if not set(resumed) & {"damage", "raised"} else resumed
    if "damage" in got:
        violation("resume-appends-cleanly", f"after recovering and committing event "
                                            f"{events[index]['seq']}, load() refused: "
                                            f"{got['damage']}")
        return
    if "raised" in got:
        violation("resume-appends-cleanly", f"recovering and committing raised {_raised(got)}")
        return
    if got["state"] != states[index + 1]:
        violation("resume-appends-cleanly",
                  f"recovered {describe_state(states[index])}, committed event "
                  f"{events[index]['seq']} ({events[index]['t']}), then load() gave "
                  f"{describe_state(got['state'])}")


# --- the suite ---------------------------------------------------------------------------------

def conform(config: RunConfig, cls=None, *, power_samples: int = 2, seed: int = 0,
            pages: int = SUITE_PAGES, on_state=None, fresh: str | None = None
            ) -> ConformanceReport:
    """Check the store `cls` (default: the one `config.store` names) at every crash state of a
    `pages`-page run with this configuration. `on_state(where)` is told each crash state before
    it is checked (the boundary names it if the store hangs or exits there). `fresh`: the
    learner's store spec, inside the boundary: every step after a simulated crash then runs in a
    new process (`FreshProcesses`), never in the one that recorded the run."""
    config = config.replace(pages=pages) if pages else config
    cls = cls or store_for(config)
    steps = FreshProcesses(config, fresh) if fresh else InProcess(config, cls)
    report = ConformanceReport(store=shown(getattr(cls, "name", cls.__name__)), config=config)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bughunt-conformance-") as tmp:
        tmp = Path(tmp)
        run_dir = tmp / "run"
        run_dir.mkdir()
        ops, states, events = record(config, cls, run_dir, report)
        acked = [0]
        for op in ops:
            acked.append(acked[-1] + (op["op"] == Op.MARK and op.get("what") == "commit-end"))
        _names_are_text(ops, run_dir)
        # The door makes no directory: one the store made itself (sub/ for sub/state.json) is
        # taken as there from the start, so that the files it writes there through the door are
        # the door's, in every crash state.
        made = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_dir())
        report.unseen = unseen_by_door(ops, run_dir, made)
        if report.unseen:
            # The journal does not describe the store's disk: no crash state built from it would
            # be one the store could be in. Checked instead: the files as the run left them (a
            # kill -9 right after the last commit), in a new process; the sweep's real kills
            # judge the moments in between. The power-cut rules need the journal: not checked.
            report.door_writes = any(op["op"] in (Op.WRITE, Op.CREATE, Op.TRUNC, Op.RENAME)
                                     for op in ops)
            where = "kill -9 after the run (the files as the store left them)"
            if on_state is not None:
                on_state(f"the crash state {where}")
            steps.at = f"at the crash state {where}"
            files = {n: b for n, b in _files_in(run_dir).items() if n not in WORLD_FILES}
            check_state(config, cls, tmp / "s1", files, kind="kill", where=where,
                        acknowledged=acked[-1], states=states, events=events, report=report,
                        steps=steps, after_commit=True)
            report.states = 1
            report.seconds = time.perf_counter() - t0
            return report
        seen: set[tuple[str, int]] = set()
        n = 0
        cases = [("kill", s) for s in kill_states(ops, dirs=made)]
        cases += [("power", s) for s in crash_states(ops, samples_per_cut=power_samples,
                                                     seed=seed, dedupe=False, dirs=made)]
        for kind, s in cases:
            key = (kind, s.digest(), acked[s.cut])
            if key in seen:
                continue
            seen.add(key)
            n += 1
            op = ops[s.cut - 1] if s.cut else None
            where = (f"kill -9 after operation {s.cut} ({describe_op(op)})" if kind == "kill"
                     else f"power cut after operation {s.cut} ({describe_op(op)}; {s.choice})")
            if on_state is not None:
                on_state(f"the crash state {where}")
            steps.at = f"at the crash state {where}"
            after_commit = bool(op) and op["op"] == Op.MARK and op.get("what") == "commit-end"
            check_state(config, cls, tmp / f"s{n}", s.files, kind=kind, where=where,
                        acknowledged=acked[s.cut], states=states, events=events, report=report,
                        steps=steps, after_commit=after_commit)
        report.states = n
    report.seconds = time.perf_counter() - t0
    return report


#: Every design of the lab's own stores under the contract: store x write mode x fsync policy.
def lab_designs() -> dict[str, RunConfig]:
    designs = {}
    for store, every in (("snapshot", 0), ("log", 0), ("log", 2)):
        for mode in ("atomic", "torn", "no-newline"):
            for fsync in ("never", "always"):
                name = (f"{store}{f'+snapshot/{every}' if every else ''}, {mode}, "
                        f"fsync {fsync}")
                designs[name] = RunConfig(store=store, snapshot_every=every, write_mode=mode,
                                          fsync=fsync)
    return designs


def main(argv: list[str] | None = None) -> int:
    parser = OneSentenceParser(
        prog="python -m bughunt.conformance",
        description="Check a checkpoint store against every crash state of a run, rule by rule.")
    add_config_arguments(parser)
    parser.add_argument("--all", action="store_true",
                        help="every design of the lab's own stores (store x write mode x fsync)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ConfigError as e:
        parser.error(e.as_flag())
    try:
        with interruptible():
            if is_store_file(config.store) and not args.all:
                return _learner(config, args.json)
            designs = lab_designs() if args.all else {config.store: config}
            reports = {name: conform(cfg) for name, cfg in designs.items()}
    except Interrupted as e:
        print(f"bughunt.conformance: {e.what}; nothing was judged, the temporary files were "
              "removed", file=sys.stderr)
        return e.code
    except StoreSpecError as e:
        print(f"bughunt.conformance: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump({name: r.to_json() for name, r in reports.items()}, sys.stdout)
        print()
    else:
        for name, r in reports.items():
            _print(name, r)
    return 0 if all(r.ok for r in reports.values()) else 1


def _learner(config: RunConfig, as_json: bool) -> int:
    """A learner's store: the same suite, behind the boundary (`bughunt.boundary`); a store that
    ends its process, hangs or is refused by the fence gets one sentence on stderr."""
    from .boundary import commands

    prog = "bughunt.conformance"
    report, problem, printed = commands.conform_store(prog, config, pages=SUITE_PAGES)
    if as_json:
        json.dump({config.store: {**(report or {}), "problem": (
            {"kind": problem.kind, "message": problem.message} if problem else None),
            "printed": printed.to_json()}}, sys.stdout)
        print()
    commands.say(prog, config.store, problem, printed if not as_json else type(printed)())
    if problem is not None:
        return commands.code_of(problem)
    r = ConformanceReport(store=report["store"], config=config, states=report["states"],
               checked=Counter(report["checked"]),
               violations=[Violation(**v) for v in report["violations"]],
               seconds=report["seconds"], unseen=report.get("unseen", []),
               door_writes=report.get("door_writes", True))
    if not as_json:
        _print(config.store, r)
    return 0 if r.ok else 1


def door_note(unseen: list[str], door_writes: bool) -> str:
    """What the suite says of a store whose files the door did not see written."""
    shown = ", ".join(unseen[:5]) + (f" and {len(unseen) - 5} more" if len(unseen) > 5 else "")
    saw = "saw none of its writes" if not door_writes else "did not see all of its writes"
    return (f"The door {saw} ({shown}): the crash states between its writes cannot be built, so "
            "the suite checked only the files as the run left them (a kill -9 after the last "
            "commit, loaded in a new process); a real-SIGKILL sweep (python -m bughunt sweep "
            "--store ...) judges the moments in between, and the power-cut rules were not "
            "checked.")


def _print(name: str, r: ConformanceReport) -> None:
    verdict = "passes every rule" if r.ok else "breaks " + ", ".join(r.broken())
    print(f"{name}: {r.states} crash state{'' if r.states == 1 else 's'}, {verdict} "
          f"({r.seconds:.2f} s)")
    if r.unseen:
        print(f"  {door_note(r.unseen, r.door_writes)}")
    for rule in r.broken():
        print(f"  {r.first(rule)}")


if __name__ == "__main__":
    sys.exit(main())
