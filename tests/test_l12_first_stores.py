"""Lesson 12, the stores you would reach for first: its explorations, stored and live, its claims,
tables and exercises, and the library lines it links."""

from __future__ import annotations

import copy
import sys

import pytest

from bughunt.lab import results
from bughunt.lab.claims import TableError
from bughunt.lab.judges import find_exercise, judge
from bughunt.lab.lessons import l12_first_stores as L

WHY_NOT = L.why_not_live()
needs_strace = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


@pytest.fixture
def no_strace(monkeypatch):
    """A machine where strace cannot run: the lesson reads its stored results."""
    results.reset()
    monkeypatch.setattr(L, "why_not_live", lambda: "strace is not installed here (a test)")
    yield
    results.reset()


@pytest.fixture
def with_data(monkeypatch):
    """The lesson on a copy of its stored results that a test may break."""
    data = copy.deepcopy(L.stored())
    results.reset()
    monkeypatch.setattr(L, "why_not_live", lambda: "a test")
    monkeypatch.setattr(L, "stored", lambda: data)
    yield data
    results.reset()


@pytest.mark.slow
@needs_strace
@pytest.mark.parametrize("name", ["json-dump", "tinydb", "shelve", "sqlite-wal-full",
                                  "skeleton-fixed"])
def test_the_stored_results_are_what_a_live_run_finds(name):
    """The stored file is what a learner without strace reads: it must be this lesson's run."""
    assert L.explore_live(name) == L.stored()[name], (
        f"{L.STORED.name} is out of date: python -m bughunt.lab.lessons.l12_first_stores --store")


def test_the_stored_results_hold_every_exploration_the_lesson_and_its_exercises_read():
    data = L.stored()
    want = {*L.STORES, *L.FIXES.values(), "sqlite-wal-normal", *L.SKELETONS}
    assert set(data) == want
    assert all(rec["trace_complete"] and not rec["why_not"] for rec in data.values())
    text = L.STORED.read_text(encoding="utf-8")
    assert "/tmp/" not in text and "/root/" not in text and "/home/" not in text


def test_without_strace_the_lesson_says_why_and_every_claim_holds_on_the_stored_run(no_strace):
    said = L.where_from()
    assert said.startswith("Not explored here: strace is not installed here (a test).")
    assert L.STORED.name in said
    found = L.CLAIMS.check_all()
    assert len(found) >= 5 and [f.key for f in found if not f.holds] == []
    assert L.stores_table().df.loc[("TinyDB (JSONStorage)", "kill -9"), "unreadable"] == 4


def test_without_strace_your_own_code_is_refused_with_the_reason(no_strace):
    from bughunt.explore import ExploreRefused

    with pytest.raises(ExploreRefused, match="cannot explore your code here: strace is not"):
        L.explore_your_agent(L.SKELETON_FIXED)
    right, said = find_exercise("12.4").judge(L.SKELETON_FIXED)
    assert right is False and "strace is not installed here" in said


def test_a_claim_fails_where_its_run_does_not_bear_it_out(with_data):
    """Mutant: TinyDB's unreadable kill -9 state moved to after its truncate."""
    v = next(v for v in with_data["tinydb"]["violations"] if v["model"] == "kill")
    v["cut"] += 2
    (found,) = L.CLAIMS.say("tinydb_old_tail")
    assert not found.holds and "On this run this did not hold" in found.markdown()


def test_a_store_that_held_breaks_the_claim_that_sqlite_loses_nothing(with_data):
    with_data["sqlite-wal-full"]["results"]["strict"]["violations"] = 1
    with_data["sqlite-wal-full"]["results"]["strict"]["by_class"]["lost"] = 1
    (found,) = L.CLAIMS.say("sqlite_full_holds")
    assert not found.holds


def test_a_table_whose_states_do_not_add_up_is_never_shown(with_data):
    """Mutant: a model's violating states counted past its states."""
    with_data["shelve"]["results"]["kill"]["violations"] = 43
    with pytest.raises(TableError, match="the four stores, explored.*shelve on dbm.dumb"):
        L.stores_table()
    with_data["shelve"]["results"]["kill"]["violations"] = 13
    with_data["shelve"]["results"]["kill"]["by_class"]["lost"] = 50
    with pytest.raises(TableError, match="'lost' is 50, more than 'states'"):
        L.stores_table()


def test_the_exercises_are_judged_from_the_explorations(no_strace):
    assert judge("12.1", 3) is True and judge("12.1", 4) is False
    assert judge("12.2", "power cut only") is True and judge("12.2", "both") is False
    assert judge("12.3", 5) is True and judge("12.3", 0) is False
    assert judge("Q12.1", False) is True and judge("Q12.2", False) is True


def test_the_variants_of_the_skeleton_change_only_its_save():
    for variant in (L.SKELETON_FIXED, L.SKELETON_FSYNC):
        assert variant != L.SKELETON
        assert variant.split("def load")[1] == L.SKELETON.split("def load")[1]
    assert "os.replace" in L.SKELETON_FIXED and "os.replace" not in L.SKELETON_FSYNC


@pytest.mark.slow
@needs_strace
def test_your_own_agent_is_judged_by_exploring_it():
    assert judge("12.4", L.SKELETON_FIXED) is True
    right, said = find_exercise("12.4").judge(L.SKELETON)
    assert right is False and "unreadable after operation 2 (create checkpoint.json)" in said
    right, said = find_exercise("12.4").judge(
        "print('ACK agent 1', flush=True)\nraise SystemExit(3)\n")
    assert right is False and "exited with status 3" in said


def test_the_library_lines_the_lesson_links_still_say_what_it_says():
    """TinyDB is pinned (4.9.0): its JSONStorage.write spans the linked lines 142-161."""
    assert L.library_line("tinydb/storages.py", "data: dict[str, dict[str, Any]]):") == 142
    assert L.library_line("tinydb/storages.py", "self._handle.truncate()") == 161
    if sys.version_info[:3] != (3, 11, 7):
        pytest.skip("the CPython links are to v3.11.7, the lab's runtime")
    assert L.library_line("dbm/dumb.py", "def _commit(self):") == 113
    assert L.library_line("dbm/dumb.py", "is a disaster (for the database)") == 221
    assert L.library_line("dbm/dumb.py", "def _update(self, flag):") == 93
    assert L.library_line("json/__init__.py", "fp.write(chunk)") == 180


def test_the_lesson_is_registered_between_lesson_11_and_the_closing():
    from bughunt.lab import registry

    numbers = [x.number for x in registry.lessons()]
    assert numbers[-3:] == [12, 13, registry.APPENDIX]
    assert registry.by_number(12) == L.LESSON and len(L.LESSON.quiz) == 2
    assert registry.by_number(13).kind == "closing"
