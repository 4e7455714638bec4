"""Lesson 7, durable tasks: the figures, the panel, the exercises and the quiz over the lesson's
stories, which run the runtime's examples as real processes (`bughunt.durable.experiments`: a
first process killed by SIGKILL, closed or refused, then a resume, the tasks table read live
between them). This module starts no process itself.
"""

from __future__ import annotations

import html

import ipywidgets as W
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from ...durable import DEFAULT_RESTART_LIMIT
from ...durable.examples import TOOL_CRASH_POINTS
# The lesson's stories, run by the runtime's package; the notebook calls them from here, beside the
# figures and tables made of them.
from ...durable.experiments import (TEXT_QUERIES, TaskStory, builtin_limit_story,  # noqa: F401
                                    close_vs_crash, count_story, generation_story, lock_story,
                                    memo_story, read_only_proof, refusals, replay_cell,
                                    reset_story, restart_limit_story,
                                    tool_checkpoints, tool_story)
from ..panel import Panel, Result
from ..judges import Measured, assess, defined_in, exercise, statement
from ..style import COLORS, new_figure
from ..registry import Lesson

def plot_restart_limits(stories: dict):
    """One lane per restart limit: each start of a step that always dies, until the limit ends it.

    A cross is a process killed inside the step; the number above it is the restart count the
    runtime saw when that process opened the store; a square is the start that faulted instead.
    """
    fig, ax = new_figure(9, 1.0 + 0.9 * len(stories))
    for lane, (label, df) in enumerate(stories.items()):
        killed = df[df["exit"] == "SIGKILL"]
        ax.scatter(killed.index, [lane] * len(killed), marker="x", s=70, color=COLORS["red"],
                   label="killed by SIGKILL inside the step" if lane == 0 else None)
        ended = df[df["outcome"] != "—"]
        ax.scatter(ended.index, [lane] * len(ended), marker="s", s=90, color=COLORS["blue"],
                   label="faulted: restart_limit (not run)" if lane == 0 else None)
        for start, restarts in df["restarts at open"].items():
            ax.annotate(str(restarts), (start, lane), xytext=(0, 8), textcoords="offset points",
                        ha="center", fontsize=8)
        if ended.empty:
            ax.annotate("... and on", (df.index.max(), lane), xytext=(12, -3),
                        textcoords="offset points", fontsize=9)
    ax.set_yticks(range(len(stories)), list(stories))
    ax.set_ylim(len(stories) - 0.4, -0.6)
    ax.set_xticks(range(1, max(df.index.max() for df in stories.values()) + 1))
    ax.set_xlim(0.5, max(df.index.max() for df in stories.values()) + 1.2)
    ax.set_xlabel("start of the process (1 = first run); numbers: restarts counted at open")
    ax.set_ylabel("restart limit")
    ax.set_title("A step that always dies: the crash-loop limit ends it, no limit never does")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def plot_reset(df, limit: int = 3):
    """Restarts in a row (reset by progress) against cut-offs in total, per step the runtime ran;
    if the limit ended the task, the start where it did, with the count it found there."""
    runs = df[df["step"] != "—"].reset_index(drop=True)
    ended = df.iloc[-1]["what happened"]
    fig, ax = new_figure(9, 3.6)
    x = list(range(1, len(runs) + 1))
    bars = ax.bar(x, runs["restarts in a row"], color=COLORS["blue"],
                  label="restarts in a row when the step started (the runtime's count)")
    ax.bar_label(bars, fontsize=8)
    labels = [f"{i}\nstep {step}\n{what}" for i, (step, what) in
              enumerate(zip(runs["step"], runs["what happened"]), start=1)]
    if ended == "task faulted":
        # The last start ran no step: the runtime found the count at the limit and ended the task.
        count = int(runs["restarts in a row"].iloc[-1]) + 1
        last = ax.bar([len(x) + 1], [count], color=COLORS["red"], hatch="//", edgecolor="white",
                      label="the start where the count in a row reached the limit: no step ran")
        ax.bar_label(last, fontsize=8)
        labels.append(f"{len(x) + 1}\n(no step)\nfaulted")
        x = x + [len(x) + 1]
        title = (f"No progress: the count in a row reaches the limit ({limit}), and the task "
                 "ends faulted")
    else:
        title = (f"Progress resets the count in a row: {ended} after "
                 f"{df.iloc[-1]['cut-offs in total']} cut-offs, more than the limit")
    ax.plot(range(1, len(runs) + 1), runs["cut-offs in total"], marker="o",
            color=COLORS["orange"],
            label="cut-offs in total, after this start (a count that never resets)")
    ax.axhline(limit, color=COLORS["red"], linestyle="--", label=f"restart limit {limit}")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylim(0, max(limit, int(runs["cut-offs in total"].max())) + 2.5)
    ax.set_xlabel("each start of a step, in order (killed = SIGKILL inside the step)")
    ax.set_ylabel("count (restarts)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def replay_policy_table(cells: list[dict] | None = None):
    """The 2x2 table: stored policy (rows) x current policy (columns), every cell measured."""
    import pandas as pd

    cells = cells or [replay_cell(s, c) for s in ("safe", "unsafe") for c in ("safe", "unsafe")]
    df = pd.DataFrame(cells)
    df["cell"] = df.apply(lambda r: ("ran again: " if r["tool ran again"] else "not run: ")
                          + f"{r['notes.txt lines']} line(s), {r['result']}", axis=1)
    table = df.pivot(index="stored", columns="current", values="cell")
    table.index.name, table.columns.name = "stored with the intent ↓", "declared now →"
    return table


def plot_replay(cells: list[dict], highlight: tuple | None = None):
    """The 2x2 grid: a filled cell re-ran the tool (its effect doubled), an empty cell did not."""
    fig, ax = new_figure(5.6, 3.6)
    order = ("safe", "unsafe")
    for c in cells:
        x, y = order.index(c["current"]), order.index(c["stored"])
        ran = c["tool ran again"]
        fill = to_rgba(COLORS["orange"] if ran else COLORS["sky"], 0.9 if ran else 0.35)
        ax.add_patch(Rectangle((x - 0.48, y - 0.48), 0.96, 0.96, facecolor=fill,
                               hatch="//" if ran else "", edgecolor=COLORS["black"],
                               linewidth=3 if highlight == (c["stored"], c["current"]) else 0))
        ax.text(x, y, ("re-ran the tool\n" if ran else "not re-run:\n'interrupted'\n")
                + f"notes.txt: {c['notes.txt lines']} line(s)", ha="center", va="center",
                fontsize=9, bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none"})
    ax.set_xlim(-0.5, 1.5)
    ax.set_ylim(1.5, -0.5)
    ax.set_xticks([0, 1], order)
    ax.set_yticks([0, 1], order)
    ax.set_xlabel("replay declared by the tool now (after the restart)")
    ax.set_ylabel("replay stored with the intent")
    reran = [f"{c['stored']} × {c['current']}" for c in cells if c["tool ran again"]]
    ax.set_title("Killed inside the tool: run again only in " + (", ".join(reran) or "no cell")
                 if len(cells) == 4 else f"Killed inside the tool: {len(cells)} of 4 cells run")
    return fig


# --- peers ---------------------------------------------------------------------------------------

#: Crash-loop policies of durable-execution peers, from their public documentation.
PEERS = [
    {"system": "Temporal", "policy": "activities retry with unlimited attempts by default; "
     "workflow tasks retry until the workflow times out (unlimited by default)",
     "at the limit": "never stops by itself", "source": "docs.temporal.io/encyclopedia/"
     "retry-policies"},
    {"system": "DBOS", "policy": "max_recovery_attempts = 100, counting every attempt",
     "at the limit": "status MAX_RECOVERY_ATTEMPTS_EXCEEDED; reset only by an explicit resume",
     "source": "docs.dbos.dev/python/reference/decorators"},
    {"system": "Restate", "policy": "unlimited retries by default; max attempts configurable",
     "at the limit": "pause (resume by hand) or kill, as configured",
     "source": "docs.restate.dev/services/configuration"},
    {"system": "Inngest", "policy": "4 retries per step (5 attempts)",
     "at the limit": "the step fails", "source": "inngest.com/docs/features/inngest-functions/"
     "error-retries/retries"},
    {"system": "this lesson's runtime (and the text's)", "policy": "5 restarts in a row without "
     "progress; progress resets the count", "at the limit": "faulted, reason restart_limit "
     "(built-in tasks: their own result)", "source": "bughunt/durable/runtime.py"},
]


def peers_table():
    import pandas as pd

    return pd.DataFrame(PEERS).set_index("system")


# --- the panel -----------------------------------------------------------------------------------

class DurablePanel(Panel):
    """Count (crash tick, where), the tool (stored x current replay, where it is killed), the
    restart limit and the model request; Run re-runs the stories as real processes."""

    def __init__(self):
        self._cells: dict = {}       # the stored x current cells measured so far
        super().__init__()
        for name, widget in self.controls.items():
            setattr(self, name, widget)

    def make_controls(self) -> dict:
        return {
            "crash_tick": W.IntSlider(value=2, min=1, max=5, description="stop at tick",
                                      continuous_update=False),
            "where": W.ToggleButtons(options=[("killed after the print", "after-print"),
                                              ("killed between memo and print", "before-print"),
                                              ("clean close", "close")],
                                     value="after-print", style={"button_width": "auto"}),
            "stored": W.ToggleButtons(options=["safe", "unsafe"], value="unsafe",
                                      description="stored"),
            "current": W.ToggleButtons(options=["safe", "unsafe"], value="unsafe",
                                       description="declared now"),
            "tool_crash": W.Dropdown(options=list(TOOL_CRASH_POINTS), value="in-execute",
                                     description="tool killed"),
            "limit": W.IntSlider(value=DEFAULT_RESTART_LIMIT, min=1, max=7,
                                 description="restart limit", continuous_update=False),
            "unlimited": W.Checkbox(value=False, description="no limit"),
            "generation": W.ToggleButtons(options=["crash", "close", "exhaust"], value="crash",
                                          description="request"),
        }

    def rows(self) -> list:
        c = self.controls
        return [W.HBox([c["crash_tick"], c["where"]]),
                W.HBox([c["stored"], c["current"], c["tool_crash"]]),
                W.HBox([c["limit"], c["unlimited"], c["generation"]])]

    def execute(self, settings: dict) -> Result:
        where_label = dict((v, k) for k, v in self.controls["where"].options)[settings["where"]]
        count = count_story(settings["crash_tick"], where=settings["where"])
        self.tick(1, 4)
        stored, current, crash_at = settings["stored"], settings["current"], settings["tool_crash"]
        tool = tool_story(stored, current, crash_at)
        figures = []
        if crash_at == "in-execute":
            self._cells[(stored, current)] = {
                "stored": stored, "current": current, "tool ran again": len(tool.notes) == 2,
                "notes.txt lines": len(tool.notes), "result": tool.result["status"]}
            figures = [plot_replay(list(self._cells.values()), highlight=(stored, current))]
        self.tick(2, 4)
        limit = None if settings["unlimited"] else settings["limit"]
        loop = restart_limit_story(limit, runs=8)
        self.tick(3, 4)
        gen = generation_story(settings["generation"])
        self.tick(4, 4)
        sections = {
            "count to 5": self._story(count, f"count to 5, stopped at tick "
                                      f"{settings['crash_tick']} ({where_label}): the first "
                                      f"process printed {count.printed['first']}, the resume "
                                      f"printed {count.printed['resume']}"),
            "tool probe": self._story(tool, f"tool probe killed {crash_at}, stored {stored}, "
                                      f"declared now {current}: {tool.result['status']}; "
                                      f"notes.txt has {len(tool.notes)} line(s); beforeTool ran "
                                      f"{len(tool.printed['beforeTool'])} time(s)", figures),
            "crash loop": Result("", figures=[plot_restart_limits(
                {"no limit" if limit is None else f"limit {limit}": loop})], tables=[loop]),
            "model request": Result("", notes=[
                f"<b>model request, {html.escape(settings['generation'])}: "
                f"{html.escape(gen['outcome']['status'])}</b>"],
                tables=[gen["processes"], gen["requests"]]),
        }
        return Result("Done: every table was read from the real SQLite file.", sections=sections,
                      data={"count": count, "tool": tool, "loop": loop, "generation": gen})

    @staticmethod
    def _story(story: TaskStory, headline: str, figures: list = ()) -> Result:
        tables = []
        for moment, df in story.moments.items():
            tables += [f"<i>{html.escape(moment)}</i>", df]
        return Result("", notes=[f"<b>{html.escape(headline)}</b>"], figures=list(figures),
                      tables=tables)

    def reset(self) -> None:
        super().reset()
        self._cells = {}


def panel() -> DurablePanel:
    return DurablePanel()


# --- exercises: predict, then run ----------------------------------------------------------------

@exercise("7.1", "Count to 5 is killed between tick 4's memo and its print, then resumed. Which "
          "ticks are printed, by both processes together? Predict a list, e.g. [1, 2, 3].",
          "[1, 2, 3, 5]. The memo printed-4 is durable before the print, so the re-run of tick 4 "
          "sees it and skips the print: tick 4 is lost, never doubled (at most once).")
def _ex_7_1(answer):
    story = count_story(4, where="before-print")
    truth = story.printed["first"] + story.printed["resume"]
    return assess(answer, truth, what="ticks printed by both processes").reply(
        hint=" Which of memo and print comes first in the tick step?")


@exercise("7.2", "The tool probe (replay 'unsafe') is killed right after its intent {execute} "
          "is committed, before the tool starts. After the restart, how many lines does "
          "notes.txt have, and is the tool's result 'completed' or 'failed'? Predict a tuple, "
          "e.g. (1, 'completed').",
          "(0, 'failed'). The tool never ran, but recovery cannot know that: all it has is the "
          "intent, which says the tool may have started. An unsafe tool is not re-run, so the "
          "model is told it 'was interrupted and may have partially run' although nothing "
          "happened: honest uncertainty.")
def _ex_7_2(answer):
    story = tool_story("unsafe", crash_at="after-intent")
    truth = (len(story.notes), story.result["status"])
    return assess(answer, truth, what="(lines in notes.txt, the tool's result)").reply(
        hint=" What does recovery know about a tool whose intent is recorded?")


@exercise("7.3", "A tool was declared replay 'unsafe' when its intent was recorded; after an "
          "upgrade it is declared 'safe'. The process was killed inside the tool. Does the tool "
          "run again after the restart? Predict True or False.",
          "False. Recovery re-runs a tool only if the policy stored with the intent AND the "
          "current declaration are both 'safe': the old intent was recorded under a promise that "
          "did not allow a re-run, and an upgrade cannot change what the old attempt already did.")
def _ex_7_3(answer):
    cell = replay_cell("unsafe", "safe")
    said = f" notes.txt has {cell['notes.txt lines']} line(s), {cell['result']}."
    return assess(answer, cell["tool ran again"], what="the tool ran again").reply(
        said, hint=" Both the stored and the current policy must be 'safe' for a re-run.")


@exercise("7.4", "Transfer: with --restart-limit 3, a flaky task has 2 steps, and each step dies "
          "3 times before it gets through (flaky --dies 3 --steps 2). Does the task finish "
          "'completed' or end 'faulted'? Predict one of the two words.",
          "'faulted'. The first step dies at restarts 0, 1 and 2; at the fourth start its count "
          "in a row is 3, the limit, so the runtime ends the task instead of running the step. "
          "Progress would have reset the count, but the step never got through.")
def _ex_7_4(answer):
    df = reset_story(dies=3, steps=2, limit=3)
    truth = df.iloc[-1]["what happened"].split()[-1]
    c = assess(answer, truth, what="the task ended")
    said = f" The task was cut off {df.iloc[-1]['cut-offs in total']} times in all."
    return c.reply(said, hint=" Count the restarts in a row the first step reaches.")


@exercise("7.5", "Transfer: a model request is killed mid-stream at every attempt, with 1 retry "
          "(generate --retries 1 --crash-mid-stream, started until the task ends). How many "
          "requests does the provider bill? Predict a number.",
          "2. Attempt 1 is killed; the next process counts it as failed, keeps the half answer "
          "as an aborted entry and sends attempt 2 after the backoff; attempt 2 is killed too; "
          "the retries are used up, so the next process ends the task with runFailure (reason "
          "interrupted) without sending a third request.")
def _ex_7_5(answer):
    gen = generation_story("exhaust", retries=1)
    truth = len(gen["requests"])
    c = assess(answer, truth, what="requests billed")
    said = f" The task ended {gen['outcome']['message']} ({gen['outcome']['reason']})."
    return c.reply(said, hint=" Count attempts: the first one plus the retries.")


# --- common wrong statements, each answered by a run made just now --------------------------------

@statement("Q7.1", "After a crash, a task carries on from the line of its step where the process "
           "died.",
           "False. The checkpoint records which step to enter, not how far inside it the task "
           "got. The resume runs the whole step again from its start; only a memo keeps what the "
           "step already did from happening twice.")
def _q7_1():
    story = count_story(2, where="before-print")
    n = story.moments["after the crash"].iloc[0]["n"]
    resumed = story.printed["resume"]
    return Measured(2 in resumed, f"Measured just now: count to 5 killed between tick 2's memo "
                    f"and its print, so the next line would have printed tick 2. The stored "
                    f"checkpoint still said n = {n}, and the resumed process printed {resumed}: "
                    "it entered tick 2's step from its start, found the memo printed-2 set, and "
                    "skipped the print (lost, never doubled).")


@statement("Q7.2", "A clean close counts as a restart, just like a crash.",
           "False. Both put the task back to pending with its checkpoint kept, but only a real "
           "cut-off counts toward the crash-loop limit: a close is the runtime's own decision, "
           "so nothing went wrong.")
def _q7_2():
    df = close_vs_crash()
    close, crash = (int(df.loc[how, "restarts"]) for how in ("clean close", "crash (SIGKILL)"))
    return Measured(close >= 1, f"Measured just now: count stopped after tick 2, then opened "
                    f"again: after a clean close restarts = {close}, after SIGKILL restarts = "
                    f"{crash}. On disk before the open: {df.loc['clean close', 'status on disk']} "
                    f"vs {df.loc['crash (SIGKILL)', 'status on disk']}.")


@statement("Q7.3", "Opening a crashed database read-only, just to look, changes no byte of it.",
           "True. A read-only open sees the task as the crash left it (still running), refuses "
           "commits and resume, and writes nothing: it is how to inspect a crashed run without "
           "recovering it.")
def _q7_3():
    proof = read_only_proof()
    return Measured(proof["unchanged"], f"Measured just now: after a kill, a read-only open saw "
                    f"the task {proof['status seen']!r}; the bytes of "
                    f"{' and '.join(proof['files'])} were "
                    f"{'unchanged' if proof['unchanged'] else 'CHANGED'}; it refused "
                    f"{sum('allowed' not in r for r in proof['refused'])} of 2 writes (commit, "
                    "resume).")


@statement("Q7.4", "After a crash mid-stream, the retry sends the model its half answer, so it "
           "can carry on from there.",
           "False. The half answer is kept in the task's result as an aborted entry, never sent: "
           "the retry sends exactly the messages of the first attempt.")
def _q7_4():
    gen = generation_story("crash")
    requests = gen["requests"]
    same = requests["digest"].nunique() == 1
    aborted = gen["outcome"]["result"]["aborted"]
    return Measured(not same, f"Measured just now: {len(requests)} requests on the provider's "
                    f"bill, with {'the same' if same else 'different'} messages (digest); the "
                    f"half answer is in the result as aborted: {aborted[0]['text']!r}.")


LESSON = Lesson(
    number=7,
    notebook="07_durable_tasks",
    title="Durable tasks: a checkpoint is where a step starts",
    short_title="durable tasks",
    question="How does a task runtime resume steps, memos and tools?",
    teaches="a durable task runtime on SQLite: checkpoint = step entry, memo, restart limit, "
            "tool replay policy, a model request in flight, the tasks table read live",
    objectives=(
        "explain why a checkpoint records the *entry* of a step, and make a step safe to run "
        "again with a first-write-wins memo;",
        "tell a clean close from a crash in the tasks table, and read that table with SQL and "
        "pandas;",
        "say when a crash loop ends a task, and why progress resets the count;",
        "predict, for each of the four checkpoints of a tool call, what a crash there "
        "re-runs, and fill in the stored × current replay table;",
        "say what happens to a model request that was streaming when the process died.",
    ),
    minutes=45,
    prerequisites="Lessons 2 and 4 (checkpoints, the danger window, idempotency keys); basic "
                  "SQL and pandas. Terms, in English and Chinese: the "
                  "[glossary](glossary.md).",
    panel=panel,
    exercises=defined_in(__name__),
)

