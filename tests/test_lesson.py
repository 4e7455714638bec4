"""The lesson's table reproduced by real crash+resume pairs, and the lab catching its own traps."""

import json

import pytest

from bughunt import experiment as ex
from bughunt.config import RunConfig

from conftest import bughunt

LESSON_KEYS = ["crash_points_no_intent", "crash_points_log", "redo_none", "redo_snapshot",
               "replay_log_avg", "replay_log_max", "replay_snap4_avg", "replay_snap4_max",
               "duplicate_points_no_key", "log_runs_correct"]


@pytest.fixture(scope="module")
def lesson():
    return ex.lesson()


def by_sweep(lesson, tag):
    return [r for r in lesson["records"] if r.sweep == tag]


@pytest.mark.slow
def test_lesson_table_is_reproduced_exactly(lesson):
    assert lesson["figures"] == {
        "crash_points_no_intent": 51, "crash_points_log": 54, "redo_none": 6.51,
        "redo_snapshot": 0.76, "replay_log_avg": 7.26, "replay_log_max": 15,
        "replay_snap4_avg": 1.98, "replay_snap4_max": 4, "duplicate_points_no_key": 6,
        "log_runs_correct": 54}


@pytest.mark.slow
def test_every_crash_run_was_really_killed_and_resumed(lesson):
    assert lesson["pairs"] == 51 + 51 + 54 + 54 + 54
    assert [r for r in lesson["records"] if r.error] == []


def test_safe_configuration_has_no_duplicate_no_loss_no_disagreement_at_any_point(lesson):
    records = by_sweep(lesson, "log")
    assert len(records) == 54
    for r in records:
        assert (r.duplicate_reports, r.lost_reports, r.three_way_check) == (0, 0, True), r


def test_duplicates_without_key_fall_exactly_in_the_danger_window(lesson):
    dup = [(r.page, r.label) for r in by_sweep(lesson, "snapshot") if r.duplicate_reports]
    assert dup == [(p, label) for p in (3, 7, 10) for label in ("after_submit", "mid_commit")]


def test_no_newline_sweep_fails_the_rebuild_at_its_mid_commit_points_and_nowhere_else(lesson):
    records = by_sweep(lesson, "log_no_newline")
    failing = [r.label for r in records if not r.three_way_check]
    assert failing == ["mid_commit"] * 12
    for r in records:       # the resumed run itself is right every time, as the lesson says
        assert r.duplicate_reports == r.lost_reports == 0
        assert r.tracker_pages == sorted(r.memory_findings)
    # The lesson's reader (no sequence numbers) misses the 3 bug pages, where the lost record
    # is a repeated intent.
    assert lesson["no_newline"]["lesson_reader_failures"] == 9


def test_snapshot_per_page_with_keys_on_is_safe_at_every_point():
    records = ex.sweep_records(RunConfig(store="snapshot", intent=False, idempotency_key=True))
    assert len(records) == 51
    assert all(r.correct for r in records), [r for r in records if not r.correct]


def test_torn_log_with_newline_repair_recovers_at_every_point():
    records = ex.sweep_records(RunConfig(store="log", write_mode="torn"))
    assert all(r.correct for r in records)
    skipped = [r.label for r in records if r.torn_lines_skipped]
    assert skipped == ["mid_commit"] * 12


def test_pending_abort_is_at_most_once():
    config = RunConfig(store="log", intent=True, pending="abort")
    by_label = {r.label: r for r in ex.sweep_records(
        config, points=["p3.after_intent", "p3.after_submit"])}
    not_filed, filed = by_label["after_intent"], by_label["after_submit"]
    assert not_filed.aborted_pages == [3] and not_filed.lost_reports == 1
    assert filed.aborted_pages == [3] and filed.tracker_pages == [3, 7, 10]
    assert not filed.three_way_check   # the tracker has a report the agent gave up on
    assert not_filed.verdict == "lost" and filed.verdict == "tracker disagrees"


def test_operation_granularity_redoes_only_the_call_in_flight():
    records = ex.sweep_records(RunConfig(store="snapshot", granularity="op", intent=False,
                                         idempotency_key=False))
    redone = {r.label for r in records if r.redone_model_calls}
    assert redone == {"after_model_call"}
    assert ex.summarize(records)["avg_redone_model_calls"] == round(12 / 51, 4)
    assert {r.label for r in records if r.duplicate_reports} == {"after_submit"}


