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
from ..claims import Claims, Invariants
from ..judges import Measured, assess, defined_in, exercise, statement
from ..views import summary_table
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


@results.memoized
def inspect_clean_run(config: RunConfig = RunConfig()) -> CleanRunTour:
    """One run without a crash; everything it left behind, read back (once per kernel: the
    lesson's claims read the same run the notebook showed)."""
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


@results.memoized
def lesson_overview(**kwargs):
    """The lesson's table, lesson vs this machine, from all five sweeps (a few hundred runs)."""
    result = lesson(**kwargs)
    return result, lesson_table(result)


def event_kinds(events) -> dict[str, int]:
    """How many events of each type a run's log holds."""
    return {str(k): int(v) for k, v in events["t"].value_counts().items()}


#: What a clean run left behind adds up: every event of the log is a page's `page_done` or an
#: intent, and the tracker holds one report per bug page.
CLEAN_RUN_INVARIANTS = Invariants(total="events in the log",
                                  parts=("page_done events", "intent events"),
                                  within=("intent events",),
                                  counts=("pages", "bug pages", "model calls on the bill",
                                          "reports in the tracker"))


def clean_run_table(config: RunConfig = RunConfig()):
    """One row: what the clean run of `config` left behind, counted from each record, checked
    to add up (every event is a `page_done` or an `intent`)."""
    run = inspect_clean_run(config)
    kinds = event_kinds(run.events)
    row = {"run": f"clean run, {config.pages} pages, intents {'on' if config.intent else 'off'}",
           "pages": config.pages, "bug pages": len(Site.load(config.pages).bug_pages),
           "model calls on the bill": len(run.bill),
           "reports in the tracker": len(run.reports),
           "events in the log": len(run.events),
           "page_done events": kinds.get("page_done", 0), "intent events": kinds.get("intent", 0)}
    return summary_table([row], "what a clean run left", CLEAN_RUN_INVARIANTS, index="run")


@exercise("0.1", "If the site had bugs on four pages (3, 7, 10 and 11) and intents were on, how "
          "many crash points would a 12-page run have?",
          "Each page has after_model_call, after_visit, mid_commit and after_commit (4 points); a bug "
          "page adds after_intent and after_submit (6 points). 8 x 4 + 4 x 6 = 56.")
def _ex_0_1(answer):
    truth = len(scheme(12, [3, 7, 10, 11], intent=True))
    return assess(answer, truth, what="crash points, counted by the scheme").reply(
        hint=" Count the points of a plain page and of a bug page, then add up.")


# --- predict, then run; common wrong statements ------------------------------------------------

#: Exercise 0.2's site: longer than the lesson's, intents off (the page shows 12 pages, intents on).
LONG_SITE = RunConfig(pages=20, intent=False)


@results.memoized
def clean_log_events(config: RunConfig) -> int:
    """Events in the log of one clean run of `config` (log store)."""
    with work_dir(in_memory=True) as base:
        clean_run(config, base / "run")
        data = (base / "run" / LOG_FILE).read_bytes()
    return data.count(b"\n")


def _where(pages) -> str:
    pages = list(pages)
    if len(pages) == 1:
        return str(pages[0])
    return ", ".join(map(str, pages[:-1])) + f" and {pages[-1]}"


@exercise("0.2", "Predict, then run: a site of 20 pages with bugs on pages "
          f"{_where(Site.load(20).bug_pages)}, and the worker run with intents off. How many "
          "events does the event log of one clean run hold?",
          "20: one page_done per page and nothing else. The intent is the event a bug page writes "
          "before it files its report; with intents off there is none, so the 5 bug pages add "
          "nothing (with intents on it would be 20 + 5 = 25).")
def _ex_0_2(answer):
    truth = clean_log_events(LONG_SITE)
    c = assess(answer, truth, what="events in the log")
    return c.reply(hint=" One event per page; which event exists only because intents are on?")


@statement("Q0.1", "On a 20-page site (bugs on pages 3, 7, 10, 15 and 19), crash point "
           "p10.mid_commit has a different number than on the lesson's 12 pages.",
           "False. A number is a position in a clean run, so it depends only on what comes "
           "before the point: pages 1 to 10 are the same on both sites (the same bug pages, the "
           "same points), so p10.mid_commit has the same number on both. What changes numbers "
           "is a change before the point, such as intents on or off.")
def _q0_1():
    short = crash_point(RunConfig(), "p10.mid_commit").index
    long_ = crash_point(RunConfig(pages=20), "p10.mid_commit").index
    return Measured(short != long_, f"Measured from the crash-point scheme: p10.mid_commit is "
                    f"number {short} on 12 pages and {long_} on 20.")


@results.memoized
def worker_word_vs_bill(point: str = "p5.after_visit") -> dict:
    """Kill the lesson's run (event log, intents on) at `point`, resume it: the resumed worker's
    own count of model calls, against the provider's bill for both processes. (Not lesson 1's
    kill at page 7: lesson 1 asks for its count as a prediction.)"""
    config = RunConfig()
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
                    f"Measured just now (event log, killed at p5.after_visit, resumed): "
                    f"the resumed worker reports {m['worker says']} model calls; the bill holds "
                    f"{m['bill says']} (paid twice: {m['bill says'] - m['clean run']}).")


