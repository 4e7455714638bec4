"""Lesson 5, torn writes (撕裂写): when the checkpoint itself is cut in half.

A checkpoint is a write too, and a kill can fall in the middle of it. The lab tears it on purpose at
the mid-commit crash point: half a record is on disk, then SIGKILL. Three write modes of the event
log (intents and idempotency key on) are compared:

- `atomic`      the record goes out in one write, so a kill leaves all of it or none;
- `torn`        half a record is left at the kill; the newline repair on reopen isolates it;
- `no-newline`  torn, without the repair: the resumed run's first record glues onto the fragment
                and both are lost as one unparsable line. The resumed run is right; the next
                recovery is not. Only a rebuild from disk compared with memory catches it.

And for the snapshot store: temp file + `os.replace` (old or new, never half) against a snapshot
overwritten in place and cut in half, which the checksum catches.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ...config import RunConfig
from ...diskio import Door
from ...experiment import crash_point as find_point
from ...experiment import (LESSON_FIGURES, CrashRun, crash_and_resume, crash_points, frame,
                           run_crash_jobs, run_worker, work_dir)
from ...stores import LOG_FILE, SNAPSHOT_FILE, StoreDamage, rebuild_from_disk, records
from ...stores.log import ensure_newline_terminated
from ...probes import one_write_with_little_room
from ...world import Site
from ..claims import Claims, Invariants
from ..judges import Measured, assess, defined_in, exercise, statement
from ..practice import NUMBER, YES_NO, Answer, Problem, as_exercise, drawn
from .. import results
from ..crash_panel import CrashPanel
from ..plots import plot_points, verdict_handles, verdict_row
from ..style import COLORS, new_figure, page_ticks
from ..views import Table, plain_message, summary_table
from ..registry import Lesson

WRITE_MODES = ("atomic", "torn", "no-newline")
#: The log store of the source text's table (intents on, key on), in each write mode.
MODE_CONFIGS = {m: RunConfig(store="log", intent=True, write_mode=m) for m in WRITE_MODES}
#: The snapshot store, renamed into place (atomic) or overwritten in place and torn.
SNAPSHOT_CONFIGS = {m: RunConfig(store="snapshot", intent=False, write_mode=m)
                    for m in ("atomic", "torn")}
MID_COMMIT = "mid_commit"


# --- the sweep: every crash point, every write mode ---------------------------------------------

def glued_record(run_dir: Path) -> str | None:
    """The event type glued onto a torn fragment in the log, if any (the no-newline trap).

    A glued line does not parse as a whole, but a suffix of it, starting at a later `{`, does:
    that suffix is the record the resumed run appended straight after the fragment.
    """
    path = Path(run_dir) / LOG_FILE
    if not path.exists():
        return None
    for line in path.read_bytes().split(b"\n"):
        try:
            json.loads(line or b"null")
            continue
        except ValueError:
            pass
        for start in (i for i in range(1, len(line)) if line[i:i + 1] == b"{"):
            try:
                return json.loads(line[start:]).get("t")
            except ValueError:
                continue
    return None


@dataclass(frozen=True, kw_only=True)
class TornRun(CrashRun):
    """A crash run, plus what a torn write left in the log: the record glued onto a fragment."""

    glued_record: str | None = None


def measure_torn(config: RunConfig, point, run_dir: Path) -> TornRun:
    """`crash_and_resume`, plus the glued record (if any)."""
    record = crash_and_resume(config, point, run_dir)
    return TornRun(**dataclasses.asdict(record), glued_record=glued_record(run_dir))


def sweep_write_modes(configs: dict[str, RunConfig] = MODE_CONFIGS, *, progress=None):
    """Crash at every point of every write mode, resume, ask the three witnesses: a DataFrame.

    The runs stay in the lab's results cache, so exercises and the panel reuse them.
    """
    import pandas as pd

    return pd.concat([frame(records).assign(write_mode=mode)
                      for mode, records in results.sweeps_once(configs, progress=progress,
                                                          measure=measure_torn).items()],
                     ignore_index=True)


def mode_records(mode: str, config: RunConfig | None = None):
    """One write mode's sweep (from the results cache if it already ran)."""
    return sweep_write_modes({mode: config or MODE_CONFIGS[mode]})


