"""Appendix: what durability costs on this machine, against the floor (from `bughunt.bench`)."""

from __future__ import annotations

from matplotlib.ticker import FuncFormatter

from ... import bench
from .. import reference, results
from ..claims import Claims, Invariants
from ..style import COLORS, new_figure
from ..registry import Lesson
from ..views import Table

#: Which of lesson 6's kinds of write each of the bench's write rows is. The source text's figures
#: are looked up by kind (`bughunt.lab.reference`), so a figure lands on the row of the kind it
#: measured or on none: the source text's snapshot had no directory fsync, and no row here is that.
BENCH_KINDS = {
    "log append (flush only)": reference.APPEND,
    "log append + fsync": reference.APPEND_FSYNC,
    "snapshot: tmp + rename, no fsync": reference.SNAPSHOT_NO_FSYNC,
    "snapshot: tmp + fsync + rename + dir fsync": reference.SNAPSHOT_DIR_FSYNC,
}


def source_medians_for_bench(cases) -> dict[str, float]:
    """The source text's median in µs for each bench row of a kind it measured."""
    return {c: f.value * 1000 for c in cases
            if c in BENCH_KINDS and (f := reference.write_median(BENCH_KINDS[c])) is not None}


def _sig(value, digits: int = 3):
    """`value` to `digits` significant figures (None and NaN stay as they are)."""
    import math

    if value is None or (isinstance(value, float) and math.isnan(value)) or value == 0:
        return value
    return round(float(value), digits - 1 - int(math.floor(math.log10(abs(float(value))))))


@results.memoized
def measured_write_costs(n: int = 400, fsync_n: int = 60):
    """Each checkpoint write against the floor, measured now (once per kernel): the bench's rows
    as a DataFrame, unrounded (timings vary)."""
    import pandas as pd

    start = len(bench.ROWS)
    bench.write_costs(n=n, fsync_n=fsync_n)
    return pd.DataFrame(bench.take_rows(start))


def _ratio_is_value_over_floor(df) -> list[str]:
    """Where a row has a floor, its ratio is its time over the floor's (to 1 %)."""
    bad = []
    for i, r in df.iterrows():
        floor, ratio = r["floor (median)"], r["ratio to the floor"]
        if floor == floor and floor and ratio == ratio:         # not NaN
            if abs(r["time (median)"] / floor - ratio) > 0.01 * ratio + 0.01:
                bad.append(f"row {i!r}: ratio {ratio} but {r['time (median)']} / {floor} = "
                           f"{r['time (median)'] / floor:.2f}")
    return bad


WRITE_INVARIANTS = Invariants(may_be_empty=(), extra=(_ratio_is_value_over_floor,))


def write_cost_table(df=None) -> Table:
    """The write costs as a learner reads them: times to 3 significant figures, the ratio to 2
    decimals, numbered from 1."""
    df = measured_write_costs() if df is None else df
    shown = df[["section", "case", "value", "unit", "reference", "ratio"]].rename(columns={
        "value": "time (median)", "reference": "floor (median)", "ratio": "ratio to the floor"})
    shown = shown.assign(**{"time (median)": shown["time (median)"].map(_sig),
                            "floor (median)": shown["floor (median)"].map(_sig)})
    shown.index = range(1, len(shown) + 1)
    return Table(shown, "one checkpoint write against the floor", WRITE_INVARIANTS,
                 averages=("ratio to the floor",))


@results.memoized
def recovery_runs(sizes=(100, 1_000, 10_000), every: int = 100):
    """A synthetic finished run of each size resumed by a real worker, pure log and log +
    snapshots (once per kernel): design, pages, recovery ms, peak MiB."""
    import pandas as pd

    start = len(bench.ROWS)
    bench.recovery_scaling(sizes, every=every)
    df = pd.DataFrame(bench.take_rows(start))
    runs = df[~df.case.str.startswith("full replay")].copy()
    runs["design"] = runs.case.str.split(",").str[0]
    runs["pages"] = runs.case.str.extract(r"(\d+) pages")[0].astype(int)
    runs["peak MiB"] = runs.note.str.extract(r"peak memory ([\d.]+)")[0].astype(float)
    runs = runs[["design", "pages", "value", "peak MiB"]].rename(columns={"value": "recovery ms"})
    return runs.reset_index(drop=True)


def recovery(sizes=(100, 1_000, 10_000), every: int = 100):
    """`recovery_runs` (the numbers, for code and the figure)."""
    return recovery_runs(sizes, every)


def recovery_table(runs=None) -> Table:
    """Recovery time and peak memory by design and log length, to 3 significant figures."""
    runs = recovery_runs() if runs is None else runs
    shown = runs.assign(**{"recovery ms": runs["recovery ms"].map(_sig)})
    shown.index = range(1, len(shown) + 1)
    return Table(shown, "recovery against log length", Invariants(counts=("pages",)))


