"""Lesson 9, your own store (capstone): write a checkpoint store, and let the crash sweep grade it.

The learner writes a store in a notebook cell (`%%writefile my_store.py`), against the store
contract (`bughunt.stores.contract`). `grade("my_store.py:MyStore")` (the robust part lives in
`bughunt.grader`) runs the conformance suite at every kill -9 and power-cut state, and a
real-SIGKILL sweep at every named crash point, both behind the lab's boundary
(`bughunt.boundary`: a child process, a fence, limits); this module shows the grades beside the
lab's own stores, as tables and a figure, and holds the skeleton, the reference solution, the
panel and the exercises.
"""

from __future__ import annotations

import functools
import hashlib
import html
import inspect
import tempfile
import textwrap
from pathlib import Path

from ...config import RunConfig, is_store_file
from ...conformance import conform
from ...crashpoints import LABELS
from ...experiment import VERDICTS, summarize
from ...grader import GRADE_PAGES, Grade
from ...grader import grade as _grade
from ...stores import contract
from ...stores.contract import RULES
from .. import results
from ..panel import Panel, Result
from ..claims import Claims, Invariants
from ..judges import Measured, assess, defined_in, exercise, statement
from ..practice import NUMBER, Answer, Problem, as_exercise, drawn
from ..views import Table, summary_table
from ..plots import verdict_handles
from ..style import COLORS, SERIES, VERDICT_STYLE, new_figure
from ..registry import Lesson

#: The lab's own stores the grades are drawn beside, with a grade's settings.
LAB_STORES = ("log", "snapshot")


# --- the skeleton and the door ------------------------------------------------------------------

_SIGNATURES = {
    "__init__": "def __init__(self, run_dir: Path, config, door):",
    "load": "def load(self) -> Recovered:",
    "open_for_append": "def open_for_append(self) -> Repairs:",
    "commit": "def commit(self, state: dict, event: dict, *, mid) -> None:",
    "close": "def close(self) -> None:",
}
_BODIES = {
    "__init__": ["self.run_dir, self.config, self.door = run_dir, config, door",
                 "self.files = door.files    # its system calls: open, write, fsync, rename..."],
    "load": ["raise NotImplementedError(\"load(): read your files, return Recovered(state)\")"],
    "open_for_append": ["return Repairs()"],
    "commit": ["raise NotImplementedError(\"commit(): make `state` durable, call mid() once\")"],
    "close": ["pass"],
}


def skeleton(class_name: str = "MyStore") -> str:
    """A store to start from: the contract's methods, each with its promise as its docstring,
    and the rules it will be graded on. Copy it into a cell under `%%writefile my_store.py`."""
    rules = "\n".join(textwrap.fill(f"- {rule}: {promise}", 92, subsequent_indent="  ",
                                    break_on_hyphens=False)
                      for rule, promise in RULES.items())
    out = ['"""My checkpoint store (lesson 9). Grade it: grade("my_store.py:MyStore")."""',
           "import json", "import os", "from pathlib import Path", "",
           "from bughunt.events import apply_event, initial_state",
           "from bughunt.stores import Recovered, Repairs, StoreDamage", "", "",
           f"class {class_name}:",
           '    """Graded on every rule of the store contract:', "",
           textwrap.indent(rules, "    "), '    """', "",
           '    name = "my store"']
    for method, signature in _SIGNATURES.items():
        doc = inspect.getdoc(getattr(contract.CheckpointStore, method))
        doc = "\n\n".join(textwrap.fill(p.replace("kill -9", "kill\0-9"), 88,
                                        break_on_hyphens=False).replace("\0", " ")
                          for p in doc.split("\n\n"))
        body = textwrap.indent('"""' + doc.replace("\n", "\n") + '"""', "        ")
        out += ["", "    " + signature, body,
                *("        " + line for line in _BODIES[method])]
    return "\n".join(out) + "\n"


def contract_table():
    """The store contract's rules, each with its promise (`bughunt.stores.contract.RULES`)."""
    import pandas as pd

    return pd.DataFrame({"promise": RULES}).rename_axis("rule")


#: What a store may call to write: the door's methods (they apply the run's fsync policy), and
#: under them its system calls, `door.files` (they do exactly what they say, nothing more).
DOOR_CALLS = {
    "door.open_append(path)": "open (create if needed) a file for appending; returns a descriptor. "
                              "With fsync \"always\", a new file's directory is fsynced too",
    "door.append(fd, data, mid=mid)": "call mid(), then write data in one write(); with fsync "
                                      "\"always\", fsync the file",
    "door.close(fd)": "close a descriptor from open_append",
    "door.write_atomic(path, data, mid=mid)": "temp file, write, fsync, mid(), rename over path, "
                                              "directory fsync (fsyncs per the policy)",
    "door.remove(path)": "remove a file (a stale temp file); with fsync \"always\", fsync the "
                         "directory",
    "door.files.open(path, flags)": "os.open: returns a descriptor (os.O_WRONLY | os.O_CREAT | "
                                    "os.O_TRUNC empties the file)",
    "door.files.write(fd, data, path)": "write all of data at the descriptor's position",
    "door.files.fsync(fd, path)": "os.fsync: the file's bytes reach the disk",
    "door.files.close(fd)": "os.close",
    "door.files.rename(src, dst)": "os.replace: dst is the old file or the new one, never half",
    "door.files.fsync_dir(directory)": "fsync the directory: names created, renamed or removed "
                                       "in it reach the disk",
    "door.files.unlink(path)": "os.unlink",
}


def door_methods():
    """What a store may call to write, and what each call does (the lab sees every one)."""
    import pandas as pd

    return pd.DataFrame({"what it does": DOOR_CALLS}).rename_axis("call")


# --- grading, cached -------------------------------------------------------------------------------

def _sources_key(store: str) -> str:
    """A digest of the store's file and every .py beside it (a step may import another): a
    changed file is graded again, an unchanged one is not."""
    if not is_store_file(store):
        return ""
    folder = Path(store.rpartition(":")[0]).expanduser().resolve().parent
    h = hashlib.sha256()
    for p in sorted(folder.glob("*.py")) if folder.is_dir() else []:
        try:
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
        except OSError:
            pass
    return h.hexdigest()


#: The grades this kernel made of the notebook's own step files, by (file, class, settings):
#: the runs the lesson's claims are checked on (`step`).
_STEP_GRADES: dict = results.table("lesson 9: the notebook's grades of its steps")


