"""The closing notebook: the interview answer of the first source text (面试要点), and a checklist
for your own agent, every item tied to the lesson and the measurement behind it.

Every number here is measured in this kernel: the lesson's table (`experiment.lesson`), the
conformance suite on the lab's stores and on a planted bug, two resumers with and without the run
lock, a durable task in a crash loop, a model call killed mid-stream, the reference store's grade.
Each is kept in the lab's results cache, so the checklist and the exercises share them.
"""

from __future__ import annotations

import importlib

from ...config import RunConfig
from ...conformance import conform
from ...experiment import LESSON_FIGURES, lesson, lesson_table, rule_of_three
from .. import results
from ..judges import assess, defined_in, exercise
from ..registry import Lesson

#: The source text's random-kill experiment (追问 1): 40 tries, 39 real kills, 1 duplicate hit.
SOURCE_RANDOM_KILLS = 39


def lesson_results() -> dict:
    """The lesson's five sweeps (264 crash+resume pairs), once per kernel."""
    return results.remember(("closing", "lesson"), lesson)


def the_table(result: dict | None = None):
    """The lesson's table: the source text's figure beside this machine's, row by row."""
    return lesson_table(result or lesson_results())


@results.memoized
def torn_snapshot() -> dict:
    """The snapshot store written in place (torn at the crash) against the contract, beside the
    same store written atomically (temp file + rename)."""
    torn = conform(RunConfig(store="snapshot", write_mode="torn", intent=False))
    atomic = conform(RunConfig(store="snapshot", write_mode="atomic", intent=False))
    lost = torn.checked["kill-keeps-acknowledged"]
    return {"states": torn.states, "broken": torn.broken(),
            "kill_states_losing": sum(v.rule == "kill-keeps-acknowledged"
                                      for v in torn.violations),
            "kill_states": lost, "atomic_broken": atomic.broken()}


@results.memoized
def without_dir_fsync() -> dict:
    """The lab's snapshot store with its directory fsync removed (lesson 8's planted bug
    `no-dir-fsync`, a patched copy of the real source), under the contract's power cuts."""
    from ...instruments import mutants

    package = mutants.load("no-dir-fsync")
    suite = importlib.import_module(package.__name__ + ".conformance")
    config = importlib.import_module(package.__name__ + ".config").RunConfig
    r = suite.conform(config(store="snapshot", fsync="always"))
    kill = ("crash-leaves-a-real-state", "kill-keeps-acknowledged")
    return {"broken": r.broken(), "checked": r.checked["fsync-keeps-acknowledged"],
            "losing": sum(v.rule == "fsync-keeps-acknowledged" for v in r.violations),
            "kill_checked": r.checked["kill-keeps-acknowledged"],
            "kill_violations": sum(v.rule in kill for v in r.violations)}


@results.memoized
def resumer_race(trials: int = 3) -> dict:
    """Two workers resuming one run at the same moment, with and without the run lock (lesson 8)."""
    from ... import beyond as B
    from .l08_beyond import RACE

    out = {}
    for lock in (True, False):
        runs = B.two_resumers(RACE, trials=trials, seed=0, lock=lock)
        out["flock" if lock else "none"] = {
            "trials": len(runs), "both_proceeded": sum(r["proceeded"] == 2 for r in runs),
            "three_way_failures": sum(not r["three_way_check"] for r in runs)}
    return out


@results.memoized
def crash_loop(limit: int = 3) -> dict:
    """A durable task whose step dies every time, with a restart limit (lesson 7)."""
    from ...durable.experiments import restart_limit_story

    story = restart_limit_story(limit=limit, runs=limit + 5)
    last = story.iloc[-1]
    return {"limit": limit, "processes": len(story), "outcome": str(last["outcome"]),
            "report": str(last["report"])}


@results.memoized
def call_in_flight(point: str = "chunk#5") -> dict:
    """A streamed model call killed mid-stream, resumed by redo and by abort, judged by the
    server's bill (lesson 11)."""
    from . import l11_call_in_flight as cif

    redo, abort = cif.kill_page_call(point, "redo"), cif.kill_page_call(point, "abort")
    return {"point": point, "redo_billed": redo.billed_calls, "abort_billed": abort.billed_calls,
            "abort_outcome": abort.outcome}


def reference_grade():
    """The capstone's reference store, graded (lesson 9)."""
    from .l09_your_own_store import reference
    return reference()


def _link(n: int) -> str:
    """A link to lesson `n`'s notebook, from the registry."""
    from ..registry import by_number

    return by_number(n).link(f"lesson {n}")