def plot_write_costs(df):
    """Ours against the floor for each checkpoint write, log scale; the source text's macOS
    medians marked on the rows of the same kind of write."""
    w = df[df.section == "write"]
    fig, ax = new_figure(10, 3.8)
    y = range(len(w))
    ax.barh([i + 0.2 for i in y], w.value, height=0.4, color=COLORS["blue"],
            label="through the lab's I/O door")
    ax.barh([i - 0.2 for i in y], w.reference, height=0.4, color=COLORS["grey"],
            label="the floor: least code, same durable work")
    marks = source_medians_for_bench(list(w.case))
    labelled = False
    for i, (_, r) in enumerate(w.iterrows()):
        ax.text(max(r.value, r.reference) * 1.15, i, f"{r.ratio:.2f}x the floor", va="center",
                fontsize=8)
        if r.case in marks:
            ax.scatter([marks[r.case]], [i], marker="D", color=COLORS["grey"],
                       edgecolors=COLORS["black"], s=50, zorder=3,
                       label=None if labelled else "source text's macOS median (same kind)")
            labelled = True
    ax.set_yticks(list(y), list(w.case), fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("time per checkpoint write (µs, log scale; median)")
    ax.set_title("What one checkpoint write costs here, against the floor")
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_xlim(right=ax.get_xlim()[1] * 8)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,g}"))
    return fig


def plot_recovery(runs):
    """Recovery time and peak memory against log length, pure log vs log + snapshots."""
    fig, (left, right) = new_figure(10, 3.6, nrows=1, ncols=2)
    for (design, d), color, marker in zip(runs.groupby("design", sort=False),
                                          (COLORS["red"], COLORS["blue"]), "os"):
        left.plot(d.pages, d["recovery ms"], marker=marker, color=color, label=design)
        right.plot(d.pages, d["peak MiB"], marker=marker, color=color, label=design)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xlabel("pages in the run (log scale; 1.25 events per page)")
        ax.legend(fontsize=8)
    left.set_yscale("log")
    left.set_ylabel("recovery time (ms, log scale)")
    left.set_title("Recovery: full replay grows with the log")
    right.set_ylabel("peak memory of the worker (MiB)")
    low, high = runs["peak MiB"].min(), runs["peak MiB"].max()
    right.set_ylim(max(0, low - 1.5), high + 1.5)        # room above the highest point
    right.set_title("Peak memory of the resuming worker")
    return fig


# --- what the appendix says its run found (each sentence checked against that run) -----------
#
# Every figure here is a timing of this machine: the sentences give the measured values, and their
# checks ask only what holds however loaded the machine is (fsync costs more than not syncing, a
# longer log takes longer to replay). The notebook shows them in cells whose output is not
# compared; `python -m bughunt claims --lesson 99` checks them on every run.

CLAIMS = Claims(99)


def _time(case: str) -> float:
    df = measured_write_costs()
    return float(df.loc[df.case == case, "value"].iloc[0])


def _floor_ratio(case: str) -> float:
    df = measured_write_costs()
    return float(df.loc[df.case == case, "ratio"].iloc[0])


def _x(a: float, b: float) -> str:
    return f"{a / b:.1f}"


@CLAIMS.claim("On this run fsync multiplied a log append's time by {append} ({a0} → {a1} µs), a "
              "snapshot's by {snap} ({s0} → {s1} µs), and SQLite's `FULL` cost {sqlite} times "
              "`NORMAL` ({q0} → {q1} µs).")
def fsync_multiplies_each_write():
    a0, a1 = _time("log append (flush only)"), _time("log append + fsync")
    s0, s1 = (_time("snapshot: tmp + rename, no fsync"),
              _time("snapshot: tmp + fsync + rename + dir fsync"))
    q0, q1 = (_time("SQLite WAL, synchronous NORMAL (lesson 7)"),
              _time("SQLite WAL, synchronous FULL (lesson 7)"))
    return (a1 > a0 and s1 > s0 and q1 > q0,
            {"append": _x(a1, a0), "a0": _sig(a0), "a1": _sig(a1), "snap": _x(s1, s0),
             "s0": _sig(s0), "s1": _sig(s1), "sqlite": _x(q1, q0), "q0": _sig(q0),
             "q1": _sig(q1)})


@CLAIMS.claim("One `os.fsync` after a line took {fsync} µs, against {code} µs for serializing, "
              "checksumming and writing that line together: where fsync is involved, the code "
              "around it hardly matters.")
def fsync_dwarfs_the_code():
    fsync = _time("os.fsync after one line")
    code = sum(_time(c) for c in ("json.dumps of the record (the floor's serialization)",
                                  "zlib.crc32 of the record", "os.write of one line"))
    return fsync > code, {"fsync": _sig(fsync), "code": _sig(code)}


@CLAIMS.claim("Without fsync, a log append took {append} µs, and the lab's CRC-32 ({crc} µs) is a "
              "fraction of it.")
def crc_is_a_fraction_of_an_append():
    append, crc = _time("log append (flush only)"), _time("zlib.crc32 of the record")
    return crc < append, {"append": _sig(append), "crc": _sig(crc)}


