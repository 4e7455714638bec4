"""Lesson 4, the danger window (危险窗口): the report is filed, the checkpoint is not.

On a bug page the worker visits, (records an intent,) submits the report, then commits the page.
A kill after the submit and before the commit is durable leaves a tracker that has the report and a
checkpoint that says the page is not done, so the resume files it again. From the inside, the
resumed process cannot tell whether that last side effect happened. It can only choose:

- at most once (至多一次): give the page up ("aborted", as Codex tells the model); reports may be lost;
- at least once (至少一次): redo it; duplicates possible;
- effectively once (效果上恰好一次): redo it with the same deterministic idempotency key, and let
  the tracker deduplicate (`ON CONFLICT(idempotency_key) DO NOTHING` on a UNIQUE key);
- a fourth, which the lab names but does not run: ask the receiver by key on recovery (look the
  key up in the tracker), then file or skip.

This module runs those sweeps, draws the window on a timeline from a traced run, and compares the
exhaustive sweep with random kills from outside (an exact binomial bound; the rule of three only
for a run with no failure). What the lesson says its run found is in `CLAIMS`.
"""

from __future__ import annotations

import math
import statistics

from matplotlib.patches import Patch

from ...config import RunConfig
from ...experiment import (LESSON_FIGURES, RANDOM_KILL_LATENCY_MS, VERDICTS, WAITING, CrashRun,
                           PausedWorker, clean_run, crash_point, frame, read_trace, rule_of_three,
                           run_life, run_worker, summarize, work_dir)
from ...stores import rebuild_from_disk
from ...world import Site, read_reports
from .. import results
from ..claims import Claims, Invariants
from ..judges import Measured, assess, defined_in, exercise, statement
from ..practice import NUMBER, Answer, Problem, as_exercise, choice, drawn
from ..views import Table, summary_table
from ..crash_panel import CrashPanel
from ..plots import describe_config, verdict_handles, verdict_row
from ..style import COLORS, LESSON_STYLE, SERIES, new_figure, page_ticks
from ..registry import Lesson

#: The lesson's duplicate experiment: a snapshot after every page, no intents, no key (51 points).
NO_KEY = RunConfig(store="snapshot", intent=False, idempotency_key=False)
WITH_KEY = NO_KEY.replace(idempotency_key=True)

#: The three choices, each on the log store with intents (54 points). One knob at a time: at most
#: once and at least once differ only in what recovery does with a pending intent (the key off for
#: both), at least once and effectively once only in the key.
CHOICES = {
    "at most once": RunConfig(store="log", intent=True, idempotency_key=False, pending="abort"),
    "at least once": RunConfig(store="log", intent=True, idempotency_key=False, pending="redo"),
    "effectively once": RunConfig(store="log", intent=True, idempotency_key=True, pending="redo"),
}
KEY_SWEEPS = {"key off": NO_KEY, "key on": WITH_KEY}
SWEEPS = {**KEY_SWEEPS, **CHOICES}

#: The lesson's random-kill experiment (追问 1): 40 tries, 39 real kills, 1 duplicate hit.
LESSON_RANDOM = {"tries": 40, "real_kills": 39, "duplicates_hit": 1}

#: The labels where a kill falls inside the danger window: the report is in the tracker and the
#: page's commit is not yet durable.
WINDOW_LABELS = ("after_submit", "mid_commit")

OP_COLORS = {"model call": COLORS["blue"], "visit": COLORS["sky"], "intent": COLORS["orange"],
             "submit": COLORS["purple"], "commit": COLORS["green"]}
OP_OF_LABEL = {"after_model_call": "model call", "after_visit": "visit",
               "after_intent": "intent", "after_submit": "submit", "after_commit": "commit"}
WINDOW_STYLE = {"facecolor": COLORS["red"], "alpha": 0.25, "hatch": "xx",
                "edgecolor": COLORS["red"], "linewidth": 0}


# --- the sweeps ----------------------------------------------------------------------------------

def danger_sweeps(sweeps: dict[str, RunConfig] = SWEEPS, *, progress=None):
    """Crash at every point of every configuration, in one pool; one row per crash run.

    The records stay in the lab's results cache for this kernel, so later cells, the panel and
    the exercises reuse them instead of killing the same points again.
    """
    import pandas as pd

    frames = [frame(records).assign(sweep=name)
              for name, records in results.sweeps_once(sweeps, progress=progress).items()]
    return pd.concat(frames, ignore_index=True)


def records_for(config: RunConfig) -> list[CrashRun]:
    """Every crash run of `config`, from this kernel's sweeps if it already ran them."""
    return results.sweep_once(config)


def duplicate_points(df, sweep: str = "key off"):
    """The crash points of one sweep where the tracker ends with a report filed twice."""
    d = df[(df["sweep"] == sweep) & (df["duplicate_reports"] > 0)]
    return d[["crash_point", "page", "label", "tracker_pages"]].reset_index(drop=True)


def key_table(df) -> Table:
    """Duplicates without and with the key, beside the lesson's count: the crash points split into
    those that recover correctly, those that file a report twice, and any other verdict."""
    rows = []
    for name in KEY_SWEEPS:
        d = df[df["sweep"] == name]
        correct = int((d["verdict"] == "correct").sum())
        duplicate = int((d["verdict"] == "duplicate").sum())
        rows.append({"idempotency key": name.split()[1], "crash points": len(d),
                     "recover correctly": correct, "file a report twice": duplicate,
                     "another verdict": len(d) - correct - duplicate,
                     "lesson: file twice": LESSON_FIGURES["duplicate_points_no_key"]
                     if name == "key off" else None})
    return summary_table(rows, "lesson 4, duplicates without and with the key", Invariants(
        total="crash points", parts=("recover correctly", "file a report twice",
                                     "another verdict")), index="idempotency key")


#: The verdicts the three choices' table counts, in its column order; any other is "another".
CHOICE_VERDICTS = ("correct", "duplicate", "lost", "tracker disagrees")


def choices_table(df) -> Table:
    """The three choices side by side: each crash point's verdict, counted. The verdict columns
    partition the crash points (each run has exactly one verdict)."""
    rows = []
    for name, cfg in CHOICES.items():
        d = df[df["sweep"] == name]
        counts = {v: int((d["verdict"] == v).sum()) for v in CHOICE_VERDICTS}
        rows.append({"choice": name, "key": "on" if cfg.idempotency_key else "off",
                     "pending intent": cfg.pending, "crash points": len(d),
                     **counts, "another verdict": len(d) - sum(counts.values()),
                     "lesson: correct": (LESSON_FIGURES["log_runs_correct"]
                                         if name == "effectively once" else None)})
    return summary_table(rows, "lesson 4, the three choices", Invariants(
        total="crash points", parts=(*CHOICE_VERDICTS, "another verdict")), index="choice")


