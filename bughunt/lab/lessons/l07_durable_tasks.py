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
from ...durable import experiments as E
from ...durable.examples import TOOL_CRASH_POINTS
from ...durable.experiments import TEXT_QUERIES, TaskStory  # noqa: F401
from .. import results
from ..claims import Claims, Invariants
from ..panel import Panel, Result
from ..judges import Measured, assess, defined_in, exercise, statement
from ..practice import NUMBER, Answer, Problem, as_exercise, choice, drawn
from ..style import COLORS, new_figure
from ..registry import Lesson
from ..views import Table

# The lesson's stories, run by the runtime's package (`bughunt.durable.experiments`) as real
# processes. The notebook calls them from here, each once per kernel (the lab's results cache), so
# the sentences the lesson states about its run (`CLAIMS`) are checked on the run it showed. The
# panel calls `E.*` directly: it runs again each time.
count_story = results.memoized(E.count_story)
close_vs_crash = results.memoized(E.close_vs_crash)
read_only_proof = results.memoized(E.read_only_proof)
memo_story = results.memoized(E.memo_story)
restart_limit_story = results.memoized(E.restart_limit_story)
reset_story = results.memoized(E.reset_story)
builtin_limit_story = results.memoized(E.builtin_limit_story)
tool_story = results.memoized(E.tool_story)
replay_cell = results.memoized(E.replay_cell)
generation_story = results.memoized(E.generation_story)
lock_story = results.memoized(E.lock_story)
refusals = results.memoized(E.refusals)


@results.memoized
def tool_checkpoints(replay: str = "unsafe"):
    """The tool call killed after each of its checkpoints (and inside the tool), resumed: what ran
    again, what the agent got (once per kernel), as a checked table."""
    df = E.run_tool_checkpoints(replay)
    return Table(df, "the tool call's checkpoints", Invariants(
        counts=("beforeTool ran", "notes.txt lines")))


def close_vs_crash_table():
    return Table(close_vs_crash(), "close and crash", Invariants(counts=("restarts",)))


def refusals_table():
    return Table(refusals(), "refusals", Invariants(counts=("exit",)))

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
    ends = [label for label, df in stories.items() if (df["outcome"] != "—").any()]
    never = [label for label in stories if label not in ends]
    ax.set_title("A step that always dies, started again and again\n" + "; ".join(filter(None, [
        f"ended by the limit: {' and '.join(ends)}" if ends else "",
        f"{' and '.join(never)}: still restarting after {max(len(stories[x]) for x in never)} "
        "starts" if never else ""])), fontsize=10)
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
    table.index.name = "stored with the intent ↓ / declared now →"
    table.columns.name = None
    return Table(table, "stored × current replay", Invariants())


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
        count = E.count_story(settings["crash_tick"], where=settings["where"])
        self.tick(1, 4)
        stored, current, crash_at = settings["stored"], settings["current"], settings["tool_crash"]
        tool = E.tool_story(stored, current, crash_at)
        figures = []
        if crash_at == "in-execute":
            # The grid always shows its four cells: this one measured now, the other three as
            # this kernel last measured them (the notebook's own table, or an earlier Run).
            self._cells[(stored, current)] = {
                "stored": stored, "current": current, "tool ran again": len(tool.notes) == 2,
                "notes.txt lines": len(tool.notes), "result": tool.result["status"]}
            cells = [self._cells.get((s, c)) or replay_cell(s, c)
                     for s in ("safe", "unsafe") for c in ("safe", "unsafe")]
            figures = [plot_replay(cells, highlight=(stored, current))]
        self.tick(2, 4)
        limit = None if settings["unlimited"] else settings["limit"]
        loop = E.restart_limit_story(limit, runs=8)
        self.tick(3, 4)
        gen = E.generation_story(settings["generation"])
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

@exercise("7.1", "Count to 5 with the other order, the print *before* the memo (count "
          "--memo-after-print), is killed after tick 4's print and before its memo, then resumed. "
          "Which ticks are printed, by both processes together? Predict a list, e.g. [1, 2, 3].",
          "[1, 2, 3, 4, 4, 5]. The print happened, but the memo printed-4 was never written, so "
          "the re-run of tick 4's step finds no memo and prints again: tick 4 is doubled, never "
          "lost (at least once). With the memo first, the same kill would lose tick 4 instead.")
def _ex_7_1(answer):
    story = count_story(4, where="before-memo")
    truth = story.printed["first"] + story.printed["resume"]
    return assess(answer, truth, what="ticks printed by both processes").reply(
        hint=" Which of memo and print comes first in this tick step, and which one did the kill "
             "leave undone?")


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


