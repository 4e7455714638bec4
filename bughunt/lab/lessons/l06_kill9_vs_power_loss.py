"""Lesson 6, kill -9 is not power loss: flush, fsync, and what each costs.

A byte the worker writes passes three places: the process's own user-space buffer (Python's
`open()`), the kernel's page cache, the storage device. kill -9 destroys only the first, so
surviving it needs the bytes handed to the kernel (flush, or `os.write`); surviving a kernel crash
or a power cut needs them on the device (fsync of the file, and of its directory when the file is
new or was renamed). This module measures what can be measured with real processes here:

- the source text's log mode swept at all 54 crash points with fsync never and always
  (`kill9_sweeps`): under kill -9 the verdicts are the same, because fsync protects against
  something else;
- what kill -9 leaves of a line written with and without flush (`buffer_table`, real processes
  running `python -m bughunt.bufferdemo`);
- the latency of each kind of checkpoint write through the lab's own I/O door (`measure_latencies`),
  in µs, beside the source text's macOS medians (`bughunt.lab.reference`).
"""

from __future__ import annotations

import math
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ...bufferdemo import LINE, run_killed
from ...config import RunConfig
from ...diskio import Door, Files
from ...doctor import Storage, file_system, storage
from ...experiment import (LESSON_FIGURES, clean_run, frame, ram_dir, summarize, sweep_records,
                           work_dir)
from ...stores import LOG_FILE, SNAPSHOT_FILE, records
from ...stores.snapshot import read_snapshot
from ...world import Site
from .. import reference
from ..claims import Claims, Invariants
from ..judges import MAGNITUDE, Measured, assess, defined_in, exercise, statement
from ..practice import NUMBER, YES_NO, Answer, Problem, as_exercise, drawn
from ..views import Table, summary_table
from .. import results
from ..crash_panel import CrashPanel
from ..plots import describe_config, verdict_handles, verdict_row
from ..reference import (APPEND, APPEND_FSYNC, SNAPSHOT_DIR_FSYNC, SNAPSHOT_NO_DIR_FSYNC,
                        SNAPSHOT_NO_FSYNC)
from ..style import COLORS, SERIES, lesson_line, new_figure, page_ticks
from ..registry import Lesson

#: The source text's log mode: event log, intents, idempotency key, and no fsync at all.
LOG = RunConfig(store="log", intent=True)
POLICIES = {"fsync never": LOG, "fsync always": LOG.replace(fsync="always")}

#: The kinds of checkpoint write timed here, in the order of the figure's rows.
KINDS = reference.WRITE_KINDS
WARM_UP = 10          # untimed writes before each kind's samples
KIND_COLORS = dict(zip(KINDS, (COLORS["sky"], COLORS["blue"], COLORS["yellow"], COLORS["orange"],
                               COLORS["red"])))


# --- 1. kill -9 with and without fsync ------------------------------------------------------------

def kill9_sweeps(policies: dict[str, RunConfig] = POLICIES, *, progress=None):
    """Sweep the source text's log mode at every crash point, once per fsync policy; one DataFrame.

    `policies` maps "fsync never" and "fsync always" to configurations (tests pass smaller ones).
    The sweeps run one after the other so each can be timed (`df.attrs["elapsed_s"]`);
    `df.attrs["configs"]` keeps the configurations.
    """
    import pandas as pd

    frames, elapsed = [], {}
    for name, config in policies.items():
        t0 = time.perf_counter()
        recs = sweep_records(config, tag=name.replace(" ", "_"), progress=progress)
        elapsed[name] = time.perf_counter() - t0
        results.seed(config, recs)            # the panel and the exercises reuse these runs
        frames.append(frame(recs).assign(fsync=name))
    df = pd.concat(frames, ignore_index=True)
    df.attrs["elapsed_s"] = elapsed
    df.attrs["configs"] = dict(policies)
    where = Path(ram_dir() or tempfile.gettempdir())
    df.attrs["sweep_dir"], df.attrs["sweep_file_system"] = where, file_system(where)
    return df


@results.memoized
def lesson_sweeps():
    """`kill9_sweeps` of the lesson's two policies, run once per kernel (the claims read it)."""
    return kill9_sweeps()


def kill9_table(df) -> Table:
    """Per fsync policy: the verdicts of the kill -9 runs (they partition the crash points),
    beside the source text's 54 of 54, which it measured without fsync only."""
    verdicts = ("correct", "duplicate", "lost", "tracker disagrees")
    rows = []
    for name, d in df.groupby("fsync", sort=False):
        s = summarize(d)
        counts = {v: int((d["verdict"] == v).sum()) for v in verdicts}
        rows.append({"fsync": name, "crash points": len(d), **counts,
                     "another verdict": len(d) - sum(counts.values()),
                     "source text: correct": LESSON_FIGURES["log_runs_correct"]
                     if name == "fsync never" else None,
                     "avg replayed events": s["avg_replayed_events"],
                     "avg redone calls": s["avg_redone_model_calls"]})
    return summary_table(rows, "lesson 6, kill -9 with and without fsync", Invariants(
        total="crash points", parts=(*verdicts, "another verdict")), index="fsync",
        averages=("avg replayed events", "avg redone calls"))


def same_outcome(df) -> str:
    """Point by point, does fsync change anything a kill -9 run shows? Counted, not assumed."""
    never, always = (df[df["fsync"] == name].set_index("index") for name in POLICIES)
    if len(never) != len(always):
        raise ValueError("both fsync policies must have been swept over the same crash points")
    n = len(never)
    checks = {"verdict": "the same verdict", "redone_model_calls": "the same redone model calls",
              "replayed_events": "the same replayed events", "tracker_pages": "the same tracker",
              "memory_findings": "the same findings in memory"}
    lines = [f"crash points with {what} under both policies: "
             f"{sum(never[col].loc[i] == always[col].loc[i] for i in never.index)} of {n}"
             for col, what in checks.items()]
    return "\n".join(lines)


def sweep_times(df) -> Table:
    """Wall time of each sweep, and the file system its run directories were on (not
    deterministic: shown only in cells whose output is ignored)."""
    rows = []
    for name, seconds in df.attrs["elapsed_s"].items():
        pairs = int((df["fsync"] == name).sum())
        rows.append({"fsync": name, "crash + resume pairs": pairs,
                     "file system": df.attrs.get("sweep_file_system", "-"),
                     "seconds": round(seconds, 2), "ms per pair": round(1000 * seconds / pairs, 1)})
    return summary_table(rows, "lesson 6, the sweeps' wall time",
                         Invariants(counts=("crash + resume pairs",)), index="fsync")


