"""Lesson 3, replay vs snapshot (重放 vs 快照): how the state is put back together after a crash.

An event log (事件日志) is recovered by replaying its events through `apply_event`; a snapshot (快照)
of the whole state lets recovery skip every event it already covers. The log store with
`snapshot_every = N` is Codex's rollout with its `compacted` records: the snapshot records how far
into the log it reaches, and recovery replays only the events after it.

Here: the clean run's event log, the two 54-point sweeps of the lesson (pure log, snapshot every 4),
replayed events against the snapshot interval N and what each N writes, where a snapshot stops the
replay in the file, and what recovery does when the newest snapshot is unusable.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from matplotlib.ticker import MaxNLocator

from ...config import RunConfig
from ...events import apply_event, initial_state
from ...experiment import crash_point as find_point
from ...experiment import (LESSON_CONFIGS, LESSON_FIGURES, clean_run, crash_points, crash_worker,
                          frame, outcome, replay_after_crash, run_crash_jobs, run_worker,
                          work_dir)
from ...stores import LOG_FILE, SNAPSHOT_FILE, rebuild_from_disk, records
from .. import results
from ..judges import Measured, assess, defined_in, exercise, statement
from ..crash_panel import CrashPanel
from ..plots import explain_average, plot_points
from ..reference import TEXT_CODE
from ..style import COLORS, LESSON_STYLE, lesson_line, new_figure, page_ticks
from ..registry import Lesson
from .l02_granularity import LONG_RUN

#: The lesson's two designs: log + intents + idempotency key, atomic writes, no fsync.
DESIGNS = {"pure log": LESSON_CONFIGS["log"], "snapshot every 4": LESSON_CONFIGS["log_snap4"]}
DESIGN_COLORS = {"pure log": COLORS["blue"], "snapshot every 4": COLORS["orange"]}

#: The lesson's (avg, max) replayed events over 54 crash points, by snapshot interval N
#: (0 = pure log).
LESSON_BY_INTERVAL = {
    0: (LESSON_FIGURES["replay_log_avg"], LESSON_FIGURES["replay_log_max"]),
    4: (LESSON_FIGURES["replay_snap4_avg"], LESSON_FIGURES["replay_snap4_max"]),
}
LESSON_BY_DESIGN = {"pure log": LESSON_BY_INTERVAL[0], "snapshot every 4": LESSON_BY_INTERVAL[4]}
INTERVALS = (0, 1, 2, 3, 4, 6, 12)


def design_name(config: RunConfig) -> str:
    """The lesson's name for a log design: "pure log" or "snapshot every N"."""
    return "pure log" if not config.snapshot_every else f"snapshot every {config.snapshot_every}"


# --- the event log of a clean run ---------------------------------------------------------------

def read_events(run_dir: Path) -> list[dict]:
    """The events of a run's log, decoded and checksum-checked, in order (torn lines left out)."""
    events = []
    for raw in (Path(run_dir) / LOG_FILE).read_bytes().split(b"\n"):
        if raw.strip():
            try:
                events.append(records.decode(raw))
            except records.Torn:
                continue
    return events


def clean_event_log(config: RunConfig = DESIGNS["pure log"]):
    """The event log of one clean run as a table: seq, type, page (and the intent's key).

    One `page_done` per page, and one `intent` before each report: 12 + 3 = 15 in the lesson.
    """
    import pandas as pd

    with work_dir(in_memory=True) as base:
        clean_run(config, base / "clean")
        events = read_events(base / "clean")
    return pd.DataFrame([{"seq": e["seq"], "type": e["t"], "page": e["page"],
                          "key": e.get("key") or ""} for e in events]).set_index("seq")


# --- the lesson's two sweeps --------------------------------------------------------------------

