"""The grader of lesson 9: a learner's checkpoint store, judged the way the lab judges its own.

    python -m bughunt.grader --store my_store.py:MyStore [--idempotency-key off] [--json]

`grade("my_store.py:MyStore")` runs, on the store in that file:

1. **the conformance suite** (`bughunt.conformance`): every rule of the store contract at every
   kill -9 and power-cut state of a run: which rule broke, at which crash state (after which door
   operation; which power-loss state), in which file, and what was on disk;
2. **a real-SIGKILL sweep** (`bughunt.experiment`): a worker killed at every named crash point and
   resumed, then the bill, the tracker and a rebuild from disk asked: redone model calls,
   duplicate and lost reports, the three-way check;

and returns a `Grade`: a verdict in plain words, what the store printed, and one hint naming the
lesson that teaches the fix.

A learner's code may print, raise, loop, sleep, exit, fork, or write anywhere. None of it runs in
the caller's process: both parts run behind the lab's boundary (`bughunt.boundary`), in a child
process with a private channel for the results, a time limit per call into the store and per part,
a memory cap, and a supervisor that ends the child with every process it started. Its fence (an
audit hook, `bughunt.boundary.fence`) refuses process creation, ctypes, signals to other processes
and writes outside the run directory; on Linux with Landlock the kernel enforces it too
(`bughunt.boundary.landlock`: no write outside the boundary's folder and the run directories, no
TCP, no signal outside), and stops what the hook cannot see (a `dir_fd`, `mkfifo`, SQLite's
`ATTACH`, C code). A store that tries is graded "refused: the store tried to ..." with where it
was, never "Passes". A store that ends its process, hangs or runs out of memory gets a verdict that
says so, from what happened. Every crash state is loaded in a new process (a kill -9 takes the
store's memory with it), and a store the door saw no write of is judged by the sweep's real kills,
the verdict saying so.

With the kernel's half, a store written to escape the fence is stopped, as far as writes, the
network and signals go (it may still read any file the user may read: `bughunt.boundary.fence`
lists what each layer cannot stop). Without Landlock (macOS, an older kernel) the fence is the
audit hook alone, which guards against accidents, not against an attacker; the verdict then says
so and lists what it lets by.
"""

from __future__ import annotations

if __name__ == "__main__":
    # `python -m bughunt.grader`: Ctrl-C or SIGTERM while the modules below are still being
    # imported (most of the start) ends with one line and the README's code, never a traceback;
    # `main` puts in the handlers that stop the store's processes once the grade begins.
    from .interrupts import stop_while_starting

    stop_while_starting("python -m bughunt.grader", "no store was run")

import dataclasses
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .boundary import Boundary, Limits, Printed, StoreProblem, problem_of
from .config import STORES, OneSentenceParser, RunConfig, is_store_file
from .diskio import not_a_file
from .stores.contract import RULES

