"""Lesson 10: the same kill -9 sweep on LangGraph and DBOS, beside the lab's own stores.

Every number here comes from real processes killed by a real SIGKILL (`bughunt.frameworks`): the
LangGraph agent with its SQLite checkpointer in each durability mode, the DBOS agent on its SQLite
system database, and the lab's own worker (`bughunt.experiment`) for comparison. Sweeps are cached
per kernel, so the panel and the exercises reuse what the notebook's cells already ran.

The notebook's sweeps are small on purpose: every crash point in the agent's own code, and every
framework write once committed (a kill inside a commit is shown separately: SQLite rolls it back).
The full sweeps, with every point inside every write, are a CLI command:
`python -m bughunt.frameworks --framework all --mode all --resume all --key both`.
"""

from __future__ import annotations

import dataclasses
import html
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import ipywidgets as W
from matplotlib.patches import Patch

from ...config import RunConfig
from ...experiment import CrashRun as LabRun
from ...experiment import (clean_run, crash_and_resume, crash_points, frame, run_crash_jobs,
                           summarize)
from ...frameworks.contract import adapter_class
from ...frameworks.sweep import (SweepError, SweepResult, SweepSettings, default_workers,
                                select_points, sweep_many, sweep_timing, varying_points)
from .. import results
from ..panel import Panel, Result
from ..claims import Claims, Invariants
from ..judges import Measured, assess, defined_in, exercise, statement
from ..practice import NUMBER, YES_NO, Answer, Problem, as_exercise, drawn
from ..views import Table
from ..style import COLORS, SERIES, VERDICT_STYLE, new_figure
from ..registry import Lesson

#: Every point in the agent's code, and every framework write once it is committed.
POINTS = "user,framework.*.committed*"
#: What the notebook's comparison sweeps, to stay within a minute: every point in the agent's code,
#: and the first four committed writes of each kind (each node's or step's results, LangGraph's
#: step checkpoints): pages 1 to 4, and every report. `python -m bughunt.frameworks` sweeps all.
COMPARE_POINTS = {"langgraph": "user,framework.*.committed#[1-4]",
                  "dbos": "user,framework.*.committed#[1-4]"}
PAGES = 12

#: The frameworks as a user first meets them: each mode, the documented resume, no key.
FRAMEWORKS = {
    "LangGraph sync": SweepSettings("langgraph", "sync", "documented", False),
    "LangGraph async (default)": SweepSettings("langgraph", "async", "documented", False),
    "LangGraph exit": SweepSettings("langgraph", "exit", "documented", False),
    "DBOS (workflow ID)": SweepSettings("dbos", "sqlite", "workflow_id", False),
}
#: The lab's own stores, as lessons 2 to 4 left them.
LAB = {
    "lab log + intent + key": RunConfig(store="log", intent=True, idempotency_key=True),
    "lab snapshot, no key": RunConfig(store="snapshot", intent=False, idempotency_key=False),
}
#: The lab's crash-point labels, split like the frameworks' points: the agent's own code, and the
#: store's writes once durable (`mid_commit`, inside the write, is left out as it is for them).
LAB_KIND = {"after_model_call": "user", "after_visit": "user", "after_submit": "user",
            "after_intent": "framework", "after_commit": "framework"}

#: Resume styles, the documented one first; no key, like the comparison (whose documented sweeps
#: are reused here).
RESUMES = {
    "LangGraph: invoke(None) (documented)": FRAMEWORKS["LangGraph sync"],
    "LangGraph: empty .next = done": SweepSettings("langgraph", "sync", "next_empty_is_done", False),
    "LangGraph: invoke(input) again": SweepSettings("langgraph", "sync", "reinvoke_input", False),
    "DBOS: start by workflow ID": FRAMEWORKS["DBOS (workflow ID)"],
    "DBOS: recovery alone": SweepSettings("dbos", "sqlite", "recovery", False),
    "DBOS: new workflow ID": SweepSettings("dbos", "sqlite", "new_id", False),
}
#: Where the resume styles are compared, on pages 1 to 4 (bug page 3 included): every model call
#: and the report, and (LangGraph) each node's saved writes, where `.next` goes empty.
RESUME_POINTS = {"langgraph": "ask_model.after#[1-4],submit.after#1,"
                              "framework.put_writes.*.committed#[1-4]",
                 "dbos": "ask_model.after#[1-4],submit.after#1"}

#: The (design, kind) rows whose sweep gives the same outcome every time. Not LangGraph's async
#: mode, and not LangGraph's framework-write points in sync mode either: the main thread waits for
#: each step's checkpoint (`put`), but a node's own writes (`put_writes`) are saved by a background
#: thread that may still be committing while the next node runs.
DETERMINISTIC = [(d, k) for d in LAB for k in ("user", "framework")] + [
    ("LangGraph sync", "user"), ("LangGraph exit", "user"), ("LangGraph exit", "framework"),
    ("DBOS (workflow ID)", "user"), ("DBOS (workflow ID)", "framework")]


# --- cached sweeps -------------------------------------------------------------------------------

def _framework_key(settings: SweepSettings, points, repeat: int) -> tuple:
    """Where the lab's one cache keeps a sweep (`results.keep`, `results.recall`)."""
    return ("lesson 10: framework sweep", settings.resolved(), points, repeat)


def _plan(settings: SweepSettings, points, repeat: int):
    """(what the cache already has, patterns still to sweep) for these settings and points.

    The comparison's sweep with the same settings answers every point it crashed at, so only the
    points it did not crash at are swept again."""
    found = results.recall(_framework_key(settings, points, repeat))
    if found is not None:
        return found, None
    wide = results.recall(_framework_key(settings, COMPARE_POINTS.get(settings.framework, POINTS),
                                         repeat))
    if wide is None:
        return None, points
    want = [p.point for p in select_points(wide.clean.points, points, strict=False)]
    if not want:
        return None, points
    have = {r.point for r in wide.records}
    missing = [p for p in want if p not in have]
    known = SweepResult(wide.settings, wide.clean,
                        [r for r in wide.records if r.point in set(want)], wide.seconds)
    return known, (",".join(missing) if missing else None)


def _merge(known: SweepResult | None, fresh: SweepResult) -> SweepResult:
    if known is None:
        return fresh
    records = sorted(known.records + fresh.records, key=lambda r: (r.repeat, r.order))
    return SweepResult(known.settings, known.clean, records, known.seconds + fresh.seconds)


def framework_sweeps(named: dict[str, SweepSettings], points=POINTS, *, repeat: int = 1,
               progress=None) -> dict[str, SweepResult]:
    """Sweep each named setting (in one pool); what this kernel already ran is not run again.

    `points` is one pattern string for all, or a dict framework -> patterns."""
    def pts(s):
        return points[s.framework] if isinstance(points, dict) else points

    plans = {n: _plan(s, pts(s), repeat) for n, s in named.items()}
    by_points: dict = {}
    for n, s in named.items():
        if plans[n][1] is not None:
            by_points.setdefault(plans[n][1], {})[n] = s
    for patterns, group in by_points.items():
        swept = sweep_many(list(group.values()), points=patterns, repeat=repeat,
                           progress=progress)
        for (n, s), res in zip(group.items(), swept):
            results.keep(_framework_key(s, pts(s), repeat), _merge(plans[n][0], res))
    return {n: results.recall(_framework_key(s, pts(s), repeat)) or plans[n][0]
            for n, s in named.items()}


def _lab_key(config: RunConfig) -> tuple:
    return ("lesson 10: the lab's store, timed", config)


@dataclass(frozen=True, kw_only=True)
class TimedRun(LabRun):
    """A crash run of the lab's own worker, with the wall time of its two processes."""

    pair_s: float


def _timed_crash_and_resume(config, point, run_dir) -> TimedRun:
    t0 = time.perf_counter()
    record = crash_and_resume(config, point, run_dir)
    return TimedRun(**dataclasses.asdict(record), pair_s=time.perf_counter() - t0)