@CLAIMS.claim("The task store with `synchronous=NORMAL` checks every record before it writes it "
              "and opens an explicit transaction: on this run it cost {ratio} times plain "
              "`sqlite3` doing the same statement ({ours} against {floor} µs). With `FULL` the "
              "ratio was {full}: there the fsync is most of the time.")
def task_store_costs_more_than_plain_sqlite():
    df = measured_write_costs()
    row = df[df.case == "SQLite WAL, synchronous NORMAL (lesson 7)"].iloc[0]
    ratio = float(row["ratio"])
    return (ratio > 1, {"ratio": ratio, "ours": _sig(row["value"]),
                        "floor": _sig(row["reference"]),
                        "full": _floor_ratio("SQLite WAL, synchronous FULL (lesson 7)")})


def _recovery(design: str):
    runs = recovery_runs()
    return runs[runs.design == design].sort_values("pages")


@CLAIMS.claim("A pure event log replays every event: its recovery took {x} times as long at "
              "{hi} pages as at {lo} ({t0} → {t1} ms).")
def full_replay_grows_with_the_log():
    d = _recovery("pure log")
    t0, t1 = float(d["recovery ms"].iloc[0]), float(d["recovery ms"].iloc[-1])
    return (t1 > 3 * t0, {"x": _x(t1, t0), "lo": int(d.pages.iloc[0]), "hi": int(d.pages.iloc[-1]),
                          "t0": _sig(t0), "t1": _sig(t1)})


@CLAIMS.claim("With a snapshot every 100 pages, recovery reads the snapshot and only the log "
              "after it: over the same range its time grew {y} times ({t0} → {t1} ms), slowly "
              "(the file is still read) where the pure log's grew {x} times.")
def snapshot_recovery_grows_slowly():
    d, full = _recovery("log + snapshot every 100"), _recovery("pure log")
    t0, t1 = float(d["recovery ms"].iloc[0]), float(d["recovery ms"].iloc[-1])
    f0, f1 = float(full["recovery ms"].iloc[0]), float(full["recovery ms"].iloc[-1])
    return (t1 / t0 < f1 / f0, {"y": _x(t1, t0), "t0": _sig(t0), "t1": _sig(t1),
                                "x": _x(f1, f0)})


@CLAIMS.claim("The resuming worker's peak memory at {hi} pages was {full} MiB replaying the whole "
              "log and {snap} MiB from a snapshot.")
def snapshot_bounds_memory():
    d, full = _recovery("log + snapshot every 100"), _recovery("pure log")
    snap, whole = float(d["peak MiB"].iloc[-1]), float(full["peak MiB"].iloc[-1])
    return snap <= whole + 0.2, {"hi": int(d.pages.iloc[-1]), "full": whole, "snap": snap}


# --- the public sources, gathered from every lesson's Further reading ---------------------------

def further_reading() -> str:
    """Every lesson's Further reading, as one list: each public source once, with the lessons
    that cite it (read from the notebook sources, so it never falls behind them)."""
    import re

    import jupytext

    from ..regen import NOTEBOOKS
    from ..registry import lessons

    cited: dict[str, tuple[str, list[str]]] = {}
    for lesson in lessons():
        if lesson.kind == "appendix":
            continue
        nb = jupytext.read(NOTEBOOKS / "src" / f"{lesson.notebook}.py")
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        part = text.split("## Further reading", 1)
        if len(part) < 2:
            continue
        section = re.split(r"\n## |\n---", part[1], maxsplit=1)[0]
        for bullet in re.split(r"\n(?=- )", section):
            flat = bullet.replace("\n", " ")
            for link in re.finditer(r"\[([^\]]+)\]\((https?://[^)\s]+)\)", flat):
                title, url = link.groups()
                if re.fullmatch(r"[\w.-]+\.\w+", title):      # a bare site name: the title
                    quoted = re.findall(r'"([^"]+)"', flat[:link.start()])   # quoted before it
                    title = quoted[-1] if quoted else title
                name, where = cited.setdefault(url, (title, []))
                if lesson.label not in where:
                    where.append(lesson.label)
    lines = [f"- [{title}]({url}) (lesson{'s' if len(where) > 1 else ''} {', '.join(where)})"
             for url, (title, where) in cited.items()]
    return "\n".join(lines)


class _Markdown:
    def __init__(self, text: str):
        self.text = text

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


def sources():
    """`further_reading()`, shown as Markdown."""
    return _Markdown(further_reading())


LESSON = Lesson(
    number=99,
    notebook="99_appendix",
    kind="appendix",
    title="What durability costs on this machine",
    short_title="what durability costs",
    question="Each checkpoint write against the floor; recovery against log length",
    teaches="what the lab costs (each checkpoint write against the least code doing the same "
            "work; recovery against log length), and the public sources",
    objectives=(
        "say what one checkpoint write costs on this machine, with and without fsync, and how "
        "close the lab's code comes to the least code doing the same durable work;",
        "say how recovery time and memory grow with the log, with and without snapshots;",
        "find the public source behind any lesson's outside fact.",
    ),
    prerequisites="Lessons 3, 6 and 7 (replay and snapshots, fsync, the task store).",
    runs="its measurements take about a minute",
    claims=CLAIMS,
)

