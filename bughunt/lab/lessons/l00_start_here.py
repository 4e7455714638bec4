"""Lesson 0, start here: the environment, one clean run, and the map of crash points."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...config import RunConfig
from ...crashpoints import LABELS, scheme
from ...doctor import run_checks
from ...experiment import (clean_run, crash_point, crash_worker, lesson, lesson_table, run_worker,
                           work_dir)
from ...stores import LOG_FILE, records
from ...world import Site, read_bill, read_reports
from .. import results
from ..judges import Measured, assess, defined_in, exercise, statement
from ..style import COLORS, new_figure
from ..registry import Lesson


def environment(folder: Path | None = None):
    """The doctor's checks as a DataFrame: what, ok, detail, what to do."""
    import pandas as pd

    return pd.DataFrame([c.__dict__ for c in run_checks(folder)]).set_index("name")


@dataclass
class CleanRunTour:
    report: dict
    site: "object"       # DataFrame of pages
    bill: "object"       # DataFrame of model calls
    reports: "object"    # DataFrame of tracker rows
    events: "object"     # DataFrame of the event log
    files: list          # (name, bytes) of the run directory


def inspect_clean_run(config: RunConfig = RunConfig()) -> CleanRunTour:
    """One run without a crash; everything it left behind, read back."""
    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="bughunt-tour-") as tmp:
        run_dir = Path(tmp) / "run"
        proc = run_worker(run_dir, config)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr)
        site = Site.load(config.pages)
        pages = pd.DataFrame([{"page": p.page, "path": p.path, "title": p.title,
                               "bug": p.bug or ""} for p in map(site.page, range(1, config.pages + 1))])
        bill = pd.DataFrame(read_bill(run_dir))[["page", "tokens"]]
        reports = pd.DataFrame(read_reports(run_dir))[["id", "page", "idempotency_key", "title"]]
        log = run_dir / LOG_FILE
        decoded = [records.decode(line) for line in log.read_bytes().splitlines()] \
            if log.exists() else []
        events = pd.DataFrame([{c: e.get(c, "") for c in ("seq", "t", "page", "key", "finding",
                                                          "tokens")} for e in decoded])
        files = sorted((p.name, p.stat().st_size) for p in run_dir.iterdir())
        return CleanRunTour(json.loads(proc.stdout), pages, bill, reports, events, files)


def crash_point_table(config: RunConfig = RunConfig()):
    """Crash points as a page x label grid of indices (blank where a page has no such point)."""
    import pandas as pd

    points = scheme(config.pages, Site.load(config.pages).bug_pages, config.intent)
    grid = pd.DataFrame([{"page": p.page, "label": p.label, "index": p.index} for p in points])
    table = grid.pivot(index="label", columns="page", values="index").reindex(
        [lab for lab in LABELS if lab in set(grid.label)])
    return table.astype("Int64")