def replay_sweeps(designs: dict[str, RunConfig] = DESIGNS, *, progress=None):
    """Crash at every point of each design, resume, and count the events recovery replayed.

    The sweeps go through the lab's results cache, so the panel further down shows these same
    runs instead of killing and resuming 54 workers again.
    """
    import pandas as pd

    return pd.concat([frame(records).assign(design=name)
                      for name, records in results.sweeps_once(designs, progress=progress).items()],
                     ignore_index=True)


def design_table(df, designs: dict[str, RunConfig] = DESIGNS):
    """Per design: avg and max replayed events, lesson vs this machine, and correct recoveries."""
    import pandas as pd

    rows = []
    for name in designs:
        d = df[df["design"] == name]
        lesson_avg, lesson_max = LESSON_BY_DESIGN.get(name, ("-", "-"))
        rows.append({"design": name, "crash points": len(d),
                     "avg replayed": round(d["replayed_events"].mean(), 2),
                     "lesson avg": lesson_avg,
                     "max replayed": int(d["replayed_events"].max()),
                     "lesson max": lesson_max,
                     "correct runs": int((d["verdict"] == "correct").sum())})
    return pd.DataFrame(rows).set_index("design")


def explain_replay_averages(df) -> str:
    """Where the averages come from: total replayed events over the crash points."""
    return explain_average(df, "replayed_events", "replayed events")


def _snapshot_points(d, n: int) -> list[int]:
    """The first crash points after a snapshot became durable (after_commit of pages N, 2N, ...):
    the snapshot is written inside the page's commit, between mid_commit and after_commit."""
    hit = d[(d["label"] == "after_commit") & (d["page"] % n == 0)]
    return list(hit["index"])


def plot_replayed(df):
    """Replayed events at every crash point, pure log above, snapshot every 4 below, same scale.

    Pure log climbs like a staircase to the whole log; with snapshots the count falls back to zero
    after every snapshot, so it never climbs far. The lesson's averages are the dashed lines.
    """
    names = list(dict.fromkeys(df["design"]))
    fig, axes = new_figure(10, 5.6, nrows=len(names), sharex=True, sharey=True)
    axes = list(axes) if len(names) > 1 else [axes]
    top = int(df["replayed_events"].max())
    for ax, name in zip(axes, names):
        d = df[df["design"] == name]
        avg = d["replayed_events"].mean()
        ax.bar(d["index"], d["replayed_events"], width=0.8, color=DESIGN_COLORS.get(name,
               COLORS["green"]), label=f"{name}, this machine: avg {avg:.2f}, "
                                       f"max {int(d['replayed_events'].max())}")
        if name in LESSON_BY_DESIGN:
            lesson_avg, lesson_max = LESSON_BY_DESIGN[name]
            lesson_line(ax, lesson_avg, f"lesson ({name}): avg {lesson_avg}, max {lesson_max}")
        n = int(name.rsplit(" ", 1)[-1]) if name.startswith("snapshot every") else 0
        for i, x in enumerate(_snapshot_points(d, n) if n else []):
            ax.axvline(x - 0.5, color=COLORS["black"], linestyle=":", linewidth=1,
                       label="snapshot written" if i == 0 else None)
        ax.set_ylabel("replayed events\n(events)")
        ax.set_ylim(0, top * 1.3)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8, loc="upper left", ncols=3)
    axes[0].set_title("Events replayed at recovery after a crash at each point "
                      "(54 crash points: log, intents on, key on, atomic)")
    page_ticks(axes[-1], df[df["design"] == names[0]])
    axes[-1].set_xlabel("crash point (grouped by page; p3 = first point of page 3)")
    return fig


# --- the snapshot interval N --------------------------------------------------------------------

def replay_by_interval(intervals=INTERVALS, base: RunConfig = DESIGNS["pure log"], *,
                       progress=None):
    """Replayed events at every crash point for each snapshot interval N (0 = pure log).

    Only the replay count is needed, so each point is one worker killed there and a read-only
    recovery (`replay_after_crash`), not a full resume: half the processes, the same count.
    """
    import pandas as pd

    return pd.concat([frame(rows).assign(snapshot_every=n)
                      for n, rows in replay_counts(tuple(intervals), base, progress=progress).items()],
                     ignore_index=True)