@exercise("7.3", "A tool was declared replay 'safe' when its intent was recorded; after an "
          "upgrade it declares no replay at all (the new version simply leaves the field out). "
          "The process was killed inside the tool. Does the tool run again after the restart? "
          "Predict True or False.",
          "False. A tool that declares no replay counts as 'unsafe', and recovery re-runs a tool "
          "only if the policy stored with the intent and the current declaration are both "
          "'safe'. Leaving the field out is a promise of nothing, so the runtime does not repeat "
          "an effect it cannot know to be harmless.")
def _ex_7_3(answer):
    cell = replay_cell("safe", "undeclared")
    said = f" notes.txt has {cell['notes.txt lines']} line(s), {cell['result']}."
    return assess(answer, cell["tool ran again"], what="the tool ran again").reply(
        said, hint=" What is a tool's replay when it declares none?")


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


# --- what the lesson says its run found (each sentence checked against that run) -------------

CLAIMS = Claims(7)


@CLAIMS.claim("This is the text's row: `{status}`, n = {n}, the memos {memos}, restarts {restarts}. "
              "A clean close put the task back to `{status}` itself.")
def the_close_leaves_the_texts_row():
    import json

    row = count_story(2, where="close").queries["after the close"].iloc[0]
    memos = json.loads(row["memos"])
    return (row["status"] == "pending" and row["n"] == 2 and row["restarts"] == "—"
            and sorted(memos) == ["printed-1", "printed-2"],
            {"status": row["status"], "n": row["n"], "memos": [f"`{m}`" for m in sorted(memos)],
             "restarts": "none" if row["restarts"] == "—" else row["restarts"]})


@CLAIMS.claim("Still `{status}` after the kill: nobody was left to say otherwise. After the next "
              "open it is `{after}` with n = {n} and restarts = {restarts}; the resume printed "
              "{resume}. Tick {tick}'s step ran again (the checkpoint said n = {n}) but did not "
              "print again: the memo `printed-{tick}` was already set. At the end the task is "
              "`{end}`, its memos and restart count gone ({left}).")
def the_killed_step_reruns_without_reprinting():
    story = count_story(2)
    crashed = story.moments["after the crash"].iloc[0]
    opened = story.moments["after open"].iloc[0]
    resume = story.printed["resume"]
    end = story.moments["after the finish"].iloc[0]
    left = {c: end[c] for c in ("memos", "restarts") if c in end and end[c] != "—"}
    return (crashed["status"] == "running" and opened["status"] == "pending"
            and opened["restarts"] == 1 and 2 not in resume and resume[:1] == [3]
            and end["status"] == "terminal" and not left,
            {"status": crashed["status"], "after": opened["status"], "n": opened["n"],
             "restarts": opened["restarts"], "resume": resume, "tick": 2, "end": end["status"],
             "left": "none left" if not left else left})


@CLAIMS.claim("After the next open both are `{close_after}` with n = {n}, but only the crash counts "
              "as a restart: restarts = {close} after the clean close, {crash} after SIGKILL.")
def only_a_crash_counts():
    df = close_vs_crash()
    close, crash = df.loc["clean close"], df.loc["crash (SIGKILL)"]
    return (close["restarts"] == 0 and crash["restarts"] == 1
            and close["after the next open"] == crash["after the next open"] == "pending",
            {"close_after": close["after the next open"], "n": close["n"],
             "close": int(close["restarts"]), "crash": int(crash["restarts"])})


@CLAIMS.claim("Process 1 proposed {a} and was killed right after its write; process 2 proposed {b} "
              "and got {got}: the first write wins.")
def the_first_memo_write_wins():
    df = memo_story()
    one, two = df.iloc[0], df.iloc[1]
    return (two["memo holds"] == one["proposed"] != two["proposed"],
            {"a": repr(one["proposed"]), "b": repr(two["proposed"]), "got": repr(two["memo holds"])})


@CLAIMS.claim("A read-only open saw the task `{status}`, refused {refused} of 2 writes (a commit, a "
              "resume) and changed no byte of {files}.")
def read_only_changes_nothing():
    proof = read_only_proof()
    refused = sum("allowed" not in r for r in proof["refused"])
    return (proof["unchanged"] and refused == 2 and proof["status seen"] == "running",
            {"status": proof["status seen"], "refused": refused, "files": proof["files"]})


