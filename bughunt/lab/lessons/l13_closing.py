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
from ...experiment import lesson, lesson_table, rule_of_three
from .. import results
from ..claims import Claims, Invariants
from ..judges import assess, defined_in, exercise
from ..registry import Lesson
from ..views import Table

#: The source text's random-kill experiment (追问 1): 40 tries, 39 real kills, 1 duplicate hit.
SOURCE_RANDOM_KILLS = 39


def lesson_results() -> dict:
    """The lesson's five sweeps (264 crash+resume pairs), once per kernel."""
    return results.remember(("closing", "lesson"), lesson)


def the_table(result: dict | None = None) -> Table:
    """The lesson's table: the source text's figure beside this machine's, row by row."""
    return Table(lesson_table(result or lesson_results()), "the source text's table, live",
                 Invariants())


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


#: Lesson 8's power-loss sweep: seeded random mixes of unsynced writes per cut, beside the two
#: extremes (`powerloss.crash_states`).
MIXES_PER_CUT = 3


@results.memoized
def without_dir_fsync() -> dict:
    """Lesson 8's power-loss sweep (the same function, settings and seed: 6 pages; at every cut
    the two extremes plus 3 seeded random mixes) on the snapshot store with fsync always, with
    and without its directory fsync (the planted bug `no-dir-fsync`, a patched copy of the real
    source)."""
    from ... import beyond as B

    out = {}
    for v in B.POWER_VARIANTS[:2]:
        s = B.power_summary(B.power_loss_sweep(v, samples_per_cut=MIXES_PER_CUT, seed=0))
        out["without" if v.mutant else "with"] = {
            "states": s["states explored"], "losing": s["states losing committed pages"],
            "correct": s["correct"], "pages": v.config.pages, "mixes": MIXES_PER_CUT}
    return out


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
def crash_loop(limit: int | None = None) -> dict:
    """A durable task whose step dies every time, with the runtime's restart limit (lesson 7's
    default, 5, unless `limit` says otherwise)."""
    from ...durable.experiments import restart_limit_story
    from ...durable.runtime import DEFAULT_RESTART_LIMIT

    limit = DEFAULT_RESTART_LIMIT if limit is None else limit

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


@results.memoized
def reference_grade():
    """The lab's reference store, the answer key of lesson 9's capstone, graded (lesson 9 grades
    the learner's stores; this one is graded here)."""
    from .l09_your_own_store import reference
    return reference()


def _link(n: int) -> str:
    """A link to lesson `n`'s notebook, from the registry."""
    from ..registry import by_number

    return by_number(n).link(f"lesson {n}")


# --- what the closing says its run found (each sentence checked against that run) ---------------

CLAIMS = Claims(13)


def _f() -> dict:
    return lesson_results()["figures"]


def _nn() -> dict:
    return lesson_results()["no_newline"]


def _closing_sweep(tag: str) -> list:
    return [r for r in lesson_results()["records"] if r.sweep == tag]


@CLAIMS.claim("**How state is kept:** a crash redoes {none} model calls on average with no "
              "checkpoint, {snap} with a snapshot per page (source text: {src_none} and "
              "{src_snap}); a recovery replays {log} events on average from a pure log, {snap4} "
              "with a snapshot every 4 pages (source text: {src_log} and {src_snap4}).")
def state_is_kept():
    f, src = _f(), lesson_results()["lesson"]
    keys = {"none": "redo_none", "snap": "redo_snapshot", "log": "replay_log_avg",
            "snap4": "replay_snap4_avg"}
    values = {k: f[v] for k, v in keys.items()} | {f"src_{k}": src[v] for k, v in keys.items()}
    return all(abs(f[v] - src[v]) < 0.005 for v in keys.values()), values


@CLAIMS.claim("**Side effects:** without the key, {dup} crash points file a report twice (source "
              "text: {src_dup}); with intents and the key, {correct} of {points} recover "
              "correctly (source text: {src_correct} of 54).")
