"""The grader of lesson 9: a learner's checkpoint store, judged the way the lab judges its own.

    python -m bughunt.grader --store my_store.py:MyStore [--idempotency-key off] [--json]

`grade("my_store.py:MyStore")` runs, on the store in that file:

1. **the conformance suite** (`bughunt.conformance`): every rule of the store contract at every
   kill -9 and power-cut state of a run: which rule broke, at which crash state (after which door
   operation; which power-loss state), in which file, and what was on disk;
2. **a real-SIGKILL sweep** (`bughunt.experiment`): a worker killed at every named crash point and
   resumed, then the bill, the tracker and a rebuild from disk asked: redone model calls,
   duplicate and lost reports, the three-way check;

and returns a `Grade`: a verdict in plain words and one hint naming the lesson that teaches the fix.

A learner's code may raise, loop, sleep, write anywhere or exit the process. None of it runs in
the caller's process. The suite and the sweep each run in a child process in a session of its own,
killed with its whole process group when its time is up; each reports where it was (the suite:
which method of the store, on which event; the sweep: which crash points had not finished).
Every process of a grade is fenced by an audit hook (`bughunt.instruments.sandbox`): a write,
rename or removal outside the grade's temporary directory is refused and reported (inside the
suite, outside the one run directory the store was given), and the kernel cannot be signalled.
What the fence cannot see (a C extension writing by itself, a child process) is checked after
the fact for two directories: the children's working directory must stay empty, and the folder
of the store's file must be unchanged. Everything the grade wrote is removed when it ends.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .config import STORES, RunConfig, is_store_file
from .instruments import sandbox
from .stores.contract import RULES

#: Pages of a graded run: the conformance suite's site (a bug page, with its intent and report,
#: and plain pages), small enough for a sweep in seconds.
GRADE_PAGES = 5
CONFORM_TIMEOUT_S = 30.0
SWEEP_TIMEOUT_S = 60.0
_GRACE_S = 10.0          # after a sweep's own deadline, before its process group is killed
MEMORY_LIMIT = 4 << 30   # bytes of address space per grader process (Linux)

#: The lessons a hint can send the learner to: number -> (notebook, title).
LESSONS = {
    3: ("03_replay_vs_snapshot.ipynb", "replay vs snapshot"),
    4: ("04_danger_window.ipynb", "the danger window"),
    5: ("05_torn_writes.ipynb", "torn writes"),
    6: ("06_kill9_vs_power_loss.ipynb", "kill -9 vs power loss"),
    9: ("09_your_own_store.ipynb", "your own store"),
    10: ("10_frameworks.ipynb", "frameworks"),
}


# --- the records --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    """Something that stopped the grader from judging part of the store, in one sentence.

    kind: "spec" (no such file or class), "load" (the file does not import), "exception" (a
    method raised where the suite cannot go on), "timeout" (a method or a worker never returned),
    "outside" (a write outside the run directory, refused), "signal" (a signal to another
    process, refused), "exit" (the store ended the process).
    """

    kind: str
    message: str


@dataclass(frozen=True)
class RuleResult:
    """One rule of the contract: crash states checked, violations, and the first in detail."""

    rule: str
    promise: str
    checked: int
    violations: int
    state: str | None = None        # which crash state: "kill -9 after operation 12 (...)"
    file: str | None = None
    detail: str | None = None       # what load() gave, or raised
    disk: dict = field(default_factory=dict)   # file -> its last bytes, at that state

    @property
    def ok(self) -> bool:
        return self.violations == 0


@dataclass(frozen=True)
class Hint:
    """One pointer: the lesson that teaches the fix, and what to do, in a sentence or two."""

    lesson: int
    text: str

    @property
    def notebook(self) -> str:
        return LESSONS[self.lesson][0]

    def __str__(self) -> str:
        return f"Hint (lesson {self.lesson}, {LESSONS[self.lesson][1]}: {self.notebook}): {self.text}"


@dataclass(frozen=True)
class DiskProfile:
    """What the store's commits did on disk, read from the door's journal of one clean run."""

    commit_ops: tuple[str, ...] = ()     # one page's commit, operation by operation
    commit_page: int | None = None       # ... that page (the one whose commit does the most)
    in_place: bool = False               # a commit truncated a file and wrote it again
    appends: bool = False                # a commit appended to a file that already had bytes
    renamed_unsynced: bool = False       # a file was renamed before its bytes were fsynced
    data_unsynced: bool = False          # a commit returned with bytes not fsynced
    dir_unsynced: bool = False           # ... or with a name created or renamed, no dir fsync


@dataclass(frozen=True)
class Grade:
    """A store's grade. `records` are the sweep's crash runs (`bughunt.experiment.CrashRun`)."""

    store: str                      # as given: my_store.py:MyStore
    name: str                       # the class's `name`
    config: RunConfig
    problems: tuple[Problem, ...] = ()
    states: int = 0                 # crash states the suite checked
    rules: tuple[RuleResult, ...] = ()
    records: tuple = ()
    profile: DiskProfile = DiskProfile()
    hint: Hint | None = None
    seconds: float = 0.0

    @property
    def conformance_ok(self) -> bool:
        return bool(self.rules) and all(r.ok for r in self.rules)

    @property
    def sweep_ok(self) -> bool:
        return bool(self.records) and all(r.correct for r in self.records)

    @property
    def passed(self) -> bool:
        return not self.problems and self.conformance_ok and self.sweep_ok

    def broken(self) -> list[str]:
        """The rules with a violation, in the contract's order."""
        return [r.rule for r in self.rules if not r.ok]

    def first(self, rule: str) -> RuleResult | None:
        return next((r for r in self.rules if r.rule == rule), None)

    @property
    def summary(self) -> dict:
        from .experiment import summarize
        return summarize(list(self.records)) if self.records else {}

    def rules_table(self):
        """One row per rule: crash states checked, violations, where the first one happened."""
        import pandas as pd

        rows = [{"rule": r.rule, "checked": r.checked, "violations": r.violations,
                 "first violation": "" if r.ok else f"{r.state}: {r.detail}"} for r in self.rules]
        return pd.DataFrame(rows, columns=["rule", "checked", "violations", "first violation"]
                            ).set_index("rule")

    def sweep_table(self):
        """One row per crash point: the verdict and what the witnesses said."""
        import pandas as pd

        from .experiment import frame
        cols = ["crash_point", "verdict", "redone_model_calls", "duplicate_reports",
                "lost_reports", "three_way_check", "error"]
        if not self.records:
            return pd.DataFrame(columns=cols)
        df = frame(list(self.records))
        # A resume that failed has no bill of its own to compare: its redone calls mean nothing.
        df["redone_model_calls"] = df["redone_model_calls"].astype(object).where(
            df["error"].isna(), None)
        df["error"] = df["error"].map(short_error)
        return df[cols].set_index("crash_point")

    @property
    def verdict(self) -> str:
        """The grade in plain words, a few sentences."""
        parts = [_sentence(p.message) for p in self.problems]
        stopped = any(p.kind != "outside" for p in self.problems)
        if stopped or not self.rules:
            return " ".join(["Not graded to the end.", *parts])
        if self.conformance_ok:
            parts.append(f"Every rule of the contract holds at all {self.states} crash states.")
        else:
            broken = self.broken()
            parts.append(f"The conformance suite checked {self.states} crash states: "
                         f"{len(broken)} of {len(self.rules)} rules broken "
                         f"({', '.join(broken)}).")
            first = self.first(broken[0])
            parts.append(f"First: {first.rule} at {first.state}: {first.detail}.")
        s = self.summary
        if s:
            bad = [f"{s['duplicate_points']} with a duplicate report" if s["duplicate_points"]
                   else "", f"{s['lost_points']} with a lost report" if s["lost_points"] else "",
                   f"{s['errors']} where the resume failed" if s["errors"] else "",
                   f"{s['three_way_failures']} failing the three-way check"
                   if s["three_way_failures"] else ""]
            bad = [b for b in bad if b]
            parts.append(f"The sweep killed the worker at {s['crash_points']} crash points: "
                         f"{s['correct_runs']} recovered correctly"
                         + (f"; {'; '.join(bad)}." if bad else ", none twice, none lost, the "
                            "three witnesses agree."))
        head = "Passes." if self.passed else "Not yet."
        return " ".join([head, *parts])

    def __str__(self) -> str:
        lines = [f"{self.name} ({self.store}): {self.verdict}"]
        if self.hint:
            lines.append(str(self.hint))
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def _sentence(text: str) -> str:
    """`text` as a sentence: a first word in lower case is capitalised, unless it is a file."""
    word = text.split(" ", 1)[0]
    return text[:1].upper() + text[1:] if word.isalpha() and word.islower() else text


