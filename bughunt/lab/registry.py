"""The lessons, as the registry knows them: one module per lesson under `bughunt/lab/lessons/`, each
exporting one `Lesson` record. Everything that lists lessons reads it: the app's tabs
(`app.py`), the closing's links, lesson 0's table of lessons and every notebook's prev/next line
(written by `regen.py` where the source has a marker), the README's lesson table, the tests.

Adding a lesson is one module (`lessons/l13_topic.py` with its `LESSON`) and one notebook source
(`notebooks/src/13_topic.py`); `make regen NB=13` builds it and rewrites the links of the others.

    python -m bughunt.lab.registry           # the lessons, one line each
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
import textwrap
from dataclasses import dataclass
from typing import Callable

#: A lesson module's name: `l05_torn_writes` is lesson 5; the appendix is `appendix`.
MODULE_NAME = re.compile(r"^l(\d\d)_\w+$|^appendix$")
APPENDIX = 99                                   # its notebook: 99_appendix
#: What a heading calls a notebook that is not a numbered lesson.
#: Words that keep their case at the start of a title: they are commands.
COMMANDS = ("kill -9",)
KINDS = {"start": "BugHunt Recovery Lab", "lesson": None, "closing": "Closing",
         "appendix": "Appendix"}


@dataclass(frozen=True)
class Lesson:
    """One lesson: what the learner is told about it, where it is, and what it holds.

    Titles follow one rule: `title` is the notebook's heading after its kind ("Lesson 5 · Torn
    writes: what if the checkpoint itself is cut in half?"); `short_title` names it in every link
    and tab ("Lesson 5: torn writes", "5 · torn writes").
    """

    number: int                  # 0 to 13 in order; the appendix is 99 (its notebook's prefix)
    notebook: str                # the notebook's stem: notebooks/src/05_torn_writes.py
    title: str
    short_title: str
    question: str                # lesson 0's table: the question it answers
    teaches: str                 # the README's table: what it teaches
    objectives: tuple[str, ...] = ()      # "After this lesson you can ..."
    time_note: str = ""          # ", most of it writing your own store" (after the minutes)
    runs: str = "the notebook runs in under a minute"
    prerequisites: str = ""
    kind: str = "lesson"         # start | lesson | closing | appendix
    panel: Callable[[], object] | None = None   # its interactive panel, built on demand
    in_app: bool = True          # a tab of the app (`make app`) when it has a panel
    #: Its tab in the app when the notebook's panel needs the notebook (lesson 9 grades a file
    #: the learner wrote; its tab grades one of the notebook's steps instead).
    app_panel: Callable[[], object] | None = None
    exercises: tuple = ()        # its exercises and quiz items (`judges.defined_in(__name__)`)
    #: Findings of the lesson's own runs, each a sentence with a check over the run's results,
    #: rendered in the notebook (issue 21). Room for them; none are declared yet.
    claims: tuple = ()
    #: A seeded problem generator, `practice(seed)`: a configuration the lesson did not run and a
    #: question about it (issue 21). None yet.
    practice: Callable[[int], object] | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"lesson {self.number}: kind {self.kind!r} is not one of "
                             f"{', '.join(KINDS)}")
        if not self.notebook.startswith(f"{self.number:02d}_"):
            raise ValueError(f"lesson {self.number}: its notebook {self.notebook!r} must start "
                             f"with {self.number:02d}_")

    @property
    def workload(self) -> "Workload":
        """What a learner does in this lesson, counted from its notebook source."""
        return workload_of(self.notebook)

    @property
    def minutes(self) -> int:
        """The estimated time, by the one rule (`TIME_RULE`) applied to the lesson's content."""
        return self.workload.minutes

    @property
    def label(self) -> str:
        """How tables and tabs number it: "5", or "A" for the appendix."""
        return "A" if self.kind == "appendix" else str(self.number)

    @property
    def file(self) -> str:
        """The built notebook, as links name it: `05_torn_writes.ipynb`."""
        return f"{self.notebook}.ipynb"

    @property
    def heading(self) -> str:
        """The notebook's first line: "Lesson 5 · Torn writes: what if ...?"."""
        return f"{KINDS[self.kind] or f'Lesson {self.number}'} · {self.title}"

    @property
    def name(self) -> str:
        """The lesson in a link: "Lesson 5: torn writes", "Start here", "Appendix: ..."."""
        if self.kind == "start":
            return "Start here"
        if self.kind == "appendix":
            return f"Appendix: {self.short_title}"
        return f"Lesson {self.number}: {self.short_title}"

    @property
    def app_tab(self) -> Callable[[], object] | None:
        """What builds its tab in the app (`make app`), or None: it has no tab."""
        if self.app_panel is not None:
            return self.app_panel
        return self.panel if self.in_app else None

    @property
    def tab_title(self) -> str:
        """Its tab in the app: "5 · torn writes"."""
        return f"{self.label} · {self.short_title}"

    @property
    def quiz(self) -> tuple:
        """Its common wrong statements (quiz items "Q5.1", ...), in order."""
        return tuple(e for e in self.exercises if e.id.startswith("Q"))

    def link(self, text: str | None = None) -> str:
        return f"[{text or self.name}]({self.file})"