def _verdict_strip(ax, df, rows: dict[str, str], highlight: str | None = None) -> list[str]:
    """One row of coloured cells per sweep: the verdict at every crash point. Returns verdicts."""
    seen = []
    for y, (label, d) in enumerate((label, df[df[col] == val])
                                   for label, (col, val) in rows.items()):
        verdict_row(ax, d, y)
        seen.extend(d["verdict"])
        correct = int((d["verdict"] == "correct").sum())
        ax.annotate(f"{correct} of {len(d)} correct", (1.0, y), xycoords=("axes fraction", "data"),
                    xytext=(6, 0), textcoords="offset points", va="center", fontsize=9)
    ax.set_yticks(range(len(rows)), list(rows))
    ax.set_ylim(-0.6, len(rows) - 0.4)
    if highlight is not None and highlight in set(df["crash_point"]):
        x = int(df.loc[df["crash_point"] == highlight, "index"].iloc[0])
        ax.annotate(highlight, (x, len(rows) - 0.45), xytext=(0, 10),
                    textcoords="offset points", ha="center", fontsize=8,
                    arrowprops={"arrowstyle": "->", "color": COLORS["black"]})
    return seen


def _verdict_legend(ax, verdicts, extra=()):
    ax.legend(handles=list(extra) + verdict_handles(verdicts), fontsize=8, loc="upper left",
              ncols=3)


def plot_kill9(df):
    """Verdicts and replayed events per crash point, fsync never against always, under kill -9."""
    fig, (top, bottom) = new_figure(10, 4.8, nrows=2, sharex=True,
                                    gridspec_kw={"height_ratios": [1, 2]})
    seen = _verdict_strip(top, df, {name: ("fsync", name) for name in POLICIES})
    top.set_title("kill -9 at every crash point of the source text's log mode: "
                  "fsync changes nothing")
    _verdict_legend(top, seen)
    top.set_ylim(-0.6, 2.4)
    for offset, (name, color) in zip((-0.2, 0.2), zip(POLICIES, (COLORS["blue"],
                                                                 COLORS["orange"]))):
        d = df[df["fsync"] == name]
        bottom.bar(d["index"] + offset, d["replayed_events"], width=0.4, color=color,
                   label=f"{name}: avg {d['replayed_events'].mean():.2f}")
    lesson_line(bottom, LESSON_FIGURES["replay_log_avg"],
                f"source text avg (fsync never): {LESSON_FIGURES['replay_log_avg']}")
    bottom.set_ylabel("replayed events")
    bottom.set_ylim(0, df["replayed_events"].max() * 1.35)
    bottom.legend(fontsize=8, loc="upper left", ncols=3)
    page_ticks(bottom, df[df["fsync"] == "fsync never"])
    bottom.set_xlabel("crash point (grouped by page; p3 = first point of page 3)")
    return fig


# --- 2. the user-space buffer: real processes killed right after writing --------------------------

BUFFER_CASES = [   # (case, how, lines)
    ("f.write(), no flush", "write", 1),
    ("f.write() + flush()", "flush", 1),
    ("os.write(), no Python buffer", "os-write", 1),
    ("f.write() + flush() + fsync", "fsync", 1),
    ("3000 x f.write(), no flush", "write", 3000),
]


def _lines_within(df) -> list[str]:
    return [f"row {i!r}: {int(r['whole lines on disk'])} whole lines of {int(r['lines written'])}"
            for i, r in df.iterrows() if r["whole lines on disk"] > r["lines written"]]


@results.memoized
def buffer_table() -> Table:
    """Each way of writing the source text's 12-byte line, then kill -9: the bytes left on disk
    (real processes; run once per kernel)."""
    rows = []
    for case, how, lines in BUFFER_CASES:
        r = run_killed(how, lines)
        source = reference.BUFFER_BYTES.get(how) if lines == 1 else None
        rows.append({"case": case, "bytes written": r["bytes written"],
                     "bytes on disk after kill -9": r["bytes on disk"],
                     "source text (macOS)": None if source is None else int(source.value),
                     "lines written": lines, "whole lines on disk": r["whole lines on disk"],
                     "intact": r["intact"]})
    return summary_table(rows, "lesson 6, what kill -9 leaves of a line", Invariants(
        total="bytes written", within=("bytes on disk after kill -9",),
        counts=("lines written", "whole lines on disk"), extra=(_lines_within,)), index="case")


def plot_buffer(table):
    """Share of the written bytes that kill -9 left on disk, per way of writing."""
    table = getattr(table, "df", table)
    fig, ax = new_figure(8.5, 3.4)
    cases = list(table.index)[::-1]
    shares = [100 * table.loc[c, "bytes on disk after kill -9"] / table.loc[c, "bytes written"]
              for c in cases]
    colors = [COLORS["green"] if s == 100 else COLORS["red"] if s == 0 else COLORS["orange"]
              for s in shares]
    ax.barh(cases, shares, color=colors, height=0.6)
    labelled = False
    for y, c in enumerate(cases):
        on, of = table.loc[c, "bytes on disk after kill -9"], table.loc[c, "bytes written"]
        ax.annotate(f"{on} of {of} bytes", (shares[y], y), xytext=(10, 0),
                    textcoords="offset points", va="center", fontsize=9)
        source = table.loc[c, "source text (macOS)"]
        if source is not None and source == source:      # not None, not NaN
            ax.plot([100 * source / of], [y], marker="D", color=COLORS["grey"], markersize=8,
                    markeredgecolor=COLORS["black"], linestyle="none",
                    label=None if labelled else "source text (macOS), bytes on disk")
            labelled = True
    ax.set_xlim(-4, 135)
    ax.set_xlabel("written bytes found on disk after kill -9 (%)")
    ax.set_title("What kill -9 leaves of a line: the user-space buffer dies with the process")
    ax.legend(fontsize=8, loc="upper right")
    return fig


def byte_places_measured(table) -> dict[str, int]:
    """The buffer demo's bytes on disk after kill -9, as `diagrams.plot_byte_places` takes them:
    {"write": unflushed, "flush": flushed}."""
    col = "bytes on disk after kill -9"
    table = getattr(table, "df", table)
    return {"write": int(table.loc["f.write(), no flush", col]),
            "flush": int(table.loc["f.write() + flush()", col])}


# --- 3. what each kind of checkpoint write costs, timed by the I/O door ---------------------------

