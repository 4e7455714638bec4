"""One outcome record: the lab's worker and every framework are judged by the same verdict words,
the same definition of correct, one summary and one way to a DataFrame (pure, no processes)."""

import dataclasses

import pytest

from bughunt.experiment import VERDICTS, CrashRun, Outcome, frame, summarize
from bughunt.frameworks.sweep import FrameworkRun

RIGHT = dict(duplicate_reports=0, lost_reports=0, three_way_check=True, rebuild_ok=True,
             disk_error=None, tracker_pages=[3, 7, 10], memory_findings=[3, 7, 10],
             final_state={"findings": [3, 7, 10], "tokens": 9, "pages_done": 12})


def lab_run(**wrong) -> CrashRun:
    return CrashRun(**{**RIGHT, **wrong}, crash_point="p3.after_submit", index=12, page=3,
                    label="after_submit", redone_model_calls=1, replayed_events=11)


def framework_run(**wrong) -> FrameworkRun:
    where = dict(framework="fake", mode="page", resume="load", idempotency_key=False,
                 latency_ms=0.0, repeat=0, point="submit.after#1", name="submit.after",
                 occurrence=1, order=9, page=3, kind="user", killed=True, redone_model_calls=1,
                 skipped_pages=0, memory_ok=True, disk_ok=True)
    return FrameworkRun(**{**RIGHT, **where, **wrong})


#: Each way a crash run can be wrong, the fields that make it so, and the word it gets.
WRONG = {
    "error": (dict(error="resume exited 1: boom"), "error"),
    "duplicate": (dict(duplicate_reports=1, tracker_pages=[3, 3, 7, 10], three_way_check=False),
                  "duplicate"),
    "lost": (dict(lost_reports=1, tracker_pages=[3, 7], three_way_check=False), "lost"),
    "rebuild differs": (dict(rebuild_ok=False, three_way_check=False), "rebuild fails"),
    "rebuild refused": (dict(disk_error="events.jsonl:4: damaged record", rebuild_ok=None,
                             three_way_check=False), "rebuild fails"),
    "tracker disagrees": (dict(memory_findings=[3, 7], three_way_check=False),
                          "tracker disagrees"),
}
#: Only a framework's sweep compares with a clean run's state, and can miss its point.
FRAMEWORK_ONLY = {
    "not reached": (dict(killed=False), "not reached"),
    "wrong state": (dict(memory_ok=False), "wrong state"),
    "rebuild not the clean run's": (dict(disk_ok=False), "rebuild fails"),
}


def test_a_right_run_is_correct_for_the_lab_and_for_a_framework():
    for run in (lab_run(), framework_run()):
        assert isinstance(run, Outcome)
        assert run.verdict == "correct" and run.correct and run.resumed_right


@pytest.mark.parametrize("way", WRONG)
def test_a_framework_run_wrong_in_each_way_gets_the_lab_s_word_for_it(way):
    fields, word = WRONG[way]
    lab, fw = lab_run(**fields), framework_run(**fields)
    assert lab.verdict == fw.verdict == word
    assert not lab.correct and not fw.correct


@pytest.mark.parametrize("way", FRAMEWORK_ONLY)
def test_what_only_a_framework_measures_is_judged_by_the_same_verdict(way):
    fields, word = FRAMEWORK_ONLY[way]
    run = framework_run(**fields)
    assert run.verdict == word and not run.correct and word in VERDICTS


def test_the_worst_fault_names_the_verdict_in_the_lab_s_order():
    everything = {**WRONG["duplicate"][0], **WRONG["lost"][0], "lost_reports": 1,
                  "rebuild_ok": False, "memory_ok": False}
    assert framework_run(**everything).verdict == "duplicate"
    assert framework_run(**everything, killed=False).verdict == "not reached"
    assert framework_run(**everything, error="x").verdict == "error"
    # best first: a figure's legend and a table's columns read from "correct" to "error"
    assert VERDICTS[0] == "correct" and VERDICTS[-1] == "error"
    assert set(VERDICTS) == {w for _, w in [*WRONG.values(), *FRAMEWORK_ONLY.values()]} | {
        "correct"}


def test_one_summary_and_one_frame_for_both_kinds_of_record():
    lab = [lab_run(), lab_run(**WRONG["duplicate"][0]), lab_run(**WRONG["rebuild differs"][0])]
    fws = [framework_run(), framework_run(**WRONG["duplicate"][0]),
           framework_run(**WRONG["rebuild differs"][0]), framework_run(killed=False),
           framework_run(memory_ok=False)]
    s, t = summarize(lab), summarize(fws)
    assert (s["crash_points"], s["duplicate_points"], s["rebuild_failures"],
            s["correct_runs"]) == (3, 1, 1, 1)
    assert (t["crash_points"], t["not_reached"], t["duplicate_points"], t["rebuild_failures"],
            t["wrong_memory"], t["correct_runs"]) == (4, 1, 1, 1, 1, 1)
    # what the lab's worker does not measure is said to be unmeasured, not zero
    assert s["wrong_memory"] is None and t["avg_replayed_events"] is None
    df = frame(fws)
    assert list(df["verdict"]) == [r.verdict for r in fws]
    assert summarize(df) == t == summarize(fws)
    for record in (lab[0], fws[0]):
        assert set(frame([record]).columns) >= {f.name for f in dataclasses.fields(Outcome)}


def test_a_summary_of_nothing_counts_nothing():
    s = summarize([])
    assert s["crash_points"] == s["correct_runs"] == s["errors"] == 0
    assert s["avg_redone_model_calls"] is None