def _step_key(store: str, settings: dict) -> tuple:
    file, _, cls = store.rpartition(":")
    return Path(file).name, cls, tuple(sorted(settings.items()))


def grade(store: str, **settings) -> Grade:
    """`bughunt.grader.grade`, kept in the lab's results cache until its files change (or
    `results.reset()`)."""
    key = ("capstone-grade", store, _sources_key(store), tuple(sorted(settings.items())))
    g = results.remember(key, lambda: _grade(store, **settings))
    file = Path(store.rpartition(":")[0])
    if is_store_file(store) and (notebook_stores().get(file.name) or "").strip() == \
            (_read(file) or "").strip():
        _STEP_GRADES[_step_key(store, settings)] = g      # the notebook's own step, as written
    return g


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


#: The notebook whose `%%writefile` cells are the lesson's steps.
NOTEBOOK_SOURCE = Path(__file__).resolve().parents[3] / "notebooks" / "src" / "09_your_own_store.py"


@functools.lru_cache(maxsize=1)
def notebook_stores() -> dict[str, str]:
    """The notebook's `%%writefile NAME` cells, as the notebook writes them: file name ->
    source ({} where the notebook's source is not beside the package)."""
    import jupytext

    if not NOTEBOOK_SOURCE.is_file():
        return {}
    out = {}
    for cell in jupytext.read(NOTEBOOK_SOURCE).cells:
        first, _, rest = cell.source.partition("\n")
        if cell.cell_type == "code" and first.startswith("%%writefile "):
            out[first.split()[1]] = rest if rest.endswith("\n") else rest + "\n"
    return out


#: The notebook's steps: name -> (file, class).
STEPS = {"naive": ("naive_store.py", "NaiveStore"),
         "rename": ("rename_store.py", "RenameStore"),
         "fsync": ("fsync_store.py", "FsyncStore"),
         "durable": ("durable_store.py", "DurableStore"),
         "log": ("log_store.py", "LogStore"),
         "repaired": ("repaired_log_store.py", "RepairedLogStore")}
#: Section 8's labels for the steps.
STEP_LABELS = {"naive": "1 naive", "rename": "2 temp + rename", "fsync": "3 + fsync",
               "durable": "4 + dir fsync", "log": "5 log", "repaired": "6 log + repair"}


def step(name: str, **settings) -> Grade:
    """The grade of the notebook's step `name` with `settings`: the one this kernel's notebook made
    of its file, if it did; else the notebook's cells, graded now in a folder of their own (a
    headless check of the lesson's claims)."""
    file, cls = STEPS[name]
    key = (file, cls, tuple(sorted(settings.items())))
    if key in _STEP_GRADES:
        return _STEP_GRADES[key]
    sources = notebook_stores()
    if file not in sources:
        raise LookupError(f"{NOTEBOOK_SOURCE.name} has no %%writefile {file} cell")
    return _graded_folder(sources, file, cls, **settings)


def graded_steps(**settings) -> dict[str, Grade]:
    """Every step, graded, by section 8's labels."""
    return {STEP_LABELS[n]: step(n, **settings) for n in STEPS}


def _graded_folder(sources: dict[str, str], file: str, name: str, **settings) -> Grade:
    """Grade `file:name` among `sources` (file name -> text, written to a temporary folder, so
    one may import another); cached by their text."""
    def run():
        with tempfile.TemporaryDirectory(prefix="bughunt-capstone-") as tmp:
            for f, text in sources.items():
                (Path(tmp) / f).write_text(text)
            return _grade(f"{Path(tmp) / file}:{name}", **settings)
    digest = hashlib.sha256(repr(sorted(sources.items())).encode()).hexdigest()
    g = results.remember(("capstone-folder", digest, file, name, tuple(sorted(settings.items()))),
                         run)
    import dataclasses
    return dataclasses.replace(g, store=f"{file}:{name}")


#: The reference solution (exercise 9.1): an event log with a snapshot every 4 pages.
REFERENCE = '''\
"""A reference store (lesson 9): an event log, with a snapshot every 4 pages."""
import json
import os

from bughunt.events import apply_event, initial_state
from bughunt.stores import Recovered, Repairs, StoreDamage

EVERY = 4


class MyStore:
    """Every event one JSON line, appended in one write (door.append: fsynced when the run's
    fsync policy is "always"). Every 4 pages, the whole state and how many log bytes it covers,
    in snapshot.json, written by door.write_atomic (temp file, fsync, rename, directory fsync).
    Recovery loads the snapshot and replays only the log after it (lesson 3); it skips and counts
    a line cut by a crash, and open_for_append() ends such a line first (lesson 5)."""

    name = "reference: log + snapshot every 4"

    def __init__(self, run_dir, config, door):
        self.log = run_dir / "events.jsonl"
        self.snapshot = run_dir / "snapshot.json"
        self.door = door
        self.fd = None
        self.size = 0

    def load(self):
        state, start = initial_state(), 0
        if self.snapshot.exists():
            try:
                saved = json.loads(self.snapshot.read_bytes())
                state, start = saved["state"], saved["log_bytes"]
            except (ValueError, KeyError, TypeError) as e:
                raise StoreDamage(self.snapshot, None, f"not a snapshot ({e})") from None
        data = self.log.read_bytes() if self.log.exists() else b""
        if len(data) < start:
            raise StoreDamage(self.log, None, f"{len(data)} bytes, but the snapshot covers "
                                              f"{start}")
        replayed = torn = 0
        first_line = data[:start].count(b"\\n") + 1
        for number, line in enumerate(data[start:].split(b"\\n"), first_line):
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                torn += 1                  # a line cut by a crash: skipped, counted
                continue
            if event.get("seq") != state["seq"] + 1:
                raise StoreDamage(self.log, number, f"expected event {state['seq'] + 1}, "
                                                    f"found {event.get('seq')}")
            state = apply_event(state, event)
            replayed += 1
        return Recovered(state, replayed_events=replayed, torn_lines_skipped=torn,
                         snapshot_used=start > 0)

    def open_for_append(self):
        repairs = Repairs()
        if self.log.exists() and self.log.stat().st_size:
            with open(self.log, "rb") as f:
                f.seek(-1, os.SEEK_END)
                ends_clean = f.read(1) == b"\\n"
            if not ends_clean:             # end the fragment, so nothing glues onto it
                fd = self.door.open_append(self.log)
                self.door.append(fd, b"\\n", kind="repair")
                self.door.close(fd)
                repairs.tails_repaired = 1
        tmp = self.snapshot.with_name(self.snapshot.name + ".tmp")
        if tmp.exists():                   # a kill between the temp file and its rename
            self.door.remove(tmp)
            repairs.temp_files_removed = 1
        self.fd = self.door.open_append(self.log)
        self.size = os.fstat(self.fd).st_size
        return repairs

    def commit(self, state, event, *, mid):
        line = (json.dumps(event, sort_keys=True) + "\\n").encode()
        self.door.append(self.fd, line, mid=mid)
        self.size += len(line)
        if event["t"] == "page_done" and event["page"] % EVERY == 0:
            data = json.dumps({"state": state, "log_bytes": self.size}).encode()
            self.door.write_atomic(self.snapshot, data)

    def close(self):
        if self.fd is not None:
            self.door.close(self.fd)
            self.fd = None
'''