@pytest.mark.slow
def test_lesson_json_prints_exactly_the_lessons_keys(tmp_path):
    proc = bughunt("lesson", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert sorted(got) == sorted(LESSON_KEYS)
    assert got == ex.LESSON_FIGURES


def test_sweep_json_has_summary_and_points(tmp_path):
    proc = bughunt("sweep", "--store", "none", "--intent", "off", "--points",
                   "p1.after_model_call,51", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["summary"]["crash_points"] == 2
    assert [p["crash_point"] for p in out["points"]] == ["p1.after_model_call",
                                                         "p12.after_commit"]
    assert [p["redone_model_calls"] for p in out["points"]] == [1, 12]
    assert set(out["points"][0]) >= {"crash_point", "index", "redone_model_calls",
                                     "replayed_events", "duplicate_reports", "lost_reports",
                                     "three_way_check"}


def test_work_dir_that_is_not_empty_is_refused(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    proc = bughunt("sweep", "--points", "1", "--work-dir", str(tmp_path))
    assert proc.returncode == 2 and "not empty" in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


@pytest.mark.slow
def test_kill_random_counts_agree_with_its_runs_and_bound_the_rate_over_kills_in_the_loop():
    result = ex.kill_random(RunConfig(store="snapshot", intent=False, idempotency_key=False),
                            tries=6, seed=1)
    runs = result["runs"]
    assert len(runs) == 6 and all(r["resume_exit"] == 0 for r in runs)
    assert result["real_kills"] == sum(r["killed"] for r in runs)
    assert result["kills_in_page_loop"] == sum(r["in_page_loop"] for r in runs)
    assert result["duplicates_hit"] == sum(r["killed"] and r["duplicate_reports"] > 0
                                           for r in runs)
    assert all(r["landed"] == "finished first" for r in runs if not r["killed"])
    assert all(0 <= r["delay_ms"] <= result["run_life_ms"] for r in runs)
    loop = result["kills_in_page_loop"]
    assert result["rule_of_three_bound"] == (3 / loop if loop else None)
    assert ex.rule_of_three(39) == pytest.approx(0.0769, abs=1e-4)


# --- random kills land in the run's life, and say where ----------------------------------------

def test_where_it_landed_names_the_last_point_the_trace_reached():
    from bughunt.experiment import where_it_landed
    trace = [{"label": "ready", "page": 1}, {"label": "start", "page": 1},
             {"label": "after_model_call", "page": 1}, {"label": "after_visit", "page": 1}]
    bill = [{"page": 1}]
    assert where_it_landed(trace, bill, killed=True) == "p1.after_visit"
    assert where_it_landed(trace, bill + [{"page": 2}], killed=True) == "p2.waiting_for_model"
    assert where_it_landed(trace[:2], [], killed=True) == "before page 1"
    assert where_it_landed(trace[:2], bill, killed=True) == "p1.waiting_for_model"
    assert where_it_landed(trace + [{"label": "end", "page": 1}], bill, killed=True) == \
        "after the last page"
    assert where_it_landed(trace, bill, killed=False) == "finished first"


@pytest.mark.slow
def test_a_kill_from_outside_halfway_through_the_life_lands_inside_the_page_loop():
    # Each answer takes 300 ms, so halfway through a 3-page run is page 2's wait for the model,
    # whatever the machine's load does to the few milliseconds of set-up around it.
    from bughunt.experiment import kill_random
    config = RunConfig(store="snapshot", intent=False, idempotency_key=False, pages=3)
    result = kill_random(config, at=[0.5], latency_ms=300, references=1)
    (run,) = result["runs"]
    assert run["killed"] and run["in_page_loop"]
    assert run["landed"] == "p2.waiting_for_model" and run["calls_before_kill"] == 2
    assert result["run_life_ms"] >= 900                 # ready -> end: three waits of 300 ms
    assert result["kills_in_page_loop"] == 1 and result["rule_of_three_bound"] == 3.0
    assert run["resume_exit"] == 0


def test_kill_random_refuses_fractions_outside_the_life():
    from bughunt.experiment import kill_random
    with pytest.raises(ValueError, match="fractions"):
        kill_random(RunConfig(pages=2), at=[1.5])