#: Pages of a graded run: the conformance suite's site (a bug page, with its intent and report,
#: and plain pages), small enough for a sweep in seconds.
GRADE_PAGES = 5
CONFORM_TIMEOUT_S = 30.0
SWEEP_TIMEOUT_S = 60.0
OPERATION_TIMEOUT_S = 10.0   # one call into the store (its import, a load, a commit...)
RUN_TIMEOUT_S = 10.0         # one worker process of the sweep

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
# A `StoreProblem` (kind, message) is the boundary's: what stopped the lab from judging the store.

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
    """A store's grade. `records` are the sweep's crash runs (`bughunt.experiment.CrashRun`);
    `printed`, what the store's processes wrote on their stdout and stderr."""

    store: str                      # as given: my_store.py:MyStore
    name: str                       # the class's `name`
    config: RunConfig
    problems: tuple[StoreProblem, ...] = ()
    states: int = 0                 # crash states the suite checked
    rules: tuple[RuleResult, ...] = ()
    records: tuple = ()
    profile: DiskProfile = DiskProfile()
    hint: Hint | None = None
    seconds: float = 0.0
    printed: Printed = Printed()
    kernel_abi: int | None = None   # the Landlock ABI that held the store (0: the audit hook alone)
    unseen: tuple[str, ...] = ()    # the store's files the door did not see written
    door_writes: bool = True        # ... and whether it saw any write of the store's at all

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
        """The grade in plain words, a few sentences (and, where the kernel did not hold the
        store, what the fence was instead)."""
        words = self._verdict()
        if self.kernel_abi == 0:
            from .boundary.landlock import HOOK_ALONE_GAPS
            words += (" The fence here was the audit hook alone (no Landlock on this system), "
                      "which does not stop " + "; ".join(HOOK_ALONE_GAPS) + ".")
        return words

    def _verdict(self) -> str:
        if self.problems:
            parts = [_sentence(p.message) for p in self.problems]
            if self.problems[0].kind == "refused":
                return " ".join(parts)
            return " ".join(["Not graded to the end.", *parts])
        if not self.rules:
            return "Not graded to the end."
        parts = []
        if self.unseen:
            shown = ", ".join(self.unseen[:5]) + (f" and {len(self.unseen) - 5} more"
                                                  if len(self.unseen) > 5 else "")
            saw = ("saw none of its writes" if not self.door_writes
                   else "did not see all of its writes")
            held = ("every rule checked there holds" if self.conformance_ok else
                    f"broken there: {', '.join(self.broken())}")
            parts.append(f"The door {saw} ({shown}), so the conformance suite could not build "
                         "the crash states between them: it checked the files as the run left "
                         f"them, loaded in a new process ({held}); the sweep's real kills are "
                         "the verdict on every moment in between, and the power-cut rules were "
                         "not checked.")
            if not self.conformance_ok:
                first = self.first(self.broken()[0])
                parts.append(f"First: {first.rule} at {first.state}: {first.detail}.")
        elif self.conformance_ok:
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
            # Each crash point counted once, by its verdict (worst first), so the counts add up
            # to the crash points: a resume that failed also files no later report, but it is
            # counted as failed, not as lost too.
            verdicts = [r.verdict for r in self.records]
            bad = [f"{n} {words}" for n, words in (
                (verdicts.count("error"), "where the resume failed"),
                (verdicts.count("duplicate"), "with a duplicate report"),
                (verdicts.count("lost"), "with a lost report"),
                (sum(v not in ("correct", "error", "duplicate", "lost", "not reached")
                     for v in verdicts), "failing the three-way check")) if n]
            parts.append(f"The sweep killed the worker at {s['crash_points']} crash points: "
                         f"{s['correct_runs']} recovered correctly"
                         + (f"; {'; '.join(bad)}." if bad else ", none twice, none lost, the "
                            "three witnesses agree."))
        head = "Passes." if self.passed else "Not yet."
        return " ".join([head, *parts])

    def __str__(self) -> str:
        lines = [f"{self.name} ({self.store}): {self.verdict}", *self.printed.lines()]
        if self.hint:
            lines.append(str(self.hint))
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def to_json(self) -> dict:
        """The same verdict as data (`--json`)."""
        return {"store": self.store, "passed": self.passed, "verdict": self.verdict,
                "broken": self.broken(), "hint": str(self.hint) if self.hint else None,
                "hint_lesson": self.hint.lesson if self.hint else None,
                "problems": [dataclasses.asdict(p) for p in self.problems],
                "fence": {"audit_hook": True, "landlock_abi": self.kernel_abi},
                "summary": self.summary, "printed": self.printed.to_json()}