def lab_timed_sweeps(configs: dict[str, RunConfig] = LAB, progress=None) -> dict[str, tuple]:
    """The lab's own stores (lessons 2 to 4), timed, at every crash point but those inside a commit
    (as for the frameworks), and a clean run's report (its final state, its write latencies)."""
    todo = {n: c for n, c in configs.items() if results.recall(_lab_key(c)) is None}
    if todo:
        jobs = [(n, c, p) for n, c in todo.items() for p in crash_points(c) if p.label in LAB_KIND]
        with tempfile.TemporaryDirectory(prefix="bughunt-lab10-") as tmp:
            records = run_crash_jobs(jobs, Path(tmp), progress=progress,
                                     measure=_timed_crash_and_resume)
        for n, c in todo.items():
            results.keep(_lab_key(c), ([r for r in records if r.sweep == n], clean_run(c)))
    return {n: results.recall(_lab_key(c)) for n, c in configs.items()}


def clear_caches() -> None:
    """Forget every result (this lesson's and every other: the lab has one cache)."""
    results.reset()


# --- the default experiment: each framework and mode beside the lab's stores ---------------------

@dataclass
class FrameworkComparison:
    frameworks: dict[str, SweepResult] = field(default_factory=dict)
    lab: dict[str, tuple] = field(default_factory=dict)


def compare_frameworks(progress=None) -> FrameworkComparison:
    """Each framework in each mode (documented resume, key off), and the lab's two stores."""
    return FrameworkComparison(framework_sweeps(FRAMEWORKS, points=COMPARE_POINTS, progress=progress),
                      lab_timed_sweeps(progress=progress))


def _lab_state(state: dict) -> dict:
    return {"findings": state["findings"], "tokens": state["tokens"],
            "pages_done": state["next_page"] - 1}


def _lab_rows(name: str, records: list, clean: dict) -> list[dict]:
    writes = [ns for v in clean["checkpoint_writes"]["latencies_ns"].values() for ns in v]
    truth = _lab_state(clean["state"])
    rows = []
    for kind in ("user", "framework"):
        recs = [r for r in records if LAB_KIND.get(r.label) == kind]
        s = summarize(recs)
        rows.append({
            "design": name, "kind": kind, "crash points": s["crash_points"],
            "avg redone calls": round(s["avg_redone_model_calls"], 2),
            "max redone calls": s["max_redone_model_calls"],
            "duplicate points": s["duplicate_points"], "lost points": s["lost_points"],
            "wrong memory": sum(r.final_state is None or _lab_state(r.final_state) != truth
                                for r in recs),
            "wrong disk": s["rebuild_failures"],
            "pair ms": round(statistics.median(r.pair_s for r in recs) * 1000, 1),
            "write µs": round(statistics.median(writes) / 1000, 1) if writes else None})
    return rows


def _framework_rows(name: str, res: SweepResult) -> list[dict]:
    rows = []
    for kind in ("user", "framework"):
        recs = [r for r in res.records if r.kind == kind]
        if not recs:
            continue
        s = {**summarize(recs), **sweep_timing(recs, res.clean)}
        rows.append({"design": name, "kind": kind, "crash points": s["crash_points"],
                     "avg redone calls": round(s["avg_redone_model_calls"], 2),
                     "max redone calls": s["max_redone_model_calls"],
                     "duplicate points": s["duplicate_points"], "lost points": s["lost_points"],
                     "wrong memory": s["wrong_memory"], "wrong disk": s["wrong_disk"],
                     "pair ms": s["pair_ms"], "write µs": s["write_us"]})
    return rows


TIMING = ["pair ms", "write µs"]


def comparison_table(cmp: FrameworkComparison, *, timing: bool = True, only=None):
    """One row per design and kind of crash point: what a crash there costs, and what it breaks.

    `timing=False` leaves out the two timing columns; `only` keeps the (design, kind) rows named."""
    import pandas as pd

    rows = [row for n, (recs, clean) in cmp.lab.items() for row in _lab_rows(n, recs, clean)]
    rows += [row for n, res in cmp.frameworks.items() for row in _framework_rows(n, res)]
    df = pd.DataFrame(rows)
    if only is not None:
        df = df[[(d, k) in set(only) for d, k in zip(df["design"], df["kind"])]]
    if not timing:
        df = df.drop(columns=TIMING)
    return Table(df.set_index(["design", "kind"]), "frameworks beside the lab's stores",
                 COMPARISON_INVARIANTS)


#: Each count of a row is a subset of its crash points (a point can be both a duplicate and a
#: wrong state, so they are not a partition); the lab's worker has no durable write to time
#: here (its stores never fsync: "write µs" of its rows is a page's checkpoint write).
COMPARISON_INVARIANTS = Invariants(
    total="crash points",
    within=("duplicate points", "lost points", "wrong memory", "wrong disk"),
    counts=("max redone calls",), may_be_empty=("write µs",))


def point_counts(cmp: FrameworkComparison):
    """How many crash points of each name the traced clean run of each framework reached."""
    import pandas as pd

    rows = {}
    for name, res in cmp.frameworks.items():
        counts: dict[str, int] = {}
        for p in res.clean.points:
            counts[p.name] = counts.get(p.name, 0) + 1
        rows[name] = counts
    df = pd.DataFrame(rows).fillna(0).astype(int)
    df.index.name = "crash point name"
    user = ["ask_model.after", "visit.after", "submit.after"]
    df = df.loc[sorted(df.index, key=lambda n: (n.startswith("framework."),
                                                user.index(n) if n in user else 0, n))]
    return Table(df, "crash points by name", Invariants(counts=tuple(df.columns)))


def _points_named(cmp: FrameworkComparison, design: str, prefix: str) -> int:
    return sum(p.name.startswith(prefix) for p in cmp.frameworks[design].clean.points)


def plot_costs(cmp: FrameworkComparison):
    """Redone model calls per crash (average, with the maximum), and the points that break
    something, per design; user-code points and framework-write points side by side."""
    df = comparison_table(cmp).df.reset_index()
    designs = list(dict.fromkeys(df["design"]))
    fig, (ax, bx) = new_figure(11, 0.55 * len(designs) + 1.6, ncols=2, sharey=True)
    kinds = {"user": (COLORS["blue"], "", "agent's own code"),
             "framework": (COLORS["orange"], "//", "framework's writes, committed (first four)")}
    for j, (kind, (color, hatch, label)) in enumerate(kinds.items()):
        d = df[df["kind"] == kind].set_index("design").reindex(designs)
        y = [i + (j - 0.5) * 0.38 for i in range(len(designs))]
        ax.barh(y, d["avg redone calls"].fillna(0), height=0.36, color=color, hatch=hatch,
                edgecolor="white", label=label)
        for yi, (avg, top) in zip(y, zip(d["avg redone calls"], d["max redone calls"])):
            if avg == avg:        # not NaN
                ax.annotate(f"{avg:.2f} (max {int(top)})", (avg, yi), xytext=(3, 0),
                            textcoords="offset points", va="center", fontsize=7)
    ax.set_yticks(range(len(designs)), designs)
    ax.invert_yaxis()
    ax.set_xlabel("redone model calls per crash\n(calls; average, max in brackets)")
    ax.set_title("What a crash costs", fontsize=10)
    ax.set_xlim(0, max(1.0, float(df["avg redone calls"].max())) * 1.55)
    ax.legend(fontsize=7, loc="lower right")
    bad = {"duplicate points": (COLORS["red"], "xx"), "lost points": (COLORS["purple"], ".."),
           "wrong memory": (COLORS["yellow"], "\\\\")}
    totals = df.groupby("design", sort=False)[list(bad)].sum().reindex(designs)
    for j, (col, (color, hatch)) in enumerate(bad.items()):
        y = [i + (j - 1) * 0.27 for i in range(len(designs))]
        bx.barh(y, totals[col], height=0.25, color=color, hatch=hatch, edgecolor="white",
                label=col)
        for yi, v in zip(y, totals[col]):
            bx.annotate(str(int(v)), (v, yi), xytext=(2, 0), textcoords="offset points",
                        va="center", fontsize=7)
    bx.set_xlabel("crash points with that outcome\n(points; writes: the first four of each kind)")
    bx.set_title("What a crash breaks", fontsize=10)
    bx.set_xlim(0, max(4, int(totals.values.max())) * 1.2)
    bx.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Killed at every point of a {PAGES}-page run, resumed, witnessed "
                 "(frameworks: documented resume, no idempotency key)", fontsize=10)
    return fig