def verdicts_by_label(df):
    """For each choice, the verdict(s) at each crash-point label of the bug pages."""
    choices = df[df["sweep"].isin(list(CHOICES))]
    bug = choices[choices["page"].isin(choices.loc[choices["label"] == "after_submit", "page"])]
    table = bug.groupby(["sweep", "label"], sort=False)["verdict"].agg(
        lambda v: ", ".join(sorted(set(v))))
    labels = [lb for lb in ("after_model_call", "after_visit", "after_intent", "after_submit",
                            "mid_commit", "after_commit") if lb in set(bug["label"])]
    return Table(table.unstack("label")[labels].loc[list(CHOICES)],
                 "lesson 4, the verdict at each step of a bug page")


# --- inside the window, for real -----------------------------------------------------------------

def inside_the_window(config: RunConfig, page: int = 3) -> dict:
    """Stop a worker right after page `page`'s submit, look at both records, kill it, resume.

    While it is paused the tracker already has the report and the checkpoint still says the page is
    not done: the danger window. Whatever the resume does next, it decides from the checkpoint.
    """
    point = crash_point(config, f"p{page}.after_submit")
    with work_dir() as base:
        run_dir = base / "run"
        paused = PausedWorker(run_dir, config, point)
        tracker_before = sorted(r["page"] for r in read_reports(run_dir))
        next_page = rebuild_from_disk(run_dir, config).state["next_page"]
        killed_by = -paused.kill()
        resume = run_worker(run_dir, config)
        tracker_after = sorted(r["page"] for r in read_reports(run_dir))
    return {"idempotency key": "on" if config.idempotency_key else "off",
            "paused at": f"page {point.page}, {point.label}",
            "tracker pages (paused)": tracker_before,
            "checkpoint: next page": next_page,
            "killed by signal": killed_by,
            "resume exit": resume.returncode,
            "tracker pages (after resume)": tracker_after,
            "duplicate reports": len(tracker_after) - len(set(tracker_after))}


@results.memoized
def window_demo(page: int = 3) -> Table:
    """`inside_the_window` without and with the key, one row each (run once per kernel)."""
    return summary_table([inside_the_window(cfg, page) for cfg in KEY_SWEEPS.values()],
                         "lesson 4, inside the window", Invariants(
                             counts=("killed by signal", "resume exit", "duplicate reports")),
                         index="idempotency key")


# --- the window on a timeline --------------------------------------------------------------------

def traced_run(config: RunConfig, latency_ms: float = 0.0) -> list[dict]:
    """One clean run with `--trace`: every crash point reached, with its wall time. Each model
    answer takes `latency_ms` after its call is billed."""
    with work_dir() as base:
        clean_run(config, base / "run", trace=True, extra=("--latency-ms", f"{latency_ms:g}"))
        return read_trace(base / "run")


@results.memoized
def lesson_trace(config: RunConfig = CHOICES["at least once"]) -> list[dict]:
    """The traced clean run the lesson's timeline draws (run once per kernel)."""
    return traced_run(config)


def traced_runs(config: RunConfig, n: int = 3, latency_ms: float = 0.0) -> list[list[dict]]:
    """`n` traced clean runs, for a median that one busy moment cannot skew."""
    return [traced_run(config, latency_ms) for _ in range(n)]


def operations(trace: list[dict]):
    """The trace as operations: each one runs from the previous mark to its own "after_" mark.

    `mid_commit` fires inside the commit (between its two halves), so the commit is measured from
    the mark before it. Times are microseconds from the first mark (the worker ready to start).
    """
    import pandas as pd

    t0 = trace[0]["t"]
    rows, start = [], trace[0]["t"]
    for mark in trace[1:]:
        label = mark["label"]
        if label in OP_OF_LABEL:
            rows.append({"page": mark["page"], "op": OP_OF_LABEL[label],
                         "start_us": (start - t0) * 1e6, "end_us": (mark["t"] - t0) * 1e6})
        if label != "mid_commit":
            start = mark["t"]
    ops = pd.DataFrame(rows)
    ops["dur_us"] = ops["end_us"] - ops["start_us"]
    return ops


def danger_windows(ops):
    """Per bug page: from the end of the submit to the end of the commit (report filed, page not
    yet durable). The window really opens inside the submit, when the tracker's transaction
    commits, which no mark can see: so each window also has an upper bound, from the start of the
    submit (`submit_start_us`, `width_with_submit_us`)."""
    import pandas as pd

    rows = []
    for page in sorted(ops.loc[ops["op"] == "submit", "page"]):
        p = ops[ops["page"] == page].set_index("op")
        start, end = p.at["submit", "end_us"], p.at["commit", "end_us"]
        first = p.at["submit", "start_us"]
        rows.append({"page": page, "start_us": start, "end_us": end, "width_us": end - start,
                     "submit_start_us": first, "width_with_submit_us": end - first})
    return pd.DataFrame(rows)


def window_share(traces: list[list[dict]]) -> dict:
    """How much of a run's life the danger windows cover, the median over traced runs (one run's
    times are noisy). A run's life is from its ready mark to its end mark, the same span random
    kills are drawn over (`kill_random`), so the share is the chance that one such kill lands in a
    window."""
    windows = [danger_windows(operations(t)) for t in traces]
    window_us = statistics.median(float(w["width_us"].sum()) for w in windows)
    upper_us = statistics.median(float(w["width_with_submit_us"].sum()) for w in windows)
    life_us = statistics.median(run_life(t) * 1e6 for t in traces)
    return {"traced_runs": len(traces), "window_us": window_us, "life_us": life_us,
            "share_of_life": window_us / life_us,
            # The window opens inside the submit (the tracker's commit): at most this much.
            "share_with_submit": upper_us / life_us}


def loop_span(ops) -> tuple[float, float]:
    """The page loop's span in µs: from the first operation's start (page 1's "start" mark, after
    the worker's set-up) to the end of the last commit. The windows' share is taken over it."""
    return float(ops["start_us"].min()), float(ops["end_us"].max())


def timeline_share(ops, windows) -> dict:
    """The danger windows' total width and their share of the page loop (not of the process's
    life: the set-up before page 1 is left out, as the figure leaves it out)."""
    start, end = loop_span(ops)
    total = float(windows["width_us"].sum())
    return {"windows": len(windows), "window_us": total, "loop_us": end - start,
            "share": total / (end - start)}


#: The gid of the page labels on the whole-run timeline (a test reads their extents).
WINDOW_LABEL = "danger-window-label"


