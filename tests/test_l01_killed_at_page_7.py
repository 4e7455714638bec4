"""Lesson 1, learning by doing: predictions about the kill at page 7, the transfer to page 10 with
the key on, and the common wrong statements, each judged from a real kill made just now."""

import dataclasses
import re
import signal

import pytest

from bughunt import probes
from bughunt.lab import judges, results
from bughunt.lab.lessons import l01_killed_at_page_7 as restart
from bughunt.lab.judges import EXERCISES, judge


# --- predict, then run ----------------------------------------------------------------------------

def test_prediction_1_1_counts_the_call_in_flight_not_only_the_six_pages_done():
    assert judge("1.1", 7)
    assert not judge("1.1", 6)           # the source text's count: the pages done before the kill
    right, feedback = EXERCISES["1.1"].judge(6)
    assert not right and "you predicted 6, measured 7" in feedback
    assert not judge("1.1", "7 calls")


def test_prediction_1_2_names_the_pages_filed_twice():
    assert judge("1.2", [3]) and judge("1.2", (3,))
    assert not judge("1.2", [3, 7]) and not judge("1.2", [])
    assert not judge("1.2", 3)            # a list of pages, not a count


def test_pages_filed_twice_reads_repeats_from_the_tracker():
    assert restart.pages_filed_twice([3, 3, 7, 10]) == [3]
    assert restart.pages_filed_twice([3, 7, 10]) == []
    assert restart.pages_filed_twice([10, 3, 10, 3, 3]) == [3, 10]


def test_practice_never_draws_a_kill_the_lesson_made_and_varies_with_the_seed():
    drawn = [restart.practice_problem(seed) for seed in range(50)]
    for p in drawn:
        config = restart.NO_CHECKPOINT.replace(store=p.drawn["design"],
                                               idempotency_key=p.drawn["idempotency_key"])
        assert (config, p.drawn["point"]) not in restart.LESSON_RUNS, p.drawn
        assert p.drawn["point"] != restart.PAGE_7
    assert len({(p.setting, p.question) for p in drawn[:20]}) >= 8
    assert {p.drawn["kind"] for p in drawn} == {"calls", "twice", "reports"}


def test_transfer_1_3_is_the_practice_problem_judged_by_a_live_kill():
    p = restart.TRANSFER
    assert p.drawn == restart.practice_problem(restart.TRANSFER_SEED).drawn
    assert p.drawn["point"] == "p10.after_model_call" and p.drawn["kind"] == "twice"
    truth = p.measure().value
    assert truth == (3, 7)           # filed by the first process, sent again by the second
    assert judge("1.3", [3, 7]) and judge("1.3", "3,7")
    assert not judge("1.3", [3, 7, 10]) and not judge("1.3", "none")


def test_the_story_and_the_losses_tables_refuse_rows_that_do_not_add_up():
    from bughunt.lab.claims import TableError, checked_table

    story = restart.page_7()
    df = story.summary().df.copy()
    df.loc["both", "model calls paid"] += 1
    with pytest.raises(TableError, match="'both'.*'model calls paid'"):
        checked_table(df, "broken story", restart.STORY_INVARIANTS)
    losses = restart.losses_table({"no checkpoint, no key": story}).df.copy()
    losses["of which the call in flight"] = 0
    with pytest.raises(TableError, match="does not add up"):
        checked_table(losses, "broken losses", restart.LOSS_INVARIANTS)


def test_predictions_are_judged_from_the_measurement_not_a_stored_answer(monkeypatch):
    real = results.point(restart.NO_CHECKPOINT, restart.PAGE_7)
    fake = dataclasses.replace(real, redone_model_calls=4, tracker_pages=[3, 7, 7, 10])
    monkeypatch.setattr(results, "point", lambda config, spec: fake)
    assert judge("1.1", 4) and not judge("1.1", 7)
    assert judge("1.2", [7])


# --- common wrong statements ----------------------------------------------------------------------

def test_sigterm_lets_every_clean_up_step_run_and_sigkill_lets_none():
    assert probes.cleanup_after(signal.SIGTERM) == list(probes.CLEANUP_STEPS)
    assert probes.cleanup_after(signal.SIGKILL) == []


@pytest.mark.parametrize("id", ["Q1.1", "Q1.2", "Q1.3"])
def test_lesson_1_statements_are_false_by_measurement_and_say_why(id):
    right, feedback = EXERCISES[id].judge(False)
    assert right, feedback
    assert not EXERCISES[id].judge(True)[0]
    assert feedback.startswith("The statement is false. Measured") and re.search(r"\d", feedback)
    assert id in judges.STATEMENTS


def test_q1_2_says_what_ran_after_each_signal():
    _, feedback = EXERCISES["Q1.2"].judge(False)
    assert "after SIGTERM, 3 of 3 ran" in feedback and "after SIGKILL, 0 of 3 ran" in feedback


def test_q1_3_verdict_follows_the_measurement(monkeypatch):
    """If a key-on restart paid nothing again, "the key makes it free" would be judged true."""
    real = results.point(restart.WITH_KEY, restart.PAGE_7)
    monkeypatch.setattr(results, "point",
                        lambda config, spec: dataclasses.replace(real, redone_model_calls=0))
    assert judge("Q1.3", True)