def _sentence(text: str) -> str:
    """`text` as a sentence: a first word in lower case is capitalised, unless it is a file, and
    it ends with a full stop."""
    word = text.split(" ", 1)[0].rstrip(":,")
    text = text[:1].upper() + text[1:] if word.isalpha() and word.islower() else text
    return text if text.endswith((".", "?", "!")) else text + "."


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
          operation_timeout: float = OPERATION_TIMEOUT_S, run_timeout: float = RUN_TIMEOUT_S,
          workers: int | None = None) -> Grade:
    """Grade the store `store` names: `path/to/file.py:ClassName` (or a lab store, `log`).

    The key, the intent and the pending policy are the run's settings (lesson 4); fsync is
    "always", so that the suite also holds the store to the power-cut promise. The suite gets
    `conform_timeout` seconds, the sweep `sweep_timeout`, one call into the store
    `operation_timeout` and one worker process `run_timeout`; a store that exceeds them is stopped
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
    store_dir = Path(spec.rpartition(":")[0]).parent if is_store_file(spec) else None
    before = _listing(store_dir)
    with Boundary(spec if store_dir else None,
                  limits=Limits(operation_s=operation_timeout)) as b:
        args = {"spec": spec, "config": config.to_json(), "pages": pages}
        conformed = b.call("bughunt.grader:_graded_suite_job", args, timeout=conform_timeout)
        problems = [p for p in [problem_of(conformed, b.tidy)] if p]
        swept = None
        if sweep and not problems:
            swept = b.call("bughunt.boundary.jobs:sweep_job",
                           {"spec": spec, "config": config.to_json(), "workers": workers or 0,
                            "run_timeout": run_timeout}, timeout=sweep_timeout)
            problems += [p for p in [problem_of(swept, b.tidy)] if p]
        # With the kernel's half of the fence nothing of the store's can write beside its file: a
        # name that appears there is another program's (a notebook's autosave, an editor).
        changed = _names_added_or_removed(before, _listing(store_dir)) if not b.kernel_abi else []
        if changed:
            problems.append(StoreProblem("refused", (
                f"refused: files appeared or vanished beside the store's file while it was "
                f"graded: {', '.join(changed)} (past the fence: a thread, or a C extension?)")))
        printed = conformed.printed + (swept.printed if swept else Printed())
        if conformed.store_name and not conformed.ok:
            conformed = dataclasses.replace(conformed, result={"name": conformed.store_name})
        g = _assemble(store, config, conformed.result or {},
                      (swept.result if swept and swept.ok else None) or {}, problems,
                      time.perf_counter() - t0, b.tidy, printed)
        return dataclasses.replace(g, kernel_abi=b.kernel_abi)


def _resolve(store: str) -> tuple[str, StoreProblem | None]:
    """The absolute spec the children load, or the problem with the one given."""
    if store in STORES:
        if store == "none":
            return store, StoreProblem("spec", "the none store keeps nothing on purpose: it is the "
                                          "baseline, not a store under the contract")
        return store, None
    if not is_store_file(store):
        return store, StoreProblem("spec", f"{store!r} names no store: expected FILE.py:ClassName, "
                                      "e.g. my_store.py:MyStore")
    file, _, name = store.rpartition(":")
    path = Path(file).expanduser()
    what = not_a_file(path.resolve())
    if what is not None:
        return store, StoreProblem("spec", f"{file} is {what}, not a regular file: FILE.py names "
                                           "the Python file the store is in")
    if not path.is_file():
        return store, StoreProblem("spec", f"{file}: no such file in this folder; save your store "
                                      f"first (a cell that starts with %%writefile {path.name})")
    return f"{path.resolve()}:{name}", None


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


def _names_added_or_removed(before: dict, after: dict) -> list[str]:
    """Names that appeared or vanished beside the store's file: what the fence cannot have let
    through, looked for afterwards. Changes to existing files are not counted: a notebook there
    autosaves, a learner edits."""
    names = set(before) ^ set(after)
    return sorted(n for n in names if not n.startswith(".") and n != "__pycache__"
                  and not n.endswith(".ipynb"))


# --- in the boundary's child: the suite, and the disk profile -----------------------------------

def _marking_mid(cls):
    """`cls` with its mid-commit hook marked in the door's journal (for `disk_profile`)."""

    class Marked(cls):
        def __init__(self, run_dir, config, door):
            super().__init__(run_dir, config, door)
            self._journal_door = door

        def commit(self, state, event, *, mid):
            door = self._journal_door
            return super().commit(state, event, mid=lambda: (door.mark(what="mid"), mid()))

    Marked.__name__ = Marked.__qualname__ = cls.__name__
    return Marked