def plot_window_timeline(ops, windows, *, pages: tuple[int, ...] = (3, 7, 10)):
    """The danger window on a time axis: the page loop on top, each bug page's operations below.

    Top: one lane per kind of operation over the page loop (ms from page 1's start; the set-up
    before it is left out, and a first operation longer than the rest of the loop is cut, with its
    length written), the windows shaded: they are slivers. Their labels never overlap: a label
    that would is moved down a lane. Below: each bug page in microseconds from its first operation,
    on a broken axis (the tracker's submit is long), the window shaded from the end of the submit
    to the end of the commit.
    """
    n = len(pages)
    fig, axes = new_figure(11.5, 6.6, nrows=2, ncols=2 * n,
                           gridspec_kw={"height_ratios": [1.1, 1.3], "width_ratios": [1, 1] * n})
    grid = axes[0, 0].get_gridspec()
    for ax in axes[0]:
        ax.remove()
    top = fig.add_subplot(grid[0, :])
    lanes = [op for op in OP_COLORS if op in set(ops["op"])]
    start, end = loop_span(ops)
    shifted = ops.assign(start_us=ops["start_us"] - start, end_us=ops["end_us"] - start)
    _draw_lanes(top, shifted, lanes, scale=1e3)
    first = shifted.iloc[0]
    rest = shifted.iloc[1:]
    left = 0.0
    if len(rest) and first["dur_us"] > (end - start - first["dur_us"]):
        left = max(0.0, first["end_us"] - 0.04 * (rest["end_us"].max() - first["end_us"]))
        top.annotate(f"← page {int(first['page'])}'s {first['op']}: {first['dur_us'] / 1e3:.1f} ms "
                     "from the loop's start (cut)", (left / 1e3, lanes.index(first["op"])),
                     xytext=(4, -9), textcoords="offset points", fontsize=7, va="top")
    labels = []
    for _, w in windows.iterrows():
        x0, x1 = (w["start_us"] - start) / 1e3, (w["end_us"] - start) / 1e3
        top.axvspan(x0, x1, **WINDOW_STYLE)
        labels.append(top.annotate(f"page {int(w['page'])}", (x0, 0), xytext=(-3, 0),
                                   textcoords="offset points", ha="right", va="center",
                                   fontsize=8, color=COLORS["red"], gid=WINDOW_LABEL))
    share = timeline_share(ops, windows)
    top.set_yticks(range(len(lanes)), lanes)
    top.set_ylim(len(lanes) - 0.5, -0.5)
    top.set_xlim(left / 1e3, (end - start) / 1e3 * 1.01)
    top.set_xlabel("time since page 1 began (ms; the worker's set-up before it is left out)")
    top.set_title(f"The page loop: {share['windows']} danger windows, {share['window_us']:.0f} µs "
                  f"in all = {share['share']:.1%} of its {share['loop_us'] / 1e3:.2f} ms",
                  fontsize=10)
    handles = [Patch(color=OP_COLORS[op], label=op) for op in lanes]
    handles.append(Patch(**WINDOW_STYLE, label="danger window:\nreport filed,\ncommit not durable"))
    top.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0))
    for i, page in enumerate(pages):
        _page_detail(axes[1, 2 * i], axes[1, 2 * i + 1], ops[ops["page"] == page],
                     windows[windows["page"] == page].iloc[0], lanes, first=i == 0)
    fig.suptitle("The danger window on a timeline (wall-clock times of one traced clean run)")
    _separate(fig, labels, len(lanes))
    return fig


def _separate(fig, texts, lanes: int) -> None:
    """Move each label down a lane while it overlaps one placed before it (drawn extents)."""
    fig.draw_without_rendering()          # lay the figure out, so the extents are final
    renderer = fig._get_renderer()
    placed = []
    for t in texts:
        for lane in range(lanes):
            t.xy = (t.xy[0], lane)
            box = t.get_window_extent(renderer)
            if not any(box.overlaps(b) for b in placed):
                break
        placed.append(t.get_window_extent(renderer))


def label_overlaps(fig, gid: str = WINDOW_LABEL) -> list[tuple[str, str]]:
    """Pairs of labels with `gid` whose drawn extents overlap (the figure drawn first)."""
    fig.draw_without_rendering()
    renderer = fig._get_renderer()
    texts = [t for ax in fig.axes for t in ax.texts if t.get_gid() == gid]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:]
            if ba.overlaps(bb)]


def _draw_lanes(ax, ops, lanes, *, scale: float = 1.0, t0: float = 0.0) -> None:
    for y, op in enumerate(lanes):
        d = ops[ops["op"] == op]
        ax.broken_barh(list(zip((d["start_us"] - t0) / scale, d["dur_us"] / scale)),
                       (y - 0.35, 0.7), color=OP_COLORS[op])


def _page_detail(left, right, p, w, lanes, *, first: bool) -> None:
    """One bug page on a broken time axis: its start (model call, visit, intent, the submit
    beginning) on the left, the end of the submit and the commit, with the window, on the right."""
    t0 = p["start_us"].min()
    submit = p[p["op"] == "submit"].iloc[0]
    commit = p[p["op"] == "commit"].iloc[0]
    head = (submit["start_us"] - t0) * 1.8 + 5
    tail = commit["dur_us"] * 2.2 + 20
    for ax in (left, right):
        _draw_lanes(ax, p, lanes, t0=t0)
        ax.axvspan(w["start_us"] - t0, w["end_us"] - t0, **WINDOW_STYLE)
        ax.set_ylim(len(lanes) - 0.5, -0.5)
        ax.tick_params(axis="x", labelsize=7)
    left.set_xlim(0, head)
    right.set_xlim(submit["end_us"] - t0 - tail * 0.45, commit["end_us"] - t0 + tail * 0.55)
    for _, r in p.iterrows():
        ax = right if r["op"] == "commit" else left
        if r["op"] == "submit":      # too long to draw: its length is written above it
            ax.annotate(f"submit: {r['dur_us']:.0f} µs (axis broken)",
                        (r["start_us"] - t0, lanes.index("submit") - 0.38), va="bottom",
                        fontsize=7).set_in_layout(False)
            continue
        ax.annotate(f"{r['dur_us']:.0f} µs", (r["end_us"] - t0, lanes.index(r["op"])),
                    xytext=(3, 0), textcoords="offset points", va="center",
                    fontsize=7).set_in_layout(False)
    right.annotate(f"window\n{w['width_us']:.0f} µs", (w["start_us"] - t0, lanes.index("model call")),
                   xytext=(-3, 0), textcoords="offset points", ha="right", va="center",
                   fontsize=7, color=COLORS["red"]).set_in_layout(False)
    left.set_yticks(range(len(lanes)), lanes if first else [""] * len(lanes), fontsize=8)
    right.set_yticks([])
    right.patch.set_visible(False)     # let the submit's label run across the break
    left.spines["right"].set_visible(False)
    right.spines["left"].set_visible(False)
    for ax, x in ((left, 1), (right, 0)):     # the "//" of a broken axis
        ax.plot([x - 0.03, x + 0.03], [-0.03, 0.03], transform=ax.transAxes, clip_on=False,
                color=COLORS["black"], linewidth=1)
    left.set_title(f"page {p['page'].iloc[0]}", fontsize=9, loc="left")
    left.set_xlabel("µs since the page began", fontsize=8, loc="left")