def _graded_source(source: str, name: str, file: str, **settings) -> Grade:
    """Grade a store given as source text (saved to a temporary folder); cached by its text."""
    def run():
        with tempfile.TemporaryDirectory(prefix="bughunt-capstone-") as tmp:
            path = Path(tmp) / file
            path.write_text(source)
            return _grade(f"{path}:{name}", **settings)
    key = ("capstone-source", hashlib.sha256(source.encode()).hexdigest(), name,
           tuple(sorted(settings.items())))
    g = results.remember(key, run)
    # Shown as the learner would name it, not by its temporary folder.
    import dataclasses
    return dataclasses.replace(g, store=f"{file}:{name}")


def reference(**settings) -> Grade:
    """The reference solution, graded."""
    return _graded_source(REFERENCE, "MyStore", "reference_store.py", **settings)


#: Section 2's two stores behind the boundary, built on the reference solution (exercise 9.1):
#: one prints as it commits (its words are shown under the verdict, and change nothing), the other
#: asks a shell to copy its log, even within its run directory (the fence refuses the process).
BEHIND_THE_BOUNDARY = REFERENCE + '''

class ChattyStore(MyStore):
    name = "chatty"

    def commit(self, state, event, *, mid):
        print("committing event", event["seq"], event["t"])
        super().commit(state, event, mid=mid)


class BackupStore(ChattyStore):
    name = "with a backup"

    def commit(self, state, event, *, mid):
        super().commit(state, event, mid=mid)
        import subprocess
        subprocess.run(["cp", str(self.log), str(self.log) + ".bak"])
'''


def behind_the_boundary() -> dict[str, Grade]:
    """Section 2's two stores, graded: what the store prints, and what the fence refuses."""
    return {name: _graded_source(BEHIND_THE_BOUNDARY, name, "chatty_store.py")
            for name in ("ChattyStore", "BackupStore")}


def grade_skeleton() -> Grade:
    """The skeleton as it is, graded: what the grader says about a store that is not written
    yet (without touching a file of yours)."""
    return _graded_source(skeleton(), "MyStore", "my_store.py")


# --- the lab's own stores, with the same settings ----------------------------------------------

def lab_stores(config: RunConfig) -> dict[str, RunConfig]:
    """The lab's own log and snapshot stores with a grade's settings, by label."""
    extras = "".join([" + intents" if config.intent else "",
                      " + key" if config.idempotency_key else ""])
    return {f"lab: log{extras}": config.replace(store="log"),
            f"lab: snapshot{extras}": config.replace(store="snapshot")}


def lab_store_sweeps(config: RunConfig) -> dict[str, list]:
    """The lab's log and snapshot stores, swept with a grade's settings (the results cache)."""
    return results.sweeps_once(lab_stores(config))


@results.memoized
def lab_rules(config: RunConfig) -> dict[str, tuple[int, int]]:
    """Each lab store under the conformance suite with a grade's settings: (rules broken, crash
    states checked)."""
    out = {}
    for label, cfg in lab_stores(config).items():
        report = conform(cfg, pages=cfg.pages)
        out[label] = (len(report.broken()), report.states)
    return out


# --- tables and the figure ------------------------------------------------------------------------

#: How a crash run ends, each run in exactly one (the verdict columns of `compare_table`).
OUTCOMES = {"correct": ("correct",), "duplicate report": ("duplicate",),
            "lost report": ("lost",),
            "other wrong": ("wrong state", "rebuild fails", "tracker disagrees", "not reached"),
            "resume failed": ("error",)}


def _row(label: str, records, rules_broken, states, rules_checked) -> dict:
    records = list(records)
    ran = [r for r in records if r.error is None]
    redone = (sum(r.redone_model_calls for r in ran) / len(ran)) if ran else None
    row = {"store": label,
           "rules broken": rules_broken if rules_checked else None,
           "rules checked": rules_checked or None,
           "crash states": states or None,
           "crash points": len(records)}
    for column, verdicts in OUTCOMES.items():
        row[column] = sum(r.verdict in verdicts for r in records)
    row["resumes that ran"] = len(ran)
    row["avg redone calls (resumes that ran)"] = None if redone is None else round(redone, 2)
    return row


def _rules_within_checked(df) -> list[str]:
    return [f"row {idx!r}: {int(r['rules broken'])} rules broken of {int(r['rules checked'])}"
            for idx, r in df.iterrows() if r["rules checked"] == r["rules checked"]
            and r["rules broken"] > r["rules checked"]]


COMPARE_INVARIANTS = Invariants(
    total="crash points", parts=tuple(OUTCOMES), within=("resumes that ran",),
    may_be_empty=("rules broken", "rules checked", "crash states",
                  "avg redone calls (resumes that ran)"),
    extra=(_rules_within_checked,))


def compare_rows(grades: dict[str, Grade], *, lab: bool = True) -> list[dict]:
    rows = [_row(label, g.records, len(g.broken()), g.states, len(g.rules))
            for label, g in grades.items()]
    if lab and grades:
        config = next(iter(grades.values())).config
        checked = lab_rules(config)
        for label, records in lab_store_sweeps(config).items():
            broken, states = checked[label]
            rows.append(_row(label, records, broken, states, len(RULES)))
    return rows