# --- finding the lessons ---------------------------------------------------------------------------

def _modules() -> dict[int | None, str]:
    """Lesson module names by the number their name gives (the appendix: None), not imported."""
    from . import lessons

    found: dict[int | None, str] = {}
    for info in pkgutil.iter_modules(lessons.__path__):
        m = MODULE_NAME.match(info.name)
        if m:
            found[int(m.group(1)) if m.group(1) else None] = info.name
    return found


def _load(name: str) -> Lesson:
    module = importlib.import_module(f"{__package__}.lessons.{name}")
    record = getattr(module, "LESSON", None)
    if not isinstance(record, Lesson):
        raise LookupError(f"bughunt/lab/lessons/{name}.py exports no LESSON = Lesson(...)")
    m = MODULE_NAME.match(name)
    want = int(m.group(1)) if m.group(1) else APPENDIX
    if record.number != want:
        raise ValueError(f"bughunt/lab/lessons/{name}.py: its name says lesson {want}, its "
                         f"record says {record.number}")
    return record


def lessons() -> tuple[Lesson, ...]:
    """Every lesson, in order (each module imported)."""
    found = sorted((_load(name) for name in _modules().values()), key=lambda r: r.number)
    for a, b in zip(found, found[1:]):
        if a.number == b.number:
            raise ValueError(f"two lessons are number {a.number}: {a.notebook}, {b.notebook}")
    return tuple(found)


def by_number(number: int) -> Lesson:
    """Lesson `number` (99: the appendix), importing only its module."""
    name = _modules().get(None if number == APPENDIX else number)
    if name is None:
        raise LookupError(f"no lesson {number} in bughunt/lab/lessons/")
    return _load(name)


def by_notebook(stem: str) -> Lesson:
    """The lesson whose notebook is `stem` ("05_torn_writes")."""
    number = int(stem[:2])
    found = by_number(number)
    if found.notebook != stem:
        raise LookupError(f"lesson {number}'s notebook is {found.notebook}, not {stem}")
    return found


# --- how long a lesson takes: one rule, applied to what the notebook holds ------------------------

#: The rule every lesson's estimated time follows, said where the times are given (lesson 0).
TIME_RULE = ("1 minute per 150 words of prose, 1 minute per code cell (read it, run it, read "
             "what it prints), 5 minutes per exercise or practice problem (predict, run, read the "
             "feedback), 2 minutes per true-or-false statement, 10 minutes for the interactive "
             "panel; the sum rounded up to 5 minutes")
WORDS_PER_MINUTE = 150
EXERCISE_CHECK = re.compile(r'^\s*check\("(Q?)\d+\.\d+"', re.M)


