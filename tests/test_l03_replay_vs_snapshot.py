"""Lesson 3's lab module: replay vs snapshot, measured on small real runs (4 pages, bug on page 3).

With intents on, 4 pages give 5 events (4 page_done + page 3's intent) and 18 crash points:
page 1 is points 1-4, page 2 points 5-8, page 3 points 9-14, page 4 points 15-18 (17 = mid_commit).
"""

import pytest
from matplotlib.figure import Figure

from bughunt.config import RunConfig
from bughunt.experiment import crash_point, replay_after_crash
from bughunt.lab.lessons import l03_replay_vs_snapshot as replay
from bughunt.lab.judges import judge
from bughunt.lab import results
from bughunt.lab.views import show_text_code
from bughunt.stores import records

LOG4 = RunConfig(store="log", intent=True, pages=4)
SNAP2 = LOG4.replace(snapshot_every=2)
SMALL_DESIGNS = {"pure log": LOG4, "snapshot every 2": SNAP2}


@pytest.fixture(autouse=True)
def fresh_caches():
    results.reset()
    yield
    results.reset()


@pytest.fixture(scope="module")
def small_sweeps():
    results.reset()
    return replay.replay_sweeps(SMALL_DESIGNS)


@pytest.fixture(scope="module")
def small_intervals():
    df = replay.replay_by_interval((0, 1, 2), base=LOG4)
    return df, replay.interval_table(df, base=LOG4)


def test_clean_event_log_has_one_page_done_per_page_and_an_intent_before_each_report():
    events = replay.clean_event_log(LOG4)
    assert list(events.index) == [1, 2, 3, 4, 5]
    assert list(events["type"]) == ["page_done", "page_done", "intent", "page_done", "page_done"]
    assert list(events["page"]) == [1, 2, 3, 3, 4]
    assert events.loc[3, "key"] == "bughunt:p03"


def test_pure_log_replays_everything_written_and_snapshots_cut_it(small_sweeps):
    table = replay.design_table(small_sweeps, SMALL_DESIGNS).df
    assert list(table["crash points"]) == [18, 18]
    assert table.loc["pure log", "max replayed"] == 5          # the whole log, at the very end
    assert table.loc["snapshot every 2", "max replayed"] == 2   # page 3's intent and page_done
    assert table.loc["snapshot every 2", "avg replayed"] < table.loc["pure log", "avg replayed"]
    assert list(table["correct runs"]) == [18, 18]
    assert table.loc["pure log", "lesson avg"] == replay.LESSON_BY_DESIGN["pure log"][0]
    assert "over 18 crash points" in replay.explain_replay_averages(small_sweeps)


def test_replay_sweep_counts_equal_a_read_only_recovery_after_the_same_crash(small_sweeps,
                                                                             tmp_path):
    point = crash_point(SNAP2, "p4.mid_commit")
    direct = replay_after_crash(SNAP2, point, tmp_path / "run").replayed_events
    row = small_sweeps[(small_sweeps["design"] == "snapshot every 2")
                       & (small_sweeps["crash_point"] == "p4.mid_commit")]
    assert int(row["replayed_events"].iloc[0]) == direct == 2


def test_smaller_interval_replays_less_and_writes_more_snapshots(small_intervals):
    table = small_intervals[1].df
    assert list(table.index) == [0, 1, 2]
    assert table.loc[0, "max replayed"] == 5
    assert table.loc[1, "max replayed"] == 1                   # only a bug page's intent is left
    assert table.loc[2, "max replayed"] == 2
    avg = table["avg replayed"]
    assert avg[1] < avg[2] < avg[0]
    assert list(table["snapshot writes"]) == [0, 4, 2]
    assert list(table["log appends"]) == [5, 5, 5]
    assert list(table["lesson avg"]) == ["-", "-", "-"]        # the lesson ran 12 pages


def test_snapshot_coverage_decodes_only_the_lines_after_the_log_offset():
    table = replay.snapshot_coverage(SNAP2, crash_point="p4.mid_commit")
    v = table["value"]
    assert v["crash point"] == "p4.mid_commit"
    assert v["events in the log"] == "4 (seq 1-4)"
    assert v["newest snapshot"] == "after page 2"
    assert v["snapshot covers"].startswith("events seq 1-2,")
    assert v["lines recovery decodes"].startswith("2 (after byte")
    assert v["events replayed"] == 2