def compare_table(grades: dict[str, Grade], *, lab: bool = True) -> Table:
    """One row per graded store (and the lab's own stores with the first grade's settings, through
    the same suite and sweep): rules broken of those checked, the crash states checked, and how
    each crash point of the sweep ended, each in exactly one column (they add up to the crash
    points); the average redone calls over the resumes that ran, and how many did."""
    return summary_table(compare_rows(grades, lab=lab), "stores beside the lab's",
                         COMPARE_INVARIANTS, index="store")


def rules_matrix(grades: dict[str, Grade]) -> Table:
    """Rule by store: violations found (0 = the rule holds at every crash state it was checked
    at; "-": not checked)."""
    import pandas as pd

    df = pd.DataFrame({label: {r.rule: r.violations for r in g.rules}
                       for label, g in grades.items()}).reindex(list(RULES))
    df.index.name = "rule"
    return Table(df, "violations by rule", Invariants(counts=tuple(df.columns)))


def _point_order(name: str) -> tuple[int, int]:
    page, _, label = name.partition(".")
    return int(page[1:]), LABELS.index(label) if label in LABELS else len(LABELS)


def plot_grades(grades: dict[str, Grade], *, lab: bool = True):
    """Left: one strip per store, one cell per crash point, coloured and hatched by verdict.
    Right: the average model calls a crash costs each store (runs whose resume failed left out).
    The lab's own stores, swept with the same settings, are the last strips."""
    rows = [(label, list(g.records), f"{len(g.broken())} of {len(g.rules)}" if g.rules else "-")
            for label, g in grades.items()]
    if lab and grades:
        config = next(iter(grades.values())).config
        broken = lab_rules(config)
        rows += [(label, recs, f"{broken[label][0]} of {len(RULES)}")
                 for label, recs in lab_store_sweeps(config).items()]
    names = sorted({r.crash_point for _, recs, _ in rows for r in recs}, key=_point_order)
    x = {n: i for i, n in enumerate(names)}
    fig, (ax, bars) = new_figure(12, 1.6 + 0.75 * len(rows), 1, 2,
                                 gridspec_kw={"width_ratios": [4.2, 1]}, sharey=True)
    seen = []
    for y, (label, recs, _) in enumerate(rows):
        for r in recs:
            color, hatch = VERDICT_STYLE[r.verdict]
            ax.bar(x[r.crash_point], 0.8, bottom=y - 0.4, width=0.92, color=color, hatch=hatch,
                   edgecolor="white", linewidth=0.5)
            seen.append(r.verdict)
    labels = []
    for label, recs, rules in rows:
        counts = {v: sum(r.verdict == v for r in recs) for v in VERDICTS}
        bad = ", ".join(f"{counts[v]} {v}" for v in VERDICTS if v != "correct" and counts[v])
        sweep = (bad or "all correct") if recs else "not swept"
        labels.append(f"{label}\nsweep: {sweep}\nrules broken: {rules}")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.6)
    firsts = {}
    for n in names:
        firsts.setdefault(n.split(".")[0], x[n])
    ax.set_xticks(list(firsts.values()), list(firsts))
    ax.set_xlim(-0.7, len(names) - 0.3)
    ax.set_xlabel("crash point (grouped by page; p3 = first point of page 3)")
    ax.set_title("Each store killed by SIGKILL at every crash point, then resumed", fontsize=10)
    ax.legend(handles=verdict_handles(seen), fontsize=8, loc="lower left",
              bbox_to_anchor=(0.0, 1.06), ncols=len(set(seen)), frameon=False)
    averages = []
    for y, (label, recs, _) in enumerate(rows):
        ran = [r.redone_model_calls for r in recs if r.error is None]
        failed = len(recs) - len(ran)
        avg = sum(ran) / len(ran) if ran else 0.0
        averages.append(avg)
        bars.barh(y, avg, height=0.6, color=SERIES[0] if not label.startswith("lab:")
                  else COLORS["grey"], hatch="//" if failed else None, edgecolor="white")
        text = f" {avg:.2f}" if ran else " n/a"
        if failed:
            text += f"\n over {len(ran)} of {len(recs)};\n {failed} resumes failed"
        bars.text(avg, y, text, va="center", fontsize=8,
                  color=COLORS["red"] if failed else COLORS["black"])
    bars.set_xlim(0, max([1.0, *averages]) * 2.2)
    bars.set_xlabel("avg redone model calls per crash\n(calls; over the resumes that ran)")
    bars.set_title("cost of a crash (blue: yours,\ngrey: the lab's; a failed resume\n"
                   "costs the run: not an average)", fontsize=9)
    return fig


def explain(g: Grade) -> str:
    """The grade in words: the verdict, the hint, the first violation (crash state, file, what
    was on disk), and what one commit did on disk."""
    lines = [f"{g.name} ({g.store})", "", textwrap.fill(g.verdict, 100, break_on_hyphens=False)]
    if g.printed:                     # captured behind the boundary, shown under the verdict
        lines += ["", *g.printed.lines()]
    if g.hint:
        lines += ["", textwrap.fill(str(g.hint), 100, break_on_hyphens=False)]
    broken = g.broken()
    if broken:
        r = g.first(broken[0])
        lines += ["", f"The first violation of {r.rule} ({r.violations} in all):",
                  textwrap.fill(f"crash state: {r.state}", 100, subsequent_indent="  ",
                                break_on_hyphens=False),
                  textwrap.fill(f"what load() said: {r.detail}", 100, subsequent_indent="  ",
                                break_on_hyphens=False),
                  "on disk at that moment (the last bytes of each file):"]
        lines += [f"  {name}: {preview}" for name, preview in r.disk.items()] or [
            "  (no file at all)"]
    if g.profile.commit_ops:
        lines += ["", f"One commit, for comparison: page {g.profile.commit_page}'s page_done "
                      "event, through the door (the operation numbers of a crash state count "
                      "every operation of the suite's run, not these):"]
        lines += [f"  - {op}" for op in g.profile.commit_ops]
    return "\n".join(lines)


# --- the panel ---------------------------------------------------------------------------------

