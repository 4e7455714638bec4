"""Judging what a learner answers: exercises with a check, predictions against measurements, and
common wrong statements answered by a run made just now.

In a notebook:

    check("2.1", my_answer)                   # feedback: right, or a hint
    solution("2.1")                           # the worked answer, when you want it
    compare(prediction, measured)             # prediction vs measurement, with feedback
    quiz("Q4.1")                              # a statement to judge: True or False?
    check("Q4.1", answer)                     # why, from a measurement made just now

Each lesson's module declares its own (`@exercise`, `@statement`), and its `Lesson` record lists
them; `check` finds the lesson of an id ("Q5.1", "5.1": lesson 5) in the registry. Checks compute
the right answer from the lab itself (a crash run, the crash-point scheme), never from a number
typed into a file. Predictions are judged robustly on a noisy machine: counts exactly, averages of
counts within an absolute tolerance, timings only by order of magnitude or ratio (`MAGNITUDE`,
`within_factor`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

# --- exercises -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Exercise:
    id: str
    question: str
    judge: Callable[[object], tuple[bool, str]]   # answer -> (right?, feedback)
    solution: str
    module: str = ""                              # the lesson module that declares it


EXERCISES: dict[str, Exercise] = {}
EXERCISE_ID = re.compile(r"^Q?(\d+)\.\d+$")


def lesson_number(id: str) -> int:
    """The lesson an exercise or quiz id belongs to: "5.2" and "Q5.2" are lesson 5's."""
    m = EXERCISE_ID.match(id)
    if not m:
        raise KeyError(f"{id!r} is not an exercise id (they look like '5.2', quiz items like "
                       "'Q5.2')")
    return int(m.group(1))


def exercise(id: str, question: str, solution: str, *, module: str | None = None):
    """Register the decorated `judge(answer) -> (right, feedback)` as exercise `id`."""
    lesson_number(id)

    def register(judge):
        EXERCISES[id] = Exercise(id, question, judge, solution, module or judge.__module__)
        return judge
    return register


def defined_in(module: str) -> tuple[Exercise, ...]:
    """The exercises and quiz items `module` declares, in the order it declares them: what its
    `Lesson` record lists."""
    return tuple(e for e in EXERCISES.values() if e.module == module)


def find_exercise(id: str) -> Exercise:
    """Exercise (or quiz item) `id`, its lesson's module imported if no cell has yet."""
    if id not in EXERCISES:
        from . import registry

        registry.by_number(lesson_number(id))
    if id not in EXERCISES:
        raise KeyError(f"no exercise {id!r} in lesson {lesson_number(id)}")
    return EXERCISES[id]


def judge(id: str, answer) -> bool:
    """Whether `answer` to exercise `id` is right (for tests and graders; prints nothing)."""
    return find_exercise(id).judge(answer)[0]


def check(id: str, answer) -> None:
    """Print feedback on `answer` to exercise `id`."""
    ex = find_exercise(id)
    if answer is None:
        print(f"Exercise {id}: no answer yet. {ex.question}\n"
              f"Replace None with your answer and run the cell again.")
        return
    right, feedback = ex.judge(answer)
    print(f"Exercise {id}: {'right' if right else 'not yet'}. {feedback}")


def solution(id: str) -> None:
    """Print the worked solution of exercise `id`."""
    ex = find_exercise(id)
    print(f"Exercise {id}. {ex.question}\n\n{ex.solution}")


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


def _finite_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _norm_text(x: str) -> str:
    return x.strip().strip("'\"").strip().lower()


def _same(prediction, measured, tolerance: Tolerance) -> bool | None:
    """Whether `prediction` matches `measured`; None if it is not even the right kind of answer."""
    if isinstance(measured, bool):
        return prediction is measured if isinstance(prediction, bool) else None
    if _finite_number(measured):
        return tolerance.accepts(float(prediction), float(measured)) if _finite_number(prediction) \
            else None
    if isinstance(measured, str):
        return _norm_text(prediction) == _norm_text(measured) if isinstance(prediction, str) \
            else None
    if isinstance(measured, tuple):          # several measurements at once, in their order
        if not isinstance(prediction, (tuple, list)) or len(prediction) != len(measured):
            return None
        each = [_same(p, m, tolerance) for p, m in zip(prediction, measured)]
        return None if None in each else all(each)
    if isinstance(measured, (list, set, frozenset)):
        if isinstance(prediction, str) or not isinstance(prediction, (list, tuple, set, frozenset)):
            return None
        norm = (lambda xs: sorted({_norm_text(x) if isinstance(x, str) else x for x in xs},
                                  key=repr))
        return norm(prediction) == norm(measured)
    return prediction == measured


def _kind_of_answer(measured) -> str:
    if isinstance(measured, bool):
        return "True or False"
    if isinstance(measured, tuple):
        return ("a pair of values, in the order asked, e.g. (2, 0)" if len(measured) == 2
                else f"{len(measured)} values in a tuple, in the order asked")
    if _finite_number(measured):
        return "a number"
    if isinstance(measured, str):
        return "a word, in quotes"
    if isinstance(measured, (list, set, frozenset)):
        return "a list"
    return type(measured).__name__


def _show(x, unit: str) -> str:
    if _finite_number(x) and not isinstance(x, int):
        x = f"{x:.3g}" if abs(x) < 0.01 or abs(x) >= 1000 else f"{x:.2f}".rstrip("0").rstrip(".")
    return f"{x} {unit}".rstrip() if unit and not isinstance(x, (list, tuple, set)) else f"{x}"


def assess(prediction, measured, *, tolerance: Tolerance | float | str = EXACT, what: str = "",
           unit: str = "") -> Comparison:
    """Judge `prediction` against `measured`.

    `tolerance`: EXACT (counts, names, True/False), a number (averages: within that much),
    "magnitude" or MAGNITUDE (timings: within a factor of 10), or `within_factor(f)`.
    Lists and sets are compared as sets; a tuple is several measurements asked for in an order,
    (calls, reports), compared one by one; words ignore case and surrounding quotes.
    """
    tol = (MAGNITUDE if tolerance == "magnitude" else EXACT if tolerance == "exact"
           else within(tolerance) if _finite_number(tolerance) else tolerance)
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
                          f"{said}. Answer with {_kind_of_answer(measured)}.")
    if same:
        judged = "" if tol == EXACT else f" ({tol})"
        return Comparison(prediction, measured, True, f"{said}: right{judged}.")
    if _finite_number(measured):
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

        exercise(id, f"True or false? \"{text}\"", solution, module=measure.__module__)(judge)
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
        find_exercise(id)
    if id not in STATEMENTS:
        raise KeyError(f"no quiz item {id!r} (known: {', '.join(sorted(STATEMENTS))})")
    return Quiz(STATEMENTS[id])

