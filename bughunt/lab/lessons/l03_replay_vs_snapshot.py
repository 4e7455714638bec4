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
from ..claims import Claims, Invariants
from ..judges import Measured, assess, defined_in, exercise, statement, within
from ..practice import NUMBER, Answer, Problem, as_exercise, drawn
from ..views import summary_table
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


@results.memoized
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


#: Each crash run of a sweep is recovered correctly, files a report twice, or goes wrong some
#: other way (lost, wrong state, rebuild fails...): the three verdict columns partition the points.
DESIGN_INVARIANTS = Invariants(total="crash points",
                               parts=("correct runs", "duplicate runs", "other wrong runs"),
                               counts=("max replayed",))


def design_table(df, designs: dict[str, RunConfig] = DESIGNS):
    """Per design: avg and max replayed events, lesson vs this machine, and the verdicts."""
    rows = []
    for name in designs:
        d = df[df["design"] == name]
        lesson_avg, lesson_max = LESSON_BY_DESIGN.get(name, ("-", "-"))
        correct = int((d["verdict"] == "correct").sum())
        duplicate = int((d["verdict"] == "duplicate").sum())
        rows.append({"design": name, "crash points": len(d),
                     "avg replayed": float(d["replayed_events"].mean()),
                     "lesson avg": lesson_avg,
                     "max replayed": int(d["replayed_events"].max()),
                     "lesson max": lesson_max,
                     "correct runs": correct, "duplicate runs": duplicate,
                     "other wrong runs": len(d) - correct - duplicate})
    return summary_table(rows, "replayed events by design", DESIGN_INVARIANTS, index="design",
                         averages=("lesson avg",))


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


INTERVAL_INVARIANTS = Invariants(counts=("max replayed", "log appends", "snapshot writes"))


def interval_table(df, base: RunConfig = DESIGNS["pure log"]):
    """Per N: avg and max replayed events (lesson beside us where it has a figure), and writes."""
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
    return summary_table(rows, "replay and writes by snapshot interval", INTERVAL_INVARIANTS,
                         index="N", averages=("lesson avg",))


def plot_interval(table):
    table = getattr(table, "df", table)
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

@results.memoized
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


@results.memoized
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
                     "three-way check": "ok" if check.three_way_check else "FAILS",
                     "verdict": check.verdict})
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


#: What `apply_event` can do with an event of a type it does not know (exercise 3.3's options).
ON_UNKNOWN = ("raise", "unchanged", "only seq moved")


def on_unknown_event(fn) -> str:
    """What `fn` (an `apply_event`) does with an unknown event, tried now on the state of a
    clean start: "raise", "unchanged", "only seq moved" (or the fields it changed)."""
    state = initial_state()
    try:
        after = fn(state, UNKNOWN_EVENT)
    except ValueError:
        return "raise"
    changed = sorted(k for k in after if after[k] != state[k])
    return ("unchanged" if not changed else "only seq moved" if changed == ["seq"]
            else "changed " + ", ".join(changed))


@exercise("3.3", "Predict, then run: the source text's apply_event is given an event whose type "
          "it does not know, {'t': 'intnet', ...} (a damaged record, or one written by a newer "
          "version). What does it do: 'raise' an error, return the state 'unchanged', or return "
          "it with 'only seq moved'?",
          "'only seq moved'. Its first line copies the state and sets `seq` to the event's, before "
          "it looks at the type; then the event falls through every `elif` and the copy is "
          "returned. So a damaged record is applied as if it were nothing, and the rebuilt state "
          "silently differs from the one that was saved. The lab's version raises a ValueError "
          "instead: recovery refuses rather than guesses.")
def _ex_3_3(answer):
    truth = on_unknown_event(text_apply_event())
    return assess(answer, truth, what="the source text's apply_event").reply(
        hint=" Read the source text's first line: what does it set before it looks at the type?")


def replay_sweep(config: RunConfig) -> list:
    """Kill at every crash point of `config` and count what recovery would replay (read-only
    recovery: no resume needed for a count)."""
    return results.sweep_once(config, measure=replay_after_crash)


def replay_table(configs: dict[str, RunConfig]):
    """Average and maximum replayed events over every crash point, per configuration."""
    rows = []
    for name, cfg in configs.items():
        counts = [r.replayed_events for r in replay_sweep(cfg)]
        rows.append({"design": name, "pages": cfg.pages, "crash points": len(counts),
                     "avg replayed": sum(counts) / len(counts),
                     "max replayed": max(counts)})
    return summary_table(rows, "replayed events on a longer run",
                         Invariants(counts=("pages", "crash points", "max replayed")),
                         index="design")


LONG_SNAP4 = SNAP4.replace(pages=LONG_RUN)