class GradePanel(Panel):
    """Grade a store file: its name, the run's settings (idempotency key, intent, what recovery
    does with a pending intent), and Grade. Shows the verdict, the hint, the rules and the sweep
    beside the lab's stores. Reset forgets every result (`results.reset`)."""

    title = "Grade a checkpoint store"
    run_label = "Grade"
    running = "Grading: the conformance suite, then a worker killed at every crash point..."
    labels = {"key": "idempotency key", "intent": "intent", "pending": "pending intent"}

    def __init__(self, store: str = "my_store.py:MyStore"):
        self.default_store = store
        super().__init__()
        self.run_button.icon = "check"
        self.store, self.key, self.intent, self.pending = (
            self.controls[n] for n in ("store", "key", "intent", "pending"))
        self.last: Grade | None = None

    def make_controls(self) -> dict:
        import ipywidgets as W

        from ..panel import ON_OFF, toggle

        return {"store": W.Text(value=self.default_store, description="store",
                                placeholder="FILE.py:ClassName", layout=W.Layout(width="420px")),
                "key": toggle(ON_OFF, True), "intent": toggle(ON_OFF, True),
                "pending": toggle(["redo", "abort"], "redo")}

    def execute(self, settings: dict) -> Result:
        g = self.graded(settings)
        self.last = g
        return Result(g.verdict.split(". ")[0].rstrip(".") + ".",
                      notes=[f"<pre style='white-space: pre-wrap'>{html.escape(explain(g))}</pre>"],
                      figures=[plot_grades({g.name: g})] if g.records else [],
                      tables=[g.rules_table()] if g.rules else [], data=g)

    def graded(self, settings: dict) -> Grade:
        """The grade the settings ask for: the store file named, with the run's settings."""
        return grade(settings["store"].strip(), idempotency_key=settings["key"],
                     intent=settings["intent"], pending=settings["pending"])

    def reset(self) -> None:
        super().reset()
        self.last = None

    def show(self):
        """Grade the store named (when its file exists), then return the widget to display."""
        if Path(self.store.value.rpartition(":")[0]).is_file():
            return super().show()
        self.status.value = (f"{self.store.value.rpartition(':')[0]} does not exist yet: write "
                             "your store (exercise 9.1), then press Grade.")
        return self.widget()


def panel(store: str = "my_store.py:MyStore") -> GradePanel:
    return GradePanel(store)


def app_panel():
    """The lesson's tab in the app, which has no cells to write a store in: pick one of this
    notebook's steps and grade it (`bughunt.lab.capstone_steps`)."""
    from ..capstone_steps import StepPanel

    return StepPanel(LESSON.notebook)


# --- exercises -------------------------------------------------------------------------------

@exercise("9.1", "Write your own store: copy the skeleton (cap.skeleton()) into a cell under "
          "%%writefile my_store.py, fill in its methods, and check it with its name, "
          "'my_store.py:MyStore'. It must keep every rule of the contract at every crash state "
          "and recover correctly at every crash point (idempotency key and intent on).",
          "One answer, an event log with a snapshot every 4 pages (the lab's own design, lesson "
          "3), written from the door's methods:\n\n" + REFERENCE + "\nSimpler stores pass too: "
          "the last log of section 6, or the durable snapshot of section 5. What each needs: "
          "bytes a reader sees whole or not at all (one appended line, or a temp file renamed), "
          "fsync of the file and its directory before commit() returns, a load() that only reads "
          "and skips a line cut short, and a repair in open_for_append().")
def _ex_9_1(answer):
    if not isinstance(answer, str) or ":" not in answer:
        return False, "Answer with your store's name as a string: 'my_store.py:MyStore'."
    g = grade(answer)
    if g.passed:
        s = g.summary
        return True, (f"Every rule held at {g.states} crash states, and all {s['crash_points']} "
                      f"crash points recovered correctly (avg redone model calls "
                      f"{s['avg_redone_model_calls']:.2f}).")
    return False, f"{g.verdict}\n{g.hint}"


#: Exercise 9.2's store: step 1 (in place), with an fsync of the file and of its directory.
FSYNC_IN_PLACE = '''\
import json
import os

from bughunt.events import initial_state
from bughunt.stores import Recovered, Repairs


class InPlaceFsyncStore:
    name = "in place, fsynced"

    def __init__(self, run_dir, config, door):
        self.path = run_dir / "state.json"
        self.files = door.files

    def load(self):
        if not self.path.exists():
            return Recovered(initial_state())
        return Recovered(json.loads(self.path.read_bytes()))

    def open_for_append(self):
        return Repairs()

    def commit(self, state, event, *, mid):
        data = json.dumps(state).encode()
        fd = self.files.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        mid()
        self.files.write(fd, data, str(self.path))
        self.files.fsync(fd, str(self.path))
        self.files.close(fd)
        self.files.fsync_dir(self.path.parent)

    def close(self):
        pass
'''
#: The four rules the naive store of step 1 breaks.
NAIVE_BROKEN = ("crash-leaves-a-real-state", "kill-keeps-acknowledged",
                "power-cut-leaves-a-real-state", "fsync-keeps-acknowledged")


def _rule_set(answer) -> set[str] | None:
    if isinstance(answer, str):
        answer = {answer}
    try:
        items = set(answer)
    except TypeError:
        return None
    return items if all(isinstance(a, str) for a in items) else None


@exercise("9.2", "Step 1's store writes state.json in place with no fsync and breaks four rules: "
          + ", ".join(NAIVE_BROKEN) + ". Keep it in place, but fsync the file after the write "
          "and the directory after that. Which of the four does it still break? Answer with a "
          "set of rule names (set() for none).",
          "All four. fsync decides what survives a power cut, not what a reader sees in between: "
          "the file is still truncated before the new bytes arrive, so a kill -9 (or a power cut) "
          "between the two leaves an empty or half file, whatever is fsynced later. Atomicity "
          "comes from the temp file and the rename; fsync only makes the result durable. The "
          "check grades that store (cap.FSYNC_IN_PLACE) just now.")
def _ex_9_2(answer):
    given = _rule_set(answer)
    if given is None or not given <= set(RULES):
        return False, f"Answer with a set of rule names, e.g. {{'{NAIVE_BROKEN[0]}'}}."
    g = _graded_source(FSYNC_IN_PLACE, "InPlaceFsyncStore", "in_place_fsync_store.py")
    truth = set(g.broken()) & set(NAIVE_BROKEN)
    return assess(given, truth, what="rules it still breaks (graded just now)").reply(
        " fsync makes bytes durable, not atomic.",
        hint=" Where is the moment a reader can see an empty file?")


# --- common wrong statements ---------------------------------------------------------------------