# --- exhaustive vs random ------------------------------------------------------------------------

#: The lesson's random-kill experiment: 40 tries from outside, seeded.
RANDOM_TRIES, RANDOM_SEED = 40, 4


@results.memoized
def random_experiment(tries: int = RANDOM_TRIES, seed: int = RANDOM_SEED) -> tuple[dict, dict]:
    """`kill_random` on the lesson's key-off design, and the windows' share of a run's life from
    three traced runs in the same world (model latency): run once per kernel, so the table, the
    figure and the claims all read the same kills."""
    from ...experiment import kill_random

    result = kill_random(NO_KEY, tries=tries, seed=seed)
    share = window_share(traced_runs(NO_KEY, latency_ms=result["latency_ms"]))
    return result, share


def upper_bound(failures: int, n: int, confidence: float = 0.95) -> float | None:
    """The exact one-sided upper confidence bound on a rate after `failures` in `n` independent
    tries (Clopper–Pearson): the rate p at which P(at most `failures` in n) = 1 − confidence.
    With no failure it is 1 − (1 − confidence)^(1/n), which the rule of three rounds to 3/n."""
    if n <= 0:
        return None
    if failures >= n:
        return 1.0
    alpha = 1 - confidence

    def cdf(p: float) -> float:
        return sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(failures + 1))

    lo, hi = failures / n, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) > alpha else (lo, mid)
    return hi


def random_summary(result: dict, share: dict, df) -> Table:
    """Random kills beside the exhaustive sweep: what each found, the windows' share, and what the
    random run proves about the rate (an exact bound; the rule of three only if nothing failed)."""
    exhaustive = df[df["sweep"] == "key off"]
    n, loop, hits = result["real_kills"], result["kills_in_page_loop"], result["duplicates_hit"]
    bound = upper_bound(hits, loop)
    rows = [
        ("crash runs", len(exhaustive), result["tries"], LESSON_RANDOM["tries"]),
        ("real kills (died before its end)", len(exhaustive), n, LESSON_RANDOM["real_kills"]),
        ("kills inside the page loop", len(exhaustive), loop, None),
        ("runs with a duplicate report", int((exhaustive["duplicate_reports"] > 0).sum()),
         hits, LESSON_RANDOM["duplicates_hit"]),
        ("distinct crash points that duplicated", int((exhaustive["duplicate_reports"] > 0).sum()),
         len(hit_points(result)), None),
        ("windows' share of a run's life", None,
         f"{_pct(share['share_of_life'])} to {_pct(share['share_with_submit'])}", None),
        ("expected hits (real kills x share)", None,
         f"{n * share['share_of_life']:.2f} to {n * share['share_with_submit']:.2f}", None),
        ("95% upper bound on the hit rate per kill (exact, from the hits)", None, _pct(bound),
         _pct(upper_bound(LESSON_RANDOM["duplicates_hit"], LESSON_RANDOM["real_kills"]))),
    ]
    if hits == 0:
        rows.append(("rule of three (no failure): 3/kills in the loop", None,
                     _pct(rule_of_three(loop)), None))
    import pandas as pd

    table = pd.DataFrame(rows, columns=["", "exhaustive sweep", "random kills",
                                        "lesson (random)"]).set_index("")
    return Table(table.astype(object), "lesson 4, exhaustive sweep vs random kills")


def hit_points(result: dict) -> list[str]:
    """The distinct last crash points of the random kills that filed a report twice."""
    return sorted({r["landed"] for r in result["runs"] if r["killed"] and r["duplicate_reports"]})


def landing_table(result: dict, config: RunConfig = NO_KEY) -> Table:
    """Where the random kills landed: per page, the last crash point each killed worker reached."""
    import pandas as pd

    runs = pd.DataFrame(result["runs"])
    runs["where"] = [("p" + r.split(".")[0][1:]) if "." in r else r for r in runs["landed"]]
    order = (["before page 1"] + [f"p{p}" for p in range(1, config.pages + 1)]
             + ["after the last page", "finished first"])
    table = runs.groupby("where").agg(kills=("try", "size"),
                                      duplicates=("duplicate_reports", lambda s: int((s > 0).sum())))
    table = table.reindex([w for w in order if w in table.index])
    return Table(table, "lesson 4, where the random kills landed",
                 Invariants(total="kills", within=("duplicates",)))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


LANDING_STEPS = (WAITING, "after_model_call", "after_visit", "after_intent", "after_submit",
                 "mid_commit", "after_commit")