@statement("Q3.1", "With a snapshot every few pages, the event log is no longer needed.",
           "False. The events written since the newest snapshot exist only in the log; without "
           "it they would be lost. And when the snapshot itself is unusable, the log is what "
           "recovery rebuilds everything from (the damaged-snapshot experiment just above).")
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


#: Each disk state a cut may leave holds the new file, the old one, or an empty or torn one.
POWER_CUT_INVARIANTS = Invariants(total="disk states",
                                  parts=("disk states: new file", "disk states: old file",
                                         "disk states: empty or torn file"),
                                  counts=("fsyncs",))


@results.memoized
def power_cut_after_write() -> "object":
    """Three ways to replace a file, each journaled and put through the power-loss simulation:
    what the file can hold after a power cut right after the write returned.

    rename only: temp file, rename (no fsync); the source text's: temp file, fsync, rename;
    the lab's `Door.write_atomic`: temp file, fsync, rename, fsync of the directory.
    """
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
                     "disk states": len(after),
                     **{f"disk states: {k} file": v for k, v in found.items()}})
    return summary_table(rows, "what a power cut right after the write leaves",
                         POWER_CUT_INVARIANTS, index="write")


@statement("Q3.3", "An atomic rename needs nothing else: write a temp file, rename it over the "
           "old one, and the new contents survive any crash.",
           "False. The rename is atomic for kill -9: a reader sees the old file or the new one. "
           "A power cut is different: without an fsync of the temp file before the rename, the "
           "new name can point at data that never reached the disk (an empty or torn file, as "
           "the ALICE study found in real applications); without an fsync of the directory after "
           "it, the rename itself can be lost and the old file comes back.")
def _q3_3():
    t = power_cut_after_write().df
    bad, text = t.loc["rename only"], t.loc["source text: fsync, rename"]
    return Measured(bool(bad["disk states: empty or torn file"] == 0
                         and bad["disk states: old file"] == 0),
                    f"Simulated power cuts right after the write returned: rename only can leave "
                    f"the file empty or torn ({bad['disk states: empty or torn file']} of the "
                    f"states) or old; fsync + rename can still leave the old file "
                    f"({text['disk states: old file']} states); "
                    "only fsync + rename + directory fsync leaves the new contents in every state.")


# --- what the lesson says its run found (each sentence checked against that run) -------------

CLAIMS = Claims(3)


def _sweep(name: str):
    df = replay_sweeps()
    return df[df["design"] == name]


def _at_max(d) -> list[str]:
    top = d["replayed_events"].max()
    return list(d.loc[d["replayed_events"] == top, "crash_point"])


@CLAIMS.claim("Twelve pages, {bugs} of them with a bug, give {pages} + {bugs} = {events} events, "
              "as in the lesson (12 页、3 个 Bug 页一共 15 条事件).")
def one_page_done_per_page_and_one_intent_per_bug():
    events = clean_event_log()
    kinds = events["type"].value_counts().to_dict()
    pages, bugs = kinds.get("page_done", 0), kinds.get("intent", 0)
    return (len(events) == pages + bugs == 15 and pages == LOG.pages,
            {"pages": pages, "bugs": bugs, "events": len(events)})


@CLAIMS.claim("This machine measured an average of {log_avg} and a maximum of {log_max} replayed "
              "events for the pure log, and {snap_avg} and {snap_max} with a snapshot every 4 "
              "pages, over {points} crash points each: the lesson's {l_log_avg} and {l_log_max}, "
              "{l_snap_avg} and {l_snap_max}.")
def beside_the_lesson():
    got = {}
    for key, name in (("log", "pure log"), ("snap", "snapshot every 4")):
        d = _sweep(name)
        got[f"{key}_avg"] = round(float(d["replayed_events"].mean()), 2)
        got[f"{key}_max"] = int(d["replayed_events"].max())
    lesson = {"l_log_avg": LESSON_BY_DESIGN["pure log"][0],
              "l_log_max": LESSON_BY_DESIGN["pure log"][1],
              "l_snap_avg": LESSON_BY_DESIGN["snapshot every 4"][0],
              "l_snap_max": LESSON_BY_DESIGN["snapshot every 4"][1]}
    same = (got["log_avg"], got["log_max"], got["snap_avg"], got["snap_max"]) == tuple(
        lesson.values())
    return same, {**got, **lesson, "points": len(_sweep("pure log"))}


@CLAIMS.claim("**Pure log:** recovery replays every event written before the crash, so the count "
              "climbs like a staircase through the run and never falls. The worst crash is "
              "{worst}, after page 12's `page_done` is durable: all {top} events.")
