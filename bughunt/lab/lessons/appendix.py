"""Appendix: what durability costs on this machine, against the floor (from `bughunt.bench`)."""

from __future__ import annotations

from matplotlib.ticker import FuncFormatter

from ... import bench
from .. import reference
from ..style import COLORS, new_figure
from ..registry import Lesson

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


def write_cost_table(n: int = 400, fsync_n: int = 60):
    """Each checkpoint write against the floor, measured now: a DataFrame (timings vary)."""
    import pandas as pd

    start = len(bench.ROWS)
    bench.write_costs(n=n, fsync_n=fsync_n)
    return pd.DataFrame(bench.take_rows(start))


def recovery(sizes=(100, 1_000, 10_000), every: int = 100):
    import pandas as pd

    start = len(bench.ROWS)
    bench.recovery_scaling(sizes, every=every)
    df = pd.DataFrame(bench.take_rows(start))
    runs = df[~df.case.str.startswith("full replay")].copy()
    runs["design"] = runs.case.str.split(",").str[0]
    runs["pages"] = runs.case.str.extract(r"(\d+) pages")[0].astype(int)
    runs["peak MiB"] = runs.note.str.extract(r"peak memory ([\d.]+)")[0].astype(float)
    return runs[["design", "pages", "value", "peak MiB"]].rename(columns={"value": "recovery ms"})


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
    right.set_ylim(bottom=0)
    right.set_title("Peak memory of the resuming worker")
    return fig


LESSON = Lesson(
    number=99,
    notebook="99_appendix",
    kind="appendix",
    title="What durability costs on this machine",
    short_title="what durability costs",
    question="Each checkpoint write against the floor; recovery against log length",
    teaches="what the lab costs (each checkpoint write against the least code doing the same "
            "work; recovery against log length), and the public sources",
)

