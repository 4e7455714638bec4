"""Lessons 0 to 4, learning by doing: predictions, transfer questions and common wrong statements,
each judged from a measurement made just now, and the source text's code beside the lab's.

Exercise ids here continue each lesson's own (0.2, 2.3, 3.3, ...); quiz items are Q0.1, Q2.1, ...
Every sweep goes through the lab's one cache (`results`), so a lesson's experiment, its exercises and its quiz
never kill the same point twice in one kernel.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ..config import RunConfig
from ..events import apply_event, initial_state
from ..experiment import (RANDOM_KILL_LATENCY_MS, clean_run, crash_point, crash_worker,
                          replay_after_crash, run_worker, summarize, work_dir)
from ..world import read_bill
from . import results
from .exercises import exercise
from .teach import Measured, assess, show_code, statement

# --- the source text's code, as it gives it -------------------------------------------------------

#: The three snippets of the source text's "核心代码" (core code), verbatim; the English in
#: brackets translates its comments.
TEXT_CODE = {
    "apply_event": '''
# 事件 → 新状态：确定性的纯函数，重放几遍结果都一样
# [event -> new state: a deterministic pure function; replay it any number of times, same result]
def apply_event(state, ev):
    s = {**state, "findings": list(state["findings"]), "aborted": list(state["aborted"]), "seq": ev["seq"]}
    if ev["t"] == "intent":
        s["pending"] = {"page": ev["page"], "key": ev["key"]}
    elif ev["t"] == "page_done":
        s["next_page"] = ev["page"] + 1
        s["tokens"] += ev["tokens"]
        s["pending"] = None
        if ev["finding"]:
            s["findings"].append(ev["page"])
    elif ev["t"] == "aborted":
        s["next_page"] = ev["page"] + 1
        s["pending"] = None
        s["aborted"].append(ev["page"])
    return s
''',
    "atomic_write": '''
# 快照：写临时文件 + fsync + 原子替换
# [snapshot: write a temp file + fsync + atomic replace]
def atomic_write(path, data, torn):
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all_or_torn(fd, data, torn)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
''',
    "page_loop": '''
# 一页的主循环：Bug 页先记意图（带确定的幂等键），再提交，最后记"本页完成"
# [one page of the main loop: on a bug page first record the intent (with a deterministic
#  idempotency key), then submit, and finally record "page done"]
for page in range(state["next_page"], N_PAGES + 1):
    ...
    if page in BUG_PAGES:
        key = f"{TASK_ID}:p{page:02d}"
        record({"t": "intent", "page": page, "key": key})
        submit_report(root, page, key)          # INSERT OR IGNORE，key 有唯一约束 [key is UNIQUE]
    record({"t": "page_done", "page": page, "tokens": tokens, "finding": page in BUG_PAGES})
''',
}


def show_text_code(name: str):
    """The source text's version of `name` ("apply_event", "atomic_write", "page_loop")."""
    return show_code(TEXT_CODE[name], f"The source text's `{name}`" if name != "page_loop"
                     else "The source text's page loop")


def text_apply_event():
    """The source text's `apply_event`, compiled from the very text shown on screen."""
    scope: dict = {}
    exec(compile(TEXT_CODE["apply_event"], "<source text>", "exec"), scope)
    return scope["apply_event"]


# === lesson 0 ===================================================================================

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


# === lesson 2 ===================================================================================

PER_PAGE = RunConfig(store="snapshot", intent=False)
PER_OPERATION = RunConfig(store="snapshot", granularity="op", intent=False)
NO_CHECKPOINT = RunConfig(store="none", intent=False)
LONG_RUN = 20


def long_run_table(pages: int = LONG_RUN):
    """No checkpoint vs a snapshot per page, on the lesson's 12 pages and on a longer run:
    average and maximum redone calls over every crash point (each a real kill and resume)."""
    import pandas as pd

    designs = {(name, n): cfg.replace(pages=n) for name, cfg in
               (("none", NO_CHECKPOINT), ("per page", PER_PAGE)) for n in (12, pages)}
    sweeps = results.sweeps({f"{name} {n}": cfg for (name, n), cfg in designs.items()})
    rows = []
    for (name, n), cfg in designs.items():
        s = summarize(sweeps[f"{name} {n}"])
        rows.append({"design": name, "pages": n, "crash points": s["crash_points"],
                     "avg redone calls": round(s["avg_redone_model_calls"], 2),
                     "max redone calls": s["max_redone_model_calls"]})
    return pd.DataFrame(rows).set_index(["design", "pages"])