def checklist(result: dict | None = None) -> str:
    """What to do in your own agent, as a Markdown table: each item, the measurement behind it
    (taken in this kernel), and the lesson where it was measured."""
    f = (result or lesson_results())["figures"]
    nn = (result or lesson_results())["no_newline"]
    torn, nodir = torn_snapshot(), without_dir_fsync()
    race, loop, call = resumer_race(), crash_loop(), call_in_flight()
    ref = reference_grade()
    bound = rule_of_three(SOURCE_RANDOM_KILLS)
    rows = [
        ("Checkpoint at the natural boundaries: a complete model reply, a complete tool result.",
         f"a crash redoes {f['redo_snapshot']:.2f} model calls on average with a snapshot after "
         f"every page, {f['redo_none']:.2f} with none ({f['crash_points_no_intent']} crash "
         "points)", 2),
        ("Keep an event log, and bound its replay with a snapshot every N steps.",
         f"a recovery replays {f['replay_log_avg']:.2f} events on average (at most "
         f"{f['replay_log_max']}) from a pure log, {f['replay_snap4_avg']:.2f} (at most "
         f"{f['replay_snap4_max']}) with a snapshot every 4 pages", 3),
        ("Record the intent, then do the side effect with a deterministic idempotency key that "
         "the receiver deduplicates.",
         f"without a key {f['duplicate_points_no_key']} of {f['crash_points_no_intent']} crash "
         f"points file a report twice; with intents and the key {f['log_runs_correct']} of "
         f"{f['crash_points_log']} recover correctly", 4),
        ("Test by killing at every crash point, not at random moments.",
         f"{f['crash_points_log']} deterministic kills find every danger window; zero failures "
         f"in {SOURCE_RANDOM_KILLS} random kills (the source text's) only bound the rate below "
         f"{bound:.1%} (the rule of three)", 4),
        ("Write a snapshot to a temp file and rename it over the old one; never in place.",
         f"in place, a kill -9 loses an acknowledged checkpoint at {torn['kill_states_losing']} "
         f"of {torn['kill_states']} crash states; with temp file + rename at none (rules broken: "
         f"{len(torn['atomic_broken'])})", 5),
        ("Read a log by skipping (and counting) a line that does not parse; end a torn last line "
         "with a newline before appending, idempotently.",
         f"without the newline repair the resumed run is right at {nn['resume_correct']} of "
         f"{nn['crash_points']} points, yet the log on disk is wrong at "
         f"{nn['rebuild_failures']} of them", 5),
        ("Judge a recovery by three witnesses: the outside system, the resumed run's memory, a "
         "fresh rebuild from disk.",
         f"only the rebuild from disk, compared with memory, catches those "
         f"{nn['rebuild_failures']} points; a reader that just skips bad lines, as the source "
         f"text's does, returns a wrong state at {nn['lesson_reader_failures']} of them without "
         "a word", 5),
        ("For power loss, fsync the file, then its directory after a rename or a create; keep "
         "the hot path to a flush if a lost line costs little.",
         f"with the directory fsync removed, a power cut loses an acknowledged snapshot at "
         f"{nodir['losing']} of {nodir['checked']} states (kill -9 loses none)", 6),
        ("Let one process own a run: a lock held for the life of the process.",
         f"two resumers at the same moment: with flock both proceeded in "
         f"{race['flock']['both_proceeded']} of {race['flock']['trials']} trials, without a "
         f"lock in {race['none']['both_proceeded']} (three-way check failed in "
         f"{race['none']['three_way_failures']})", 8),
        ("Count restarts, and stop a task that crashes at the same step every time.",
         f"a step that always dies ran {loop['processes']} processes, then the task ended: "
         f"{loop['outcome']} ({loop['report']})", 7),
        ("Decide what a killed model call becomes: redone (at least once) or aborted (at most "
         "once); its first half is billed either way.",
         f"killed at {call['point']}: redo bills {call['redo_billed']} calls for one answer, "
         f"abort bills {call['abort_billed']} and records {call['abort_outcome']}", 11),
        ("Hold your own store to a contract, at every crash state and every crash point.",
         f"the reference store keeps all {len(ref.rules)} rules at {ref.states} crash states and "
         f"recovers correctly at {sum(r.correct for r in ref.records)} of {len(ref.records)} "
         "crash points", 9),
        ("Using a framework's checkpointer? Sweep it the same way: the side effect's key is "
         "still yours.",
         "LangGraph and DBOS under the same kill -9 sweep, in lesson 10 (not rerun here: it "
         "takes a minute)", 10),
    ]
    lines = ["| | in your own agent | measured here, just now | where |",
             "|---|---|---|---|"]
    lines += [f"| {i} | {do} | {seen} | {_link(n)} |" for i, (do, seen, n) in
              enumerate(rows, 1)]
    return "\n".join(lines)