def mode_table(df) -> Table:
    """Per write mode: the verdicts (correct, rebuild fails, another: they partition the crash
    points), whether the resumed run itself was right, what recovery repaired, and what each
    reader made of the log."""
    rows = []
    for mode, d in df.groupby("write_mode", sort=False):
        correct = int((d["verdict"] == "correct").sum())
        fails = int((d["verdict"] == "rebuild fails").sum())
        rows.append({
            "write mode": mode, "crash points": len(d), "correct": correct,
            "rebuild fails": fails, "another verdict": len(d) - correct - fails,
            "resume right": int(d["resumed_right"].sum()),
            "torn lines skipped": int(d["torn_lines_skipped"].sum()),
            "tails repaired": int(d["tails_repaired"].sum()),
            "rebuild refused": int(d["disk_error"].notna().sum()),
            "source text's reader wrong": int((d["lesson_reader_ok"] == False).sum()),  # noqa: E712
        })
    return summary_table(rows, "lesson 5, three write modes", Invariants(
        total="crash points", parts=("correct", "rebuild fails", "another verdict"),
        within=("resume right", "rebuild refused", "source text's reader wrong"),
        counts=("torn lines skipped", "tails repaired")), index="write mode")


def failing_points(df, mode: str = "no-newline"):
    """The crash points whose rebuild from disk fails, with what each reader made of the log."""
    d = df[(df["write_mode"] == mode) & (df["verdict"] != "correct")]
    bugs = set(Site.load(int(df["page"].max())).bug_pages)
    return d.assign(
        bug_page=d["page"].map(lambda p: "yes" if p in bugs else "no"),
        our_reader=[plain_message(e) if isinstance(e, str)
                    else "accepted, but differs from memory (the last event is missing)"
                    for e in d["disk_error"]],
        source_text_reader=d["lesson_reader_ok"].map({True: "agrees with memory",
                                                      False: "WRONG"}),
    )[["crash_point", "page", "bug_page", "glued_record", "source_text_reader", "our_reader"]
      ].set_index("crash_point")


def failing_table(df, mode: str = "no-newline") -> Table:
    """`failing_points` as the learner reads it."""
    return Table(failing_points(df, mode), f"lesson 5, the rebuilds that fail ({mode})",
                 Invariants(counts=("page",)))


def plot_write_mode_verdicts(df):
    """The three-way verdict per crash point, one row per write mode; torn lines and the source
    text's reader's misses marked, so the no-newline trap shows where it sits (mid_commit)."""
    modes = list(dict.fromkeys(df["write_mode"]))
    fig, ax = new_figure(11, 1.4 + 0.9 * len(modes))
    for row, mode in enumerate(modes):
        d = df[df["write_mode"] == mode]
        y = len(modes) - 1 - row
        verdict_row(ax, d, y)
        torn = d[d["torn_lines_skipped"].fillna(0) > 0]
        ax.scatter(torn["index"], [y - 0.15] * len(torn), marker="o", s=18,
                   color=COLORS["black"], zorder=3)
        wrong = d[d["lesson_reader_ok"] == False]  # noqa: E712 (None: no log, no lesson reader)
        ax.scatter(wrong["index"], [y + 0.2] * len(wrong), marker="v", s=34,
                   color=COLORS["black"], zorder=3)
    lesson = {"atomic": f"source text: {LESSON_FIGURES['log_runs_correct']} of 54",
              "no-newline": "source text: its 3 bug pages fine"}
    labels = []
    for m in reversed(modes):
        d = df[df["write_mode"] == m]
        labels.append(f"{m}\n{int((d['verdict'] == 'correct').sum())} of {len(d)} correct"
                      + (f"\n({lesson[m]})" if m in lesson else ""))
    ax.set_yticks(range(len(modes)), labels, fontsize=9)
    ax.set_ylim(-0.55, len(modes) - 0.45)
    page_ticks(ax, df[df["write_mode"] == modes[0]])
    ax.set_xlabel("crash point (grouped by page; p3 = first point of page 3)")
    ax.set_ylabel("write mode")
    ax.set_title("Three-way verdict per crash point, by write mode "
                 "(event log, intents and idempotency key on)", fontsize=10)
    handles = verdict_handles(df["verdict"])
    handles += [Line2D([], [], marker="o", linestyle="", color=COLORS["black"], markersize=5,
                       label="a torn line was skipped at resume"),
                Line2D([], [], marker="v", linestyle="", color=COLORS["black"], markersize=6,
                       label="the source text's reader is wrong too")]
    fig.legend(handles=handles, fontsize=8, loc="outside lower center", ncols=len(handles),
               frameon=False)
    return fig


# --- one torn write, byte by byte ----------------------------------------------------------------