def _graded_suite_job(ctx, *, spec: str, config: dict, pages: int) -> dict:
    """The conformance suite on the store (`bughunt.boundary.jobs.conform`), then one more run
    of it journaled, to say what a commit does on disk."""
    import tempfile

    from .boundary import child, jobs
    from .conformance import ConformanceReport, record
    from .stores import store_class

    result = jobs.conform_job(ctx, spec=spec, config=config, pages=pages)
    run_config = RunConfig.from_json(config)
    child.set_state("while the grader journals one run's commits")
    with tempfile.TemporaryDirectory(prefix="bughunt-profile-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        try:
            ops, _states, events = record(run_config, _marking_mid(store_class(spec)), run_dir,
                                          ConformanceReport(store="", config=run_config))
        except Exception:
            return result       # the suite ran the same calls: its report has the story
    result["profile"] = dataclasses.asdict(disk_profile(ops, events))
    return result


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

def _assemble(store, config, conformed, swept, problems, seconds, tidy, printed) -> Grade:
    from .experiment import CallCrashRun, CrashRun

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
    kind = CallCrashRun if swept.get("call") else CrashRun
    records = tuple(kind(**{k: tidy(v) for k, v in r.items()}) for r in swept.get("records", []))
    profile = DiskProfile(**{k: tuple(v) if isinstance(v, list) else v
                             for k, v in conformed.get("profile", {}).items()})
    g = Grade(store=store, name=conformed.get("name", store.rpartition(":")[2]), config=config,
              problems=tuple(problems), states=report.get("states", 0), rules=tuple(rules),
              records=records, profile=profile, seconds=seconds, printed=printed,
              unseen=tuple(report.get("unseen", ())),
              door_writes=report.get("door_writes", True))
    return dataclasses.replace(g, hint=choose_hint(g))


# --- one hint -----------------------------------------------------------------------------------

def _grammar(text):
    """The suite says "1 commits had returned"; a learner reads "1 commit had returned"."""
    return re.sub(r"\b1 commits had\b", "1 commit had", text) if isinstance(text, str) else text


def _hint_for_problem(p: StoreProblem) -> Hint:
    """The hint of a problem, from what the problem says happened."""
    if p.kind == "refused":
        text = p.message
        if re.search(r"start a (process|program|thread)|fork its process|shell command|"
                     r"replace its process", text):
            return Hint(9, "a store starts no process and no thread: everything it does happens "
                           "in its own files, through the door, before its method returns.")
        if "ctypes" in text:
            return Hint(9, "write through the door you are given (self.door, door.files): ctypes "
                           "goes around it, and the lab can no longer see what reaches the disk.")
        if "signal " in text:
            return Hint(9, "a store touches its own files and nothing else: no signals to other "
                           "processes.")
        if "resource limits" in text:
            return Hint(9, "a store leaves its process's limits alone: the lab sets them so that "
                           "a store that grows without end is stopped, not the machine.")
        return Hint(9, "build every path from run_dir, and write only through the door you are "
                       "given (self.door, self.door.files): the lab then sees every byte.")
    if p.kind == "timeout" and re.search(r"; [1-9]\d* crash points? had", p.message):
        return Hint(9, "the sweep ran out of time, not into a loop: every crash point starts two "
                       "workers that import your store's file and run it, so a heavy import "
                       "(numpy, pandas) or a slow write is paid at each one.")
    text = {
        "spec": "save the store with %%writefile and name it as FILE.py:ClassName (section 2).",
        "load": "the file must import without error and define the class with the contract's "
                "methods: start from the skeleton (section 2).",
        "exception": "fix the exception at the line it names; section 2 says what each method "
                     "receives and must return.",
        "timeout": "a method that never returns: look for a loop whose condition never changes, "
                   "or a wait (a sleep, a lock, a read from a pipe) with nothing to end it.",
        "returns": "return what the contract says: load() a Recovered(state, ...), "
                   "open_for_append() a Repairs(), commit() and close() nothing; the skeleton "
                   "(section 2) has all four.",
        "exit": "a store never ends the process: raise StoreDamage(path, line, message) to refuse "
                "a file, and let the worker decide.",
        "signal": "a store never signals its own process: to refuse a file, raise "
                  "StoreDamage(path, line, message) and let the worker decide."
                  if "own process" in p.message else
                  "the process died in C code or by a signal from outside: run the method by "
                  "hand on the files it was given to see where.",
        "sigstop": "a store never stops its own process: the worker would wait for ever, and "
                   "nobody would resume it.",
        "memory": "a store holds one run's state, a few kilobytes: look for a buffer or a list "
                  "that grows at every call, or a file read whole that never stops growing.",
        "channel": "a store writes only to files it opened itself, through the door.",
        "patched": "a store leaves what it shares with the lab's code in its process as it "
                   "found it (json.dumps and json.loads, the handlers of signals): use a function "
                   "of your own instead, and no signal handler.",
        "name": "name every file with text (a str such as \"state.json\"): a name built from "
                "bytes that are not UTF-8 cannot be kept in the journal or shown in a report.",
        "lab": "this is the lab failing, not your store: the output above says where.",
        "interrupted": "the grade was interrupted: grade again.",
    }.get(p.kind, "see the sentence above: it says what happened, and where.")
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
        keeps = g.first("kill-keeps-acknowledged")
        if keeps is not None and not keeps.ok and "memory" in (keeps.detail or ""):
            return Hint(6, "the store kept what commit() was given in memory (a module or class "
                           "variable, a cache) and load() found it there; a kill -9 ends the "
                           "process and its memory with it, and the suite loads every crash state "
                           "in a new process. Put the state on disk (through self.door) before "
                           "commit() returns, and let load() read only the disk.")
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
                           "(idempotency_key=True), and the tracker ignores the resume's second "
                           "filing.")
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