@CLAIMS.claim("With the default limit {limit}, the step was killed {killed} times; at start "
              "{ended_at} the count at open was {limit} and the task ended `{outcome}` with the "
              "report `{report}`, without running the step. With no limit, all {runs} starts were "
              "killed.")
def the_limit_ends_a_crash_loop():
    loop = restart_limit_story(5)
    never = restart_limit_story(None, runs=8)
    killed = int((loop["exit"] == "SIGKILL").sum())
    last = loop.iloc[-1]
    return (killed == 5 and last["outcome"] == "restart_limit" and last["report"] == "task_faulted"
            and loop["restarts at open"].iloc[-1] == 5 and (never["exit"] == "SIGKILL").all(),
            {"limit": 5, "killed": killed, "ended_at": int(loop.index[-1]),
             "outcome": last["outcome"], "report": last["report"], "runs": len(never)})


@CLAIMS.claim("Cut off {total} times in all, more than the limit of {limit}, the task ended `{how}`: "
              "its count in a row never went past {most}.")
def progress_resets_the_count():
    df = reset_story(dies=2, steps=3, limit=3)
    runs = df[df["step"] != "—"]
    total = int(df.iloc[-1]["cut-offs in total"])
    most = int(max(runs["restarts in a row"]))
    how = df.iloc[-1]["what happened"].split()[-1]
    return (how == "completed" and total > 3 > most,
            {"total": total, "limit": 3, "how": how, "most": most})


@CLAIMS.claim("Killed in `call`, `beforeTool` ran {hook_runs} times and the tool once "
              "({call_lines} line in notes.txt). Killed after ②, the tool never ran ({intent_lines} "
              "lines), yet the agent got `{intent_result}`: recovery cannot know. Killed after ③, "
              "the agent read the durable result: `{result_result}`.")
def each_tool_checkpoint_measured():
    t = tool_checkpoints("unsafe").df
    rows = {k.split(" ")[0]: r for k, r in t.iterrows()}
    call = t.iloc[0]
    intent = t[t.index.str.startswith("② after")].iloc[0]
    after = t[t.index.str.startswith("③")].iloc[0]
    return (call["beforeTool ran"] == 2 and call["notes.txt lines"] == 1
            and intent["notes.txt lines"] == 0 and intent["the agent got"].startswith("failed")
            and after["the agent got"].startswith("completed") and len(rows) >= 3,
            {"hook_runs": int(call["beforeTool ran"]), "call_lines": int(call["notes.txt lines"]),
             "intent_lines": int(intent["notes.txt lines"]),
             "intent_result": intent["the agent got"], "result_result": after["the agent got"]})


def _replay_cells() -> list[dict]:
    return [replay_cell(st, cu) for st in ("safe", "unsafe") for cu in ("safe", "unsafe")]


@CLAIMS.claim("All four cells measured: only {reran} re-ran the append, so `notes.txt` got a "
              "second line there; the other {others} cells left one line and told the agent "
              "`{result}`.")
def only_safe_safe_reruns():
    cells = _replay_cells()
    reran = [f"{c['stored']} × {c['current']}" for c in cells if c["tool ran again"]]
    others = [c for c in cells if not c["tool ran again"]]
    results_ = {c["result"] for c in others}
    return (reran == ["safe × safe"] and results_ == {"failed"},
            {"reran": reran, "others": len(others), "result": "failed"})


@CLAIMS.claim("The interrupted result: status `{status}`, `is_error` {is_error}, content {content}.")
def the_interrupted_result_is_an_error():
    r = tool_story("unsafe").result
    content = r.get("content") or r.get("result", {}).get("content")
    return (r["status"] == "failed" and r.get("is_error") is True and "interrupted" in content,
            {"status": r["status"], "is_error": "`true`" if r.get("is_error") else "`false`",
             "content": f"`{content!r}`"})


@CLAIMS.claim("{n} requests on the provider's bill, with {same} messages (digest {digest}): the "
              "model was never told about the half answer {aborted}, which is in the result as "
              "`aborted`. Attempt {attempt} answered.")
def the_retry_resends_the_same_messages():
    gen = generation_story("crash")
    req = gen["requests"]
    aborted = gen["outcome"]["result"]["aborted"]
    same = req["digest"].nunique() == 1
    return (len(req) == 2 and same and len(aborted) == 1,
            {"n": len(req), "same": "the same" if same else "different",
             "digest": f"`{req['digest'].iloc[0]}`", "aborted": f"`{aborted[0]['text']!r}`",
             "attempt": gen["outcome"]["result"]["attempt"]})


