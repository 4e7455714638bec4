"""Practice that cannot be read off: a new problem for a lesson, drawn from a seed, answered by a
live run (in the style of OSTEP's homework simulators).

    python -m bughunt practice --lesson 4 --seed 7              # a problem
    python -m bughunt practice --lesson 4 --seed 7 --answer 3   # right or wrong, measured now
    python -m bughunt practice --lesson 4 --seed 7 --solution   # the answer, as its last line

Each lesson's generator (`Lesson.practice(seed) -> Problem`) draws a configuration the lesson did
not run (store, write mode, key, intent, pending, pages, crash point, fault) and asks one question
about it whose answer is a number, a choice, yes or no, or a list of pages. Nothing about the
answer is stored: it is measured, by running the experiment, when the learner asks. A notebook
uses the same generator for its transfer questions, with a fixed seed.
"""

from __future__ import annotations

import json
import math
import random
import sys
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..config import OneSentenceParser, RunConfig, quoted
from .judges import EXACT, Tolerance, assess

# --- answer forms -------------------------------------------------------------------------------


class AnswerError(ValueError):
    """An answer that is not of the form the problem asks for."""


@dataclass(frozen=True)
class Form:
    """The form an answer takes: how it is asked for, read from text, and written back."""

    asks: str                                   # "a number", "yes or no", ...
    read: Callable[[str], object]
    write: Callable[[object], str]
    options: tuple[str, ...] = ()               # a choice's options

    def parse(self, answer) -> object:
        if isinstance(answer, bool) and self.asks != "yes or no":
            raise AnswerError(f"{quoted(answer)} is a yes or no, not {self.asks}")
        if not isinstance(answer, str):
            try:
                answer = self.write(answer)
            except (TypeError, ValueError):      # a list, a dict...: not this form at all
                raise AnswerError(f"{quoted(answer)} is not {self.asks}") from None
        return self.read(answer.strip())


def _read_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise AnswerError(f"{quoted(text)} is not a number") from None
    if not math.isfinite(value):
        raise AnswerError(f"{quoted(text)} is not a finite number")
    return int(value) if value.is_integer() else value


def _write_number(value) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() else f"{value:.2f}"


NUMBER = Form("a number", _read_number, _write_number)


def _read_yes_no(text: str) -> bool:
    word = text.lower()
    if word in ("yes", "y", "true"):
        return True
    if word in ("no", "n", "false"):
        return False
    raise AnswerError(f"{quoted(text)} is neither yes nor no")


YES_NO = Form("yes or no", _read_yes_no, lambda v: "yes" if v else "no")


def _read_pages(text: str) -> tuple[int, ...]:
    if text.lower() in ("", "none", "-"):
        return ()
    try:
        pages = sorted({int(p) for p in text.replace(" ", "").split(",")})
    except ValueError:
        raise AnswerError(f"{quoted(text)} is not a list of page numbers such as 3,7") from None
    return tuple(pages)


PAGES = Form("a list of page numbers, such as 3,7 (or none)", _read_pages,
             lambda v: ",".join(str(p) for p in sorted(v)) or "none")


def choice(options: Sequence[str]) -> Form:
    """One of `options`, by its text (case does not matter) or by its letter (a, b, c...)."""
    options = tuple(options)
    letters = "abcdefghij"[:len(options)]

    def read(text: str) -> str:
        t = text.strip().strip("'\"").lower()
        if len(t) == 1 and t in letters:
            return options[letters.index(t)]
        for o in options:
            if t == o.lower():
                return o
        listed = ", ".join(f"{letter}) {o}" for letter, o in zip(letters, options))
        raise AnswerError(f"{quoted(text)} is none of {listed}")

    asks = "one of " + ", ".join(f"{letter}) {o}" for letter, o in zip(letters, options))
    return Form(asks, read, str, options)


# --- problems -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Answer:
    """What a live run measured: the right answer, and a sentence saying what was measured."""

    value: object
    said: str