def plot_crash_map(config: RunConfig = RunConfig()):
    """Every crash point of a clean run, page by page, numbered; bug pages shaded."""
    table = crash_point_table(config)
    bugs = set(Site.load(config.pages).bug_pages)
    fig, ax = new_figure(10, 3.4)
    for col, page in enumerate(table.columns):
        if page in bugs:
            ax.axvspan(col - 0.5, col + 0.5, color=COLORS["orange"], alpha=0.18, linewidth=0)
        for row, label in enumerate(table.index):
            idx = table.loc[label, page]
            if idx is not None and str(idx) != "<NA>":
                window = page in bugs and label in ("after_submit", "mid_commit")
                color = COLORS["red"] if window else COLORS["blue"]
                ax.scatter([col], [row], s=330, color=color, alpha=0.85)
                ax.text(col, row, str(idx), ha="center", va="center", color="white",
                        fontsize=8, fontweight="bold")
    ax.set_xticks(range(len(table.columns)),
                  [f"p{p}\n(bug)" if p in bugs else f"p{p}" for p in table.columns])
    ax.set_yticks(range(len(table.index)), list(table.index))
    ax.invert_yaxis()
    ax.set_xlim(-0.6, len(table.columns) - 0.4)
    ax.set_ylim(len(table.index) - 0.4, -0.6)
    ax.set_xlabel("page (bug pages shaded)")
    ax.set_ylabel("where in the page")
    n = int(table.count().sum())
    ax.set_title(f"The lesson's {n} crash points: named by page and step (p3.after_submit), "
                 "numbered in the order a clean run reaches them", fontsize=10)
    from matplotlib.lines import Line2D
    ax.legend(handles=[Line2D([], [], marker="o", linestyle="", markersize=10, color=c, label=t)
                       for c, t in ((COLORS["blue"], "crash point"),
                                    (COLORS["red"], "danger window: report filed, page not saved"))],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig


def lesson_overview(**kwargs):
    """The lesson's table, lesson vs this machine, from all five sweeps (a few hundred runs)."""
    result = lesson(**kwargs)
    return result, lesson_table(result)


@exercise("0.1", "If the site had bugs on four pages (3, 7, 10 and 11) and intents were on, how "
          "many crash points would a 12-page run have?",
          "Each page has after_model_call, after_visit, mid_commit and after_commit (4 points); a bug "
          "page adds after_intent and after_submit (6 points). 8 x 4 + 4 x 6 = 56.")
def _ex_0_1(answer):
    truth = len(scheme(12, [3, 7, 10, 11], intent=True))
    return assess(answer, truth, what="crash points, counted by the scheme").reply(
        hint=" Count the points of a plain page and of a bug page, then add up.")


# --- predict, then run; common wrong statements ------------------------------------------------

@results.memoized
def clean_log_events(intent: bool) -> int:
    """Events in the log of one clean run (log store), with or without intents."""
    with work_dir(in_memory=True) as base:
        clean_run(RunConfig(intent=intent), base / "run")
        data = (base / "run" / "events.jsonl").read_bytes()
    return data.count(b"\n")


@exercise("0.2", "Predict, then run: with intents off, how many events does the event log of one "
          "clean 12-page run hold?",
          "12: one page_done per page and nothing else. The intent is the event a bug page writes "
          "before it files its report; with intents off there is none, so the 3 bug pages add "
          "nothing (with intents: 12 + 3 = 15).")
def _ex_0_2(answer):
    truth = clean_log_events(False)
    c = assess(answer, truth, what="events in the log")
    return c.reply(hint=" Which event exists only because intents are "
                   "on?")


@statement("Q0.1", "A crash point's number names the same moment in every configuration.",
           "False. Numbers are positions in a clean run, and a configuration with intents has an "
           "after_intent point on each bug page that one without has not, so every number after "
           "page 3's intent shifts. Names (p7.after_submit) mean the same moment everywhere.")
def _q0_1():
    on = crash_point(RunConfig(intent=True), "p7.after_submit").index
    off = crash_point(RunConfig(intent=False), "p7.after_submit").index
    return Measured(on == off, f"Measured from the crash-point scheme: p7.after_submit is number "
                    f"{on} with intents and {off} without. Speak in names.")


@results.memoized
def worker_word_vs_bill(point: str = "p7.after_model_call") -> dict:
    """Kill a run with no checkpoint at `point`, resume it: the resumed worker's own count of
    model calls, against the provider's bill for both processes."""
    config = RunConfig(store="none", intent=False)
    with tempfile.TemporaryDirectory(prefix="bughunt-bill-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        crash_worker(run_dir, config, point)
        resume = run_worker(run_dir, config)
        if resume.returncode != 0:
            raise RuntimeError(f"resume failed: {resume.stderr.strip()[-300:]}")
        report = json.loads(resume.stdout)
        return {"worker says": report["model_calls"], "bill says": len(read_bill(run_dir)),
                "clean run": config.pages}


@statement("Q0.2", "After a crash and a resume, the resumed worker's own report tells how many "
           "model calls the task paid for.",
           "False. The worker that died took its count with it, and the resumed one counts only "
           "its own calls. The provider's bill, which no worker can rewrite, holds every call of "
           "both processes: that is where the lab reads redone calls.")
def _q0_2():
    m = worker_word_vs_bill()
    return Measured(m["worker says"] == m["bill says"],
                    f"Measured just now (no checkpoint, killed at p7.after_model_call, resumed): "
                    f"the resumed worker reports {m['worker says']} model calls; the bill holds "
                    f"{m['bill says']}, of which {m['bill says'] - m['clean run']} were paid twice.")


LESSON = Lesson(
    number=0,
    notebook="00_start_here",
    kind="start",
    title="Start here",
    short_title="start here",
    question="Is this machine ready, and what does the lab measure?",
    teaches="the environment check, one clean run (site, bill, tracker, event log), the 51/54 "
            "named crash points, and the source text's whole table reproduced live",
    objectives=(
        "check that this machine runs the lab (fsync, rename, flock, SIGKILL);",
        "name the parts of the experiment: the worker, the model's bill, the tracker, the "
        "event log;",
        "name a crash point (`p3.after_submit`) and say why names, not numbers, are what "
        "lessons use;",
        "say what the three witnesses of a recovery are, and why the worker's word is not one "
        "of them.",
    ),
    minutes=20,
    prerequisites="Python and a terminal; no prior knowledge of crash recovery.",
    exercises=defined_in(__name__),
)