def plot_random_vs_exhaustive(result: dict, share: dict, df, config: RunConfig = NO_KEY):
    """Exhaustive sweep vs random kills: what each found, the rates, and where the kills landed."""
    fig, (left, mid, right) = new_figure(12.5, 4.2, ncols=3,
                                         gridspec_kw={"width_ratios": [1, 1, 1.6]})
    exhaustive = df[df["sweep"] == "key off"]
    found = int((exhaustive["duplicate_reports"] > 0).sum())
    n, loop, hits = result["real_kills"], result["kills_in_page_loop"], result["duplicates_hit"]
    # left: what each method found
    xs = [0, 1]
    left.bar(xs, [found, hits], color=[COLORS["blue"], COLORS["orange"]], width=0.6)
    lesson = [LESSON_FIGURES["duplicate_points_no_key"], LESSON_RANDOM["duplicates_hit"]]
    for x, v, total in ((0, found, f"of {len(exhaustive)} points"), (1, hits, f"of {n} kills")):
        left.annotate(f"{v}\n{total}", (x, max(v, lesson[x])), xytext=(0, 5),
                      textcoords="offset points", ha="center", fontsize=9)
    left.scatter(xs, lesson, marker="_", s=900, color=LESSON_STYLE["color"], linewidths=2.5,
                 zorder=3, label=f"lesson: {lesson[0]} of 51 points / {lesson[1]} of "
                                 f"{LESSON_RANDOM['real_kills']} kills")
    left.set_xticks(xs, ["exhaustive sweep", "random kills"])
    left.set_ylabel("runs with a duplicate report")
    left.set_ylim(0, max(found, hits, *lesson) * 1.5)
    left.set_title("Duplicates found", fontsize=10)
    left.legend(fontsize=8, loc="upper right")
    # middle: per-kill rates
    rates = [("window share\nof a run's life", share["share_of_life"], COLORS["red"]),
             ("observed\nhits / kills", hits / n if n else 0, COLORS["orange"]),
             ("95% upper bound\n(exact, from the hits)", upper_bound(hits, loop) or 0,
              COLORS["purple"])]
    mid.bar(range(3), [r[1] * 100 for r in rates], color=[r[2] for r in rates], width=0.6)
    upper = share["share_with_submit"]
    mid.bar(0, (upper - share["share_of_life"]) * 100, bottom=share["share_of_life"] * 100,
            width=0.6, color="white", edgecolor=COLORS["red"], hatch="//",
            label="counting the whole submit")
    for i, (_, v, _c) in enumerate(rates):
        shown = f"{v:.1%}" if i else f"{v:.1%} to {upper:.1%}"
        mid.annotate(shown, (i, (upper if i == 0 else v) * 100), xytext=(0, 3),
                     textcoords="offset points", ha="center", fontsize=9)
    mid.axhline(300 / LESSON_RANDOM["real_kills"], **LESSON_STYLE,
                label=f"rule of three, had the lesson's {LESSON_RANDOM['real_kills']} kills "
                      f"found none: {3 / LESSON_RANDOM['real_kills']:.1%}")
    mid.set_xticks(range(3), [r[0] for r in rates], fontsize=8)
    mid.set_ylabel("rate per kill (%)")
    mid.set_ylim(0, max(max(r[1] for r in rates) * 100, upper * 100,
                        300 / LESSON_RANDOM["real_kills"]) * 1.45)
    mid.set_title("What random kills can tell you", fontsize=10)
    mid.legend(fontsize=8, loc="upper left")
    # right: where the kills landed, by page and by the last step reached
    killed = [r for r in result["runs"] if r["killed"]]
    columns = ["before\np1", *[f"p{p}" for p in range(1, config.pages + 1)], "after\nlast"]

    def column(landed: str) -> int:
        if landed == "before page 1":
            return 0
        if landed == "after the last page":
            return len(columns) - 1
        return int(landed.split(".")[0][1:])

    bottom = [0] * len(columns)
    phases = [("set-up / after the last page", COLORS["grey"], "",
               lambda s: "." not in s)]
    phases += [(step, SERIES[i], "", (lambda st: lambda s: s.endswith("." + st))(step))
               for i, step in enumerate(LANDING_STEPS)]
    for label, color, hatch, match in phases:
        counts = [0] * len(columns)
        for r in killed:
            if match(r["landed"]):
                counts[column(r["landed"])] += 1
        if any(counts):
            right.bar(range(len(columns)), counts, bottom=bottom, color=color, hatch=hatch,
                      edgecolor="white", linewidth=0.5, label=label)
            bottom = [b + c for b, c in zip(bottom, counts)]
    for r in killed:
        if r["duplicate_reports"]:
            x = column(r["landed"])
            right.annotate("dup", (x, bottom[x]), xytext=(0, 2), textcoords="offset points",
                           ha="center", fontsize=7, color=COLORS["red"])
    right.set_xticks(range(len(columns)), columns, fontsize=7)
    right.set_xlabel("page where the kill landed")
    right.set_ylim(0, max(bottom) * 1.3)
    right.set_ylabel("random kills")
    right.set_title(f"Where the kills landed: {loop} of {n} inside the page loop", fontsize=10)
    right.legend(fontsize=7, loc="upper right", title="last point reached", title_fontsize=7)
    fig.suptitle(f"Exhaustive crash points vs {result['tries']} random kills from outside "
                 f"({describe_config(config)})", fontsize=11)
    return fig


# --- verdicts per crash point --------------------------------------------------------------------

def plot_verdict_strips(df, rows: list[str], *, title: str, highlight: str | None = None,
                  note: str = ""):
    """One strip per configuration, one cell per crash point, coloured (and hatched) by verdict.

    The danger-window points of the bug pages (after_submit, mid_commit) are marked above.
    """
    fig, ax = new_figure(11, 1.3 + 0.75 * len(rows))
    first = df[df["sweep"] == rows[0]]
    for y, name in enumerate(rows):
        verdict_row(ax, df[df["sweep"] == name], y, width=0.92)
    marks = first[first["label"].isin(WINDOW_LABELS) & first["page"].isin(
        first.loc[first["label"] == "after_submit", "page"])]
    ax.scatter(marks["index"], [-0.62] * len(marks), marker="v", color=COLORS["red"], s=30,
               label="danger window: after_submit, mid_commit", clip_on=False)
    if highlight is not None and highlight in set(first["crash_point"]):
        x = int(first.loc[first["crash_point"] == highlight, "index"].iloc[0])
        ax.bar(x, len(rows) - 0.1, bottom=-0.45, width=1.0, fill=False,
               edgecolor=COLORS["black"], linewidth=1.8, label=highlight)
    labels = []
    for name in rows:
        counts = df[df["sweep"] == name]["verdict"].value_counts()
        bad = ", ".join(f"{counts[v]} {v}" for v in VERDICTS if v != "correct" and v in counts)
        labels.append(f"{name}\n{bad or 'all correct'}")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylim(len(rows) - 0.45, -0.8)
    page_ticks(ax, first)
    ax.set_xlabel("crash point (grouped by page; p3 = first point of page 3)")
    ax.set_title(title + (f"\n{note}" if note else ""), fontsize=10)
    handles, names = ax.get_legend_handles_labels()
    handles += verdict_handles(df[df["sweep"].isin(rows)]["verdict"])
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def plot_key(df):
    """Verdict per crash point without and with the idempotency key (snapshot per page, 51 points)."""
    found = int((df[df["sweep"] == "key off"]["duplicate_reports"] > 0).sum())
    return plot_verdict_strips(
        df, list(KEY_SWEEPS),
        title="Duplicates per crash point: snapshot after every page, intents off",
        note=f"this machine: {found} points duplicate without the key; lesson: "
             f"{LESSON_FIGURES['duplicate_points_no_key']}")


def plot_choices(df):
    """Verdict per crash point for the three choices (log store with intents, 54 points)."""
    eff = df[df["sweep"] == "effectively once"]
    return plot_verdict_strips(
        df, list(CHOICES), title="Three choices for the danger window: event log with intents",
        note=f"effectively once: {int((eff['verdict'] == 'correct').sum())} of {len(eff)} runs "
             f"correct here; lesson: {LESSON_FIGURES['log_runs_correct']} of 54")