@CLAIMS.claim("Killed at every attempt, with {retries} retries: {billed} requests billed, one per "
              "attempt; the task ended `{message}`, reason `{reason}`, input `{input}`. After a "
              "clean close mid-stream instead, the attempt was sent again: {close_billed} requests "
              "billed, answered at attempt {close_attempt}.")
def retries_run_out_and_a_close_resends():
    exhaust, close = generation_story("exhaust"), generation_story("close")
    o = exhaust["outcome"]
    return (len(exhaust["requests"]) == 3 and o["message"] == "runFailure"
            and o["reason"] == "interrupted" and len(close["requests"]) == 2,
            {"retries": 2, "billed": len(exhaust["requests"]), "message": o["message"],
             "reason": o["reason"], "input": o["input"],
             "close_billed": len(close["requests"]),
             "close_attempt": close["outcome"]["result"]["attempt"]})


@CLAIMS.claim("With the print first, the same kind of kill (after tick 4's print, before its "
              "memo) printed {printed}: tick 4 twice, at least once.")
def print_first_prints_twice():
    story = count_story(4, where="before-memo")
    printed = story.printed["first"] + story.printed["resume"]
    return printed.count(4) == 2, {"printed": printed}


@CLAIMS.claim("A tool that declares no `replay` counts as `unsafe`: stored `safe`, declared nothing "
              "after the restart, the tool was {ran} ({lines} line in notes.txt, `{result}`).")
def undeclared_is_unsafe():
    cell = replay_cell("safe", "undeclared")
    return (not cell["tool ran again"] and cell["result"] == "failed",
            {"ran": "not run again" if not cell["tool ran again"] else "run again",
             "lines": cell["notes.txt lines"], "result": cell["result"]})


# --- practice: a configuration the lesson did not run -------------------------------------------

#: What the lesson runs (the practice draws none of these): (story, settings).
LESSON_RUNS = {
    ("count", (2, "after-print", 5)), ("count", (2, "close", 5)),
    ("count", (4, "before-print", 5)), ("count", (2, "before-print", 5)),
    ("count", (4, "before-memo", 5)),
    *{("tool", ("unsafe", "unsafe", at)) for at in TOOL_CRASH_POINTS},
    *{("tool", (st, cu, "in-execute")) for st in ("safe", "unsafe") for cu in ("safe", "unsafe")},
    ("tool", ("safe", "undeclared", "in-execute")),
    ("flaky", (2, 3, 3)), ("flaky", (3, 2, 3)),
    ("generate", ("crash", 2)), ("generate", ("exhaust", 2)), ("generate", ("close", 2)),
    ("generate", ("exhaust", 1)),
}