def short_error(message: str | None) -> str | None:
    """A worker's error, shortened to its last line (the exception, or the refusal)."""
    if not isinstance(message, str):
        return None
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    head = message.split(":", 1)[0]
    return f"{head}: {lines[-1]}" if lines and lines[-1] not in head else message.strip()


# --- the grade, from the caller's process ------------------------------------------------------

def grade(store: str, *, idempotency_key: bool = True, intent: bool = True,
          pending: str = "redo", pages: int = GRADE_PAGES, sweep: bool = True,
          conform_timeout: float = CONFORM_TIMEOUT_S, sweep_timeout: float = SWEEP_TIMEOUT_S,
          workers: int | None = None) -> Grade:
    """Grade the store `store` names: `path/to/file.py:ClassName` (or a lab store, `log`).

    The key, the intent and the pending policy are the run's settings (lesson 4); fsync is
    "always", so that the suite also holds the store to the power-cut promise. The suite gets
    `conform_timeout` seconds, the sweep `sweep_timeout`; a store that exceeds them is stopped
    and named. Never raises for what the store does: every failure is in the Grade.
    """
    t0 = time.perf_counter()
    config = RunConfig(store="log", pages=pages, fsync="always",
                       idempotency_key=idempotency_key, intent=intent, pending=pending)
    spec, problem = _resolve(store)
    if problem:
        return Grade(store=store, name=store.rpartition(":")[2] or store, config=config,
                     problems=(problem,), hint=_hint_for_problem(problem),
                     seconds=time.perf_counter() - t0)
    config = config.replace(store=spec)
    with _Fence(spec) as fence:
        conformed = fence.run("_conform", config, conform_timeout, grace=0)
        swept = None
        if sweep and not conformed.get("problems") and "report" in conformed:
            swept = fence.run("_sweep", config, sweep_timeout, grace=_GRACE_S,
                              extra=[str(workers or 0)])
        problems = fence.after([*conformed.get("problems", []),
                                *(swept or {}).get("problems", [])])
    return _assemble(store, config, conformed, swept or {}, problems,
                     time.perf_counter() - t0, fence.tidy)