class WithoutDirFsync(Files):
    """The door's system calls minus the directory fsync, plugged in under the real door: the
    source text's `atomic_write` (tmp, fsync, rename).

    Only for timing the source text's figure; the rename it leaves may be undone by a power cut.
    """

    def fsync_dir(self, directory: Path) -> None:
        pass


@results.memoized
def worker_records() -> dict[str, bytes]:
    """The bytes a real worker writes: its last `page_done` log line and its final snapshot file.

    Taken from a clean run of the log store with a snapshot every 4 pages, so the timed writes are
    exactly the worker's size.
    """
    with work_dir() as d:
        run_dir = d / "run"
        clean_run(LOG.replace(snapshot_every=4), run_dir)
        lines = (run_dir / LOG_FILE).read_bytes().splitlines(keepends=True)
        page_done = [ln for ln in lines if records.decode(ln.rstrip(b"\n"))["t"] == "page_done"]
        read_snapshot(run_dir / SNAPSHOT_FILE)     # a valid snapshot, or this raises
        snapshot = (run_dir / SNAPSHOT_FILE).read_bytes()
    return {"page_done": page_done[-1], "snapshot": snapshot}


IN_MEMORY = ("tmpfs", "ramfs")


@contextmanager
def _on_a_disk(base_dir: Path | None):
    """A temp directory for timing writes: under `base_dir`, or the system's temp directory unless
    that is in memory (then the current directory, which is usually on a disk)."""
    parent = base_dir or (None if file_system(Path(tempfile.gettempdir())) not in IN_MEMORY
                          else Path.cwd())
    with tempfile.TemporaryDirectory(prefix="bughunt-latency-", dir=parent) as d:
        yield Path(d)


def measure_latencies(samples: int = 300, kinds=KINDS, base_dir: Path | None = None):
    """Time `samples` writes of each kind through the I/O door; one row per write (µs).

    Each kind is timed in its own block, after a few untimed warm-up writes, as a worker using that
    design would write: mixing kinds would let one kind's fsyncs slow the next kind's plain writes
    (they share the file system's journal). Appends go to one file each, opened once, as the log
    store does. `df.attrs["storage"]` says what the writes went to (file system, device, write
    cache, hypervisor: `bughunt.doctor.storage`); `df.attrs["file_system"]` names the file system.
    """
    import pandas as pd

    recs = worker_records()
    line, snap = recs["page_done"], recs["snapshot"]
    plain, synced = Door("never"), Door("always")
    lesson = Door("never", files=WithoutDirFsync())
    with _on_a_disk(base_dir) as d:
        where = storage(d)
        fds = {APPEND: plain.open_append(d / "plain.jsonl"),
               APPEND_FSYNC: synced.open_append(d / "synced.jsonl")}
        write = {
            APPEND: lambda: plain.append(fds[APPEND], line, kind=APPEND),
            APPEND_FSYNC: lambda: synced.append(fds[APPEND_FSYNC], line, kind=APPEND_FSYNC),
            SNAPSHOT_NO_FSYNC: lambda: plain.write_atomic(d / "nosync.json", snap, fsync=False,
                                                          kind=SNAPSHOT_NO_FSYNC),
            SNAPSHOT_NO_DIR_FSYNC: lambda: lesson.write_atomic(d / "source.json", snap,
                                                               fsync=True,
                                                               kind=SNAPSHOT_NO_DIR_FSYNC),
            SNAPSHOT_DIR_FSYNC: lambda: plain.write_atomic(d / "dirsync.json", snap, fsync=True,
                                                           kind=SNAPSHOT_DIR_FSYNC),
        }
        doors = {APPEND: plain, APPEND_FSYNC: synced, SNAPSHOT_NO_FSYNC: plain,
                 SNAPSHOT_NO_DIR_FSYNC: lesson, SNAPSHOT_DIR_FSYNC: plain}
        try:
            for kind in kinds:
                for _ in range(WARM_UP):
                    write[kind]()
                doors[kind].latencies_ns[kind].clear()
                for _ in range(samples):
                    write[kind]()
        finally:
            plain.close(fds[APPEND])
            synced.close(fds[APPEND_FSYNC])
    sizes = {APPEND: len(line), APPEND_FSYNC: len(line)}
    rows = []
    for door in (plain, synced, lesson):
        for kind, values in door.latencies_ns.items():
            rows += [{"kind": kind, "bytes": sizes.get(kind, len(snap)), "latency_us": v / 1e3}
                     for v in values]
    df = pd.DataFrame(rows)
    df.attrs["storage"] = where
    df.attrs["file_system"] = where.file_system
    df["kind"] = pd.Categorical(df["kind"], categories=[k for k in KINDS if k in kinds],
                                ordered=True)
    return df.sort_values("kind", kind="stable").reset_index(drop=True)


def source_figures() -> Table:
    """The source text's write medians (macOS), in µs, by kind of write."""
    rows = [{"kind": kind, "median": us(f.value * 1000), "rerun": us(f.rerun * 1000),
             "machine": f.machine}
            for kind, f in reference.WRITE_MEDIANS_MS.items()]
    return summary_table(rows, "lesson 6, the source text's write medians", index="kind")


def source_sentence() -> str:
    """The source text's sentence that gives those medians, and its English translation."""
    sentences = {f.sentence: f.says for f in reference.WRITE_MEDIANS_MS.values()}
    return "\n".join(f"{zh}\n({en})" for zh, en in sentences.items())


def what_was_measured(lat) -> str:
    """What the timed writes went to, in one sentence (changes from machine to machine)."""
    where: Storage = lat.attrs["storage"]
    return f"The timed writes went to {where.describe()}."


def us(value: float) -> str:
    """A duration in µs, three significant digits, no scientific notation: 1.32 µs, 4,610 µs."""
    rounded = float(f"{value:.3g}")
    return f"{rounded:,.0f} µs" if rounded >= 1000 else f"{rounded:g} µs"


def latency_table(lat) -> Table:
    """Per kind of write: median and p99 (three significant figures, one format for the column),
    how many appends it is worth, and the source text's macOS median for the same kind of write
    (three kinds only)."""
    append_median = lat.loc[lat["kind"] == APPEND, "latency_us"].median()
    rows = []
    for kind, d in lat.groupby("kind", observed=True, sort=True):
        median = d["latency_us"].median()
        source = reference.write_median(kind)
        rows.append({"kind": kind, "samples": len(d), "bytes": int(d["bytes"].iloc[0]),
                     "median": us(median), "p99": us(d["latency_us"].quantile(0.99)),
                     "x append": round(median / append_median) if append_median else None,
                     "source text median": None if source is None else us(source.value * 1000),
                     "source text rerun": None if source is None else us(source.rerun * 1000)})
    return summary_table(rows, "lesson 6, what each kind of write costs",
                         Invariants(counts=("samples", "bytes")), index="kind")