# --- where each crash lands ----------------------------------------------------------------------

def _positions(pages_and_kinds: list[tuple[int, str]]) -> list[float]:
    """x for each point: its page, spread evenly inside the page (so designs with more points per
    page line up with those with fewer)."""
    counts: dict[int, int] = {}
    for page, _ in pages_and_kinds:
        counts[page] = counts.get(page, 0) + 1
    seen: dict[int, int] = {}
    out = []
    for page, _ in pages_and_kinds:
        seen[page] = seen.get(page, 0) + 1
        out.append(page - 1 + (seen[page] - 0.5) / counts[page])
    return out


STRIP_STYLE = {**VERDICT_STYLE, "wrong state": (COLORS["yellow"], "\\\\"),
               "not reached": (COLORS["grey"], "")}
STRIP_ORDER = ["correct", "duplicate", "lost", "wrong state", "rebuild fails",
               "tracker disagrees", "not reached", "error"]


def strip_rows(cmp: FrameworkComparison) -> list[tuple[str, list[tuple[int, str, str]]]]:
    """(row label, [(page, kind, verdict)] in run order) for every design and kind."""
    rows = []
    for name, (records, _) in cmp.lab.items():
        for kind in ("user", "framework"):
            pts = [(r.page, kind, r.verdict) for r in records if LAB_KIND.get(r.label) == kind]
            rows.append((f"{name} · {kind}", pts))
    for name, res in cmp.frameworks.items():
        recs = sorted(res.records, key=lambda r: r.order)
        for kind in ("user", "framework"):
            pts = [(r.page if r.page else 1, kind, r.verdict) for r in recs if r.kind == kind]
            if pts:
                rows.append((f"{name} · {kind}", pts))
    return rows


def plot_framework_verdicts(cmp: FrameworkComparison):
    """One row per design and kind: every crash point at its page, coloured by what happened."""
    rows = strip_rows(cmp)
    fig, ax = new_figure(11, 0.32 * len(rows) + 1.5)
    seen = set()
    for y, (_, pts) in enumerate(rows):
        xs = _positions([(p, k) for p, k, _ in pts])
        per_page = max(sum(1 for p, _, _ in pts if p == page) for page, _, _ in pts)
        width = 0.9 / per_page
        for x, (_, _, v) in zip(xs, pts):
            color, hatch = STRIP_STYLE[v]
            ax.bar(x, 0.8, bottom=y - 0.4, width=width, color=color, hatch=hatch,
                   edgecolor="white", linewidth=0.3)
            seen.add(v)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xticks([p - 0.5 for p in range(1, PAGES + 1)], [f"p{p}" for p in range(1, PAGES + 1)])
    ax.set_xlim(0, PAGES)
    for bug in (3, 7, 10):
        ax.axvspan(bug - 1, bug, color=COLORS["grey"], alpha=0.12, linewidth=0)
    ax.set_xlabel("page the agent was working on when the kill came (shaded: pages with a bug)")
    ax.set_title("Every crash point, by outcome after the resume (frameworks: no key)",
                 fontsize=10)
    handles = [Patch(facecolor=STRIP_STYLE[v][0], hatch=STRIP_STYLE[v][1], label=v)
               for v in STRIP_ORDER if v in seen]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


# --- the danger window, key off and on -----------------------------------------------------------

#: Page 3's danger window: the report is filed, then the framework writes the node's results
#: (LangGraph) or the step's output (DBOS): rows written but not committed, then committed.
WINDOW = {kind: ["submit.after#1", f"framework.{write}.submit.uncommitted#1",
                 f"framework.{write}.submit.committed#1"]
          for kind, write in (("langgraph", "put_writes"), ("dbos", "step_output"))}


def danger_window(cmp: FrameworkComparison, progress=None):
    """Page 3's report is filed; is it filed again after a kill here? Key off, then on.

    The points after the report and at its commit that the comparison already swept are reused;
    only the others are swept here."""
    import pandas as pd

    rows = []
    for name in ("LangGraph sync", "DBOS (workflow ID)"):
        res = cmp.frameworks[name]
        pattern = ",".join(WINDOW[res.settings.framework])
        for key in (False, True):
            s = SweepSettings(res.settings.framework, res.settings.mode, res.settings.resume, key)
            (got,) = framework_sweeps({name: s}, points=pattern, progress=progress).values()
            for r in sorted(got.records, key=lambda r: r.order):
                rows.append({"design": name, "crash point": r.point,
                             "key": "key " + ("on" if key else "off"), "verdict": r.verdict,
                             "redone calls": r.redone_model_calls})
    df = pd.DataFrame(rows)
    table = df.pivot_table(index=["design", "crash point"], columns="key", values="verdict",
                           aggfunc="first", sort=False)
    table["redone calls"] = df[df["key"] == "key off"].set_index(
        ["design", "crash point"])["redone calls"]
    return table


# --- resume styles -------------------------------------------------------------------------------

def resume_styles(progress=None) -> dict[str, SweepResult]:
    """The documented resume and the mistakes, at `RESUME_POINTS`, no key."""
    return framework_sweeps(RESUMES, points=RESUME_POINTS, progress=progress)


def resume_table(results: dict[str, SweepResult]):
    import pandas as pd

    rows = []
    for name, res in results.items():
        s = summarize(res.records)
        rows.append({"resume": name, "crash points": s["crash_points"],
                     "avg redone calls": round(s["avg_redone_model_calls"], 2),
                     "max redone calls": s["max_redone_model_calls"],
                     "duplicate points": s["duplicate_points"], "lost points": s["lost_points"],
                     "wrong memory": s["wrong_memory"], "wrong disk": s["wrong_disk"],
                     "correct": s["correct_runs"]})
    return Table(pd.DataFrame(rows).set_index("resume"), "resume styles", Invariants(
        total="crash points", within=("duplicate points", "lost points", "wrong memory",
                                      "wrong disk", "correct"), counts=("max redone calls",)))