@results.memoized
def replay_counts(intervals: tuple[int, ...], base: RunConfig, *,
                  progress=None) -> dict[int, list]:
    """Per interval N, a ReplayCount at every crash point (one pool for all of them)."""
    configs = {n: base.replace(snapshot_every=n) for n in intervals}
    jobs = [(f"n{n:02d}", cfg, p) for n, cfg in configs.items() for p in crash_points(cfg)]
    with work_dir(in_memory=True) as tmp:
        rows = run_crash_jobs(jobs, tmp, progress=progress, measure=replay_after_crash)
    return {n: [r for r in rows if r.sweep == f"n{n:02d}"] for n in intervals}


def writes_per_clean_run(config: RunConfig) -> dict:
    """Checkpoint writes of one clean run, by kind: the price paid on every run, crash or not."""
    latencies = clean_run(config)["checkpoint_writes"]["latencies_ns"]
    return {kind: len(v) for kind, v in latencies.items()}


def interval_table(df, base: RunConfig = DESIGNS["pure log"]):
    """Per N: avg and max replayed events (lesson beside us where it has a figure), and writes."""
    import pandas as pd

    rows = []
    for n, d in df.groupby("snapshot_every"):
        writes = writes_per_clean_run(base.replace(snapshot_every=int(n)))
        lesson_avg, lesson_max = LESSON_BY_INTERVAL.get(n, ("-", "-")) if (
            base.pages == 12 and base.intent) else ("-", "-")
        rows.append({"N": int(n), "design": design_name(base.replace(snapshot_every=int(n))),
                     "avg replayed": round(d["replayed_events"].mean(), 2),
                     "lesson avg": lesson_avg,
                     "max replayed": int(d["replayed_events"].max()),
                     "lesson max": lesson_max,
                     "log appends": writes.get("append", 0),
                     "snapshot writes": writes.get("snapshot", 0)})
    return pd.DataFrame(rows).set_index("N")


def plot_interval(table):
    """Left: avg and max replayed events against N. Right: snapshot writes per clean run.

    Pure log (N = 0) sits apart at the left and is not joined to the rest: it is no snapshot at
    all, not a very short interval. The lesson's figures are open grey diamonds.
    """
    fig, (left, right) = new_figure(11, 4.2, ncols=2, gridspec_kw={"width_ratios": [3, 2]})
    snap = table[table.index > 0]
    for col, color, marker, dx, dy, ha in (("max replayed", COLORS["red"], "s", -7, 7, "right"),
                                           ("avg replayed", COLORS["blue"], "o", 7, -4, "left")):
        left.plot(snap.index, snap[col], color=color, marker=marker, label=f"{col}, this machine")
        if 0 in table.index:
            left.scatter([0], [table.loc[0, col]], color=color, marker=marker, zorder=3)
            left.annotate(f"{table.loc[0, col]:g}", (0, table.loc[0, col]), xytext=(11, -3),
                          textcoords="offset points", fontsize=8, color=color)
        for n, v in snap[col].items():
            left.annotate(f"{v:g}", (n, v), xytext=(dx, dy), textcoords="offset points",
                          ha=ha, fontsize=8, color=color)
    lesson = [(n, v) for n in table.index for v in (table.loc[n, "lesson avg"],
                                                      table.loc[n, "lesson max"]) if v != "-"]
    if lesson:
        left.scatter([n for n, _ in lesson], [v for _, v in lesson], s=130, marker="D",
                     facecolors="none", edgecolors=LESSON_STYLE["color"], linewidths=1.8,
                     label="lesson (pure log and N = 4)", zorder=4)
    ticks = list(table.index)
    labels = ["0\npure log" if n == 0 else str(n) for n in ticks]
    left.set_xticks(ticks, labels)
    left.set_xlabel("snapshot interval N (pages)")
    left.set_ylabel("replayed events at recovery (events)")
    left.set_title("Replay after a crash, by snapshot interval (54 crash points each)",
                   fontsize=10)
    left.set_ylim(-0.6, table["max replayed"].max() * 1.2)
    left.yaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_xlim(-0.7, max(ticks) + 1.3)
    left.legend(fontsize=8, loc="upper center")

    right.bar(range(len(table)), table["snapshot writes"], color=COLORS["orange"],
              label="snapshot writes")
    for i, v in enumerate(table["snapshot writes"]):
        right.annotate(f"{v}", (i, v), xytext=(0, 3), textcoords="offset points", ha="center",
                       fontsize=8)
    appends = table["log appends"]
    right.plot(range(len(table)), appends, color=COLORS["blue"], marker="o",
               label=f"log appends ({appends.min()}" + (f"-{appends.max()})" if appends.min()
                                                         != appends.max() else ")"))
    right.set_xticks(range(len(table)), labels)
    right.set_xlabel("snapshot interval N (pages)")
    right.set_ylabel("writes in one clean run (writes)")
    right.set_title("The price: checkpoint writes on every run", fontsize=10)
    right.set_ylim(0, max(appends.max(), table["snapshot writes"].max()) * 1.3)
    right.yaxis.set_major_locator(MaxNLocator(integer=True))
    right.legend(fontsize=8, loc="upper right")
    return fig