def fsync_ratio(lat) -> float:
    """How many times slower append + fsync is than a plain append here (ratio of medians)."""
    med = lat.groupby("kind", observed=True)["latency_us"].median()
    return float(med[APPEND_FSYNC] / med[APPEND])


def source_medians_us(kinds) -> dict[str, tuple[float, float]]:
    """The source text's (median, rerun) in µs for each kind of write that has one."""
    return {k: (f.value * 1000, f.rerun * 1000) for k in kinds
            if (f := reference.write_median(k)) is not None}


def _source_marks(ax, rows: dict[str, int]) -> list[float]:
    """The source text's macOS medians as diamonds on the rows of the same kind (first run and
    rerun); returns the values drawn, so the axis can include them."""
    drawn = []
    first = True
    for kind, (a, b) in source_medians_us(rows).items():
        y = rows[kind]
        ax.plot([a], [y], marker="D", markersize=8, color=COLORS["grey"],
                markeredgecolor=COLORS["black"], linestyle="none", zorder=4,
                label="source text median (macOS)" if first else None)
        ax.plot([b], [y], marker="D", markersize=8, markerfacecolor="white",
                markeredgecolor=COLORS["grey"], linestyle="none", zorder=4,
                label="source text rerun (macOS)" if first else None)
        first = False
        drawn += [a, b]
    return drawn


def _hbox(ax, y: float, values, color: str) -> tuple[float, float]:
    """A horizontal box: quartiles, median, whiskers at the 1st and 99th percentile, the rest dots.

    Drawn by hand so it looks the same on every matplotlib the lab supports. Returns the whiskers'
    ends, which the axis is fitted to (a few far outliers must not squash the boxes into lines).
    """
    from matplotlib.patches import Rectangle

    p1, q1, med, q3, p99 = np.percentile(values, [1, 25, 50, 75, 99])
    ax.add_patch(Rectangle((q1, y - 0.27), q3 - q1, 0.54, facecolor=color, alpha=0.85,
                           edgecolor=COLORS["black"], zorder=2))
    ax.plot([med, med], [y - 0.27, y + 0.27], color=COLORS["black"], linewidth=2, zorder=3)
    for lo, hi in ((p1, q1), (q3, p99)):
        ax.plot([lo, hi], [y, y], color=COLORS["black"], linewidth=1, zorder=1)
    for end in (p1, p99):
        ax.plot([end, end], [y - 0.12, y + 0.12], color=COLORS["black"], linewidth=1)
    outside = values[(values < p1) | (values > p99)]
    ax.plot(outside, np.full(len(outside), y), ".", color=COLORS["grey"], markersize=3,
            alpha=0.6)
    return float(p1), float(p99)


