"""Judging what a learner answers: predictions exactly or robustly, exercises and quiz items of
lessons 0-4 from live runs, each found through its lesson's record."""

import re

import pytest

from bughunt.lab import judges
from bughunt.lab.judges import EXERCISES, judge
from bughunt.lab.lessons import l04_danger_window as danger


# --- predict, then run --------------------------------------------------------------------------

def test_counts_are_judged_exactly():
    assert judges.assess(7, 7).right is True
    assert judges.assess(6, 7).right is False and "off by 1" in judges.assess(6, 7).text
    assert judges.assess(7.0, 7).right is True


def test_true_false_is_not_one_or_zero():
    assert judges.assess(True, True).right is True
    assert judges.assess(1, True).right is False and "True or False" in judges.assess(1, True).text


def test_words_ignore_case_and_quotes_and_lists_are_sets():
    assert judges.assess(" 'After_Visit' ", "after_visit").right is True
    assert judges.assess(["b", "a", "a"], ["a", "b"]).right is True
    assert judges.assess(["a"], ["a", "b"]).right is False
    assert judges.assess("a", ["a"]).right is False


def test_averages_are_judged_within_a_tolerance():
    assert judges.assess(0.75, 0.7647, tolerance=0.05).right is True
    assert judges.assess(0.7, 0.7647, tolerance=0.05).right is False
    assert judges.assess(0.7647, 0.76).right is False         # exact means exact


def test_timings_are_judged_by_order_of_magnitude_or_ratio():
    assert judges.assess(1.0, 0.23, tolerance="magnitude").right is True     # 4.3x: same order
    assert judges.assess(5.0, 0.23, tolerance="magnitude").right is False    # 22x
    assert judges.assess(0.5, 0.23, tolerance=judges.within_factor(3)).right is True
    assert judges.assess(0.8, 0.23, tolerance=judges.within_factor(3)).right is False
    assert "factor" in judges.assess(5.0, 0.23, tolerance="magnitude").text
    with pytest.raises(ValueError):
        judges.within_factor(0.5)


def test_no_prediction_shows_the_measurement_and_judges_nothing(capsys):
    assert judges.assess(None, 12).right is None
    judges.compare(None, 12, what="events")
    out = capsys.readouterr().out
    assert "no prediction yet" in out and "12" in out


# --- exercises of lessons 0-4 (judged from live runs; 2.3, 3.4 and 4.3 are drawn by seed) -------------------------------------------

@pytest.mark.parametrize("id, right, wrong", [
    ("0.2", 20, 25),
    ("2.3", 9.46, 0.76),
    ("3.3", "only seq moved", "raise"),
    ("3.4", 2, 25),
    ("4.3", 0, 6),
])
def test_practice_exercises_accept_the_measured_answer_and_refuse_a_wrong_one(id, right, wrong):
    assert judge(id, right) and not judge(id, wrong)
    assert not judge(id, [right])


def test_exercise_feedback_shows_prediction_beside_measurement():
    _, text = EXERCISES["4.3"].judge(3)
    assert "You answered 3; measured 0" in text


# --- common wrong statements --------------------------------------------------------------------

QUIZ_TRUTH = {"Q0.1": False, "Q0.2": False, "Q2.1": False, "Q2.2": False, "Q2.3": True,
              "Q3.1": False, "Q3.2": False, "Q3.3": False, "Q4.1": False, "Q4.2": False,
              "Q4.3": False}


def test_every_lesson_0_to_4_has_quiz_items_registered_as_exercises():
    assert set(QUIZ_TRUTH) <= set(judges.STATEMENTS)
    for id in judges.STATEMENTS:
        assert id in EXERCISES and judges.QUIZ_ID.match(id)
        assert f"*\"{judges.STATEMENTS[id].text}\"*" in judges.quiz(id)._repr_markdown_()


@pytest.mark.slow
@pytest.mark.parametrize("id", sorted(QUIZ_TRUTH))
def test_quiz_check_judges_by_a_measurement_and_explains_with_it(id):
    truth = QUIZ_TRUTH[id]
    right, feedback = EXERCISES[id].judge(truth)
    assert right, feedback
    assert not EXERCISES[id].judge(not truth)[0]
    assert re.search(r"Measured|Simulated", feedback) and re.search(r"\d", feedback)
    assert f"The statement is {'true' if truth else 'false'}." in feedback


def test_quiz_answers_must_be_true_or_false():
    right, feedback = EXERCISES["Q4.2"].judge("False")
    assert not right and "True or False" in feedback


def test_quiz_verdict_follows_the_measurement_not_a_stored_answer(monkeypatch):
    """If the sweep found no duplicate, "forty clean random kills mean no duplicates" would be
    judged true."""
    monkeypatch.setattr(danger, "duplicate_names", lambda config: [])
    right, feedback = EXERCISES["Q4.1"].judge(True)
    assert right and "finds 0 crash points" in feedback


def test_quiz_ids_must_not_clash_with_lesson_exercises():
    with pytest.raises(ValueError, match="Q4.1"):
        judges.statement("4.9", "x", "y")
