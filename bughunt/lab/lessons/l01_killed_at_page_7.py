"""Lesson 1, killed at page 7: what a restart from scratch costs, told as one real story.

A worker with no checkpoint is stopped at page 7 and killed from outside with SIGKILL, the way the
OOM killer or a rolling restart would. A second process runs the task again on the same directory.
The outside world's records tell the story: the provider's bill (calls paid), the tracker (reports
filed), and the lab's trace of the crash points each process reached (pages done), all timestamped.
"""

from __future__ import annotations

import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...config import RunConfig
from ...crashpoints import CrashPoint
from ...experiment import PausedWorker, read_trace, run_worker
from ...experiment import crash_point as find_point
from ...probes import cleanup_after
from ...world import Site, read_bill, read_reports
from .. import results
from ..claims import Claims, Invariants
from ..judges import Measured, assess, defined_in, exercise, statement
from ..practice import NUMBER, PAGES, Answer, Problem, as_exercise, drawn
from ..views import summary_table
from ..crash_panel import CrashPanel
from ..plots import describe_config, plot_points
from ..style import COLORS, new_figure
from ..registry import Lesson

#: The source text's first scene: no checkpoint, no idempotency key, no intents.
NO_CHECKPOINT = RunConfig(store="none", intent=False, idempotency_key=False)


@dataclass
class Story:
    """Two processes on one run directory: the killed one and the one that ran again."""

    config: RunConfig
    point: CrashPoint
    killed_by: int          # the signal that ended the first process (9 = SIGKILL)
    bill: "object"          # DataFrame: one row per billed model call, with run 1/2
    reports: "object"       # DataFrame: one row per report in the tracker
    trace: "object"         # DataFrame: one row per crash point reached
    final: dict             # the second process's report

    def summary(self):
        """Per run: model calls paid, reports filed, pages done; and the totals against a clean run."""
        pages = self.config.pages
        rows = []
        for run in (1, 2):
            done = self.trace[(self.trace.run == run) & (self.trace.label == "after_commit")]
            rows.append({"run": {1: "first (killed)", 2: "second (from scratch)"}[run],
                         "model calls paid": int((self.bill.run == run).sum()),
                         "reports filed": int((self.reports.run == run).sum()),
                         "pages done": len(done)})
        rows.append({"run": "both", "model calls paid": len(self.bill),
                     "reports filed": len(self.reports),
                     "pages done": int(self.trace.label.eq("after_commit").sum())})
        rows.append({"run": "a clean run", "model calls paid": pages,
                     "reports filed": len(Site.load(pages).bug_pages), "pages done": pages})
        return summary_table(rows, "the two processes, counted from the outside world",
                             STORY_INVARIANTS, index="run")

    def losses(self) -> dict:
        """What the crash cost: calls paid twice (split as the source text counts them) and duplicates."""
        counts = self.reports.page.value_counts()
        done_before = set(self.trace[(self.trace.run == 1)
                                     & (self.trace.label == "after_commit")].page)
        asked_again = set(self.bill[self.bill.run == 2].page)
        redone = len(self.bill) - self.config.pages
        done_paid_again = len(done_before & asked_again)
        return {"redone model calls": redone,
                "of which pages done before the kill": done_paid_again,
                "of which the call in flight": redone - done_paid_again,
                "duplicate reports": int((counts - 1).sum()),
                "pages reported twice": sorted(int(p) for p in counts[counts > 1].index)}


COUNTED = ("model calls paid", "reports filed", "pages done")


def _both_is_first_plus_second(df) -> list[str]:
    """The row "both" counts what the two processes did: each column is their sum."""
    first, second, both = (df.iloc[i] for i in range(3))
    return [f"row {df.index[2]!r}: {c!r} is {int(both[c])}, but the two processes' rows add up "
            f"to {int(first[c]) + int(second[c])}" for c in COUNTED
            if int(both[c]) != int(first[c]) + int(second[c])]


#: The story's table adds up: counts, and "both" is the first process plus the second.
STORY_INVARIANTS = Invariants(counts=COUNTED, extra=(_both_is_first_plus_second,))