# --- the panel -----------------------------------------------------------------------------------

def panel_plot(df, config: RunConfig, highlight: str):
    """The panel's sweep as one verdict strip, with the lesson's figure where it gives one."""
    d = df.assign(sweep="this sweep")
    note = describe_config(config)
    if config == NO_KEY:
        note += f"; lesson: {LESSON_FIGURES['duplicate_points_no_key']} points duplicate"
    elif config == CHOICES["effectively once"]:
        note += f"; lesson: {LESSON_FIGURES['log_runs_correct']} of 54 correct"
    return plot_verdict_strips(d, ["this sweep"], title="Verdict per crash point", highlight=highlight,
                         note=note)


def panel(base: RunConfig = CHOICES["effectively once"],
          crash_point: str = "p3.after_submit") -> CrashPanel:
    """Lesson 4's panel: store, key, intent, pending; the default point is page 3's after_submit.

    It shares the cache of the sweeps this kernel already ran, so its first Run does not repeat them.
    """
    return CrashPanel(name="04-danger-window", base=base, plot=panel_plot,
                      crash_point=crash_point,
                      knobs=["store", "idempotency_key", "intent", "pending"],
                      title="The danger window: verdict per crash point")


# --- exercises -----------------------------------------------------------------------------------

@exercise("4.1", "With a snapshot after every page, intents off and the idempotency key off, which "
          "crash points leave a report filed twice? Answer with a list of crash-point names "
          "(e.g. ['p2.after_visit', 'p5.mid_commit']) or a list of steps (e.g. ['after_visit']).",
          "'after_submit' and 'mid_commit' on pages 3, 7 and 10 (p3.after_submit, p3.mid_commit, "
          "p7.after_submit, ...). In both "
          "the report is in the tracker and the page's snapshot is not yet durable, so the resume "
          "redoes the page and files it again. After the commit the page is done; before the "
          "submit there is nothing to file twice. Six points of 51: the lesson's figure.")
def _ex_4_1(answer):
    records = [r for r in records_for(NO_KEY) if r.duplicate_reports]
    names, steps = [r.crash_point for r in records], sorted({r.label for r in records})
    by_name = assess(answer, names, what="the crash points that file a report twice")
    if by_name.right:
        return by_name.reply()
    by_step = assess(answer, steps, what=f"the steps that file a report twice (on every bug page, "
                                         f"{len(names)} points in all)")
    if by_step.right:
        return by_step.reply()
    return by_name.reply(hint=" Look for the points where the tracker already has the report but "
                              "the page's snapshot is not yet durable; the key-off strip of the "
                              "figure shows them.")


@exercise("4.2", "Killed at 'after_intent' on page 3 (the intent is durable, the report not yet "
          "filed): which of the three choices ends with a report lost? Answer 'at most once', "
          "'at least once' or 'effectively once'.",
          "'at most once'. Recovery finds a pending intent and cannot know whether the report was "
          "filed; at most once gives the page up (an 'aborted' event), so a report that was never "
          "filed stays unfiled. The two redo choices file it on resume; with the key, a redo "
          "after a filed report is ignored by the tracker, which is why only effectively once is "
          "right at every point.")
def _ex_4_2(answer):
    losing = [name for name, cfg in CHOICES.items()
              if results.point(cfg.replace(pages=4), "p3.after_intent").lost_reports]
    truth = losing[0] if len(losing) == 1 else losing
    return assess(answer, truth, what="the choice that loses the report (4-page run)").reply(
        hint=" Which choice does not redo a pending intent? Look at the after_intent cells of "
             "the three strips.")


# --- common wrong statements --------------------------------------------------------------------

AT_MOST_ONCE = CHOICES["at most once"]
#: At most once with the key on: a configuration the page does not show (statement Q4.3).
ABORT_WITH_KEY = AT_MOST_ONCE.replace(idempotency_key=True)


def duplicate_names(config: RunConfig) -> list[str]:
    return [r.crash_point for r in results.sweep_once(config) if r.duplicate_reports]


#: The source text's random kills: 39 real kills.
TEXT_REAL_KILLS = 39


def random_kill_odds(kills: int = TEXT_REAL_KILLS) -> dict:
    """The danger windows' share of a run's life (three traced runs, the random-kill world), and
    the chance that `kills` uniform random kills hit a window at least once."""
    share = window_share(traced_runs(NO_KEY, latency_ms=RANDOM_KILL_LATENCY_MS))
    low, high = share["share_of_life"], share["share_with_submit"]
    return {"share_low": low, "share_high": high,
            "p_hit_low": 1 - (1 - low) ** kills, "p_hit_high": 1 - (1 - high) ** kills,
            "kills_for_95": _kills_for(0.95, high), "kills": kills}


def _kills_for(p: float, share: float) -> int:
    return math.ceil(math.log(1 - p) / math.log(1 - share)) if 0 < share < 1 else 0


@statement("Q4.1", "If forty random kills find no duplicate report, the worker files no "
           "duplicates.",
           "False. The danger windows are a small share of a run's life, so random kills can miss "
           "every one of them while the bug is there. Zero failures in n tries only bounds the "
           "rate below about 3/n (the rule of three, a bound for zero failures only), and says "
           "nothing about which points were never tried. The exhaustive sweep kills each crash "
           "point once and finds every duplicate point, on every machine.")
def _q4_1():
    odds = random_kill_odds()
    found = len(duplicate_names(NO_KEY))
    miss_low, miss_high = 1 - odds["p_hit_high"], 1 - odds["p_hit_low"]
    return Measured(found == 0 or miss_high == 0,
                    f"Measured just now: the exhaustive sweep finds {found} crash points that "
                    f"file a report twice, so the worker does. The windows cover "
                    f"{100 * odds['share_low']:.1f}% to {100 * odds['share_high']:.1f}% of a "
                    f"run's life, so {odds['kills']} random kills miss them all with a chance of "
                    f"{100 * miss_low:.0f}% to {100 * miss_high:.0f}%; a clean result would only "
                    f"bound the rate below 3/{odds['kills']} = "
                    f"{100 * 3 / odds['kills']:.1f}%.")


@statement("Q4.2", "At most once is safe: nothing is ever filed twice, and nothing is lost.",
           "False. At most once never files twice, but it gives up a page whose report may not "
           "have been filed: killed at after_intent, the report is lost. And killed after the "
           "submit, it gives up a page whose report *was* filed: the tracker and the agent's "
           "result disagree.")
def _q4_2():
    records = results.sweep_once(AT_MOST_ONCE)
    s = summarize(records)
    lost = [r.crash_point for r in records if r.lost_reports]
    return Measured(s["duplicate_points"] == 0 and s["lost_points"] == 0,
                    f"Measured (at most once, {s['crash_points']} points): "
                    f"{s['duplicate_points']} points file twice, {s['lost_points']} lose a report "
                    f"({', '.join(lost)}).")