def plot_resume_styles(results: dict[str, SweepResult]):
    """How many crash points each resume style got right, and what went wrong at the others."""
    names = list(results)
    fig, ax = new_figure(10, 0.5 * len(names) + 1.4)
    order = ["correct", "duplicate", "lost", "wrong state", "rebuild fails", "tracker disagrees",
             "not reached", "error"]
    left = [0] * len(names)
    for v in order:
        counts = [sum(r.verdict == v for r in results[n].records) for n in names]
        if not any(counts):
            continue
        color, hatch = STRIP_STYLE[v]
        bars = ax.barh(range(len(names)), counts, left=left, color=color, hatch=hatch,
                       edgecolor="white", label=v)
        for b, c in zip(bars, counts):
            if c:
                ax.annotate(str(c), (b.get_x() + b.get_width() / 2, b.get_y() + b.get_height() / 2),
                            ha="center", va="center", fontsize=7,
                            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white",
                                  "edgecolor": "none", "alpha": 0.85})
        left = [a + c for a, c in zip(left, counts)]
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("crash points on pages 1-4 (points): after each model call, the report, "
                  "and (LangGraph) each node's saved writes")
    ax.set_title("The same crash, resumed three ways per framework (no idempotency key)",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


# --- async checkpoints, repeats and latency ------------------------------------------------------

#: After the model call of every other page: enough to see the writer fall behind page by page.
ASYNC_POINTS = "ask_model.after#[2468],ask_model.after#1[02]"


def async_repeats(latencies=(0.0, 5.0), repeat: int = 2, progress=None) -> dict[float, SweepResult]:
    """LangGraph's default mode at each latency of the world's calls, every point `repeat` times."""
    named = {lat: SweepSettings("langgraph", "async", "documented", False, lat)
             for lat in latencies}
    got = framework_sweeps({str(k): s for k, s in named.items()}, points=ASYNC_POINTS, repeat=repeat,
                     progress=progress)
    return {lat: got[str(lat)] for lat in latencies}


def async_table(results: dict[float, SweepResult]):
    import pandas as pd

    rows = []
    for lat, res in results.items():
        s = summarize(res.records)
        v = varying_points(res.records)
        rows.append({"latency per call (ms)": lat, "crash runs": s["crash_points"],
                     "avg redone calls": round(s["avg_redone_model_calls"], 2),
                     "max redone calls": s["max_redone_model_calls"],
                     "points whose outcome varied": len(v),
                     "of which the verdict": sum(x["verdict_varies"] for x in v)})
    return Table(pd.DataFrame(rows).set_index("latency per call (ms)"), "async repeats",
                 Invariants(total="crash runs", within=("points whose outcome varied",),
                            counts=("of which the verdict", "max redone calls"),
                            extra=(_verdict_within_varied,)))


def _verdict_within_varied(df) -> list[str]:
    return [f"row {idx!r}: the verdict varied at {int(r['of which the verdict'])} points, more "
            f"than the {int(r['points whose outcome varied'])} whose outcome varied"
            for idx, r in df.iterrows()
            if r["of which the verdict"] > r["points whose outcome varied"]]


def plot_async(results: dict[float, SweepResult], sync: SweepResult | None = None):
    """Redone calls at each point, once per repeat, for each latency of the world's calls; with
    `sync` (a sweep in sync mode), what sync mode paid at the same points, as a dashed line."""
    fig, axes = new_figure(11, 3.4, ncols=len(results), sharey=True, squeeze=False)
    reference = None
    if sync is not None:
        at = {r.point: r.redone_model_calls for r in sync.records}
        points = {r.point for res in results.values() for r in res.records}
        if points <= set(at):
            reference = statistics.mean(at[p] for p in points)
    markers = ["o", "x", "s", "^"]
    for ax, (lat, res) in zip(axes[0], results.items()):
        df = frame(res.records).sort_values("order")
        names = list(dict.fromkeys(df["point"]))
        for r, d in df.groupby("repeat"):
            xs = [names.index(p) for p in d["point"]]
            ax.scatter(xs, d["redone_model_calls"], marker=markers[r % 4], s=28,
                       color=SERIES[r % len(SERIES)], label=f"sweep {r + 1}", alpha=0.85)
        ax.set_xticks(range(len(names)), [f"p{n.rsplit('#', 1)[1]}" for n in names], fontsize=7)
        ax.set_title(f"{lat:g} ms per call", fontsize=9)
        ax.set_xlabel("crash point: right after the model call of page N (every other page)")
        if reference is not None:
            ax.axhline(reference, color=COLORS["grey"], linestyle="--", linewidth=1.2,
                       label=f"sync mode, same points: {reference:g}")
        ax.legend(fontsize=7, loc="upper left")
    axes[0][0].set_ylabel("redone model calls (calls)")
    fig.suptitle("LangGraph async (the default): the same point, swept twice", fontsize=10)
    return fig


# --- timing --------------------------------------------------------------------------------------

def plot_timing(cmp: FrameworkComparison):
    """Per crash point, the wall time of the killed process plus its resume; per design, the
    median time of one durable write in a clean run."""
    df = comparison_table(cmp).df.reset_index()
    designs = list(dict.fromkeys(df["design"]))
    pairs = {n: [r.pair_s * 1000 for r in recs] for n, (recs, _) in cmp.lab.items()}
    pairs.update({n: [(r.crash_s + r.resume_s) * 1000 for r in res.records
                      if r.resume_s is not None] for n, res in cmp.frameworks.items()})
    writes = df.groupby("design", sort=False)["write µs"].first().reindex(designs)
    fig, (ax, bx) = new_figure(11, 0.5 * len(designs) + 1.6, ncols=2, sharey=True)
    ax.boxplot([pairs[d] for d in designs], vert=False, positions=range(len(designs)),
               widths=0.5, patch_artist=True,
               boxprops={"facecolor": COLORS["sky"]}, medianprops={"color": COLORS["black"]})
    for i, d in enumerate(designs):
        ax.annotate(f"{statistics.median(pairs[d]):.0f} ms", (statistics.median(pairs[d]), i),
                    xytext=(0, 9), textcoords="offset points", ha="center", fontsize=7)
    ax.set_yticks(range(len(designs)), designs)
    ax.invert_yaxis()
    ax.set_xlabel("killed process + resume, wall time per crash point (ms)")
    ax.set_title("One crash+resume pair", fontsize=10)
    bx.barh(range(len(designs)), writes.fillna(1), color=COLORS["green"], hatch="..",
            edgecolor="white")
    for i, w in enumerate(writes):
        bx.annotate("no durable write" if w != w else f"{w:.0f} µs", (1 if w != w else w, i),
                    xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
    bx.set_xscale("log")          # a log axis has no 0: the lab's "no durable write" is a label
    bx.set_xlim(1, max(10.0, float(writes.max())) * 8 if writes.notna().any() else 1000)
    bx.set_xlabel("one durable write, median in a clean run (µs, log scale)")
    bx.set_title("One checkpoint write", fontsize=10)
    fig.suptitle(f"What the sweep costs in time on this machine ({default_workers()} crash runs "
                 "in parallel)", fontsize=10)
    return fig


# --- the panel -----------------------------------------------------------------------------------

POINT_CHOICES = [("user points + first four committed writes of each kind",
                  COMPARE_POINTS["langgraph"]),
                 ("user points + every committed write", POINTS),
                 ("user points only", "user"), ("framework writes only", "framework"),
                 ("every point, inside writes too", "all")]


def _frame_for(res: SweepResult):
    df = frame(res.records)
    return df.sort_values(["repeat", "order"])


def plot_sweep(res: SweepResult):
    """The panel's figure: redone calls per crash point (bars coloured by outcome)."""
    df = _frame_for(res)
    first = df[df["repeat"] == 0]
    fig, ax = new_figure(10, 3.6)
    xs = range(len(first))
    for x, (_, r) in zip(xs, first.iterrows()):
        color, hatch = STRIP_STYLE[r["verdict"]]
        h = r["redone_model_calls"] if r["redone_model_calls"] == r["redone_model_calls"] else 0
        if h:
            ax.bar(x, h, color=color, hatch=hatch, edgecolor="white", linewidth=0.4)
        else:                     # a zero is a mark on the axis, never a bar of some height
            ax.plot([x], [0], marker="o", markersize=4, color=color, clip_on=False)
    ticks = [i for i, p in enumerate(first["point"]) if p.startswith("ask_model.after")]
    ax.set_xticks(ticks, [f"p{first['page'].iloc[i]}" for i in ticks], fontsize=7)
    ax.set_xlabel("crash point, in the clean run's order (tick: the model call of page N)")
    ax.set_ylabel("redone model calls (calls)")
    ax.set_title(res.settings.label(), fontsize=10)
    handles = [Patch(facecolor=STRIP_STYLE[v][0], hatch=STRIP_STYLE[v][1], label=v)
               for v in STRIP_ORDER if v in set(first["verdict"])]
    ax.legend(handles=handles, fontsize=8, loc="upper left")
    ax.set_ylim(0, max(1.0, float(first["redone_model_calls"].max())) * 1.3)
    return fig


def sweep_summary(res: SweepResult):
    import pandas as pd

    rows = []
    for kind in ("user", "framework"):
        recs = [r for r in res.records if r.kind == kind]
        if recs:
            rows.append({"kind": kind, **summarize(recs), **sweep_timing(recs, res.clean)})
    df = pd.DataFrame(rows).set_index("kind")
    # What a sweep did not measure is left out rather than shown as a column of "-": a
    # framework's runs replay no event log of the lab's, and a framework with no timed write
    # (the fake one) has no write time.
    optional = ("avg_replayed_events", "max_replayed_events", "avg_redone_model_calls",
                "write_us", "pair_ms")
    df = df.drop(columns=[c for c in optional if c in df.columns and df[c].isna().all()])
    df = df.rename(columns={"write_us": "write µs", "pair_ms": "pair ms"})
    df["varying points"] = len(varying_points(res.records))
    return Table(df, "the panel's sweep", Invariants(
        total="crash_points", within=("duplicate_points", "lost_points", "correct_runs")))


class FrameworkPanel(Panel):
    """Choose framework, mode, resume style, key, latency, points and repeats; Run sweeps it."""

    CHOICES = ["langgraph", "dbos", "lab", "fake"]
    run_label = "Run sweep"
    running = "Running: every crash point is a real process killed and resumed..."

    def __init__(self, default: SweepSettings = FRAMEWORKS["LangGraph async (default)"]):
        self.default = default
        self.inspect = W.Dropdown(description="crash point", layout=W.Layout(width="420px"))
        self.point_info = W.HTML()
        self.sweep: SweepResult | None = None
        super().__init__()
        self.progress.description = "sweep"
        for name in ("framework", "mode", "resume", "key", "latency", "points", "repeat"):
            setattr(self, name, self.controls[name])
        self.inspect.observe(lambda _: self._show_point(), names="value")

    def make_controls(self) -> dict:
        d = self.default
        controls = {
            "framework": W.ToggleButtons(options=self.CHOICES, value=d.framework,
                                         description="framework"),
            "mode": W.ToggleButtons(description="mode"),
            "resume": W.Dropdown(description="resume"),
            "key": W.ToggleButtons(options=[("on", True), ("off", False)],
                                   value=d.idempotency_key, description="key"),
            "latency": W.SelectionSlider(options=[0, 1, 2, 5, 10, 20], value=0,
                                         description="latency ms", continuous_update=False),
            "points": W.Dropdown(options=POINT_CHOICES, value=POINT_CHOICES[0][1],
                                 description="points", layout=W.Layout(width="520px")),
            "repeat": W.IntSlider(value=1, min=1, max=3, description="repeat",
                                  continuous_update=False),
        }
        self._sync_choices(controls, d.mode, d.resume)
        return controls

    @staticmethod
    def _sync_choices(controls: dict, mode: str | None = None, resume: str | None = None) -> None:
        """The modes and resume styles of the chosen framework's adapter (its first of each, or
        the ones named)."""
        cls = adapter_class(controls["framework"].value)
        controls["mode"].options = list(cls.modes)
        controls["mode"].value = mode or cls.modes[0]
        controls["resume"].options = list(cls.resume_styles)
        controls["resume"].value = resume or cls.resume_styles[0]

    def changed(self, name: str) -> None:
        if name == "framework":
            with self.quiet():
                self._sync_choices(self.controls)
        super().changed(name)

    def restore(self, name: str, value) -> None:
        super().restore(name, value)
        if name == "framework":      # its modes and resume styles, before theirs are restored
            self._sync_choices(self.controls)

    def execute(self, settings: dict) -> Result:
        chosen = SweepSettings(settings["framework"], settings["mode"], settings["resume"],
                               settings["key"], float(settings["latency"]))
        (res,) = framework_sweeps({"panel": chosen}, points=settings["points"],
                            repeat=settings["repeat"], progress=self.tick).values()
        self.sweep = res
        first = sorted((r for r in res.records if r.repeat == 0), key=lambda r: r.order)
        with self.quiet():
            self.inspect.options = [(f"{r.point} (page {r.page}): {r.verdict}", r.point)
                                    for r in first]
        s = summarize(res.records)
        return Result(f"{s['crash_points']} crash runs: {s['correct_runs']} correct, "
                      f"{s['duplicate_points']} with a duplicate, {s['lost_points']} with a lost "
                      f"report, {s['wrong_memory']} with a wrong state, {s['not_reached']} not "
                      f"reached, {s['errors']} errors",
                      figures=[plot_sweep(res)], tables=[sweep_summary(res)], data=res)

    def footer(self) -> list:
        return [self.inspect, self.point_info]

    def _show_point(self) -> None:
        if self.sweep is None or self.inspect.value is None:
            self.point_info.value = ""
            return
        runs = [r for r in self.sweep.records if r.point == self.inspect.value]
        rows = "".join(
            f"<tr><td>sweep {r.repeat + 1}</td><td><b>{html.escape(r.verdict)}</b></td>"
            f"<td>redone {r.redone_model_calls}</td><td>tracker {r.tracker_pages}</td>"
            f"<td>memory {html.escape(str(r.final_state))}</td>"
            f"<td>disk {html.escape(str(r.disk_state))}</td>"
            f"<td>{html.escape(r.error or '')}</td></tr>" for r in runs)
        self.point_info.value = f"<table>{rows}</table>"

    def reset(self) -> None:
        super().reset()
        self.sweep = None
        self.inspect.options = []
        self.point_info.value = ""


def panel() -> FrameworkPanel:
    return FrameworkPanel()


# --- exercises -----------------------------------------------------------------------------------

#: The points of exercise 10.1: LangGraph in sync mode, documented resume, no key (section 3's).
def _sync_user_records():
    (res,) = framework_sweeps({"sync": FRAMEWORKS["LangGraph sync"]}, points=COMPARE_POINTS).values()
    return [r for r in res.records if r.kind == "user"]


@exercise("10.1", "LangGraph in 'sync' mode, resumed the documented way, no idempotency key: at how "
          "many crash points in the agent's own code (right after a model call, a visit or a "
          "report) is a report filed twice? Predict a number.",
          "3: the three points right after a report is filed (submit.after#1, #2, #3). The "
          "submit node's results are not saved yet, so the resume runs the node again. After a "
          "model call or a visit the node that runs again files nothing. With the key on, 0.")
def _ex_10_1(answer):
    records = _sync_user_records()
    dup = sorted((r for r in records if r.duplicate_reports), key=lambda r: r.order)
    c = assess(answer, len(dup), what="points with a duplicate report")
    return c.reply(f" Measured at {len(records)} points of the agent's code; the duplicates: "
                   f"{', '.join(r.point for r in dup) or 'none'}.",
                   hint=" Where is the report filed, and when are the node's results saved?")


#: Exercise 10.2's kill: right after the visit node of page 1 has its writes saved.
NEXT_EMPTY_POINT = "framework.put_writes.visit.committed#1"


@exercise("10.2", "A LangGraph process is killed right after the visit node of page 1 has its writes "
          "saved, before the step's checkpoint. The next process calls get_state() and, seeing "
          "an empty .next, believes the run finished. How many bug reports are missing from the "
          "tracker? Predict a number.",
          "3: all of them (pages 3, 7 and 10). .next lists only tasks without saved writes, so it "
          "is empty between a node's saved writes and the next checkpoint; the resume returns at "
          "once. The documented invoke(None, config) would have carried on.")
def _ex_10_2(answer):
    probe = framework_sweeps({"probe": RESUMES["LangGraph: empty .next = done"]},
                       points=RESUME_POINTS["langgraph"])["probe"]
    (rec,) = [r for r in probe.records if r.point == NEXT_EMPTY_POINT]
    c = assess(answer, rec.lost_reports, what="reports missing")
    return c.reply(f" Measured at {NEXT_EMPTY_POINT}: the tracker holds pages "
                   f"{rec.tracker_pages}.", hint=" What does .next contain when a node's writes "
                   "are saved but no new checkpoint is?")


# --- common wrong statements, each answered by the sweeps of this kernel --------------------------

@statement("Q10.1", "A durable-execution framework such as LangGraph or DBOS makes each bug report "
           "happen exactly once, even after a kill -9.",
           "False. Each framework saves its own state: a node's or step's results once it has "
           "returned. A report filed by a node that was killed before its results were saved is "
           "filed again on resume: at least once. Only an idempotency key the tracker honours "
           "makes it effectively once.")
def _q10_1():
    got = framework_sweeps({n: FRAMEWORKS[n] for n in ("LangGraph sync", "DBOS (workflow ID)")},
                     points=COMPARE_POINTS)
    said = []
    for name, res in got.items():
        user = [r for r in res.records if r.kind == "user"]
        said.append(f"{name} filed a report twice at {sum(bool(r.duplicate_reports) for r in user)} "
                    f"of {len(user)} points of the agent's code")
    dups = sum(bool(r.duplicate_reports) for res in got.values() for r in res.records)
    return Measured(dups == 0, "Measured just now (section 3's sweeps, documented resume, no "
                    "key): " + "; ".join(said) + ".")


@statement("Q10.2", "Once DBOS has written a step's output to its database, the step counts as done, "
           "even if the process dies before that write is committed.",
           "False. Rows written but not committed are rolled back when the process dies (SQLite's "
           "atomic commit): the recovered workflow finds no output for the step and runs it "
           "again. Without a key, the report is filed twice.")
def _q10_2():
    point = "framework.step_output.submit.uncommitted#1"
    (res,) = framework_sweeps({"DBOS (workflow ID)": FRAMEWORKS["DBOS (workflow ID)"]},
                        points=",".join(WINDOW["dbos"])).values()
    (rec,) = [r for r in res.records if r.point == point]
    return Measured(not rec.duplicate_reports,
                    f"Measured just now: a kill at {point} (page 3's report filed, its step output "
                    f"written, not committed), no key: {rec.duplicate_reports} duplicate report(s), "
                    f"{rec.redone_model_calls} redone model call(s), verdict {rec.verdict}.")


@statement("Q10.3", "Resuming a LangGraph thread by invoking the graph again with the original input "
           "is harmless: the checkpointer skips the steps already done.",
           "False. invoke(input, config) on a thread with a checkpoint starts a new run from "
           "START: page goes back to 1 and the reducers add the new run's tokens and findings to "
           "the saved ones. Every page is paid again and the memory is wrong, which no key can "
           "fix. The documented resume is invoke(None, config).")
def _q10_3():
    got = framework_sweeps({n: RESUMES[n] for n in ("LangGraph: invoke(input) again",
                                              "LangGraph: invoke(None) (documented)")},
                     points=RESUME_POINTS)
    again = summarize(got["LangGraph: invoke(input) again"].records)
    doc = summarize(got["LangGraph: invoke(None) (documented)"].records)
    return Measured(again["wrong_memory"] == 0 and again["max_redone_model_calls"] <= 1,
                    f"Measured just now (section 5's sweeps): re-invoked with the input, the "
                    f"resumed memory was wrong at {again['wrong_memory']} of "
                    f"{again['crash_points']} crash points and up to "
                    f"{again['max_redone_model_calls']} model calls were paid again; resumed the "
                    f"documented way, wrong at {doc['wrong_memory']} of {doc['crash_points']}, at "
                    f"most {doc['max_redone_model_calls']} call paid again.")


def danger_table(window) -> Table:
    """The danger-window table as the notebook shows it (its verdicts in words; the calls a
    counted)."""
    return Table(window, "the danger window", Invariants(counts=("redone calls",)))


# --- async with the key: what the background writer still costs -----------------------------

def async_with_key(repeat: int = 2, progress=None) -> SweepResult:
    """LangGraph's default mode with the key on, instant calls, at `ASYNC_POINTS`, `repeat` times."""
    (res,) = framework_sweeps({"async + key": SweepSettings("langgraph", "async", "documented",
                                                            True)},
                              points=ASYNC_POINTS, repeat=repeat, progress=progress).values()
    return res


# --- your own adapter -----------------------------------------------------------------------------

_ADAPTERS: dict = {}


def _adapter_dir() -> Path:
    """Where a learner's adapter is copied under a name of its own (one per version of the
    file, so an edited adapter is imported afresh, by this process and by the sweep's fork
    servers); removed when the process ends."""
    import atexit
    import os
    import shutil
    import sys

    from ... import lifeline

    if "dir" not in _ADAPTERS:
        folder = Path(tempfile.mkdtemp(prefix="bughunt-adapters-"))
        lifeline.watch_dir(folder)          # removed however this process ends (SIGKILL too)
        atexit.register(lambda: (shutil.rmtree(folder, ignore_errors=True),
                                 lifeline.release_dir(folder)))
        sys.path.insert(0, str(folder))
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])
        _ADAPTERS["dir"] = folder
    return _ADAPTERS["dir"]


