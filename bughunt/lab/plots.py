"""Figures (and one small table) shared by several lessons. Each figure function takes a DataFrame
and returns a matplotlib Figure."""

from __future__ import annotations

from matplotlib.patches import Patch

from ..config import RunConfig
from ..experiment import VERDICTS
from .style import COLORS, VERDICT_STYLE, lesson_line, new_figure, page_ticks

#: Axis labels for the per-crash-point metrics. Each is a count of the thing it names, so the label
#: is its own unit: "redone model calls", not "redone model calls (calls)".
METRIC_LABELS = {
    "redone_model_calls": "redone model calls",
    "replayed_events": "replayed events",
    "duplicate_reports": "duplicate reports",
    "lost_reports": "lost reports",
    "torn_lines_skipped": "torn lines skipped at resume",
}


def describe_config(config: RunConfig) -> str:
    """A short, human description of a configuration, for titles."""
    if config.store == "none":
        design = "no checkpoint"
    elif config.store == "snapshot":
        design = "snapshot per " + ("operation" if config.granularity == "op" else "page")
    else:
        design = ("event log" if not config.snapshot_every
                  else f"log + snapshot every {config.snapshot_every}")
    bits = [design, config.write_mode, f"fsync {config.fsync}",
            f"key {'on' if config.idempotency_key else 'off'}",
            f"intent {'on' if config.intent else 'off'}"]
    if config.intent:
        bits.append(f"pending {config.pending}")
    return ", ".join(bits)


def explain_average(df, metric: str, what: str) -> str:
    """Where an average over crash points comes from: the measured total over the points."""
    lines = []
    width = max(len(str(name)) for name in df["design"].unique())
    for name, d in df.groupby("design", sort=False):
        total, n = int(d[metric].sum()), len(d)
        lines.append(f"{name:>{width}}: {total} {what} over {n} crash points = "
                     f"{total / n:.4f} -> {total / n:.2f}")
    return "\n".join(lines)


def verdict_row(ax, d, y: float, *, width: float = 0.9) -> None:
    """One cell per crash point of `d`, centred at height `y`, coloured and hatched by verdict."""
    for _, r in d.iterrows():
        color, hatch = VERDICT_STYLE[r["verdict"]]
        ax.bar(r["index"], 0.8, bottom=y - 0.4, width=width, color=color, hatch=hatch,
               edgecolor="white", linewidth=0.5)


def verdict_handles(verdicts) -> list:
    """Legend entries for the verdicts that occur, worst last, in the lab's fixed order."""
    present = set(verdicts)
    return [Patch(facecolor=VERDICT_STYLE[v][0], hatch=VERDICT_STYLE[v][1], label=v)
            for v in VERDICTS if v in present]


def plot_points(df, config: RunConfig, highlight: str | None = None, *,
                metric: str = "redone_model_calls", reference: tuple[float, str] | None = None):
    """One bar per crash point: the metric's height, the verdict's colour; the chosen point marked."""
    fig, ax = new_figure(10, 3.8)
    verdicts = df["verdict"]
    colors = [VERDICT_STYLE[v][0] for v in verdicts]
    hatches = [VERDICT_STYLE[v][1] for v in verdicts]
    heights = df[metric].fillna(0)
    bars = ax.bar(df["index"], heights, color=colors, edgecolor="white", linewidth=0.5)
    for bar, hatch in zip(bars, hatches):
        bar.set_hatch(hatch)
    # A zero is a marker on the axis in its verdict's colour, not a stub that reads as 0.05.
    zero = (heights <= 0).to_numpy()
    if zero.any():
        ax.scatter(df["index"][zero], [0] * int(zero.sum()), s=14, marker="o", clip_on=False,
                   zorder=3, color=[c for c, z in zip(colors, zero) if z], linewidths=0)
    avg = df[metric].mean()
    ax.axhline(avg, color=COLORS["blue"], linewidth=1.2, label=f"this machine: avg {avg:.2f}")
    if reference:
        lesson_line(ax, reference[0], f"source text: avg {reference[0]:g} ({reference[1]})")
    if highlight is not None and highlight in set(df["crash_point"]):
        row = df["crash_point"] == highlight
        x, h = int(df["index"][row].iloc[0]), float(heights[row].iloc[0])
        ax.annotate(highlight, (x, max(h, 0.0)),
                    xytext=(0, 14), textcoords="offset points", ha="center",
                    arrowprops={"arrowstyle": "->", "color": COLORS["black"]})
    page_ticks(ax, df)
    ax.set_xlabel("crash point (grouped by page; p3 = first point of page 3)")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_title(f"{METRIC_LABELS.get(metric, metric).capitalize()} per crash point: "
                 f"{describe_config(config)}", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles=handles + verdict_handles(verdicts), fontsize=8, loc="upper left", ncols=2)
    ax.set_ylim(0, max(1.0, float(heights.max())) * 1.35)
    return fig