def the_pure_log_climbs_to_the_whole_log():
    d = _sweep("pure log").sort_values("index")
    counts = list(d["replayed_events"])
    climbs = all(a <= b for a, b in zip(counts, counts[1:]))
    worst = _at_max(d)
    return (climbs and worst == ["p12.after_commit"] and max(counts) == len(clean_event_log()),
            {"worst": [f"`{w}`" for w in worst], "top": max(counts)})


@CLAIMS.claim("**Snapshot every 4:** the snapshot is written inside the commit of pages 4, 8 "
              "and 12 (the dotted lines), and the count drops to {after} right after each. The "
              "worst crashes replay {top}: the {n} points from the commit of page 3, 7 or 11 "
              "until the next snapshot is durable (each stretch ends at {last}). That is the "
              "`page_done` events of the three pages since the last snapshot, plus the intent "
              "of the bug page among them.")
def snapshots_reset_the_count():
    d = _sweep("snapshot every 4")
    after = sorted(set(d.loc[(d["label"] == "after_commit") & (d["page"] % 4 == 0),
                             "replayed_events"]))
    top = int(d["replayed_events"].max())
    worst = d[d["replayed_events"] == top]
    window = all((r.page % 4 == 3 and r.label == "after_commit")
                 or (r.page % 4 == 0 and r.label != "after_commit") for r in worst.itertuples())
    last = [f"`{w}`" for w in worst["crash_point"] if w.endswith(".mid_commit")]
    return (after == [0] and window and top == 4,
            {"after": after[0] if len(after) == 1 else after, "n": len(worst), "top": top,
             "last": last},
            f"the worst crashes ({top} events) are {', '.join(worst['crash_point'])}")


@CLAIMS.claim("Every crash run of both designs recovered correctly ({log} of {points} with the "
              "pure log, {snap} of {points} with a snapshot every 4): "
              "replaying from the start and replaying from a snapshot reach the same state, "
              "because the snapshot is that state.")
def both_designs_recover_the_same_state():
    log, snap = (int((_sweep(n)["verdict"] == "correct").sum())
                 for n in ("pure log", "snapshot every 4"))
    points = len(_sweep("pure log"))
    return log == snap == points, {"points": points, "log": log, "snap": snap}


@CLAIMS.claim("The intents are why the max can exceed N − 1 when one window holds two bug pages: "
              "at N = {n} the max is {top}. N = 12 writes its only snapshot at the very end of "
              "the run, so until then it is a pure log: its average, {avg12}, is close to the "
              "pure log's {avg0}.")
def intents_push_the_max_and_n12_is_a_pure_log():
    table = interval_table(replay_by_interval()).df
    over = [int(n) for n in table.index if n and table.loc[n, "max replayed"] > n - 1]
    avg0, avg12 = (round(float(table.loc[n, "avg replayed"]), 2) for n in (0, 12))
    n = 6 if 6 in over else (over[0] if over else 6)
    return (bool(over) and abs(avg12 - avg0) < 1.0,
            {"n": n, "top": int(table.loc[n, "max replayed"]), "avg12": avg12, "avg0": avg0})


@CLAIMS.claim("Every N pages the whole state is written again: 12 ÷ N snapshot writes per clean "
              "run, rounded down ({rule} for N = {ns}), on top of the {appends} log appends, "
              "crash or no crash.")
