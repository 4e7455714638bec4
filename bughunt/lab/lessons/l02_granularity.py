"""Lesson 2, checkpoint granularity: how much work a crash throws away, and what saving costs.

Three designs over the lesson's 51 crash points (intents off): no checkpoint, a snapshot after every
page (the lesson's step), a snapshot after every operation (model answer, visit, report, page).
"""

from __future__ import annotations

from ...config import RunConfig
from ...experiment import LESSON_FIGURES, clean_run, frame, summarize
from ...world import Site
from .. import results
from ..claims import Claims
from ..judges import Measured, assess, defined_in, exercise, statement, within
from ..practice import NUMBER, Answer, Problem, as_exercise, drawn
from ..crash_panel import CrashPanel
from ..plots import explain_average, plot_points
from ..style import COLORS, lesson_line, new_figure, page_ticks
from ..registry import Lesson

DESIGNS = {
    "none": RunConfig(store="none", intent=False),
    "per page": RunConfig(store="snapshot", intent=False),
    "per operation": RunConfig(store="snapshot", granularity="op", intent=False),
}
LESSON_AVG = {"none": LESSON_FIGURES["redo_none"], "per page": LESSON_FIGURES["redo_snapshot"]}
DESIGN_COLORS = {"none": COLORS["red"], "per page": COLORS["blue"],
                 "per operation": COLORS["green"]}


def redone_by_design(designs: dict[str, RunConfig] = DESIGNS, *, progress=None):
    """Crash at every point of every design, resume, count redone calls on the bill (one pool;
    the runs stay in the lab's results cache for the panel and the exercises)."""
    import pandas as pd

    return pd.concat([frame(records).assign(sweep=name, design=name)
                      for name, records in results.sweeps_once(designs, progress=progress).items()],
                     ignore_index=True)


def granularity_table(df, designs: dict[str, RunConfig] = DESIGNS):
    """Per design: average and maximum redone calls, the lesson's average, checkpoint writes."""
    import pandas as pd

    rows = []
    for name, cfg in designs.items():
        d = df[df["design"] == name]
        writes = clean_run(cfg)["checkpoint_writes"]["count"]
        rows.append({"design": name, "crash points": len(d),
                     "avg redone calls": round(d["redone_model_calls"].mean(), 2),
                     "lesson avg": LESSON_AVG.get(name, "-"),
                     "max redone calls": int(d["redone_model_calls"].max()),
                     "checkpoint writes per clean run": writes})
    return pd.DataFrame(rows).set_index("design")


def explain_redone_averages(df) -> str:
    """Where the averages come from, counted from the measured table."""
    return explain_average(df, "redone_model_calls", "redone calls")


def plot_redone(df):
    """Redone model calls at every crash point by design, the lesson's averages dashed.

    Two rows sharing the crash-point axis: no checkpoint on its own scale above, the two snapshot
    designs side by side below, where their bars would otherwise hide each other.
    """
    fig, (top, bottom) = new_figure(10, 5.2, nrows=2, sharex=True,
                                    gridspec_kw={"height_ratios": [3, 2]})
    d = df[df["design"] == "none"]
    top.bar(d["index"], d["redone_model_calls"], width=0.8, color=DESIGN_COLORS["none"],
            label=f"none: avg {d['redone_model_calls'].mean():.2f}")
    lesson_line(top, LESSON_AVG["none"], f"lesson avg, none: {LESSON_AVG['none']}")
    top.set_ylabel("redone calls (calls)")
    top.set_title("Model calls paid twice after a crash, by checkpoint granularity "
                  "(51 crash points, intents off)")
    top.legend(fontsize=8, loc="upper left")
    for offset, name in ((-0.2, "per page"), (0.2, "per operation")):
        d = df[df["design"] == name]
        bottom.bar(d["index"] + offset, d["redone_model_calls"], width=0.4,
                   color=DESIGN_COLORS[name], label=f"{name}: avg {d['redone_model_calls'].mean():.2f}")
    lesson_line(bottom, LESSON_AVG["per page"], f"lesson avg, per page: {LESSON_AVG['per page']}")
    bottom.set_ylim(0, 1.9)
    bottom.set_yticks([0, 1])
    bottom.set_ylabel("redone calls (calls)")
    bottom.legend(fontsize=8, loc="upper left", ncols=3)
    page_ticks(bottom, df[df["design"] == "none"])
    bottom.set_xlabel("crash point (grouped by page; p3 = first point of page 3)")
    return fig


