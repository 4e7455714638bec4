"""The closing (lesson 13): its checklist is made of claims checked on the kernel's runs, each
item measured where its lesson measured it."""

from __future__ import annotations

import pandas as pd
import pytest

from bughunt.lab import results
from bughunt.lab.claims import TableError
from bughunt.lab.lessons import l13_closing as closing


@pytest.fixture(autouse=True)
def fresh_cache():
    results.reset()
    yield
    results.reset()


def test_the_closing_has_at_least_five_claims_and_every_checklist_item_names_one_or_says_why():
    keys = {c.key for c in closing.CLAIMS}
    assert len(keys) >= 5
    for do, key, n in closing.CHECKLIST:
        assert key in keys or "not rerun here" in key, do


def test_a_checklist_item_that_does_not_hold_says_so_in_its_own_row(monkeypatch):
    """Mutant: the crash loop stopped one restart early."""
    monkeypatch.setattr(closing, "crash_loop", lambda: {
        "limit": 5, "processes": 5, "outcome": "restart_limit", "report": "task_faulted"})
    (found,) = closing.CLAIMS.say("item_crash_loop")
    assert not found.holds
    monkeypatch.setattr(closing, "CHECKLIST", [("Count restarts.", "item_crash_loop", 7)])
    (row,) = closing.checklist().splitlines()[2:]
    assert row.startswith("| 1 | Count restarts. | a step that always dies")
    assert "**On this run this did not hold" in row and row.endswith("(07_durable_tasks.ipynb) |")


def test_the_crash_loop_runs_with_lesson_7s_default_limit(monkeypatch):
    from bughunt.durable import experiments
    from bughunt.durable.runtime import DEFAULT_RESTART_LIMIT

    seen = {}

    def story(limit, runs):
        seen["limit"] = limit
        return pd.DataFrame([{"outcome": "restart_limit", "report": "task_faulted"}] * (limit + 1))

    monkeypatch.setattr(experiments, "restart_limit_story", story)
    loop = closing.crash_loop()
    assert seen["limit"] == DEFAULT_RESTART_LIMIT == loop["limit"] == 5
    assert closing.CLAIMS["item_crash_loop"].on().holds


def test_the_power_cut_item_is_lesson_8s_sweep_with_its_settings(monkeypatch):
    from bughunt import beyond as B

    calls = []

    def sweep(variant, samples_per_cut, seed):
        calls.append((variant.name, samples_per_cut, seed))
        lost = 40 if variant.mutant else 0
        return [{"lost": lost}]

    monkeypatch.setattr(B, "power_loss_sweep", sweep)
    monkeypatch.setattr(B, "power_summary", lambda recs: {
        "states explored": 73, "states losing committed pages": recs[0]["lost"],
        "correct": 73 - recs[0]["lost"]})
    w = closing.without_dir_fsync()
    assert calls == [(v.name, 3, 0) for v in B.POWER_VARIANTS[:2]]
    assert w["without"]["losing"] == 40 and w["with"]["losing"] == 0
    assert "lesson 8's power-loss sweep" in closing.CLAIMS["item_dir_fsync"].on().markdown()
    assert [n for do, key, n in closing.CHECKLIST if key == "item_dir_fsync"] == [8]


def test_the_source_texts_table_is_checked_before_it_is_shown(monkeypatch):
    """Mutant: the lab's column empty in every row (a figure lost on the way)."""
    from bughunt import experiment

    table = pd.DataFrame({"figure": ["crash points"], "lab": [float("nan")]})
    monkeypatch.setattr(closing, "lesson_table", lambda result: table)
    with pytest.raises(TableError, match="the source text's table, live.*'lab' is empty"):
        closing.the_table({"figures": {}})
    assert experiment.lesson_table is not None


def test_exercise_13_1_asks_about_a_site_no_lesson_printed():
    from bughunt.lab.judges import find_exercise

    assert closing.SHORT_SITE not in (12, 20)
    assert "3-page site" in find_exercise("13.1").question