@statement("Q4.3", "With the idempotency key on, at most once (pending intents aborted) loses no "
           "report.",
           "False. The key makes a second filing harmless, but at most once never files again: "
           "killed after the intent and before the submit, the page is given up and its report "
           "was never filed, key or no key. The key only helps a choice that redoes.")
def _q4_3():
    records = results.sweep_once(ABORT_WITH_KEY)
    lost = [r.crash_point for r in records if r.lost_reports]
    return Measured(not lost, f"Measured just now (event log, intents on, key on, pending "
                    f"intents aborted, {len(records)} points): {len(lost)} points lose a report "
                    f"({', '.join(lost)}).")


# --- what the lesson says its run found (each sentence checked against that run) -------------

CLAIMS = Claims(4)


def _design_sweep(name: str):
    df = danger_sweeps()
    return df[df["sweep"] == name]


def _point_names(d) -> list[str]:
    return [f"`{n}`" for n in d["crash_point"]]


@CLAIMS.claim("While the worker was paused, the tracker already held page {page}'s report "
              "(tracker: pages {held}) and the checkpoint still said the next page to do was "
              "{next}. Both resumes redid page {page}, because that is all the checkpoint allows: "
              "without the key the tracker ended with pages {off}, the report filed twice; with "
              "the key, with pages {on}, once.")
def inside_the_window_both_redo():
    t = window_demo().df
    off, on = t.loc["off"], t.loc["on"]
    page = 3
    holds = (off["tracker pages (paused)"] == [page] == on["tracker pages (paused)"]
             and off["checkpoint: next page"] == page == on["checkpoint: next page"]
             and off["duplicate reports"] == 1 and on["duplicate reports"] == 0)
    return holds, {"page": page, "held": off["tracker pages (paused)"],
                   "next": int(off["checkpoint: next page"]),
                   "off": off["tracker pages (after resume)"],
                   "on": on["tracker pages (after resume)"]}


@CLAIMS.claim("Without the key, {n} of {points} crash points filed a report twice (the lesson: "
              "{lesson}): {names}.")
def no_key_duplicates():
    d = _design_sweep("key off")
    dup = d[d["duplicate_reports"] > 0]
    return (len(dup) == LESSON_FIGURES["duplicate_points_no_key"],
            {"n": len(dup), "points": len(d), "lesson": LESSON_FIGURES["duplicate_points_no_key"],
             "names": _point_names(dup)})


@CLAIMS.claim("Two points on each bug page (pages {pages}), and always the same two: "
              "{labels}. In both the report is in the tracker and the page's snapshot is not yet "
              "durable. With the key, and still no intent, {with_key} of {points} points filed "
              "twice: for a redo the key alone is enough.")
def always_the_same_two():
    d = _design_sweep("key off")
    dup = d[d["duplicate_reports"] > 0]
    with_key = _design_sweep("key on")
    bugs = Site.load(NO_KEY.pages).bug_pages
    per_page = dup.groupby("page")["label"].apply(lambda v: tuple(sorted(v)))
    holds = (sorted(per_page.index) == bugs
             and set(per_page) == {tuple(sorted(WINDOW_LABELS))}
             and int((with_key["duplicate_reports"] > 0).sum()) == 0)
    return holds, {"pages": bugs, "labels": [f"`{x}`" for x in WINDOW_LABELS],
                   "with_key": int((with_key["duplicate_reports"] > 0).sum()),
                   "points": len(with_key)}


@CLAIMS.claim("**At most once** filed nothing twice ({dup} points), and paid in two ways. "
              "Killed after the intent, before the submit, the report was never filed and "
              "recovery gave the page up: lost at {lost} points ({lost_names}). Killed after the "
              "submit, the report *was* filed but the agent gave the page up: at {disagree} "
              "points ({disagree_names}) the tracker holds a report the agent's result does not, "
              "and the three-way check (tracker == memory == rebuild from disk) fails.")
def at_most_once_loses_or_disagrees():
    d = _design_sweep("at most once")
    lost, disagree = d[d["verdict"] == "lost"], d[d["verdict"] == "tracker disagrees"]
    holds = (int((d["duplicate_reports"] > 0).sum()) == 0 and len(lost) > 0
             and set(lost["label"]) == {"after_intent"}
             and set(disagree["label"]) <= set(WINDOW_LABELS) and len(disagree) > 0)
    return holds, {"dup": int((d["duplicate_reports"] > 0).sum()), "lost": len(lost),
                   "lost_names": _point_names(lost), "disagree": len(disagree),
                   "disagree_names": _point_names(disagree)}


@CLAIMS.claim("**At least once** lost nothing ({lost} points) and filed twice at {dup} points, "
              "whenever the kill fell in the window ({labels}). It differs from at most once "
              "only in what recovery does with a pending intent.")
def at_least_once_duplicates():
    d = _design_sweep("at least once")
    dup = d[d["duplicate_reports"] > 0]
    return (int((d["lost_reports"] > 0).sum()) == 0 and len(dup) > 0
            and set(dup["label"]) <= set(WINDOW_LABELS),
            {"lost": int((d["lost_reports"] > 0).sum()), "dup": len(dup),
             "labels": [f"`{x}`" for x in sorted(set(dup["label"]))]})


@CLAIMS.claim("**Effectively once** is at least once with the key: redo with the same key, and "
              "the tracker makes the redo harmless. It was right at {correct} of {points} crash "
              "points (the lesson: {lesson} of 54), the only choice right at every one.")
def effectively_once_always_right():
    d = _design_sweep("effectively once")
    correct = int((d["verdict"] == "correct").sum())
    others = [n for n in CHOICES if n != "effectively once"
              and int((_design_sweep(n)["verdict"] == "correct").sum()) == len(_design_sweep(n))]
    return (correct == len(d) and not others,
            {"correct": correct, "points": len(d), "lesson": LESSON_FIGURES["log_runs_correct"]})


@CLAIMS.claim("On this traced run the {windows} danger windows cover {share} of the page loop "
              "({window_us} µs of {loop_ms} ms): a kill has to land in one of those stretches to "
              "duplicate a report.")
def windows_are_slivers():
    ops = operations(lesson_trace())
    share = timeline_share(ops, danger_windows(ops))
    # robust to a busy machine: a stall inside a commit widens a window, but the windows stay a
    # minority of the loop (the model calls, visits and submits of twelve pages)
    return (share["windows"] == len(Site.load(NO_KEY.pages).bug_pages) and share["share"] < 0.5,
            {"windows": share["windows"], "share": f"{share['share']:.1%}",
             "window_us": round(share["window_us"]), "loop_ms": f"{share['loop_us'] / 1e3:.2f}"})


