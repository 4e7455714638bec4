"""Lesson 5, torn writes: the lab module's experiments, figures, panel and exercises.

Sweeps use 4-page runs (18 crash points with intents; page 3 is the bug page) so they stay fast;
every crash is a real worker killed with SIGKILL and resumed by a second process.
"""

import json
import re

import pytest
from matplotlib.figure import Figure

from bughunt.lab.lessons import l05_torn_writes as torn
from bughunt.lab.judges import EXERCISES, judge
from bughunt.lab.views import plain_message
from bughunt.lab import results

SMALL = {mode: cfg.replace(pages=4) for mode, cfg in torn.MODE_CONFIGS.items()}
SMALL_SNAPSHOT = {mode: cfg.replace(pages=4) for mode, cfg in torn.SNAPSHOT_CONFIGS.items()}
MID_COMMITS_4_PAGES = [3, 7, 13, 17]     # one per page; 13 is on the bug page


@pytest.fixture(scope="module")
def sweep():
    return torn.sweep_write_modes(SMALL)


def mode(df, name):
    return df[df["write_mode"] == name]


# --- the sweep -----------------------------------------------------------------------------------

def test_atomic_mode_leaves_nothing_torn_and_recovers_at_every_point(sweep):
    d = mode(sweep, "atomic")
    assert len(d) == 18 and (d["verdict"] == "correct").all()
    assert d["torn_lines_skipped"].sum() == 0 and d["tails_repaired"].sum() == 0


def test_torn_mode_repairs_and_skips_one_fragment_per_mid_commit_kill(sweep):
    d = mode(sweep, "torn")
    assert (d["verdict"] == "correct").all()
    assert sorted(d[d["torn_lines_skipped"] > 0]["index"]) == MID_COMMITS_4_PAGES
    assert sorted(d[d["tails_repaired"] > 0]["index"]) == MID_COMMITS_4_PAGES
    assert d["glued_record"].isna().all()


def test_no_newline_resume_is_right_but_rebuild_fails_at_every_mid_commit(sweep):
    d = mode(sweep, "no-newline")
    assert d["resumed_right"].all()
    failing = d[d["verdict"] == "rebuild fails"]
    assert sorted(failing["index"]) == MID_COMMITS_4_PAGES
    assert set(failing["label"]) == {"mid_commit"}
    assert (d[d["verdict"] != "rebuild fails"]["verdict"] == "correct").all()


def test_source_text_reader_misses_the_glued_intent_on_the_bug_page_only(sweep):
    fails = torn.failing_points(sweep)
    assert list(fails.index) == [f"p{page}.mid_commit" for page in range(1, 5)]
    assert fails.loc["p3.mid_commit", "glued_record"] == "intent"
    assert fails.loc["p3.mid_commit", "source_text_reader"] == "agrees with memory"
    others = fails.drop(index="p3.mid_commit")
    assert set(others["glued_record"]) == {"page_done"}
    assert set(others["source_text_reader"]) == {"WRONG"}


def test_our_reader_refuses_a_gap_naming_file_and_line_but_not_a_missing_last_event(sweep):
    fails = torn.failing_points(sweep)
    for page in (1, 2, 3):
        assert fails.loc[f"p{page}.mid_commit", "our_reader"].startswith("events.jsonl:")
        assert "a record is missing" in fails.loc[f"p{page}.mid_commit", "our_reader"]
    assert fails.loc["p4.mid_commit", "our_reader"].startswith("accepted, but differs from memory")


def test_mode_table_counts_match_the_records(sweep):
    table = torn.mode_table(sweep).df
    assert list(table.index) == ["atomic", "torn", "no-newline"]
    assert table.loc["no-newline", "rebuild fails"] == 4
    assert table.loc["no-newline", "rebuild refused"] == 3
    assert table.loc["no-newline", "source text's reader wrong"] == 3
    assert table.loc["torn", "tails repaired"] == 4 and table.loc["torn", "correct"] == 18


def test_mode_table_refuses_verdicts_that_do_not_add_up(sweep):
    """The mutant: a verdict the table does not count (here every "rebuild fails" renamed to one
    it counts twice) must break the partition, and the table is never shown."""
    from bughunt.lab.claims import TableError, table_problems

    table = torn.mode_table(sweep)
    broken = table.df.copy()
    broken.loc["no-newline", "correct"] += 1
    from bughunt.lab.claims import Invariants
    inv = Invariants(total="crash points", parts=("correct", "rebuild fails", "another verdict"))
    assert table_problems(broken, inv) and not table_problems(table.df, inv)
    with pytest.raises(TableError, match="three write modes"):
        torn.summary_table([dict(r, **{"write mode": i}) for i, r in broken.iterrows()],
                           "lesson 5, three write modes", inv, index="write mode")