def avg_redone(config: RunConfig) -> float:
    return round(summarize(results.sweep(config))["avg_redone_model_calls"], 2)


@exercise("2.3", f"Transfer: a snapshot after every page, on a {LONG_RUN}-page run (bugs on pages 3, "
          "7, 10, 15 and 19), intents off. Predict the average number of model calls redone per "
          "crash, over every crash point.",
          "0.76, as on 12 pages. With a snapshot after each page, a crash redoes at most the call "
          "of the page it interrupted: every point of a page redoes one call except after_commit. "
          f"{LONG_RUN} pages give {LONG_RUN} x 4 + 5 = 85 points, 85 - {LONG_RUN} = 65 of them "
          "redo a call: 65 / 85 = 0.76. The 12-page run: 39 / 51 = 0.76. (With no checkpoint "
          "the average grows with the length of the run.)")
def _ex_2_3(answer):
    truth = avg_redone(PER_PAGE.replace(pages=LONG_RUN))
    c = assess(answer, truth, tolerance=0.05, what="average redone calls")
    return c.reply(hint=" How many calls can one crash cost with a "
                   "snapshot after each page, and at how many points is it one?")


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


# === lesson 3 ===================================================================================

LOG = RunConfig(store="log", intent=True, idempotency_key=True)
SNAP4 = LOG.replace(snapshot_every=4)

#: An event of a type no version of the lab writes: a damaged record, or one from a newer version.
UNKNOWN_EVENT = {"t": "intnet", "page": 3, "key": "bughunt:p03", "seq": 4}


def _outcome(fn, state, event) -> str:
    try:
        after = fn(state, event)
    except ValueError as e:
        return f"raises ValueError: {e}"
    changed = sorted(k for k in after if after[k] != state[k])
    return "ignores it: returns the state" + (f", only {', '.join(changed)} changed" if changed
                                              else " unchanged")


def apply_event_versions():
    """The source text's `apply_event` and the lab's, side by side: the same clean log replayed
    through each, then an event of an unknown type."""
    import pandas as pd

    from .replay import read_events

    with work_dir(in_memory=True) as base:
        clean_run(LOG, base / "run")
        events = read_events(base / "run")
    versions = {"source text": text_apply_event(), "lab": apply_event}
    rows = {}
    for name, fn in versions.items():
        state = initial_state()
        for e in events:
            state = fn(state, {k: v for k, v in e.items() if k != "crc"})
        rows[name] = {"clean log replayed": f"{len(events)} events -> next page "
                                            f"{state['next_page']}, findings {state['findings']}",
                      f"then {{'t': {UNKNOWN_EVENT['t']!r}, ...}}": _outcome(fn, state,
                                                                                UNKNOWN_EVENT)}
    return pd.DataFrame(rows).T


def lab_on_unknown_event() -> str:
    """'raise' or 'ignore': what the lab's `apply_event` does with an unknown event, tried now."""
    try:
        apply_event(initial_state(), UNKNOWN_EVENT)
    except ValueError:
        return "raise"
    return "ignore"


@exercise("3.3", "Predict, then run: the lab's apply_event is given an event whose type it does "
          "not know, {'t': 'intnet', ...} (a damaged record, or one written by a newer version). "
          "Does it 'ignore' it or 'raise'?",
          "'raise': a ValueError. The source text's version falls through every `elif` and returns "
          "the state with only `seq` moved on, so a damaged record would be applied as if it were "
          "nothing, and the rebuilt state would silently differ from the one that was saved. "
          "Recovery in the lab refuses instead (refuse, don't guess).")