def _resolve(store: str) -> tuple[str, Problem | None]:
    """The absolute spec the children load, or the problem with the one given."""
    if store in STORES:
        if store == "none":
            return store, Problem("spec", "the none store keeps nothing on purpose: it is the "
                                          "baseline, not a store under the contract")
        return store, None
    if not is_store_file(store):
        return store, Problem("spec", f"{store!r} names no store: expected FILE.py:ClassName, "
                                      "e.g. my_store.py:MyStore")
    file, _, name = store.rpartition(":")
    path = Path(file).expanduser()
    if not path.is_file():
        return store, Problem("spec", f"{file}: no such file in this folder; save your store "
                                      f"first (a cell that starts with %%writefile {path.name})")
    return f"{path.resolve()}:{name}", None


class _Fence:
    """The grade's temporary directory, environment and fenced child processes."""

    def __init__(self, spec: str):
        self.spec = spec
        file = spec.rpartition(":")[0] if is_store_file(spec) else None
        self.store_dir = Path(file).parent if file else None

    def __enter__(self) -> "_Fence":
        from .experiment import ram_dir
        self.root = Path(tempfile.mkdtemp(prefix="bughunt-grade-", dir=ram_dir()))
        self.real_root = os.path.realpath(self.root)
        for d in ("tmp", "out", "cwd", "hook"):
            (self.root / d).mkdir()
        (self.root / "hook" / "sitecustomize.py").write_text(sandbox.SITECUSTOMIZE)
        package_parent = str(Path(__file__).resolve().parents[1])
        paths = [str(self.root / "hook"), package_parent]
        if self.store_dir:
            paths.append(str(self.store_dir))       # so one store file can import another
        if os.environ.get("PYTHONPATH"):
            paths.append(os.environ["PYTHONPATH"])
        protect = {os.getpid(), os.getpgrp(), os.getppid()} - {0, 1}
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths),
                    "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(self.root / "tmp"),
                    "BUGHUNT_RAM_DIR": "", "PYTHONHASHSEED": "0",
                    sandbox.ENV: sandbox.settings(
                        [self.root / "tmp", self.root / "out"],
                        log=self.root / "out" / "outside.jsonl", protect=sorted(protect),
                        cpu_s=int(CONFORM_TIMEOUT_S + SWEEP_TIMEOUT_S + 60),
                        memory_bytes=MEMORY_LIMIT)}
        self.before = _listing(self.store_dir)
        return self

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def tidy(self, text):
        """`text` without the grade's temporary paths (and the store's folder): the same words on
        every run."""
        if not isinstance(text, str):
            return text
        for root in {str(self.root), self.real_root}:
            text = re.sub(re.escape(root) + r"(?:/[^/\s'\":,()]+)*/", "", text)
        if self.store_dir:
            text = text.replace(str(self.store_dir) + os.sep, "")
        return text

    def run(self, command: str, config: RunConfig, timeout: float, *, grace: float,
            extra: list[str] = ()) -> dict:
        """Run `python -m bughunt.grader COMMAND` fenced; its result, or the problems it left."""
        out = self.root / "out" / command.strip("_")
        out.mkdir()
        args = [sys.executable, "-m", "bughunt.grader", command, self.spec,
                json.dumps(config.to_json()), str(out), str(timeout), *extra]
        with open(out / "stdout", "wb") as so, open(out / "stderr", "wb") as se:
            proc = subprocess.Popen(args, cwd=self.root / "cwd", env=self.env,
                                    stdin=subprocess.DEVNULL, stdout=so, stderr=se,
                                    start_new_session=True)
            timed_out = False
            try:
                proc.wait(timeout=timeout + grace)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc)            # whatever it left running goes with it
        try:
            return json.loads((out / "result.json").read_text())
        except (OSError, ValueError):
            pass
        what = _status(out)
        if timed_out:
            message = (f"{what} did not return within {timeout:g} s: a loop that never ends, "
                       "or a wait for something that never comes? The grader stopped it.")
            return {"problems": [{"kind": "timeout", "message": message}]}
        err = (out / "stderr").read_text(errors="replace").strip().splitlines()
        code = proc.returncode
        how = (f"died by signal {signal.Signals(-code).name}" if code < 0
               else f"exited with status {code}")
        message = (f"the process running {what} {how} before it could report"
                   + (f" ({self.tidy(err[-1])})" if err else "")
                   + ": did the store end the process (sys.exit, os._exit, a signal)?")
        return {"problems": [{"kind": "exit", "message": message}]}

    def after(self, problems: list[dict]) -> list[dict]:
        """The children's problems, with what the fence refused said once each (a refusal that
        stopped a method is said where it stopped it), and what was left past the fence."""
        log = self.root / "out" / "outside.jsonl"
        entries, seen = [], set()
        for line in log.read_text().splitlines() if log.exists() else []:
            entry = json.loads(line)
            if (entry["what"], entry["path"]) not in seen:
                seen.add((entry["what"], entry["path"]))
                entries.append(entry)
        out = []
        for p in problems:
            if p["kind"] == "refused" and entries:
                entry = entries.pop(0)
                out.append({"kind": _kind(entry), "message": (
                    f"{p['where']} {self._outside(entry)}")})
            elif p["kind"] == "refused":
                out.append({"kind": "outside", "message": p["message"]})
            else:
                out.append(p)
        problems = out + [{"kind": _kind(e), "message": "the store " + self._outside(e)}
                          for e in entries]
        stray = sorted(p.name for p in (self.root / "cwd").iterdir())
        if stray:
            problems.append({"kind": "outside", "message": (
                f"the store wrote {', '.join(stray)} in its working directory, not in its run "
                "directory (past the fence: by a C extension or a child process?)")})
        changed = _changes(self.before, _listing(self.store_dir))
        if changed:
            problems.append({"kind": "outside", "message": (
                f"files appeared or vanished beside the store's file while it was graded: "
                f"{', '.join(changed)} (past the fence: by a C extension or a child process?)")})
        return problems

    def _outside(self, entry: dict) -> str:
        path, what, real = entry["path"], entry["what"], entry.get("real") or entry["path"]
        if what == "signal":
            return (f"tried to signal {path} (not itself); the grader refused it: a store never "
                    "signals other processes.")
        cwd = os.path.realpath(self.root / "cwd")
        if real.startswith(cwd + os.sep):
            shown = (f"{os.path.relpath(real, cwd)}, a path relative to the working directory "
                     "(build paths from run_dir)")
        elif real.startswith(self.real_root + os.sep):
            shown = f"{os.path.basename(real)} in the grade's temporary folder"
        elif self.store_dir and os.path.dirname(real) == os.path.realpath(self.store_dir):
            shown = f"{os.path.basename(real)} beside the store's file"
        else:
            shown = real
        where = "its own run directory" if entry.get("confined") else "the grade's run directories"
        return f"tried to {what} {shown}, outside {where}; the grader refused it."


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _status(out: Path) -> str:
    """What a child was doing when it stopped, from its status file: the innermost call that
    began and did not end."""
    try:
        lines = (out / "status").read_text().splitlines()
    except OSError:
        return "the grader's child process (starting)"
    open_calls = []
    for line in lines:
        kind, _, what = line.partition(" ")
        if kind == "begin":
            open_calls.append(what)
        elif kind == "end" and open_calls:
            open_calls.pop()
        elif kind == "phase":
            open_calls = [what]
    return open_calls[-1] if open_calls else "the grader's child process"