def practice_problem(seed: int) -> Problem:
    """A count stopped at another tick or with another length, a tool call killed at a checkpoint
    with a replay pair the lesson did not run, a flaky task with other deaths, steps and limit,
    or a model request with another number of retries; one question, answered by running it."""
    rng = drawn(seed, 7)
    kind = rng.choice(["count", "tool", "flaky", "generate"])
    if kind == "count":
        while True:
            to = rng.choice([3, 4, 6, 7])
            tick, where = rng.randint(1, to), rng.choice(["after-print", "before-print",
                                                        "before-memo"])
            if ("count", (tick, where, to)) not in LESSON_RUNS:
                break
        how = {"after-print": f"killed after tick {tick}'s print, before its next checkpoint",
               "before-print": f"killed between tick {tick}'s memo and its print (memo first)",
               "before-memo": f"with the print before the memo (--memo-after-print), killed "
                              f"between tick {tick}'s print and its memo"}[where]
        setting = f"Count to {to}, {how}, then resumed."

        def measure() -> Answer:
            story = E.count_story(tick, where=where, to=to)
            printed = story.printed["first"] + story.printed["resume"]
            return Answer(len(printed), f"the first process printed {story.printed['first']}, "
                          f"the resume {story.printed['resume']}.")
        return Problem(7, seed, setting, "How many tick lines do both processes print together?",
                       NUMBER, measure, "Which of memo and print did the kill leave undone, and "
                       "what does the re-run step do when it finds the memo set, or not?",
                       unit="lines", drawn={"story": "count", "settings": (tick, where, to)})
    if kind == "tool":
        while True:
            stored, current = rng.choice(["safe", "unsafe"]), rng.choice(["safe", "unsafe",
                                                                         "undeclared"])
            at = rng.choice(TOOL_CRASH_POINTS)
            if ("tool", (stored, current, at)) not in LESSON_RUNS:
                break
        names = {"in-call": "in the call phase, after beforeTool, before the intent",
                 "after-intent": "right after the intent is committed, before the tool starts",
                 "in-execute": "inside the tool, after its append",
                 "after-result": "after the tool's result is committed, before the agent reads it"}
        setting = (f"The tool probe's `append` is declared replay `{stored}` when the call starts, "
                   f"and `{current}` after the restart; the call is killed {names[at]}, then "
                   "resumed.")
        ask = rng.choice(["lines", "status"])

        def run():
            return E.tool_story(stored, current, at)
        if ask == "lines":
            def measure() -> Answer:
                story = run()
                return Answer(len(story.notes), f"notes.txt has {len(story.notes)} line(s); the "
                              f"agent got {story.result['status']}.")
            return Problem(7, seed, setting, "How many lines does notes.txt have at the end?",
                           NUMBER, measure, "Did the append happen before the kill, and does "
                           "recovery run the tool (again)?", unit="lines",
                           drawn={"story": "tool", "settings": (stored, current, at), "ask": ask})

        def measure() -> Answer:
            story = run()
            return Answer(story.result["status"], f"the agent got {story.result['status']}; "
                          f"notes.txt has {len(story.notes)} line(s).")
        return Problem(7, seed, setting, "Is the tool result the agent gets 'completed' or "
                       "'failed'?", choice(["completed", "failed"]), measure,
                       "Which checkpoint did the kill follow, and what does recovery do from "
                       "there for this replay pair?",
                       drawn={"story": "tool", "settings": (stored, current, at), "ask": ask})
    if kind == "flaky":
        while True:
            dies, steps, limit = rng.randint(1, 4), rng.randint(1, 3), rng.randint(2, 5)
            if ("flaky", (dies, steps, limit)) not in LESSON_RUNS:
                break
        setting = (f"With --restart-limit {limit}, a flaky task has {steps} step(s), and each step "
                   f"dies {dies} time(s) before it gets through (flaky --dies {dies} --steps "
                   f"{steps}), started again until it ends.")

        def measure() -> Answer:
            df = E.reset_story(dies=dies, steps=steps, limit=limit)
            ended = df.iloc[-1]["what happened"].split()[-1]
            return Answer(ended, f"the task ended {ended} after {df.iloc[-1]['cut-offs in total']}"
                          " cut-offs in all.")
        return Problem(7, seed, setting, "Does the task end 'completed' or 'faulted'?",
                       choice(["completed", "faulted"]), measure,
                       "Compare the restarts in a row one step reaches with the limit; progress "
                       "resets the count.", drawn={"story": "flaky",
                                                   "settings": (dies, steps, limit)})
    while True:
        mode, retries = rng.choice(["crash", "exhaust", "close"]), rng.choice([0, 1, 3, 4])
        if ("generate", (mode, retries)) not in LESSON_RUNS:
            break
    how = {"crash": "killed mid-stream once", "exhaust": "killed mid-stream at every attempt",
           "close": "closed cleanly mid-stream once"}[mode]
    setting = (f"A model request with {retries} retries (generate --retries {retries}), {how}, "
               "started again until the task ends.")

    def measure() -> Answer:
        gen = E.generation_story(mode, retries=retries)
        o = gen["outcome"]
        end = (f"answered at attempt {o['result']['attempt']}" if o["status"] == "completed"
               else f"ended {o['message']} ({o['reason']})")
        return Answer(len(gen["requests"]), f"{len(gen['requests'])} request(s) billed; the task "
                      f"{end}.")
    return Problem(7, seed, setting, "How many requests does the provider bill?", NUMBER,
                   measure, "Each attempt sent is billed; count the attempts, the first one plus "
                   "the retries a crash may use.", unit="requests",
                   drawn={"story": "generate", "settings": (mode, retries)})


#: The transfer question: a configuration the lesson did not run (`practice_problem`).
TRANSFER_SEED = 6
TRANSFER = as_exercise("7.6", practice_problem(TRANSFER_SEED), __name__)


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
    prerequisites="Lessons 2 and 4 (checkpoints, the danger window, idempotency keys); basic "
                  "SQL and pandas. Terms, in English and Chinese: the "
                  "[glossary](glossary.md).",
    panel=panel,
    exercises=defined_in(__name__),
    claims=CLAIMS,
    practice=practice_problem,
    runs="its stories run real processes for a minute or two",
)

