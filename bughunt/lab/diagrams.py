"""The lessons' conceptual diagrams, each a matplotlib Figure: where a byte can be (lesson 6), the
danger window on one bug page (lesson 4), the durable runtime's task states (lesson 7).

They are schematic, not measured, but each is drawn from the lab's own definitions (the
crash-point scheme, the store's statuses, the transitions the runtime's code makes), so a change
there shows here or fails the tests that check them.
"""

from __future__ import annotations

from .style import COLORS, new_figure

def _box(ax, x, y, w, h, text, color, *, fontsize=10, text_color="black", alpha=0.9):
    from matplotlib.patches import FancyBboxPatch
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=color, edgecolor=COLORS["black"], linewidth=1.2,
                                alpha=alpha))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, color=text_color)


def _arrow(ax, start, end, text="", *, rad=0.0, color=None, style="-|>", linestyle="-",
           text_offset=(0, 0.12), fontsize=9, ha="center"):
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle=style, color=color or COLORS["black"], lw=1.5,
                                linestyle=linestyle, shrinkA=4, shrinkB=4,
                                connectionstyle=f"arc3,rad={rad}"))
    if text:
        mx, my = (start[0] + end[0]) / 2 + text_offset[0], (start[1] + end[1]) / 2 + text_offset[1]
        ax.text(mx, my, text, ha=ha, va="center", fontsize=fontsize)


def _diagram_axes(ax, xlim, ylim):
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_axis_off()


#: Where a byte can be, and what survives each kind of crash: (place, what it is, kill -9, power).
BYTE_PLACES = (
    ("user-space buffer", "inside the process:\nPython's open() buffer", False, False),
    ("kernel page cache", "the operating system's\nmemory", True, False),
    ("disk", "the storage device", True, True),
)


def plot_byte_places(measured: dict | None = None):
    """The three places a byte can be on its way to the disk, the call that moves it on, and
    which crash each place survives. `measured`: bytes found on disk after a real kill -9,
    {"write": n, "flush": m} (lesson 6's buffer experiment), written under the figure."""
    fig, ax = new_figure(10, 4.6)
    xs = (1.5, 5.0, 8.5)
    fills = (COLORS["yellow"], COLORS["sky"], COLORS["green"])
    for x, (place, what, _kill, _power), fill in zip(xs, BYTE_PLACES, fills):
        _box(ax, x, 2.6, 2.4, 1.1, f"{place}\n({what})", fill, fontsize=9, alpha=0.55)
    ax.text(3.25, 4.35, "the program", ha="center", va="center", fontsize=9, fontweight="bold")
    _arrow(ax, (2.7, 4.2), (1.6, 3.2), "f.write(data)", text_offset=(-0.55, 0.1))
    _arrow(ax, (3.8, 4.2), (4.9, 3.2), "os.write(fd, data):\nno buffer", text_offset=(0.85, 0.1))
    _arrow(ax, (2.7, 2.6), (3.8, 2.6), "flush()", text_offset=(0, 0.22))
    _arrow(ax, (6.2, 2.7), (7.3, 2.7), "fsync()", text_offset=(0, 0.22))
    _arrow(ax, (6.2, 2.4), (7.3, 2.4), "kernel writeback,\nlater", linestyle="--",
           text_offset=(0, -0.45), fontsize=8)
    for row, (y, crash) in enumerate(((1.45, "kill -9"), (0.85, "power loss"))):
        ax.text(-0.15, y, f"after {crash}:", ha="left", va="center", fontsize=9,
                fontweight="bold")
        for x, place in zip(xs, BYTE_PLACES):
            survives = place[2 + row]
            ax.text(x, y, "✓ survives" if survives else "✗ lost", ha="center", va="center",
                    fontsize=10, color=COLORS["green"] if survives else COLORS["red"],
                    fontweight="bold")
    note = ("kill -9 ends the process, not the kernel: what reached the page cache is still written "
            "out. Only fsync makes it survive a power cut.")
    if measured:
        note += (f"\nMeasured here: after a real kill -9, {measured['write']} bytes on disk when "
                 f"the line stayed in the buffer, {measured['flush']} after flush().")
    ax.text(5.0, 0.15, note, ha="center", va="center", fontsize=8.5, wrap=True)
    ax.set_title("Three places a byte can be, and which crash each one survives")
    _diagram_axes(ax, (-0.2, 10.2), (-0.25, 4.6))
    return fig