@results.memoized
def killed_at(point: str, config: RunConfig = NO_CHECKPOINT) -> Story:
    """Stop a fresh worker at crash point `point` (a name like "p7.after_model_call"), SIGKILL it
    from here, run it again; read the world. Once per kernel and setting: the lesson's claims
    read the story the notebook showed."""
    import pandas as pd

    point = find_point(config, point)
    with tempfile.TemporaryDirectory(prefix="bughunt-story-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        first = PausedWorker(run_dir, config, pause_at=point, trace=True)
        first_pid = first.pid
        killed_by = -first.kill()
        second = run_worker(run_dir, config, trace=True)
        if second.returncode != 0:
            raise RuntimeError(f"the second run failed: {second.stderr.strip()}")
        bill = pd.DataFrame(read_bill(run_dir))
        reports = pd.DataFrame(read_reports(run_dir),
                               columns=["id", "page", "idempotency_key", "title", "pid",
                                        "filed_at"])
        trace = pd.DataFrame(read_trace(run_dir))
        import json
        final = json.loads(second.stdout)
    t0 = trace.t.min()
    for df, col in ((bill, "t"), (reports, "filed_at"), (trace, "t")):
        df["run"] = [1 if pid == first_pid else 2 for pid in df.pid]
        df["ms"] = (df[col] - t0) * 1000
    return Story(config, point, killed_by, bill, reports, trace, final)


def page_7(config: RunConfig = NO_CHECKPOINT) -> Story:
    """The source text's scene: killed on page 7, right after its model call."""
    return killed_at("p7.after_model_call", config)


#: The crash-point labels the page loop passes: one step each (`ready`, `start`, `end` are not steps).
STEP_LABELS = ("after_model_call", "after_visit", "after_intent", "after_submit", "mid_commit",
               "after_commit")


def steps(story: Story):
    """The steps both processes took, in order: one row per crash point reached, numbered from 1.

    The first process's steps come first, then the second's, after a gap of one step where the
    kill falls; within a process, the order is the order of its trace. Time is used only to order,
    never as a distance.
    """
    t = story.trace[story.trace.label.isin(STEP_LABELS)].sort_values(["run", "t"], kind="stable")
    t = t.reset_index(drop=True)
    t["step"] = [i + (r == 2) for i, r in enumerate(t.run, 1)]
    return t


def place(records, when: str, story_steps) -> list[int]:
    """The step at which each outside record (a billed call, a filed report) was made: the first step
    of the same process reached at or after the record's own time."""
    out = []
    for _, r in records.iterrows():
        mine = story_steps[(story_steps.run == r["run"]) & (story_steps.t >= r[when])]
        out.append(int(mine.step.iloc[0]) if len(mine) else int(story_steps.step.max()))
    return out


def plot_restart_timeline(story: Story):
    """Pages done, calls paid and reports filed, step by step, for both processes; the kill marked.

    The x axis counts steps (crash points reached), not time: the page loop's steps take
    microseconds and a restart takes a whole interpreter start-up, so a time axis would show
    only noise and a gap.
    """
    from matplotlib.ticker import MaxNLocator

    s = steps(story)
    kill_x = int(s[s.run == 1].step.max()) + 1
    end = int(s.step.max())
    fig, ax = new_figure(11, 4.2)
    series = [
        ("model calls paid (the bill)", place(story.bill, "t", s), COLORS["orange"], "-"),
        ("pages done (the lab's trace)", list(s[s.label == "after_commit"].step),
         COLORS["blue"], "-"),
        ("reports filed (the tracker)", place(story.reports, "filed_at", s), COLORS["red"], "--"),
    ]
    for label, xs, color, style in series:
        xs = sorted(xs)
        ax.step([0] + xs + [end + 1], [0, *range(1, len(xs) + 1), len(xs)], where="post",
                color=color, linewidth=2, linestyle=style, label=f"{label}: {len(xs)}")
    ax.axvline(kill_x, color=COLORS["black"], linewidth=2)
    top = max(len(story.bill), story.config.pages) + 5
    ax.annotate(f"first process:\nkill -9 at {story.point.name}", (kill_x, top - 0.4),
                xytext=(-6, 0),
                textcoords="offset points", fontsize=9, ha="right", va="top")
    run2 = story.trace[story.trace.run == 2]
    start_page = int(run2[run2.label == "start"].page.iloc[0])
    what = "starts over at page 1" if start_page == 1 else f"resumes at page {start_page}"
    ax.annotate(f"second process:\n{what}", (kill_x, top - 0.4), xytext=(6, 0),
                textcoords="offset points", fontsize=9, va="top")
    clean = story.config.pages
    ax.axhline(clean, color=COLORS["grey"], linestyle=":", linewidth=1.2,
               label=f"a clean run: {clean} calls, {clean} pages")
    firsts = s.groupby(["run", "page"], sort=False).step.min()
    ax.set_xticks(list(firsts.values), [f"p{p}" for _, p in firsts.index], fontsize=7)
    ax.set_xlim(0.5, end + 0.5)
    ax.set_ylim(0, top)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("steps of the page loop, in the order they happened (tick: first step of page n; "
                  "first process, then second)")
    ax.set_ylabel("count so far")
    ax.set_title(f"Killed at {story.point.name}, then run again: "
                 f"{describe_config(story.config)}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def panel_point_plot(config: RunConfig, name: str):
    return plot_restart_timeline(killed_at(name, config))


def panel(crash_point: str = "p7.after_model_call") -> CrashPanel:
    """Lesson 1's panel: the timeline of one kill at the chosen point, and the sweep."""
    return CrashPanel(
        name="01-killed", base=NO_CHECKPOINT, crash_point=crash_point,
        knobs=["checkpoint", "idempotency_key", "write_mode"],
        plot=lambda df, c, h: plot_points(df, c, h, metric="redone_model_calls"),
        point_plot=panel_point_plot,
        title="Killed at a crash point, run again: what is paid twice, what is filed twice")


# --- predict, then run -----------------------------------------------------------------------------

#: The source text's scene, as the exercises measure it: killed right after page 7's model call.
PAGE_7 = "p7.after_model_call"
#: The same kill with one knob changed, then both: the comparison of "The same kill, with a
#: checkpoint".
WITH_KEY = NO_CHECKPOINT.replace(idempotency_key=True)
SNAPSHOT = NO_CHECKPOINT.replace(store="snapshot")
SNAPSHOT_AND_KEY = SNAPSHOT.replace(idempotency_key=True)
DESIGNS = {"no checkpoint, no key": NO_CHECKPOINT, "snapshot per page, no key": SNAPSHOT,
           "no checkpoint, key on": WITH_KEY, "snapshot per page, key on": SNAPSHOT_AND_KEY}

LOSSES = ("redone model calls", "of which pages done before the kill",
          "of which the call in flight", "duplicate reports")
#: The redone calls split into the pages done before the kill and the call in flight.
LOSS_INVARIANTS = Invariants(total="redone model calls",
                             parts=("of which pages done before the kill",
                                    "of which the call in flight"),
                             counts=("duplicate reports",))


def losses_table(stories: dict[str, Story]):
    """What each kill cost, one row per design, checked to add up."""
    rows = [{"design": name, **story.losses()} for name, story in stories.items()]
    for r in rows:
        r["pages reported twice"] = ", ".join(map(str, r["pages reported twice"])) or "none"
    return summary_table(rows, "what the kill at page 7 cost", LOSS_INVARIANTS, index="design")


def page_7_by_design(designs: dict[str, RunConfig] = DESIGNS) -> dict[str, Story]:
    """The kill at page 7 under each design (each once per kernel)."""
    return {name: page_7(cfg) for name, cfg in designs.items()}


def pages_filed_twice(tracker_pages: list[int]) -> list[int]:
    """The pages whose report the tracker holds more than once."""
    return sorted({p for p in tracker_pages if tracker_pages.count(p) > 1})


@exercise("1.1", "Predict, then run: no checkpoint, no idempotency key; the worker is killed right "
          "after page 7's model call (p7.after_model_call) and run again from scratch. How many "
          "model calls does the task pay twice?",
          "7. The source text counts the 6 pages done before the kill (前 6 页的模型调用重新花一遍钱), "
          "but page 7's own call was answered and billed the instant before the kill: that call in "
          "flight is paid again too. The bill holds 7 + 12 = 19 calls where a clean run pays 12.")
def _ex_1_1(answer):
    truth = results.point(NO_CHECKPOINT, PAGE_7).redone_model_calls
    c = assess(answer, truth, what="model calls paid twice")
    return c.reply(hint=" Count the pages done before the kill, then "
                   "ask whether page 7's call was billed before the kill.")


@exercise("1.2", "Predict, then run: in the same kill (p7.after_model_call, no checkpoint, no key), "
          "which pages' reports does the tracker hold twice once the second run has finished? "
          "A list of page numbers, e.g. [7].",
          "[3]. Before the kill the first process had filed page 3's report (page 7's bug was not "
          "reached yet: the kill came after its model call, before its visit). The second process "
          "starts from page 1 and files 3, 7 and 10: page 3 twice, 7 and 10 once.")
def _ex_1_2(answer):
    truth = pages_filed_twice(results.point(NO_CHECKPOINT, PAGE_7).tracker_pages)
    c = assess(answer, truth, what="pages filed twice")
    return c.reply(hint=" Which bug pages had the first process passed "
                   "before it died?")


# --- common wrong statements ------------------------------------------------------------------------

@statement("Q1.1", "Starting the task over from page 1 gives the right result; it only costs "
           "more time and money.",
           "False. A restart from scratch redoes the side effects too: every report filed before "
           "the kill is filed again, unless the tracker deduplicates it. That is a wrong result "
           "someone downstream has to clean up, not a cost.")
def _q1_1():
    run = results.point(NO_CHECKPOINT, PAGE_7)
    twice = pages_filed_twice(run.tracker_pages)
    return Measured(not twice, f"Measured (no checkpoint, no key, killed at {PAGE_7}, run again): "
                    f"{run.redone_model_calls} calls paid twice, and the tracker holds "
                    f"{len(run.tracker_pages)} reports for {len(set(run.tracker_pages))} bugs: "
                    f"page {', '.join(map(str, twice))} twice.")


@statement("Q1.2", "A worker killed with kill -9 can still save its progress on the way out, in "
           "a signal handler, a finally block or an atexit hook.",
           "False. SIGKILL cannot be caught, blocked or ignored (signal(7)): the kernel ends the "
           "process without running another instruction of it. A handler, a finally block and "
           "an atexit hook all need the process to run. SIGTERM, the polite signal, does let "
           "them run; the OOM killer and a grace period that ran out send SIGKILL.")
def _q1_2():
    ran = {name: cleanup_after(sig) for name, sig in (("SIGTERM", signal.SIGTERM),
                                                      ("SIGKILL", signal.SIGKILL))}
    return Measured(bool(ran["SIGKILL"]),
                    "Measured just now with a real process that has all three: after SIGTERM, "
                    f"{len(ran['SIGTERM'])} of 3 ran ({', '.join(ran['SIGTERM']) or 'none'}); "
                    f"after SIGKILL, {len(ran['SIGKILL'])} of 3 ran"
                    + (f" ({', '.join(ran['SIGKILL'])})." if ran["SIGKILL"] else "."))


@statement("Q1.3", "With the idempotency key on, a restart from scratch costs nothing.",
           "False. The key makes the repeated reports harmless: the tracker ignores a report "
           "whose key it has seen. It saves no model call: with no checkpoint, every call before "
           "the kill is paid again. A checkpoint saves the calls; the key saves the tracker.")
def _q1_3():
    run = results.point(WITH_KEY, PAGE_7)
    return Measured(run.redone_model_calls == 0 and run.duplicate_reports == 0,
                    f"Measured (no checkpoint, key on, killed at {PAGE_7}, run again): "
                    f"{run.duplicate_reports} reports filed twice, and "
                    f"{run.redone_model_calls} model calls paid twice.")


# --- what the lesson says its run found (each sentence checked against that run) -------------

CLAIMS = Claims(1)


@CLAIMS.claim("The first process was ended by signal {signal} (SIGKILL) at `{point}`; with "
              "nothing saved, the second one started again at page {start}.")
def killed_then_started_over():
    story = page_7()
    run2 = story.trace[story.trace.run == 2]
    start = int(run2[run2.label == "start"].page.iloc[0])
    return (story.killed_by == signal.SIGKILL and start == 1,
            {"signal": story.killed_by, "point": story.point.name, "start": start})


@CLAIMS.claim("**Cost.** The bill holds {both} calls where a clean run pays {clean}: {redone} "
              "paid twice. The source text counts the {done} pages that were done (前 6 页的模型"
              "调用重新花一遍钱); the bill also shows page 7's own call ({in_flight} more), "
              "answered and billed the instant before the kill: the call in flight.")
def the_bill_counts_the_call_in_flight():
    story = page_7()
    loss = story.losses()
    return (loss["of which the call in flight"] == 1
            and loss["of which pages done before the kill"] == 6,
            {"both": len(story.bill), "clean": story.config.pages,
             "redone": loss["redone model calls"],
             "done": loss["of which pages done before the kill"],
             "in_flight": loss["of which the call in flight"]})


@CLAIMS.claim("**Correctness.** Page {twice}'s report was filed by the first process and again "
              "by the second: the tracker holds {reports} reports for {bugs} bugs "
              "(第 3 页的 Bug 报告又提交一次).")
def page_3_is_filed_twice():
    story = page_7()
    by_run = {run: sorted(int(p) for p in story.reports[story.reports.run == run].page)
              for run in (1, 2)}
    twice = story.losses()["pages reported twice"]
    return (twice == [3] and by_run[1] == [3],
            {"twice": twice, "reports": len(story.reports),
             "bugs": len(Site.load(story.config.pages).bug_pages)},
            f"the first process filed pages {by_run[1]}, the second {by_run[2]}")


@CLAIMS.claim("The snapshot alone saves the calls and the tracker here: calls paid again "
              "{calls}, duplicate reports {dups}. Page 3's snapshot was durable long before the "
              "kill, so the second process started at page 7 and never sent page 3's report.")
def the_snapshot_alone_saves_both_here():
    loss = page_7(SNAPSHOT).losses()
    return (loss["redone model calls"] == 1 and loss["duplicate reports"] == 0,
            {"calls": loss["redone model calls"], "dups": loss["duplicate reports"]})


@CLAIMS.claim("The key alone saves the tracker and not one call: calls paid again {calls}, "
              "duplicate reports {dups}, although the second process sent page 3's report again.")
def the_key_alone_saves_the_tracker_only():
    story = page_7(WITH_KEY)
    loss = story.losses()
    sent_again = bool(story.trace[(story.trace.run == 2)
                                  & (story.trace.label == "after_submit")
                                  & (story.trace.page == 3)].shape[0])
    return (loss["redone model calls"] == page_7().losses()["redone model calls"]
            and loss["duplicate reports"] == 0 and sent_again,
            {"calls": loss["redone model calls"], "dups": loss["duplicate reports"]})


# --- practice: a kill the lesson did not make --------------------------------------------------

PRACTICE_DESIGNS = {
    ("none", False): "no checkpoint, no idempotency key",
    ("none", True): "no checkpoint, the idempotency key on",
    ("snapshot", False): "a snapshot after every page, no idempotency key",
    ("snapshot", True): "a snapshot after every page, the idempotency key on",
}

#: Every (configuration, crash point) this lesson kills at: the notebook's four designs at page 7
#: (and the panel's first view, the same point). A practice problem never draws one of these.
LESSON_RUNS = frozenset((cfg, PAGE_7) for cfg in DESIGNS.values())


def practice_problem(seed: int) -> Problem:
    """A kill this lesson did not make: a design (checkpoint or not, key or not) and a crash point
    other than p7.after_model_call, and one question: the calls paid twice, the pages the tracker
    holds twice, or the reports the tracker holds."""
    from ...experiment import crash_points

    rng = drawn(seed, 1)
    store, key = rng.choice(list(PRACTICE_DESIGNS))
    config = NO_CHECKPOINT.replace(store=store, idempotency_key=key)
    name = rng.choice([p.name for p in crash_points(config) if (config, p.name) not in LESSON_RUNS])
    bugs = Site.load(config.pages).bug_pages
    setting = (f"{PRACTICE_DESIGNS[(store, key)].capitalize()}, intents off, 12 pages (bugs on "
               f"pages {', '.join(map(str, bugs[:-1]))} and {bugs[-1]}). The worker is killed with "
               f"SIGKILL at `{name}` and run again in the same directory.")
    kind = rng.choice(["calls", "twice", "reports"])
    where = {"design": store, "idempotency_key": key, "point": name, "kind": kind}

    def run():
        return results.point(config, name)
    if kind == "calls":
        def measure() -> Answer:
            r = run()
            n = r.redone_model_calls
            return Answer(n, f"killed at {name} and run again: {n} model call"
                          f"{'' if n == 1 else 's'} on the bill beyond a clean run's "
                          f"{config.pages}.")
        return Problem(1, seed, setting, "How many model calls does the task pay twice?", NUMBER,
                       measure, "Where does the second process start, and was the killed "
                       "page's model call already billed?", unit="calls", drawn=where)
    if kind == "twice":
        def measure() -> Answer:
            r = run()
            twice = tuple(pages_filed_twice(list(r.tracker_pages)))
            said = ("no page twice" if not twice else
                    f"page{'s' if len(twice) > 1 else ''} {' and '.join(map(str, twice))} twice")
            return Answer(twice, f"the tracker holds reports for pages "
                          f"{', '.join(map(str, r.tracker_pages)) or 'none'}: {said}.")
        return Problem(1, seed, setting, "Which pages' reports does the tracker hold twice once "
                       "the second run has finished?", PAGES, measure,
                       "Which reports had the first process filed before it died, and does the "
                       "second one send them again, and does the tracker accept them again?",
                       drawn=where)

    def measure() -> Answer:
        r = run()
        return Answer(len(r.tracker_pages), f"the tracker holds {len(r.tracker_pages)} reports "
                      f"(pages {', '.join(map(str, r.tracker_pages))}).")
    return Problem(1, seed, setting, "How many reports does the tracker hold once the second run "
                   "has finished?", NUMBER, measure,
                   "Count the reports the first process filed, then those the second one files "
                   "and the tracker accepts.", unit="reports", drawn=where)


#: The transfer question: a kill the lesson did not make (`practice_problem`).
TRANSFER_SEED = 25
TRANSFER = as_exercise("1.3", practice_problem(TRANSFER_SEED), __name__)


LESSON = Lesson(
    number=1,
    notebook="01_killed_at_page_7",
    title="Killed at page 7: where does the agent pick up?",
    short_title="killed at page 7",
    question="What does a restart from scratch cost?",
    teaches="a restart from scratch pays every model call again and files page 3's report "
            "twice; the four questions of resuming",
    objectives=(
        "say what a restart from scratch costs (model calls paid twice) and what it breaks "
        "(reports filed twice), and tell the cost from the correctness bug;",
        "explain why a process killed with SIGKILL saves nothing on its way out;",
        "read a recovery from the outside world's records (the bill, the tracker), not the "
        "agent's;",
        "name the four questions of resuming that lessons 2 to 5 answer.",
    ),
    runs="the notebook runs in under a minute",
    prerequisites="The start page (lesson 0). Words you meet here are in the "
                  "[glossary](glossary.md).",
    panel=panel,
    exercises=defined_in(__name__),
    claims=CLAIMS,
    practice=practice_problem,
)