def _ex_3_3(answer):
    truth = lab_on_unknown_event()
    c = assess(answer, truth, what="the lab's apply_event")
    return c.right, c.text


def replay_sweep(config: RunConfig) -> list:
    """Kill at every crash point of `config` and count what recovery would replay (read-only
    recovery: no resume needed for a count)."""
    return results.sweep(config, measure=replay_after_crash)


def replay_table(configs: dict[str, RunConfig]):
    """Average and maximum replayed events over every crash point, per configuration."""
    import pandas as pd

    rows = []
    for name, cfg in configs.items():
        counts = [r.replayed_events for r in replay_sweep(cfg)]
        rows.append({"design": name, "pages": cfg.pages, "crash points": len(counts),
                     "avg replayed": round(sum(counts) / len(counts), 2),
                     "max replayed": max(counts)})
    return pd.DataFrame(rows).set_index("design")


LONG_SNAP4 = SNAP4.replace(pages=LONG_RUN)


@exercise("3.4", f"Transfer: {LONG_RUN} pages (bugs on pages 3, 7, 10, 15 and 19), intents on, "
          "the log with a snapshot every 4 pages. Predict the largest number of events a "
          "recovery replays, over every crash point.",
          "4, as on 12 pages. The newest snapshot is never more than 4 pages old, so recovery "
          "replays at most 3 page_done events plus the intents of bug pages in that window. No "
          "window of 4 pages here holds two bug pages, so the worst is 3 + 1, e.g. inside the "
          "commit of page 16: page_done of 13, 14, 15 and the intent of 15. (A pure log replays "
          f"everything: {LONG_RUN} + 5 = 25 events at the end.)")
def _ex_3_4(answer):
    truth = max(r.replayed_events for r in replay_sweep(LONG_SNAP4))
    c = assess(answer, truth, what="max replayed events")
    return c.reply(hint=" How old can the newest snapshot be, and which "
                   "events after it can be in the log?")


@statement("Q3.1", "With a snapshot every few pages, the event log is no longer needed.",
           "False. The events written since the newest snapshot exist only in the log; without "
           "it they would be lost. And when the snapshot itself is unusable, the log is what "
           "recovery rebuilds everything from (the damaged-snapshot experiment above).")
def _q3_1():
    with tempfile.TemporaryDirectory(prefix="bughunt-q31-") as tmp:
        replayed = replay_after_crash(SNAP4, crash_point(SNAP4, "p7.after_submit"),
                                      Path(tmp) / "run").replayed_events
    return Measured(replayed == 0, f"Measured just now: snapshot every 4, killed at "
                    f"p7.after_submit, recovery needs {replayed} events that only the log holds "
                    "(written after the snapshot of page 4).")


@statement("Q3.2", "Recovering from a snapshot plus the events after it can give a different "
           "state than replaying the whole log.",
           "False. The snapshot is the state the same pure function had reached at that event; "
           "replaying the rest through that function gives what replaying everything gives. "
           "A snapshot changes the work, not the result.")