# --- where the snapshot stops the replay, and when it cannot ------------------------------------

def snapshot_coverage(config: RunConfig = DESIGNS["snapshot every 4"],
                      crash_point: str = "p8.mid_commit"):
    """After a crash at `crash_point`: what the log holds, how far the snapshot reaches, and what
    recovery decodes and replays. The snapshot's `log_offset` is the byte where replay starts.
    """
    import pandas as pd

    point = find_point(config, crash_point)
    with tempfile.TemporaryDirectory(prefix="bughunt-cover-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        crash_worker(run_dir, config, point)
        data = (run_dir / LOG_FILE).read_bytes()
        events = read_events(run_dir)
        snap_path = run_dir / SNAPSHOT_FILE
        snap = json.loads(snap_path.read_bytes()) if snap_path.exists() else None
        rec = rebuild_from_disk(run_dir, config)
    offset = snap["log_offset"] if snap else 0
    covered = snap["state"]["seq"] if snap else 0
    lines_after = data[offset:].count(b"\n")
    rows = [
        ("crash point", point.name),
        ("events in the log", f"{len(events)} (seq 1-{events[-1]['seq'] if events else 0})"),
        ("log size", f"{len(data)} bytes"),
        ("newest snapshot", f"after page {snap['state']['next_page'] - 1}" if snap else "none"),
        ("snapshot covers", f"events seq 1-{covered}, log bytes 0-{offset}" if snap
         else "nothing"),
        ("lines recovery decodes", f"{lines_after} (after byte {offset})"),
        ("events replayed", rec.replayed_events),
        ("state recovered", f"next page {rec.state['next_page']}, "
                            f"findings {rec.state['findings']}, "
                            f"pending intent {rec.state['pending']}"),
    ]
    return pd.DataFrame({"value": [v for _, v in rows]}, index=[k for k, _ in rows])


def cut_in_half(path: Path) -> None:
    """Damage a snapshot the way a torn in-place write would: keep only its first half."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def change_one_digit(path: Path) -> None:
    """Damage a snapshot that still parses: change one digit of its token count (a flipped bit)."""
    data = bytearray(path.read_bytes())
    i = data.index(b'"tokens":') + len(b'"tokens":')
    data[i] = ord("0") + (data[i] - ord("0") + 1) % 10
    path.write_bytes(bytes(data))


DAMAGES = {"intact": None, "cut in half": cut_in_half, "one digit changed": change_one_digit}


def damaged_snapshot(config: RunConfig = DESIGNS["snapshot every 4"],
                     crash_point: str = "p8.mid_commit"):
    """Crash, damage the newest snapshot (or not), resume: what did recovery replay, was it right?

    Only the newest snapshot may bound replay; when it is unusable, the log store does not guess
    with anything older, it replays the whole log and reports `snapshot_fallback = "log"`.
    """
    import pandas as pd

    rows = []
    for name, damage in DAMAGES.items():
        with tempfile.TemporaryDirectory(prefix="bughunt-damage-") as tmp:
            run_dir = Path(tmp) / "run"
            run_dir.mkdir()
            crash_worker(run_dir, config, crash_point)
            if damage:
                damage(run_dir / SNAPSHOT_FILE)
            proc = run_worker(run_dir, config)
            if proc.returncode != 0:
                raise RuntimeError(f"resume failed: {proc.stderr.strip()[-300:]}")
            report = json.loads(proc.stdout)
            check = outcome(run_dir, config, report)
        rows.append({"snapshot": name, "snapshot used": report["snapshot_used"],
                     "snapshot_fallback": report["snapshot_fallback"] or "-",
                     "replayed events": report["replayed_events"],
                     "findings": report["findings"],
                     "three-way check": "ok" if check.three_way_check else "FAILS"})
    return pd.DataFrame(rows).set_index("snapshot")


# --- the panel ----------------------------------------------------------------------------------

def lesson_reference(config: RunConfig) -> tuple[float, str] | None:
    """The lesson's average for this setting, if it has one (12 pages, intents on, N = 0 or 4)."""
    if config.pages != 12 or not config.intent or config.snapshot_every not in LESSON_BY_INTERVAL:
        return None
    return LESSON_BY_INTERVAL[config.snapshot_every][0], design_name(config)


def panel_plot(df, config, highlight):
    """The panel's figure: replayed events per crash point, with the lesson's average if any."""
    return plot_points(df, config, highlight, metric="replayed_events",
                       reference=lesson_reference(config))


def panel(base: RunConfig = DESIGNS["snapshot every 4"],
          crash_point: str = "p8.mid_commit") -> CrashPanel:
    """Lesson 3's panel: snapshot interval, write mode, intent, fsync; crash point; Run sweep."""
    return CrashPanel(name="03-replay", base=base, plot=panel_plot, crash_point=crash_point,
                      knobs=["snapshot_every", "write_mode", "intent", "fsync"],
                      title="Replay vs snapshot: replayed events per crash point")


# --- exercises -----------------------------------------------------------------------------------

def _max_replayed(config: RunConfig) -> int:
    """The truth for exercise 3.1, measured once per configuration (54 kills are a few seconds)."""
    (rows,) = replay_counts((config.snapshot_every,), config).values()
    return max(r.replayed_events for r in rows)


@results.memoized
def _replayed_at(config: RunConfig, name: str) -> int:
    """The truth for exercise 3.2: one worker killed at point `name`, a read-only recovery."""
    with tempfile.TemporaryDirectory(prefix="bughunt-ex-") as tmp:
        return replay_after_crash(config, find_point(config, name),
                                  Path(tmp) / "run").replayed_events


@exercise("3.1", "With a snapshot every 5 pages (12 pages, bugs on 3, 7 and 10, intents on), what "
          "is the largest number of events a recovery replays over all 54 crash points?",
          "Snapshots are written after pages 5 and 10; none after page 12, since 12 is not a "
          "multiple of 5. The worst crash is the last moment before a snapshot becomes durable: "
          "page 10's mid_commit. The snapshot of page 5 is the newest, and the log after it holds "
          "page_done of pages 6 to 9 and the intent of page 10 (its page_done is not written "
          "yet), plus the intent of page 7: 4 + 2 = 6 events. The window of pages 1 to 5 gives "
          "at most 5 (pages 1 to 4 and page 3's intent); pages 11 and 12 after the last snapshot "
          "give 2. So the max is 6: fewer than N pages' page_done, plus one intent per bug page "
          "in that window. Intents can push the max above N.")
def _ex_3_1(answer):
    truth = _max_replayed(DESIGNS["pure log"].replace(snapshot_every=5))
    return assess(answer, truth, what="max replayed events over 54 real kills").reply(
        hint=" Find the window between two snapshots that holds the most events, and the last "
             "crash point before the next snapshot is durable. Count intents too.")


@exercise("3.2", "With a snapshot every 4 pages, how many events does the resume replay after a "
          "crash at p7.after_submit?",
          "At p7.after_submit the intent of page 7 is in the log, its page_done "
          "is not. The newest snapshot was written after page 4, and it covers events 1 to 5. "
          "After it the log holds page_done of pages 5 and 6 and the intent of page 7: 3 events. "
          "(A pure log would replay all 8 events written so far.)")
def _ex_3_2(answer):
    truth = _replayed_at(DESIGNS["snapshot every 4"], "p7.after_submit")
    return assess(answer, truth, what="events replayed after a kill at p7.after_submit").reply(
        hint=" List the events written before the crash (`clean_event_log()` shows them in "
             "order) and drop those the newest snapshot already covers.")


# --- the source text's apply_event; transfer; common wrong statements ----------------------------
def text_apply_event():
    """The source text's `apply_event`, compiled from the very text shown on screen."""
    scope: dict = {}
    exec(compile(TEXT_CODE["apply_event"].code, "<source text>", "exec"), scope)
    return scope["apply_event"]



LOG, SNAP4 = DESIGNS["pure log"], DESIGNS["snapshot every 4"]

#: An event of a type no version of the lab writes: a damaged record, or one from a newer version.
UNKNOWN_EVENT = {"t": "intnet", "page": 3, "key": "bughunt:p03", "seq": 4}


def _what_apply_event_does(fn, state, event) -> str:
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
                      f"then {{'t': {UNKNOWN_EVENT['t']!r}, ...}}": _what_apply_event_does(fn, state,
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
    return assess(answer, truth, what="the lab's apply_event").reply()


def replay_sweep(config: RunConfig) -> list:
    """Kill at every crash point of `config` and count what recovery would replay (read-only
    recovery: no resume needed for a count)."""
    return results.sweep_once(config, measure=replay_after_crash)


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
        replayed = replay_after_crash(SNAP4, find_point(SNAP4, "p7.after_submit"),
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
    from ...stores import rebuild_from_disk
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
    from ...bufferdemo import run_killed

    return {how: run_killed(how)["bytes on disk"] for how in ("write", "flush")}


def power_cut_after_write() -> "object":
    """Three ways to replace a file, each journaled and put through the power-loss simulation:
    what the file can hold after a power cut right after the write returned.

    rename only: temp file, rename (no fsync); the source text's: temp file, fsync, rename;
    the lab's `Door.write_atomic`: temp file, fsync, rename, fsync of the directory.
    """
    import pandas as pd

    from ...diskio import Door
    from ...instruments.journal import JournalingFiles
    from ...powerloss import crash_states

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


LESSON = Lesson(
    number=3,
    notebook="03_replay_vs_snapshot",
    title="Replay vs snapshot: how is the state put back together?",
    short_title="replay vs snapshot",
    question="How is the state put back together?",
    teaches="event-log replay vs snapshots (7.26 vs 1.98 replayed events), the snapshot "
            "interval, Codex's compaction and two-step resume",
    objectives=(
        "read the lab's `apply_event` beside the source text's, and say why one pure function "
        "makes replay and live running reach the same state;",
        "predict how many events a recovery replays, for a pure log and for a snapshot every "
        "N pages;",
        "say what each step of an atomic snapshot write (temp file, fsync, rename, directory "
        "fsync) protects against;",
        "explain Codex's compaction as a snapshot inside its log, and why only the newest may "
        "bound the replay.",
    ),
    minutes=40,
    prerequisites="Lessons 0 to 2; reading Python.",
    panel=panel,
    exercises=defined_in(__name__),
)