@CLAIMS.claim("Of {n} real kills, {hits} filed a report twice ({rate}), from {distinct} distinct "
              "crash points; the windows' share of a run's life predicts {low} to {high} hits (a count "
              "this small swings widely from one run of random kills to the next). "
              "The exhaustive sweep found all {found} duplicate points with {points} kills, one "
              "per point, and finds the same on every run.")
def random_kills_against_the_sweep():
    result, share = random_experiment()
    d = _design_sweep("key off")
    found = int((d["duplicate_reports"] > 0).sum())
    n, hits = result["real_kills"], result["duplicates_hit"]
    distinct = len(hit_points(result))
    return (found == LESSON_FIGURES["duplicate_points_no_key"] and distinct <= found
            and hits <= n,
            {"n": n, "hits": hits, "rate": _pct(hits / n) if n else "-", "distinct": distinct,
             "low": f"{n * share['share_of_life']:.2f}",
             "high": f"{n * share['share_with_submit']:.2f}", "found": found, "points": len(d)})


@CLAIMS.claim("So a run of random kills proves little. After {hits} hits in {loop} kills inside "
              "the page loop, the exact 95% upper bound on the hit rate is {bound}; the rule of "
              "three (3/n = {three}) is that bound's shortcut for a run with no failure, and "
              "{which}.")
def random_kills_bound_the_rate_loosely():
    result, _ = random_experiment()
    loop, hits = result["kills_in_page_loop"], result["duplicates_hit"]
    bound = upper_bound(hits, loop)
    which = ("this run had none, so it applies" if hits == 0 else
             "this run had failures, so it does not apply here")
    return (bound is None or bound > hits / loop,
            {"hits": hits, "loop": loop, "bound": _pct(bound), "three": _pct(rule_of_three(loop)),
             "which": which})


# --- practice: a design and a site the lesson did not run ----------------------------------------

PRACTICE_VERDICTS = ("correct", "duplicate", "lost", "tracker disagrees", "another verdict")


def _describe(config: RunConfig) -> str:
    store = {"snapshot": "a snapshot after every page", "log": "the event log"}[config.store]
    bugs = Site.load(config.pages).bug_pages
    where = (f"page {bugs[0]}" if len(bugs) == 1 else
             "pages " + ", ".join(map(str, bugs[:-1])) + f" and {bugs[-1]}")
    pending = f", pending intents {config.pending}" + ("ed" if config.pending == "redo" else "ed")
    return (f"{store}, intents {'on' if config.intent else 'off'}"
            + (pending.replace("redoed", "redone") if config.intent else "")
            + f", idempotency key {'on' if config.idempotency_key else 'off'}, on a site of "
              f"{config.pages} pages (bugs on {where}).")


def drawn_site_config(rng, longest: int = 15) -> RunConfig:
    """A design and a site length the lesson did not run (it runs only 12 pages)."""
    store = rng.choice(["snapshot", "log"])
    intent = rng.choice([True, False])
    return RunConfig(store=store, intent=intent, idempotency_key=rng.choice([True, False]),
                     pending=rng.choice(["redo", "abort"]) if intent else "redo",
                     pages=rng.choice([n for n in range(4, longest + 1) if n != 12]))


def practice_problem(seed: int) -> Problem:
    """A design on a site the lesson did not run, and one question: the verdict at one point of a
    bug page, or how many crash points file a report twice (or lose one)."""
    from ...experiment import crash_points

    rng = drawn(seed, 4)
    kind = rng.choice(["verdict", "duplicates", "lost"])
    config = drawn_site_config(rng, longest=15 if kind == "verdict" else 10)   # a sweep: short
    setting = _describe(config)
    info = {"config": config, "kind": kind}
    if kind == "verdict":
        bugs = Site.load(config.pages).bug_pages
        page = rng.choice(bugs)
        names = [p.name for p in crash_points(config) if p.page == page]
        name = rng.choice(names)
        form = choice(PRACTICE_VERDICTS)

        def measure() -> Answer:
            r = results.point(config, name)
            word = r.verdict if r.verdict in PRACTICE_VERDICTS else "another verdict"
            return Answer(word, f"killed at {name} and resumed: {r.verdict} (tracker pages "
                          f"{r.tracker_pages}, the agent's findings {r.memory_findings}).")
        return Problem(4, seed, setting, f"The worker is killed at `{name}` and resumed. What is "
                       "the verdict of the three-way check?", form, measure,
                       "Is the report in the tracker at that point, and what does recovery do "
                       "with the page: redo it (with or without the key) or give it up?",
                       drawn={**info, "point": name})
    what = "file a report twice" if kind == "duplicates" else "lose a report"

    def measure() -> Answer:
        records = results.sweep_once(config)
        hit = [r.crash_point for r in records
               if (r.duplicate_reports if kind == "duplicates" else r.lost_reports)]
        return Answer(len(hit), f"{len(hit)} of {len(records)} crash points {what}"
                      + (f": {', '.join(hit)}." if hit else "."))
    return Problem(4, seed, setting, f"Every crash point is killed and resumed. At how many of "
                   f"them does the run {what}?", NUMBER, measure,
                   "List a bug page's points and ask, for each, whether the report is filed yet "
                   "and what recovery does with the page; then count over the bug pages.",
                   unit="points", drawn=info)


#: The transfer question: a design and a site the lesson did not run (`practice_problem`).
TRANSFER_SEED = 2
TRANSFER = as_exercise("4.3", practice_problem(TRANSFER_SEED), __name__)


LESSON = Lesson(
    number=4,
    notebook="04_danger_window",
    title="The danger window: the report is filed, the checkpoint is not",
    short_title="the danger window",
    question="The report is filed, the checkpoint is not: now what?",
    teaches="the report is filed, the checkpoint is not: at most once, at least once, "
            "effectively once (intent + deterministic key); exhaustive vs random kills and "
            "the rule of three",
    objectives=(
        "point at the danger window in the worker's page loop, and say why the process cannot "
        "know from the inside whether its last side effect happened;",
        "predict which crash points duplicate a report, for a design you have not seen run;",
        "choose between at most once, at least once and effectively once, and say what each "
        "costs;",
        "explain why an exhaustive crash-point sweep finds what random kills miss (the rule "
        "of three).",
    ),
    prerequisites="Lessons 0 to 3; basic SQL (`INSERT`, `UNIQUE`).",
    panel=panel,
    exercises=defined_in(__name__),
    claims=CLAIMS,
    practice=practice_problem,
)