def plot_tradeoff(table):
    """Less lost, more written: average redone calls against checkpoint writes per clean run."""
    fig, ax = new_figure(6, 3.6)
    for name, row in table.iterrows():
        x, y = row["checkpoint writes per clean run"], row["avg redone calls"]
        ax.scatter([x], [y], s=80, color=DESIGN_COLORS.get(name, COLORS["black"]), zorder=3)
        ax.annotate(f"{name}\n{y:.2f} calls, {x} writes", (x, y), xytext=(8, 4),
                    textcoords="offset points", fontsize=9)
    ax.set_xlabel("checkpoint writes in one clean run (writes)")
    ax.set_ylabel("avg redone model calls (calls)")
    ax.set_title("Finer checkpoints: less redone, more written")
    ax.set_xlim(-3, table["checkpoint writes per clean run"].max() * 1.45)
    ax.set_ylim(-0.5, table["avg redone calls"].max() * 1.25)
    return fig


def panel_plot(df, config, highlight):
    design = ("none" if config.store == "none"
              else "per operation" if config.granularity == "op" else "per page")
    ref = (LESSON_AVG[design], design) if design in LESSON_AVG and config.pages == 12 else None
    return plot_points(df, config, highlight, metric="redone_model_calls", reference=ref)


def panel(base: RunConfig = DESIGNS["per page"],
          crash_point: str = "p6.after_visit") -> CrashPanel:
    """Lesson 2's panel: granularity, write mode, key, intent; crash point slider; Run sweep."""
    return CrashPanel(name="02-granularity", base=base, plot=panel_plot, crash_point=crash_point,
                      knobs=["checkpoint", "write_mode", "idempotency_key", "intent"],
                      title="Checkpoint granularity: redone model calls per crash point")


# --- exercises -----------------------------------------------------------------------------------

@exercise("2.1", "With no checkpoint at all, how many model calls are redone when the worker is "
          "killed at p10.after_visit?",
          "p10.after_visit is after page 10's model call and its visit. With no checkpoint the "
          "resume starts at page 1, so pages 1 to 10 are asked again: 10 calls. Nine of them are "
          "the pages that were done; the tenth is page 10's own, answered but never saved.")
def _ex_2_1(answer):
    truth = results.point(DESIGNS["none"], "p10.after_visit").redone_model_calls
    return assess(answer, truth, what="model calls redone").reply(
        hint=" Count the pages the resumed worker asks about again, including the page the kill "
             "interrupted.")


@exercise("2.2", "With a snapshot after every operation, which crash-point label is the only one "
          "that still redoes a model call? Answer with the label, e.g. 'after_visit'.",
          "'after_model_call': the answer has arrived and is billed, but its checkpoint is not yet "
          "written. That is the call in flight. Every checkpoint design, however fine, has such a "
          "moment, because a checkpoint can only be written after the answer is complete.")
def _ex_2_2(answer):
    records = results.sweep_once(DESIGNS["per operation"].replace(pages=4))
    labels = sorted({r.label for r in records if r.redone_model_calls})
    truth = labels[0] if len(labels) == 1 else labels
    return assess(answer, truth, what="the label that still redoes a call (4-page run)").reply(
        hint=" Run the panel with 'per operation' and look at which bars are not zero; their "
             "labels are in the point details.")


# --- transfer and common wrong statements -------------------------------------------------------

PER_PAGE, PER_OPERATION, NO_CHECKPOINT = (DESIGNS[d] for d in ("per page", "per operation", "none"))
LONG_RUN = 20


def long_run_table(pages: int = LONG_RUN):
    """No checkpoint vs a snapshot per page, on the lesson's 12 pages and on a longer run:
    average and maximum redone calls over every crash point (each a real kill and resume)."""
    import pandas as pd

    designs = {(name, n): cfg.replace(pages=n) for name, cfg in
               (("none", NO_CHECKPOINT), ("per page", PER_PAGE)) for n in (12, pages)}
    sweeps = results.sweeps_once({f"{name} {n}": cfg for (name, n), cfg in designs.items()})
    rows = []
    for (name, n), cfg in designs.items():
        s = summarize(sweeps[f"{name} {n}"])
        rows.append({"design": name, "pages": n, "crash points": s["crash_points"],
                     "avg redone calls": round(s["avg_redone_model_calls"], 2),
                     "max redone calls": s["max_redone_model_calls"]})
    return pd.DataFrame(rows).set_index(["design", "pages"])


def avg_redone(config: RunConfig) -> float:
    return round(summarize(results.sweep_once(config))["avg_redone_model_calls"], 2)


@statement("Q2.1", "A checkpoint after every operation removes all redone model calls.",
           "False. A checkpoint can only be written once the model's answer is complete. Between "
           "the call being billed and its answer being saved there is always a moment, the call "
           "in flight, where a kill pays for that call again.")
def _q2_1():
    redone = results.point(PER_OPERATION, "p5.after_model_call").redone_model_calls
    return Measured(redone == 0, f"Measured just now: per operation, killed at "
                    f"p5.after_model_call and resumed, {redone} call was paid twice.")


