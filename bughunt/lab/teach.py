"""Learning by doing: the lab's own code on screen, predictions checked against measurements,
common wrong statements answered by live runs, and the lessons' conceptual diagrams.

Shared by every lesson. In a notebook:

    show_source(apply_event)                  # the lab's code, read from the package itself
    compare(prediction, measured)             # prediction vs measurement, with feedback
    quiz("Q4.1")                              # a statement to judge: True or False?
    check("Q4.1", answer)                     # why, from a measurement made just now

Predictions are judged robustly on a noisy machine: counts exactly, averages of counts within an
absolute tolerance, timings only by order of magnitude or ratio (`MAGNITUDE`, `within_factor`).
"""

from __future__ import annotations

import inspect
import math
import re
import textwrap
from dataclasses import dataclass
from typing import Callable

from .exercises import exercise
from .style import COLORS, new_figure

# --- the lab's code on screen ---------------------------------------------------------------------

#: What must never appear in code shown to a learner: the lab's test switches (planted bugs live
#: outside the code under test, as mutants) and paths of this machine.
TEST_HOOK = re.compile(r"\bbugs\b|plant", re.I)
MACHINE_PATH = re.compile(r"/tmp/|/home/|/root/|/Users/|/private/var/")


class Source:
    """Code shown in a notebook: Markdown with a Python fence (JupyterLab and GitHub highlight it);
    its plain-text form is the same code, so a terminal and nbval see exactly what is shown."""

    def __init__(self, title: str, code: str, note: str = "", language: str = "python"):
        self.title, self.code, self.note, self.language = title, code, note, language

    def _repr_markdown_(self) -> str:
        note = f"\n\n{self.note}" if self.note else ""
        return f"**{self.title}**{note}\n\n```{self.language}\n{self.code}\n```"

    def __repr__(self) -> str:
        return f"{self.title}\n\n{self.code}"


def qualified_name(obj) -> str:
    """`bughunt.events.apply_event`, `bughunt.worker.Agent.submit_report`: where to find it."""
    return f"{obj.__module__}.{obj.__qualname__}"


def _line_range(lines: list[str], spec) -> tuple[int, int]:
    """0-based [start, end) of `spec`: (first, last) 1-based line numbers, or (start text, end
    text): from the first line containing the start text to the next line containing the end
    text, both included."""
    first, last = spec
    if isinstance(first, str) and isinstance(last, str):
        try:
            start = next(i for i, line in enumerate(lines) if first in line)
            end = next(i for i in range(start, len(lines)) if last in lines[i])
        except StopIteration:
            raise ValueError(f"lines={spec!r}: no such lines in the source") from None
        return start, end + 1
    if isinstance(first, int) and isinstance(last, int) and 1 <= first <= last <= len(lines):
        return first - 1, last
    raise ValueError(f"lines={spec!r}: give (first, last) line numbers from 1 to {len(lines)}, "
                     f"or (start text, end text)")


def source_of(obj, *, lines=None) -> tuple[str, str]:
    """The code of `obj` as the package has it (dedented), optionally lines of it; and the range
    shown, in words ("" for all of it)."""
    code = textwrap.dedent(inspect.getsource(obj)).rstrip("\n")
    if lines is None:
        return code, ""
    all_lines = code.splitlines()
    start, end = _line_range(all_lines, lines)
    part = all_lines[start:end]
    indent = min((len(x) - len(x.lstrip()) for x in part if x.strip()), default=0)
    part = [x[indent:] for x in part]
    if start > 0:
        part.insert(0, "# ...")
    if end < len(all_lines):
        part.append("# ...")
    return "\n".join(part), f"lines {start + 1}-{end} of {len(all_lines)}"


def show_source(obj, *, lines=None, title: str | None = None, note: str = "") -> Source:
    """The lab's own code for `obj` (a function, method or class), read with `inspect` from the
    package the lab runs, so what the learner reads is what the experiment ran.

    `lines`: a part only, as (first, last) line numbers of the object's source, or as
    (start text, end text). Raises ValueError if the code shown holds a test switch or a path.
    """
    code, part = source_of(obj, lines=lines)
    name = qualified_name(obj)
    for pattern, what in ((TEST_HOOK, "a test switch"), (MACHINE_PATH, "a path of this machine")):
        if pattern.search(code):
            raise ValueError(f"{name}: its code holds {what} ({pattern.search(code).group()!r}); "
                             "the code a learner reads must not")
    heading = title or f"`{name}`" + (f" ({part})" if part else "")
    return Source(heading, code, note)


