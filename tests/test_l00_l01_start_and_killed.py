"""Lessons 0 and 1: the tour of a clean run, and the kill at page 7 told from the outside."""

import pytest
from matplotlib.figure import Figure

from bughunt.config import RunConfig
from bughunt.lab.lessons import l01_killed_at_page_7 as restart
from bughunt.lab.lessons import l00_start_here as tour
from bughunt.lab.judges import judge


def test_crash_point_map_has_every_point_of_the_scheme():
    assert int(tour.crash_point_table().count().sum()) == 54
    assert int(tour.crash_point_table(RunConfig(intent=False)).count().sum()) == 51
    fig = tour.plot_crash_map()
    assert isinstance(fig, Figure) and "54 crash points" in fig.axes[0].get_title()


def test_clean_run_leaves_fifteen_events_twelve_calls_three_reports():
    run = tour.inspect_clean_run()
    assert len(run.events) == 15 and len(run.bill) == 12 and list(run.reports.page) == [3, 7, 10]
    assert [name for name, _ in run.files] == ["bill.jsonl", "config.json", "events.jsonl",
                                               "run.lock", "tracker.db"]


def test_environment_checks_pass_here():
    env = tour.environment()
    assert env.ok.all(), env[~env.ok]


def test_killed_at_page_7_pays_seven_calls_again_and_files_page_3_twice():
    story = restart.page_7()
    assert story.killed_by == 9
    assert story.losses() == {"redone model calls": 7, "of which pages done before the kill": 6,
                              "of which the call in flight": 1, "duplicate reports": 1,
                              "pages reported twice": [3]}
    summary = story.summary().df
    assert summary.loc["both", "model calls paid"] == 19
    assert isinstance(restart.plot_restart_timeline(story), Figure)


def test_timeline_counts_steps_not_milliseconds():
    """The x axis is the step count: each billed call sits on its page's after_model_call step,
    each report on its after_submit step, and the kill between the two processes' steps."""
    story = restart.page_7()
    steps = restart.steps(story)
    run1 = steps[steps.run == 1]
    assert list(run1.step) == list(range(1, len(run1) + 1))
    assert run1.iloc[-1]["label"] == "after_model_call" and run1.iloc[-1]["page"] == 7
    calls = restart.place(story.bill, "t", steps)
    assert [steps.set_index("step").loc[x, "label"] for x in calls] == ["after_model_call"] * 19
    filed = restart.place(story.reports, "filed_at", steps)
    at = steps.set_index("step").loc[filed]
    assert list(at.label) == ["after_submit"] * 4 and list(at.page) == [3, 3, 7, 10]
    ax = restart.plot_restart_timeline(story).axes[0]
    assert ax.get_xlabel().startswith("steps of the page loop")
    assert "ms" not in ax.get_xlabel()
    assert ax.get_xlim()[1] <= steps.step.max() + 1      # a step count, not a time in ms
    kill = [line for line in ax.lines if line.get_xdata()[0] == line.get_xdata()[-1]
            and line.get_color() == "#000000"]
    assert kill and kill[0].get_xdata()[0] == len(run1) + 1


def test_with_a_snapshot_and_a_key_only_the_call_in_flight_is_paid_again():
    story = restart.page_7(restart.NO_CHECKPOINT.replace(store="snapshot", idempotency_key=True))
    losses = story.losses()
    assert losses["redone model calls"] == 1 and losses["of which the call in flight"] == 1
    assert losses["duplicate reports"] == 0


def test_lesson_1_panel_draws_the_timeline_of_the_chosen_point():
    p = restart.panel(crash_point=11)
    p.run_point()
    assert len(p.point_out.outputs) == 1 and p.record.label == "after_submit"


def test_exercises_of_lessons_0_and_1_accept_the_truth_only():
    assert judge("0.1", 56) and not judge("0.1", 54)
    assert judge("1.1", 7) and not judge("1.1", 6)


def test_exercise_0_2_asks_for_a_site_the_page_does_not_show_and_counts_its_log():
    assert tour.LONG_SITE.pages == 20 and not tour.LONG_SITE.intent
    assert judge("0.2", 20) and not judge("0.2", 25) and not judge("0.2", 12)


def test_the_clean_run_table_refuses_events_that_are_neither_page_done_nor_intent():
    from bughunt.lab.claims import TableError, checked_table
    import pytest

    df = tour.clean_run_table().df.copy()
    assert int(df["events in the log"].iloc[0]) == 15
    df["events in the log"] = 16
    with pytest.raises(TableError, match="'events in the log' is 16"):
        checked_table(df, "broken", tour.CLEAN_RUN_INVARIANTS)


@pytest.mark.slow
def test_the_lesson_table_view_refuses_a_match_column_that_lies():
    from bughunt.lab.claims import TableError
    import pytest

    _, table = tour.lesson_overview()
    lying = table.copy()
    lying.loc[0, "lab"] = -1
    with pytest.raises(TableError, match="'match' is True"):
        tour.lesson_table_view(lying)