def adapter_spec(store: str) -> str:
    """`my_adapter.py:MyAdapter` as a sweep's `framework`: the file's text, copied as a module
    named after its digest ("module:Class"). Raises AdapterError naming a missing file."""
    import hashlib

    from ...frameworks.contract import AdapterError

    file, _, cls = store.rpartition(":")
    path = Path(file)
    if not (cls and file.endswith(".py")):
        raise AdapterError(f"{store!r}: name the adapter as FILE.py:ClassName")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise AdapterError(f"{file}: cannot read it ({e.strerror or e})") from None
    module = f"{path.stem}_{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    copy = _adapter_dir() / f"{module}.py"
    if not copy.exists():
        copy.write_text(text)
    return f"{module}:{cls}"


def sweep_adapter(store: str, *, key: bool = False, points: str = "user", progress=None):
    """Sweep the adapter in `store` (`FILE.py:ClassName`, e.g. a `%%writefile` cell's): every
    crash point of `points` killed by SIGKILL, resumed by its own code, its store read back."""
    settings = SweepSettings(adapter_spec(store), None, None, key)
    (res,) = framework_sweeps({store: settings}, points=points, progress=progress).values()
    return res


def adapter_table(res: SweepResult, *, wrong_only: bool = False) -> Table:
    """One row per crash point of an adapter's sweep (`wrong_only`: those whose verdict is not
    correct): what the resume cost, and what it broke."""
    import pandas as pd

    rows = [{"crash point": r.point, "page": r.page, "verdict": r.verdict,
             "redone calls": r.redone_model_calls, "duplicate reports": r.duplicate_reports,
             "lost reports": r.lost_reports}
            for r in sorted(res.records, key=lambda r: r.order)
            if not (wrong_only and r.verdict == "correct")]
    df = pd.DataFrame(rows, columns=["crash point", "page", "verdict", "redone calls",
                                     "duplicate reports", "lost reports"])
    return Table(df.set_index("crash point"), "your adapter's sweep",
                 Invariants(counts=("redone calls", "duplicate reports", "lost reports")))