def snapshot_writes_are_12_over_n():
    table = interval_table(replay_by_interval()).df
    snap = table[table.index > 0]
    rule = all(int(snap.loc[n, "snapshot writes"]) == 12 // int(n) for n in snap.index)
    appends = sorted(set(int(a) for a in table["log appends"]))
    return (rule and appends == [15],
            {"rule": [int(v) for v in snap["snapshot writes"]], "ns": [int(n) for n in snap.index],
             "appends": appends[0] if len(appends) == 1 else appends})


@CLAIMS.claim("Only the full sequence leaves the new contents in every state ({lab} of {lab} "
              "here). Rename only leaves the file empty or torn in {torn} states and old in "
              "{old}; fsync + rename without the directory fsync still leaves the old file in "
              "{text_old}.")
def only_the_full_sequence_survives_a_power_cut():
    t = power_cut_after_write().df
    lab, bad, text = (t.loc[k] for k in ("lab: fsync, rename, fsync dir", "rename only",
                                         "source text: fsync, rename"))
    return (lab["disk states: new file"] == lab["disk states"]
            and bad["disk states: empty or torn file"] > 0
            and text["disk states: old file"] > 0 and text["disk states: empty or torn file"] == 0,
            {"lab": int(lab["disk states"]), "torn": int(bad["disk states: empty or torn file"]),
             "old": int(bad["disk states: old file"]),
             "text_old": int(text["disk states: old file"])})


@CLAIMS.claim("The damaged runs replay all {all} events in the log instead of the {few} after the "
              "snapshot, fall back to the log (`snapshot_fallback = \"log\"`), and still finish "
              "with the right result: the tracker, the resumed worker's memory and a fresh "
              "rebuild from disk agree (the three-way check).")
def a_damaged_snapshot_falls_back_to_the_whole_log():
    t = damaged_snapshot()
    intact, damaged = t.loc["intact"], t.drop(index="intact")
    whole = set(int(v) for v in damaged["replayed events"])
    ok = (len(whole) == 1 and whole.pop() > int(intact["replayed events"])
          and set(damaged["snapshot_fallback"]) == {"log"}
          and set(t["verdict"]) == {"correct"} and set(t["three-way check"]) == {"ok"})
    return (ok, {"all": sorted(set(int(v) for v in damaged["replayed events"])),
                 "few": int(intact["replayed events"])},
            "measured: " + "; ".join(f"{k}: {r['replayed events']} replayed, fallback "
                                     f"{r['snapshot_fallback']}, {r['verdict']}"
                                     for k, r in t.iterrows()))


# --- practice: a site, an interval and intents the lesson did not run --------------------------

def practice_problem(seed: int) -> Problem:
    """A log with a snapshot every N pages on a site of a length the lesson did not run (not 12
    or 20 pages), intents on or off, and one question: the largest or the average number of
    events a recovery replays over every crash point, or the number it replays after one kill."""
    from ...world import Site

    rng = drawn(seed, 3)
    pages = rng.choice([n for n in range(5, 19) if n not in (12, LONG_RUN)])
    n = rng.choice([k for k in range(1, 7) if k < pages])
    intent = rng.choice([True, False])
    config = LOG.replace(pages=pages, snapshot_every=n, intent=intent)
    bugs = list(Site.load(pages).bug_pages)
    where = ", ".join(map(str, bugs[:-1])) + f" and {bugs[-1]}" if len(bugs) > 1 else str(bugs[0])
    setting = (f"The event log with a snapshot every {n} page{'s' if n > 1 else ''}, intents "
               f"{'on' if intent else 'off'}, key on, on a site of {pages} pages (bugs on "
               f"{'pages ' if len(bugs) > 1 else 'page '}{where}).")
    kind = rng.choice(["max", "average", "point"])
    facts = {"pages": pages, "snapshot_every": n, "intent": intent, "kind": kind}
    if kind == "point":
        name = rng.choice([p.name for p in crash_points(config)])

        def measure() -> Answer:
            k = _replayed_at(config, name)
            return Answer(k, f"killed at {name}: recovery replays {k} events after the newest "
                          "snapshot.")
        return Problem(3, seed, setting, f"The worker is killed at `{name}`. How many events "
                       "does recovery replay?", NUMBER, measure,
                       "Which snapshot is the newest on disk at that point (a snapshot is "
                       "durable only after its page's commit), and which events follow it?",
                       unit="events", drawn={**facts, "point": name})

    def measure() -> Answer:
        counts = [r.replayed_events for r in replay_sweep(config)]
        value = max(counts) if kind == "max" else round(sum(counts) / len(counts), 2)
        return Answer(value, f"{len(counts)} crash points, each killed and recovered: at most "
                      f"{max(counts)} events replayed, {sum(counts) / len(counts):.2f} on "
                      "average.")
    if kind == "max":
        return Problem(3, seed, setting, "Over every crash point, what is the largest number of "
                       "events a recovery replays?", NUMBER, measure,
                       "Find the window between two snapshots that holds the most events and "
                       "the last crash point before the next snapshot is durable; count intents "
                       "too.", unit="events", drawn=facts)
    return Problem(3, seed, setting, "Over every crash point, how many events does a recovery "
                   "replay on average?", NUMBER, measure,
                   "Count, point by point, the events written since the newest durable snapshot, "
                   "then average over the points.", within(0.05), "events", facts)


#: Every log configuration this lesson sweeps or asks about: a practice problem never draws one.
LESSON_CONFIGS_RUN = frozenset({*(LOG.replace(snapshot_every=k) for k in (*INTERVALS, 5)),
                                LONG_SNAP4, LONG_SNAP4.replace(snapshot_every=0)})

#: The transfer question: a site, an interval and intents the lesson did not run.
TRANSFER_SEED = 20
TRANSFER = as_exercise("3.4", practice_problem(TRANSFER_SEED), __name__)


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
        "explain Codex's (OpenAI's open-source coding agent) compaction as a snapshot inside its log, and why only the newest may "
        "bound the replay.",
    ),
    prerequisites="Lessons 0 to 2; reading Python.",
    panel=panel,
    exercises=defined_in(__name__),
    claims=CLAIMS,
    practice=practice_problem,
)