def plot_danger_window(intent: bool = True, page: int = 3):
    """One bug page on a time line: model call, visit, (intent,) submit, commit; the crash points
    between them (the lesson's names); where the report is filed but the page not committed.
    Schematic: lesson 4 measures the real widths."""
    from ..crashpoints import scheme
    from ..world import Site

    site = Site.load(12)
    if page not in site.bug_pages:
        raise ValueError(f"page {page} has no bug (bug pages: {site.bug_pages})")
    points = [p for p in scheme(12, site.bug_pages, intent) if p.page == page]
    ops = ["model call", "visit", *(["intent"] if intent else []), "submit", "commit"]
    widths = {"model call": 2.4, "visit": 1.3, "intent": 1.1, "submit": 1.8, "commit": 2.0}
    colors = {"model call": COLORS["blue"], "visit": COLORS["sky"], "intent": COLORS["orange"],
              "submit": COLORS["purple"], "commit": COLORS["green"]}
    fig, ax = new_figure(10.5, 4.2)
    x, spans = 0.0, {}
    for op in ops:
        spans[op] = (x, x + widths[op])
        ax.add_patch(_rect(x, 2.0, widths[op], 0.7, colors[op]))
        ax.text(x + widths[op] / 2, 2.35, op, ha="center", va="center", fontsize=9)
        x += widths[op]
    end = x
    # The report is filed when the tracker's transaction commits, inside the submit.
    filed = spans["submit"][0] + 0.7 * widths["submit"]
    committed = spans["commit"][1]
    ax.axvspan(filed, committed, ymin=0.08, ymax=0.93, facecolor=COLORS["red"], alpha=0.18,
               hatch="xx", edgecolor=COLORS["red"], linewidth=0)
    ax.text((filed + committed) / 2, 3.85, "danger window:\nreport filed, page not committed",
            ha="center", va="center", fontsize=9, color=COLORS["black"], fontweight="bold")
    for y, lane, switch, before, after in (
            (3.15, "tracker has page's report", filed, "no", "yes"),
            (1.35, "checkpoint says page done", committed, "no", "yes")):
        ax.text(-0.1, y, lane, ha="right", va="center", fontsize=9)
        ax.plot([0, switch], [y, y], color=COLORS["grey"], linewidth=3)
        ax.plot([switch, end + 1.2], [y, y], color=COLORS["black"], linewidth=3)
        ax.text(switch / 2, y + 0.17, before, ha="center", fontsize=8)
        ax.text(switch + 0.4, y + 0.17, after, ha="center", fontsize=8)
    bounds = {"after_model_call": spans["model call"][1], "after_visit": spans["visit"][1],
              "after_submit": spans["submit"][1], "mid_commit": sum(spans["commit"]) / 2,
              "after_commit": spans["commit"][1]}
    if intent:
        bounds["after_intent"] = spans["intent"][1]
    for p in points:
        px = bounds[p.label]
        inside = filed <= px < committed
        ax.plot([px], [1.75], marker="v", markersize=9,
                color=COLORS["red"] if inside else COLORS["black"])
        ax.text(px, 0.95, p.name, rotation=35, ha="right", va="top", fontsize=8,
                fontweight="bold" if inside else "normal")
    ax.text(-3.2, 0.45, "▼ crash points, by the lab's names;\nbold: inside the window",
            ha="left", va="center", fontsize=8)
    ax.set_title(f"The danger window on page {page} (intents {'on' if intent else 'off'}): "
                 "schematic, not to scale")
    _diagram_axes(ax, (-3.3, end + 1.3), (-0.3, 4.3))
    return fig


def _rect(x, y, w, h, color):
    from matplotlib.patches import Rectangle
    return Rectangle((x, y), w, h, facecolor=color, edgecolor=COLORS["black"], alpha=0.55)


#: The durable runtime's task states and the transitions `bughunt.durable` implements:
#: (from, to, label, the code that makes it, a line of that code that shows it).
#: tests/test_diagrams.py checks each against the code it names.
TASK_TRANSITIONS = (
    (None, "pending", "submit / create", "bughunt.durable.store.Transaction.create",
     '"status": "pending"'),
    ("pending", "running", "dispatch", "bughunt.durable.runtime.Runtime._dispatch",
     '["status"] = "running"'),
    ("running", "running", "commit (enter the next step)", "bughunt.durable.runtime.Step.commit",
     '"status": "running"'),
    ("running", "sleeping", "sleep_until", "bughunt.durable.runtime.Step.sleep_until",
     '"status": "sleeping"'),
    ("sleeping", "running", "wake time reached", "bughunt.durable.runtime.Runtime._ready",
     'state["wake_at"] <= now'),
    ("running", "waiting", "wait_for /\nspawn_and_wait", "bughunt.durable.runtime.Step.wait_for",
     '"status": "waiting"'),
    ("waiting", "running", "awaited tasks\nterminal", "bughunt.durable.runtime.Runtime._ready",
     '["status"] == "terminal"'),
    ("running", "terminal", "finish / fail / fault", "bughunt.durable.runtime.Step._end",
     '"status": "terminal"'),
    ("running", "pending", "crash, then recover():\nrestarts + 1",
     "bughunt.durable.store.DurableStore.recover", '["status"] = "pending"'),
    ("running", "pending", "clean close():\nno restart counted",
     "bughunt.durable.store.DurableStore.close", '["status"] = "pending"'),
    ("pending", "terminal", "restart limit reached:\nfaulted (restart_limit)",
     "bughunt.durable.runtime.Runtime._dispatch", 'step.fault("restart_limit"'),
)


