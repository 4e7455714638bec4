"""How the lab's figures look: one palette, one way to make a figure, one way to mark the source text's figure.

Figures are built with `matplotlib.figure.Figure`, never pyplot, so nothing is drawn twice and no
global state leaks between cells or widget callbacks. A notebook cell that ends with a Figure shows
it (the inline backend renders it as PNG); a panel turns it into PNG bytes with `png()`.
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure

#: Okabe-Ito: distinguishable with the common kinds of colour blindness. Always pair a colour with
#: a text label (legend or direct label), never colour alone.
COLORS = {
    "black": "#000000", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "red": "#D55E00", "purple": "#CC79A7",
    "grey": "#999999",
}
SERIES = [COLORS[c] for c in ("blue", "orange", "green", "red", "purple", "sky", "yellow")]
#: The word prose uses for each colour, so that a word names the colour a reader sees: the palette's
#: "red" is Okabe-Ito's vermillion, a red-orange easily taken for orange, and its "purple" is a
#: reddish purple that reads as pink. Notebooks say "vermillion" and "pink", never "red" or "purple"
#: (tests/test_notebooks.py checks every notebook's colour words against this table).
COLOR_WORDS = {
    "black": "black", "orange": "orange", "sky": "sky blue", "green": "green",
    "yellow": "yellow", "blue": "blue", "red": "vermillion", "purple": "pink", "grey": "grey",
}
LESSON_STYLE = {"color": COLORS["grey"], "linestyle": "--", "linewidth": 1.5}

#: Verdicts of a crash run, their colours and hatches (so they read in grey print too).
VERDICT_STYLE = {
    "correct": (COLORS["green"], ""),
    "rebuild fails": (COLORS["orange"], "//"),
    "duplicate": (COLORS["red"], "xx"),
    "tracker disagrees": (COLORS["yellow"], "\\\\"),
    "lost": (COLORS["purple"], ".."),
    "error": (COLORS["black"], ""),
}


def new_figure(width: float = 9, height: float = 3.6, nrows: int = 1, ncols: int = 1, **kw):
    """A Figure with constrained layout and its axes."""
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(nrows, ncols, **kw)
    return fig, axes


def lesson_line(ax, y: float, label: str, *, axis: str = "h") -> None:
    """The source text's own figure as a dashed reference line, labelled in the legend."""
    if axis == "h":
        ax.axhline(y, label=label, **LESSON_STYLE)
    else:
        ax.axvline(y, label=label, **LESSON_STYLE)


def page_ticks(ax, df, *, every_page: bool = True) -> None:
    """Label the x axis of a per-crash-point plot with the page each point belongs to."""
    firsts = df.groupby("page")["index"].min()
    ax.set_xticks(list(firsts.values), [f"p{p}" for p in firsts.index] if every_page else None)
    ax.set_xlim(0.3, df["index"].max() + 0.7)


def png(fig: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes, for an ipywidgets Output or an Image."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