def test_sweep_is_cached_for_the_session_and_mode_records_reuses_it(sweep, monkeypatch):
    monkeypatch.setattr(torn, "run_crash_jobs", lambda *a, **k: pytest.fail("sweep ran again"))
    assert len(torn.sweep_write_modes(SMALL)) == len(sweep)
    assert len(torn.mode_records("torn", SMALL["torn"])) == 18


# --- one torn write, byte by byte ----------------------------------------------------------------

def test_newline_repair_isolates_the_fragment_and_is_idempotent():
    tail = torn.torn_tail(7, SMALL["torn"])
    assert tail["killed_by"] == 9 and tail["point"].label == "mid_commit"
    assert not tail["before"].endswith(b"\n") and tail["fragment"]
    assert tail["repaired"] == [True, False]
    assert tail["after"] == tail["before"] + b"\n"
    assert tail["torn_lines_skipped"] == 1 and tail["replayed_events"] == 1


def test_glued_record_is_the_parsable_suffix_of_a_broken_line(tmp_path):
    (tmp_path / "events.jsonl").write_text('{"t":"page_done","seq":1}\n'
                                           '{"page":2,"t":"p{"t":"intent","seq":2}\n')
    assert torn.glued_record(tmp_path) == "intent"
    (tmp_path / "events.jsonl").write_text('{"t":"page_done","seq":1}\n{"page":2,"t":"p\n')
    assert torn.glued_record(tmp_path) is None


def test_short_error_strips_the_run_directory():
    msg = "/tmp/bughunt-x1/sweep-007/events.jsonl:3: expected event seq 2, found 3"
    assert plain_message(msg) == "events.jsonl:3: expected event seq 2, found 3"


def test_no_newline_witnesses_tracker_and_memory_agree_while_disk_does_not():
    glued = torn.glued_log(7, SMALL["no-newline"])
    assert glued["killed_by"] == 9 and glued["glued_record"] == "page_done"
    line = glued["lines"][1]
    with pytest.raises(ValueError):
        json.loads(line)
    assert glued["refusal"].startswith("events.jsonl:3:")
    table = torn.witnesses(glued).df
    assert table["agrees with memory"].tolist() == ["yes", "yes", "NO", "NO"]
    assert glued["lesson_state"]["tokens"] < glued["memory"]["tokens"]


# --- snapshots -----------------------------------------------------------------------------------

def test_atomic_snapshot_kill_leaves_the_old_file_and_an_unrenamed_temp_file():
    snap = torn.snapshot_after_kill("atomic", page=2)
    assert set(snap["files"]) == {"snapshot.json", "snapshot.json.tmp"}
    assert snap["next_page"] == 2 and snap["snapshot_fallback"] is None


def test_torn_snapshot_is_caught_and_recovery_says_it_starts_fresh():
    snap = torn.snapshot_after_kill("torn", page=2)
    assert set(snap["files"]) == {"snapshot.json"}
    assert snap["next_page"] == 1 and snap["snapshot_fallback"] == "fresh"
    assert snap["notes"][0].startswith("snapshot.json: torn snapshot")


def test_snapshot_tears_cost_redone_calls_only_when_torn():
    table = torn.snapshot_table(torn.snapshot_tears(SMALL_SNAPSHOT)).df
    assert table.loc["atomic", "temp files removed"] == 4
    assert table.loc["atomic", "torn snapshot, fresh start"] == 0
    assert table.loc["torn", "torn snapshot, fresh start"] == 4
    assert table.loc["torn", "avg redone calls"] > table.loc["atomic", "avg redone calls"]
    assert (table["correct"] == 4).all()


# --- figures -------------------------------------------------------------------------------------

def labelled(fig):
    ax = fig.axes[0]
    return isinstance(fig, Figure) and ax.get_title() and ax.get_xlabel() and ax.get_ylabel()


def test_verdict_figure_has_one_labelled_row_per_write_mode(sweep):
    fig = torn.plot_write_mode_verdicts(sweep)
    assert labelled(fig)
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert [t.split("\n")[0] for t in ticks] == ["no-newline", "torn", "atomic"]
    assert "14 of 18 correct" in ticks[0]
    assert fig.legends and "rebuild fails" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_tail_figure_marks_the_added_newline_and_names_the_crash_point():
    fig = torn.plot_tail(torn.torn_tail(7, SMALL["torn"]))
    assert labelled(fig)
    assert fig.axes[0].get_title().endswith("(killed at p2.mid_commit)")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any(t.startswith("added by the repair") for t in texts)
    assert any(t.startswith("torn fragment:") for t in texts)