def behind_the_answer(result: dict | None = None) -> str:
    """The numbers behind the one-breath answer, measured in this kernel, beside the source
    text's."""
    r = result or lesson_results()
    f, src = r["figures"], r["lesson"]
    return "\n".join([
        f"- How state is kept: redone model calls per crash {f['redo_none']:.2f} with no "
        f"checkpoint, {f['redo_snapshot']:.2f} with a snapshot per page (source text: "
        f"{src['redo_none']} and {src['redo_snapshot']}); replayed events {f['replay_log_avg']:.2f}"
        f" from a pure log, {f['replay_snap4_avg']:.2f} with a snapshot every 4 pages (source: "
        f"{src['replay_log_avg']} and {src['replay_snap4_avg']}).",
        f"- Side effects: {f['duplicate_points_no_key']} crash points duplicate a report without "
        f"the key (source: {src['duplicate_points_no_key']}); with intents and the key "
        f"{f['log_runs_correct']} of {f['crash_points_log']} recover correctly (source: "
        f"{src['log_runs_correct']} of 54).",
        f"- A damaged checkpoint: without the newline repair, the rebuild from disk fails at "
        f"{r['no_newline']['rebuild_failures']} crash points where the resumed run was right.",
        f"- Testing: {f['crash_points_no_intent']} and {f['crash_points_log']} crash points, each "
        f"killed by a real SIGKILL and resumed: {r['pairs']} crash+resume pairs just now.",
    ])


# --- exercises ---------------------------------------------------------------------------------

@exercise("13.1", "The interviewer asks: with a snapshot after every page, how many model calls "
          "does a crash cost, on average over the 51 crash points? Answer with this machine's "
          "figure, to 2 decimals.",
          "0.76, the source text's figure, reproduced by the lesson's table above: of each page's "
          "four crash points, three (after the model call, after the visit, inside the commit) "
          "pay the page's one call again and one (after the commit) pays nothing; a bug page's "
          "after_submit pays it too. 39 redone calls over 51 points.")
def _ex_13_1(answer):
    truth = round(lesson_results()["figures"]["redo_snapshot"], 2)
    try:
        value = float(answer)
    except (TypeError, ValueError):
        value = answer
    said = f" The source text's: {LESSON_FIGURES['redo_snapshot']}."
    return assess(value, truth, tolerance=0.005, what="avg redone model calls").reply(
        said, hint=" Read the lesson's table: the row 'avg redone model calls', snapshot per page.")


@exercise("13.2", "An agent pays invoices. It checkpoints after every step, atomically and with "
          "fsync, but sends each payment with no idempotency key. Is every payment made "
          "exactly once, whatever the crash? Answer True or False.",
          "False. A perfect store cannot close the danger window: the payment is made, then the "
          "process dies before the checkpoint says so, and the resume pays again. The lab's "
          "snapshot store, atomic and correct under every rule of its contract, still files a "
          "report twice at the after_submit and mid_commit points of every bug page without the "
          "key. Only a key the receiver deduplicates (with the intent recorded first) makes it "
          "effectively once.")
def _ex_13_2(answer):
    dup = lesson_results()["figures"]["duplicate_points_no_key"]
    said = (f" The atomic snapshot store, without the key, files a report twice at {dup} crash "
            "points.")
    return assess(answer, dup == 0, what="every payment made exactly once").reply(
        said, hint=" Where is the payment when the process dies after sending it and before the "
                   "checkpoint is durable? Lesson 4, the danger window.")


LESSON = Lesson(
    number=13,
    notebook="13_closing",
    kind="closing",
    title="The interview answer, and what to do in your own agent",
    short_title="closing",
    question="The interview answer, and a checklist for your own agent",
    teaches="the interview summary, and a checklist for your own agent, each item linked to "
            "the lesson that measured it",
    objectives=(
        "answer \"where does a killed agent resume, and how do you know it is right?\" in one "
        "breath, and back each part with a measured number;",
        "answer the follow-up questions (追问) an interviewer asks next;",
        "go through a checklist for your own agent, and find for each item the lesson that "
        "measured it.",
    ),
    runs="the notebook runs in under half a minute",
    prerequisites="Lessons 1 to 6 at least; the others for the items they measured.",
    exercises=defined_in(__name__),
)