def resolve(dotted: str):
    """The object a dotted name names (`bughunt.durable.store.DurableStore.recover`)."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise LookupError(dotted)


def plot_task_states():
    """The task state machine of the durable runtime (lesson 7): its states, as the store's
    schema allows them, and every transition the runtime and the store implement."""
    from ..durable.store import STATUSES

    pos = {"pending": (1.0, 2.0), "running": (5.0, 2.0), "sleeping": (9.2, 3.4),
           "waiting": (9.2, 0.6), "terminal": (3.0, -0.9)}
    missing = set(STATUSES) ^ set(pos)
    if missing:
        raise ValueError(f"the store's statuses changed: {sorted(missing)}; update the diagram")
    fills = {"pending": COLORS["sky"], "running": COLORS["blue"], "sleeping": COLORS["yellow"],
             "waiting": COLORS["orange"], "terminal": COLORS["green"]}
    fig, ax = new_figure(11, 5.6)
    for status in STATUSES:
        _box(ax, *pos[status], 1.7, 0.75, status, fills[status], fontsize=11, alpha=0.6)
    # (from, to) -> (start offset, end offset, curvature, label offset)
    layout = {
        (None, "pending"): ((-0.4, 3.4), None, 0.0, (0.75, 0.2)),
        ("pending", "running"): ((0.85, 0.18), (-0.85, 0.18), -0.15, (0, 0.38)),
        ("running", "sleeping"): ((0.6, 0.38), (-0.85, 0.1), -0.1, (-0.55, 0.35)),
        ("sleeping", "running"): ((-0.85, -0.2), (0.85, 0.2), 0.0, (0.5, -0.32)),
        ("running", "waiting"): ((0.85, -0.2), (-0.85, 0.2), 0.0, (0.55, 0.32)),
        ("waiting", "running"): ((-0.85, -0.1), (0.6, -0.38), -0.1, (-0.25, -0.55)),
        ("running", "terminal"): ((-0.3, -0.38), (0.6, 0.38), 0.0, (1.25, -0.05)),
        ("pending", "terminal"): ((0.2, -0.38), (-0.85, 0.0), 0.25, (-1.45, -0.25)),
    }
    crash_labels = []
    for src, dst, label, _code, _line in TASK_TRANSITIONS:
        if src == "running" and dst == "running":
            x, y = pos["running"]
            ax.annotate("", xy=(x + 0.35, y + 0.38), xytext=(x - 0.35, y + 0.38),
                        arrowprops=dict(arrowstyle="-|>", lw=1.5, color=COLORS["black"],
                                        connectionstyle="arc3,rad=-1.6", shrinkA=0, shrinkB=0))
            ax.text(x, y + 1.1, label, ha="center", fontsize=9)
            continue
        if src == "running" and dst == "pending":
            crash_labels.append(label)
            continue
        start_off, end_off, rad, text_off = layout[(src, dst)]
        if src is None:
            start = start_off
            ax.plot(*start, marker="o", color=COLORS["black"], markersize=8)
        else:
            start = (pos[src][0] + start_off[0], pos[src][1] + start_off[1])
        end = (pos[dst][0] + (end_off or (-0.2, 0.38))[0], pos[dst][1] + (end_off or (-0.2, 0.38))[1])
        _arrow(ax, start, end, label, rad=rad, text_offset=text_off)
    # Both ways back to pending share one arrow: a dashed one, the crash's.
    _arrow(ax, (pos["running"][0] - 0.85, pos["running"][1] - 0.18),
           (pos["pending"][0] + 0.85, pos["pending"][1] - 0.18), rad=-0.15, linestyle="--",
           color=COLORS["red"])
    ax.text(3.0, 0.95, "back to pending, checkpoint kept\n(dashed):\n" + "\n".join(
        f"• {label.replace(chr(10), ' ')}" for label in crash_labels), ha="center", va="center",
        fontsize=8.5, color=COLORS["black"])
    from ..durable.store import OUTCOMES
    ax.text(pos["terminal"][0], pos["terminal"][1] - 0.6, "outcome: " + ", ".join(OUTCOMES),
            ha="center", va="center", fontsize=8.5)
    ax.text(9.2, -0.9, "A crash changes only running tasks:\nsleeping and waiting ones keep "
            "their state,\nand every task keeps its checkpoint.", ha="center", va="center",
            fontsize=8.5)
    ax.set_title("Task states of the durable runtime, and what moves a task between them")
    _diagram_axes(ax, (-0.9, 10.6), (-1.6, 4.3))
    return fig