#: The notebook's adapter (exercise 10.4), as its `%%writefile` cell saves it.
ADAPTER_FILE = "my_adapter.py:EveryOtherPage"


@exercise("10.4", "The adapter in my_adapter.py checkpoints after every other page (and at the end), "
          "and files each report before that. Swept with the key off, at how many of its crash "
          "points in the agent's code is a report filed twice? Predict a number.",
          "7 with the adapter as written: a report is filed twice when the kill comes after it "
          "and before the next checkpoint. Page 3's report is saved with page 4's checkpoint: the "
          "kill right after it, and after page 4's model call and visit (3 points). Page 7's "
          "likewise, up to page 8's checkpoint (3). Page 10's report is saved by page 10's own "
          "checkpoint, so only the point right after it (1). If you edited the adapter, the check "
          "sweeps your version.")
def _ex_10_4(answer):
    from ...frameworks.contract import AdapterError

    try:
        res = sweep_adapter(ADAPTER_FILE)
    except (AdapterError, SweepError) as e:
        return False, f"{e}. Run the %%writefile my_adapter.py cell first."
    dup = sorted((r for r in res.records if r.duplicate_reports), key=lambda r: r.order)
    c = assess(answer, len(dup), what="crash points with a duplicate report")
    return c.reply(f" Swept just now at {len(res.records)} points of the agent's code; the "
                   f"duplicates: {', '.join(r.point for r in dup) or 'none'}.",
                   hint=" For each report, which crash points come after it and before the "
                        "checkpoint that remembers it?")