@statement("Q9.1", "A store that survives a kill -9 at every moment survives a power cut too.",
           "False. A kill -9 leaves everything the process handed to the kernel; a power cut keeps "
           "only what was fsynced, and a renamed or new file's name only once its directory was "
           "fsynced. A store can pass every kill -9 state and still lose acknowledged commits at "
           "a power cut: section 4's stores do, and so does the lab's own snapshot store with its "
           "directory fsync removed (lesson 8's planted bug).")
def _q9_1():
    from .l13_closing import without_dir_fsync

    m = without_dir_fsync()
    return Measured(m["losing"] == 0, (
        f"Measured just now: the lab's snapshot store without its directory fsync broke no kill "
        f"rule at {m['kill_checked']} kill -9 states ({m['kill_violations']} violations), and lost "
        f"an acknowledged commit at {m['losing']} of {m['checked']} power-cut states."))


@statement("Q9.2", "A store that keeps every rule of the contract files each report exactly once.",
           "False. The store decides what survives a crash, not what the outside world did before "
           "it: a report filed just before the kill is in the tracker while the checkpoint says "
           "the page is not done, and the resume files it again. Only an idempotency key the "
           "tracker deduplicates (with the intent recorded first) makes it effectively once "
           "(lesson 4).")
def _q9_2():
    from ...config import RunConfig

    config = RunConfig(store="log", pages=GRADE_PAGES, intent=False, idempotency_key=False)
    runs = results.sweep_once(config)
    rules = len(conform(config, pages=GRADE_PAGES).broken())
    dup = [r.crash_point for r in runs if r.duplicate_reports]
    return Measured(not dup, (
        f"Measured just now: the lab's log store breaks {rules} of the {len(RULES)} rules, and "
        f"without the key {len(dup)} of its {len(runs)} crash points file a report twice "
        f"({', '.join(dup)})."))


# --- practice: a store with a flaw the lesson did not grade, under settings it did not use --------

def snapshot_store_source(*, temp_file: bool, fsync_file: bool, fsync_dir: bool) -> str:
    """A whole-state store, written in place or through a temp file and a rename, with or without
    an fsync of the file and of the directory: the family of sections 3 to 5."""
    target = "tmp" if temp_file else "self.path"
    body = ["        data = json.dumps(state).encode()"]
    if temp_file:
        body.append('        tmp = self.path.with_name("state.json.tmp")')
    body.append(f"        fd = self.files.open({target}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)")
    if not temp_file:
        body.append("        mid()")
    body.append(f"        self.files.write(fd, data, str({target}))")
    if fsync_file:
        body.append(f"        self.files.fsync(fd, str({target}))")
    body.append("        self.files.close(fd)")
    if temp_file:
        body += ["        mid()", "        self.files.rename(tmp, self.path)"]
    if fsync_dir:
        body.append("        self.files.fsync_dir(self.path.parent)")
    return "\n".join([
        "import json", "import os", "", "from bughunt.events import initial_state",
        "from bughunt.stores import Recovered, Repairs", "", "",
        "class DrawnStore:", '    name = "drawn"', "",
        "    def __init__(self, run_dir, config, door):",
        '        self.path = run_dir / "state.json"', "        self.files = door.files", "",
        "    def load(self):", "        if not self.path.exists():",
        "            return Recovered(initial_state())",
        "        return Recovered(json.loads(self.path.read_bytes()))", "",
        "    def open_for_append(self):", "        return Repairs()", "",
        "    def commit(self, state, event, *, mid):", *body, "",
        "    def close(self):", "        pass", ""])


def log_store_source(*, fsync: bool, repair: bool) -> str:
    """An event log (sections 6's family): appended through the door (fsynced by its policy) or
    with a bare write() (never fsynced), with or without the newline repair."""
    append = ("        self.door.append(self.fd, line, mid=mid)" if fsync else
              "        mid()\n        self.files.write(self.fd, line, str(self.path))")
    opening = ["        repairs = Repairs()"]
    if repair:
        opening += [
            "        if self.path.exists() and self.path.stat().st_size:",
            '            with open(self.path, "rb") as f:',
            "                f.seek(-1, os.SEEK_END)",
            '                torn_tail = f.read(1) != b"\\n"',
            "            if torn_tail:",
            "                fd = self.door.open_append(self.path)",
            '                self.door.append(fd, b"\\n", kind="repair")',
            "                self.door.close(fd)",
            "                repairs.tails_repaired = 1"]
    opening += ["        self.fd = self.door.open_append(self.path)", "        return repairs"]
    return "\n".join([
        "import json", "import os", "", "from bughunt.events import apply_event, initial_state",
        "from bughunt.stores import Recovered, Repairs", "", "",
        "class DrawnStore:", '    name = "drawn"', "",
        "    def __init__(self, run_dir, config, door):",
        '        self.path = run_dir / "events.jsonl"', "        self.door = door",
        "        self.files = door.files", "        self.fd = None", "",
        "    def load(self):", "        state, replayed, torn = initial_state(), 0, 0",
        '        data = self.path.read_bytes() if self.path.exists() else b""',
        '        for line in data.split(b"\\n"):', "            if not line:",
        "                continue", "            try:", "                event = json.loads(line)",
        "            except ValueError:", "                torn += 1", "                continue",
        "            state = apply_event(state, event)", "            replayed += 1",
        "        return Recovered(state, replayed_events=replayed, torn_lines_skipped=torn)", "",
        "    def open_for_append(self):", *opening, "",
        "    def commit(self, state, event, *, mid):",
        '        line = (json.dumps(event) + "\\n").encode()', append, "",
        "    def close(self):", "        if self.fd is not None:",
        "            self.door.close(self.fd)", "            self.fd = None", ""])


#: The stores the practice draws from: none of them is graded by the lesson (its steps are in
#: place with no fsync, temp + rename, + fsync, + dir fsync, in place + both fsyncs (9.2); the log
#: through the door, with and without the repair).
PRACTICE_STORES = {
    "in place, the file fsynced, no directory fsync":
        ("snapshot", {"temp_file": False, "fsync_file": True, "fsync_dir": False}),
    "in place, no file fsync, the directory fsynced":
        ("snapshot", {"temp_file": False, "fsync_file": False, "fsync_dir": True}),
    "temp file + rename + directory fsync, but the temp file never fsynced":
        ("snapshot", {"temp_file": True, "fsync_file": False, "fsync_dir": True}),
    "a log appended with a bare write(), never fsynced, with the newline repair":
        ("log", {"fsync": False, "repair": True}),
    "a log appended with a bare write(), never fsynced, no repair":
        ("log", {"fsync": False, "repair": False}),
}
#: The run's settings the lesson grades with: key and intent on (every step), both off, and each
#: alone (section 7). The practice adds `pending="abort"`, which the lesson never grades.
LESSON_SETTINGS = ({}, {"idempotency_key": False, "intent": False},
                   {"idempotency_key": True, "intent": False},
                   {"idempotency_key": False, "intent": True})