@dataclass(frozen=True)
class Workload:
    """What a learner does in a notebook: words to read, cells to run, exercises, statements."""

    words: int
    cells: int
    exercises: int
    statements: int
    panel: bool

    @property
    def minutes(self) -> int:
        raw = (self.words / WORDS_PER_MINUTE + self.cells + 5 * self.exercises
               + 2 * self.statements + (10 if self.panel else 0))
        return max(5, 5 * -(-int(raw + 0.999) // 5))

    def __str__(self) -> str:
        parts = [f"{self.words:,} words", f"{self.cells} code cells",
                 f"{self.exercises} exercise{'' if self.exercises == 1 else 's'}"]
        if self.statements:
            parts.append(f"{self.statements} true-or-false statement"
                         f"{'' if self.statements == 1 else 's'}")
        if self.panel:
            parts.append("a panel")
        return ", ".join(parts)


def _prose_words(markdown: str) -> int:
    text = MARKER_TEXT.sub(" ", markdown)
    text = re.sub(r"\]\([^)]*\)", "] ", text)             # a link's target is not read
    text = re.sub(r"[#*`>|_\\-]+", " ", text)
    return len(re.findall(r"\w[\w'’.,:;()/-]*", text))


MARKER_TEXT = re.compile(r"<!-- lesson: [\w-]+ -->")


def workload_of(notebook: str) -> Workload:
    """The workload of `notebooks/src/NOTEBOOK.py`: what its cells ask of a learner."""
    import jupytext

    from .regen import NOTEBOOKS

    nb = jupytext.read(NOTEBOOKS / "src" / f"{notebook}.py")
    words = cells = exercises = statements = 0
    panel = False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            words += _prose_words(cell.source)
        elif cell.cell_type == "code" and cell.source.strip():
            cells += 1
            panel |= "panel" in cell.metadata.get("tags", [])
            for quiz in EXERCISE_CHECK.findall(cell.source):
                statements += bool(quiz)
                exercises += not quiz
    return Workload(words, cells, exercises, statements, panel)


# --- what is written from the registry -----------------------------------------------------------

def nav_line(this: Lesson, every: tuple[Lesson, ...] | None = None) -> str:
    """The prev/next line at the top and bottom of a notebook."""
    every = every or lessons()
    at = [x.number for x in every].index(this.number)
    start = every[0]
    parts = []
    if at > 0:
        parts.append(every[at - 1].link(f"← {every[at - 1].name}"))
    if this is not start and at - 1 != 0:
        parts.append(start.link())
    parts.append("[Glossary](glossary.md)")
    if at + 1 < len(every):
        parts.append(every[at + 1].link(f"{every[at + 1].name} →"))
    return " · ".join(parts)


def about(this: Lesson) -> str:
    """A lesson's objectives, prerequisites and estimated time, as its notebook states them."""
    if not this.objectives:
        return ""
    noun = "lesson" if this.kind == "lesson" else "notebook"
    lines = [f"**Learning objectives.** After this {noun} you can", ""]
    lines += [_fill(f"- {o}", indent="  ") for o in this.objectives]
    rule = (f" (by the rule in {start_link('How-long-a-lesson-takes')}: {this.workload})"
            if this.kind != "start" else f" ({this.workload})")
    time = f"**Estimated time:** {this.minutes} minutes{this.time_note}{rule}; {this.runs}."
    lines += ["", _fill(f"**Prerequisites.** {this.prerequisites} {time}")]
    return "\n".join(lines)


def start_link(anchor: str) -> str:
    """A link to a section of the start notebook (its JupyterLab anchor)."""
    start = lessons()[0]
    return f"[{start.name}]({start.file}#{anchor})"


def time_rule() -> str:
    """The paragraph the start notebook gives the rule in, under its own heading."""
    return _fill(f"Every lesson's estimated time is counted from what its notebook holds, by one "
                 f"rule: {TIME_RULE}. A lesson's header says what it counted.")


def _fill(text: str, indent: str = "") -> str:
    """`text` wrapped to the notebooks' width, never breaking where the next line would start
    with something Markdown reads as a list or a heading ("-9 ...", "+ ", "1. ", "# ")."""
    kept = re.sub(r" (?=[-+*#>]|\d+\. )", "\0", text)
    wrapped = textwrap.fill(kept, 98, subsequent_indent=indent, break_on_hyphens=False)
    return wrapped.replace("\0", " ")


def sentence_case(title: str) -> str:
    """A short title as a table's entry: "Torn writes"; a command keeps its case ("kill -9 ...")."""
    return title if title.startswith(COMMANDS) else title[:1].upper() + title[1:]


def lessons_table(every: tuple[Lesson, ...] | None = None) -> str:
    """Lesson 0's table of lessons: every other notebook, its link, the question it answers."""
    rows = ["| | lesson | the question |", "|---|---|---|"]
    rows += [f"| {x.label} | {x.link(sentence_case(x.short_title))} | {x.question} |"
             for x in every or lessons() if x.kind != "start"]
    return "\n".join(rows)


def readme_table(every: tuple[Lesson, ...] | None = None) -> str:
    """The README's table: every notebook and what it teaches."""
    rows = ["| | notebook | what it teaches |", "|---|---|---|"]
    rows += [f"| {x.label} | `{x.notebook}` | {x.teaches} |" for x in every or lessons()]
    return "\n".join(rows)


def main() -> int:
    for x in lessons():
        parts = [f"{x.label:>2}  {x.notebook:<24} {x.short_title}"]
        if x.panel is not None:
            parts.append("panel" + ("" if x.in_app else " (not in the app)"))
        if x.exercises:
            parts.append(f"{len(x.exercises) - len(x.quiz)} exercises, {len(x.quiz)} quiz items")
        print(" · ".join(parts))
    return 0


if __name__ == "__main__":
    # Run as a script this file is a second module: list the lessons with the registry the
    # lesson modules import (its Lesson class is the one their records are made of).
    from bughunt.lab import registry as _registry

    sys.exit(_registry.main())