def show_code(code: str, title: str, note: str = "", language: str = "python") -> Source:
    """Code that is not the lab's (the source text's version, say), shown the same way;
    `language` names the fence ("typescript" for the second source text's runtime, "diff")."""
    return Source(title, textwrap.dedent(code).strip("\n"), note, language)


def worker_step(name: str):
    """The worker's function for one rule of the page loop, by name (`ask_model`, `visit_page`,
    `record_intent`, `submit_report`, `commit_page`, `run_page`): a function of `bughunt.worker`,
    or a method of its page loop (`Agent`). Lessons show the loop by these names."""
    from .. import worker

    found = getattr(worker, name, None)
    if found is None and hasattr(worker, "Agent"):
        found = getattr(worker.Agent, name, None)
    if not callable(found):
        raise LookupError(f"bughunt.worker has no function or Agent method named {name!r}")
    return found


# --- predict, then run --------------------------------------------------------------------------

@dataclass(frozen=True)
class Tolerance:
    """How close a prediction must be. Counts: exactly (the default). Averages of counts: within
    `absolute`. Timings and other noisy measurements: within a `factor` either way."""

    absolute: float = 0.0
    factor: float | None = None

    def accepts(self, predicted: float, measured: float) -> bool:
        if self.factor is not None:
            if predicted <= 0 or measured <= 0:
                return predicted == measured
            return max(predicted / measured, measured / predicted) <= self.factor
        return abs(predicted - measured) <= self.absolute + 1e-9

    def __str__(self) -> str:
        if self.factor is not None:
            return ("the same order of magnitude (within a factor of 10)" if self.factor == 10
                    else f"within a factor of {self.factor:g}")
        return f"within {self.absolute:g}" if self.absolute else "exactly"


EXACT = Tolerance()
MAGNITUDE = Tolerance(factor=10.0)


def within(amount: float) -> Tolerance:
    """Right if the prediction is within `amount` of the measurement (averages of counts)."""
    return Tolerance(absolute=amount)


def within_factor(factor: float) -> Tolerance:
    """Right if prediction and measurement differ by at most `factor` either way (timings)."""
    if not factor >= 1:
        raise ValueError(f"factor must be at least 1, got {factor!r}")
    return Tolerance(factor=float(factor))


@dataclass(frozen=True)
class Comparison:
    """A prediction beside its measurement. `right` is None when there was no prediction."""

    prediction: object
    measured: object
    right: bool | None
    text: str

    def __str__(self) -> str:
        return self.text

    def reply(self, said: str = "", hint: str = "") -> tuple[bool | None, str]:
        """An exercise's answer: the verdict, then `said` (what was measured, shown always), then
        `hint` (a question to think about, shown unless the prediction was right)."""
        return self.right, self.text + said + ("" if self.right else hint)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _norm_text(x: str) -> str:
    return x.strip().strip("'\"").strip().lower()


def _same(prediction, measured, tolerance: Tolerance) -> bool | None:
    """Whether `prediction` matches `measured`; None if it is not even the right kind of answer."""
    if isinstance(measured, bool):
        return prediction is measured if isinstance(prediction, bool) else None
    if _is_number(measured):
        return tolerance.accepts(float(prediction), float(measured)) if _is_number(prediction) \
            else None
    if isinstance(measured, str):
        return _norm_text(prediction) == _norm_text(measured) if isinstance(prediction, str) \
            else None
    if isinstance(measured, (list, tuple, set, frozenset)):
        if isinstance(prediction, str) or not isinstance(prediction, (list, tuple, set, frozenset)):
            return None
        norm = (lambda xs: sorted({_norm_text(x) if isinstance(x, str) else x for x in xs},
                                  key=repr))
        return norm(prediction) == norm(measured)
    return prediction == measured


def _kind(measured) -> str:
    if isinstance(measured, bool):
        return "True or False"
    if _is_number(measured):
        return "a number"
    if isinstance(measured, str):
        return "a word, in quotes"
    if isinstance(measured, (list, tuple, set, frozenset)):
        return "a list"
    return type(measured).__name__


def _show(x, unit: str) -> str:
    if _is_number(x) and not isinstance(x, int):
        x = f"{x:.3g}" if abs(x) < 0.01 or abs(x) >= 1000 else f"{x:.2f}".rstrip("0").rstrip(".")
    return f"{x} {unit}".rstrip() if unit and not isinstance(x, (list, tuple, set)) else f"{x}"