@statement("Q2.2", "A run that never crashes pays nothing for its checkpoints.",
           "False. Every checkpoint is a write on every run, crash or not; finer checkpoints mean "
           "more writes. Lesson 6 times them.")
def _q2_2():
    writes = {name: clean_run(cfg)["checkpoint_writes"]["count"]
              for name, cfg in (("per page", PER_PAGE), ("per operation", PER_OPERATION))}
    return Measured(all(w == 0 for w in writes.values()),
                    "Measured just now on a clean run (no crash): " + ", ".join(
                        f"{name} writes {w} checkpoints" for name, w in writes.items()) + ".")


@statement("Q2.3", "With a snapshot after every page, a crash in a long run costs no more model "
           "calls on average than a crash in a short one.",
           "True. A snapshot per page bounds the loss to the page that was interrupted, however "
           "long the run. Without a checkpoint the loss grows with the length of the run.")
def _q2_3():
    short, long_ = avg_redone(PER_PAGE), avg_redone(PER_PAGE.replace(pages=LONG_RUN))
    none_short = avg_redone(NO_CHECKPOINT)
    none_long = avg_redone(NO_CHECKPOINT.replace(pages=LONG_RUN))
    return Measured(abs(long_ - short) < 0.05,
                    f"Measured: per page, {short} calls on 12 pages and {long_} on {LONG_RUN}; "
                    f"with no checkpoint, {none_short} and {none_long}.")


# --- what the lesson says its run found (each sentence checked against that run) -------------

CLAIMS = Claims(2)


def _by_design(name: str):
    df = redone_by_design()
    return df[df["design"] == name]


@CLAIMS.claim("This machine measured {none} redone calls per crash with no checkpoint and {page} "
              "with a snapshot after every page, over the same {points} points: the lesson's "
              "{lesson_none} and {lesson_page}.")
def beside_the_lesson():
    none, page = (round(_by_design(n)["redone_model_calls"].mean(), 2) for n in ("none", "per page"))
    return ((none, page) == (LESSON_AVG["none"], LESSON_AVG["per page"]),
            {"none": none, "page": page, "points": len(_by_design("none")),
             "lesson_none": LESSON_AVG["none"], "lesson_page": LESSON_AVG["per page"]})


@CLAIMS.claim("**None:** a crash anywhere on page *p* redoes the calls of pages 1 to *p*. Weighted "
              "by the number of crash points per page (4, or 5 on a bug page) that is {total} "
              "calls over {points} points.")
def none_redoes_every_page_so_far():
    d = _by_design("none")
    wrong = d[d["redone_model_calls"] != d["page"]]
    return (wrong.empty, {"total": int(d["redone_model_calls"].sum()), "points": len(d)},
            f"at {', '.join(wrong['crash_point'])} the resume redid another number of calls")


@CLAIMS.claim("**Per page:** every point of page *p* before its snapshot is durable redoes one "
              "call, page *p*'s own; only `after_commit` redoes none. That is {points} − {pages} "
              "= {total} calls over {points} points.")
def per_page_redoes_one_call():
    d = _by_design("per page")
    want = (d["label"] != "after_commit").astype(int)
    wrong = d[d["redone_model_calls"] != want]
    return (wrong.empty, {"points": len(d), "pages": int((d["label"] == "after_commit").sum()),
                          "total": int(d["redone_model_calls"].sum())},
            f"at {', '.join(wrong['crash_point'])} the resume redid another number of calls")


@CLAIMS.claim("**Per operation:** only `after_model_call` redoes a call: the answer is billed and "
              "in memory, but not yet saved. That is the call in flight: one per page, {total} in "
              "all. Finer saving cannot remove it.")
def per_operation_redoes_only_the_call_in_flight():
    d = _by_design("per operation")
    redoing = sorted(set(d.loc[d["redone_model_calls"] > 0, "label"]))
    return (redoing == ["after_model_call"] and d["redone_model_calls"].max() == 1,
            {"total": int(d["redone_model_calls"].sum())},
            f"the labels that redo a call are {', '.join(redoing) or 'none'}")


@CLAIMS.claim("Per operation writes {ratio} times as often as per page ({op} checkpoint writes "
              "in a clean run against {page}) to win back the rest of a call per crash.")
def per_operation_writes_more():
    page, op = (clean_run(DESIGNS[n])["checkpoint_writes"]["count"]
                for n in ("per page", "per operation"))
    return op > page, {"ratio": f"{op / page:.2f}", "op": op, "page": page}


#: The same designs with the idempotency key off: which points file a report twice.
KEY_OFF = {name: DESIGNS[name].replace(idempotency_key=False) for name in ("per page",
                                                                          "per operation")}


def duplicating_labels(name: str) -> list[str]:
    records = results.sweeps_once(KEY_OFF)[name]
    return sorted({r.label for r in records if r.duplicate_reports})


