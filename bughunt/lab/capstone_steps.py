"""Lesson 9's tab in the app (`make app`): pick one of the capstone's steps and grade it.

In the notebook the learner writes each step of the capstone as a file (`%%writefile
naive_store.py`, ...) and grades it by name. The app has no cells to write files with, so its tab
offers the notebook's own steps: they are read from lesson 9's notebook source (every
`%%writefile` cell whose docstring starts "Step N:"), so the tab shows what the notebook teaches,
step for step, whatever the notebook holds. A grade writes every step's file into a temporary
folder (a step may import an earlier one: `from naive_store import NaiveStore`), grades the picked
one there with `bughunt.grader` (the store's code runs behind `bughunt.boundary`, as the
notebook's grades do), and removes the folder.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import html
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..grader import Grade
from ..grader import grade as _grade
from . import results
from .lessons.l09_your_own_store import GradePanel
from .panel import Panel

#: A step's cell: `%%writefile FILE.py`, then the file, whose docstring says "Step N: what".
WRITEFILE = re.compile(r"^%%writefile\s+(\S+\.py)\s*\n")
STEP = re.compile(r"^Step (\d+): (.+)", re.S)


@dataclass(frozen=True)
class CapstoneStep:
    """One step of the capstone: its number, what it changes, its file and its store class."""

    number: int
    title: str                 # the docstring's words after "Step N: "
    file: str                  # naive_store.py
    class_name: str            # the last class the file defines: NaiveStore
    source: str

    @property
    def store(self) -> str:
        """The step as the notebook grades it: `naive_store.py:NaiveStore`."""
        return f"{self.file}:{self.class_name}"

    @property
    def label(self) -> str:
        return f"Step {self.number}: {self.title}"


def steps_of(notebook: str) -> tuple[CapstoneStep, ...]:
    """The steps of `notebooks/src/NOTEBOOK.py`, in their order, read from its `%%writefile`
    cells whose file's docstring starts "Step N:"."""
    import jupytext

    from .regen import NOTEBOOKS

    found = []
    for cell in jupytext.read(NOTEBOOKS / "src" / f"{notebook}.py").cells:
        m = WRITEFILE.match(cell.source) if cell.cell_type == "code" else None
        if not m:
            continue
        source = cell.source[m.end():]
        module = ast.parse(source)
        step = STEP.match(ast.get_docstring(module) or "")
        classes = [n.name for n in module.body if isinstance(n, ast.ClassDef)]
        if step and classes:
            found.append(CapstoneStep(int(step.group(1)), " ".join(step.group(2).split()),
                              m.group(1), classes[-1], source))
    return tuple(sorted(found, key=lambda s: s.number))


def grade_step(step: CapstoneStep, every: tuple[CapstoneStep, ...], **settings) -> Grade:
    """Grade `step` with the run's `settings` (idempotency_key, intent, pending), beside every
    other step's file; kept in the lab's results cache (by the files' text) until Reset."""
    def run() -> Grade:
        with tempfile.TemporaryDirectory(prefix="bughunt-capstone-steps-") as tmp:
            for s in every:
                (Path(tmp) / s.file).write_text(s.source, encoding="utf-8")
            return _grade(f"{tmp}/{step.store}", **settings)

    digest = hashlib.sha256("\0".join(s.file + "\0" + s.source for s in every).encode())
    key = ("capstone-step", digest.hexdigest(), step.store, tuple(sorted(settings.items())))
    # Shown as the notebook names it, not by its temporary folder.
    return dataclasses.replace(results.remember(key, run), store=step.store)


def listing(step: CapstoneStep) -> str:
    """The step's file as the tab shows it, above the grade (HTML: a listing that scrolls
    sideways, never cut inside a word; the lab's stylesheet)."""
    return (f"<p><b>{html.escape(step.file)}</b>, as lesson 9 writes it:</p>"
            f"<pre class='bughunt-listing'>{html.escape(step.source.rstrip())}</pre>")


# --- the tab -----------------------------------------------------------------------------------

class StepPanel(GradePanel):
    """Lesson 9's panel with a step picked instead of a file named: the step, the run's settings
    (idempotency key, intent, pending intent), Grade. The step's file is shown above the grade,
    and the grade is shown as the notebook's panel shows it."""

    title = "Grade a step of the capstone"
    labels = {"step": "step", **GradePanel.labels}

    def __init__(self, notebook: str):
        import ipywidgets as W

        self.steps = steps_of(notebook)
        if not self.steps:
            raise LookupError(f"notebooks/src/{notebook}.py has no step to grade (a "
                              "%%writefile cell whose docstring starts 'Step N:')")
        self.default_store = ""
        Panel.__init__(self)          # GradePanel's own names a file; here a step is picked
        self.run_button.icon = "check"
        self.last: Grade | None = None
        self.code = W.HTML(listing(self.step))

    def make_controls(self) -> dict:
        import ipywidgets as W

        controls = super().make_controls()
        controls.pop("store").close()
        picker = W.Dropdown(options=[(s.label, s.number) for s in self.steps],
                            value=self.steps[0].number, layout=W.Layout(width="640px"))
        return {"step": picker, **controls}

    @property
    def step(self) -> CapstoneStep:
        """The step picked."""
        return next(s for s in self.steps if s.number == self.controls["step"].value)

    def graded(self, settings: dict) -> Grade:
        step = next(s for s in self.steps if s.number == settings["step"])
        return grade_step(step, self.steps, idempotency_key=settings["key"],
                          intent=settings["intent"], pending=settings["pending"])

    def changed(self, name: str) -> None:
        if name == "step":
            self.code.value = listing(self.step)
        super().changed(name)

    def restore(self, name: str, value) -> None:
        super().restore(name, value)
        if name == "step":
            self.code.value = listing(self.step)

    def extra(self) -> list:
        return [self.code]

    def show(self):
        """The widget to display, nothing graded yet: a grade takes a while (the suite, then a
        worker killed at every crash point), so the learner picks the step first."""
        self.status.value = f"Pick a step, then press {self.run_label}."
        return self.widget()