def assess(prediction, measured, *, tolerance: Tolerance | float | str = EXACT, what: str = "",
           unit: str = "") -> Comparison:
    """Judge `prediction` against `measured`.

    `tolerance`: EXACT (counts, names, True/False), a number (averages: within that much),
    "magnitude" or MAGNITUDE (timings: within a factor of 10), or `within_factor(f)`.
    Lists are compared as sets; words ignore case and surrounding quotes.
    """
    tol = (MAGNITUDE if tolerance == "magnitude" else EXACT if tolerance == "exact"
           else within(tolerance) if _is_number(tolerance) else tolerance)
    if not isinstance(tol, Tolerance):
        raise ValueError(f"tolerance: EXACT, a number, 'magnitude' or within_factor(f), "
                         f"got {tolerance!r}")
    label = f"{what}: " if what else ""
    if prediction is None:
        return Comparison(prediction, measured, None,
                          f"{label}no prediction yet; measured {_show(measured, unit)}. Next time, "
                          "write your prediction down before you run the experiment.")
    same = _same(prediction, measured, tol)
    said = f"{label}you predicted {_show(prediction, unit)}, measured {_show(measured, unit)}"
    if same is None:
        return Comparison(prediction, measured, False,
                          f"{said}. Answer with {_kind(measured)}.")
    if same:
        judged = "" if tol == EXACT else f" ({tol})"
        return Comparison(prediction, measured, True, f"{said}: right{judged}.")
    if _is_number(measured):
        gap = (f"off by a factor of {max(prediction / measured, measured / prediction):.1f}"
               if tol.factor is not None and prediction > 0 and measured > 0
               else f"off by {_show(abs(prediction - measured), unit)}")
        return Comparison(prediction, measured, False,
                          f"{said}: {gap} (judged {tol}). Where did your reasoning differ?")
    return Comparison(prediction, measured, False, f"{said}: not the same. Where did your "
                      "reasoning differ?")


def compare(prediction, measured, *, tolerance: Tolerance | float | str = EXACT, what: str = "",
            unit: str = "") -> None:
    """Print the prediction beside the measurement, with feedback (see `assess`)."""
    print(assess(prediction, measured, tolerance=tolerance, what=what, unit=unit).text)


# --- common wrong statements --------------------------------------------------------------------

@dataclass(frozen=True)
class Measured:
    """Whether a statement is true, decided by a measurement made just now, and what it showed."""

    truth: bool
    evidence: str


@dataclass(frozen=True)
class Statement:
    id: str
    text: str
    measure: Callable[[], Measured]


STATEMENTS: dict[str, Statement] = {}
QUIZ_ID = re.compile(r"^Q\d+\.\d+$")


def statement(id: str, text: str, solution: str):
    """Register the decorated `measure() -> Measured` as quiz item `id` ("Q4.1"): `quiz(id)`
    shows `text`, `check(id, True or False)` runs the measurement and explains the verdict."""
    if not QUIZ_ID.match(id):
        raise ValueError(f"quiz ids look like 'Q4.1' (Q, lesson, number), got {id!r}")

    def register(measure: Callable[[], Measured]):
        STATEMENTS[id] = Statement(id, text, measure)

        def judge(answer):
            if not isinstance(answer, bool):
                return False, "Answer True or False (without quotes)."
            m = measure()
            verdict = "true" if m.truth else "false"
            return answer is m.truth, f"The statement is {verdict}. {m.evidence}"

        exercise(id, f"True or false? \"{text}\"", solution)(judge)
        return measure
    return register


class Quiz:
    """One statement to judge, shown as Markdown."""

    def __init__(self, item: Statement):
        self.item = item

    def _repr_markdown_(self) -> str:
        var = f"answer_{self.item.id.lower().replace('.', '_')}"
        return (f"**{self.item.id} · True or false?** *\"{self.item.text}\"*\n\n"
                f"Set `{var}` to `True` or `False`, then run the check: it measures, then "
                "explains.")

    def __repr__(self) -> str:
        return f"{self.item.id} True or false? \"{self.item.text}\""


def quiz(id: str) -> Quiz:
    """Show quiz item `id`: a statement the learner judges True or False."""
    if id not in STATEMENTS:
        raise KeyError(f"no quiz item {id!r} (known: {', '.join(sorted(STATEMENTS))})")
    return Quiz(STATEMENTS[id])


# --- diagrams -----------------------------------------------------------------------------------

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
#: tests/test_teach.py checks each against the code it names.
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