def test_unusable_newest_snapshot_falls_back_to_the_whole_log_and_still_recovers():
    table = replay.damaged_snapshot(SNAP2, crash_point="p4.mid_commit")
    assert list(table.index) == ["intact", "cut in half", "one digit changed"]
    assert list(table["snapshot used"]) == [True, False, False]
    assert list(table["snapshot_fallback"]) == ["-", "log", "log"]
    assert list(table["replayed events"]) == [2, 4, 4]
    assert list(table["three-way check"]) == ["ok", "ok", "ok"]
    assert all(f == [3] for f in table["findings"])


def test_damage_helpers_make_a_torn_and_a_damaged_snapshot(tmp_path):
    record = records.encode({"format": 1, "state": {"tokens": 42, "seq": 3}, "log_offset": 10})
    torn, flipped = tmp_path / "torn.json", tmp_path / "flipped.json"
    torn.write_bytes(record)
    flipped.write_bytes(record)
    replay.cut_in_half(torn)
    replay.change_one_digit(flipped)
    with pytest.raises(records.Torn):
        records.decode(torn.read_bytes().rstrip(b"\n"))
    with pytest.raises(records.Damaged):                        # still JSON, wrong checksum
        records.decode(flipped.read_bytes().rstrip(b"\n"))
    assert b'"tokens":52' in flipped.read_bytes()


def test_lesson_reference_only_where_the_lesson_has_a_figure():
    assert replay.lesson_reference(RunConfig(store="log", intent=True)) == (7.26, "pure log")
    assert replay.lesson_reference(RunConfig(store="log", intent=True, snapshot_every=4)) == (
        1.98, "snapshot every 4")
    assert replay.lesson_reference(RunConfig(store="log", intent=True, snapshot_every=2)) is None
    assert replay.lesson_reference(RunConfig(store="log", intent=False)) is None
    assert replay.lesson_reference(LOG4) is None


def _text(fig: Figure) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in (ax.title, ax.xaxis.label, ax.yaxis.label)]


def test_plots_are_figures_with_titles_labels_and_lesson_references(small_sweeps,
                                                                   small_intervals):
    fig = replay.plot_replayed(small_sweeps)
    assert isinstance(fig, Figure) and fig.axes[0].get_title()
    assert all(ax.get_ylabel() == "replayed events\n(events)" for ax in fig.axes)
    assert "crash point" in fig.axes[-1].get_xlabel()
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(t.startswith("lesson (pure log): avg 7.26") for t in legend)
    fig = replay.plot_interval(small_intervals[1])
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert all(t for t in _text(fig))
    assert "snapshot interval N (pages)" in _text(fig)


def test_lesson_3_panel_builds_with_the_lesson_defaults():
    p = replay.panel()
    assert p.config == replay.DESIGNS["snapshot every 4"] and len(p.crash_point.options) == 54
    assert set(p.knobs) == {"snapshot_every", "write_mode", "intent", "fsync"}


def test_panel_slider_and_knob_rerun_the_crash_and_sweep_plots_replay():
    p = replay.panel(base=SNAP2, crash_point="p4.mid_commit")
    assert p.run_point().replayed_events == 2
    p.controls["snapshot_every"].value = 0                    # pure log: the knob re-runs the point
    assert p.config.snapshot_every == 0 and p.record.replayed_events == 4
    df = p.run()
    assert len(df) == 18 and int(df["replayed_events"].max()) == 5
    assert len(p.images()) == 1 and p.images()[0]
    assert "18 correct" in p.status.value
    p.controls["intent"].value = False           # 17 points; the slider stays at p4.mid_commit
    assert len(p.crash_point.options) == 17 and p.record.crash_point == "p4.mid_commit"
    assert p.record.index == 16 and p.point_note == ""
    assert p.record.replayed_events == 3                   # pages 1-3 done, no intents