# --- what the lesson says its run found (each sentence checked against that run) -------------

CLAIMS = Claims(10)
NODES = ("ask_model", "visit", "submit")


def _records(name: str, kind: str = "user"):
    return sorted((r for r in compare_frameworks().frameworks[name].records if r.kind == kind),
                  key=lambda r: r.order)


@CLAIMS.claim("LangGraph's `async` and `sync` write the same things: a checkpoint per step "
              "({put}: the input, the `__start__` step, then one per node: {ask} + {visit} + "
              "{submit}) and the results of each step as soon as it finishes ({writes}: the "
              "`__start__` step's, then one per node). In `exit` mode the graph writes {exit_put} "
              "checkpoint, when it exits, and no node's results.")
def langgraph_writes_per_step():
    cmp = compare_frameworks()
    got = {}
    for design in ("LangGraph sync", "LangGraph async (default)"):
        nodes = {n: _points_named(cmp, design, f"{n}.after") for n in NODES}
        got[design] = (_points_named(cmp, design, "framework.put.committed"),
                       _points_named(cmp, design, "framework.put_writes.") // 2, nodes)
    put, writes, nodes = got["LangGraph sync"]
    exit_put = _points_named(cmp, "LangGraph exit", "framework.put.committed")
    exit_writes = _points_named(cmp, "LangGraph exit", "framework.put_writes.")
    return (got["LangGraph sync"] == got["LangGraph async (default)"]
            and put == 2 + sum(nodes.values()) and writes == 1 + sum(nodes.values())
            and exit_put == 1 and exit_writes == 0,
            {"put": put, "writes": writes, "ask": nodes["ask_model"], "visit": nodes["visit"],
             "submit": nodes["submit"], "exit_put": exit_put})


def _redone_by_node(records) -> dict[str, set]:
    out: dict[str, set] = {}
    for r in records:
        out.setdefault(r.name, set()).add(r.redone_model_calls)
    return out


def _one_node_redone(design: str):
    """A claim's check for a design that saves each node's or step's results: one call redone
    after a model call, none after a visit or a report, and without a key a duplicate right after
    each report, and nowhere else."""
    recs = _records(design)
    by = _redone_by_node(recs)
    dup = [r.point for r in recs if r.duplicate_reports]
    after_report = [r.point for r in recs if r.name == "submit.after"]
    ask, other = by.get("ask_model.after", set()), by.get("visit.after", set()) | by.get(
        "submit.after", set())
    return (ask == {1} and other == {0} and dup == after_report,
            {"ask": min(ask, default=None), "other": min(other, default=None),
             "n": len(after_report), "dups": len(dup), "points": len(recs)},
            f"redone calls by point: {by}; duplicates at {', '.join(dup) or 'none'}")


@CLAIMS.claim("**LangGraph `sync`**: a kill after the model call re-runs `ask_model` ({ask} redone "
              "call), a kill after a visit or a report re-runs that node without a model call "
              "({other}). The {n} points right after a report re-run `submit`: without a key, "
              "{dups} duplicates.")
def sync_redoes_one_node():
    return _one_node_redone("LangGraph sync")


@CLAIMS.claim("**LangGraph `exit`** saves nothing until the graph exits: every kill restarts from "
              "page 1, so a kill on page *p* redoes *p* calls ({avg} on average over the agent's "
              "{points} points), the lab's \"no checkpoint\" of lesson 2.")
def exit_restarts_from_page_one():
    recs = _records("LangGraph exit")
    wrong = [r.point for r in recs if r.redone_model_calls != r.page]
    return (not wrong, {"avg": round(statistics.mean(r.redone_model_calls for r in recs), 2),
                        "points": len(recs)},
            f"at {', '.join(wrong)} the resume redid another number of calls")


@CLAIMS.claim("**DBOS** behaves like `sync` at the agent's {points} points: {ask} redone call "
              "after a kill inside `ask_model`, {other} after a recorded step, and without a key a "
              "duplicate at each of the {dups} points right after a report.")
def dbos_behaves_like_sync():
    return _one_node_redone("DBOS (workflow ID)")


@CLAIMS.claim("**The lab's stores** checkpoint once per page, so every point inside a page redoes "
              "its model call ({avg} on average at the agent's points of each store); the log "
              "store's intent and key make it correct at all {log_points} points, the snapshot "
              "store without a key duplicates at {snap_dups} (lesson 4's danger window).")
def lab_stores_redo_one_call():
    lab = compare_frameworks().lab
    (log, _), (snap, _) = lab["lab log + intent + key"], lab["lab snapshot, no key"]
    user = [r for r in log + snap if LAB_KIND.get(r.label) == "user"]
    avgs = {round(statistics.mean(r.redone_model_calls for r in recs
                                  if LAB_KIND.get(r.label) == "user"), 2) for recs in (log, snap)}
    dups = sorted({r.crash_point for r in snap if r.duplicate_reports},
                  key=lambda p: int(p.split(".")[0][1:]))
    return (avgs == {1.0} and all(r.correct for r in log) and bool(dups)
            and all(r.label == "after_submit" for r in snap if r.duplicate_reports),
            {"avg": min(avgs) if avgs else None, "log_points": len(log),
             "snap_dups": [f"`{d}`" for d in dups]},
            f"averages {sorted(avgs)}, {len(user)} user points")


@CLAIMS.claim("Right after the report, without the key, both frameworks file it again "
              "({after}); with the key, every one of these {n} crashes is correct.")
def the_window_and_the_key():
    window = danger_window(compare_frameworks())
    after = window.xs("submit.after#1", level="crash point")
    return (bool((after["key off"] == "duplicate").all()) and bool((window["key on"] ==
                                                                   "correct").all()),
            {"after": ", ".join(f"{d}: {v}" for d, v in after["key off"].items()),
             "n": len(window)})


@CLAIMS.claim("- **Empty `.next` = done** lost a report at {lost} of {points} crash points.\n"
              "- **`invoke(input)` again** left a wrong memory at {wrong} of {points}, and paid "
              "up to {redone} calls again.\n"
              "- **The documented `invoke(None, config)`** lost nothing and left no wrong state "
              "({doc_points} points).\n"
              "- **DBOS by workflow ID and by recovery alone** gave the same verdict at every one "
              "of their {dbos_points} points; **a new workflow ID** redid {new_avg} calls per "
              "crash on average.")
def the_resume_styles():
    got = resume_styles()

    def s(name):
        return summarize(got[name].records)
    doc, empty = s("LangGraph: invoke(None) (documented)"), s("LangGraph: empty .next = done")
    again, new = s("LangGraph: invoke(input) again"), s("DBOS: new workflow ID")
    same = ([r.verdict for r in got["DBOS: start by workflow ID"].records]
            == [r.verdict for r in got["DBOS: recovery alone"].records])
    return (doc["lost_points"] == 0 and doc["wrong_memory"] == 0 and empty["lost_points"] > 0
            and again["wrong_memory"] > 0 and same and new["avg_redone_model_calls"] > 1,
            {"lost": empty["lost_points"], "points": empty["crash_points"],
             "wrong": again["wrong_memory"], "redone": again["max_redone_model_calls"],
             "doc_points": doc["crash_points"],
             "dbos_points": len(got["DBOS: start by workflow ID"].records),
             "new_avg": round(new["avg_redone_model_calls"], 2)})


@CLAIMS.claim("With instant calls, a kill right after a model call redid up to {top} calls (`sync` "
              "mode, at the same points: at most {sync_top}), and from one sweep to the next the "
              "redone calls changed at {varied} of the {points} points, the verdict at {verdicts}: "
              "a single sweep of a framework with a background writer is a sample, not a proof. "
              "With 5 ms per call the average fell to {avg5} ({avg0} with instant calls).")
def async_is_a_sample():
    repeats = async_repeats()
    fast, slow = repeats[0.0], repeats[5.0]
    at = {r.point: r.redone_model_calls for r in _records("LangGraph sync")}
    sync_top = max(at[r.point] for r in fast.records)
    v = varying_points(fast.records)
    s0, s5 = summarize(fast.records), summarize(slow.records)
    return (s0["max_redone_model_calls"] > sync_top
            and s5["avg_redone_model_calls"] < s0["avg_redone_model_calls"],
            {"top": s0["max_redone_model_calls"], "sync_top": sync_top, "varied": len(v),
             "points": len({r.point for r in fast.records}),
             "verdicts": sum(x["verdict_varies"] for x in v),
             "avg5": round(s5["avg_redone_model_calls"], 2),
             "avg0": round(s0["avg_redone_model_calls"], 2)})


@CLAIMS.claim("What `async` risks depends on the key. Without it, section 3's sweep found a "
              "duplicate at {user} of the agent's points and {writes} of the framework's writes "
              "(`sync`: {sync}). With it, the same points as above, swept twice with instant "
              "calls: {dups} duplicates and {wrong} wrong states, while the redone calls still "
              "reached {top}. With the key, `async` risks money, not correctness.")
def async_needs_the_key():
    user = _records("LangGraph async (default)")
    writes = _records("LangGraph async (default)", "framework")
    sync = _records("LangGraph sync") + _records("LangGraph sync", "framework")
    keyed = summarize(async_with_key().records)
    return (keyed["duplicate_points"] == 0 and keyed["wrong_memory"] == 0
            and keyed["lost_points"] == 0,
            {"user": sum(bool(r.duplicate_reports) for r in user),
             "writes": sum(bool(r.duplicate_reports) for r in writes),
             "sync": sum(bool(r.duplicate_reports) for r in sync),
             "dups": keyed["duplicate_points"], "wrong": keyed["wrong_memory"],
             "top": keyed["max_redone_model_calls"]})


# --- practice: a framework, a key, a run length and a crash point the lesson did not run ----------

#: The designs a practice problem draws: those whose outcome at a point of the agent's code is the
#: same in every sweep (`DETERMINISTIC`), with the documented resume.
PRACTICE_DESIGNS = {"LangGraph, durability=\"sync\"": ("langgraph", "sync"),
                    "LangGraph, durability=\"exit\"": ("langgraph", "exit"),
                    "DBOS, started by workflow ID": ("dbos", "sqlite")}
#: Every run of the lesson is 12 pages long: a practice run is 6 to 11.
PRACTICE_PAGES = tuple(range(6, PAGES))


def practice_settings(seed: int) -> tuple[str, SweepSettings, str, str]:
    """(design, settings, crash point, question kind) drawn for `seed`."""
    from ...world import Site

    rng = drawn(seed, 10)
    design = rng.choice(list(PRACTICE_DESIGNS))
    framework, mode = PRACTICE_DESIGNS[design]
    pages = rng.choice(PRACTICE_PAGES)
    key = rng.choice([True, False])
    bugs = Site.load(pages).bug_pages
    name = rng.choice(["ask_model.after", "visit.after", "submit.after"])
    occurrence = rng.randint(1, len(bugs) if name == "submit.after" else pages)
    kind = rng.choice(["redone", "duplicate"])
    resume = "workflow_id" if framework == "dbos" else "documented"
    return (design, SweepSettings(framework, mode, resume, key, 0.0, pages),
            f"{name}#{occurrence}", kind)


def practice_problem(seed: int) -> Problem:
    """A framework design, the key on or off, a run of another length than the lesson's 12 pages
    and one crash point in the agent's code; asks how many model calls the documented resume pays
    again there, or whether a report is filed twice. Answered by killing the agent there now."""
    from ...world import Site

    design, settings, point, kind = practice_settings(seed)
    bugs = Site.load(settings.pages).bug_pages
    where = {"ask_model.after": "right after the model call", "visit.after": "right after the "
             "visit", "submit.after": "right after the report"}[point.split("#")[0]]
    occurrence = int(point.split("#")[1])
    page = bugs[occurrence - 1] if point.startswith("submit") else occurrence
    setting = (f"{design}, resumed the documented way, the idempotency key "
               f"{'on' if settings.idempotency_key else 'off'}, on a site of {settings.pages} "
               f"pages (bugs on pages {', '.join(map(str, bugs))}); killed {where} of page "
               f"{page} (`{point}`).")
    what = {"design": design, "settings": dataclasses.asdict(settings), "point": point,
            "kind": kind}

    def record():
        (res,) = framework_sweeps({"practice": settings}, points=point).values()
        (rec,) = res.records
        return rec
    if kind == "redone":
        def measure() -> Answer:
            r = record()
            return Answer(r.redone_model_calls, f"killed at {point} and resumed: "
                          f"{r.redone_model_calls} model calls paid again (verdict {r.verdict}).")
        return Problem(10, seed, setting, "How many model calls does the resume pay again?",
                       NUMBER, measure, "What has the framework saved when the kill comes, and "
                       "where does the documented resume start?", unit="calls", drawn=what)

    def measure() -> Answer:
        r = record()
        return Answer(bool(r.duplicate_reports), f"killed at {point} and resumed: "
                      f"{r.duplicate_reports} report(s) filed twice (verdict {r.verdict}).")
    return Problem(10, seed, setting, "Is a bug report filed twice?", YES_NO, measure,
                   "Is a report filed before the kill and not yet remembered by the framework, "
                   "and does the tracker know it by a key?", drawn=what)


#: The transfer question: a design, key, run length and point the lesson did not run.
TRANSFER_SEED = 12
TRANSFER = as_exercise("10.3", practice_problem(TRANSFER_SEED), __name__)


LESSON = Lesson(
    number=10,
    notebook="10_frameworks",
    title="Frameworks under the same kill -9 sweep: LangGraph, DBOS, and yours",
    short_title="frameworks",
    question="What does a kill cost on LangGraph, on DBOS, on yours?",
    teaches="the same sweep on LangGraph (SQLite checkpointer) and DBOS (SQLite), and an "
            "adapter to sweep your own stack",
    objectives=(
        "say what a kill at every crash point of the same agent costs on LangGraph (each "
        "durability mode) and on DBOS, measured beside the lab's log and snapshot stores;",
        "say where each framework's promise ends: it checkpoints its own state, not your side "
        "effects, so the danger window (危险窗口) between a report and its checkpoint is still "
        "yours;",
        "resume each framework the documented way, and recognise two resumes that look right "
        "and are not;",
        "sweep your own stack with an adapter.",
    ),
    runs="the cells run real processes for about a minute",
    prerequisites="Lessons 2 to 4 (granularity, redone calls, the danger window and the "
                  "idempotency key (幂等键)). No LangGraph or DBOS experience is needed: both "
                  "agents are shown below. Terms, in English and Chinese: the "
                  "[glossary](glossary.md).",
    panel=panel,
    exercises=defined_in(__name__),
    claims=CLAIMS,
    practice=practice_problem,
)