EXIT_PROBLEM, EXIT_REFUSED = 1, 2


def exit_code(g: Grade) -> int:
    """0 passes; 2 the store cannot be loaded (no such file, a syntax or import error, no such
    class, its import ended the process or was refused); 1 anything else that is not a pass."""
    if g.problems and (g.problems[0].kind in ("spec", "load") or g.problems[0].loading):
        return EXIT_REFUSED
    return 0 if g.passed else EXIT_PROBLEM


def main(argv: list[str] | None = None) -> int:
    from .interrupts import Interrupted, interruptible

    parser = OneSentenceParser(
        prog="python -m bughunt.grader",
        description="Grade a checkpoint store: the conformance suite, then a real-SIGKILL sweep. "
                    "The verdict goes to stderr; --json prints it as data on stdout.")
    parser.add_argument("--store", required=True, metavar="FILE.py:Class")
    parser.add_argument("--idempotency-key", choices=("on", "off"), default="on")
    parser.add_argument("--intent", choices=("on", "off"), default="on")
    parser.add_argument("--pending", choices=("redo", "abort"), default="redo")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        # The verdict's output too: a signal while it is written is this sentence, not the
        # "while starting" one the handlers put back at the block's end would say.
        with interruptible():
            g = grade(args.store, idempotency_key=args.idempotency_key == "on",
                      intent=args.intent == "on", pending=args.pending)
            if args.json:
                json.dump(g.to_json(), sys.stdout)
                print()
            print(g, file=sys.stderr)
    except Interrupted as e:
        print(f"bughunt.grader: {e.what}; the store's processes were stopped and the grade's "
              "temporary folder removed", file=sys.stderr)
        return e.code
    return exit_code(g)


if __name__ == "__main__":
    sys.exit(main())