PRACTICE_SETTINGS = ({}, {"idempotency_key": False, "intent": False},
                     {"idempotency_key": True, "intent": False},
                     {"idempotency_key": False, "intent": True},
                     {"pending": "abort"}, {"idempotency_key": False, "pending": "abort"})


def _settings_words(settings: dict) -> str:
    key = settings.get("idempotency_key", True)
    intent = settings.get("intent", True)
    pending = settings.get("pending", "redo")
    return (f"idempotency key {'on' if key else 'off'}, intent {'on' if intent else 'off'}"
            + (f", a pending intent given up (`pending='abort'`)" if pending == "abort" else ""))


def practice_source(store: str) -> str:
    kind, flags = PRACTICE_STORES[store]
    return (snapshot_store_source if kind == "snapshot" else log_store_source)(**flags)


def practice_grade(store: str, settings: dict) -> Grade:
    return _graded_source(practice_source(store), "DrawnStore", "drawn_store.py", **settings)


def _listed(records) -> str:
    return ", ".join(f"{r.crash_point} ({r.verdict})" for r in records) or "none"


def practice_problem(seed: int) -> Problem:
    """A store with a flaw the lesson did not grade (`PRACTICE_STORES`), under drawn settings of
    the run, and one question answered by grading it now: how many of the contract's rules it
    breaks, at how many crash points of the sweep the resume does not recover correctly, or at
    how many a report is filed twice or lost."""
    rng = drawn(seed, 9)
    store = rng.choice(list(PRACTICE_STORES))
    settings = dict(rng.choice(PRACTICE_SETTINGS))
    kind = rng.choice(["rules", "points", "reports"])
    setting = (f"The drawn store: {store} (its source: `practice_source({store!r})` in "
               f"`{__name__}`), graded with {_settings_words(settings)}, fsync policy "
               f"\"always\", on the grader's {GRADE_PAGES}-page run.")
    what = {"store": store, "settings": settings, "kind": kind}
    if kind == "rules":
        def measure() -> Answer:
            g = practice_grade(store, settings)
            return Answer(len(g.broken()), f"the suite checked {g.states} crash states: "
                          f"{len(g.broken())} of {len(g.rules)} rules broken "
                          f"({', '.join(g.broken()) or 'none'}).")
        return Problem(9, seed, setting, f"How many of the contract's {len(RULES)} rules does it "
                       "break?", NUMBER, measure,
                       "For each rule ask which crash state could break it: a kill -9 keeps "
                       "everything written, a power cut only what was fsynced (and a name only "
                       "once its directory was).", unit="rules", drawn=what)
    if kind == "points":
        def measure() -> Answer:
            g = practice_grade(store, settings)
            bad = _failing(g)
            return Answer(len(bad), f"the sweep killed the worker at {len(g.records)} crash "
                          f"points: {len(bad)} did not recover correctly "
                          f"({_listed(bad)}).")
        return Problem(9, seed, setting, "The grader's sweep kills the worker by SIGKILL at every "
                       "crash point and resumes it. At how many crash points does the resume not "
                       "recover correctly (any verdict but correct)?", NUMBER, measure,
                       "A SIGKILL keeps every byte handed to the kernel: which crash points leave "
                       "a file the store cannot read, and which leave a report filed but not "
                       "remembered?", unit="points", drawn=what)

    def measure() -> Answer:
        g = practice_grade(store, settings)
        wrong = [r for r in g.records if r.duplicate_reports or r.lost_reports]
        return Answer(len(wrong), f"of {len(g.records)} crash points, {len(wrong)} filed a report "
                      f"twice or never ({_listed(wrong)}).")
    return Problem(9, seed, setting, "At how many of the sweep's crash points is a bug report "
                   "filed twice, or never filed?", NUMBER, measure,
                   "The store decides what survives; the key and the intent decide what happens "
                   "to a report filed just before the kill (lesson 4).", unit="points", drawn=what)


#: The transfer question: a store and settings the lesson did not grade (`practice_problem`).
TRANSFER_SEED = 14
TRANSFER = as_exercise("9.3", practice_problem(TRANSFER_SEED), __name__)


# --- what the lesson says its run found (each sentence checked against that run) -------------

CLAIMS = Claims(9)
KILL_RULES = ("crash-leaves-a-real-state", "kill-keeps-acknowledged")
POWER_RULES = ("power-cut-leaves-a-real-state", "fsync-keeps-acknowledged")


def _failing(g: Grade) -> list:
    return sorted((r for r in g.records if not r.correct),
                  key=lambda r: _point_order(r.crash_point))


@CLAIMS.claim("The real-SIGKILL sweep agrees where a kill can see it: at every `mid_commit` point "
              "({points}) the resume finds an empty `state.json` and cannot start; the other "
              "{others} crash points recover correctly. A resume that cannot start files none of "
              "the reports after it: {lost} of the failing points had a report still to file.")
def naive_fails_at_mid_commit():
    g = step("naive")
    bad = _failing(g)
    mids = [r.crash_point for r in g.records if r.label == "mid_commit"]
    return (sorted(r.crash_point for r in bad) == sorted(mids) and all(r.error for r in bad),
            {"points": [f"`{r.crash_point}`" for r in bad], "others": len(g.records) - len(bad),
             "lost": sum(bool(r.lost_reports) for r in bad)},
            f"the points that failed: {', '.join(r.crash_point for r in bad) or 'none'}")


@CLAIMS.claim("Every kill rule holds now, and the sweep finds all {points} crash points correct. "
              "But {n} power-cut rules break ({rules}):")
def rename_breaks_only_power_rules():
    g = step("rename")
    return (tuple(g.broken()) == POWER_RULES and g.sweep_ok,
            {"points": len(g.records), "n": len(g.broken()),
             "rules": [f"`{r}`" for r in g.broken()]})


@CLAIMS.claim("One rule is left, `{rule}`, and its first violation says why: a power cut right "
              "after a commit returned, where nothing unsynced survived, left no `state.json` at "
              "all.")