def _listing(directory: Path | None) -> dict[str, tuple[int, int]]:
    if directory is None or not directory.is_dir():
        return {}
    out = {}
    for p in directory.iterdir():
        try:
            st = p.lstat()
        except OSError:
            continue
        out[p.name] = (st.st_size, st.st_mtime_ns)
    return out


def _changes(before: dict, after: dict) -> list[str]:
    """Names that appeared or vanished beside the store's file. Changes to existing files are not
    counted: a notebook there autosaves, a learner edits."""
    names = set(before) ^ set(after)
    return sorted(n for n in names if not n.startswith(".") and n != "__pycache__"
                  and not n.endswith(".ipynb"))


# --- the children: the suite and the sweep, fenced -----------------------------------------------

class _Say:
    """A status line per step, written straight to a file (no buffer to lose at a SIGKILL)."""

    def __init__(self, out: Path):
        self.fd = os.open(out / "status", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __call__(self, line: str) -> None:
        os.write(self.fd, (line.replace("\n", " ") + "\n").encode())


def _write_result(out: Path, result: dict) -> None:
    tmp = out / "result.json.tmp"
    tmp.write_text(json.dumps(result, default=str))
    os.replace(tmp, out / "result.json")


def watched(cls, say, *, mark_mid: bool = False):
    """`cls` as the conformance suite sees it, watched from outside: each method says when it
    begins and ends (so a hang is named), runs fenced in its own run directory, and with
    `mark_mid` the mid-commit hook is marked in the door's journal."""
    from contextlib import contextmanager

    label = cls.__name__

    class Watched:
        name = getattr(cls, "name", label)

        def __init__(self, run_dir, config, door):
            self._dir, self._door = Path(run_dir), door
            with self._call("__init__"):
                self.inner = cls(run_dir, config, door)

        @contextmanager
        def _call(self, method: str, detail: str = ""):
            say(f"begin {label}.{method}" + (f" ({detail})" if detail else ""))
            with sandbox.confine(self._dir):
                yield
            say("end")

        def load(self):
            with self._call("load"):
                return self.inner.load()

        def open_for_append(self):
            with self._call("open_for_append"):
                return self.inner.open_for_append()

        def commit(self, state, event, *, mid):
            if mark_mid:
                plain, mid = mid, (lambda: (self._door.mark(what="mid"), plain()))
            detail = f"event {event.get('seq')}: {event.get('t')}, page {event.get('page')}"
            with self._call("commit", detail):
                return self.inner.commit(state, event, mid=mid)

        def close(self):
            with self._call("close"):
                return self.inner.close()

    Watched.__name__ = Watched.__qualname__ = label
    return Watched


def _in_file(e: BaseException, store_file: str | None) -> bool:
    return any(store_file and os.path.realpath(f.filename) == store_file
               for f in traceback.extract_tb(e.__traceback__))


def _kind(entry: dict) -> str:
    return "signal" if entry["what"] == "signal" else "outside"


def _line_in_file(e: BaseException, store_file: str | None) -> str:
    """`my_store.py, line 23, in commit`: the last line of the store's file the exception passed
    through, or ""."""
    mine = [f for f in traceback.extract_tb(e.__traceback__)
            if store_file and os.path.realpath(f.filename) == store_file]
    return f"{Path(mine[-1].filename).name}, line {mine[-1].lineno}, in {mine[-1].name}" \
        if mine else ""


def describe_exception(e: BaseException, store_file: str | None) -> str:
    """`KeyError: 'seq' (my_store.py, line 23, in commit)`: the exception, and the last line of
    the store's file it passed through."""
    line = _line_in_file(e, store_file)
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return text + (f" ({line})" if line else "")


def _conform_main(spec: str, config: RunConfig, out: Path) -> None:
    from .conformance import conform, record, ConformanceReport
    from .stores import StoreSpecError, store_class

    say = _Say(out)
    store_file = os.path.realpath(spec.rpartition(":")[0]) if is_store_file(spec) else None
    file_name = Path(store_file).name if store_file else spec
    say(f"phase importing {file_name}")
    try:
        cls = store_class(spec)
    except StoreSpecError as e:
        _write_result(out, {"problems": [{"kind": "load", "message": _spec_message(e, spec)}]})
        return
    result: dict = {"name": getattr(cls, "name", cls.__name__)}
    say("phase the conformance suite")
    try:
        report = conform(config, watched(cls, say), pages=config.pages)
    except BaseException as e:      # a learner's store may raise anything, SystemExit included
        what = _status(out)
        if isinstance(e, sandbox.OutsideRunDir):
            line = _line_in_file(e, store_file)
            where = what if not line else (f"{what[:-1]}; {line})" if what.endswith(")")
                                           else f"{what} ({line})")
            result["problems"] = [{"kind": "refused", "message": str(e), "where": where}]
        elif _in_file(e, store_file):
            result["problems"] = [{"kind": "exception", "message": (
                f"{what} raised {describe_exception(e, store_file)}; the conformance suite "
                "could not go on.")}]
        else:
            result["problems"] = [{"kind": "returns", "message": (
                f"the conformance suite stopped on what the store returned "
                f"({describe_exception(e, store_file)}): load() must return a Recovered, "
                "open_for_append() a Repairs.")}]
        _write_result(out, result)
        return
    result["report"] = report.to_json()
    say("phase the store's commits, journaled")
    try:
        with tempfile.TemporaryDirectory(prefix="bughunt-profile-") as tmp:
            run_dir = Path(tmp) / "run"
            run_dir.mkdir()
            ops, _states, events = record(config, watched(cls, say, mark_mid=True), run_dir,
                                          ConformanceReport(store="", config=config))
        result["profile"] = dataclasses.asdict(disk_profile(ops, events))
    except BaseException:
        pass                        # the suite ran the same calls: its report has the story
    _write_result(out, result)


def _spec_message(e: Exception, spec: str) -> str:
    text = str(e)
    prefix = f"--store {spec}: "
    return text[len(prefix):] if text.startswith(prefix) else text


def _sweep_main(spec: str, config: RunConfig, out: Path, deadline: float, workers: int) -> None:
    from . import experiment

    running: dict[str, float] = {}
    lock = threading.Lock()
    done = [0]

    def measure(cfg, point, run_dir):
        with lock:
            running[point.name] = time.monotonic()
        try:
            return experiment.crash_and_resume(cfg, point, run_dir)
        finally:
            with lock:
                running.pop(point.name, None)
                done[0] += 1

    def give_up() -> None:
        with lock:
            hung = sorted(running, key=lambda n: running[n])
        message = (f"the sweep did not finish within {deadline:g} s: the workers killed and "
                   f"resumed at {', '.join(hung) or 'the last points'} never finished ("
                   f"{done[0] or 'no'} crash point{'' if done[0] == 1 else 's'} had); a loop or a "
                   "wait in the store that only a worker reaches "
                   "(a resume finds the worker's own files in run_dir)? The grader stopped them.")
        _write_result(out, {"problems": [{"kind": "timeout", "message": message}]})
        try:
            experiment.stop_all_workers()
        finally:
            os._exit(3)

    watchdog = threading.Timer(deadline, give_up)
    watchdog.daemon = True
    watchdog.start()
    jobs = [("sweep", config, p) for p in experiment.crash_points(config)]
    base = out / "runs"
    with experiment.work_dir(base) as base:
        records = experiment.run_crash_jobs(jobs, base, workers or None, measure=measure)
    watchdog.cancel()
    _write_result(out, {"records": [dataclasses.asdict(r) for r in records]})


def disk_profile(ops: list[dict], events: list[dict]) -> DiskProfile:
    """Read the journal of a clean run: what one page's commit does, and whether each commit
    returned with its bytes and its names fsynced."""
    from .conformance import describe_op
    from .instruments.journal import Op
    from .powerloss import Disk

    def mark(op, what):
        return op["op"] == Op.MARK and op.get("what") == what

    page_done = {e["seq"]: e.get("page") for e in events if e.get("t") == "page_done"}
    length: dict = {}
    current = None
    for op in ops:                  # the page commit that does the most (a snapshot's page)
        if mark(op, "commit-begin") or mark(op, "commit-end"):
            current = op.get("seq") if mark(op, "commit-begin") else None
        elif current in page_done:
            length[current] = length.get(current, 0) + 1
    later = {seq: n for seq, n in length.items() if seq != min(length)} or length
    chosen = max(later, key=lambda seq: (later[seq], -seq)) if later else None
    disk = Disk()                   # the journal's one interpreter: what is durable, what is not
    in_commit = None
    shown: list[str] = []
    flags = dict(in_place=False, appends=False, renamed_unsynced=False, data_unsynced=False,
                 dir_unsynced=False)
    for op in ops:
        kind = op["op"]
        if mark(op, "commit-begin"):
            in_commit = op.get("seq")
            continue
        if mark(op, "commit-end"):
            flags["data_unsynced"] |= any(disk.unsynced(path) for path in disk.names())
            flags["dir_unsynced"] |= disk.names_unsynced()
            in_commit = None
            continue
        if in_commit is not None and in_commit == chosen:
            shown.append("mid() (the crash point mid_commit)" if mark(op, "mid")
                         else describe_op(op))
        if kind == Op.TRUNC:
            flags["in_place"] |= in_commit is not None
        elif kind == Op.WRITE:
            if in_commit is not None and op["offset"] and op["offset"] == disk.size(op["path"]):
                flags["appends"] = True
        elif kind == Op.RENAME:
            flags["renamed_unsynced"] |= disk.unsynced(op["src"])
        disk.apply(op)
    return DiskProfile(commit_ops=tuple(shown), commit_page=page_done.get(chosen), **flags)


# --- from the children's results to a Grade -------------------------------------------------------

def _assemble(store, config, conformed, swept, problems, seconds, tidy) -> Grade:
    from .experiment import CrashRun

    problems = tuple(Problem(p["kind"], tidy(p["message"])) for p in problems)
    report = conformed.get("report") or {}
    violations = report.get("violations", [])
    rules = []
    for rule, promise in RULES.items():
        checked = report.get("checked", {}).get(rule, 0)
        if not checked:
            continue
        mine = [v for v in violations if v["rule"] == rule]
        first = mine[0] if mine else {}
        rules.append(RuleResult(
            rule=rule, promise=promise, checked=checked, violations=len(mine),
            state=tidy(first.get("state")), file=first.get("file"),
            detail=_grammar(tidy(first.get("detail"))),
            disk={k: tidy(v) for k, v in first.get("disk", {}).items()}))
    records = []
    for r in swept.get("records", []):
        r = {k: tidy(v) for k, v in r.items()}
        records.append(CrashRun(**r))
    profile = DiskProfile(**{k: tuple(v) if isinstance(v, list) else v
                             for k, v in conformed.get("profile", {}).items()})
    g = Grade(store=store, name=conformed.get("name", store.rpartition(":")[2]), config=config,
              problems=problems, states=report.get("states", 0), rules=tuple(rules),
              records=tuple(records), profile=profile, seconds=seconds)
    return dataclasses.replace(g, hint=choose_hint(g))


# --- one hint -----------------------------------------------------------------------------------

def _grammar(text):
    """The suite says "1 commits had returned"; a learner reads "1 commit had returned"."""
    return re.sub(r"\b1 commits had\b", "1 commit had", text) if isinstance(text, str) else text


def _hint_for_problem(p: Problem) -> Hint:
    text = {
        "spec": "save the store with %%writefile and name it as FILE.py:ClassName (section 2).",
        "load": "the file must import without error and define the class with the contract's "
                "methods: start from the skeleton (section 2).",
        "exception": "fix the exception at the line it names; section 2 says what each method "
                     "receives and must return.",
        "timeout": "a method that never returns: look for a loop whose condition never changes, "
                   "or a wait (a sleep, a lock, a read from a pipe) with nothing to end it.",
        "outside": "build every path from run_dir, and write only through the door you are "
                   "given (self.door, self.door.files): the lab then sees every byte.",
        "signal": "a store touches its own files and nothing else: no signals, no other "
                  "processes.",
        "returns": "return what the contract says: load() a Recovered(state, ...), "
                   "open_for_append() a Repairs(); the skeleton (section 2) has both.",
        "exit": "a store never ends the process: raise StoreDamage(path, line, message) to refuse "
                "a file, and let the worker decide.",
    }[p.kind]
    return Hint(9, text)


def choose_hint(g: Grade) -> Hint:
    """The one hint of a grade: the first thing to fix, and the lesson that teaches it. Problems
    first, then the rules a kill -9 breaks, then those a power cut breaks, then the sweep."""
    if g.problems:
        return _hint_for_problem(g.problems[0])
    broken = set(g.broken())
    p = g.profile
    if "mid-fires-once" in broken:
        return Hint(5, "call mid() exactly once in commit(), after the new bytes are written and "
                       "before they replace the old: that is where the lab's mid_commit crash "
                       "point falls.")
    if "commit-reads-back" in broken:
        return Hint(3, "load() must give back exactly the state commit() was given: keep the "
                       "whole state (a snapshot), or every event, replayed through apply_event.")
    if "load-reads-only" in broken:
        return Hint(5, "load() must only read. Repairs (a newline after a torn line, a stale temp "
                       "file) belong in open_for_append(), so that a rebuild from disk never "
                       "repairs what it is checking.")
    kill = {"crash-leaves-a-real-state", "kill-keeps-acknowledged"} & broken
    if kill:
        first = g.first(sorted(kill, key=list(RULES).index)[0])
        if p.in_place:
            return Hint(5, "commit() overwrites the file in place, so a kill between the "
                           "truncate and the write leaves it empty or half written. Write the new "
                           "state to a temp file and rename it over the old one (os.replace: a "
                           "reader sees the old file or the new, never half).")
        if p.appends and "raised" in (first.detail or ""):
            return Hint(5, "a kill can leave the last line half written: load() should skip a "
                           "line that does not parse (and count it), not raise.")
        return Hint(5, "after a kill -9 at any moment, load() must find a state the run really "
                       "reached and every commit that had returned: write so that a reader sees "
                       "the old bytes or the new, never half (temp file + rename, or whole "
                       "lines appended).")
    if "repair-is-idempotent" in broken:
        return Hint(5, "repair only when the last byte is not a newline: a second "
                       "open_for_append() must change nothing (Codex's "
                       "ensure_rollout_is_newline_terminated).")
    if "resume-appends-cleanly" in broken:
        return Hint(5, "after a crash the log may end in half a line; open_for_append() must add "
                       "a newline first, or the next record glues onto the fragment and both are "
                       "lost (the no-newline trap).")
    power = {"power-cut-leaves-a-real-state", "fsync-keeps-acknowledged"} & broken
    if power:
        first = g.first(sorted(power, key=list(RULES).index)[0])
        if p.renamed_unsynced or p.data_unsynced:
            return Hint(6, "a power cut keeps only what was fsynced: fsync the temp file before "
                           "you rename it (os.fsync on its descriptor), or the new name can point "
                           "at bytes that never reached the disk.")
        if p.dir_unsynced:
            return Hint(6, "a rename is atomic but not durable: after it, fsync the directory "
                           "(door.files.fsync_dir), or a power cut can undo the rename and bring "
                           "back the old state.")
        if p.appends and "raised" in (first.detail or ""):
            return Hint(5, "a power cut can leave the last line half written even after fsync "
                           "of earlier ones: load() should skip a line that does not parse (and "
                           "count it), not raise.")
        return Hint(6, "after a power cut only fsynced bytes and fsynced directory entries are "
                       "sure to be there: fsync the file, then its directory, before commit() "
                       "returns.")
    s = g.summary
    if s.get("duplicate_points"):
        if not g.config.idempotency_key:
            return Hint(4, "the report was filed, the checkpoint did not know it (the danger "
                           "window): give the report a deterministic idempotency key "
                           "(idempotency_key=True) and record an intent first (intent=True).")
        return Hint(4, "a report was filed twice although it carries a key: does your store keep "
                       "the intent (the state's `pending`) so the redo reuses the same key?")
    if s.get("lost_points"):
        return Hint(4, "a report was lost: with pending='abort' a page inside the danger window "
                       "is given up (at most once); pending='redo' with a key files it once.")
    if s.get("errors") or s.get("three_way_failures"):
        bad = next(r for r in g.records if not r.correct)
        if bad.error and "Decode" in bad.error:
            return Hint(5, f"the resume after {bad.crash_point} could not read the store's file: "
                           "a torn write. Write so that a reader sees the old bytes or the new.")
        return Hint(5, f"at {bad.crash_point} the tracker, the resumed run and a rebuild from disk "
                       "disagree: the rebuild catches what is right now and wrong at the next "
                       "recovery.")
    if not g.records:
        return Hint(9, "the sweep did not run: grade again with sweep=True.")
    return Hint(10, "nothing to fix. Next, the same sweep on LangGraph and DBOS.")


# --- command line -------------------------------------------------------------------------------

def _child(argv: list[str]) -> int:
    command, spec, config_json, out, timeout = argv[:5]
    config = RunConfig.from_json(json.loads(config_json))
    out = Path(out)
    if command == "_conform":
        _conform_main(spec, config, out)
    else:
        _sweep_main(spec, config, out, float(timeout), int(argv[5]) if len(argv) > 5 else 0)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("_conform", "_sweep"):
        return _child(argv)
    parser = argparse.ArgumentParser(
        prog="python -m bughunt.grader",
        description="Grade a checkpoint store: the conformance suite, then a real-SIGKILL sweep.")
    parser.add_argument("--store", required=True, metavar="FILE.py:Class")
    parser.add_argument("--idempotency-key", choices=("on", "off"), default="on")
    parser.add_argument("--intent", choices=("on", "off"), default="on")
    parser.add_argument("--pending", choices=("redo", "abort"), default="redo")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    g = grade(args.store, idempotency_key=args.idempotency_key == "on",
              intent=args.intent == "on", pending=args.pending)
    if args.json:
        json.dump({"store": g.store, "passed": g.passed, "verdict": g.verdict,
                   "broken": g.broken(), "hint": str(g.hint) if g.hint else None,
                   "problems": [dataclasses.asdict(p) for p in g.problems],
                   "summary": g.summary}, sys.stdout)
        print()
    else:
        print(g)
    if any(p.kind == "spec" for p in g.problems):
        return 2
    return 0 if g.passed else 1


if __name__ == "__main__":
    sys.exit(main())