def side_effects_once():
    f, src = _f(), lesson_results()["lesson"]
    return (f["duplicate_points_no_key"] > 0 and f["log_runs_correct"] == f["crash_points_log"],
            {"dup": f["duplicate_points_no_key"], "src_dup": src["duplicate_points_no_key"],
             "correct": f["log_runs_correct"], "points": f["crash_points_log"],
             "src_correct": src["log_runs_correct"]})


@CLAIMS.claim("**A damaged checkpoint:** without the newline repair, the rebuild from disk fails "
              "at {fails} crash points, and at {right} of them the resumed run itself was right.")
def damaged_checkpoint():
    bad = [r for r in _closing_sweep("log_no_newline") if r.rebuild_ok is False or r.disk_error]
    right = sum(bool(r.resumed_right) for r in bad)
    return bool(bad) and right == len(bad), {"fails": len(bad), "right": right}


@CLAIMS.claim("**Testing:** {a} and {b} crash points, each killed by a real SIGKILL and resumed: "
              "{pairs} crash+resume pairs just now, in five sweeps.")
def testing_every_point():
    r, f = lesson_results(), _f()
    return (r["pairs"] == len(r["records"]) > 0,
            {"a": f["crash_points_no_intent"], "b": f["crash_points_log"], "pairs": r["pairs"]})


# The checklist's measurements: one claim per item.

@CLAIMS.claim("a crash redoes {snap} model calls on average with a snapshot after every page, "
              "{none} with none ({points} crash points)")
def item_boundaries():
    f = _f()
    return f["redo_snapshot"] < 1 < f["redo_none"], {
        "snap": f["redo_snapshot"], "none": f["redo_none"], "points": f["crash_points_no_intent"]}


@CLAIMS.claim("a recovery replays {log} events on average (at most {log_max}) from a pure log, "
              "{snap4} (at most {snap4_max}) with a snapshot every 4 pages")
def item_bounded_replay():
    f = _f()
    return (f["replay_snap4_max"] < f["replay_log_max"],
            {"log": f["replay_log_avg"], "log_max": f["replay_log_max"],
             "snap4": f["replay_snap4_avg"], "snap4_max": f["replay_snap4_max"]})


@CLAIMS.claim("without a key {dup} of {points} crash points file a report twice; with intents "
              "and the key {correct} of {log_points} recover correctly")
def item_intent_and_key():
    f = _f()
    return (f["duplicate_points_no_key"] > 0 and f["log_runs_correct"] == f["crash_points_log"],
            {"dup": f["duplicate_points_no_key"], "points": f["crash_points_no_intent"],
             "correct": f["log_runs_correct"], "log_points": f["crash_points_log"]})


@CLAIMS.claim("the {points} deterministic kills of the sweep without intents find all {dup} "
              "crash points that file a report twice: `after_submit` and `mid_commit` of each of "
              "the {bugs} bug pages; zero failures in {random} random kills (the source text's) "
              "would only bound the rate below {bound} (the rule of three)")
def item_every_point():
    from ...world import Site

    dups = [r for r in _closing_sweep("snapshot") if r.duplicate_reports]
    bugs = Site.load(12).bug_pages
    want = {(p, label) for p in bugs for label in ("after_submit", "mid_commit")}
    return ({(r.page, r.label) for r in dups} == want and len(dups) == len(want),
            {"points": len(_closing_sweep("snapshot")), "dup": len(dups), "bugs": len(bugs),
             "random": SOURCE_RANDOM_KILLS, "bound": f"{rule_of_three(SOURCE_RANDOM_KILLS):.1%}"})


@CLAIMS.claim("written in place, a kill -9 loses an acknowledged checkpoint at {losing} of "
              "{states} crash states of the conformance suite; the lab's store as it is (temp "
              "file, fsync, rename, directory fsync) breaks {atomic} of its rules")
def item_in_place():
    t = torn_snapshot()
    return (t["kill_states_losing"] > 0 and not t["atomic_broken"],
            {"losing": t["kill_states_losing"], "states": t["kill_states"],
             "atomic": len(t["atomic_broken"])})


@CLAIMS.claim("without the newline repair the resumed run is right at {right} of {points} "
              "points, yet the log on disk is wrong at {fails} of them")