def fsync_leaves_the_directory():
    g = step("fsync")
    broken = g.broken()
    first = g.first(broken[0]) if broken else None
    return (broken == ["fsync-keeps-acknowledged"] and first is not None
            and "nothing unsynced survived" in (first.state or "") and not first.disk,
            {"rule": broken[0] if broken else "none"},
            f"rules broken: {', '.join(broken) or 'none'}")


@CLAIMS.claim("Every rule holds at every one of the {states} crash states the suite built, and "
              "all {points} crash points of the sweep recover correctly.")
def durable_passes():
    g = step("durable")
    return g.passed, {"states": g.states, "points": len(g.records)}, g.verdict


@CLAIMS.claim("The sweep is all correct again ({points} of {points}), and so is every kill rule; "
              "the one rule broken is `{rule}`, and its first violation is at a power cut that "
              "left half a record with no newline.")
def log_breaks_only_the_newline_rule():
    g = step("log")
    broken = g.broken()
    first = g.first(broken[0]) if broken else None
    torn = first is not None and (first.state or "").startswith("power cut") and any(
        "(0 bytes)" not in v and "\\n'" not in v for v in first.disk.values())
    return (broken == ["resume-appends-cleanly"] and g.sweep_ok and torn,
            {"points": len(g.records), "rule": broken[0] if broken else "none"},
            f"rules broken: {', '.join(broken) or 'none'}; sweep correct: {g.sweep_ok}")


@CLAIMS.claim("With the repair, every rule holds at all {states} crash states and all {points} "
              "crash points recover correctly.")
def repaired_passes():
    g = step("repaired")
    return g.passed, {"states": g.states, "points": len(g.records)}, g.verdict


@CLAIMS.claim("Every rule still holds, and yet page 3's report is filed twice when the worker "
              "dies at {points}: the danger window (危险窗口).")
def no_key_duplicates_in_the_window():
    g = step("repaired", idempotency_key=False, intent=False)
    dup = sorted((r.crash_point for r in g.records if r.duplicate_reports), key=_point_order)
    return (g.conformance_ok and bool(dup) and all(p.startswith("p3.") for p in dup),
            {"points": [f"`{p}`" for p in dup]})


@CLAIMS.claim("Which of the two closes it? With the key on and no intent, {key_only} crash points "
              "file a report twice; with the intent and no key, {intent_only} do ({points}). "
              "The key alone closes the window: this worker, resumed, files the report of the "
              "page it was on again, and the tracker ignores a report whose key it already has.")
def the_key_closes_the_window():
    key_only = step("repaired", idempotency_key=True, intent=False)
    intent_only = step("repaired", idempotency_key=False, intent=True)
    dk = [r.crash_point for r in key_only.records if r.duplicate_reports]
    di = sorted((r.crash_point for r in intent_only.records if r.duplicate_reports),
                key=_point_order)
    return (not dk and bool(di) and key_only.passed,
            {"key_only": len(dk), "intent_only": len(di), "points": [f"`{p}`" for p in di]})


@CLAIMS.claim("From step 2 on, the sweep finds every crash point correct ({steps}), while {broken} "
              "of those five steps still break a rule. A kill -9 sweep, however exhaustive, "
              "cannot see what only a power cut breaks; the power-cut states of the suite can.")
def the_sweep_cannot_see_power_cuts():
    graded = graded_steps()
    later = {label: g for label, g in graded.items() if not label.startswith("1 ")}
    broken = [label for label, g in later.items() if g.broken()]
    return (all(g.sweep_ok for g in later.values()) and bool(broken)
            and all(set(g.broken()) <= set(POWER_RULES) | {"resume-appends-cleanly"}
                    for g in later.values()),
            {"steps": ", ".join(later), "broken": len(broken)})


@CLAIMS.claim("And the cost of a crash (right): every store whose resumes all ran redoes "
              "{avg} model calls per crash on average, at most {top}: each commits every event, "
              "so a crash redoes at most the model call in flight. The naive store's {naive} is "
              "an average over the {ran} of {points} resumes that ran; at the other {failed} the "
              "resume could not start at all, and no average of calls says what that costs.")
def the_cost_of_a_crash():
    graded = graded_steps()
    whole = [g for g in graded.values() if all(r.error is None for r in g.records)]
    avgs = {round(g.summary["avg_redone_model_calls"], 2) for g in whole}
    top = max(g.summary["max_redone_model_calls"] for g in whole)
    naive = graded[STEP_LABELS["naive"]]
    ran = [r for r in naive.records if r.error is None]
    return (len(avgs) == 1 and top <= 1 and len(ran) < len(naive.records),
            {"avg": min(avgs), "top": top,
             "naive": round(sum(r.redone_model_calls for r in ran) / len(ran), 2),
             "ran": len(ran), "points": len(naive.records),
             "failed": len(naive.records) - len(ran)},
            f"the averages of the stores whose resumes all ran: {sorted(avgs)}")

LESSON = Lesson(
    number=9,
    notebook="09_your_own_store",
    title="Your own store: write a checkpoint store, and let the crash sweep grade it",
    short_title="your own store",
    question="Write a checkpoint store; does it survive the sweep?",
    teaches="the capstone: you write a checkpoint store; the conformance suite and a "
            "real-SIGKILL sweep grade each version",
    objectives=(
        "write a checkpoint store (检查点) against a contract of four methods, writing only "
        "through the I/O door the lab gives it;",
        "read a grader's report: which rule broke, at which crash state, in which file, with "
        "what on disk, and which lesson teaches the fix;",
        "take a naive store to a passing one, one fix at a time: temp file and rename, fsync, "
        "directory fsync, a log with the newline repair;",
        "tell the store's part of recovery from the run's: the idempotency key (幂等键) belongs "
        "to the side effect, keeping the intent belongs to the store.",
    ),
    time_note=", most of it writing your own store",
    prerequisites="Lessons 3 to 6 (replay vs snapshot, the danger window, torn writes, kill "
                  "-9 vs power loss); Python classes; `os.open`, `os.fsync` and `os.replace` "
                  "by name.",
    panel=panel,
    in_app=False,          # the store is written in the notebook: the app grades its steps
    app_panel=app_panel,
    exercises=defined_in(__name__),
    claims=CLAIMS,
    practice=practice_problem,
)