def test_panel_plot_draws_replayed_events_with_the_lesson_line():
    import pandas as pd
    df = pd.DataFrame({"crash_point": ["p1.a", "p1.b", "p2.c"], "index": [1, 2, 3],
                       "page": [1, 1, 2], "label": ["a", "b", "c"],
                       "replayed_events": [0, 1, 2], "verdict": ["correct"] * 3})
    fig = replay.panel_plot(df, RunConfig(store="log", intent=True, snapshot_every=4), "p1.b")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "replayed events"
    assert any("source text: avg 1.98" in t.get_text() for t in ax.get_legend().get_texts())


def test_exercise_3_1_judge_measures_the_max_with_a_snapshot_every_5_pages():
    assert judge("3.1", 6)
    assert not judge("3.1", 5)


def test_exercise_3_2_judge_measures_the_replay_at_p7_after_submit():
    assert judge("3.2", 3)
    assert not judge("3.2", 8)


def test_the_source_texts_apply_event_is_the_code_shown_and_differs_only_where_the_lesson_says():
    shown = show_text_code("apply_event")
    assert "def apply_event(state, ev):" in shown.code
    table = replay.apply_event_versions()
    assert table.iloc[0, 0] == table.iloc[1, 0]          # same state from the clean log
    assert table.loc["source text"].iloc[1].startswith("ignores it")
    assert table.loc["lab"].iloc[1].startswith("raises ValueError")


def test_only_fsync_rename_and_directory_fsync_leave_the_new_file_after_a_power_cut():
    t = replay.power_cut_after_write().df
    lab = t.loc["lab: fsync, rename, fsync dir"]
    assert lab["disk states: old file"] == 0 and lab["disk states: empty or torn file"] == 0
    assert lab["disk states: new file"] > 0 and lab["fsyncs"] == 2
    assert t.loc["source text: fsync, rename", "disk states: old file"] > 0
    assert t.loc["source text: fsync, rename", "disk states: empty or torn file"] == 0
    assert t.loc["rename only", "disk states: empty or torn file"] > 0


def test_exercise_3_3_asks_what_the_source_texts_version_does_and_measures_it():
    assert replay.on_unknown_event(replay.text_apply_event()) == "only seq moved"
    assert replay.on_unknown_event(replay.apply_event) == "raise"
    assert judge("3.3", "only seq moved")
    assert not judge("3.3", "raise") and not judge("3.3", "unchanged")


def test_practice_never_draws_a_configuration_the_lesson_ran_and_varies_with_the_seed():
    drawn = [replay.practice_problem(seed) for seed in range(50)]
    for p in drawn:
        d = p.drawn
        config = replay.LOG.replace(pages=d["pages"], snapshot_every=d["snapshot_every"],
                                    intent=d["intent"])
        assert config not in replay.LESSON_CONFIGS_RUN, d
        assert d["pages"] not in (12, 20) and 1 <= d["snapshot_every"] < d["pages"]
    assert len({(p.setting, p.question) for p in drawn[:20]}) >= 8
    assert {p.drawn["kind"] for p in drawn} == {"max", "average", "point"}
    assert {p.drawn["intent"] for p in drawn} == {True, False}


def test_the_practice_answer_is_measured_by_real_kills():
    p = replay.practice_problem(22)                    # 5 pages, a snapshot every 4, the max
    assert p.drawn["kind"] == "max" and p.drawn["pages"] == 5
    answer = p.measure()
    assert answer.value == 4 and p.check(4)[0] and not p.check(3)[0]    # 1-3 and 3's intent


def test_the_verdict_columns_partition_the_crash_points(small_sweeps):
    from bughunt.lab.claims import TableError, checked_table

    df = replay.design_table(small_sweeps, SMALL_DESIGNS).df.copy()
    assert (df["correct runs"] + df["duplicate runs"] + df["other wrong runs"]
            == df["crash points"]).all()
    df.loc["pure log", "duplicate runs"] = 1
    with pytest.raises(TableError, match="'pure log'.*'crash points' is 18"):
        checked_table(df, "broken", replay.DESIGN_INVARIANTS)


def test_the_power_cut_table_refuses_states_that_are_counted_twice():
    from bughunt.lab.claims import TableError, checked_table

    df = replay.power_cut_after_write().df.copy()
    df.loc["rename only", "disk states: old file"] += 1
    with pytest.raises(TableError, match="'rename only'"):
        checked_table(df, "broken", replay.POWER_CUT_INVARIANTS)