@results.memoized
def torn_tail(crash_at: str = "p2.mid_commit", config: RunConfig = MODE_CONFIGS["torn"]) -> dict:
    """Kill a torn-mode run inside its commit write, then repair the log's tail twice.

    Returns the log's bytes before and after, what each repair returned (True, then False: the
    repair is idempotent), and what a reader then skips.
    """
    point = find_point(config, crash_at)
    with tempfile.TemporaryDirectory(prefix="bughunt-torn-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        first = run_worker(run_dir, config, crash_at=point)
        path = run_dir / LOG_FILE
        before = path.read_bytes()
        door = Door(config.fsync)
        repaired = [ensure_newline_terminated(path, door) for _ in range(2)]
        after = path.read_bytes()
        recovered = rebuild_from_disk(run_dir, config)
    return {"point": point, "killed_by": -first.returncode, "before": before, "after": after,
            "repaired": repaired, "fragment": before[before.rfind(b"\n") + 1:],
            "torn_lines_skipped": recovered.torn_lines_skipped,
            "replayed_events": recovered.replayed_events}


def _byte_label(b: int) -> str:
    return {10: "\\n", 32: "␣"}.get(b, chr(b) if 32 < b < 127 else f"{b:02x}")


def plot_tail(tail: dict, context: int = 10):
    """The log's last bytes as cells, before and after the repair: the fragment outlined, the
    newline the repair added marked."""
    from matplotlib.patches import Rectangle

    before, after, fragment = tail["before"], tail["after"], tail["fragment"]
    frag_start = len(before) - len(fragment)
    start = max(0, frag_start - context)
    fig, ax = new_figure(max(8.0, 0.21 * (len(after) - start) + 1.8), 3.4)
    kinds = {"record": COLORS["sky"], "fragment": COLORS["orange"], "newline": COLORS["blue"],
             "added": COLORS["green"]}
    for y, data in ((1, before), (0, after)):
        for off in range(start, len(data)):
            b = data[off]
            kind = ("added" if off >= len(before) else "fragment" if off >= frag_start
                    else "newline" if b == 10 else "record")
            ax.bar(off, 0.8, bottom=y - 0.4, width=0.95, color=kinds[kind],
                   edgecolor=COLORS["black"] if kind == "added" else "white",
                   linewidth=1.5 if kind == "added" else 0.5)
            ax.text(off, y, _byte_label(b), ha="center", va="center", fontsize=8,
                    color="white" if kind in ("newline", "added") else COLORS["black"])
        ax.add_patch(Rectangle((frag_start - 0.5, y - 0.45), len(fragment), 0.9, fill=False,
                               linestyle="--", linewidth=1.2, edgecolor=COLORS["black"]))
    ax.annotate(f"torn fragment: {len(fragment)} bytes of half a record, no newline at its end",
                (frag_start + len(fragment) / 2, 1.5), ha="center", va="bottom", fontsize=8)
    ax.annotate("added by the repair\n(a second repair adds nothing)", (len(before), -0.45),
                xytext=(0, -26), textcoords="offset points", ha="right", fontsize=8,
                arrowprops={"arrowstyle": "->", "color": COLORS["black"]})
    ax.set_yticks([1, 0], [f"before repair\n(bytes {start}-{len(before) - 1})",
                           f"after repair\n(bytes {start}-{len(after) - 1})"])
    ticks = [t for t in range(start, len(after)) if (t - start) % 10 == 0] + [frag_start]
    ax.set_xticks(sorted(set(ticks)))
    ax.set_xlim(start - 0.7, len(after) + 0.5)
    ax.set_ylim(-0.95, 1.75)
    ax.set_xlabel(f"byte offset in {LOG_FILE} (the file is {len(before)} bytes long at the kill)")
    ax.set_ylabel("the log's last bytes")
    p = tail["point"]
    ax.set_title(f"The log's tail after a torn write, before and after the newline repair "
                 f"(killed at {p.name})", fontsize=10)
    labels = {"record": "complete record", "fragment": "torn fragment (half a record)",
              "newline": "newline", "added": "newline added by the repair"}
    fig.legend(handles=[Patch(facecolor=c, label=labels[k]) for k, c in kinds.items()],
               fontsize=8, loc="outside lower center", ncols=4, frameon=False)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    return fig


@results.memoized
def glued_log(crash_at: str, config: RunConfig = MODE_CONFIGS["no-newline"]) -> dict:
    """Crash a no-newline run at `crash_at`, resume it, and ask every witness what happened.

    The tracker and the resumed worker's memory agree. A fresh rebuild from disk does not: our
    reader, which checks sequence numbers, refuses the log naming file and line (or, when nothing
    follows the lost record, rebuilds a shorter state); the source text's reader skips the glued line
    silently and trusts the rest.
    """
    from ...experiment import lesson_reader
    from ...world import read_reports

    point = find_point(config, crash_at)
    with tempfile.TemporaryDirectory(prefix="bughunt-glued-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        first = run_worker(run_dir, config, crash_at=point)
        resume = run_worker(run_dir, config)
        if resume.returncode != 0:
            raise RuntimeError(f"resume failed: {plain_message(resume.stderr.strip())}")
        memory = json.loads(resume.stdout)["state"]
        tracker = sorted(r["page"] for r in read_reports(run_dir))
        lines = (run_dir / LOG_FILE).read_text().splitlines()
        try:
            rebuild, refusal = rebuild_from_disk(run_dir, config).state, None
        except StoreDamage as e:
            rebuild, refusal = None, plain_message(str(e))
        lesson = lesson_reader(run_dir)
        glued = glued_record(run_dir)
    return {"point": point, "killed_by": -first.returncode, "lines": lines, "glued_record": glued,
            "tracker": tracker, "memory": memory, "rebuild": rebuild, "refusal": refusal,
            "lesson_state": lesson}


def witnesses(glued: dict):
    """The witnesses of one no-newline run side by side: what each believes the task did."""
    import pandas as pd

    def row(name, state, note=""):
        if state is None:
            return {"witness": name, "findings": None, "tokens": None, "last seq": None,
                    "agrees with memory": "NO", "note": note}
        return {"witness": name, "findings": state["findings"], "tokens": state["tokens"],
                "last seq": state["seq"],
                "agrees with memory": "yes" if state == glued["memory"] else "NO", "note": note}

    rows = [{"witness": "tracker (outside world)", "findings": glued["tracker"], "tokens": None,
             "last seq": None,
             "agrees with memory": "yes" if glued["tracker"] == glued["memory"]["findings"]
             else "NO", "note": "reports filed, read from SQLite"},
            row("resumed worker (memory)", glued["memory"], "the run that just finished"),
            row("rebuild from disk (our reader)", glued["rebuild"],
                "refused: " + glued["refusal"] if glued["refusal"] else ""),
            row("the source text's reader", glued["lesson_state"], "skips what does not parse")]
    table = pd.DataFrame(rows).astype({"tokens": "Int64", "last seq": "Int64"}).set_index("witness")
    return Table(table.astype(object).where(table.notna(), None),
                 "lesson 5, the witnesses of one no-newline run")


# --- the snapshot: renamed into place, or overwritten and torn -----------------------------------

def snapshot_tears(configs: dict[str, RunConfig] = SNAPSHOT_CONFIGS, *, progress=None):
    """Kill the snapshot store inside every page's commit write, resume, measure: a DataFrame."""
    jobs = [(mode, cfg, p) for mode, cfg in configs.items() for p in crash_points(cfg)
            if p.label == MID_COMMIT]
    with work_dir(in_memory=True) as base:
        records = run_crash_jobs(jobs, base, progress=progress)
    return frame(records).rename(columns={"sweep": "write_mode"})


def snapshot_table(df) -> Table:
    """Per write mode: what recovery found and did after a kill inside the snapshot write."""
    rows = []
    for mode, d in df.groupby("write_mode", sort=False):
        correct = int((d["verdict"] == "correct").sum())
        rows.append({"write mode": mode, "mid-commit kills": len(d), "correct": correct,
                     "another verdict": len(d) - correct,
                     "torn snapshot, fresh start": int((d["snapshot_fallback"] == "fresh").sum()),
                     "temp files removed": int(d["temp_files_removed"].sum()),
                     "avg redone calls": d["redone_model_calls"].mean(),
                     "max redone calls": int(d["redone_model_calls"].max())})
    return summary_table(rows, "lesson 5, a kill inside the snapshot write", Invariants(
        total="mid-commit kills", parts=("correct", "another verdict"),
        within=("torn snapshot, fresh start",),
        counts=("temp files removed", "max redone calls")), index="write mode")


def points_table(config: RunConfig = MODE_CONFIGS["torn"], pages=(2, 3)) -> Table:
    """The crash points of `pages`, by name: where the kill inside the commit write sits."""
    import pandas as pd

    rows = [{"crash point": p.name, **{k: v for k, v in p.__dict__.items() if k != "name"}}
            for p in crash_points(config) if p.page in pages]
    return Table(pd.DataFrame(rows).set_index("crash point"), "lesson 5, crash points")


def snapshot_after_kill(mode: str, page: int = 5) -> dict:
    """Kill the snapshot store inside page `page`'s commit write; look at its files, read-only."""
    config = SNAPSHOT_CONFIGS[mode]
    point = find_point(config, f"p{page}.{MID_COMMIT}")
    with tempfile.TemporaryDirectory(prefix="bughunt-snap-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        run_worker(run_dir, config, crash_at=point)
        files = {p.name: p.stat().st_size for p in sorted(run_dir.glob(SNAPSHOT_FILE + "*"))}
        rec = rebuild_from_disk(run_dir, config)
    return {"point": point, "files": files, "next_page": rec.state["next_page"],
            "snapshot_used": rec.snapshot_used, "snapshot_fallback": rec.snapshot_fallback,
            "notes": [plain_message(n) for n in rec.notes]}


# --- the panel -----------------------------------------------------------------------------------

def panel_plot(df, config, highlight):
    """Torn lines skipped per crash point for a log, redone calls for the other stores."""
    metric = "torn_lines_skipped" if config.store == "log" else "redone_model_calls"
    return plot_points(df, config, highlight, metric=metric)


def panel(base: RunConfig = MODE_CONFIGS["no-newline"],
          crash_point: str = "p2.mid_commit") -> CrashPanel:
    """Lesson 5's panel: store, write mode, snapshot interval, intent; crash point; Run sweep.

    Write-mode sweeps this kernel already ran are handed to the panel, so Run does not repeat them.
    """
    for config in MODE_CONFIGS.values():        # sweeps this kernel ran, handed to the panel
        torn = results.cached(config, measure=measure_torn)
        if torn is not None and results.cached(config) is None:
            results.seed(config, torn)
    return CrashPanel(name="05-torn-writes", base=base, plot=panel_plot, crash_point=crash_point,
                      knobs=["store", "write_mode", "snapshot_every", "intent"],
                      title="Torn writes: the three-way verdict per crash point")


# --- exercises: predict, then run ---------------------------------------------------------------

@exercise("5.1", "Predict, then run: a torn-mode log is killed at p2.mid_commit (half of page 2's "
          "record on disk), then the newline repair runs twice, as two successive restarts would "
          "run it. How many newline bytes end the file then, and how many lines will the next "
          "reader skip as torn? Answer as a pair (newlines, skipped).",
          "(1, 1). The first repair appends one newline after the fragment; the second sees a "
          "newline as the last byte and does nothing (idempotent, as Codex's test checks by "
          "opening the same file twice). The fragment is now a line of its own: it does not "
          "parse, so the reader skips it and counts it, and the next record starts on a clean "
          "line.")
def _ex_5_1(answer):
    tail = torn_tail("p2.mid_commit")
    newlines = len(tail["after"]) - len(tail["after"].rstrip(b"\n"))
    c = assess(answer, (newlines, tail["torn_lines_skipped"]), what="(newlines, skipped)")
    return c.reply(hint=" What does the second repair find as the last byte, and what does a "
                        "reader do with a line that does not parse?")


@exercise("5.2", "Predict, then run: in no-newline mode (event log, intents and key on, 54 crash "
          "points), the rebuild from disk fails wherever the glued record is lost. At how many "
          "crash points does our reader (it checks sequence numbers) refuse the log outright, "
          "naming file and line, and at how many does it accept a log that is one event short "
          "of memory? Answer as a pair (refused, short).",
          "(11, 1). A kill inside a commit write leaves a torn fragment at each page's mid_commit "
          "point; without the newline repair the resumed run's first record glues onto it and is "
          "lost. On pages 1 to 11 later records follow, and the first of them has a sequence "
          "number one too far: a gap, so the reader refuses. On page 12 nothing follows the "
          "glued line, so the log looks like one that stopped an event earlier: accepted, and "
          "only the comparison with the resumed worker's memory catches it.")
def _ex_5_2(answer):
    df = mode_records("no-newline")
    bad = df[df["verdict"] == "rebuild fails"]
    refused = int(bad["disk_error"].notna().sum())
    c = assess(answer, (refused, len(bad) - refused), what="(refused, short)")
    return c.reply(hint=" After which page's torn write does no record follow?")


#: The source text's trap without intents (a claim's configuration; no exercise runs it).
NO_NEWLINE_NO_INTENTS = MODE_CONFIGS["no-newline"].replace(intent=False)


def lenient_reader_misses(config: RunConfig = NO_NEWLINE_NO_INTENTS) -> list[str]:
    """The crash points at which the source text's reader rebuilds a state that differs from the
    resumed worker's memory (every point of `config` killed and resumed; cached)."""
    df = sweep_write_modes({config.write_mode: config})
    return list(df.loc[df["lesson_reader_ok"] == False, "crash_point"])  # noqa: E712


# --- common wrong statements --------------------------------------------------------------------

@statement("Q5.1", "One write() call cannot be torn: it puts all of its bytes in the file or "
           "none of them.",
           "False. write() may write fewer bytes than asked and return how many it wrote "
           "(write(2)): on a full disk, at a file size limit, and, for kill -9, between two "
           "memory pages of the file, where Linux checks for a fatal signal. A power cut can "
           "leave any part of an unsynced write. A reader must expect a torn last record "
           "whatever the writer did.")
def _q5_1():
    m = one_write_with_little_room()
    torn_here = m["returned"] is not None and 0 < m["returned"] < m["record"]
    found = (f"it returned {m['returned']}, and the file now ends with a {len(m['tail'])}-byte "
             f"fragment {'with' if m['ends_with_newline'] else 'without'} a newline"
             if m["returned"] is not None else f"it failed whole here ({m['error']})")
    return Measured(not torn_here,
                    f"Measured just now: a real process appended a {m['record']}-byte record with "
                    f"one os.write(), to a log whose size limit (RLIMIT_FSIZE) left room for "
                    f"{m['room']} bytes, as a nearly full disk would: {found}.")


@results.memoized
def mid_commit_kills(config: RunConfig):
    """Every mid-commit kill of `config`, resumed and measured (cached)."""
    return snapshot_tears({config.write_mode: config})


@statement("Q5.2", "A snapshot written to a temp file and renamed over the old one can never be "
           "found torn or empty.",
           "False. Against kill -9 it holds: the rename is atomic, so a reader finds the old "
           "snapshot or the new one, and a kill before the rename leaves only a stray temp file. "
           "A power cut is different: without an fsync of the temp file before the rename, the "
           "rename can reach the disk before the data does, and the snapshot's name points at an "
           "empty or torn file. The rename is atomic, not durable.")
def _q5_2():
    from .l03_replay_vs_snapshot import power_cut_after_write

    kills = mid_commit_kills(SNAPSHOT_CONFIGS["atomic"])
    torn_kills = int((kills["snapshot_fallback"] == "fresh").sum())
    cut = power_cut_after_write().df.loc["rename only"]     # lesson 3's checked table
    bad = int(cut["disk states: empty or torn file"])
    total = int(cut["disk states"])
    return Measured(torn_kills == 0 and bad == 0,
                    f"Measured: kill -9 inside each of the {len(kills)} snapshot writes left a "
                    f"torn snapshot {torn_kills} times. Simulated power cuts right after a temp "
                    f"file + rename with no fsync: {bad} of {total} disk states hold an empty or "
                    "torn snapshot.")


@statement("Q5.3", "If the resumed run's result is right, the log on disk is right too.",
           "False. That is the no-newline trap: the resumed worker holds the right state in "
           "memory while the record it glued onto a torn fragment is lost from the log. Nothing "
           "goes wrong until the next recovery reads that log. Only the third witness, a fresh "
           "rebuild from disk compared with memory, catches it now.")
def _q5_3():
    df = mode_records("no-newline")
    right = df[df["resumed_right"]]
    fails = int((right["verdict"] == "rebuild fails").sum())
    return Measured(fails == 0,
                    f"Measured (no-newline mode, {len(df)} crash points): the resumed run was "
                    f"right at {len(right)} of them, and at {fails} of those the rebuild from the "
                    "log on disk failed.")


# --- what the lesson says its run found (each sentence checked against that run) -------------

CLAIMS = Claims(5)


def _mode(mode: str):
    df = sweep_write_modes()
    return df[df["write_mode"] == mode]


@CLAIMS.claim("The first repair returned {first} and appended one newline; the second returned "
              "{second} and changed nothing. The file ends in {newlines} newline, and a reader "
              "now skips {skipped} torn line: the fragment, on a line of its own.")
def the_repair_is_idempotent():
    tail = torn_tail("p2.mid_commit")
    newlines = len(tail["after"]) - len(tail["after"].rstrip(b"\n"))
    return (tail["repaired"] == [True, False] and newlines == 1
            and tail["after"] == tail["before"] + b"\n" and tail["torn_lines_skipped"] == 1,
            {"first": str(tail["repaired"][0]), "second": str(tail["repaired"][1]),
             "newlines": newlines, "skipped": tail["torn_lines_skipped"]})


@CLAIMS.claim("`atomic` and `torn` recovered correctly at {atomic} and {torn} of {points} crash "
              "points (the source text: {lesson} of 54 in the plain log). In `torn` mode a torn "
              "line was skipped at exactly the {skipped} `mid_commit` points, after the repair "
              "had isolated it.")
def atomic_and_torn_recover():
    a, t = _mode("atomic"), _mode("torn")
    ok = lambda d: int((d["verdict"] == "correct").sum())   # noqa: E731
    skipped = t[t["torn_lines_skipped"].fillna(0) > 0]
    return (ok(a) == len(a) and ok(t) == len(t) and set(skipped["label"]) == {MID_COMMIT}
            and len(skipped) == int((t["label"] == MID_COMMIT).sum()),
            {"atomic": ok(a), "torn": ok(t), "points": len(a), "skipped": len(skipped),
             "lesson": LESSON_FIGURES["log_runs_correct"]})


@CLAIMS.claim("`no-newline` is different: the resumed run was right at {right} of {points} "
              "points, yet the rebuild from disk failed at {fails}, all of them `mid_commit` "
              "points, one per page.")
def the_no_newline_trap():
    d = _mode("no-newline")
    bad = d[d["verdict"] == "rebuild fails"]
    return (int(d["resumed_right"].sum()) == len(d) and set(bad["label"]) == {MID_COMMIT}
            and len(bad) == int(d["page"].max()),
            {"right": int(d["resumed_right"].sum()), "points": len(d), "fails": len(bad)})


@CLAIMS.claim("Line 2 is the fragment with page 2's complete `{glued}` record glued onto it: one "
              "line that does not parse, so both are lost to every reader. Yet the tracker "
              "({tracker}) and the resumed worker's memory ({memory}) agree.")
def the_glued_record():
    g = glued_log("p2.mid_commit")
    return (g["glued_record"] == "page_done" and g["tracker"] == g["memory"]["findings"],
            {"glued": g["glued_record"], "tracker": g["tracker"],
             "memory": g["memory"]["findings"]})


@CLAIMS.claim("The source text's lenient reader rebuilt a wrong state at {wrong} of the {fails} "
              "failing points, and agreed with memory only on pages {agree}: the bug pages, "
              "where the record glued and lost is the intent.")
def the_source_texts_reader_is_lucky_on_bug_pages():
    d = _mode("no-newline")
    bad = d[d["verdict"] == "rebuild fails"]
    agree = sorted(int(p) for p in bad.loc[bad["lesson_reader_ok"] == True, "page"])  # noqa: E712
    bugs = Site.load(int(d["page"].max())).bug_pages
    wrong = int((d["lesson_reader_ok"] == False).sum())  # noqa: E712
    return (agree == bugs and wrong == len(bad) - len(bugs),
            {"wrong": wrong, "fails": len(bad), "agree": agree, "bugs": bugs})


@CLAIMS.claim("Our reader refused {refused} of the {fails} logs, naming file and line; it "
              "accepted {short}, on page {pages}, where nothing follows the glued line.")
def our_reader_refuses_a_gap():
    d = _mode("no-newline")
    bad = d[d["verdict"] == "rebuild fails"]
    accepted = bad[bad["disk_error"].isna()]
    last = int(d["page"].max())
    return (list(accepted["page"]) == [last],
            {"refused": int(bad["disk_error"].notna().sum()), "fails": len(bad),
             "short": len(accepted), "pages": [int(p) for p in accepted["page"]]})


@CLAIMS.claim("Killed inside each of the {n} snapshot writes: renamed into place, {atomic} of "
              "{n} runs were correct and {atomic_torn} found a torn snapshot ({temps} temp files "
              "removed); overwritten in place, {torn_torn} of {n} found it torn and started "
              "fresh, redoing {avg} model calls on average.")
def the_snapshot_old_or_new():
    a, t = (mid_commit_kills(SNAPSHOT_CONFIGS[m]) for m in ("atomic", "torn"))
    atomic_torn = int((a["snapshot_fallback"] == "fresh").sum())
    torn_torn = int((t["snapshot_fallback"] == "fresh").sum())
    return (atomic_torn == 0 and int((a["verdict"] == "correct").sum()) == len(a)
            and torn_torn > 0,
            {"n": len(a), "atomic": int((a["verdict"] == "correct").sum()),
             "atomic_torn": atomic_torn, "temps": int(a["temp_files_removed"].sum()),
             "torn_torn": torn_torn, "avg": float(t["redone_model_calls"].mean())})


# --- practice: a write mode and a run the lesson did not run --------------------------------------

def drawn_log_config(rng) -> RunConfig:
    """A log the lesson did not run: not 12 pages; a write mode, intents, a snapshot interval."""
    return RunConfig(store="log", write_mode=rng.choice(["torn", "no-newline"]),
                     intent=rng.choice([True, False]),
                     snapshot_every=rng.choice([0, 0, 2, 3, 4]),
                     pages=rng.choice([n for n in range(4, 11) if n != 12]))


def practice_problem(seed: int) -> Problem:
    """A torn or no-newline log on a run the lesson did not do, and one question: how many crash
    points fail the rebuild from disk (or leave the source text's reader wrong), or, at one
    mid_commit point, whether the source text's reader agrees with memory."""
    rng = drawn(seed, 5)
    config = drawn_log_config(rng)
    bugs = Site.load(config.pages).bug_pages
    setting = (f"The event log in `{config.write_mode}` mode, intents "
               f"{'on' if config.intent else 'off'}, key on, "
               + (f"a snapshot every {config.snapshot_every} pages, " if config.snapshot_every
                  else "no snapshot, ")
               + f"on a site of {config.pages} pages (bugs on "
               + (f"page {bugs[0]}" if len(bugs) == 1 else
                  "pages " + ", ".join(map(str, bugs[:-1])) + f" and {bugs[-1]}") + ").")
    kind = rng.choice(["rebuild", "lenient", "point"])
    info = {"config": config, "kind": kind}
    if kind == "point":
        page = rng.randint(1, config.pages)
        name = f"p{page}.{MID_COMMIT}"

        def measure() -> Answer:
            r = results.point(config, name)
            return Answer(bool(r.lesson_reader_ok), f"killed at {name} and resumed: the source "
                          f"text's reader {'agrees' if r.lesson_reader_ok else 'does not agree'}"
                          f" with the resumed worker's memory (verdict: {r.verdict}).")
        return Problem(5, seed, setting, f"The worker is killed at `{name}` (inside page {page}'s "
                       "commit write) and resumed. Does the source text's reader (skip what does "
                       "not parse, apply the rest) then rebuild the same state as the resumed "
                       "worker's memory?", YES_NO, measure,
                       "Which record does the resumed run write first after the fragment, and "
                       "does losing it change the state?", drawn={**info, "point": name})
    what = ("fail the rebuild from disk (the three-way check)" if kind == "rebuild" else
            "leave the source text's reader (skip what does not parse) with a wrong state")

    def measure() -> Answer:
        records = results.sweep_once(config)
        hit = [r.crash_point for r in records
               if (r.verdict == "rebuild fails" if kind == "rebuild"
                   else r.lesson_reader_ok is False)]
        return Answer(len(hit), f"{len(hit)} of {len(records)} crash points"
                      + (f": {', '.join(hit)}." if hit else "."))
    return Problem(5, seed, setting, f"Every crash point is killed and resumed. At how many of "
                   f"them does the run {what}?", NUMBER, measure,
                   "Where does a kill leave half a record, is it repaired on reopen, and which "
                   "record does the resumed run glue onto it?", unit="points", drawn=info)


#: The transfer question: drawn by the generator (`python -m bughunt practice --lesson 5`).
TRANSFER_SEED = 14
TRANSFER = as_exercise("5.3", practice_problem(TRANSFER_SEED), __name__)


LESSON = Lesson(
    number=5,
    notebook="05_torn_writes",
    title="Torn writes: what if the checkpoint itself is cut in half?",
    short_title="torn writes",
    question="What if the checkpoint itself is cut in half?",
    teaches="torn, no-newline and atomic writes; the newline repair, skipping and counting "
            "bad lines, `os.replace`; the no-newline trap only a rebuild from disk catches",
    objectives=(
        "say where a torn write (撕裂写) comes from, and why `kill -9` rarely tears a single "
        "`write()`;",
        "predict what the newline repair (补换行) leaves at the end of a torn log, and why "
        "repairing twice is repairing once;",
        "explain the no-newline trap: the resumed run is right, the log on disk is wrong, and "
        "only the three-way check (三方一致) sees it now;",
        "say what temp file + rename guarantees against `kill -9`, and what it does not "
        "against a power cut.",
    ),
    runs="the notebook runs in well under a minute",
    prerequisites="Lessons 1 to 4 (the event log, replay, sequence numbers); bytes and "
                  "newlines in Python. Words are in the [glossary](glossary.md).",
    panel=panel,
    exercises=defined_in(__name__),
    claims=CLAIMS,
    practice=practice_problem,
)

