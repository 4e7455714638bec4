"""Exercises with a check the learner can run, and solutions kept out of the way.

Each lesson module registers its exercises here. In a notebook:

    check("2.1", my_answer)     # feedback: right, or a hint
    solution("2.1")             # the worked answer, when you want it

Checks compute the right answer from the lab itself (a crash run, the crash-point scheme), never
from a number typed into this file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Exercise:
    id: str
    question: str
    judge: Callable[[object], tuple[bool, str]]   # answer -> (right?, feedback)
    solution: str


EXERCISES: dict[str, Exercise] = {}


def exercise(id: str, question: str, solution: str):
    """Register the decorated `judge(answer) -> (right, feedback)` as exercise `id`."""
    def register(judge):
        EXERCISES[id] = Exercise(id, question, judge, solution)
        return judge
    return register


def judge(id: str, answer) -> bool:
    """Whether `answer` to exercise `id` is right (for tests and graders; prints nothing)."""
    return EXERCISES[id].judge(answer)[0]


def check(id: str, answer) -> None:
    """Print feedback on `answer` to exercise `id`."""
    ex = EXERCISES[id]
    if answer is None:
        print(f"Exercise {id}: no answer yet. {ex.question}\n"
              f"Replace None with your answer and run the cell again.")
        return
    right, feedback = ex.judge(answer)
    print(f"Exercise {id}: {'right' if right else 'not yet'}. {feedback}")


def solution(id: str) -> None:
    """Print the worked solution of exercise `id`."""
    ex = EXERCISES[id]
    print(f"Exercise {id}. {ex.question}\n\n{ex.solution}")
