"""Lesson 7's lab layer: the stories, the tables at each moment, the panel and the exercises."""

from matplotlib.figure import Figure

from bughunt.lab import durable_tasks as dt
from bughunt.lab.exercises import judge


def test_count_story_tables_show_running_then_pending_then_terminal():
    story = dt.count_story(3)
    assert story.printed == {"first": [1, 2, 3], "resume": [4, 5]}
    moments = {k: v.iloc[0] for k, v in story.moments.items()}
    assert (moments["after the crash"]["status"], moments["after the crash"]["restarts"]) == (
        "running", "—")
    assert (moments["after open"]["status"], moments["after open"]["restarts"]) == ("pending", 1)
    assert moments["after the finish"]["status"] == "terminal"


def test_read_only_proof_finds_the_bytes_unchanged_and_both_refusals():
    proof = dt.read_only_proof()
    assert proof["unchanged"] and proof["status seen"] == "running"
    assert [r.split(":")[0] for r in proof["refused"]] == ["commit", "resume"]


def test_close_is_not_counted_a_crash_is():
    df = dt.close_vs_crash()
    assert list(df["restarts"]) == [0, 1] and list(df["after the next open"]) == ["pending"] * 2


def test_restart_limit_story_ends_at_the_limit_and_unlimited_does_not():
    two = dt.restart_limit_story(2)
    assert list(two["exit"]) == ["SIGKILL", "SIGKILL", 0] and two.iloc[-1]["outcome"] == "restart_limit"
    never = dt.restart_limit_story(None, runs=4)
    assert list(never["exit"]) == ["SIGKILL"] * 4
    assert isinstance(dt.plot_restart_limits({"2": two, "none": never}), Figure)


def test_panel_runs_the_three_stories_with_the_chosen_settings():
    p = dt.panel()
    p.crash_tick.value, p.replay.value, p.limit.value = 4, "safe", 1
    results = p.run()
    assert results["count"].printed["first"][-1] == 4
    assert len(results["tool"].notes) == 2
    assert list(results["loop"]["exit"]) == ["SIGKILL", 0]
    assert p.progress.value == 3 and len(p.tool_out.outputs) > 0
    p.reset()
    assert p.crash_tick.value == 2 and p.count_out.outputs == ()


def test_exercises_7_accept_the_truth_only():
    assert judge("7.1", [1, 2, 3, 5]) and not judge("7.1", [1, 2, 3, 4, 5])
    assert judge("7.2", False) and not judge("7.2", True)