# --- what the lesson says its run found (each sentence checked against that run) -------------

CLAIMS = Claims(0)
LESSON_RUN = RunConfig()


@CLAIMS.claim("A clean run pays {calls} model calls, one per page, and files {reports} reports, "
              "one per bug page (pages {bugs}).")
def clean_run_pays_one_call_per_page():
    run = inspect_clean_run(LESSON_RUN)
    bugs = list(Site.load(LESSON_RUN.pages).bug_pages)
    filed = sorted(int(p) for p in run.reports.page)
    return (len(run.bill) == LESSON_RUN.pages and filed == bugs,
            {"calls": len(run.bill), "reports": len(filed), "bugs": bugs},
            f"the bill holds {len(run.bill)} calls for {LESSON_RUN.pages} pages and the tracker "
            f"reports for pages {filed}")


@CLAIMS.claim("Its event log holds {events} events: a `page_done` for each of the {pages} pages, "
              "and an `intent` just before each of the {intents} reports.")
def log_holds_page_done_and_intents():
    run = inspect_clean_run(LESSON_RUN)
    kinds = event_kinds(run.events)
    bugs = list(Site.load(LESSON_RUN.pages).bug_pages)
    order = [(e["t"], int(e["page"])) for _, e in run.events.iterrows()]
    before = all(order.index(("intent", p)) < order.index(("page_done", p))
                 for p in bugs if ("intent", p) in order and ("page_done", p) in order)
    holds = (kinds == {"page_done": LESSON_RUN.pages, "intent": len(bugs)} and before)
    return (holds, {"events": len(run.events), "pages": kinds.get("page_done", 0),
                    "intents": kinds.get("intent", 0)},
            f"the log holds {kinds}" + ("" if before else ", an intent after its page_done"))


@CLAIMS.claim("With intents that is {on} points; without, {off}: each of the {bugs} bug pages "
              "loses its `after_intent`.")
def intents_add_one_point_per_bug_page():
    on = len(scheme(12, Site.load(12).bug_pages, True))
    off = len(scheme(12, Site.load(12).bug_pages, False))
    bugs = len(Site.load(12).bug_pages)
    return on == off + bugs, {"on": on, "off": off, "bugs": bugs}


@CLAIMS.claim("`p7.after_submit` is crash point number {on} with intents and {off} without: the "
              "number moved, the name did not.")
def numbers_shift_names_do_not():
    on = crash_point(RunConfig(intent=True), "p7.after_submit")
    off = crash_point(RunConfig(intent=False), "p7.after_submit")
    return (on.index != off.index and on.name == off.name,
            {"on": on.index, "off": off.index})


@CLAIMS.claim("All {n} figures of the source text's table came out the same on this machine.")
def the_lesson_table_matches():
    _, table = lesson_overview()
    wrong = table[~table["match"]]
    return (wrong.empty, {"n": len(table)},
            "these differ: " + "; ".join(f"{r['figure']} ({r['configuration']}): lesson "
                                         f"{r['lesson']}, here {r['lab']}"
                                         for _, r in wrong.iterrows()))


@CLAIMS.claim("The no-newline trap (lesson 5): the resumed run is right at {right} of {points} "
              "points, yet a rebuild from disk fails at {fails} of them.")
def the_no_newline_trap():
    result, _ = lesson_overview()
    nn = result["no_newline"]
    return (nn["rebuild_failures"] > 0 and nn["resume_correct"] > nn["rebuild_failures"],
            {"right": nn["resume_correct"], "points": nn["crash_points"],
             "fails": nn["rebuild_failures"]})


@CLAIMS.claim("Killed at `p5.after_visit` (page 5's model call answered, its page not yet "
              "saved) and resumed from the event log, the resumed worker reports {worker} model "
              "calls; the bill holds {bill}: {twice} paid twice, page 5's own call. The worker "
              "that died took its own count with it.")
def the_bill_not_the_worker_counts_calls():
    m = worker_word_vs_bill()
    return (m["worker says"] < m["bill says"] and m["bill says"] - m["clean run"] == 1,
            {"worker": m["worker says"], "bill": m["bill says"],
             "twice": m["bill says"] - m["clean run"]})


def _table_matches_its_own_figures(df) -> list[str]:
    """The "match" column says whether lesson and lab agree: it must say so row by row."""
    return [f"row {i!r}: 'match' is {r['match']}, but lesson {r['lesson']!r} and lab "
            f"{r['lab']!r}" for i, r in df.iterrows()
            if bool(r["match"]) != (r["lesson"] == r["lab"])]


def lesson_table_view(table):
    """The source text's table beside this machine's, as the learner reads it."""
    from ..views import Table

    return Table(table.set_index("figure"), "the source text's table, lesson vs this machine",
                 Invariants(extra=(_table_matches_its_own_figures,)))


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
        "say what the three witnesses of a recovery are, why the resumed worker's memory alone "
        "is not enough, and why model calls are read from the bill.",
    ),
    prerequisites="Python and a terminal; no prior knowledge of crash recovery.",
    exercises=defined_in(__name__),
    claims=CLAIMS,
)