def item_newline_repair():
    nn = _nn()
    return nn["rebuild_failures"] > 0, {"right": nn["resume_correct"],
                                        "points": nn["crash_points"],
                                        "fails": nn["rebuild_failures"]}


@CLAIMS.claim("only the rebuild from disk, compared with memory, catches those {fails} points; a "
              "reader that just skips bad lines, as the source text's does, returns a wrong "
              "state at {reader} of them without a word")
def item_three_witnesses():
    nn = _nn()
    return (nn["lesson_reader_failures"] > 0,
            {"fails": nn["rebuild_failures"], "reader": nn["lesson_reader_failures"]})


@CLAIMS.claim("lesson 8's power-loss sweep ({pages} pages; at every cut the two extremes, "
              "nothing unsynced survived and everything did, plus {mixes} seeded random mixes): "
              "with the "
              "directory fsync removed, {losing} of {states} power-cut states lose a committed "
              "page; with it, {safe_losing} of {safe_states}")
def item_dir_fsync():
    w = without_dir_fsync()
    return (w["without"]["losing"] > 0 and w["with"]["losing"] == 0,
            {"pages": w["without"]["pages"], "mixes": w["without"]["mixes"],
             "losing": w["without"]["losing"],
             "states": w["without"]["states"], "safe_losing": w["with"]["losing"],
             "safe_states": w["with"]["states"]})


@CLAIMS.claim("two resumers started at the same moment, {trials} trials here (lesson 8 runs "
              "10): with flock both proceeded in {flock_both}, without a lock in {none_both} "
              "(three-way check failed in {none_fail})")
def item_run_lock():
    race = resumer_race()
    return (race["flock"]["both_proceeded"] == 0 and race["none"]["both_proceeded"] > 0,
            {"trials": race["flock"]["trials"], "flock_both": race["flock"]["both_proceeded"],
             "none_both": race["none"]["both_proceeded"],
             "none_fail": race["none"]["three_way_failures"]})


@CLAIMS.claim("a step that always dies, with the runtime's default restart limit ({limit}, as "
              "in lesson 7): {processes} processes started, then the task ended: {outcome} "
              "({report})")
def item_crash_loop():
    from ...durable.runtime import DEFAULT_RESTART_LIMIT

    loop = crash_loop()
    return (loop["limit"] == DEFAULT_RESTART_LIMIT and loop["processes"] == loop["limit"] + 1
            and loop["outcome"] != "done",
            {k: loop[k] for k in ("limit", "processes", "outcome", "report")})


@CLAIMS.claim("killed at {point}: redo bills {redo} calls for one answer, abort bills {abort} "
              "and records {outcome}")
def item_call_in_flight():
    call = call_in_flight()
    return (call["redo_billed"] == call["abort_billed"] + 1,
            {"point": call["point"], "redo": call["redo_billed"], "abort": call["abort_billed"],
             "outcome": call["abort_outcome"]})


@CLAIMS.claim("the lab's reference store (the answer key of lesson 9's capstone, graded here) "
              "keeps all {rules} rules at {states} crash states and recovers correctly at "
              "{correct} of {points} crash points")
def item_reference_store():
    ref = reference_grade()
    correct = sum(r.correct for r in ref.records)
    return (ref.conformance_ok and correct == len(ref.records),
            {"rules": len(ref.rules), "states": ref.states, "correct": correct,
             "points": len(ref.records)})