def _q3_2():
    from ..stores import rebuild_from_disk
    from .replay import read_events

    with tempfile.TemporaryDirectory(prefix="bughunt-q32-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        crash_worker(run_dir, SNAP4, "p11.after_visit")
        recovered = rebuild_from_disk(run_dir, SNAP4)
        whole = initial_state()
        for e in read_events(run_dir):
            whole = apply_event(whole, e)
    same = recovered.state == whole
    return Measured(not same, f"Measured just now: killed at p11.after_visit (snapshot every 4); "
                    f"from the snapshot plus {recovered.replayed_events} events, and from all "
                    f"{whole['seq']} events of the log: {'the same' if same else 'different'} "
                    "state.")


@results.memoized
def bytes_after_kill() -> dict:
    """Bytes on disk after a real kill -9, for a line left in Python's buffer and for a flushed
    one (lesson 6's buffer experiment, run here for the diagram of lesson 3)."""
    from .durability import buffer_demo

    return {how: buffer_demo(how)["bytes on disk"] for how in ("write", "flush")}


def power_cut_after_write() -> "object":
    """Three ways to replace a file, each journaled and put through the power-loss simulation:
    what the file can hold after a power cut right after the write returned.

    rename only: temp file, rename (no fsync); the source text's: temp file, fsync, rename;
    the lab's `Door.write_atomic`: temp file, fsync, rename, fsync of the directory.
    """
    import pandas as pd

    from ..diskio import Door
    from ..instruments.journal import JournalingFiles
    from ..powerloss import crash_states

    class JournalWithoutDirFsync(JournalingFiles):
        """The source text's sequence: everything but the directory fsync, journaled."""

        def fsync_dir(self, directory: Path) -> None:
            pass

    old, new = b'{"next_page": 4}\n', b'{"next_page": 8}\n'
    ways = {"rename only": (JournalingFiles, "never"),
            "source text: fsync, rename": (JournalWithoutDirFsync, "always"),
            "lab: fsync, rename, fsync dir": (JournalingFiles, "always")}
    rows = []
    for name, (journal, policy) in ways.items():
        ops: list[dict] = []
        with tempfile.TemporaryDirectory(prefix="bughunt-atomic-") as tmp:
            path = Path(tmp) / "snapshot.json"
            Door("always", files=JournalingFiles(ops.append)).write_atomic(path, old)
            first = len(ops)
            Door(policy, files=journal(ops.append)).write_atomic(path, new)
        after = [s for s in crash_states(ops, samples_per_cut=16, dedupe=False)
                 if s.cut == len(ops)]
        found = {"new": 0, "old": 0, "empty or torn": 0}
        for s in after:
            data = s.files.get("snapshot.json")
            found["new" if data == new else "old" if data == old else "empty or torn"] += 1
        rows.append({"write": name,
                     "fsyncs": sum(op["op"].startswith("fsync") for op in ops[first:]),
                     **{f"disk states: {k} file": v for k, v in found.items()}})
    return pd.DataFrame(rows).set_index("write")


@statement("Q3.3", "An atomic rename needs nothing else: write a temp file, rename it over the "
           "old one, and the new contents survive any crash.",
           "False. The rename is atomic for kill -9: a reader sees the old file or the new one. "
           "A power cut is different: without an fsync of the temp file before the rename, the "
           "new name can point at data that never reached the disk (an empty or torn file, as "
           "the ALICE study found in real applications); without an fsync of the directory after "
           "it, the rename itself can be lost and the old file comes back.")
def _q3_3():
    t = power_cut_after_write()
    bad, text = t.loc["rename only"], t.loc["source text: fsync, rename"]
    return Measured(bool(bad["disk states: empty or torn file"] == 0
                         and bad["disk states: old file"] == 0),
                    f"Simulated power cuts right after the write returned: rename only can leave "
                    f"the file empty or torn ({bad['disk states: empty or torn file']} of the "
                    f"states) or old; fsync + rename can still leave the old file "
                    f"({text['disk states: old file']} states); "
                    "only fsync + rename + directory fsync leaves the new contents in every state.")


# === lesson 4 ===================================================================================

NO_KEY = RunConfig(store="snapshot", intent=False, idempotency_key=False)
WITH_KEY = NO_KEY.replace(idempotency_key=True)
AT_MOST_ONCE = RunConfig(store="log", intent=True, idempotency_key=True, pending="abort")
SNAPSHOT_INTENTS = RunConfig(store="snapshot", intent=True, idempotency_key=False)


def duplicate_names(config: RunConfig) -> list[str]:
    return [r.crash_point for r in results.sweep(config) if r.duplicate_reports]


def transfer_sweep(config: RunConfig = SNAPSHOT_INTENTS):
    """Every crash point of `config`, killed and resumed: how many end right, duplicated, lost."""
    import pandas as pd

    s = summarize(results.sweep(config))
    rows = {"crash points": s["crash_points"], "recover correctly": s["correct_runs"],
            "file a report twice": s["duplicate_points"], "lose a report": s["lost_points"],
            "the points that file twice": ", ".join(duplicate_names(config)) or "none"}
    return pd.DataFrame({"measured": [str(v) for v in rows.values()]}, index=list(rows))


@exercise("4.3", "Transfer: the snapshot store with intents on, the key off, pending intents "
          "redone. Of its 54 crash points, how many end with a report filed twice?",
          "6, as without intents. The intent tells recovery that the page may be half done, but "
          "redoing it without a key files the report again whenever it had been filed: "
          "after_submit and mid_commit on pages 3, 7 and 10. after_intent is safe: the report "
          "was not filed yet. An intent alone closes nothing; it takes the key (and a tracker "
          "that honours it) to make the redo harmless.")
def _ex_4_3(answer):
    truth = len(duplicate_names(SNAPSHOT_INTENTS))
    c = assess(answer, truth, what="crash points that duplicate")
    return c.reply(hint=" Where is the report in the tracker while the "
                   "checkpoint says the page is not done?")


#: The source text's random kills: 39 real kills.
TEXT_REAL_KILLS = 39


def random_kill_odds(kills: int = TEXT_REAL_KILLS) -> dict:
    """The danger windows' share of a run's life (three traced runs, the random-kill world), and
    the chance that `kills` uniform random kills hit a window at least once."""
    from .danger import traced_runs, window_share

    share = window_share(traced_runs(NO_KEY, latency_ms=RANDOM_KILL_LATENCY_MS))
    low, high = share["share_of_life"], share["share_with_submit"]
    return {"share_low": low, "share_high": high,
            "p_hit_low": 1 - (1 - low) ** kills, "p_hit_high": 1 - (1 - high) ** kills,
            "kills_for_95": _kills_for(0.95, high), "kills": kills}


def _kills_for(p: float, share: float) -> int:
    import math
    return math.ceil(math.log(1 - p) / math.log(1 - share)) if 0 < share < 1 else 0


@statement("Q4.1", "If forty random kills find no duplicate report, the worker files no "
           "duplicates.",
           "False. The danger windows are a small share of a run's life, so random kills can miss "
           "every one of them while the bug is there: zero failures in n tries only bounds the "
           "rate below about 3/n (the rule of three), and says nothing about which points were "
           "never tried. The exhaustive sweep kills each crash point once and finds every "
           "duplicate point, on every machine.")
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


@statement("Q4.2", "A lock on the run prevents duplicate reports.",
           "False. Every sweep runs with the run lock (one worker per run directory), and the "
           "duplicates come anyway: from one worker after another, the resume redoing a page "
           "whose report the killed worker had filed. A lock orders workers; it cannot tell the "
           "next one what the dead one did. (Nor does it stop a paused worker that wakes up after "
           "losing it: that takes a fencing token the tracker checks; see Further reading.)")
def _q4_2():
    found = duplicate_names(NO_KEY)
    return Measured(not found, f"Measured: with the lock held by every worker, the key-off sweep "
                    f"filed a report twice at {len(found)} crash points ({', '.join(found[:2])}, "
                    "...).")


@statement("Q4.3", "At most once is safe: nothing is ever filed twice, and nothing is lost.",
           "False. At most once never files twice, but it gives up a page whose report may not "
           "have been filed: killed at after_intent, the report is lost.")
def _q4_3():
    s = summarize(results.sweep(AT_MOST_ONCE))
    lost = [r.crash_point for r in results.sweep(AT_MOST_ONCE) if r.lost_reports]
    return Measured(s["duplicate_points"] == 0 and s["lost_points"] == 0,
                    f"Measured (at most once, 54 points): {s['duplicate_points']} points file "
                    f"twice, {s['lost_points']} lose a report ({', '.join(lost)}).")


@statement("Q4.4", "With the idempotency key on, no crash point files a report twice, even "
           "without intents.",
           "True. Without intents the resume still redoes the page whose report may be filed; "
           "the key makes that redo harmless, because the tracker ignores a second report with "
           "the same key (INSERT OR IGNORE on a UNIQUE key). What the intent adds is knowing "
           "that the page may be half done, which at-most-once recovery needs.")
def _q4_4():
    found = duplicate_names(WITH_KEY)
    return Measured(not found, f"Measured (snapshot store, intents off, key on, 51 points): "
                    f"{len(found)} points file a report twice.")