@CLAIMS.claim("With the idempotency key off, a per-page snapshot files a report twice when the "
              "kill falls after the report and before the page's snapshot ({per_page}). Per "
              "operation saves \"report filed\" on its own, so only {per_operation} still "
              "duplicates: the danger window shrinks but does not close.")
def finer_checkpoints_shrink_the_window():
    page, op = duplicating_labels("per page"), duplicating_labels("per operation")
    return (set(op) < set(page) and bool(op),
            {"per_page": [f"`{x}`" for x in page], "per_operation": [f"`{x}`" for x in op]})


# --- practice: a design and a site the lesson did not run ----------------------------------------

PRACTICE_DESIGNS = {"none": "no checkpoint", "per page": "a snapshot after every page",
                    "per operation": "a snapshot after every operation"}


def practice_problem(seed: int) -> Problem:
    """A design on a site of a length the lesson did not run (not 12 or 20 pages), and one
    question: the average redone calls over every crash point, the calls redone at one point,
    or the label of the points that redo the most."""
    rng = drawn(seed, 2)
    design = rng.choice(list(PRACTICE_DESIGNS))
    pages = rng.choice([n for n in range(4, 19) if n not in (12, LONG_RUN)])
    config = DESIGNS[design].replace(pages=pages)
    bugs = Site.load(pages).bug_pages
    where = (f"page {bugs[0]}" if len(bugs) == 1 else
             "pages " + ", ".join(map(str, bugs[:-1])) + f" and {bugs[-1]}")
    setting = (f"{PRACTICE_DESIGNS[design]}, intents off, key on, on a site of {pages} pages "
               f"(bugs on {where}).")
    kind = rng.choice(["average", "point", "count"])
    if kind == "average":
        def measure() -> Answer:
            s = summarize(results.sweep_once(config))
            return Answer(round(s["avg_redone_model_calls"], 2),
                          f"{s['crash_points']} crash points, each killed and resumed: "
                          f"{s['avg_redone_model_calls']:.2f} redone calls on average.")
        return Problem(2, seed, setting, "Over every crash point, how many model calls does a "
                       "resume redo on average?", NUMBER, measure,
                       "Count, page by page, how many calls a crash at each of its points costs, "
                       "then average over all the points.", within(0.05), "calls",
                       {"design": design, "pages": pages, "kind": kind})
    if kind == "point":
        from ...experiment import crash_points
        names = [p.name for p in crash_points(config)]
        name = rng.choice(names)

        def measure() -> Answer:
            r = results.point(config, name)
            return Answer(r.redone_model_calls, f"killed at {name} and resumed: the bill shows "
                          f"{r.redone_model_calls} calls beyond a clean run's {pages}.")
        return Problem(2, seed, setting, f"The worker is killed at `{name}` and resumed. How many "
                       "model calls are paid twice?", NUMBER, measure,
                       "Which page does the resume start from, and is the call at the killed "
                       "point already saved?", unit="calls",
                       drawn={"design": design, "pages": pages, "kind": kind, "point": name})
    labels = ["after_model_call", "after_visit", "after_submit", "mid_commit", "after_commit"]

    def measure() -> Answer:
        records = results.sweep_once(config)
        n = sum(1 for r in records if r.redone_model_calls > 0)
        return Answer(n, f"{n} of {len(records)} crash points redo at least one call.")
    return Problem(2, seed, setting, "At how many of its crash points does a resume redo at least "
                   "one model call?", NUMBER, measure,
                   f"List a page's points ({', '.join(labels)}) and ask, for each, whether the "
                   "page's call is saved yet; then count over the pages.", unit="points",
                   drawn={"design": design, "pages": pages, "kind": kind})


#: The transfer question: a design and a site the lesson did not run (`practice_problem`).
TRANSFER_SEED = 10
TRANSFER = as_exercise("2.3", practice_problem(TRANSFER_SEED), __name__)


LESSON = Lesson(
    number=2,
    notebook="02_granularity",
    title="Checkpoint granularity: how fine should progress be saved?",
    short_title="checkpoint granularity",
    question="How fine should progress be saved?",
    teaches="natural checkpoint boundaries, the call in flight; none vs per page vs per "
            "operation (6.51 → 0.76 redone calls)",
    objectives=(
        "say where a checkpoint can sit (a natural boundary) and why the call in flight can "
        "always be paid twice, pointing at the line of the worker where it happens;",
        "predict, for a crash point and a checkpoint design, how many model calls a resume "
        "pays again;",
        "weigh the calls a crash redoes against the checkpoint writes every run pays.",
    ),
    prerequisites="Lessons 0 and 1.",
    panel=panel,
    exercises=defined_in(__name__),
    claims=CLAIMS,
    practice=practice_problem,
)