@dataclass(frozen=True)
class Problem:
    """One drawn problem: the setting, the question, and the run that answers it."""

    lesson: int
    seed: int
    setting: str                    # the configuration drawn, in the lesson's words
    question: str
    form: Form
    measure: Callable[[], Answer]   # runs the experiment: real processes, real kills
    hint: str                       # one hint, shown when an answer is wrong
    tolerance: Tolerance = EXACT
    unit: str = ""
    drawn: dict = field(default_factory=dict)   # what was drawn, as data (tests, --json)

    @property
    def title(self) -> str:
        return f"Lesson {self.lesson}, practice problem {self.seed}"

    def text(self) -> str:
        judged = "" if self.tolerance == EXACT else f" (judged {self.tolerance})"
        return (f"{self.title}\n\nSetting: {self.setting}\n\nQuestion: {self.question}\n\n"
                f"Answer with {self.form.asks}{judged}.")

    def _repr_markdown_(self) -> str:
        judged = "" if self.tolerance == EXACT else f" (judged {self.tolerance})"
        return (f"**{self.title}.** *Setting:* {self.setting}\n\n*Question:* {self.question} "
                f"Answer with {self.form.asks}{judged}.")

    def __repr__(self) -> str:
        return self.text()

    def check(self, answer) -> tuple[bool | None, str]:
        """Judge `answer` (its text, or a value) against a live run: (right, what to say). None
        for "no answer yet"; an answer of the wrong form raises AnswerError."""
        if answer is None:
            m = self.measure()
            return None, (f"No prediction yet: write it down before you run. Measured: "
                          f"{m.said}")
        predicted = self.form.parse(answer)
        m = self.measure()
        right = assess(predicted, m.value, tolerance=self.tolerance, unit=self.unit).right
        said = f"You answered {self.form.write(predicted)}; measured " \
               f"{self.form.write(m.value)}: {m.said}"
        return bool(right), said + ("" if right else f" Hint: {self.hint}")

    def solution(self) -> Answer:
        return self.measure()


def as_exercise(id: str, problem: Problem, module: str) -> Problem:
    """Make `problem` (a generator's, with a fixed seed) the notebook's exercise `id`: the
    notebook shows it, the learner writes a prediction, and `check(id, prediction)` judges it
    against a run made then. `module`: the lesson module declaring it (`__name__`). Returns the
    problem, to display."""
    from .judges import exercise

    def judge(answer):
        try:
            right, said = problem.check(answer)
        except AnswerError as e:
            return False, f"{e}: answer with {problem.form.asks}."
        return bool(right), said

    exercise(id, f"{problem.setting} {problem.question}",
             f"Measured when you ask: `python -m bughunt practice --lesson {problem.lesson} "
             f"--seed {problem.seed} --solution` runs the experiment and prints the answer. "
             f"Other seeds give other problems of the same kind.",
             module=module)(judge)
    return problem


def drawn(seed: int, lesson: int) -> random.Random:
    """The generator's random numbers for `seed` (one stream per lesson and seed)."""
    return random.Random(f"bughunt-practice:{lesson}:{seed}")


# --- command line -------------------------------------------------------------------------------

def problem(lesson: int, seed: int) -> Problem:
    """Lesson `lesson`'s problem for `seed`, from its generator in the registry."""
    from .registry import by_number as find

    record = find(lesson)
    if record.practice is None:
        raise LookupError(f"lesson {lesson} has no practice generator")
    return record.practice(seed)


def _as_data(value):
    """What `drawn` holds beyond plain JSON, as data (`json.dump`'s default): a configuration as
    its config.json says it, a path as text."""
    if isinstance(value, RunConfig):
        return value.to_json()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    from pathlib import PurePath
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"practice --json: {type(value).__name__} is not data")


def main(argv: list[str] | None = None) -> int:
    parser = OneSentenceParser(
        prog="python -m bughunt practice",
        description="A new problem for a lesson, drawn from a seed; answered by a live run.")
    parser.add_argument("--lesson", type=int, required=True, metavar="N")
    parser.add_argument("--seed", type=int, default=0, metavar="S")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--answer", metavar="X", help="your answer: judged against a live run")
    what.add_argument("--solution", action="store_true",
                      help="run the experiment and print the answer (its last line)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.seed < 0:
        parser.error(f"--seed: {args.seed} is negative; give 0 or more")
    try:
        p = problem(args.lesson, args.seed)
    except LookupError as e:
        parser.error(f"--lesson {args.lesson}: {e}")
    if args.answer is not None:
        try:
            right, said = p.check(args.answer)
        except AnswerError as e:
            parser.error(f"--answer: {e}; answer with {p.form.asks}")
        if args.json:
            json.dump({"lesson": p.lesson, "seed": p.seed, "right": right, "said": said},
                      sys.stdout)
            print()
        else:
            print(f"{'Right' if right else 'Not yet'}. {said}")
        return 0 if right else 1
    if args.solution:
        m = p.solution()
        if args.json:
            json.dump({"lesson": p.lesson, "seed": p.seed, "answer": p.form.write(m.value),
                       "said": m.said}, sys.stdout)
            print()
        else:
            print(m.said)
            print(p.form.write(m.value))
        return 0
    if args.json:
        json.dump({"lesson": p.lesson, "seed": p.seed, "setting": p.setting,
                   "question": p.question, "answer_with": p.form.asks, "drawn": p.drawn},
                  sys.stdout, default=_as_data)
        print()
    else:
        print(p.text())
        print(f"\nCheck: python -m bughunt practice --lesson {p.lesson} --seed {p.seed} "
              "--answer X")
    return 0