def _fit_log_axis(ax, values: list[float], pad: float = 1.6) -> tuple[float, float]:
    """A log axis just wide enough for `values`, its ticks written as plain numbers (1, 10, 100)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    lo, hi = min(values) / pad, max(values) * pad
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    # labelled ticks at 1, 2, 5 per decade on a narrow axis (at 1 on a wide one), all as plain
    # numbers: never "2×10⁰" between the decades
    subs = (1.0, 2.0, 5.0) if math.log10(hi / lo) < 3 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    return lo, hi


def _beyond_axis(ax, y: float, values, hi: float) -> None:
    """Say how many samples lie beyond the right edge, instead of stretching the axis to them."""
    n = int((np.asarray(values) > hi).sum())
    if n:
        ax.annotate(f"{n} beyond →", (hi, y), xytext=(-3, 0), textcoords="offset points",
                    ha="right", va="center", fontsize=7, color=COLORS["black"])


def plot_latencies(lat):
    """The distribution of each kind of write in µs on a log axis fitted to the whiskers, with the
    source text's macOS medians on the rows of the same kind."""
    fig, ax = new_figure(10, 4.2)
    kinds = [k for k in KINDS if k in set(lat["kind"])]
    rows = {k: i + 1 for i, k in enumerate(kinds)}
    ends = []
    for kind in kinds:
        values = lat.loc[lat["kind"] == kind, "latency_us"].to_numpy()
        ends += _hbox(ax, rows[kind], values, KIND_COLORS[kind])
        ax.annotate(f"median {us(float(np.median(values)))}", (1.0, rows[kind]),
                    xycoords=("axes fraction", "data"), xytext=(6, 0),
                    textcoords="offset points", va="center", fontsize=8)
    ends += _source_marks(ax, rows)
    _, hi = _fit_log_axis(ax, ends)
    for kind in kinds:
        _beyond_axis(ax, rows[kind], lat.loc[lat["kind"] == kind, "latency_us"], hi)
    ax.set_yticks(list(rows.values()), kinds, fontsize=9)
    ax.set_ylim(0.4, len(kinds) + 0.6)
    ax.set_xlabel("time per write (µs, log scale)")
    n = int(lat["kind"].value_counts().max())
    ax.set_title(f"What one checkpoint write costs here: {n} writes of each kind through the I/O "
                 "door\n(box: quartiles; whiskers: 1st to 99th percentile)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(axis="x", which="major", color=COLORS["grey"], alpha=0.3)
    return fig


# --- 4. what survives what -----------------------------------------------------------------------

#: fsync(2), Linux man-pages: why a new file needs its directory fsynced as well.
FSYNC_MAN_PAGE = "https://man7.org/linux/man-pages/man2/fsync.2.html"


def survival_table(buffers, df):
    """What was done -> whether it survives kill -9, a kernel panic, a power cut.

    The kill -9 column cites this notebook's measurements; the other two follow from what fsync
    promises (fsync(2): a file's fsync does not make its directory entry durable; that needs an
    fsync of the directory) and cannot be shown with kill -9 (lesson 8 simulates a power cut).
    """
    import pandas as pd

    buffers = getattr(buffers, "df", buffers)
    no_flush = buffers.loc["f.write(), no flush", "bytes on disk after kill -9"]
    flushed = buffers.loc["f.write() + flush()", "bytes on disk after kill -9"]
    never = df[df["fsync"] == "fsync never"]
    correct = int((never["verdict"] == "correct").sum())

    def kept(n: int) -> str:
        return "survives" if n == len(LINE) else "lost"

    rows = [
        ("f.write(), no flush (user-space buffer)",
         f"{kept(no_flush)} (here: {no_flush} of {len(LINE)} bytes)", "lost", "lost",
         "open() before flush()"),
        ("write() or flush(), no fsync (page cache)",
         f"{kept(flushed)} (here: {flushed} of {len(LINE)} bytes; {correct} of {len(never)} "
         "runs correct)",
         "may be lost", "may be lost", "the source text's log, Codex's rollout"),
        ("write() + fsync, to a file whose name is already durable", "survives", "survives",
         "survives *", "the lab's log appends with fsync always"),
        ("new file: write() + fsync, no directory fsync", "survives",
         "the file may be missing", "the file may be missing", "nobody here (a bug)"),
        ("new file: write() + fsync + directory fsync", "survives", "survives", "survives *",
         "the lab's door with fsync always, Codex's migration marker"),
        ("rename, no directory fsync", "survives", "rename may be undone",
         "rename may be undone", "the source text's atomic_write"),
        ("rename + directory fsync", "survives", "survives", "survives *",
         "the lab's write_atomic, Codex's migration"),
    ]
    table = pd.DataFrame(rows, columns=["what was done", "kill -9", "kernel panic", "power cut",
                                        "who does it"]).set_index("what was done")
    return Table(table, "lesson 6, what survives what")


def window_witnesses(df) -> Table:
    """The three witnesses at the danger-window points (report filed, page not yet committed),
    both fsync policies."""
    cols = ["fsync", "crash_point", "tracker_pages", "memory_findings", "rebuild_ok",
            "three_way_check"]
    d = df.loc[df["label"] == "after_submit", cols].reset_index(drop=True)
    return Table(d.rename(columns={"tracker_pages": "tracker", "memory_findings": "memory",
                                   "rebuild_ok": "rebuild agrees",
                                   "three_way_check": "three-way check"}),
                 "lesson 6, the witnesses in the danger window")


# --- the panel -----------------------------------------------------------------------------------

@results.memoized
def clean_latencies(config: RunConfig) -> dict[str, tuple[int, ...]]:
    """Checkpoint write latencies (ns, by kind) of one clean run of `config`, cached.

    A crash+resume record does not carry the resumed worker's latencies, so the panel takes them
    from a clean run with the same settings: the same writes, without the kill.
    """
    writes = clean_run(config)["checkpoint_writes"]["latencies_ns"]
    return {kind: tuple(v) for kind, v in writes.items()}


def write_kind(kind: str, config: RunConfig) -> str | None:
    """Which of lesson 6's kinds of write a worker's checkpoint write is, under `config`.

    The worker's snapshot with fsync is the lab's write_atomic, which fsyncs the directory too: it
    is never the source text's snapshot (no directory fsync).
    """
    sync = config.fsync == "always"
    if config.write_mode != "atomic":
        return None              # torn on purpose: two writes, or a snapshot written in place
    if kind == "append":
        return APPEND_FSYNC if sync else APPEND
    if kind == "snapshot":
        return SNAPSHOT_DIR_FSYNC if sync else SNAPSHOT_NO_FSYNC
    return None


def panel_plot(df, config: RunConfig, highlight: str | None = None):
    """Top: the verdict at every crash point of the sweep. Bottom: that design's checkpoint writes.

    The write latencies come from a clean run of the same settings (`clean_latencies`), each dot
    one write, in µs, with the source text's macOS median beside them where it measured the same
    kind of write.
    """
    fig, (top, bottom) = new_figure(10, 5.4, nrows=2, gridspec_kw={"height_ratios": [1, 2]})
    d = df.assign(sweep="this sweep")
    seen = _verdict_strip(top, d, {"verdict": ("sweep", "this sweep")}, highlight)
    page_ticks(top, d)
    top.set_xlabel("crash point (grouped by page)", fontsize=9)
    top.set_title(f"kill -9 at every crash point: {describe_config(config)}", fontsize=10)
    _verdict_legend(top, seen)
    top.set_ylim(-0.6, 1.9)

    writes = clean_latencies(config)
    kinds = sorted(writes)
    bottom.set_title("checkpoint writes of one clean run with these settings "
                     "(each dot one write)", fontsize=10)
    if not kinds:
        bottom.text(0.5, 0.5, "no checkpoint store: nothing is written", ha="center",
                    va="center", transform=bottom.transAxes)
        bottom.set_xlabel("time per write (µs)")
        bottom.set_xticks([])
        bottom.set_yticks([])
        return fig
    rows, marks, values = {}, {}, []
    for y, kind in enumerate(kinds, 1):
        t = np.array(writes[kind]) / 1e3
        jitter = (np.arange(len(t)) % 7 - 3) * 0.04
        label = f"{kind}, fsync {config.fsync} ({len(t)} writes)"
        bottom.scatter(t, y + jitter, s=18, color=SERIES[(y - 1) % len(SERIES)], alpha=0.8)
        med = float(np.median(t))
        bottom.plot([med, med], [y - 0.3, y + 0.3], color=COLORS["black"], linewidth=2)
        bottom.annotate(f"median {us(med)}", (1.0, y), xycoords=("axes fraction", "data"),
                        xytext=(6, 0), textcoords="offset points", va="center", fontsize=8)
        rows[label] = y
        values += list(t)
        ours = write_kind(kind, config)
        if ours:
            marks[ours] = y
    values += _source_marks(bottom, marks)
    _fit_log_axis(bottom, values)
    bottom.set_yticks(list(rows.values()), list(rows), fontsize=9)
    bottom.set_ylim(0.4, len(rows) + 0.7)
    bottom.set_xlabel("time per write (µs, log scale)")
    if source_medians_us(marks):
        bottom.legend(fontsize=8, loc="upper left")
    bottom.grid(axis="x", color=COLORS["grey"], alpha=0.3)
    return fig


def panel(base: RunConfig = LOG, crash_point: str = "p7.after_submit") -> CrashPanel:
    """Lesson 6's panel: store, fsync, write mode, snapshot interval; verdicts and write costs.
    Sweeps `kill9_sweeps` already ran are in the lab's results cache: the panel does not repeat
    them."""
    return CrashPanel(name="06-kill9", base=base, plot=panel_plot, crash_point=crash_point,
                      knobs=["store", "fsync", "write_mode", "snapshot_every"],
                      title="kill -9 vs fsync: verdict per crash point, and what each write costs")


# --- exercises -----------------------------------------------------------------------------------

#: Exercise 6.1: many unflushed lines, then kill -9 (the last row of the buffer table).
MANY_LINES = 3000


@exercise("6.1", f"Predict, then run: a program writes the 12-byte line {MANY_LINES} times with "
          "f.write() into a file opened with open() (Python's default buffering), never calls "
          "flush(), and is killed by kill -9 right after the last write. How many whole lines "
          "are in the file afterwards? Answer with a number.",
          "Python's buffered writer holds what it is given until its buffer (io.DEFAULT_BUFFER_SIZE, "
          "8192 bytes) would overflow; then it hands the buffer to the kernel with write(). Those "
          "bytes are in the page cache and survive the kill; what was still in the buffer dies "
          "with the process. So the file keeps a prefix: the bytes of the buffer's last automatic "
          "write, cut where that write ended, which need not be the end of a line.")
def _ex_6_1(answer):
    r = run_killed("write", MANY_LINES)
    return assess(answer, r["whole lines on disk"], what="whole lines on disk").reply(
        f" Measured just now with a real process: {r['bytes on disk']} of {r['bytes written']} "
        "bytes were on disk.",
        hint=" How big is Python's write buffer, and when does it hand bytes to the kernel?")


_SOURCE_APPEND = reference.WRITE_MEDIANS_MS[APPEND]
_SOURCE_FSYNC = reference.WRITE_MEDIANS_MS[APPEND_FSYNC]


def fresh_ratio(kind: str = APPEND_FSYNC, samples: int = 100, runs: int = 3) -> float:
    """`kind` over a plain append (ratio of medians), measured `runs` times afresh; the middle
    one (fsync times swing with the machine's load)."""
    def once() -> float:
        lat = measure_latencies(samples, kinds=(APPEND, kind))
        med = lat.groupby("kind", observed=True)["latency_us"].median()
        return float(med[kind] / med[APPEND])
    ratios = sorted(once() for _ in range(runs))
    return ratios[len(ratios) // 2]


def fresh_fsync_ratio(samples: int = 100, runs: int = 3) -> float:
    """append + fsync over a plain append, measured afresh (see `fresh_ratio`)."""
    return fresh_ratio(APPEND_FSYNC, samples, runs)


@exercise("6.2", "Predict, then run: on this machine, how many times slower is one snapshot "
          "written the lab's way (temp file + fsync + rename + directory fsync) than one plain "
          "append (the ratio of the medians)? The source text never timed this kind of write. "
          "Judged by order of magnitude: the check measures afresh and accepts a prediction "
          "within a factor of 10.",
          "A plain append only copies the bytes into the page cache. The lab's snapshot creates a "
          "file, writes the whole state, waits for the device twice (the file's fsync, then the "
          "directory's) and renames: two waits for the device plus metadata work. Where an fsync "
          "costs tens of appends, this costs about twice that or more; a disk that really "
          "flushes, a virtual disk or a busy machine makes it larger. "
          "`durability.fsync_ratio(lat)` gives the append + fsync ratio from the latency table.")
def _ex_6_2(answer):
    try:
        value = float(answer)
    except (TypeError, ValueError):
        value = answer
    shown = answer if isinstance(answer, (int, float)) and not isinstance(answer, bool) else value
    c = assess(shown, round(fresh_ratio(SNAPSHOT_DIR_FSYNC), 1), tolerance=MAGNITUDE,
               what="the lab's snapshot over a plain append, measured afresh", unit="times")
    return c.reply()


def verdicts_changed_by_fsync() -> list[str]:
    """The crash points whose verdict differs between the two fsync policies, under kill -9 (the
    sweeps `kill9_sweeps` ran, from the lab's results cache)."""
    never, always = (results.sweep_once(POLICIES[name]) for name in ("fsync never", "fsync always"))
    return [a.crash_point for a, b in zip(never, always) if a.verdict != b.verdict]


@exercise("6.3", "Predict, then run: the source text's log mode (no fsync) recovered at 54 of 54 "
          "kill -9 points. Swept again with fsync after every checkpoint write, at how many of "
          "the 54 crash points is the verdict different?",
          "0. A kill -9 ends the process and leaves the kernel alone, so every record the worker "
          "had handed over with write() is in the page cache and is written out anyway. fsync "
          "only changes what survives a kernel crash or a power cut, which no process kill can "
          "show. A sweep of kills can never catch a missing fsync.")
def _ex_6_3(answer):
    changed = verdicts_changed_by_fsync()
    c = assess(answer, len(changed), what="crash points whose verdict changes")
    return c.reply(hint=" Where is a record the worker wrote, when "
                   "the process is killed: in the process, or in the kernel?")


#: Lesson 4's design without the key, with fsync on (statement Q6.1 and a claim).
NO_KEY_FSYNC = RunConfig(store="snapshot", intent=False, idempotency_key=False, fsync="always")


def duplicates_with_fsync(config: RunConfig = NO_KEY_FSYNC) -> list[str]:
    """The crash points of `config` (every one killed and resumed) that file a report twice."""
    return [r.crash_point for r in results.sweep_once(config) if r.duplicate_reports]


# --- common wrong statements --------------------------------------------------------------------

@statement("Q6.1", "With fsync on, a kill -9 can no longer make the worker lose or duplicate "
           "anything.",
           "False, both ways. What kill -9 can break, fsync does not fix: the danger window "
           "duplicates a report with fsync on as without it. And what fsync protects against, "
           "kill -9 cannot show: every record a killed process handed to the kernel survives "
           "anyway, so the log without fsync recovers just as well. fsync is for power cuts and "
           "kernel crashes.")
def _q6_1():
    changed = verdicts_changed_by_fsync()
    n = len(results.sweep_once(POLICIES["fsync never"]))
    twice = duplicates_with_fsync()
    return Measured(not twice,
                    f"Measured: with fsync always and no key, {len(twice)} crash points still "
                    f"file a report twice ({', '.join(twice[:2])}, ...); in the log mode the "
                    f"verdict was the same with and without fsync at {n - len(changed)} of {n} "
                    "crash points.")


@statement("Q6.2", "On a virtual machine, fsync returning means the data is on a physical disk.",
           "False. A virtual machine's disk is emulated by its hypervisor: the guest's fsync "
           "(and the cache flush it sends) ends at the virtual device, and what the host does "
           "with it is the host's setting. Firecracker's default block cache mode, for example, "
           "acknowledges a flush without flushing anything on the host. fsync returning proves "
           "only that the device below said yes: on a laptop, the drive; in a VM, the "
           "hypervisor.")
def _q6_2():
    lat = measure_latencies(50, kinds=(APPEND_FSYNC,))
    median = float(lat["latency_us"].median())
    return Measured(False,
                    f"Measured just now: the writes went to {lat.attrs['storage'].describe()}. "
                    f"An append + fsync returned after a median of {us(median)}: that is how long "
                    "the device below this system took to say yes. Where the bytes were at that "
                    "moment, the guest cannot see; when the device is a virtual disk, the host's "
                    "cache setting decides.")


@results.memoized
def power_cut_after_append():
    """A log line appended to a file already durable on disk, with and without fsync, each
    journaled and put through the power-loss simulation: what the file can hold after a power
    cut right after the append returned."""
    import pandas as pd

    from ...instruments.journal import JournalingFiles
    from ...powerloss import crash_states

    first = LINE.replace(b"7", b"6")
    rows = []
    for name, policy in (("write(), no fsync (what flush() does)", "never"),
                         ("write() + fsync", "always")):
        ops: list[dict] = []
        with tempfile.TemporaryDirectory(prefix="bughunt-append-") as tmp:
            path = Path(tmp) / "line.txt"
            durable = Door("always", files=JournalingFiles(ops.append))
            fd = durable.open_append(path)
            durable.append(fd, first)
            durable.close(fd)
            door = Door(policy, files=JournalingFiles(ops.append))
            fd = door.open_append(path)
            door.append(fd, LINE)
            door.close(fd)
        after = [s for s in crash_states(ops, samples_per_cut=16, dedupe=False)
                 if s.cut == len(ops)]
        kept = sum(s.files.get("line.txt") == first + LINE for s in after)
        rows.append({"append": name, "disk states": len(after), "line whole": kept,
                     "line missing or torn": len(after) - kept})
    return pd.DataFrame(rows).set_index("append")


@statement("Q6.3", "Once flush() has returned, the line survives a power cut.",
           "False. flush() hands the bytes to the kernel with write(): they are in the page "
           "cache, which survives kill -9 and dies with the machine. Until an fsync, the kernel "
           "may or may not have written them out when the power goes: the line may be there, "
           "missing, or torn.")
def _q6_3():
    t = power_cut_after_append()
    unsynced, synced = t.iloc[0], t.iloc[1]
    return Measured(int(unsynced["line missing or torn"]) == 0,
                    "Measured on simulated power cuts right after the append returned (lesson "
                    "8's simulation, from a journal of the lab's own writes): without fsync, "
                    f"{unsynced['line missing or torn']} of {unsynced['disk states']} disk states "
                    f"lose the line or hold half of it; with fsync, "
                    f"{synced['line missing or torn']} of {synced['disk states']}.")


# --- what the lesson says its run found (each sentence checked against that run) -------------

CLAIMS = Claims(6)


def _bytes_left(case: str) -> int:
    return int(buffer_table().df.loc[case, "bytes on disk after kill -9"])


@CLAIMS.claim("Without `flush()` {write} of the {line} bytes were on disk after the kill: they "
              "were still inside the process. `flush()` handed them to the kernel with one "
              "`write()`: {flush} bytes survived; `os.write()` on a raw descriptor, with no "
              "Python buffer at all, {os} (which is why the lab's I/O door, `bughunt/diskio.py`, "
              "writes that way); with an fsync as well, {fsync}, the same as `flush()` alone.")
def the_buffer_dies_with_the_process():
    got = {k: _bytes_left(case) for k, (case, _, _) in zip(("write", "flush", "os", "fsync"),
                                                      BUFFER_CASES)}
    return (got["write"] == 0 and got["flush"] == got["os"] == got["fsync"] == len(LINE),
            {**got, "line": len(LINE)})


@CLAIMS.claim("With {lines} lines and no flush, {whole} whole lines ({bytes} of {written} bytes) "
              "survived: the buffer hands itself to the kernel each time it fills, so the lines "
              "before its last automatic write survive and the rest are lost. An unflushed log "
              "keeps an arbitrary prefix{cut}.")
def an_unflushed_log_keeps_a_prefix():
    row = buffer_table().df.loc[BUFFER_CASES[-1][0]]
    on, written = int(row["bytes on disk after kill -9"]), int(row["bytes written"])
    whole = int(row["whole lines on disk"])
    cut = ("" if on == whole * len(LINE) else
           f", here cut inside a line ({on - whole * len(LINE)} bytes of the next one): a torn "
           "line, lesson 5")
    return (0 < on < written and bool(row["intact"]) == (on == whole * len(LINE)),
            {"lines": int(row["lines written"]), "whole": whole, "bytes": on,
             "written": written, "cut": cut})


@CLAIMS.claim("Both sweeps recovered correctly at {never} and {always} of {points} crash points "
              "(the source text, without fsync: {lesson}). Point by point, the verdict, the "
              "redone calls, the replayed events, the tracker and the findings in memory were "
              "the same under both policies at {same} of {points}.")
def fsync_changes_nothing_under_kill9():
    df = lesson_sweeps()
    never, always = (df[df["fsync"] == n].set_index("index") for n in POLICIES)
    cols = ["verdict", "redone_model_calls", "replayed_events", "tracker_pages",
            "memory_findings"]
    same = sum(all(never[c].loc[i] == always[c].loc[i] for c in cols) for i in never.index)
    ok = lambda d: int((d["verdict"] == "correct").sum())   # noqa: E731
    return (same == len(never) and ok(never) == ok(always) == len(never),
            {"never": ok(never), "always": ok(always), "points": len(never), "same": same,
             "lesson": LESSON_FIGURES["log_runs_correct"]})


@results.memoized
def fsync_where_sweeps_run(samples: int = 50) -> dict:
    """Append + fsync timed in the directory the sweeps keep their runs in (run once per
    kernel): on a file system in memory, fsync has no device to wait for."""
    where = Path(ram_dir() or tempfile.gettempdir())
    lat = measure_latencies(samples, kinds=(APPEND_FSYNC,), base_dir=where)
    return {"file_system": file_system(where),
            "median_us": float(lat["latency_us"].median())}


@CLAIMS.claim("The two sweeps kept their run directories on {fs}, {meaning}: there one append + "
              "fsync took a median {fsync} (section 4 times it where it waits for the device). "
              "Their wall times, {always} s with fsync and {never} s without, measure process "
              "start-ups and the machine's load, not fsync.")
def where_the_sweeps_ran():
    df = lesson_sweeps()
    fs = df.attrs["sweep_file_system"]
    t = df.attrs["elapsed_s"]
    here = fsync_where_sweeps_run()
    in_memory = fs in IN_MEMORY
    meaning = ("a file system in memory, where fsync has no device to wait for" if in_memory
               else "a file system on a device, where each fsync waits for it")
    # in memory an fsync is a system call that returns at once: far below any device's wait
    holds = here["file_system"] == fs and (here["median_us"] < 100 if in_memory else True)
    return holds, {"fs": f"`{fs}`", "meaning": meaning, "fsync": us(here["median_us"]),
                   "always": f"{t['fsync always']:.1f}", "never": f"{t['fsync never']:.1f}"}


@CLAIMS.claim("Lesson 4's design without the key, with fsync always: {n} of {points} crash "
              "points still filed a report twice ({names}). fsync makes the checkpoint durable; "
              "it does not move it before the report.")
def fsync_does_not_close_the_window():
    records = results.sweep_once(NO_KEY_FSYNC)
    twice = [f"`{r.crash_point}`" for r in records if r.duplicate_reports]
    return bool(twice), {"n": len(twice), "points": len(records), "names": twice}


@CLAIMS.claim("Here one append + fsync took {ratio} times as long as a plain append (medians "
              "{fsync} and {append}): every write with an fsync waits for the device.")
def fsync_costs_here():
    lat = lesson_latencies()
    med = lat.groupby("kind", observed=True)["latency_us"].median()
    ratio = float(med[APPEND_FSYNC] / med[APPEND])
    return ratio > 1, {"ratio": f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.1f}",
                       "fsync": us(float(med[APPEND_FSYNC])), "append": us(float(med[APPEND]))}


@CLAIMS.claim("On simulated power cuts right after the append returned, without fsync {lost} of "
              "{states} disk states lost the line or held half of it; with fsync, {synced_lost} "
              "of {synced_states}.")
def a_power_cut_takes_the_unsynced_line():
    t = power_cut_after_append()
    unsynced, synced = t.iloc[0], t.iloc[1]
    return (int(unsynced["line missing or torn"]) > 0 and int(synced["line missing or torn"]) == 0,
            {"lost": int(unsynced["line missing or torn"]), "states": int(unsynced["disk states"]),
             "synced_lost": int(synced["line missing or torn"]),
             "synced_states": int(synced["disk states"])})


@results.memoized
def lesson_latencies(samples: int = 300):
    """`measure_latencies` for the lesson's table and figure, run once per kernel."""
    return measure_latencies(samples)


# --- practice: a way of writing, or a design, the lesson did not run -----------------------------

#: Line counts the buffer questions draw from (the lesson ran 1 and 3000).
PRACTICE_LINES = (50, 400, 700, 1000, 1365, 2000, 2500, 4000, 5000, 7000, 10000)


def practice_problem(seed: int) -> Problem:
    """Either many unflushed lines killed by kill -9 (a count the lesson did not run: how many
    whole lines survive), or a design with fsync on a site the lesson did not run, killed at one
    point of a bug page (is a report filed twice?)."""
    from ...experiment import crash_points

    rng = drawn(seed, 6)
    if rng.random() < 0.4:
        lines = rng.choice(PRACTICE_LINES)
        setting = (f"A program writes the 12-byte line {lines} times with f.write() into a file "
                   "opened with open() (default buffering), never calls flush(), and is killed "
                   "by kill -9 right after the last write.")

        def measure() -> Answer:
            r = run_killed("write", lines)
            return Answer(r["whole lines on disk"], f"{r['bytes on disk']} of "
                          f"{r['bytes written']} bytes were on disk: {r['whole lines on disk']} "
                          "whole lines.")
        return Problem(6, seed, setting, "How many whole lines are in the file afterwards?",
                       NUMBER, measure, "Python's buffer holds 8192 bytes; what has it handed "
                       "to the kernel when the process dies?", unit="lines",
                       drawn={"kind": "buffer", "lines": lines})
    store = rng.choice(["snapshot", "log"])
    config = RunConfig(store=store, intent=rng.choice([True, False]),
                       idempotency_key=rng.choice([True, False]), fsync="always",
                       pages=rng.choice([n for n in range(4, 16) if n != 12]))
    bugs = Site.load(config.pages).bug_pages
    page = rng.choice(bugs)
    name = rng.choice([p.name for p in crash_points(config) if p.page == page])
    setting = ({"snapshot": "A snapshot after every page", "log": "The event log"}[store]
               + f", intents {'on' if config.intent else 'off'}, idempotency key "
               f"{'on' if config.idempotency_key else 'off'}, fsync after every checkpoint "
               f"write, on a site of {config.pages} pages (bugs on "
               + (f"page {bugs[0]}" if len(bugs) == 1 else
                  "pages " + ", ".join(map(str, bugs[:-1])) + f" and {bugs[-1]}") + ").")

    def measure() -> Answer:
        r = results.point(config, name)
        return Answer(bool(r.duplicate_reports), f"killed at {name} and resumed: the tracker "
                      f"holds pages {r.tracker_pages} ({r.duplicate_reports} filed twice).")
    return Problem(6, seed, setting, f"The worker is killed by kill -9 at `{name}` and resumed. "
                   "Does the tracker end with a report filed twice?", YES_NO, measure,
                   "Is the report in the tracker at that point while the checkpoint (durable or "
                   "not) says the page is not done, and does the key make a second filing "
                   "harmless?", drawn={"kind": "point", "config": config, "point": name})


#: The transfer question: drawn by the generator (`python -m bughunt practice --lesson 6`).
TRANSFER_SEED = 5
TRANSFER = as_exercise("6.4", practice_problem(TRANSFER_SEED), __name__)


LESSON = Lesson(
    number=6,
    notebook="06_kill9_vs_power_loss",
    title="kill -9 is not power loss: what do flush and fsync buy, and what do they cost?",
    short_title="kill -9 vs power loss",
    question="What do flush and fsync each buy, and cost?",
    teaches="user-space buffer vs page cache vs fsync, write latency with and without fsync, "
            "what this machine's storage is",
    objectives=(
        "name the three places a written byte can be (process buffer, page cache, disk) and "
        "which crash each one survives;",
        "predict, for a given way of writing, whether a line survives `kill -9`, and explain "
        "why a kill -9 sweep can never catch a missing fsync;",
        "estimate what an fsync costs beside a plain append on a machine, and say what an "
        "fsync timing cannot prove (a drive's cache, a virtual disk);",
        "tell apart what fsync fixes (power cuts, kernel crashes) from what it does not (the "
        "danger window, lesson 4).",
    ),
    prerequisites="Lessons 1 to 5; files and `open()` in Python. Words are in the "
                  "[glossary](glossary.md).",
    panel=panel,
    exercises=defined_in(__name__),
    claims=CLAIMS,
    practice=practice_problem,
)