# --- panel ---------------------------------------------------------------------------------------

def test_panel_builds_with_the_lesson_trap_and_its_knobs():
    p = torn.panel()
    assert p.config == torn.MODE_CONFIGS["no-newline"] and len(p.crash_point.options) == 54
    assert p.knobs == ["store", "write_mode", "snapshot_every", "intent"]


def test_panel_sweep_shows_the_trap_and_the_repair_clears_it():
    results.reset()
    p = torn.panel(base=SMALL["no-newline"], crash_point="p2.mid_commit")
    p.run()
    assert "4 failing the three-way check" in p.status.value
    assert p.images()
    p.controls["write_mode"].value = "torn"
    assert p.record.label == "mid_commit" and "three-way check" in p.point_info.value
    p.run()
    assert "0 failing the three-way check" in p.status.value


# --- exercises -----------------------------------------------------------------------------------

def test_exercise_5_2_accepts_the_measured_refused_and_short_only():
    assert judge("5.2", (11, 1)) and judge("5.2", [11, 1])
    assert not judge("5.2", (12, 0))
    assert not judge("5.2", (12, "mid_commit"))
    assert not judge("5.2", 12)


def test_exercise_5_1_accepts_one_newline_and_one_skipped_line_only():
    assert judge("5.1", (1, 1))
    assert not judge("5.1", (2, 1))
    assert not judge("5.1", (1, 0))
    right, feedback = EXERCISES["5.1"].judge(7)
    assert not right and "pair" in feedback


def test_transfer_5_3_without_intents_the_lenient_reader_is_wrong_at_every_mid_commit():
    misses = torn.lenient_reader_misses(torn.NO_NEWLINE_NO_INTENTS.replace(pages=4))
    assert len(misses) == 4 and all(p.endswith(".mid_commit") for p in misses)


def test_transfer_5_3_is_the_generators_problem_judged_live():
    p = torn.TRANSFER
    assert p.seed == torn.TRANSFER_SEED
    truth = p.measure().value
    assert judge("5.3", truth) and not judge("5.3", truth + 1)


def test_practice_draws_only_logs_the_lesson_did_not_run():
    ran = set(torn.MODE_CONFIGS.values()) | set(torn.SNAPSHOT_CONFIGS.values()) | {
        torn.NO_NEWLINE_NO_INTENTS}
    for seed in range(50):
        config = torn.practice_problem(seed).drawn["config"]
        assert config not in ran and config.pages != 12, (seed, config)


def test_practice_answer_is_measured_live(monkeypatch):
    """The mutant: a stored answer would not follow the run; with the sweep patched to one
    failing point, the count is 1."""
    from types import SimpleNamespace

    seed = next(s for s in range(50) if torn.practice_problem(s).drawn["kind"] == "rebuild")
    p = torn.practice_problem(seed)
    monkeypatch.setattr(torn.results, "sweep_once", lambda config: [
        SimpleNamespace(crash_point="p1.mid_commit", verdict="rebuild fails",
                        lesson_reader_ok=False)])
    assert p.measure().value == 1


# --- common wrong statements ---------------------------------------------------------------------

def test_one_write_with_little_room_is_cut_short_and_leaves_a_torn_record():
    m = torn.one_write_with_little_room()
    assert m["returned"] == m["room"] == m["record"] // 2
    assert len(m["tail"]) == m["room"] and not m["ends_with_newline"]


@pytest.mark.parametrize("id", ["Q5.1", "Q5.2", "Q5.3"])
def test_lesson_5_statements_are_false_by_measurement_and_say_why(id):
    right, feedback = EXERCISES[id].judge(False)
    assert right, feedback
    assert not EXERCISES[id].judge(True)[0]
    assert feedback.startswith("The statement is false. Measured") and re.search(r"\d", feedback)


def test_q5_1_would_be_true_if_one_write_never_came_back_short(monkeypatch):
    monkeypatch.setattr(torn, "one_write_with_little_room",
                        lambda room=None: {"record": 90, "room": 45, "returned": 90, "error": None,
                                           "tail": b"x" * 90, "ends_with_newline": True})
    assert judge("Q5.1", True)