#: The checklist: what to do, the claim that measured it here (or None: not rerun), the lesson.
CHECKLIST = (
    ("Checkpoint at the natural boundaries: a complete model reply, a complete tool result.",
     "item_boundaries", 2),
    ("Keep an event log, and bound its replay with a snapshot every N steps.",
     "item_bounded_replay", 3),
    ("Record the intent, then do the side effect with a deterministic idempotency key that the "
     "receiver deduplicates.", "item_intent_and_key", 4),
    ("Test by killing at every crash point, not at random moments.", "item_every_point", 4),
    ("Write a snapshot to a temp file, fsync it, rename it over the old one, fsync the "
     "directory; never in place.", "item_in_place", 8),
    ("Read a log by skipping (and counting) a line that does not parse; end a torn last line "
     "with a newline before appending, idempotently.", "item_newline_repair", 5),
    ("Judge a recovery by three witnesses: the outside system, the resumed run's memory, a "
     "fresh rebuild from disk.", "item_three_witnesses", 5),
    ("For power loss, fsync the file, then its directory after a rename or a create; keep the "
     "hot path to a flush if a lost line costs little.", "item_dir_fsync", 8),
    ("Let one process own a run: a lock held for the life of the process.", "item_run_lock", 8),
    ("Count restarts, and stop a task that crashes at the same step every time.",
     "item_crash_loop", 7),
    ("Decide what a killed model call becomes: redone (at least once) or aborted (at most "
     "once); the whole call is billed either way by this server (a real provider may bill "
     "only the prompt and what it had generated: lesson 11).", "item_call_in_flight", 11),
    ("Hold your own store to a contract, at every crash state and every crash point.",
     "item_reference_store", 9),
    ("Using a framework's checkpointer? Sweep it the same way: the side effect's key is still "
     "yours.", "LangGraph and DBOS under the same kill -9 sweep, in lesson 10 (not rerun here: "
     "it takes a minute)", 10),
    ("Checkpointing with json.dump, TinyDB, shelve or sqlite3? Explore the code you actually run "
     "(`python -m bughunt explore`, Linux).", "which of the four keep an acknowledged checkpoint "
     "at every kill -9 and power-cut state, and each fix explored again, in lesson 12 (not "
     "rerun here: it takes a minute)", 12),
)


def checklist(result: dict | None = None) -> str:
    """What to do in your own agent, as a Markdown table: each item, the measurement behind it
    (a claim checked on this kernel's runs: where it does not hold, the cell says so), and the
    lesson where it was measured."""
    lines = ["| | in your own agent | measured here, just now | where |",
             "|---|---|---|---|"]
    for i, (do, key, n) in enumerate(CHECKLIST, 1):
        if key in {c.key for c in CLAIMS}:
            seen = CLAIMS[key].on().markdown().replace("\n\n> ", " ").replace("\n", " ")
        else:
            seen = key
        lines.append(f"| {i} | {do} | {seen} | {_link(n)} |")
    return "\n".join(lines)


# --- exercises ---------------------------------------------------------------------------------

#: Exercise 13.1's site: shorter than any the lessons ran with a snapshot per page.
SHORT_SITE = 3


def _short_site_config() -> RunConfig:
    return RunConfig(store="snapshot", intent=False, pages=SHORT_SITE)


@exercise("13.1", f"The interviewer asks: with a snapshot after every page, on a {SHORT_SITE}-page "
          "site (the bug on page 3, so that page has the extra after_submit point), how many "
          "model calls does a crash cost on average over all its crash points? To 2 decimals.",
          "0.77. Count the points: pages 1 and 2 have four each (after the model call, after the "
          "visit, inside the commit, after the commit), page 3 has five (after_submit too): 13. "
          "Every point before its page's snapshot is durable pays that page's one call again; "
          "after_commit pays nothing: 13 - 3 = 10 redone calls over 13 points, 0.77. On 12 pages "
          "the same count gives 39 / 51 = 0.76: with a snapshot per page the cost of a crash "
          "does not grow with the run.")
def _ex_13_1(answer):
    from ...experiment import summarize

    s = summarize(results.sweep_once(_short_site_config()))
    truth = round(s["avg_redone_model_calls"], 2)
    try:
        value = float(answer)
    except (TypeError, ValueError):
        value = answer
    said = (f" {s['crash_points']} crash points on {SHORT_SITE} pages, each killed and resumed "
            "just now.")
    return assess(value, truth, tolerance=0.005, what="avg redone model calls").reply(
        said, hint=" List one page's crash points and ask, for each, whether the page's call is "
                   "already in a durable snapshot; then count over the three pages.")


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
    runs="the notebook runs in under a minute",
    prerequisites="Lessons 1 to 6 at least; the others for the items they measured.",
    exercises=defined_in(__name__),
    claims=CLAIMS,
)

